//! The subcommands as a library, so tests can drive them: `run`'s flags ([`args`]), finding and
//! checking the cluster ([`cluster`]), logging ([`logging`]), `run` itself ([`run`]: the
//! DatabaseCluster operator under the runtime's manager), `status` ([`snapshot`] fetches, [`status`]
//! renders: what a user asks first about one cluster) and, with the `sim` feature, `demo` ([`demo`]: the same on the
//! embedded simulated cluster, its live [`table`], its keys: [`demo_keys`] decides, [`terminal`]
//! reads), and the kubectl plugin ([`plugin`]: `kubectl dbc …`). `main.rs` only parses and
//! dispatches.

pub mod args;
pub mod cluster;
#[cfg(feature = "sim")]
pub mod demo;
#[cfg(feature = "sim")]
pub mod demo_keys;
pub mod logging;
pub mod plugin;
pub mod run;
pub mod snapshot;
pub mod status;
#[cfg(feature = "sim")]
pub mod table;
#[cfg(feature = "sim")]
pub mod terminal;

pub use args::{LogFormat, RunArgs, StatusArgs};
pub use run::RunError;
