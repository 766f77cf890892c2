//! Pure builders of a DatabaseCluster's children. Whether a live child needs a write is decided in
//! `drift`.
//!
//! Children built here: the headless Service `<name>` (the StatefulSet's `serviceName`) and the
//! StatefulSet `<name>`; the others are built in [`crate::databasecluster::specs::config`] (ConfigMap),
//! [`crate::databasecluster::specs::credentials`] (Secrets) and [`crate::databasecluster::specs::services`] (client Services, PDB). Each carries the
//! `app.kubernetes.io` labels and a controller ownerReference to the cluster (`controller` and
//! `blockOwnerDeletion` both true), so the garbage collector deletes it with the cluster.
//!
//! # Writing children without clobbering anyone else's fields
//!
//! A builder returns **exactly the fields the operator owns**, nothing defaulted and nothing
//! copied from the live object (except what `drift::keep_immutable_fields` copies). Reconcile
//! writes that object with **server-side apply**, field manager [`FIELD_MANAGER`], `force = true`
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
//! Either way, reconcile writes only when `drift::needs_update` says the live object differs from
//! the desired one in a field the operator owns, so a pass over an unchanged cluster makes no
//! write (and triggers no watch event, so no further pass).
//!
//! The Secrets are the exception to "apply whenever": a password must never change. When the
//! cache holds no login Secret, reconcile draws a password and **creates** the Secret (POST, not
//! apply); `409 AlreadyExists` means the cache lagged behind an earlier pass, and reconcile reads
//! the live Secret once instead of overwriting it. When the Secret exists, reconcile rebuilds it
//! with the password read back by [`crate::databasecluster::specs::credentials::secret_password`] and applies it like any
//! other child.
//! (Reconcile creates every absent child with POST the same way, so `result=created` and the
//! `Created…` Event are reported exactly once.)

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetSpec, StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource, EnvVar,
    EnvVarSource, ObjectFieldSelector, PersistentVolumeClaim, PersistentVolumeClaimSpec, PodAffinityTerm,
    PodAntiAffinity, PodSecurityContext, PodSpec, PodTemplateSpec, ResourceRequirements, SeccompProfile,
    SecretVolumeSource, SecurityContext, Service, ServicePort, ServiceSpec, Volume, VolumeMount,
    VolumeResourceRequirements, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Resource;

use crate::databasecluster::api::types::{DatabaseCluster, PvcRetention};
use crate::databasecluster::api::validation::{StorageSize, ValidSpec};
use crate::databasecluster::objectstore;
use crate::databasecluster::specs::config::{CONFIG_MOUNT_PATH, config_map_name, restart_hash};
use crate::databasecluster::specs::credentials::{APP_DATABASE, Login, mounted_secret_name};
use crate::databasecluster::specs::instance_pod::{
    CUSTOM_QUERIES_ANNOTATION, METRICS_PORT, STATUS_PORT, controller_volume, custom_queries_annotation,
    custom_queries_env, custom_queries_mount, custom_queries_volume, install_container, liveness_probe,
    manager_command, manager_mounts, manager_ports, readiness_probe, startup_probe, status_token_volume,
};
use crate::runtime::object::{Object, OwnerRef};

pub use crate::databasecluster::specs::names::{
    FIELD_MANAGER, Owner, OwnerError, POSTGRES_PORT, RESTARTED_AT_ANNOTATION, child_metadata,
    headless_service_name, label, selector_labels, standard_labels, statefulset_name,
};

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
/// The uid and gid of `postgres` in the official image; the pods run as them, never as root.
const POSTGRES_UID: i64 = 999;

/// [`Owner`] is in `names.rs`, a leaf; making one reads a `DatabaseCluster`, so it is here.
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
        let restarted_at = meta.annotations.as_ref().and_then(|a| a.get(RESTARTED_AT_ANNOTATION)).cloned();
        Ok(Owner { name, namespace, reference, restarted_at })
    }
}

/// The controller ownerReference on `meta` that is not `owner`'s, if any: such an object belongs
/// to someone else and must not be taken over.
pub fn foreign_controller<'a, O: Object + ?Sized>(object: &'a O, owner: &Owner) -> Option<OwnerRef<'a>> {
    object.controller_owner().filter(|reference| reference.uid != owner.reference.uid)
}

/// Port 5432 of every Service of the cluster, to the pods' `postgres` port.
pub fn postgres_service_port() -> ServicePort {
    ServicePort {
        name: Some(POSTGRES_PORT_NAME.to_owned()),
        port: POSTGRES_PORT,
        target_port: Some(IntOrString::String(POSTGRES_PORT_NAME.to_owned())),
        protocol: Some("TCP".to_owned()),
        ..ServicePort::default()
    }
}

/// The headless Service that gives each pod a stable DNS name; it publishes pods before they are
/// ready so that instances can find each other while starting.
pub fn build_headless_service(owner: &Owner) -> Service {
    Service {
        metadata: child_metadata(owner, headless_service_name(&owner.name)),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_owned()),
            selector: Some(selector_labels(owner)),
            ports: Some(vec![postgres_service_port()]),
            publish_not_ready_addresses: Some(true),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// Where the Secrets are mounted: one directory per login ([`Login::mount_dir`]).
pub const SECRETS_MOUNT_PATH: &str = "/etc/dbcluster-secrets";
/// The pod's private run directory (emptyDir): the server's Unix socket and the pgpass file.
pub const RUN_MOUNT_PATH: &str = "/run/dbcluster";
/// The init container that makes the data directory hold the instance's data in its role.
pub const BOOTSTRAP_CONTAINER: &str = "bootstrap";
/// Pod template annotation: the hash of the parameters that need a restart, so that changing one
/// rolls the instances.
pub const RESTART_CONFIG_ANNOTATION: &str = "databases.madmmas.dev/restart-config";
/// Long enough for a fast shutdown's checkpoint.
const TERMINATION_GRACE_SECONDS: i64 = 60;

/// The StatefulSet running `spec.replicas` instances of image `postgres:<version>` under the
/// instance manager (`crate::instance`): the init container `install-manager` (the operator's
/// image) copies the operator's binary into the `controller` emptyDir, the init container
/// `bootstrap` runs `instance init` and the container `postgres` runs `instance run` from there,
/// with a `data` volume of `storageSize`, the ConfigMap, the three login Secrets and the status
/// token mounted, HTTP probes on the manager's `status` port ([`super::instance_pod`]), and the
/// restricted Pod Security profile.
///
/// `updateStrategy: OnDelete`: the StatefulSet controller never replaces a pod on its own; the
/// operator deletes outdated pods one at a time, standbys first and the primary last
/// ([`crate::databasecluster::instances::roll`]).
pub fn build_statefulset(owner: &Owner, spec: &ValidSpec) -> StatefulSet {
    let mut pod_labels = standard_labels(owner);
    pod_labels.insert(label::VERSION.to_owned(), spec.version.as_str().to_owned());
    let mut annotations = BTreeMap::from([
        (RESTART_CONFIG_ANNOTATION.to_owned(), restart_hash(&spec.postgres_config)),
        (CUSTOM_QUERIES_ANNOTATION.to_owned(), custom_queries_annotation(spec.custom_queries.as_ref())),
    ]);
    if let Some(at) = &owner.restarted_at {
        annotations.insert(RESTARTED_AT_ANNOTATION.to_owned(), at.clone());
    }
    let retention = spec.pvc_retention.as_str().to_owned();
    // Hibernation (zero replicas) is a scale down that must keep every volume, whatever the policy.
    let when_scaled =
        if spec.replicas == 0 { PvcRetention::Retain.as_str().to_owned() } else { retention.clone() };
    StatefulSet {
        metadata: child_metadata(owner, statefulset_name(&owner.name)),
        spec: Some(StatefulSetSpec {
            replicas: Some(spec.replicas),
            service_name: Some(headless_service_name(&owner.name)),
            selector: LabelSelector {
                match_labels: Some(selector_labels(owner)),
                ..LabelSelector::default()
            },
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("OnDelete".to_owned()),
                ..StatefulSetUpdateStrategy::default()
            }),
            persistent_volume_claim_retention_policy: Some(StatefulSetPersistentVolumeClaimRetentionPolicy {
                when_deleted: Some(retention),
                when_scaled: Some(when_scaled),
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    annotations: Some(annotations),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    security_context: Some(restricted_pod_security()),
                    init_containers: Some(vec![
                        install_container(restricted_security_context()),
                        bootstrap_container(owner, spec),
                    ]),
                    containers: vec![postgres_container(owner, spec)],
                    volumes: Some(pod_volumes(owner, spec)),
                    termination_grace_period_seconds: Some(TERMINATION_GRACE_SECONDS),
                    affinity: Some(spread_over_nodes(owner)),
                    ..PodSpec::default()
                }),
            },
            volume_claim_templates: Some(vec![data_volume_claim(owner, spec)]),
            ..StatefulSetSpec::default()
        }),
        ..StatefulSet::default()
    }
}

/// Soft anti-affinity: prefer one instance per node, but run anyway when nodes are few.
fn spread_over_nodes(owner: &Owner) -> Affinity {
    Affinity {
        pod_anti_affinity: Some(PodAntiAffinity {
            preferred_during_scheduling_ignored_during_execution: Some(vec![WeightedPodAffinityTerm {
                weight: 100,
                pod_affinity_term: PodAffinityTerm {
                    label_selector: Some(LabelSelector {
                        match_labels: Some(selector_labels(owner)),
                        ..LabelSelector::default()
                    }),
                    topology_key: "kubernetes.io/hostname".to_owned(),
                    ..PodAffinityTerm::default()
                },
            }]),
            ..PodAntiAffinity::default()
        }),
        ..Affinity::default()
    }
}

const CONFIG_VOLUME: &str = "config";
const RUN_VOLUME: &str = "run";
const TMP_VOLUME: &str = "tmp";

fn secret_volume_name(login: Login) -> String {
    format!("secret-{}", login.mount_dir())
}

fn pod_volumes(owner: &Owner, spec: &ValidSpec) -> Vec<Volume> {
    let mut volumes = vec![Volume {
        name: CONFIG_VOLUME.to_owned(),
        config_map: Some(ConfigMapVolumeSource {
            name: config_map_name(&owner.name),
            default_mode: Some(0o444),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    }];
    for login in Login::ALL {
        volumes.push(Volume {
            name: secret_volume_name(login),
            secret: Some(SecretVolumeSource {
                secret_name: Some(mounted_secret_name(login, &owner.name, spec.app_secret_name.as_deref())),
                // Readable by the pod's group (fsGroup) only.
                default_mode: Some(0o440),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
    }
    volumes.push(status_token_volume(&owner.name));
    volumes.extend(crate::databasecluster::tls::pods::instance_volumes(
        &owner.name,
        spec.server_certificate.as_ref(),
        spec.client_certificates.as_ref(),
    ));
    volumes.push(controller_volume());
    volumes.extend(spec.custom_queries.as_ref().map(custom_queries_volume));
    volumes.extend(object_store(spec).map(objectstore::pod::volumes).unwrap_or_default());
    for name in [RUN_VOLUME, TMP_VOLUME] {
        volumes.push(Volume {
            name: name.to_owned(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        });
    }
    volumes
}

fn volume_mounts(spec: &ValidSpec) -> Vec<VolumeMount> {
    let mount = |name: &str, path: &str, read_only: bool| VolumeMount {
        name: name.to_owned(),
        mount_path: path.to_owned(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    };
    let mut mounts = vec![
        mount(DATA_VOLUME, DATA_MOUNT_PATH, false),
        mount(CONFIG_VOLUME, CONFIG_MOUNT_PATH, true),
        mount(RUN_VOLUME, RUN_MOUNT_PATH, false),
        mount(TMP_VOLUME, "/tmp", false),
    ];
    for login in Login::ALL {
        let path = format!("{SECRETS_MOUNT_PATH}/{}", login.mount_dir());
        mounts.push(mount(&secret_volume_name(login), &path, true));
    }
    mounts.extend(manager_mounts(SECRETS_MOUNT_PATH));
    mounts.extend(crate::databasecluster::tls::pods::instance_mounts(
        SECRETS_MOUNT_PATH,
        spec.client_certificates.as_ref(),
    ));
    mounts.extend(spec.custom_queries.as_ref().map(|_| custom_queries_mount()));
    mounts.extend(
        object_store(spec).map(|s| objectstore::pod::mounts(s, SECRETS_MOUNT_PATH)).unwrap_or_default(),
    );
    mounts
}

/// The environment of the instance manager (see `crate::instance::settings`).
fn instance_env(owner: &Owner, spec: &ValidSpec) -> Vec<EnvVar> {
    let value =
        |name: &str, value: String| EnvVar { name: name.to_owned(), value: Some(value), ..EnvVar::default() };
    let field = |name: &str, path: &str| EnvVar {
        name: name.to_owned(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.to_owned(),
                ..ObjectFieldSelector::default()
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    };
    let mut env = vec![
        value("PGDATA", PGDATA.to_owned()),
        field("POD_NAME", "metadata.name"),
        field("POD_IP", "status.podIP"),
        value("DBC_CONFIG", CONFIG_MOUNT_PATH.to_owned()),
        value("DBC_SECRETS", SECRETS_MOUNT_PATH.to_owned()),
        value("DBC_RUN", RUN_MOUNT_PATH.to_owned()),
        value("DBC_PEER_DOMAIN", format!("{}.{}.svc", headless_service_name(&owner.name), owner.namespace)),
        value("DBC_PORT", POSTGRES_PORT.to_string()),
        value("DBC_APP_DATABASE", APP_DATABASE.to_owned()),
        value("DBC_STATUS_PORT", STATUS_PORT.to_string()),
        value("DBC_METRICS_PORT", METRICS_PORT.to_string()),
        // `kubectl exec -it <pod> -- psql` reaches the server as the superuser over the local
        // socket (trusted in `pg_hba.conf`), which lives in the private run directory.
        value("PGHOST", RUN_MOUNT_PATH.to_owned()),
        value("PGUSER", crate::databasecluster::specs::credentials::SUPERUSER.to_owned()),
    ];
    env.extend(spec.custom_queries.as_ref().map(|_| custom_queries_env()));
    env.extend(object_store(spec).map(objectstore::pod::env).unwrap_or_default());
    env
}

/// The object store of `spec`'s backups, if one is set.
fn object_store(spec: &ValidSpec) -> Option<&crate::databasecluster::api::object_store::ValidObjectStore> {
    spec.backup.as_ref()?.object_store.as_ref()
}

/// `/controller/dbcluster-operator instance <verb>`.
fn instance_command(verb: &str) -> Vec<String> {
    manager_command(verb)
}

/// The pod security settings of the restricted Pod Security profile, as the `postgres` image's
/// user: every pod the operator makes (instances, backups, restores).
pub fn restricted_pod_security() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(POSTGRES_UID),
        run_as_group: Some(POSTGRES_UID),
        fs_group: Some(POSTGRES_UID),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".to_owned(),
            ..SeccompProfile::default()
        }),
        ..PodSecurityContext::default()
    }
}

/// The container security settings of the restricted profile, with a read-only root filesystem.
pub fn restricted_security_context() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        // Every path the instance manager and the server write is a volume: the data, the
        // socket and run directory, `/tmp`.
        read_only_root_filesystem: Some(true),
        capabilities: Some(Capabilities { drop: Some(vec!["ALL".to_owned()]), ..Capabilities::default() }),
        ..SecurityContext::default()
    }
}

fn container_resources(spec: &ValidSpec) -> ResourceRequirements {
    let quantities = |map: &Option<BTreeMap<String, String>>| {
        map.as_ref().map(|map| map.iter().map(|(k, v)| (k.clone(), Quantity(v.clone()))).collect())
    };
    ResourceRequirements {
        requests: quantities(&spec.resources.requests),
        limits: quantities(&spec.resources.limits),
        ..ResourceRequirements::default()
    }
}

fn bootstrap_container(owner: &Owner, spec: &ValidSpec) -> Container {
    Container {
        name: BOOTSTRAP_CONTAINER.to_owned(),
        image: Some(format!("postgres:{}", spec.version.as_str())),
        command: Some(instance_command("init")),
        env: Some(instance_env(owner, spec)),
        resources: Some(container_resources(spec)),
        volume_mounts: Some(volume_mounts(spec)),
        security_context: Some(restricted_security_context()),
        // A container that fails says why in its status: the log's tail when it wrote no
        // termination message (PostgreSQL's FATAL line, for a parameter it refuses).
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        ..Container::default()
    }
}

fn postgres_container(owner: &Owner, spec: &ValidSpec) -> Container {
    Container {
        name: POSTGRES_CONTAINER.to_owned(),
        image: Some(format!("postgres:{}", spec.version.as_str())),
        command: Some(instance_command("run")),
        // Explicitly empty: an older operator passed `-c` arguments here, which must go.
        args: Some(Vec::new()),
        ports: Some(
            vec![ContainerPort {
                name: Some(POSTGRES_PORT_NAME.to_owned()),
                container_port: POSTGRES_PORT,
                protocol: Some("TCP".to_owned()),
                ..ContainerPort::default()
            }]
            .into_iter()
            .chain(manager_ports())
            .collect(),
        ),
        env: Some(instance_env(owner, spec)),
        resources: Some(container_resources(spec)),
        // Ready: accepting connections in its role (out of recovery on the primary, in recovery
        // on a standby), with the credentials applied; startup and liveness: the server answers.
        // All three are the manager's HTTP endpoints, which bound their own queries (2 s), so a
        // hung server fails each attempt in time (timings in `instance_pod`).
        readiness_probe: Some(readiness_probe()),
        startup_probe: Some(startup_probe()),
        liveness_probe: Some(liveness_probe()),
        volume_mounts: Some(volume_mounts(spec)),
        security_context: Some(restricted_security_context()),
        // A container that fails says why in its status: the log's tail when it wrote no
        // termination message (PostgreSQL's FATAL line, for a parameter it refuses).
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        ..Container::default()
    }
}

fn data_volume_claim(owner: &Owner, spec: &ValidSpec) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(DATA_VOLUME.to_owned()),
            labels: Some(standard_labels(owner)),
            ..ObjectMeta::default()
        },
        spec: Some(claim_spec(&spec.storage, spec.storage_class_name.clone())),
        ..PersistentVolumeClaim::default()
    }
}

/// A `ReadWriteOnce` claim of `storage` in `class` (the cluster's default when `None`): the data
/// volumes' template and the backup volume.
pub fn claim_spec(storage: &StorageSize, class: Option<String>) -> PersistentVolumeClaimSpec {
    PersistentVolumeClaimSpec {
        access_modes: Some(vec!["ReadWriteOnce".to_owned()]),
        storage_class_name: class,
        resources: Some(VolumeResourceRequirements {
            requests: Some(BTreeMap::from([("storage".to_owned(), Quantity(storage.as_str().to_owned()))])),
            ..VolumeResourceRequirements::default()
        }),
        ..PersistentVolumeClaimSpec::default()
    }
}

#[cfg(test)]
mod tests;
