//! The controller runtime: everything between the API server's watch streams and `reconcile`.
//! Generic over any Kubernetes resource, or any cached form of one that is an [`Object`] (a design
//! change from "any k8s resource": see `object`); nothing here knows about Postgres. The design is
//! described in `docs/ARCHITECTURE.md` at the repository's root.
//!
//! The folders follow one watch event:
//!
//! - `reflector/` lists and watches one kind; `cache/` stores it (one writer, many readers);
//!   [`informer`] ties the two together and tells handlers.
//! - [`controller`] turns those events into reconcile passes through a `workqueue/`, and holds the
//!   pass's mechanisms: why a key was queued (`causes`), the echoes of a pass's own writes
//!   (`echoes`), read-your-writes (`freshness`, `writes`), hot loops (`hotloop`) and each key's
//!   last passes (`worker`).
//! - [`observe`] shows all of it: the HTTP server, the introspection endpoints and live page,
//!   metrics, access control and TLS.
//! - [`manager`] runs controllers and the server, behind leader election.
//!
//! `client`, `key`, `object` and `selector` are the vocabulary the folders share.

#![warn(missing_docs, missing_debug_implementations)]

pub mod cache;
pub mod client;
pub mod controller;
pub mod informer;
pub mod key;
pub mod manager;
pub mod object;
pub mod observe;
pub mod reflector;
pub mod selector;
pub mod workqueue;

pub use key::ObjectKey;
pub use object::Object;
