//! What a user writes: the `DatabaseCluster` CRD's [`types`], the checks the CRD cannot make
//! ([`validation`]), `spec.backup` / `spec.bootstrap` ([`backup`]), `spec.monitoring`
//! ([`monitoring`]), `spec.backup.objectStore` and `walArchive` ([`object_store`]), `spec.bootstrap.recovery` ([`recovery`]), and the schema's descriptions as `kubectl explain` shows them
//! ([`descriptions`]).

pub mod backup;
pub mod certificates;
pub mod descriptions;
pub mod monitoring;
pub mod object_store;
pub mod recovery;
pub mod types;
pub mod validation;
