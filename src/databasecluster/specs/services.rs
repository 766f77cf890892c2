//! The client Services and the PodDisruptionBudget, built purely.
//!
//! - `<name>-rw`: the primary (pods labelled [`ROLE_LABEL`]`=primary`): reads and writes.
//! - `<name>-ro`: the ready standbys (`role=replica`): reads only; a write is refused by
//!   PostgreSQL (read-only transaction).
//! - `<name>-r`: any ready instance.
//!
//! All three are ClusterIP Services on 5432, beside the headless governing Service `<name>`
//! (see [`crate::databasecluster::specs::resources`]). Endpoints hold only ready pods, and the role label is set by the
//! operator from what it observes (`pg_is_in_recovery()`), so `-rw` reaches the instance that
//! really accepts writes. Cluster names are at most [`MAX_CLUSTER_NAME`] characters, so every
//! child's name fits its limit (see the test).
//!
//! The PodDisruptionBudget `<name>` (policy/v1) allows one instance at a time to be disrupted
//! (`maxUnavailable: 1`); it exists only with 2+ instances, since with one instance it would block
//! node drains forever.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServiceSpec};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::databasecluster::specs::resources::{
    Owner, child_metadata, postgres_service_port, selector_labels,
};

/// The pod label holding an instance's observed role.
pub const ROLE_LABEL: &str = "databases.madmmas.dev/role";
/// [`ROLE_LABEL`] of the primary.
pub const ROLE_PRIMARY: &str = "primary";
/// [`ROLE_LABEL`] of a standby.
pub const ROLE_REPLICA: &str = "replica";
/// The longest cluster name whose children's names all fit: the StatefulSet's pods carry a
/// `controller-revision-hash` label `<name>-<10 hex digits>`, which must fit a 63-character label
/// value; every Service name (`<name>-rw`) then fits the 63-character DNS label too.
pub const MAX_CLUSTER_NAME: usize = 52;

/// A client Service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientService {
    /// `-rw`: the primary.
    ReadWrite,
    /// `-ro`: the standbys.
    ReadOnly,
    /// `-r`: any instance.
    Any,
}

impl ClientService {
    /// Every client Service.
    pub const ALL: [ClientService; 3] =
        [ClientService::ReadWrite, ClientService::ReadOnly, ClientService::Any];

    /// The Service's name.
    pub fn name(self, cluster_name: &str) -> String {
        let suffix = match self {
            ClientService::ReadWrite => "rw",
            ClientService::ReadOnly => "ro",
            ClientService::Any => "r",
        };
        format!("{cluster_name}-{suffix}")
    }

    fn role(self) -> Option<&'static str> {
        match self {
            ClientService::ReadWrite => Some(ROLE_PRIMARY),
            ClientService::ReadOnly => Some(ROLE_REPLICA),
            ClientService::Any => None,
        }
    }
}

/// The name of the Service that reaches the primary.
pub fn rw_service_name(cluster_name: &str) -> String {
    ClientService::ReadWrite.name(cluster_name)
}

/// The client Service `which`.
pub fn build_client_service(owner: &Owner, which: ClientService) -> Service {
    let mut selector = selector_labels(owner);
    if let Some(role) = which.role() {
        selector.insert(ROLE_LABEL.to_owned(), role.to_owned());
    }
    Service {
        metadata: child_metadata(owner, which.name(owner.name())),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_owned()),
            selector: Some(selector),
            ports: Some(vec![postgres_service_port()]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// The name of the PodDisruptionBudget.
pub fn pdb_name(cluster_name: &str) -> String {
    cluster_name.to_owned()
}

/// The PodDisruptionBudget for `replicas` instances: `None` below two.
pub fn build_pdb(owner: &Owner, replicas: i32) -> Option<PodDisruptionBudget> {
    (replicas >= 2).then(|| PodDisruptionBudget {
        metadata: child_metadata(owner, pdb_name(owner.name())),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(selector_labels(owner)),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    })
}

/// The labels to merge into a pod whose observed role is `role`.
pub fn role_labels(role: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(ROLE_LABEL.to_owned(), role.to_owned())])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::databasecluster::api::types::{DatabaseCluster, DatabaseClusterSpec};
    use crate::databasecluster::specs::config::config_map_name;
    use crate::databasecluster::specs::credentials::Login;
    use crate::databasecluster::specs::names::{headless_service_name, statefulset_name};

    fn owner(name: &str) -> Owner {
        let mut cluster = DatabaseCluster::new(name, DatabaseClusterSpec::default());
        cluster.metadata.namespace = Some("default".into());
        cluster.metadata.uid = Some("uid".into());
        Owner::of(&cluster).unwrap()
    }

    #[test]
    fn rw_and_ro_select_by_role_and_r_selects_every_instance() {
        let owner = owner("db");
        let selector = |which| build_client_service(&owner, which).spec.unwrap().selector.unwrap();
        assert_eq!(selector(ClientService::ReadWrite).get(ROLE_LABEL).map(String::as_str), Some("primary"));
        assert_eq!(selector(ClientService::ReadOnly).get(ROLE_LABEL).map(String::as_str), Some("replica"));
        assert_eq!(selector(ClientService::Any), selector_labels(&owner));
        for which in ClientService::ALL {
            let spec = build_client_service(&owner, which).spec.unwrap();
            assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
            assert_eq!(spec.publish_not_ready_addresses, None, "only ready pods");
            assert_eq!(spec.ports.unwrap()[0].port, 5432);
        }
    }

    #[test]
    fn every_child_name_fits_its_limit_for_the_longest_cluster_name() {
        let name = "a".repeat(MAX_CLUSTER_NAME);
        let dns_labels = ClientService::ALL.iter().map(|which| which.name(&name)).chain([
            headless_service_name(&name),
            statefulset_name(&name),
            pdb_name(&name),
        ]);
        for label in dns_labels {
            assert!(label.len() <= 63, "{label}");
        }
        let revision_label = format!("{}-{}", statefulset_name(&name), "0123456789");
        assert!(revision_label.len() <= 63);
        let pod = format!("{}-9", statefulset_name(&name));
        assert!(pod.len() <= 63);
        for secret in Login::ALL.map(|l| l.secret_name(&name)).into_iter().chain([config_map_name(&name)]) {
            assert!(secret.len() <= 253);
        }
    }

    #[test]
    fn a_pdb_exists_only_for_two_or_more_instances() {
        assert!(build_pdb(&owner("db"), 1).is_none());
        assert!(build_pdb(&owner("db"), 0).is_none());
        let pdb = build_pdb(&owner("db"), 3).unwrap().spec.unwrap();
        assert_eq!(pdb.max_unavailable, Some(IntOrString::Int(1)));
        assert_eq!(pdb.min_available, None);
    }
}
