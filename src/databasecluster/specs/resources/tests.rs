//! Unit tests of `resources`.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;

use super::*;
use crate::databasecluster::fixtures::{PASSWORD, UID, owner, seed, statefulset, statefulset_for};
use crate::databasecluster::specs::credentials::build_login_secret;

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
    let secret = build_login_secret(&owner(), Login::App, PASSWORD);
    let sts = statefulset();
    vec![
        ("Service", service.metadata.clone(), serde_json::to_value(&service).unwrap()),
        ("Secret", secret.metadata.clone(), serde_json::to_value(&secret).unwrap()),
        ("StatefulSet", sts.metadata.clone(), serde_json::to_value(&sts).unwrap()),
    ]
}

#[test]
fn an_owner_needs_the_name_namespace_and_uid_the_server_assigned() {
    let mut cluster = seed();
    cluster.metadata.uid = None;
    assert_eq!(Owner::of(&cluster), Err(OwnerError::MissingMetadata("uid")));
    cluster.metadata.namespace = None;
    assert_eq!(Owner::of(&cluster), Err(OwnerError::MissingMetadata("namespace")));
}

/// A restart request reaches the pod template, so it makes a new revision (and only then).
#[test]
fn a_restart_request_is_a_new_pod_template() {
    let spec = crate::databasecluster::api::validation::validate_spec(&seed().spec).unwrap();
    let template_annotations = |cluster: &DatabaseCluster| {
        let sts = build_statefulset(&Owner::of(cluster).unwrap(), &spec);
        sts.spec.unwrap().template.metadata.unwrap().annotations.unwrap()
    };
    let mut cluster = seed();
    assert!(!template_annotations(&cluster).contains_key(RESTARTED_AT_ANNOTATION));
    cluster.metadata.annotations =
        Some(BTreeMap::from([(RESTARTED_AT_ANNOTATION.to_owned(), "2026-12-07T12:00:00Z".to_owned())]));
    assert_eq!(template_annotations(&cluster)[RESTARTED_AT_ANNOTATION], "2026-12-07T12:00:00Z");
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
                uid: UID.into(),
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
    let sts = statefulset();
    let pod = sts.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let config = pod.volumes.as_ref().unwrap().iter().find(|v| v.name == "config").unwrap();
    assert_eq!(config.config_map.as_ref().unwrap().name, "production-postgres-scripts");
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
    let mut cluster = seed();
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
fn credentials_are_mounted_from_the_login_secrets_never_in_env() {
    let sts = statefulset();
    let pod = sts.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let secrets: Vec<(&str, i32)> = pod
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| v.secret.as_ref())
        .map(|s| (s.secret_name.as_deref().unwrap(), s.default_mode.unwrap()))
        .collect();
    assert_eq!(
        secrets,
        [
            ("production-postgres-superuser", 0o440),
            ("production-postgres-replication", 0o440),
            ("production-postgres-app", 0o440),
            ("production-postgres-status-token", 0o440),
            // The certificates: the server's, its CA (in the same Secret) and the replication
            // client's; never the CA's own Secret.
            ("production-postgres-server", 0o440),
            ("production-postgres-server", 0o440),
            ("production-postgres-replication-client", 0o440)
        ]
    );
    let install = &pod.init_containers.as_ref().unwrap()[0];
    assert!(install.volume_mounts.iter().flatten().all(|m| m.name == "controller"), "no Secret in the copy");
    for container in pod.init_containers.iter().flatten().skip(1).chain(&pod.containers) {
        assert!(
            container
                .env
                .iter()
                .flatten()
                .all(|e| e.value_from.as_ref().is_none_or(|v| v.secret_key_ref.is_none()))
        );
        let mounts: Vec<&str> =
            container.volume_mounts.iter().flatten().map(|m| m.mount_path.as_str()).collect();
        assert!(mounts.contains(&"/etc/dbcluster-secrets/app"), "{mounts:?}");
    }
    let mut own = seed();
    own.spec.app_secret_name = Some("team-db-credentials".into());
    let sts = statefulset_for(&own);
    let pod = sts.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    assert!(
        pod.volumes
            .iter()
            .flatten()
            .any(|v| v.secret.as_ref().and_then(|s| s.secret_name.as_deref()) == Some("team-db-credentials"))
    );
}

#[test]
fn pods_run_the_instance_manager_copied_from_the_operators_image() {
    let sts = statefulset();
    let spec = sts.spec.as_ref().unwrap();
    assert_eq!(spec.update_strategy.as_ref().unwrap().type_.as_deref(), Some("OnDelete"));
    let pod = spec.template.spec.as_ref().unwrap();
    let [install, init] = pod.init_containers.as_deref().unwrap() else { panic!("two init containers") };
    assert_eq!(install.image.as_deref(), Some(crate::databasecluster::specs::instance_pod::instance_image()));
    assert_eq!(
        install.command.as_deref().unwrap(),
        ["dbcluster-operator", "instance", "copy-binary", "/controller"]
    );
    assert_eq!(init.command.as_deref().unwrap(), ["/controller/dbcluster-operator", "instance", "init"]);
    assert_eq!(
        container(&sts).command.as_deref().unwrap(),
        ["/controller/dbcluster-operator", "instance", "run"]
    );
    assert_eq!(init.image, container(&sts).image);
    for c in [install, init, container(&sts)] {
        let context = c.security_context.as_ref().unwrap();
        assert_eq!(context.read_only_root_filesystem, Some(true), "{}", c.name);
        let controller = c.volume_mounts.iter().flatten().find(|m| m.mount_path == "/controller").unwrap();
        assert_eq!(controller.read_only.is_some(), c.name != "install-manager", "only the copy writes it");
    }
    assert_eq!(pod.termination_grace_period_seconds, Some(60));
    let anti = pod.affinity.as_ref().unwrap().pod_anti_affinity.as_ref().unwrap();
    assert!(anti.required_during_scheduling_ignored_during_execution.is_none(), "soft only");
    assert_eq!(anti.preferred_during_scheduling_ignored_during_execution.as_ref().unwrap().len(), 1);
    let names: Vec<&str> = env_names(container(&sts));
    for name in ["PGDATA", "POD_NAME", "POD_IP", "DBC_CONFIG", "DBC_SECRETS", "DBC_RUN", "DBC_PEER_DOMAIN"] {
        assert!(names.contains(&name), "{name}");
    }
    assert_eq!(
        env(container(&sts), "PGHOST").value.as_deref(),
        Some(RUN_MOUNT_PATH),
        "psql finds the socket"
    );
    assert_eq!(env(container(&sts), "PGUSER").value.as_deref(), Some("postgres"));
    assert_eq!(
        env(container(&sts), "DBC_PEER_DOMAIN").value.as_deref(),
        Some("production-postgres.default.svc")
    );
}

fn env_names(container: &Container) -> Vec<&str> {
    container.env.iter().flatten().map(|e| e.name.as_str()).collect()
}

#[test]
fn retention_storage_class_and_resources_come_from_the_spec() {
    let mut custom = seed();
    custom.spec.pvc_retention = Some(PvcRetention::Delete);
    custom.spec.storage_class_name = Some("fast".into());
    custom.spec.resources = Some(crate::databasecluster::api::types::ResourceRequirements {
        requests: Some(BTreeMap::from([("memory".to_owned(), "1Gi".to_owned())])),
        limits: None,
    });
    let sts = statefulset_for(&custom);
    let spec = sts.spec.as_ref().unwrap();
    let policy = spec.persistent_volume_claim_retention_policy.as_ref().unwrap();
    assert_eq!(
        (policy.when_deleted.as_deref(), policy.when_scaled.as_deref()),
        (Some("Delete"), Some("Delete"))
    );
    let claim = &spec.volume_claim_templates.as_ref().unwrap()[0];
    assert_eq!(claim.spec.as_ref().unwrap().storage_class_name.as_deref(), Some("fast"));
    let mut hibernating = custom.clone();
    hibernating.spec.replicas = 0;
    let hibernating = statefulset_for(&hibernating);
    let policy = hibernating.spec.unwrap().persistent_volume_claim_retention_policy.unwrap();
    assert_eq!(
        (policy.when_deleted.as_deref(), policy.when_scaled.as_deref()),
        (Some("Delete"), Some("Retain")),
        "hibernation keeps the volumes"
    );
    let resources = container(&sts).resources.clone().unwrap();
    assert_eq!(resources.requests.unwrap()["memory"], Quantity("1Gi".into()));
    assert_eq!(resources.limits, None);
    let default = statefulset();
    let policy = default.spec.as_ref().unwrap().persistent_volume_claim_retention_policy.clone().unwrap();
    assert_eq!(policy.when_deleted.as_deref(), Some("Retain"));
}

#[test]
fn the_probes_ask_the_instance_manager() {
    let sts = statefulset();
    let container = container(&sts);
    let path = |probe: &Option<k8s_openapi::api::core::v1::Probe>| {
        let get = probe.as_ref().unwrap().http_get.clone().unwrap();
        assert_eq!(get.port, IntOrString::String("status".into()));
        assert_eq!(get.scheme.as_deref(), Some("HTTPS"), "the status port serves TLS only");
        get.path.unwrap()
    };
    assert_eq!(path(&container.readiness_probe), "/readyz", "ready: accepting connections in its role");
    assert_eq!(path(&container.startup_probe), "/healthz");
    assert_eq!(path(&container.liveness_probe), "/healthz");
    let startup = container.startup_probe.as_ref().unwrap();
    assert!(startup.period_seconds.unwrap() * startup.failure_threshold.unwrap() >= 300);
    let ports: Vec<_> =
        container.ports.iter().flatten().map(|p| (p.name.as_deref(), p.container_port)).collect();
    assert_eq!(ports, [(Some("postgres"), 5432), (Some("status"), 8000), (Some("metrics"), 9187)]);
    assert_eq!(env(container, "DBC_STATUS_PORT").value.as_deref(), Some("8000"));
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
fn only_restart_parameters_change_the_pod_template() {
    let annotation = |config: &[(&str, &str)]| {
        let mut cluster = seed();
        cluster.spec.postgres_config =
            Some(config.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect());
        let sts = statefulset_for(&cluster);
        let template = &sts.spec.as_ref().unwrap().template;
        assert_eq!(container(&sts).args, Some(Vec::new()));
        template.metadata.as_ref().unwrap().annotations.as_ref().unwrap()[RESTART_CONFIG_ANNOTATION].clone()
    };
    let base = annotation(&[("work_mem", "4MB"), ("max_connections", "100")]);
    assert_eq!(base, annotation(&[("work_mem", "64MB"), ("max_connections", "100")]));
    assert_ne!(base, annotation(&[("work_mem", "4MB"), ("max_connections", "200")]));
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

#[test]
fn another_controllers_object_is_recognised() {
    let owner = owner();
    let mut service = build_headless_service(&owner);
    assert_eq!(foreign_controller(&service, &owner), None);
    let other = OwnerReference { uid: "other".into(), ..owner.reference().clone() };
    service.metadata.owner_references = Some(vec![other.clone()]);
    assert_eq!(foreign_controller(&service, &owner).map(|found| found.uid), Some("other"));
    service.metadata.owner_references = Some(vec![OwnerReference { controller: None, ..other }]);
    assert_eq!(foreign_controller(&service, &owner), None, "a plain owner is not a controller");
}

#[test]
fn custom_queries_are_mounted_for_the_manager_and_named_in_an_annotation() {
    use crate::databasecluster::api::types::{ConfigMapKeyRef, MonitoringSpec};
    use crate::databasecluster::specs::instance_pod::{CUSTOM_QUERIES_ANNOTATION, CUSTOM_QUERIES_VOLUME};
    let annotation = |sts: &StatefulSet| {
        let template = &sts.spec.as_ref().unwrap().template;
        template.metadata.as_ref().unwrap().annotations.as_ref().unwrap()[CUSTOM_QUERIES_ANNOTATION].clone()
    };
    let volume = |sts: &StatefulSet| {
        let pod = sts.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
        pod.volumes.iter().flatten().find(|v| v.name == CUSTOM_QUERIES_VOLUME).cloned()
    };
    let mounted = |sts: &StatefulSet| {
        container(sts).volume_mounts.iter().flatten().any(|m| m.name == CUSTOM_QUERIES_VOLUME)
    };
    let plain = statefulset();
    assert_eq!(annotation(&plain), "", "an empty value: removing the reference rolls the pods too");
    assert!(volume(&plain).is_none() && !mounted(&plain));
    assert!(container(&plain).env.iter().flatten().all(|e| e.name != "DBC_CUSTOM_QUERIES"));

    let mut cluster = seed();
    let reference = ConfigMapKeyRef { name: "queries".into(), key: "custom.yaml".into() };
    cluster.spec.monitoring = Some(MonitoringSpec { custom_queries_config_map: Some(reference) });
    let sts = statefulset_for(&cluster);
    assert_eq!(annotation(&sts), "queries/custom.yaml");
    let source = volume(&sts).unwrap().config_map.unwrap();
    assert_eq!((source.name.as_str(), source.optional), ("queries", Some(true)));
    assert!(mounted(&sts));
    assert_eq!(
        env(container(&sts), "DBC_CUSTOM_QUERIES").value.as_deref(),
        Some("/etc/dbcluster-monitoring/queries.yaml")
    );
}

#[test]
fn psql_in_the_pod_finds_the_socket_as_the_superuser_the_secret_names() {
    let sts = statefulset();
    let secret = build_login_secret(&owner(), Login::Superuser, PASSWORD);
    let username = secret.data.unwrap()["username"].0.clone();
    assert_eq!(env(container(&sts), "PGUSER").value.as_deref().map(str::as_bytes), Some(username.as_slice()));
    assert_eq!(env(container(&sts), "PGHOST").value.as_deref(), Some(RUN_MOUNT_PATH));
    for var in container(&sts).env.iter().flatten() {
        assert!(
            !var.name.contains("PASSWORD") && var.name != "PGPASSFILE",
            "no password in the environment: {}",
            var.name
        );
    }
}
