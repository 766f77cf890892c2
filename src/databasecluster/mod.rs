//! The DatabaseCluster operator: CRD types, pure child builders, status and reconcile.

pub mod resources;
pub mod status;
pub mod types;
pub mod validation;
