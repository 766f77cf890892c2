//! An embedded simulated Kubernetes API server (hyper) for the tests and the `demo` command.
pub mod schema;
