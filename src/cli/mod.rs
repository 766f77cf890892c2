//! The `run` subcommand as a library, so tests can drive it: its flags ([`args`]), finding and
//! checking the cluster ([`cluster`]), logging ([`logging`]) and the process's life from start to
//! a clean exit ([`run`]), and the rendering of `status` ([`status`]). `main.rs` only parses and dispatches.

pub mod args;
pub mod cluster;
pub mod logging;
pub mod run;
pub mod status;

pub use args::{LogFormat, RunArgs};
pub use run::{OperatorContext, RunError, Settings};
