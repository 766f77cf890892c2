//! What a user writes: the `DatabaseCluster` CRD's [`types`], the checks the CRD cannot make
//! ([`validation`]) and `spec.backup` / `spec.bootstrap` ([`backup`]).

pub mod backup;
pub mod types;
pub mod validation;
