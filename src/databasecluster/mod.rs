//! The DatabaseCluster operator, in folders a reader can follow:
//!
//! - [`api`]: what a user writes: the CRD types, the checks the CRD cannot make, `spec.backup`.
//! - [`controller`]: the wiring ([`controller::operator::workload`]) and the reconcile pass, one
//!   step a file, with the status it writes, its Events and its failures.
//! - [`specs`]: pure builders of the child objects, one kind each.
//! - [`instances`]: what the instances say about themselves, and the roles, rolls and storage
//!   decided from it.
//! - [`failover`] and [`switchover`]: a change of primary, unplanned and planned.
//! - [`backup`]: backups and restores.
//! - [`tls`]: the certificates each cluster's connections are encrypted and authenticated with.
//! - [`objectstore`]: the object store that WAL is archived to: the pods' part and the status.
//! - [`upgrade`]: major version upgrades in place with `pg_upgrade`.
//! - [`cache`]: the compact forms the informers keep and what a pass reads of them.
//! - [`view`]: the clusters as the live page shows them, and how old each figure is.

pub mod api;
pub mod backup;
pub mod cache;
pub mod controller;
pub mod failover;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod instances;
pub mod objectstore;
pub mod specs;
pub mod switchover;
pub mod tls;
pub mod upgrade;
pub mod view;
