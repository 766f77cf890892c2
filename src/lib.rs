//! dbcluster-operator: a PostgreSQL `DatabaseCluster` operator whose controller runtime is written
//! here, in the open.
//!
//! - [`runtime`] is generic over any Kubernetes resource: work queue, reflector, cache, informer,
//!   controller, leader election, the HTTP server and the manager that runs them. It knows nothing
//!   about Postgres.
//! - [`databasecluster`] is the operator: the CRD types, pure builders of child objects, status
//!   computation, drift, Events and the reconcile function.
//! - [`instance`] is the instance manager: the operator's binary as each PostgreSQL pod's main
//!   process (`instance init`, `instance run`), in place of a shell script.
//! - [`cli`] is the subcommands: `run`, and `demo` with the `sim` feature.
//! - `sim` (the `sim` feature, on by default) is an embedded simulated Kubernetes API server used
//!   by `demo` and by the tests; the image is built without it.

// No function over 100 lines (clippy.toml sets the threshold).
#![deny(clippy::too_many_lines)]

pub mod cli;
pub mod databasecluster;
pub mod instance;
pub mod runtime;
#[cfg(feature = "sim")]
pub mod sim;
