#![forbid(unsafe_code)]

pub mod fixture_hub;
