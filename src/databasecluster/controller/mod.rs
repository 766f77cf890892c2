//! The operator's controller: the wiring that runs it ([`operator`]), the reconcile pass
//! ([`reconcile`]), the status it writes ([`status`]), the Events it publishes ([`events`],
//! [`instance_events`]), the failures a user can see ([`failures`]) and how old the instances'
//! figures are ([`observed`]).

pub mod context;
pub mod events;
pub mod failures;
pub mod instance_events;
pub mod observed;
pub mod operator;
pub mod reconcile;
pub mod status;
pub mod steps;
