//! The controller runtime's tests (`src/runtime`): the work queue, reflector, informer, cache,
//! controller, causes, leader election, the introspection server and live page, `run` as a library
//! and its `--metrics-secure` listener, against the simulated API server.

#[cfg(feature = "sim")]
#[path = "../common/mod.rs"]
mod common;

mod cache;
mod causes;
mod causes_log;
mod controller;
mod informer;
mod leader;
mod live;
mod metrics_secure;
mod reflector;
mod run;
mod server;
mod workqueue;
