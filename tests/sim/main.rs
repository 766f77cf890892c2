//! The simulated API server's own tests (`src/sim`): its API machinery, schema and CEL validation,
//! patches, watches, faults, the paused clock, garbage collection and the simulated controllers
//! and timer kubelet, and `kubectl` against it (`exec` included).

#[cfg(feature = "sim")]
#[path = "../common/mod.rs"]
mod common;

mod sim_apiserver;
mod sim_core;
mod sim_custom;
mod sim_demo;
mod sim_exec;
mod sim_faults;
mod sim_gc_dangling;
mod sim_jobs;
mod sim_kubectl;
mod sim_lifecycle;
mod sim_patch;
mod sim_paused_clock;
mod sim_schema;
mod sim_statefulset;
mod sim_watch;
