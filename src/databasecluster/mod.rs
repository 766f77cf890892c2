//! The DatabaseCluster operator: CRD types, pure child builders, status, reconcile and the wiring
//! that runs them ([`operator::run_operator`]).

pub mod events;
pub mod failures;
pub mod operator;
pub mod reconcile;
pub mod resources;
pub mod status;
pub mod types;
pub mod validation;
