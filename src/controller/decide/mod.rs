//! Decide stage: pure functions from what a pass observed (and the previous status) to the
//! actions to take and each gate's outcome. Nothing here calls the API.

pub mod acceptance;
pub mod checkpoint;
pub mod entitlement;
pub mod fleet;
pub mod jobs;
pub mod memory;
pub mod references;
pub mod rejected;
pub mod retention;
pub mod rollout;
pub mod workers;
