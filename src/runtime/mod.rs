//! The controller runtime: everything between the API server's watch streams and `reconcile`.
//! Generic over any Kubernetes resource, or any cached form of one that is an [`Object`] (design
//! change: ARCHITECTURE.md says any k8s resource; see `object`); nothing here knows about Postgres.
//!
//! `reflector/` lists and watches one kind; `cache/` stores it (one writer, many readers);
//! `informer` ties the two together and tells handlers; `controller` turns those events into
//! reconcile passes through a `workqueue/` (`echoes` keeps a pass's own write from
//! queueing it again); `introspection` and `server` show all of it, and `packed_pass` keeps each
//! key's pass history small.

#![warn(missing_docs, missing_debug_implementations)]

pub mod access;
pub mod cache;
pub mod causes;
pub mod client;
pub mod controller;
pub(crate) mod echoes;
pub mod freshness;
pub mod hotloop;
pub mod informer;
pub mod introspection;
pub mod key;
pub mod leader;
pub mod live;
pub mod manager;
pub mod metrics;
pub mod object;
pub mod packed_pass;
pub mod process_metrics;
pub mod reflector;
pub mod selector;
pub mod server;
pub mod tls;
pub mod workqueue;
pub mod writes;

pub use key::ObjectKey;
pub use object::Object;
