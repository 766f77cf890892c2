//! Major version upgrades in place with `pg_upgrade`: which version changes a cluster admits
//! ([`admission`]), where an upgrade is from what the operator observes ([`plan`]), and the Job that
//! runs `pg_upgrade` on the primary's volume ([`job`]). The reconcile step that observes and acts
//! is `controller::steps::upgrade`. `docs/upgrades.md` is the user's guide.

pub mod admission;
pub mod job;
pub mod plan;
