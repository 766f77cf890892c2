//! The DatabaseCluster CRD: the committed manifest is the generated one, the seed's sample fits the
//! type and the schema, and the schema carries the rules the operator relies on.

use dbcluster_operator::databasecluster::api::types::{
    DatabaseCluster, STORAGE_CLASS_PATTERN, STORAGE_SHRINK_MESSAGE, VERSION_CHANGE_MESSAGE, crd, crd_yaml,
};
use dbcluster_operator::databasecluster::api::validation::{is_storage_class_name, validate_spec};
use regex::Regex;
use serde_json::{Value, json};

const MANIFEST: &str = include_str!("../../manifests/crd.yaml");
const SAMPLE: &str = include_str!("../../manifests/samples/databasecluster.yaml");

fn crd_json() -> Value {
    serde_json::to_value(crd()).unwrap()
}

fn spec_schema() -> Value {
    crd_json()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"].clone()
}

/// The schema violations of `spec` under the CRD's spec schema, limited to what this CRD uses on
/// scalar fields: `required`, `type`, `minimum`/`maximum`, `maxLength` and `pattern`.
fn spec_violations(spec: &Value) -> Vec<String> {
    let schema = spec_schema();
    let mut violations = Vec::new();
    for required in schema["required"].as_array().unwrap() {
        if spec.get(required.as_str().unwrap()).is_none() {
            violations.push(format!("{required} is required"));
        }
    }
    for (field, value) in spec.as_object().unwrap() {
        let Some(property) = schema["properties"].get(field) else {
            violations.push(format!("{field} is unknown"));
            continue;
        };
        match property["type"].as_str().unwrap() {
            "integer" => {
                let Some(n) = value.as_i64() else {
                    violations.push(format!("{field} is not an integer"));
                    continue;
                };
                if property["minimum"].as_f64().is_some_and(|min| (n as f64) < min)
                    || property["maximum"].as_f64().is_some_and(|max| (n as f64) > max)
                {
                    violations.push(format!("{field} is out of range"));
                }
            }
            "string" => {
                let Some(text) = value.as_str() else {
                    violations.push(format!("{field} is not a string"));
                    continue;
                };
                if let Some(pattern) = property["pattern"].as_str()
                    && !Regex::new(pattern).unwrap().is_match(text)
                {
                    violations.push(format!("{field} does not match {pattern}"));
                }
                if property["maxLength"].as_u64().is_some_and(|max| text.chars().count() as u64 > max) {
                    violations.push(format!("{field} is too long"));
                }
            }
            "object" => {
                if !value.as_object().is_some_and(|map| map.values().all(Value::is_string)) {
                    violations.push(format!("{field} is not a map of strings"));
                }
            }
            other => panic!("the checker does not know type {other}"),
        }
    }
    violations
}

#[test]
fn the_committed_manifest_is_the_generated_crd() {
    assert!(
        MANIFEST == crd_yaml(),
        "manifests/crd.yaml is stale: regenerate it with `cargo run -- crd > manifests/crd.yaml`"
    );
}

#[test]
fn the_crd_subcommand_prints_the_committed_manifest() {
    let output =
        std::process::Command::new(env!("CARGO_BIN_EXE_dbcluster-operator")).arg("crd").output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(output.stdout == MANIFEST.as_bytes(), "`dbcluster-operator crd` differs from manifests/crd.yaml");
}

#[test]
fn the_manifest_parses_back_into_the_same_crd() {
    let parsed: Value = serde_saphyr::from_str(MANIFEST).unwrap();
    assert_eq!(parsed, crd_json());
}

#[test]
fn the_seed_sample_deserialises_validates_and_fits_the_schema() {
    let cluster: DatabaseCluster = serde_saphyr::from_str(SAMPLE).unwrap();
    assert_eq!(cluster.metadata.name.as_deref(), Some("production-postgres"));
    assert_eq!(cluster.metadata.namespace.as_deref(), Some("default"));
    assert_eq!(cluster.spec.replicas, 3);
    assert_eq!(cluster.spec.version, "15.4");
    assert_eq!(cluster.spec.storage_size, "1Gi");
    let valid = validate_spec(&cluster.spec).unwrap();
    assert_eq!(valid.storage.as_str(), "1Gi");

    let raw: Value = serde_saphyr::from_str(SAMPLE).unwrap();
    assert_eq!(raw["apiVersion"], "databases.madmmas.dev/v1alpha1");
    assert_eq!(raw["kind"], "DatabaseCluster");
    assert_eq!(spec_violations(&raw["spec"]), Vec::<String>::new());
}

#[test]
fn the_schema_refuses_bad_sizes_replicas_versions_and_schedules() {
    let good = json!({"replicas": 3, "version": "15.4", "storageSize": "1Gi"});
    assert!(spec_violations(&good).is_empty());
    let with = |field: &str, value: Value| {
        let mut spec = good.clone();
        spec[field] = value;
        spec_violations(&spec)
    };
    for bad_storage in ["lots", "0", "0Gi", "-1Gi", "1gi", "1.", "500m", "1 Gi"] {
        assert_eq!(with("storageSize", json!(bad_storage)).len(), 1, "storageSize {bad_storage:?}");
    }
    for good_storage in ["1Gi", "1.5Gi", ".5Ti", "500M", "1073741824", "10Gi"] {
        assert!(with("storageSize", json!(good_storage)).is_empty(), "storageSize {good_storage:?}");
    }
    assert!(with("replicas", json!(0)).is_empty(), "replicas 0 hibernates");
    for bad_replicas in [11, -1] {
        assert_eq!(with("replicas", json!(bad_replicas)).len(), 1, "replicas {bad_replicas}");
    }
    for bad_version in ["16-alpine", "16.1.2", "latest", "", "0.1", "15."] {
        assert_eq!(with("version", json!(bad_version)).len(), 1, "version {bad_version:?}");
    }
    for good_version in ["15.4", "16", "9.6", "17.0"] {
        assert!(with("version", json!(good_version)).is_empty(), "version {good_version:?}");
    }
    for bad_schedule in ["daily", "* * * *", "@sometimes"] {
        assert_eq!(with("backupSchedule", json!(bad_schedule)).len(), 1, "schedule {bad_schedule:?}");
    }
    for good_schedule in ["0 3 * * *", "*/15 0-6 * * MON-FRI", "@daily"] {
        assert!(with("backupSchedule", json!(good_schedule)).is_empty(), "schedule {good_schedule:?}");
    }
    let mut missing = good.clone();
    missing.as_object_mut().unwrap().remove("version");
    assert_eq!(spec_violations(&missing), vec!["\"version\" is required".to_owned()]);
}

#[test]
fn storage_size_defaults_to_ten_gibibytes_in_the_schema_and_the_type() {
    assert_eq!(spec_schema()["properties"]["storageSize"]["default"], "10Gi");
    let cluster: DatabaseCluster = serde_json::from_value(json!({
        "apiVersion": "databases.madmmas.dev/v1alpha1", "kind": "DatabaseCluster",
        "metadata": {"name": "db"}, "spec": {"replicas": 1, "version": "16"}
    }))
    .unwrap();
    assert_eq!(cluster.spec.storage_size, "10Gi");
}

#[test]
fn names_scope_and_short_name() {
    let crd = crd_json();
    assert_eq!(crd["metadata"]["name"], "databaseclusters.databases.madmmas.dev");
    assert_eq!(crd["spec"]["group"], "databases.madmmas.dev");
    assert_eq!(crd["spec"]["scope"], "Namespaced");
    let names = &crd["spec"]["names"];
    assert_eq!(names["kind"], "DatabaseCluster");
    assert_eq!(names["plural"], "databaseclusters");
    assert_eq!(names["singular"], "databasecluster");
    assert_eq!(names["shortNames"], json!(["dbc"]));
    let versions = crd["spec"]["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 1);
    assert_eq!(versions[0]["name"], "v1alpha1");
    assert_eq!(versions[0]["served"], true);
    assert_eq!(versions[0]["storage"], true);
}

#[test]
fn status_and_scale_are_subresources() {
    assert_eq!(
        crd_json()["spec"]["versions"][0]["subresources"],
        json!({"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}})
    );
}

#[test]
fn printer_columns_are_phase_ready_status_primary_version_age_and_the_message_when_wide() {
    let columns: Vec<(String, String, String)> =
        crd_json()["spec"]["versions"][0]["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let field = |name: &str| c[name].as_str().unwrap().to_owned();
                (field("name").to_uppercase(), field("type"), field("jsonPath"))
            })
            .collect();
    let expected = [
        ("PHASE", "string", ".status.phase"),
        ("READY", "string", ".status.readyInstances"),
        ("STATUS", "string", ".status.conditions[?(@.type==\"Ready\")].reason"),
        ("PRIMARY", "string", ".status.currentPrimary"),
        ("VERSION", "string", ".status.currentVersion"),
        ("AGE", "date", ".metadata.creationTimestamp"),
        ("MESSAGE", "string", ".status.conditions[?(@.type==\"Ready\")].message"),
    ]
    .map(|(n, t, p)| (n.to_owned(), t.to_owned(), p.to_owned()));
    assert_eq!(columns, expected);
}

#[test]
fn the_scale_subresource_maps_spec_and_status_replicas() {
    let subresources = &crd_json()["spec"]["versions"][0]["subresources"];
    assert_eq!(subresources["scale"]["specReplicasPath"], ".spec.replicas");
    assert_eq!(subresources["scale"]["statusReplicasPath"], ".status.replicas");
}

#[test]
fn cel_rules_reject_a_major_downgrade_and_a_shrink() {
    let spec = spec_schema();
    let rules = |field: &str| spec["properties"][field]["x-kubernetes-validations"].clone();
    assert_eq!(rules("version"), serde_json::Value::Null, "the version rule reads the status: on the root");
    let root = &crd_json()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"];
    let version = root.as_array().unwrap().iter().find(|r| r["message"] == VERSION_CHANGE_MESSAGE).unwrap();
    let rule = version["rule"].as_str().unwrap();
    assert!(rule.contains("oldSelf.spec.version") && rule.contains("self.status.currentVersion"), "{rule}");
    // The version and no-shrink rules' behaviour, on the Kubernetes 1.28 the simulator runs by default, is
    // tested end to end in tests/e2e_bad_input.rs.
    let storage = &rules("storageSize")[0];
    assert_eq!(storage["message"], STORAGE_SHRINK_MESSAGE);
    assert!(storage["rule"].as_str().unwrap().contains("oldSelf"), "a transition rule");
}

#[test]
fn status_has_the_phase_enum_and_condition_list_map() {
    let status = &crd_json()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"];
    assert_eq!(
        status["properties"]["phase"]["enum"],
        json!(["Provisioning", "Running", "Scaling", "Degraded", "Upgrading", "Failed", "Hibernated"])
    );
    let conditions = &status["properties"]["conditions"];
    assert_eq!(conditions["x-kubernetes-list-type"], "map");
    assert_eq!(conditions["x-kubernetes-list-map-keys"], json!(["type"]));
    assert_eq!(
        conditions["items"]["required"],
        json!(["lastTransitionTime", "message", "reason", "status", "type"])
    );
    assert_eq!(conditions["items"]["properties"]["status"]["enum"], json!(["True", "False", "Unknown"]));
    for field in [
        "readyReplicas",
        "readyInstances",
        "currentPrimary",
        "instances",
        "replicas",
        "currentVersion",
        "observedGeneration",
        "lastBackupTime",
    ] {
        assert!(status["properties"].get(field).is_some(), "status.{field}");
    }
}

#[test]
fn the_storage_class_pattern_and_the_operators_check_agree() {
    let pattern = Regex::new(STORAGE_CLASS_PATTERN).unwrap();
    let names = [
        "standard",
        "fast-ssd",
        "gp3.csi.aws.com",
        "0",
        "",
        "Fast",
        "fast_ssd",
        "-fast",
        "fast-",
        "a..b",
        ".a",
    ];
    for name in names {
        assert_eq!(pattern.is_match(name), is_storage_class_name(name), "{name:?}");
    }
}

#[test]
fn the_custom_queries_reference_needs_a_config_map_name_and_key() {
    let reference = &spec_schema()["properties"]["monitoring"]["properties"]["customQueriesConfigMap"];
    assert_eq!(reference["required"], json!(["key", "name"]));
    let matches = |field: &str, text: &str| {
        Regex::new(reference["properties"][field]["pattern"].as_str().unwrap()).unwrap().is_match(text)
    };
    for (name, valid) in [("queries", true), ("my.queries-1", true), ("Queries", false), ("-q", false)] {
        assert_eq!(matches("name", name), valid, "name {name:?}");
    }
    for (key, valid) in
        [("queries.yaml", true), (".hidden", true), ("..", false), ("..a", false), ("a/b", false)]
    {
        assert_eq!(matches("key", key), valid, "key {key:?}");
    }
}
