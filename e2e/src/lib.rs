#![forbid(unsafe_code)]
//! The test bed's tooling: the simulated node agent, test fixtures and the support library the
//! integration and end-to-end suites use.

pub mod audit;
pub mod faults;
pub mod fixture_hub;
pub mod forward_proxy;
pub mod harness;
pub mod monitor;
pub mod operator_process;
pub mod support;
