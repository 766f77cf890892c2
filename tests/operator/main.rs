//! The DatabaseCluster operator's tests on the simulator's timer kubelet (no real PostgreSQL): the
//! CRD and the manifests, RBAC, the CLI and `status`, what a pass logs, and the end-to-end
//! behaviours (walkthrough, storage, backups, drift, adoption, bad input, faults, chaos).

#[cfg(feature = "sim")]
#[path = "../common/mod.rs"]
mod common;

mod chaos;
mod cli;
mod crd;
mod dbc_scale;
mod e2e_adoption;
mod e2e_backup;
mod e2e_bad_input;
mod e2e_certificates;
mod e2e_drift;
mod e2e_no_secret_leak;
mod e2e_quiet;
mod e2e_read_your_writes;
mod e2e_replication_secret;
mod e2e_run;
mod e2e_storage;
mod e2e_transient;
mod e2e_walkthrough;
mod manifests;
mod monitoring;
mod object_store_crd;
mod pass_log;
mod plugin;
mod rbac;
mod recovery_crd;
mod status;
