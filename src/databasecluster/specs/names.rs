//! The vocabulary every child of a cluster shares: its owner ([`Owner`]), the recommended labels,
//! the children's names, the field manager and the PostgreSQL port. A leaf: it imports nothing
//! from the operator, so any builder can use it without an import circle. [`Owner::of`], which
//! reads a `DatabaseCluster`, is in `resources.rs`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use thiserror::Error;

/// The field manager of every write the operator makes (server-side apply and status).
pub const FIELD_MANAGER: &str = "dbcluster-operator";
/// The port PostgreSQL listens on, in the pods and on the Service.
pub const POSTGRES_PORT: i32 = 5432;
/// Set on the cluster to ask for a rolling restart (`kubectl dbc restart` writes the time): the
/// operator copies it into the pod template, so each new value makes a new revision, which rolls
/// like any other (standbys first, the primary by switchover), as `kubectl rollout restart` does
/// for a Deployment.
pub const RESTARTED_AT_ANNOTATION: &str = "databases.madmmas.dev/restartedAt";

/// Label keys of the Kubernetes recommended labels.
pub mod label {
    /// The application: always `postgresql`.
    pub const NAME: &str = "app.kubernetes.io/name";
    /// The DatabaseCluster's name.
    pub const INSTANCE: &str = "app.kubernetes.io/instance";
    /// The part of the application: `database`.
    pub const COMPONENT: &str = "app.kubernetes.io/component";
    /// The operator managing the object.
    pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
    /// The PostgreSQL version, on pod templates only (never in a selector).
    pub const VERSION: &str = "app.kubernetes.io/version";
}

/// The cluster a child belongs to: its name, namespace and the controller ownerReference to it.
#[derive(Clone, Debug, PartialEq)]
pub struct Owner {
    pub(super) name: String,
    pub(super) namespace: String,
    pub(super) reference: OwnerReference,
    /// The cluster's [`RESTARTED_AT_ANNOTATION`], copied into the pod template.
    pub(super) restarted_at: Option<String>,
}

/// Why children cannot be built for a DatabaseCluster (it was never stored by an API server).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum OwnerError {
    /// The object lacks a metadata field an owner needs.
    #[error("the DatabaseCluster has no metadata.{0}, so it cannot own children")]
    MissingMetadata(&'static str),
}

impl Owner {
    /// The cluster's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The cluster's namespace, which is also every child's.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The controller ownerReference every child carries.
    pub fn reference(&self) -> &OwnerReference {
        &self.reference
    }
}

/// The labels that select the cluster's pods: stable for the cluster's life (a StatefulSet's
/// selector is immutable), so they hold no version and no role.
pub fn selector_labels(owner: &Owner) -> BTreeMap<String, String> {
    BTreeMap::from([
        (label::NAME.to_owned(), "postgresql".to_owned()),
        (label::INSTANCE.to_owned(), owner.name.clone()),
    ])
}

/// The recommended labels every child carries.
pub fn standard_labels(owner: &Owner) -> BTreeMap<String, String> {
    let mut labels = selector_labels(owner);
    labels.insert(label::COMPONENT.to_owned(), "database".to_owned());
    labels.insert(label::MANAGED_BY.to_owned(), FIELD_MANAGER.to_owned());
    labels
}

/// The metadata every child carries: its name, the cluster's namespace, the recommended labels and
/// the controller ownerReference.
pub fn child_metadata(owner: &Owner, name: String) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(owner.namespace.clone()),
        labels: Some(standard_labels(owner)),
        owner_references: Some(vec![owner.reference.clone()]),
        ..ObjectMeta::default()
    }
}

/// The name of the headless Service, which is also the StatefulSet's `serviceName`.
pub fn headless_service_name(cluster_name: &str) -> String {
    cluster_name.to_owned()
}

/// The name of the StatefulSet.
pub fn statefulset_name(cluster_name: &str) -> String {
    cluster_name.to_owned()
}
