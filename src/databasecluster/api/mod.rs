//! What a user writes: the `DatabaseCluster` CRD's [`types`], the checks the CRD cannot make
//! ([`validation`]), `spec.backup` / `spec.bootstrap` ([`backup`]), `spec.monitoring`
//! ([`monitoring`]), and the schema's descriptions as `kubectl explain` shows them
//! ([`descriptions`]).

pub mod backup;
pub mod certificates;
pub mod descriptions;
pub mod monitoring;
pub mod types;
pub mod validation;
