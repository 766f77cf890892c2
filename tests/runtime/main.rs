//! The controller runtime's tests (`src/runtime`): the work queue, reflector, informer, cache,
//! controller, causes, leader election, the introspection server and live page, `run` as a library
//! and its `--metrics-secure` listener, against the simulated API server.

#[cfg(feature = "sim")]
#[path = "../common/mod.rs"]
mod common;

mod workqueue;
mod reflector;
mod informer;
mod cache;
mod controller;
mod causes;
mod causes_log;
mod leader;
mod server;
mod live;
mod run;
mod metrics_secure;
