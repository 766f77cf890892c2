//! Unit tests of `validation`.

use super::*;
use crate::databasecluster::api::types::{DEFAULT_STORAGE_SIZE, DatabaseClusterStatus};
use crate::databasecluster::fixtures::spec;

#[test]
fn a_valid_spec_parses_every_field() {
    let valid = validate_spec(&spec(3, "15.4", "1Gi")).unwrap();
    assert_eq!(valid.replicas, 3);
    assert_eq!(valid.version.major, 15);
    assert_eq!(valid.version.minor, Some(4));
    assert_eq!(valid.version.as_str(), "15.4");
    assert_eq!(valid.storage.bytes(), 1 << 30);
    assert_eq!(valid.storage.as_str(), "1Gi");
}

#[test]
fn synchronous_replicas_stay_below_the_instances_except_while_hibernated() {
    let with = |replicas: i32, synchronous: i32| {
        let mut spec = spec(replicas, "15.4", "1Gi");
        spec.synchronous_replicas = Some(synchronous);
        validate_spec(&spec).map(|v| v.synchronous_replicas)
    };
    assert_eq!(with(3, 2), Ok(2));
    assert_eq!(with(0, 2), Ok(2), "hibernating keeps the setting");
    assert_eq!(with(3, 3), Err(SpecError::SynchronousReplicasOutOfRange { requested: 3, replicas: 3 }));
    assert!(with(1, -1).unwrap_err().to_string().contains("spec.synchronousReplicas -1"));
    assert_eq!(validate_spec(&spec(3, "15.4", "1Gi")).map(|v| v.synchronous_replicas), Ok(0));
}

#[test]
fn a_major_only_version_is_valid() {
    let valid = validate_spec(&spec(1, "16", DEFAULT_STORAGE_SIZE)).unwrap();
    assert_eq!((valid.version.major, valid.version.minor), (16, None));
}

#[test]
fn replicas_outside_zero_to_ten_are_refused() {
    assert!(validate_spec(&spec(0, "15", "1Gi")).is_ok(), "0 hibernates");
    assert_eq!(validate_spec(&spec(-1, "15", "1Gi")), Err(SpecError::ReplicasOutOfRange(-1)));
    assert_eq!(validate_spec(&spec(11, "15", "1Gi")), Err(SpecError::ReplicasOutOfRange(11)));
    assert!(validate_spec(&spec(10, "15", "1Gi")).is_ok());
}

#[test]
fn malformed_versions_are_refused() {
    for bad in ["", "15.", ".4", "16.1.2", "16-alpine", "latest", "0.1", "15.x", "1 5"] {
        assert_eq!(
            validate_spec(&spec(1, bad, "1Gi")),
            Err(SpecError::InvalidVersion(bad.into())),
            "version {bad:?}"
        );
    }
}

#[test]
fn unparsable_or_empty_storage_sizes_are_refused() {
    for bad in ["lots", "", "0", "0Gi", "0.0Mi", "-1Gi", "1gi", "1e9", "500m", "1.", ".", "1 Gi", "9999999Ei"]
    {
        assert_eq!(
            validate_spec(&spec(1, "15", bad)),
            Err(SpecError::InvalidStorageSize(bad.into())),
            "storage {bad:?}"
        );
    }
}

#[test]
fn resources_the_api_server_would_refuse_in_the_statefulset_are_refused() {
    let with = |requests: &[(&str, &str)], limits: &[(&str, &str)]| {
        let map = |pairs: &[(&str, &str)]| {
            Some(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>())
        };
        let mut spec = spec(1, "15.4", "1Gi");
        spec.resources = Some(ResourceRequirements { requests: map(requests), limits: map(limits) });
        validate_spec(&spec).map(|_| ()).map_err(|e| e.to_string())
    };
    assert_eq!(with(&[("cpu", "1500m"), ("memory", "1Gi")], &[("cpu", "1.5"), ("memory", "1024Mi")]), Ok(()));
    assert_eq!(with(&[("cpu", "8")], &[]), Ok(()), "a request without a limit has no bound");
    assert_eq!(
        with(&[("cpu", "2")], &[("cpu", "1")]),
        Err("spec.resources requests.cpu 2 is more than limits.cpu 1".into())
    );
    assert_eq!(
        with(&[("memory", "1.5Gi")], &[("memory", "1500Mi")]),
        Err("spec.resources requests.memory 1.5Gi is more than limits.memory 1500Mi".into())
    );
    assert!(with(&[("gpu", "1")], &[]).unwrap_err().contains("requests.gpu is not a container resource"));
    assert!(
        with(&[], &[("cpu", "lots")])
            .unwrap_err()
            .contains("limits.cpu=\"lots\" is not a Kubernetes quantity")
    );
    assert!(with(&[("example.com/fpga", "1")], &[]).unwrap_err().contains("needs limits.example.com/fpga"));
    assert!(
        with(&[("example.com/fpga", "1")], &[("example.com/fpga", "2")]).unwrap_err().contains("must equal")
    );
    assert!(with(&[], &[("hugepages-2Mi", "64Mi")]).unwrap_err().contains("hugepages need a cpu or memory"));
    assert_eq!(with(&[("hugepages-2Mi", "64Mi"), ("memory", "1Gi")], &[("hugepages-2Mi", "64Mi")]), Ok(()));
    assert!(
        with(&[("memory", "1Gi")], &[("hugepages-2Mi", "3Mi")])
            .unwrap_err()
            .contains("limits.hugepages-2Mi 3Mi is not a whole number of 2Mi pages")
    );
    assert_eq!(with(&[("memory", "1Gi")], &[("hugepages-2Mi", "0")]), Ok(()), "no huge pages is whole");
    let fpga = [("example.com/fpga", "500m")];
    assert!(with(&fpga, &fpga).unwrap_err().contains("is not a whole number"));
    // A `kubernetes.io/` resource is native: its request may stay below its limit.
    assert_eq!(
        with(&[("example.kubernetes.io/thing", "1")], &[("example.kubernetes.io/thing", "2")]),
        Ok(())
    );
}

#[test]
fn storage_classes_must_be_names_a_claim_can_carry() {
    for good in ["standard", "fast-ssd", "gp3.csi.aws.com", "0"] {
        assert!(is_storage_class_name(good), "{good:?}");
    }
    for bad in ["", "Fast", "fast_ssd", "-fast", "fast-", "a..b", ".a", &"a".repeat(254)] {
        assert!(!is_storage_class_name(bad), "{bad:?}");
    }
    let mut data = spec(1, "15.4", "1Gi");
    data.storage_class_name = Some("Fast_SSD".into());
    assert_eq!(validate_spec(&data), Err(SpecError::InvalidStorageClass("Fast_SSD".into())));
    let mut backups = spec(1, "15.4", "1Gi");
    backups.backup = Some(serde_json::from_value(serde_json::json!({"storageClassName": "a b"})).unwrap());
    let message = validate_spec(&backups).unwrap_err().to_string();
    assert!(
        message.starts_with("spec.backup.storageClassName \"a b\" is not a StorageClass name"),
        "{message}"
    );
}

#[test]
fn a_configuration_too_large_for_its_config_map_is_refused() {
    let with = |value: String| {
        let mut spec = spec(1, "15.4", "1Gi");
        spec.postgres_config = Some(BTreeMap::from([("search_path".to_owned(), value)]));
        validate_spec(&spec)
    };
    assert!(with("x".repeat(MAX_SERVER_CONF_BYTES / 2)).is_ok());
    // Quotes are doubled as the file is written: half the room in quotes is too much.
    let error = with("'".repeat(MAX_SERVER_CONF_BYTES / 2)).unwrap_err();
    assert!(
        matches!(error, SpecError::ConfigurationTooLarge { bytes } if bytes > MAX_SERVER_CONF_BYTES),
        "{error}"
    );
    assert!(error.to_string().contains("fit in its ConfigMap"), "{error}");
}

#[test]
fn resource_amounts_compare_across_suffixes() {
    assert_eq!(resource_amount("1500m"), resource_amount("1.5"));
    assert_eq!(resource_amount("1Gi"), resource_amount("1024Mi"));
    assert_eq!(resource_amount("1k"), resource_amount("1000"));
    assert!(resource_amount("1G") < resource_amount("1Gi"));
    assert_eq!(resource_amount(".5"), Some(500_000_000));
    for bad in ["", ".", "1..5", "1 Gi", "1gi", "-1", "1e3", "lots"] {
        assert_eq!(resource_amount(bad), None, "{bad:?}");
    }
}

#[test]
fn storage_sizes_are_canonicalised_like_the_api_server() {
    let canonical = |text: &str| StorageSize::parse(text).unwrap().as_str().to_owned();
    assert_eq!(canonical("1Gi"), "1Gi");
    assert_eq!(canonical("1.5Gi"), "1536Mi");
    assert_eq!(canonical("1024Mi"), "1Gi");
    assert_eq!(canonical(".5Ti"), "512Gi");
    assert_eq!(canonical("1.5G"), "1500M");
    assert_eq!(canonical("1000M"), "1G");
    assert_eq!(canonical("1073741824"), "1073741824");
    assert_eq!(canonical("512"), "512");
    assert_eq!(canonical("0.5Ki"), "512");
    assert_eq!(canonical("0010Gi"), "10Gi");
}

#[test]
fn fractions_of_a_byte_round_up() {
    assert_eq!(StorageSize::parse("0.5").unwrap().bytes(), 1);
    assert_eq!(StorageSize::parse("1.0001Ki").unwrap().bytes(), 1025);
}

#[test]
fn postgres_parameters_must_be_names_and_not_reserved() {
    let with_config = |name: &str, value: &str| DatabaseClusterSpec {
        postgres_config: Some(BTreeMap::from([(name.to_owned(), value.to_owned())])),
        ..spec(1, "15", "1Gi")
    };
    assert!(validate_spec(&with_config("max_connections", "200")).is_ok());
    assert!(validate_spec(&with_config("pg_stat_statements.max", "5000")).is_ok());
    assert_eq!(
        validate_spec(&with_config("max connections", "1")),
        Err(SpecError::InvalidParameter("max connections".into()))
    );
    assert_eq!(validate_spec(&with_config("a=b", "1")), Err(SpecError::InvalidParameter("a=b".into())));
    assert_eq!(
        validate_spec(&with_config("work_mem", "4\0MB")),
        Err(SpecError::InvalidParameter("work_mem".into()))
    );
    assert_eq!(validate_spec(&with_config("Port", "5433")), Err(SpecError::ReservedParameter("Port".into())));
}

#[test]
fn a_major_downgrade_against_the_running_version_is_refused_and_an_upgrade_admitted() {
    let mut cluster = DatabaseCluster::new("db", spec(1, "14.1", "1Gi"));
    assert!(validate(&cluster).is_ok(), "nothing runs yet");
    cluster.status =
        Some(DatabaseClusterStatus { current_version: Some("15.4".into()), ..Default::default() });
    let downgrade = VersionChangeError::Downgrade { running: "15.4".into(), desired: "14.1".into() };
    assert_eq!(validate(&cluster), Err(SpecError::VersionChange(downgrade)));
    cluster.spec.version = "18".into();
    assert!(validate(&cluster).is_ok(), "an upgrade");
    cluster.spec.version = "15.5".into();
    assert!(validate(&cluster).is_ok(), "a minor change is fine");
    cluster.spec.version = "15".into();
    assert!(validate(&cluster).is_ok(), "major only, same major");
}

#[test]
fn errors_say_which_field_is_wrong() {
    let message = SpecError::InvalidStorageSize("lots".into()).to_string();
    assert!(message.contains("spec.storageSize") && message.contains("\"lots\""), "{message}");
}

#[test]
fn custom_queries_name_a_config_map_key() {
    use crate::databasecluster::api::types::{ConfigMapKeyRef, MonitoringSpec};
    let with = |name: &str, key: &str| {
        let mut spec = spec(3, "15.4", "1Gi");
        let reference = ConfigMapKeyRef { name: name.into(), key: key.into() };
        spec.monitoring = Some(MonitoringSpec { custom_queries_config_map: Some(reference) });
        validate_spec(&spec).map(|v| v.custom_queries.map(|r| (r.name, r.key)))
    };
    assert_eq!(with("queries", "queries.yaml"), Ok(Some(("queries".into(), "queries.yaml".into()))));
    let refused = with("queries", "a/b").unwrap_err();
    assert!(matches!(refused, SpecError::InvalidCustomQueries(_)), "{refused:?}");
    assert!(
        refused.to_string().starts_with("spec.monitoring.customQueriesConfigMap key \"a/b\""),
        "{refused}"
    );
    assert_eq!(validate_spec(&spec(3, "15.4", "1Gi")).map(|v| v.custom_queries), Ok(None));
}
