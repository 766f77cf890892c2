//! Seeing the runtime at work: the HTTP [`server`] and its [`access`] control and [`tls`], the
//! [`introspection`] endpoints (`/debug/...`) and the [`live`] page, and the Prometheus
//! [`metrics`] with the process's own ([`process_metrics`]).

pub mod access;
pub mod introspection;
pub mod live;
pub mod metrics;
pub mod process_metrics;
pub mod server;
pub mod tls;
