//! The DatabaseCluster operator: CRD types, pure child builders, status, reconcile and the wiring
//! that runs them ([`operator::workload`]).

pub mod drift;
pub mod events;
pub mod failures;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod operator;
pub mod reconcile;
pub mod resources;
pub mod status;
pub mod types;
pub mod validation;
