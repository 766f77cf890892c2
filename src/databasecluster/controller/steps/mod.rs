//! The reconcile pass's steps, one file each, in the order [`super::reconcile`] runs them:
//! [`secrets`] and [`status_token`], [`certificates`] (and [`user_certificates`]), [`services`], the
//! StatefulSet and [`pdb`], [`instances`] (and its [`upkeep`]), [`backups`]; a major [`upgrade`]
//! before the StatefulSet; [`child`] is how every step writes one child.

pub mod backups;
pub mod certificates;
pub mod child;
pub mod instances;
pub mod pdb;
pub mod secrets;
pub mod services;
pub mod status_token;
pub mod upgrade;
pub mod upkeep;
pub mod user_certificates;
