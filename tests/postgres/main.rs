//! The tests that run real PostgreSQL 15 (they need root and Debian's `postgresql-15`, which
//! `scripts/test` installs): the simulator's process kubelet, the instance, backup and restore
//! programs, WAL archiving to a real S3-compatible server, and the operator's clusters end to end (topology, failover, restore, the demo).

#[cfg(feature = "sim")]
#[path = "../common/mod.rs"]
mod common;

mod backup_script;
mod e2e_archiving;
mod e2e_bad_day;
mod e2e_demo;
mod e2e_disk_full;
mod e2e_failover;
mod e2e_logs;
mod e2e_monitoring;
mod e2e_node_loss;
mod e2e_pitr;
mod e2e_postgres;
mod e2e_psql;
mod e2e_restore;
mod e2e_tls;
mod e2e_tls_ca;
mod e2e_topology;
mod e2e_upgrade;
mod instance_exec;
mod instance_metrics;
mod instance_program;
mod sim_job_pods;
mod sim_process_kubelet;
mod upgrade_script;
mod wal_archive;
