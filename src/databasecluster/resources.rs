//! Pure builders of a DatabaseCluster's children, and the comparison that decides whether a live
//! child needs a write.
//!
//! Children: the headless Service `<name>` (the StatefulSet's `serviceName`), the Secret
//! `<name>-app` with the connection details, and the StatefulSet `<name>`. Each carries the
//! `app.kubernetes.io` labels and a controller ownerReference to the cluster (`controller` and
//! `blockOwnerDeletion` both true), so the garbage collector deletes it with the cluster.
//!
//! # Writing children without clobbering anyone else's fields
//!
//! A builder returns **exactly the fields the operator owns**, nothing defaulted and nothing
//! copied from the live object (except [`keep_immutable_fields`]). Reconcile writes that object
//! with **server-side apply**, field manager [`FIELD_MANAGER`], `force = true`
//! (`PatchParams::apply(FIELD_MANAGER).force()` with `Patch::Apply(&desired)`): one request that
//! creates or updates, needs no prior GET or resourceVersion, and leaves every field another
//! manager set untouched: a user's annotations and labels, a webhook's sidecar, an HPA's or a
//! human's `updateStrategy`. Fields the operator stops setting are removed on the next apply, so a
//! new operator version cannot leave stale fields behind. List entries merge by key (containers
//! and env by `name`), unlike a JSON merge patch, which replaces whole lists.
//!
//! A server without apply can take the same body as a JSON merge patch (`Patch::Merge`) on update,
//! or as the body of a create: maps (labels, annotations) still merge, but lists the operator
//! sets (containers, ports) are replaced whole.
//!
//! Either way, reconcile writes only when [`needs_update`] says the live object differs from the
//! desired one in a field the operator owns, so a pass over an unchanged cluster makes no write
//! (and triggers no watch event, so no further pass). For the StatefulSet, reconcile first calls
//! [`keep_immutable_fields`] with the live object.
//!
//! The Secret is the exception to "apply whenever": its password must never change. When the
//! cache holds no `<name>-app`, reconcile draws a password and **creates** the Secret (POST, not
//! apply); `409 AlreadyExists` means the cache lagged behind an earlier pass, and reconcile reads
//! the live Secret once instead of overwriting it. When the Secret exists, reconcile rebuilds it
//! with the password read back by [`app_secret_password`] and applies it like any other child.
//! (Reconcile creates every absent child with POST the same way, so `result=created` and the
//! `Created…` Event are reported exactly once.)

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EnvVar, EnvVarSource, ExecAction, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PodSecurityContext, PodSpec, PodTemplateSpec, Probe, ResourceRequirements,
    SeccompProfile, Secret, SecretKeySelector, SecurityContext, Service, ServicePort, ServiceSpec,
    TCPSocketAction, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Resource;
use serde::Serialize;
use serde_json::Value;
use thiserror::Error;

use super::types::DatabaseCluster;
use super::validation::ValidSpec;
use crate::runtime::cache::controller_owner;

/// The field manager of every write the operator makes (server-side apply and status).
pub const FIELD_MANAGER: &str = "dbcluster-operator";
/// The port PostgreSQL listens on, in the pods and on the Service.
pub const POSTGRES_PORT: i32 = 5432;
/// The name of the PostgreSQL port on the container and the Service.
pub const POSTGRES_PORT_NAME: &str = "postgres";
/// The name of the PostgreSQL container in the StatefulSet's pods.
pub const POSTGRES_CONTAINER: &str = "postgres";
/// The StatefulSet's volumeClaimTemplate holding the data directory.
pub const DATA_VOLUME: &str = "data";
/// Where the data volume is mounted.
pub const DATA_MOUNT_PATH: &str = "/var/lib/postgresql/data";
/// The data directory: a subdirectory of the mount, because a fresh filesystem's `lost+found`
/// makes `initdb` refuse the mount point itself.
pub const PGDATA: &str = "/var/lib/postgresql/data/pgdata";
/// The database superuser, published in the Secret.
pub const SUPERUSER: &str = "postgres";
/// The database published in the Secret.
pub const DATABASE: &str = "postgres";
/// The uid and gid of `postgres` in the official image; the pods run as them, never as root.
const POSTGRES_UID: i64 = 999;

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
    name: String,
    namespace: String,
    reference: OwnerReference,
}

/// Why children cannot be built for a DatabaseCluster (it was never stored by an API server).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum OwnerError {
    /// The object lacks a metadata field an owner needs.
    #[error("the DatabaseCluster has no metadata.{0}, so it cannot own children")]
    MissingMetadata(&'static str),
}

impl Owner {
    /// The owner of `cluster`'s children; needs the name, namespace and uid the server assigned.
    pub fn of(cluster: &DatabaseCluster) -> Result<Owner, OwnerError> {
        let meta = &cluster.metadata;
        let name = meta.name.clone().ok_or(OwnerError::MissingMetadata("name"))?;
        let namespace = meta.namespace.clone().ok_or(OwnerError::MissingMetadata("namespace"))?;
        let uid = meta.uid.clone().ok_or(OwnerError::MissingMetadata("uid"))?;
        let reference = OwnerReference {
            api_version: DatabaseCluster::api_version(&()).into_owned(),
            kind: DatabaseCluster::kind(&()).into_owned(),
            name: name.clone(),
            uid,
            controller: Some(true),
            block_owner_deletion: Some(true),
        };
        Ok(Owner { name, namespace, reference })
    }

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

/// The controller ownerReference on `meta` that is not `owner`'s, if any: such an object belongs
/// to someone else and must not be taken over.
pub fn foreign_controller<'a>(meta: &'a ObjectMeta, owner: &Owner) -> Option<&'a OwnerReference> {
    controller_owner(meta).filter(|reference| reference.uid != owner.reference.uid)
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

fn child_metadata(owner: &Owner, name: String) -> ObjectMeta {
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

/// The name of the Secret with the connection details.
pub fn app_secret_name(cluster_name: &str) -> String {
    format!("{cluster_name}-app")
}

/// The name of the StatefulSet.
pub fn statefulset_name(cluster_name: &str) -> String {
    cluster_name.to_owned()
}

/// The headless Service that gives each pod a stable DNS name; it publishes pods before they are
/// ready so that instances can find each other while starting.
pub fn build_headless_service(owner: &Owner) -> Service {
    Service {
        metadata: child_metadata(owner, headless_service_name(&owner.name)),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_owned()),
            selector: Some(selector_labels(owner)),
            ports: Some(vec![ServicePort {
                name: Some(POSTGRES_PORT_NAME.to_owned()),
                port: POSTGRES_PORT,
                target_port: Some(IntOrString::String(POSTGRES_PORT_NAME.to_owned())),
                protocol: Some("TCP".to_owned()),
                ..ServicePort::default()
            }]),
            publish_not_ready_addresses: Some(true),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// The host applications connect to: the first instance through the headless Service. The
/// instances do not replicate, so pointing at one fixed instance is the only consistent choice.
fn primary_host(owner: &Owner) -> String {
    let service = headless_service_name(&owner.name);
    format!("{}-0.{service}.{}.svc", statefulset_name(&owner.name), owner.namespace)
}

/// The Secret `<name>-app` with the superuser's credentials and where to connect: keys
/// `username`, `password`, `host`, `port`, `dbname` and `uri`. The password is the caller's (drawn
/// once from a CSPRNG, then read back from the live Secret with [`app_secret_password`]).
pub fn build_app_secret(owner: &Owner, password: &str) -> Secret {
    let host = primary_host(owner);
    let uri = format!(
        "postgresql://{}:{}@{host}:{POSTGRES_PORT}/{DATABASE}",
        percent_encode(SUPERUSER),
        percent_encode(password)
    );
    let entries = [
        ("username", SUPERUSER.to_owned()),
        ("password", password.to_owned()),
        ("host", host),
        ("port", POSTGRES_PORT.to_string()),
        ("dbname", DATABASE.to_owned()),
        ("uri", uri),
    ];
    Secret {
        metadata: child_metadata(owner, app_secret_name(&owner.name)),
        type_: Some("kubernetes.io/basic-auth".to_owned()),
        // `data`, not `stringData`: the server turns stringData into data, so a desired object with
        // stringData would never compare equal to the live one.
        data: Some(
            entries
                .into_iter()
                .map(|(key, value)| (key.to_owned(), ByteString(value.into_bytes())))
                .collect(),
        ),
        ..Secret::default()
    }
}

/// The password stored in a live app Secret, so that it is reused instead of regenerated.
pub fn app_secret_password(secret: &Secret) -> Option<String> {
    let bytes = secret.data.as_ref()?.get("password")?;
    String::from_utf8(bytes.0.clone()).ok().filter(|password| !password.is_empty())
}

/// Percent-encodes everything but RFC 3986 unreserved characters, for the userinfo of a URI.
fn percent_encode(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

/// The StatefulSet running `spec.replicas` PostgreSQL instances of image `postgres:<version>`,
/// each with a `data` volume of `storageSize`, credentials from the app Secret, probes, resource
/// requests and limits, and a non-root security context.
pub fn build_statefulset(owner: &Owner, spec: &ValidSpec) -> StatefulSet {
    let mut pod_labels = standard_labels(owner);
    pod_labels.insert(label::VERSION.to_owned(), spec.version.as_str().to_owned());
    StatefulSet {
        metadata: child_metadata(owner, statefulset_name(&owner.name)),
        spec: Some(StatefulSetSpec {
            replicas: Some(spec.replicas),
            service_name: Some(headless_service_name(&owner.name)),
            selector: LabelSelector {
                match_labels: Some(selector_labels(owner)),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(pod_labels), ..ObjectMeta::default() }),
                spec: Some(PodSpec {
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(POSTGRES_UID),
                        run_as_group: Some(POSTGRES_UID),
                        fs_group: Some(POSTGRES_UID),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".to_owned(),
                            ..SeccompProfile::default()
                        }),
                        ..PodSecurityContext::default()
                    }),
                    containers: vec![postgres_container(owner, spec)],
                    ..PodSpec::default()
                }),
            },
            volume_claim_templates: Some(vec![data_volume_claim(owner, spec)]),
            ..StatefulSetSpec::default()
        }),
        ..StatefulSet::default()
    }
}

fn postgres_container(owner: &Owner, spec: &ValidSpec) -> Container {
    let secret_key = |key: &str| EnvVarSource {
        secret_key_ref: Some(SecretKeySelector {
            name: app_secret_name(&owner.name),
            key: key.to_owned(),
            ..SecretKeySelector::default()
        }),
        ..EnvVarSource::default()
    };
    let quantities = |cpu: &str, memory: &str| {
        BTreeMap::from([
            ("cpu".to_owned(), Quantity(cpu.to_owned())),
            ("memory".to_owned(), Quantity(memory.to_owned())),
        ])
    };
    // `-c name=value` per parameter, in name order so the template (and so the revision) is stable.
    // Always present, even empty: an explicit `[]` is what lets `needs_update` see that parameters
    // removed from the spec must go (the server stores it as an absent field).
    let args: Vec<String> = spec
        .postgres_config
        .iter()
        .flat_map(|(name, value)| ["-c".to_owned(), format!("{name}={value}")])
        .collect();
    Container {
        name: POSTGRES_CONTAINER.to_owned(),
        image: Some(format!("postgres:{}", spec.version.as_str())),
        args: Some(args),
        ports: Some(vec![ContainerPort {
            name: Some(POSTGRES_PORT_NAME.to_owned()),
            container_port: POSTGRES_PORT,
            protocol: Some("TCP".to_owned()),
            ..ContainerPort::default()
        }]),
        env: Some(vec![
            EnvVar {
                name: "POSTGRES_USER".to_owned(),
                value_from: Some(secret_key("username")),
                ..EnvVar::default()
            },
            EnvVar {
                name: "POSTGRES_PASSWORD".to_owned(),
                value_from: Some(secret_key("password")),
                ..EnvVar::default()
            },
            EnvVar { name: "PGDATA".to_owned(), value: Some(PGDATA.to_owned()), ..EnvVar::default() },
        ]),
        resources: Some(ResourceRequirements {
            requests: Some(quantities("100m", "256Mi")),
            limits: Some(quantities("500m", "512Mi")),
            ..ResourceRequirements::default()
        }),
        // Ready once the server accepts TCP connections, as in the seed (pg_isready), but over TCP:
        // the image's first-start initialisation runs a temporary server on the Unix socket only,
        // which a socket probe would report as ready.
        readiness_probe: Some(Probe {
            exec: Some(pg_isready()),
            initial_delay_seconds: Some(10),
            period_seconds: Some(5),
            timeout_seconds: Some(5),
            failure_threshold: Some(3),
            ..Probe::default()
        }),
        // Allows up to five minutes for initdb or crash recovery before liveness takes over.
        startup_probe: Some(Probe {
            exec: Some(pg_isready()),
            period_seconds: Some(5),
            timeout_seconds: Some(5),
            failure_threshold: Some(60),
            ..Probe::default()
        }),
        // Restart only a server that stopped accepting connections for a minute; a busy server
        // that answers slowly is left alone.
        liveness_probe: Some(Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::String(POSTGRES_PORT_NAME.to_owned()),
                ..TCPSocketAction::default()
            }),
            period_seconds: Some(10),
            timeout_seconds: Some(5),
            failure_threshold: Some(6),
            ..Probe::default()
        }),
        volume_mounts: Some(vec![VolumeMount {
            name: DATA_VOLUME.to_owned(),
            mount_path: DATA_MOUNT_PATH.to_owned(),
            ..VolumeMount::default()
        }]),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_owned()]),
                ..Capabilities::default()
            }),
            ..SecurityContext::default()
        }),
        ..Container::default()
    }
}

fn pg_isready() -> ExecAction {
    let port = POSTGRES_PORT.to_string();
    let command = ["pg_isready", "-U", SUPERUSER, "-d", DATABASE, "-h", "127.0.0.1", "-p", port.as_str()];
    ExecAction { command: Some(command.map(str::to_owned).to_vec()) }
}

fn data_volume_claim(owner: &Owner, spec: &ValidSpec) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(DATA_VOLUME.to_owned()),
            labels: Some(standard_labels(owner)),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".to_owned()]),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_owned(),
                    Quantity(spec.storage.as_str().to_owned()),
                )])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    }
}

/// Copies from the live StatefulSet the fields the API server refuses to change
/// (`volumeClaimTemplates`), so that an update never fails on them; a larger `storageSize` is not
/// applied to an existing StatefulSet.
pub fn keep_immutable_fields(desired: &mut StatefulSet, live: &StatefulSet) {
    if let (Some(desired), Some(live)) = (desired.spec.as_mut(), live.spec.as_ref()) {
        desired.volume_claim_templates.clone_from(&live.volume_claim_templates);
    }
}

/// Whether `live` differs from `desired` in a field `desired` sets, i.e. whether a write is due.
///
/// Fields `desired` leaves out belong to others (server defaults, users, other controllers) and
/// are ignored. Lists of objects match entry by entry in any order and may hold extra entries
/// (another manager's container or env var); lists of scalars (commands, access modes) and empty
/// lists must be equal. An empty value (`null`, `false`, `0`, `""`, `[]`, `{}`) in `desired` also
/// matches an absent field, since the API server drops such values; so a builder marks an owned
/// list that is now empty with `[]` rather than leaving it out.
pub fn needs_update<K: Serialize>(desired: &K, live: &K) -> bool {
    match (serde_json::to_value(desired), serde_json::to_value(live)) {
        (Ok(desired), Ok(live)) => !covers(&live, &desired),
        // Invariant: k8s-openapi objects always serialise to JSON; were they not to, writing is
        // the safe answer.
        _ => true,
    }
}

/// Whether `live` holds every field of `desired` with the same value (see [`needs_update`]).
fn covers(live: &Value, desired: &Value) -> bool {
    match (live, desired) {
        (Value::Object(live), Value::Object(desired)) => {
            desired.iter().all(|(key, want)| match live.get(key) {
                Some(have) => covers(have, want),
                None => is_empty(want),
            })
        }
        (Value::Array(live), Value::Array(desired))
            if !desired.is_empty() && desired.iter().all(Value::is_object) =>
        {
            desired.iter().all(|want| live.iter().any(|have| covers(have, want)))
        }
        (Value::Null, want) => is_empty(want),
        (have, want) => have == want,
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.values().all(is_empty),
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use serde_json::json;

    use super::*;
    use crate::databasecluster::types::DatabaseClusterSpec;
    use crate::databasecluster::validation::validate_spec;

    const PASSWORD: &str = "Xq7:p@ss/w0rd%UNIQUE";

    fn cluster() -> DatabaseCluster {
        let mut cluster = DatabaseCluster::new(
            "production-postgres",
            DatabaseClusterSpec {
                replicas: 3,
                version: "15.4".into(),
                storage_size: "1Gi".into(),
                backup_schedule: None,
                postgres_config: None,
            },
        );
        cluster.metadata.namespace = Some("default".into());
        cluster.metadata.uid = Some("8d3c2c0e-uid".into());
        cluster
    }

    fn owner() -> Owner {
        Owner::of(&cluster()).unwrap()
    }

    fn statefulset_for(cluster: &DatabaseCluster) -> StatefulSet {
        build_statefulset(&Owner::of(cluster).unwrap(), &validate_spec(&cluster.spec).unwrap())
    }

    fn statefulset() -> StatefulSet {
        statefulset_for(&cluster())
    }

    fn container(sts: &StatefulSet) -> &Container {
        let containers = &sts.spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers;
        assert_eq!(containers.len(), 1);
        &containers[0]
    }

    fn env<'a>(container: &'a Container, name: &str) -> &'a EnvVar {
        container.env.iter().flatten().find(|e| e.name == name).unwrap_or_else(|| panic!("no env {name}"))
    }

    fn children() -> Vec<(&'static str, ObjectMeta, Value)> {
        let service = build_headless_service(&owner());
        let secret = build_app_secret(&owner(), PASSWORD);
        let sts = statefulset();
        vec![
            ("Service", service.metadata.clone(), serde_json::to_value(&service).unwrap()),
            ("Secret", secret.metadata.clone(), serde_json::to_value(&secret).unwrap()),
            ("StatefulSet", sts.metadata.clone(), serde_json::to_value(&sts).unwrap()),
        ]
    }

    #[test]
    fn an_owner_needs_the_name_namespace_and_uid_the_server_assigned() {
        let mut cluster = cluster();
        cluster.metadata.uid = None;
        assert_eq!(Owner::of(&cluster), Err(OwnerError::MissingMetadata("uid")));
        cluster.metadata.namespace = None;
        assert_eq!(Owner::of(&cluster), Err(OwnerError::MissingMetadata("namespace")));
    }

    #[test]
    fn every_child_has_a_blocking_controller_reference_to_the_cluster() {
        for (kind, meta, _) in children() {
            let references = meta.owner_references.unwrap();
            assert_eq!(
                references,
                vec![OwnerReference {
                    api_version: "databases.madmmas.dev/v1alpha1".into(),
                    kind: "DatabaseCluster".into(),
                    name: "production-postgres".into(),
                    uid: "8d3c2c0e-uid".into(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }],
                "{kind}"
            );
            assert_eq!(meta.namespace.as_deref(), Some("default"), "{kind}");
        }
    }

    #[test]
    fn every_child_carries_the_recommended_labels() {
        let expected = BTreeMap::from([
            ("app.kubernetes.io/name".to_owned(), "postgresql".to_owned()),
            ("app.kubernetes.io/instance".to_owned(), "production-postgres".to_owned()),
            ("app.kubernetes.io/component".to_owned(), "database".to_owned()),
            ("app.kubernetes.io/managed-by".to_owned(), "dbcluster-operator".to_owned()),
        ]);
        for (kind, meta, _) in children() {
            assert_eq!(meta.labels.as_ref(), Some(&expected), "{kind}");
        }
    }

    #[test]
    fn children_are_named_after_the_cluster() {
        let names: Vec<_> = children().into_iter().map(|(_, meta, _)| meta.name.unwrap()).collect();
        assert_eq!(names, ["production-postgres", "production-postgres-app", "production-postgres"]);
    }

    #[test]
    fn the_service_is_headless_on_5432_and_publishes_unready_pods() {
        let service = build_headless_service(&owner());
        let spec = service.spec.unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        assert_eq!(spec.publish_not_ready_addresses, Some(true));
        let ports = spec.ports.unwrap();
        assert_eq!(ports.len(), 1);
        assert_eq!((ports[0].name.as_deref(), ports[0].port), (Some("postgres"), 5432));
        assert_eq!(spec.selector, Some(selector_labels(&owner())));
    }

    #[test]
    fn the_statefulset_is_governed_by_the_headless_service() {
        let sts = statefulset();
        assert_eq!(sts.spec.unwrap().service_name, build_headless_service(&owner()).metadata.name);
    }

    #[test]
    fn the_selector_matches_the_pod_labels_and_holds_no_version() {
        let sts = statefulset();
        let spec = sts.spec.unwrap();
        let selector = spec.selector.match_labels.unwrap();
        let pod_labels = spec.template.metadata.unwrap().labels.unwrap();
        assert!(selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)));
        assert_eq!(pod_labels.get(label::VERSION).map(String::as_str), Some("15.4"));
        assert!(!selector.contains_key(label::VERSION));
        assert_eq!(selector, selector_labels(&owner()));
    }

    #[test]
    fn the_statefulset_runs_the_spec_replicas_and_version() {
        let sts = statefulset();
        assert_eq!(sts.spec.as_ref().unwrap().replicas, Some(3));
        let container = container(&sts);
        assert_eq!(container.name, "postgres");
        assert_eq!(container.image.as_deref(), Some("postgres:15.4"));
        let port = &container.ports.as_ref().unwrap()[0];
        assert_eq!((port.name.as_deref(), port.container_port), (Some("postgres"), 5432));
    }

    #[test]
    fn the_data_volume_claim_has_the_canonical_storage_size() {
        let mut cluster = cluster();
        cluster.spec.storage_size = "1.5Gi".into();
        let sts = statefulset_for(&cluster);
        let claims = sts.spec.unwrap().volume_claim_templates.unwrap();
        assert_eq!(claims.len(), 1);
        assert_eq!(claims[0].metadata.name.as_deref(), Some("data"));
        let spec = claims[0].spec.as_ref().unwrap();
        assert_eq!(spec.access_modes, Some(vec!["ReadWriteOnce".to_owned()]));
        let storage = &spec.resources.as_ref().unwrap().requests.as_ref().unwrap()["storage"];
        assert_eq!(storage, &Quantity("1536Mi".into()));
    }

    #[test]
    fn pgdata_is_a_subdirectory_of_the_data_mount() {
        let sts = statefulset();
        let container = container(&sts);
        let mount = &container.volume_mounts.as_ref().unwrap()[0];
        assert_eq!(mount.name, "data");
        let pgdata = env(container, "PGDATA").value.clone().unwrap();
        let relative = pgdata.strip_prefix(&format!("{}/", mount.mount_path)).unwrap();
        assert!(!relative.is_empty() && !relative.contains('/'), "{pgdata}");
    }

    #[test]
    fn credentials_come_from_the_app_secret() {
        let sts = statefulset();
        let container = container(&sts);
        for (variable, key) in [("POSTGRES_PASSWORD", "password"), ("POSTGRES_USER", "username")] {
            let var = env(container, variable);
            assert_eq!(var.value, None, "{variable} must not be a literal");
            let selector = var.value_from.as_ref().unwrap().secret_key_ref.as_ref().unwrap();
            assert_eq!((selector.name.as_str(), selector.key.as_str()), ("production-postgres-app", key));
        }
    }

    #[test]
    fn the_probes_check_postgres_itself() {
        let sts = statefulset();
        let container = container(&sts);
        let readiness = container.readiness_probe.as_ref().unwrap();
        let command = readiness.exec.as_ref().unwrap().command.as_ref().unwrap();
        assert_eq!(command[..5], ["pg_isready", "-U", "postgres", "-d", "postgres"]);
        assert_eq!((readiness.initial_delay_seconds, readiness.period_seconds), (Some(10), Some(5)));
        let startup = container.startup_probe.as_ref().unwrap();
        assert_eq!(startup.exec.as_ref().unwrap().command.as_ref(), Some(command));
        assert!(startup.period_seconds.unwrap() * startup.failure_threshold.unwrap() >= 300);
        let liveness = container.liveness_probe.as_ref().unwrap();
        assert_eq!(
            liveness.tcp_socket.as_ref().unwrap().port,
            IntOrString::String("postgres".into()),
            "liveness checks the port, so a slow server is not killed"
        );
    }

    #[test]
    fn the_container_has_requests_and_limits() {
        let sts = statefulset();
        let resources = container(&sts).resources.clone().unwrap();
        for quantities in [resources.requests.unwrap(), resources.limits.unwrap()] {
            assert_eq!(quantities.keys().collect::<Vec<_>>(), ["cpu", "memory"]);
        }
    }

    #[test]
    fn pods_run_as_non_root_with_an_fs_group() {
        let sts = statefulset();
        let pod = sts.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
        let context = pod.security_context.as_ref().unwrap();
        assert_eq!(context.run_as_non_root, Some(true));
        assert!(context.run_as_user.is_some_and(|uid| uid != 0));
        assert!(context.fs_group.is_some());
        let container_context = container(&sts).security_context.as_ref().unwrap();
        assert_eq!(container_context.allow_privilege_escalation, Some(false));
        assert_eq!(container_context.capabilities.as_ref().unwrap().drop, Some(vec!["ALL".to_owned()]));
    }

    #[test]
    fn postgres_config_becomes_sorted_server_arguments() {
        let sts = statefulset();
        assert_eq!(container(&sts).args, Some(Vec::new()));
        let mut cluster = cluster();
        cluster.spec.postgres_config = Some(BTreeMap::from([
            ("shared_buffers".to_owned(), "256MB".to_owned()),
            ("max_connections".to_owned(), "200".to_owned()),
        ]));
        let sts = statefulset_for(&cluster);
        assert_eq!(
            container(&sts).args.as_deref().unwrap(),
            ["-c", "max_connections=200", "-c", "shared_buffers=256MB"]
        );
    }

    #[test]
    fn the_app_secret_holds_the_connection_details() {
        let secret = build_app_secret(&owner(), PASSWORD);
        assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/basic-auth"));
        assert_eq!(secret.string_data, None);
        let data: BTreeMap<String, String> =
            secret.data.unwrap().into_iter().map(|(k, v)| (k, String::from_utf8(v.0).unwrap())).collect();
        let host = "production-postgres-0.production-postgres.default.svc";
        assert_eq!(
            data,
            BTreeMap::from([
                ("username".to_owned(), "postgres".to_owned()),
                ("password".to_owned(), PASSWORD.to_owned()),
                ("host".to_owned(), host.to_owned()),
                ("port".to_owned(), "5432".to_owned()),
                ("dbname".to_owned(), "postgres".to_owned()),
                (
                    "uri".to_owned(),
                    format!("postgresql://postgres:Xq7%3Ap%40ss%2Fw0rd%25UNIQUE@{host}:5432/postgres")
                ),
            ])
        );
    }

    #[test]
    fn the_password_is_read_back_from_a_live_secret() {
        let secret = build_app_secret(&owner(), PASSWORD);
        assert_eq!(app_secret_password(&secret).as_deref(), Some(PASSWORD));
        assert_eq!(app_secret_password(&Secret::default()), None);
        let mut empty = secret.clone();
        empty.data.as_mut().unwrap().insert("password".into(), ByteString(Vec::new()));
        assert_eq!(app_secret_password(&empty), None, "an empty password is no password");
    }

    #[test]
    fn no_password_appears_anywhere_but_the_secret() {
        let encoded = STANDARD.encode(PASSWORD);
        for (kind, _, json) in children() {
            let text = json.to_string();
            assert!(!text.contains("changeme"), "{kind}");
            if kind == "Secret" {
                assert!(text.contains(&encoded));
            } else {
                assert!(!text.contains(PASSWORD) && !text.contains(&encoded), "{kind} leaks the password");
            }
        }
    }

    #[test]
    fn builders_are_deterministic() {
        assert_eq!(
            serde_json::to_string(&statefulset()).unwrap(),
            serde_json::to_string(&statefulset()).unwrap()
        );
        assert_eq!(
            children().into_iter().map(|c| c.2).collect::<Vec<_>>(),
            children().into_iter().map(|c| c.2).collect::<Vec<_>>()
        );
    }

    /// The desired StatefulSet as a server would return it: with identity, defaults, other
    /// managers' fields and status added.
    fn as_stored(sts: &StatefulSet) -> Value {
        let mut live = serde_json::to_value(sts).unwrap();
        live["metadata"]["uid"] = json!("sts-uid");
        live["metadata"]["resourceVersion"] = json!("42");
        live["metadata"]["generation"] = json!(1);
        live["metadata"]["annotations"] = json!({"team.example.com/owner": "payments"});
        live["metadata"]["labels"]["team"] = json!("payments");
        live["spec"]["podManagementPolicy"] = json!("OrderedReady");
        live["spec"]["revisionHistoryLimit"] = json!(10);
        live["spec"]["updateStrategy"] = json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}});
        let pod = &mut live["spec"]["template"]["spec"];
        pod["restartPolicy"] = json!("Always");
        pod["dnsPolicy"] = json!("ClusterFirst");
        let container = &mut pod["containers"][0];
        container["imagePullPolicy"] = json!("IfNotPresent");
        container["terminationMessagePath"] = json!("/dev/termination-log");
        container["readinessProbe"]["successThreshold"] = json!(1);
        container["env"].as_array_mut().unwrap().push(json!({"name": "TZ", "value": "UTC"}));
        pod["containers"].as_array_mut().unwrap().push(json!({"name": "exporter", "image": "exporter:1"}));
        live["spec"]["volumeClaimTemplates"][0]["spec"]["volumeMode"] = json!("Filesystem");
        live["spec"]["volumeClaimTemplates"][0]["status"] = json!({"phase": "Pending"});
        live["status"] = json!({"replicas": 3, "readyReplicas": 3});
        live
    }

    fn stored(value: Value) -> StatefulSet {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn nothing_needs_writing_when_only_others_fields_differ() {
        let desired = statefulset();
        assert!(!needs_update(&desired, &desired));
        assert!(!needs_update(&desired, &stored(as_stored(&desired))));
    }

    #[test]
    fn drift_in_an_owned_field_needs_a_write() {
        let desired = statefulset();
        let drifted = |edit: &dyn Fn(&mut Value)| {
            let mut live = as_stored(&desired);
            edit(&mut live);
            needs_update(&desired, &stored(live))
        };
        assert!(drifted(&|live| live["spec"]["replicas"] = json!(5)), "replicas");
        assert!(drifted(
            &|live| live["spec"]["template"]["spec"]["containers"][0]["image"] = json!("postgres:15.5")
        ));
        assert!(drifted(&|live| live["metadata"]["labels"]["app.kubernetes.io/instance"] = json!("other")));
        assert!(drifted(&|live| {
            live["metadata"]["labels"].as_object_mut().unwrap().remove("app.kubernetes.io/component");
        }));
        assert!(drifted(&|live| {
            live["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["exec"]["command"] =
                json!(["pg_isready"])
        }));
        assert!(drifted(&|live| {
            live["spec"]["template"]["spec"]["containers"][0]["env"] =
                json!([{"name": "PGDATA", "value": "/x"}])
        }));
        assert!(drifted(&|live| {
            live["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] = json!("1Gi")
        }));
        assert!(drifted(&|live| live["metadata"]["ownerReferences"] = json!([])));
    }

    #[test]
    fn removing_postgres_config_needs_a_write() {
        let mut configured = cluster();
        configured.spec.postgres_config = Some(BTreeMap::from([("work_mem".to_owned(), "8MB".to_owned())]));
        let live = stored(as_stored(&statefulset_for(&configured)));
        let desired = statefulset();
        assert!(needs_update(&desired, &live), "the old -c arguments must be removed");
        let mut without_args = as_stored(&desired);
        without_args["spec"]["template"]["spec"]["containers"][0].as_object_mut().unwrap().remove("args");
        assert!(!needs_update(&desired, &stored(without_args)), "the server drops an empty args list");
    }

    #[test]
    fn scalar_lists_must_match_in_order() {
        let desired = json!({"command": ["a", "b"]});
        assert!(covers(&json!({"command": ["a", "b"]}), &desired));
        assert!(!covers(&json!({"command": ["b", "a"]}), &desired));
        assert!(!covers(&json!({"command": ["a", "b", "c"]}), &desired));
    }

    #[test]
    fn empty_desired_values_match_absent_fields() {
        assert!(covers(&json!({}), &json!({"a": null, "b": [], "c": {}, "d": "", "e": false, "f": 0})));
        assert!(!covers(&json!({}), &json!({"a": true})));
        assert!(!covers(&json!({"a": {}}), &json!({"a": {"b": 1}})));
    }

    #[test]
    fn secrets_compare_equal_when_the_password_is_reused() {
        let desired = build_app_secret(&owner(), PASSWORD);
        let mut live = serde_json::to_value(&desired).unwrap();
        live["metadata"]["annotations"] = json!({"reflector/enabled": "true"});
        let live: Secret = serde_json::from_value(live).unwrap();
        assert!(!needs_update(&desired, &live));
        let regenerated = build_app_secret(&owner(), "another");
        assert!(needs_update(&regenerated, &live));
    }

    #[test]
    fn an_existing_statefulset_keeps_its_volume_claim_templates() {
        let live = stored(as_stored(&statefulset()));
        let mut larger = cluster();
        larger.spec.storage_size = "2Gi".into();
        let mut desired = statefulset_for(&larger);
        assert!(needs_update(&desired, &live), "the claim template differs");
        keep_immutable_fields(&mut desired, &live);
        assert_eq!(
            desired.spec.as_ref().unwrap().volume_claim_templates,
            live.spec.as_ref().unwrap().volume_claim_templates
        );
        assert!(!needs_update(&desired, &live));
    }

    #[test]
    fn another_controllers_object_is_recognised() {
        let owner = owner();
        let mut meta = build_headless_service(&owner).metadata;
        assert_eq!(foreign_controller(&meta, &owner), None);
        let other = OwnerReference { uid: "other".into(), ..owner.reference().clone() };
        meta.owner_references = Some(vec![other.clone()]);
        assert_eq!(foreign_controller(&meta, &owner), Some(&other));
        meta.owner_references = Some(vec![OwnerReference { controller: None, ..other }]);
        assert_eq!(foreign_controller(&meta, &owner), None, "a plain owner is not a controller");
    }
}
