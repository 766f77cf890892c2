//! The controller runtime: everything between the API server's watch streams and `reconcile`.
//! Generic over any Kubernetes resource; nothing here knows about Postgres.

pub mod cache;
pub mod client;
pub mod controller;
pub mod freshness;
pub mod hotloop;
pub mod informer;
pub mod introspection;
pub mod key;
pub mod leader;
pub mod metrics;
pub mod process_metrics;
pub mod reflector;
pub mod server;
pub mod workqueue;
pub mod writes;

pub use key::ObjectKey;
