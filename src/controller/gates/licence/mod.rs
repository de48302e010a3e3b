//! The licence gate: whether the model's licence is accepted for this deployment, and each
//! serving pod's entitlement that follows from it.

pub mod entitlement;
