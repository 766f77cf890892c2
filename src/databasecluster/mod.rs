//! The DatabaseCluster operator: CRD types, pure child builders, status and reconcile.
