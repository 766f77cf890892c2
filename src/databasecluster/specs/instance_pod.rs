//! The pod pieces that make each PostgreSQL pod run the instance manager (`crate::instance`): the
//! operator's own binary, copied by an init container of the operator's image into an emptyDir
//! ([`CONTROLLER_MOUNT_PATH`]) that the `postgres` image's containers run it from
//! (`/controller/dbcluster-operator instance init|run`); its HTTP port ([`STATUS_PORT`], named
//! `status`) for the probes and its metrics port ([`METRICS_PORT`], named `metrics`); and the `<name>-status-token` Secret mounted at
//! `<secrets>/status/token` for `/status`; and with `spec.monitoring.customQueriesConfigMap`, that
//! ConfigMap's key as an optional volume ([`custom_queries_volume`]) whose file the manager reads
//! at each scrape (`DBC_CUSTOM_QUERIES`), with the reference in a pod template annotation
//! ([`CUSTOM_QUERIES_ANNOTATION`], empty without one) so that removing it rolls the pods too.
//!
//! The operator's image is process-wide configuration fixed at start (`run --instance-image`, env
//! `OPERATOR_IMAGE`; the Deployment sets it to its own image): [`set_instance_image`] records it
//! once and the pure builders read it with [`instance_image`]. Without it, the image of this
//! build's version.

use std::sync::OnceLock;

use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, HTTPGetAction, KeyToPath,
    Probe, ResourceRequirements, SecretVolumeSource, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::databasecluster::api::types::ConfigMapKeyRef;
use crate::databasecluster::specs::status_token::status_token_secret_name;

/// The emptyDir holding the manager's binary.
pub const CONTROLLER_VOLUME: &str = "controller";
/// Where it is mounted.
pub const CONTROLLER_MOUNT_PATH: &str = "/controller";
/// The init container copying the binary.
pub const INSTALL_CONTAINER: &str = "install-manager";
/// The manager's HTTP port in the pod.
pub const STATUS_PORT: i32 = 8000;
/// Its name on the container.
pub const STATUS_PORT_NAME: &str = "status";
/// The manager's metrics port (`/metrics`, Prometheus text).
pub const METRICS_PORT: i32 = 9187;
/// Its name on the container.
pub const METRICS_PORT_NAME: &str = "metrics";
/// The volume of the status token's Secret.
pub const STATUS_TOKEN_VOLUME: &str = "secret-status";
/// The image when none was configured.
pub const DEFAULT_INSTANCE_IMAGE: &str = concat!("dbcluster-operator:", env!("CARGO_PKG_VERSION"));

/// The volume of the custom metrics queries' ConfigMap.
pub const CUSTOM_QUERIES_VOLUME: &str = "custom-queries";
/// Where it is mounted.
pub const CUSTOM_QUERIES_MOUNT_PATH: &str = "/etc/dbcluster-monitoring";
/// The file the ConfigMap's key is projected to.
pub const CUSTOM_QUERIES_FILE: &str = "queries.yaml";
/// Pod template annotation: `<configmap>/<key>` of the custom queries, empty without any.
pub const CUSTOM_QUERIES_ANNOTATION: &str = "databases.madmmas.dev/custom-queries";

static INSTANCE_IMAGE: OnceLock<String> = OnceLock::new();

/// Records the operator's image for the pods; the first call wins (returns whether it did).
pub fn set_instance_image(image: String) -> bool {
    INSTANCE_IMAGE.set(image).is_ok()
}

/// The operator's image that the pods copy the manager from.
pub fn instance_image() -> &'static str {
    INSTANCE_IMAGE.get().map_or(DEFAULT_INSTANCE_IMAGE, String::as_str)
}

/// `/controller/dbcluster-operator instance <verb>`.
pub fn manager_command(verb: &str) -> Vec<String> {
    vec![
        format!("{CONTROLLER_MOUNT_PATH}/{}", crate::instance::BINARY_NAME),
        "instance".to_owned(),
        verb.to_owned(),
    ]
}

/// The emptyDir the binary is copied into.
pub fn controller_volume() -> Volume {
    Volume {
        name: CONTROLLER_VOLUME.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    }
}

/// The status token's Secret as a volume (readable by the pod's group only).
pub fn status_token_volume(cluster_name: &str) -> Volume {
    Volume {
        name: STATUS_TOKEN_VOLUME.to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(status_token_secret_name(cluster_name)),
            default_mode: Some(0o440),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// The mounts every container running the manager adds: the binary (read-only) and the token.
pub fn manager_mounts(secrets_mount_path: &str) -> [VolumeMount; 2] {
    [
        VolumeMount {
            name: CONTROLLER_VOLUME.to_owned(),
            mount_path: CONTROLLER_MOUNT_PATH.to_owned(),
            read_only: Some(true),
            ..VolumeMount::default()
        },
        VolumeMount {
            name: STATUS_TOKEN_VOLUME.to_owned(),
            mount_path: format!("{secrets_mount_path}/status"),
            read_only: Some(true),
            ..VolumeMount::default()
        },
    ]
}

/// The custom queries' ConfigMap key as a volume holding [`CUSTOM_QUERIES_FILE`]: optional, so a
/// missing ConfigMap or key never keeps the pod from starting (the file is then absent).
pub fn custom_queries_volume(reference: &ConfigMapKeyRef) -> Volume {
    Volume {
        name: CUSTOM_QUERIES_VOLUME.to_owned(),
        config_map: Some(ConfigMapVolumeSource {
            name: reference.name.clone(),
            items: Some(vec![KeyToPath {
                key: reference.key.clone(),
                path: CUSTOM_QUERIES_FILE.to_owned(),
                mode: None,
            }]),
            default_mode: Some(0o444),
            optional: Some(true),
        }),
        ..Volume::default()
    }
}

/// Its mount (read-only, a directory: a `subPath` mount would never see the ConfigMap change).
pub fn custom_queries_mount() -> VolumeMount {
    VolumeMount {
        name: CUSTOM_QUERIES_VOLUME.to_owned(),
        mount_path: CUSTOM_QUERIES_MOUNT_PATH.to_owned(),
        read_only: Some(true),
        ..VolumeMount::default()
    }
}

/// `DBC_CUSTOM_QUERIES`: the file the manager reads.
pub fn custom_queries_env() -> EnvVar {
    EnvVar {
        name: "DBC_CUSTOM_QUERIES".to_owned(),
        value: Some(format!("{CUSTOM_QUERIES_MOUNT_PATH}/{CUSTOM_QUERIES_FILE}")),
        ..EnvVar::default()
    }
}

/// The value of [`CUSTOM_QUERIES_ANNOTATION`].
pub fn custom_queries_annotation(reference: Option<&ConfigMapKeyRef>) -> String {
    reference.map(|r| format!("{}/{}", r.name, r.key)).unwrap_or_default()
}

/// The init container that copies the operator's binary into the emptyDir (first of all).
pub fn install_container(security: k8s_openapi::api::core::v1::SecurityContext) -> Container {
    let quantity = |cpu: &str, memory: &str| {
        Some(
            [
                ("cpu".to_owned(), Quantity(cpu.to_owned())),
                ("memory".to_owned(), Quantity(memory.to_owned())),
            ]
            .into(),
        )
    };
    Container {
        name: INSTALL_CONTAINER.to_owned(),
        image: Some(instance_image().to_owned()),
        command: Some(vec![
            crate::instance::BINARY_NAME.to_owned(),
            "instance".to_owned(),
            "copy-binary".to_owned(),
            CONTROLLER_MOUNT_PATH.to_owned(),
        ]),
        resources: Some(ResourceRequirements {
            requests: quantity("10m", "32Mi"),
            limits: quantity("500m", "128Mi"),
            ..ResourceRequirements::default()
        }),
        volume_mounts: Some(vec![VolumeMount {
            name: CONTROLLER_VOLUME.to_owned(),
            mount_path: CONTROLLER_MOUNT_PATH.to_owned(),
            ..VolumeMount::default()
        }]),
        security_context: Some(security),
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        ..Container::default()
    }
}

/// The manager's ports on the `postgres` container: `status` and `metrics`.
pub fn manager_ports() -> [ContainerPort; 2] {
    let port = |name: &str, number: i32| ContainerPort {
        name: Some(name.to_owned()),
        container_port: number,
        protocol: Some("TCP".to_owned()),
        ..ContainerPort::default()
    };
    [port(STATUS_PORT_NAME, STATUS_PORT), port(METRICS_PORT_NAME, METRICS_PORT)]
}

/// A probe of the status port, which serves TLS: `scheme: HTTPS` (a kubelet does not verify a
/// probed server's certificate).
fn http_probe(path: &str, period: i32, timeout: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_owned()),
            port: IntOrString::String(STATUS_PORT_NAME.to_owned()),
            scheme: Some("HTTPS".to_owned()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        timeout_seconds: Some(timeout),
        failure_threshold: Some(failures),
        ..Probe::default()
    }
}

/// Readiness: `/readyz` every second. The manager bounds its own query
/// ([`crate::instance::local::READINESS_LIMIT`], 1 s) under the kubelet's 2 s timeout, so a hung
/// server answers 503 in time and fails each attempt: three failures in a row, about 3 to 4 s,
/// make it unready (and start the failover clock). A stall shorter than about 2 s, or a server
/// that answers within a second however busy, stays ready.
pub fn readiness_probe() -> Probe {
    http_probe("/readyz", 1, 2, 3)
}

/// Startup: `/healthz` every second, for up to five minutes of crash recovery (or a clone).
pub fn startup_probe() -> Probe {
    http_probe("/healthz", 1, 3, 300)
}

/// Liveness: `/healthz` every 10 s; a restart only after a minute of no answer (six failures), so
/// a busy server that answers slowly now and then is left alone. The restart's grace is
/// [`LIVENESS_GRACE_SECONDS`], not the pod's minute: a server that did not answer for a minute
/// will not use a clean shutdown's time well, and a hung (stopped) one never acts on SIGTERM, so
/// the whole grace would be spent waiting for the SIGKILL (crash recovery makes the kill safe).
pub fn liveness_probe() -> Probe {
    Probe {
        termination_grace_period_seconds: Some(LIVENESS_GRACE_SECONDS),
        ..http_probe("/healthz", 10, 5, 6)
    }
}

/// The grace period of a restart the liveness probe causes, in seconds.
pub const LIVENESS_GRACE_SECONDS: i64 = 15;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hung_server_is_unready_within_four_seconds_and_recovery_gets_five_minutes() {
        let worst = |p: &Probe| p.period_seconds.unwrap() * p.failure_threshold.unwrap();
        let readiness = readiness_probe();
        // The manager answers within its own query limit; the kubelet's timeout is above that.
        let limit = crate::instance::local::READINESS_LIMIT.as_secs_f64();
        assert!(f64::from(readiness.timeout_seconds.unwrap()) > limit);
        // Each attempt fails after the manager's limit; attempts start at least a period apart.
        let per_attempt = limit.max(f64::from(readiness.period_seconds.unwrap()));
        let unready = per_attempt * f64::from(readiness.failure_threshold.unwrap() + 1);
        assert!(unready <= 4.0, "{unready}");
        assert!(readiness.failure_threshold.unwrap() >= 3, "a single slow answer is no failover");
        assert!(worst(&startup_probe()) >= 300);
        assert!(worst(&liveness_probe()) >= 60);
        for probe in [readiness, startup_probe(), liveness_probe()] {
            assert_eq!(probe.http_get.unwrap().port, IntOrString::String("status".into()));
        }
    }

    #[test]
    fn custom_queries_are_an_optional_projection_of_one_key() {
        let reference = ConfigMapKeyRef { name: "queries".into(), key: "custom.yaml".into() };
        let source = custom_queries_volume(&reference).config_map.unwrap();
        assert_eq!((source.name.as_str(), source.optional), ("queries", Some(true)));
        let items = source.items.unwrap();
        assert_eq!((items[0].key.as_str(), items[0].path.as_str()), ("custom.yaml", CUSTOM_QUERIES_FILE));
        assert_eq!(custom_queries_mount().sub_path, None, "a subPath mount never sees updates");
        assert_eq!(custom_queries_env().value.as_deref(), Some("/etc/dbcluster-monitoring/queries.yaml"));
        assert_eq!(custom_queries_annotation(Some(&reference)), "queries/custom.yaml");
        assert_eq!(custom_queries_annotation(None), "");
    }

    #[test]
    fn the_manager_runs_from_the_controller_volume() {
        assert_eq!(manager_command("run"), ["/controller/dbcluster-operator", "instance", "run"]);
        assert!(instance_image().starts_with("dbcluster-operator:"));
    }
}
