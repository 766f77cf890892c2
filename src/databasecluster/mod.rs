//! The DatabaseCluster operator: CRD types, pure child builders, status and reconcile.

pub mod types;
pub mod validation;
