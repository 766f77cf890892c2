//! The DatabaseCluster operator: CRD types, pure child builders, status, reconcile and the wiring
//! that runs them ([`operator::workload`]).

pub mod app_secret;
pub mod backup;
pub mod cached;
pub mod compact;
pub mod config;
pub mod credentials;
pub mod demotion;
pub mod drift;
pub mod events;
pub mod failover;
pub mod failures;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod forms;
pub mod identity;
pub mod instance_events;
pub mod instance_pod;
pub mod instances;
pub mod operator;
pub mod packed;
pub mod promotion;
pub mod reconcile;
pub mod resources;
pub mod roll;
pub mod services;
pub mod status;
pub mod status_token;
pub mod storage;
pub mod switchover;
pub mod topology;
pub mod types;
pub mod validation;
