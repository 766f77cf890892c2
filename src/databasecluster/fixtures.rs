//! The DatabaseCluster the unit tests start from: `production-postgres` in `default`, as the API
//! server holds it once created (uid and generation assigned), with the seed's 1Gi of storage.

use k8s_openapi::api::apps::v1::StatefulSet;

use crate::databasecluster::api::types::{DatabaseCluster, DatabaseClusterSpec};
use crate::databasecluster::api::validation::validate_spec;
use crate::databasecluster::specs::resources::{Owner, build_statefulset};

/// The fixture's uid.
pub(crate) const UID: &str = "uid-1";

/// A password for the app Secret, with characters a connection URI must escape.
pub(crate) const PASSWORD: &str = "Xq7:p@ss/w0rd%UNIQUE";

/// A spec without backups or PostgreSQL parameters.
pub(crate) fn spec(replicas: i32, version: &str, storage_size: &str) -> DatabaseClusterSpec {
    DatabaseClusterSpec {
        replicas,
        version: version.into(),
        storage_size: storage_size.into(),
        backup_schedule: None,
        postgres_config: None,
        ..DatabaseClusterSpec::default()
    }
}

/// `production-postgres` with `replicas` of `version` at `generation`, without a status.
pub(crate) fn cluster(replicas: i32, version: &str, generation: i64) -> DatabaseCluster {
    let mut cluster = DatabaseCluster::new("production-postgres", spec(replicas, version, "1Gi"));
    cluster.metadata.namespace = Some("default".into());
    cluster.metadata.uid = Some(UID.into());
    cluster.metadata.generation = Some(generation);
    cluster
}

/// The seed's 3 × 15.4 fixture cluster.
pub(crate) fn seed() -> DatabaseCluster {
    cluster(3, "15.4", 1)
}

/// The owner of the children of [`seed`].
pub(crate) fn owner() -> Owner {
    Owner::of(&seed()).expect("the fixture has a name, namespace and uid")
}

/// The StatefulSet the operator builds for `cluster`.
pub(crate) fn statefulset_for(cluster: &DatabaseCluster) -> StatefulSet {
    let owner = Owner::of(cluster).expect("the fixture has a name, namespace and uid");
    build_statefulset(&owner, &validate_spec(&cluster.spec).expect("a valid fixture spec"))
}

/// The StatefulSet the operator builds for [`seed`].
pub(crate) fn statefulset() -> StatefulSet {
    statefulset_for(&seed())
}
