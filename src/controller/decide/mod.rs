//! Decide stage: pure functions from what a pass observed (and the previous status) to the
//! actions to take and each gate's outcome. Nothing here calls the API.

pub mod entitlement;
pub mod rollout;
