//! Major version upgrades in place: which version changes a cluster admits ([`admission`]).
//! `docs/upgrades.md` is the user's guide.

pub mod admission;
