//! What a user writes: the `DatabaseCluster` CRD's [`types`], the checks the CRD cannot make
//! ([`validation`]), `spec.backup` / `spec.bootstrap` ([`backup`]) and `spec.monitoring`
//! ([`monitoring`]).

pub mod backup;
pub mod monitoring;
pub mod types;
pub mod validation;
