//! The subcommands as a library, so tests can drive them: `run`'s flags ([`args`]), finding and
//! checking the cluster ([`cluster`]), logging ([`logging`]), `run` itself ([`run`]: the
//! DatabaseCluster operator under the runtime's manager), `status` ([`snapshot`] fetches, [`status`]
//! renders: what a user asks first about one cluster) and, with the `sim` feature, `demo` ([`demo`]: the same on the
//! embedded simulated cluster). `main.rs` only parses and dispatches.

pub mod args;
pub mod cluster;
#[cfg(feature = "sim")]
pub mod demo;
pub mod logging;
pub mod run;
pub mod snapshot;
pub mod status;
#[cfg(feature = "sim")]
pub mod table;

pub use args::{LogFormat, RunArgs, StatusArgs};
pub use run::RunError;
