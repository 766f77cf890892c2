//! Defaults the apiserver fills into the built-in kinds the operator writes (StatefulSets and
//! their pod templates, Services, Jobs, CronJobs, Secrets, PVCs), so that code comparing what
//! it sent with what it reads back meets the same differences as on a real cluster.

use serde_json::{Value, json};

/// Sets `obj[key]` to `value` when absent or null.
fn default(obj: &mut Value, key: &str, value: Value) {
    if obj.is_object() && obj.get(key).is_none_or(Value::is_null) {
        obj[key] = value;
    }
}

/// Applies the defaults of the kind `group/plural` to a whole object.
pub fn apply(group: &str, plural: &str, obj: &mut Value) {
    match (group, plural) {
        ("apps", "statefulsets") => stateful_set(&mut obj["spec"]),
        ("", "pods") => pod_spec(&mut obj["spec"]),
        ("", "services") => {
            let uid = obj["metadata"]["uid"].clone();
            service(&mut obj["spec"], &uid);
        }
        ("batch", "jobs") => job(&mut obj["spec"]),
        ("batch", "cronjobs") => cron_job(&mut obj["spec"]),
        ("", "secrets") => secret(obj),
        ("", "persistentvolumeclaims") => default(&mut obj["spec"], "volumeMode", json!("Filesystem")),
        _ => {}
    }
}

/// `stringData` is write-only: merged into `data` (base64), as the apiserver does.
fn secret(obj: &mut Value) {
    use base64::Engine;
    default(obj, "type", json!("Opaque"));
    let Some(map) = obj.as_object_mut() else { return };
    let Some(Value::Object(strings)) = map.remove("stringData") else { return };
    let data = map.entry("data").or_insert_with(|| json!({}));
    if !data.is_object() {
        *data = json!({});
    }
    for (k, v) in strings {
        let text = v.as_str().unwrap_or_default();
        data[k] = json!(base64::engine::general_purpose::STANDARD.encode(text));
    }
}

fn stateful_set(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    default(spec, "replicas", json!(1));
    default(spec, "podManagementPolicy", json!("OrderedReady"));
    default(spec, "revisionHistoryLimit", json!(10));
    default(spec, "updateStrategy", json!({"type": "RollingUpdate"}));
    if spec["updateStrategy"]["type"] == "RollingUpdate" {
        default(&mut spec["updateStrategy"], "rollingUpdate", json!({"partition": 0}));
        default(&mut spec["updateStrategy"]["rollingUpdate"], "partition", json!(0));
    }
    default(
        spec,
        "persistentVolumeClaimRetentionPolicy",
        json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
    );
    for claim in spec["volumeClaimTemplates"].as_array_mut().into_iter().flatten() {
        default(&mut claim["spec"], "volumeMode", json!("Filesystem"));
    }
    pod_spec(&mut spec["template"]["spec"]);
}

fn pod_spec(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    default(spec, "restartPolicy", json!("Always"));
    default(spec, "terminationGracePeriodSeconds", json!(30));
    default(spec, "dnsPolicy", json!("ClusterFirst"));
    default(spec, "securityContext", json!({}));
    default(spec, "schedulerName", json!("default-scheduler"));
    for list in ["initContainers", "containers"] {
        for c in spec[list].as_array_mut().into_iter().flatten() {
            container(c);
        }
    }
}

fn container(c: &mut Value) {
    default(c, "terminationMessagePath", json!("/dev/termination-log"));
    default(c, "terminationMessagePolicy", json!("File"));
    default(c, "resources", json!({}));
    let image = c["image"].as_str().unwrap_or_default();
    let tag = image.rsplit('/').next().and_then(|last| last.split_once(':')).map(|(_, t)| t);
    let always = !image.contains('@') && tag.is_none_or(|t| t == "latest");
    default(c, "imagePullPolicy", json!(if always { "Always" } else { "IfNotPresent" }));
    for p in c["ports"].as_array_mut().into_iter().flatten() {
        default(p, "protocol", json!("TCP"));
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        let p = &mut c[probe];
        if p.is_object() {
            default(p, "timeoutSeconds", json!(1));
            default(p, "periodSeconds", json!(10));
            default(p, "successThreshold", json!(1));
            default(p, "failureThreshold", json!(3));
            if p["httpGet"].is_object() {
                default(&mut p["httpGet"], "scheme", json!("HTTP"));
            }
        } else if let Some(m) = c.as_object_mut().filter(|m| m.get(probe).is_some_and(Value::is_null)) {
            m.remove(probe);
        }
    }
}

fn service(spec: &mut Value, uid: &Value) {
    if !spec.is_object() {
        return;
    }
    default(spec, "type", json!("ClusterIP"));
    default(spec, "sessionAffinity", json!("None"));
    default(spec, "internalTrafficPolicy", json!("Cluster"));
    default(spec, "ipFamilies", json!(["IPv4"]));
    default(spec, "ipFamilyPolicy", json!("SingleStack"));
    if spec["clusterIP"].is_null() {
        // A stable address per Service, derived from its uid.
        let h = uid
            .as_str()
            .unwrap_or_default()
            .bytes()
            .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
        spec["clusterIP"] = json!(format!("10.96.{}.{}", (h >> 8) % 256, h % 254 + 1));
    }
    default(spec, "clusterIPs", json!([spec["clusterIP"].clone()]));
    for p in spec["ports"].as_array_mut().into_iter().flatten() {
        default(p, "protocol", json!("TCP"));
        let port = p["port"].clone();
        default(p, "targetPort", port);
    }
}

fn job(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    default(spec, "backoffLimit", json!(6));
    default(spec, "completions", json!(1));
    default(spec, "parallelism", json!(1));
    default(spec, "completionMode", json!("NonIndexed"));
    default(spec, "suspend", json!(false));
    // No `podReplacementPolicy`: 1.28 defaults it only with the JobPodReplacementPolicy gate,
    // alpha and off (pkg/apis/batch/v1/defaults.go `SetDefaults_Job`).
    pod_spec(&mut spec["template"]["spec"]);
}

fn cron_job(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    default(spec, "concurrencyPolicy", json!("Allow"));
    default(spec, "suspend", json!(false));
    default(spec, "successfulJobsHistoryLimit", json!(3));
    default(spec, "failedJobsHistoryLimit", json!(1));
    job(&mut spec["jobTemplate"]["spec"]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stateful_set_and_pod_template_defaults() {
        let mut sts = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "a", "image": "postgres:15.4"}, {"name": "b", "image": "busybox"}
        ]}}}});
        apply("apps", "statefulsets", &mut sts);
        let spec = &sts["spec"];
        assert_eq!(spec["replicas"], 1);
        assert_eq!(
            spec["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
        );
        let containers = &spec["template"]["spec"]["containers"];
        assert_eq!(containers[0]["imagePullPolicy"], "IfNotPresent");
        assert_eq!(containers[1]["imagePullPolicy"], "Always");
        assert_eq!(spec["template"]["spec"]["restartPolicy"], "Always");
    }

    #[test]
    fn services_get_a_cluster_ip_unless_headless() {
        let mut svc = json!({"metadata": {"uid": "u"}, "spec": {"ports": [{"port": 5432}]}});
        apply("", "services", &mut svc);
        assert!(svc["spec"]["clusterIP"].as_str().unwrap().starts_with("10.96."));
        assert_eq!(svc["spec"]["ports"][0]["targetPort"], 5432);
        let mut headless = json!({"spec": {"clusterIP": "None"}});
        apply("", "services", &mut headless);
        assert_eq!(headless["spec"]["clusterIPs"], json!(["None"]));
    }

    #[test]
    fn secret_string_data_is_merged_into_data() {
        let mut secret = json!({"data": {"a": "eA=="}, "stringData": {"password": "hunter2"}});
        apply("", "secrets", &mut secret);
        assert_eq!(secret, json!({"type": "Opaque", "data": {"a": "eA==", "password": "aHVudGVyMg=="}}));
    }

    #[test]
    fn set_values_are_kept() {
        let mut job = json!({"spec": {"backoffLimit": 1, "template": {"spec": {"restartPolicy": "Never"}}}});
        apply("batch", "jobs", &mut job);
        assert_eq!(job["spec"]["backoffLimit"], 1);
        assert_eq!(job["spec"]["template"]["spec"]["restartPolicy"], "Never");
    }
}
