//! The object store (`spec.backup.objectStore`) from the operator's side: what the instances'
//! pods get so that their instance managers can archive WAL to it ([`pod`]), and how the
//! archiver's state that the instances report becomes status, a condition and Events
//! ([`archiving`]). The client itself runs in the pods (`crate::instance::archive`).

pub mod archiving;
pub mod manager_pod;
pub mod pod;
pub mod recovery_job;
