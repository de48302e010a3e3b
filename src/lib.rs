//! deepinfer-operator: runs DeepInfer (DeepSeek's offline inference engine) as a verified,
//! pinned, placed service on NVIDIA and Ascend clusters.
//!
//! `main.rs` only parses the command line and dispatches into these modules.
#![forbid(unsafe_code)]

pub mod acceptance;
pub mod api;
#[cfg(any(test, feature = "bench"))]
#[doc(hidden)]
pub mod bench;
pub mod checkpoint;
pub mod cli;
pub mod contract;
pub mod controller;
pub mod leader;
pub mod metrics;
pub mod telemetry;
