//! The kind registry: which resources the simulated server serves, built-in (a table) and those
//! served because a CustomResourceDefinition asks for them.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::sim::schema::StructuralSchema;

/// One printer column of a kind's Table output (a CRD's `additionalPrinterColumns`).
#[derive(Debug, Clone, PartialEq)]
pub struct PrinterColumn {
    /// Column header as kubectl prints it (upper-cased by kubectl).
    pub name: String,
    /// OpenAPI type of the cell: string, integer, number, boolean, date.
    pub column_type: String,
    /// Simple JSONPath into the object, like `.status.phase`.
    pub json_path: String,
    /// Higher priorities are shown only with `-o wide`.
    pub priority: i64,
    /// Human-readable description of the column.
    pub description: String,
}

/// Everything the server needs to know about one served group/version/resource.
#[derive(Debug, Clone)]
pub struct Kind {
    /// API group, empty for the core group.
    pub group: String,
    /// API version within the group.
    pub version: String,
    /// The kind, like `StatefulSet`.
    pub kind: String,
    /// The plural lower-case resource name used in URLs.
    pub plural: String,
    /// The singular lower-case name.
    pub singular: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Short names kubectl accepts (`sts`, `dbc`).
    pub short_names: Vec<String>,
    /// Categories kubectl accepts (`all`).
    pub categories: Vec<String>,
    /// Whether the kind has a `status` subresource (main-resource writes ignore status).
    pub status_subresource: bool,
    /// Whether the kind has a `scale` subresource (`kubectl scale`).
    pub scale_subresource: bool,
    /// Whether the server keeps `metadata.generation` for the kind (ConfigMaps, Pods, Services
    /// and other kinds without a spec/status split have none).
    pub generation: bool,
    /// Extra Table columns; empty means NAME and AGE only.
    pub printer_columns: Vec<PrinterColumn>,
    /// For custom resources: whether the CRD served this kind (so deleting the CRD removes it).
    pub custom: bool,
    /// For custom resources: the version's compiled `openAPIV3Schema`, if the CRD gave one.
    pub schema: Option<Arc<StructuralSchema>>,
    /// For custom resources: that `openAPIV3Schema` as written, published in OpenAPI v3.
    pub openapi_schema: Option<Arc<Value>>,
}

impl Kind {
    /// `apiVersion` as written in objects: `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    /// The storage key shared by every version of a resource: `pods`, `statefulsets.apps`
    /// (`events.k8s.io` Events are stored as core Events, `events`).
    pub fn storage_key(&self) -> String {
        if self.group == "events.k8s.io" && self.plural == "events" {
            return "events".to_owned();
        }
        storage_key(&self.group, &self.plural)
    }

    /// `resource.group` as the apiserver names a resource in messages: `statefulsets.apps`.
    pub fn qualified_resource(&self) -> String {
        self.storage_key()
    }

    /// `Kind.group` as the apiserver names a kind in Invalid messages.
    pub fn qualified_kind(&self) -> String {
        if self.group.is_empty() { self.kind.clone() } else { format!("{}.{}", self.kind, self.group) }
    }
}

/// The storage key of a group and plural resource name.
pub fn storage_key(group: &str, plural: &str) -> String {
    if group.is_empty() { plural.to_string() } else { format!("{plural}.{group}") }
}

/// One row of the built-in table: group, version, kind, plural, namespaced, short names, status.
type BuiltIn = (&'static str, &'static str, &'static str, &'static str, bool, &'static [&'static str], bool);

const BUILT_INS: &[BuiltIn] = &[
    ("", "v1", "Namespace", "namespaces", false, &["ns"], true),
    ("", "v1", "Pod", "pods", true, &["po"], true),
    ("", "v1", "Service", "services", true, &["svc"], true),
    ("", "v1", "Secret", "secrets", true, &[], false),
    ("", "v1", "ConfigMap", "configmaps", true, &["cm"], false),
    ("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", true, &["pvc"], true),
    ("", "v1", "PersistentVolume", "persistentvolumes", false, &["pv"], true),
    ("storage.k8s.io", "v1", "StorageClass", "storageclasses", false, &["sc"], false),
    ("", "v1", "Event", "events", true, &["ev"], false),
    ("", "v1", "ServiceAccount", "serviceaccounts", true, &["sa"], false),
    ("apps", "v1", "StatefulSet", "statefulsets", true, &["sts"], true),
    // Stored and served (so `kubectl apply -k manifests/` works), but no controller runs them.
    ("apps", "v1", "Deployment", "deployments", true, &["deploy"], true),
    ("rbac.authorization.k8s.io", "v1", "Role", "roles", true, &[], false),
    ("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", false, &[], false),
    ("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", true, &[], false),
    ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", false, &[], false),
    ("batch", "v1", "Job", "jobs", true, &[], true),
    ("batch", "v1", "CronJob", "cronjobs", true, &["cj"], true),
    ("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", true, &["pdb"], true),
    ("coordination.k8s.io", "v1", "Lease", "leases", true, &[], false),
    ("", "v1", "Node", "nodes", false, &["no"], true),
    // Create-only reviews (`reviews`): nothing stored, the answer in the response.
    ("authentication.k8s.io", "v1", "TokenReview", "tokenreviews", false, &[], false),
    ("authorization.k8s.io", "v1", "SubjectAccessReview", "subjectaccessreviews", false, &[], false),
    ("events.k8s.io", "v1", "Event", "events", true, &["ev"], false),
    (
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false,
        &["crd", "crds"],
        true,
    ),
];

/// One built-in Table column: name, type, a JSONPath or (`#name`) a cell `table` computes as
/// kubectl's server-side printers do, and its priority (1: shown by `-o wide` only).
type Column = (&'static str, &'static str, &'static str, i64);

/// The object's age, where 1.28's printer puts it.
const AGE: Column = ("Age", "date", ".metadata.creationTimestamp", 0);

/// Table columns of built-in kinds (besides NAME), by plural, in the order and with the
/// priorities of 1.28's printers (`AddHandlers` in pkg/printers/internalversion/printers.go).
const BUILT_IN_COLUMNS: &[(&str, &[Column])] = &[
    (
        "pods",
        &[
            ("Ready", "string", "#pod-ready", 0),
            ("Status", "string", "#pod-status", 0),
            ("Restarts", "string", "#pod-restarts", 0),
            AGE,
            ("IP", "string", "#pod-ip", 1),
            ("Node", "string", "#pod-node", 1),
            ("Nominated Node", "string", "#nominated-node", 1),
            ("Readiness Gates", "string", "#readiness-gates", 1),
        ],
    ),
    (
        "statefulsets",
        &[
            ("Ready", "string", "#statefulset-ready", 0),
            AGE,
            ("Containers", "string", "#containers", 1),
            ("Images", "string", "#images", 1),
        ],
    ),
    (
        "services",
        &[
            ("Type", "string", ".spec.type", 0),
            ("Cluster-IP", "string", ".spec.clusterIP", 0),
            ("External-IP", "string", "#service-external-ip", 0),
            ("Port(s)", "string", "#service-ports", 0),
            AGE,
            ("Selector", "string", "#service-selector", 1),
        ],
    ),
    (
        "persistentvolumeclaims",
        &[
            ("Status", "string", ".status.phase", 0),
            ("Volume", "string", ".spec.volumeName", 0),
            ("Capacity", "string", ".status.capacity.storage", 0),
            ("Access Modes", "string", "#access-modes", 0),
            ("StorageClass", "string", ".spec.storageClassName", 0),
            AGE,
            ("VolumeMode", "string", ".spec.volumeMode", 1),
        ],
    ),
    (
        "persistentvolumes",
        &[
            ("Capacity", "string", ".spec.capacity.storage", 0),
            ("Access Modes", "string", "#access-modes", 0),
            ("Reclaim Policy", "string", ".spec.persistentVolumeReclaimPolicy", 0),
            ("Status", "string", ".status.phase", 0),
            ("Claim", "string", "#pv-claim", 0),
            ("StorageClass", "string", ".spec.storageClassName", 0),
            ("Reason", "string", ".status.reason", 0),
            AGE,
        ],
    ),
    (
        "storageclasses",
        &[
            ("Provisioner", "string", ".provisioner", 0),
            ("ReclaimPolicy", "string", ".reclaimPolicy", 0),
            ("VolumeBindingMode", "string", ".volumeBindingMode", 0),
            ("AllowVolumeExpansion", "boolean", ".allowVolumeExpansion", 0),
            AGE,
        ],
    ),
    (
        "jobs",
        &[
            ("Completions", "string", "#job-completions", 0),
            ("Duration", "string", "#job-duration", 0),
            AGE,
            ("Containers", "string", "#containers", 1),
            ("Images", "string", "#images", 1),
            ("Selector", "string", "#job-selector", 1),
        ],
    ),
    (
        "cronjobs",
        &[
            ("Schedule", "string", ".spec.schedule", 0),
            ("Suspend", "boolean", ".spec.suspend", 0),
            ("Active", "integer", "#cronjob-active", 0),
            ("Last Schedule", "date", ".status.lastScheduleTime", 0),
            AGE,
            ("Containers", "string", "#containers", 1),
            ("Images", "string", "#images", 1),
        ],
    ),
    ("namespaces", &[("Status", "string", ".status.phase", 0), AGE]),
    (
        "events",
        &[
            ("Type", "string", ".type", 0),
            ("Reason", "string", ".reason", 0),
            ("Object", "string", ".involvedObject.name", 0),
            ("Message", "string", ".message", 0),
        ],
    ),
];

fn built_in_columns(plural: &str) -> Vec<PrinterColumn> {
    BUILT_IN_COLUMNS
        .iter()
        .filter(|(p, _)| *p == plural)
        .flat_map(|(_, cols)| cols.iter())
        .map(|(name, column_type, json_path, priority)| PrinterColumn {
            name: name.to_string(),
            column_type: column_type.to_string(),
            json_path: json_path.to_string(),
            priority: *priority,
            description: String::new(),
        })
        .collect()
}

/// Built-in kinds whose objects carry `metadata.generation`.
const WITH_GENERATION: &[&str] =
    &["statefulsets", "deployments", "jobs", "cronjobs", "poddisruptionbudgets", "customresourcedefinitions"];

/// Kinds kubectl lists for `kubectl get all`.
const IN_CATEGORY_ALL: &[&str] = &["pods", "services", "statefulsets", "deployments", "jobs", "cronjobs"];

/// The served kinds, keyed by `(group, version, plural)`.
#[derive(Debug, Clone)]
pub struct Registry {
    kinds: BTreeMap<(String, String, String), Arc<Kind>>,
}

impl Default for Registry {
    fn default() -> Self {
        Self::with_built_ins()
    }
}

impl Registry {
    /// The registry of built-in kinds only.
    pub fn with_built_ins() -> Self {
        let mut kinds = BTreeMap::new();
        for &(group, version, kind, plural, namespaced, short_names, status) in BUILT_INS {
            let k = Kind {
                group: group.into(),
                version: version.into(),
                kind: kind.into(),
                plural: plural.into(),
                singular: kind.to_lowercase(),
                namespaced,
                short_names: short_names.iter().map(|s| s.to_string()).collect(),
                categories: if IN_CATEGORY_ALL.contains(&plural) { vec!["all".into()] } else { vec![] },
                status_subresource: status,
                generation: WITH_GENERATION.contains(&plural),
                scale_subresource: plural == "statefulsets" || plural == "deployments",
                printer_columns: built_in_columns(plural),
                custom: false,
                schema: None,
                openapi_schema: None,
            };
            kinds.insert((group.into(), version.into(), plural.into()), Arc::new(k));
        }
        Self { kinds }
    }

    /// The kind served at `group/version/plural`.
    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<Kind>> {
        self.kinds.get(&(group.to_string(), version.to_string(), plural.to_string())).cloned()
    }

    /// Every served kind, ordered by group, version and plural.
    pub fn all(&self) -> impl Iterator<Item = &Arc<Kind>> {
        self.kinds.values()
    }

    /// Any one served version of the storage key (for presenting objects found by storage key).
    pub fn by_storage_key(&self, key: &str) -> Option<Arc<Kind>> {
        self.kinds.values().find(|k| k.storage_key() == key).cloned()
    }

    /// The served groups with their versions, the preferred (first listed) version first.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut groups: Vec<(String, Vec<String>)> = Vec::new();
        for k in self.kinds.values() {
            match groups.iter_mut().find(|(g, _)| *g == k.group) {
                Some((_, versions)) if !versions.contains(&k.version) => versions.push(k.version.clone()),
                Some(_) => {}
                None => groups.push((k.group.clone(), vec![k.version.clone()])),
            }
        }
        for (_, versions) in &mut groups {
            versions.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        }
        groups
    }

    /// Serves the kinds of a CRD (from [`crd_kinds`]), replacing what the CRD served before.
    pub fn serve_crd(&mut self, kinds: Vec<Kind>) {
        if let Some(first) = kinds.first() {
            let (group, plural) = (first.group.clone(), first.plural.clone());
            self.unserve_crd(&group, &plural);
        }
        for kind in kinds {
            let key = (kind.group.clone(), kind.version.clone(), kind.plural.clone());
            self.kinds.insert(key, Arc::new(kind));
        }
    }

    /// Stops serving every version of `plural.group` that a CRD served.
    pub fn unserve_crd(&mut self, group: &str, plural: &str) {
        self.kinds.retain(|(g, _, p), k| !(k.custom && g == group && p == plural));
    }
}

/// The kinds a CRD serves, one per served version, each with its compiled schema; or the
/// `(field, message)` of every schema that does not compile (the apiserver refuses such a CRD).
pub fn crd_kinds(crd: &Value) -> Result<Vec<Kind>, Vec<(String, String)>> {
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or_default().to_string();
    let names = &spec["names"];
    let plural = names["plural"].as_str().unwrap_or_default().to_string();
    let kind_name = names["kind"].as_str().unwrap_or_default().to_string();
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| a.iter().filter_map(|s| s.as_str().map(String::from)).collect())
            .unwrap_or_default()
    };
    let (mut kinds, mut errors) = (Vec::new(), Vec::new());
    for (i, version) in spec["versions"].as_array().into_iter().flatten().enumerate() {
        let schema = match version.pointer("/schema/openAPIV3Schema") {
            None => None,
            Some(s) => match StructuralSchema::compile(s) {
                Ok(compiled) => Some(Arc::new(compiled)),
                Err(e) => {
                    errors.push((format!("spec.versions[{i}].schema"), e.to_string()));
                    continue;
                }
            },
        };
        if version["served"] == Value::Bool(false) {
            continue;
        }
        kinds.push(Kind {
            group: group.clone(),
            version: version["name"].as_str().unwrap_or_default().to_string(),
            kind: kind_name.clone(),
            plural: plural.clone(),
            singular: names["singular"]
                .as_str()
                .map(String::from)
                .unwrap_or_else(|| kind_name.to_lowercase()),
            namespaced: spec["scope"] != "Cluster",
            short_names: strings(&names["shortNames"]),
            categories: strings(&names["categories"]),
            status_subresource: version.pointer("/subresources/status").is_some(),
            generation: true,
            // The handler reads `.spec.replicas` and `.status.replicas`, the paths CRDs use by
            // convention (and the DatabaseCluster CRD declares).
            scale_subresource: version.pointer("/subresources/scale").is_some(),
            printer_columns: printer_columns(&version["additionalPrinterColumns"]),
            custom: true,
            schema,
            openapi_schema: version.pointer("/schema/openAPIV3Schema").cloned().map(Arc::new),
        });
    }
    if errors.is_empty() { Ok(kinds) } else { Err(errors) }
}

fn printer_columns(columns: &Value) -> Vec<PrinterColumn> {
    columns
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| PrinterColumn {
            name: c["name"].as_str().unwrap_or_default().to_string(),
            column_type: c["type"].as_str().unwrap_or("string").to_string(),
            json_path: c["jsonPath"].as_str().unwrap_or_default().to_string(),
            priority: c["priority"].as_i64().unwrap_or(0),
            description: c["description"].as_str().unwrap_or_default().to_string(),
        })
        .collect()
}

/// Kubernetes version priority: GA > beta > alpha, higher numbers first.
fn version_priority(v: &str) -> (u8, u32, u32) {
    let Some(rest) = v.strip_prefix('v') else { return (0, 0, 0) };
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let major = digits.parse().unwrap_or(0);
    let tail = &rest[digits.len()..];
    let (level, minor_str) = if let Some(m) = tail.strip_prefix("beta") {
        (2, m)
    } else if let Some(m) = tail.strip_prefix("alpha") {
        (1, m)
    } else if tail.is_empty() {
        (3, "")
    } else {
        return (0, 0, 0);
    };
    (level, major, minor_str.parse().unwrap_or(0))
}

/// The `CustomResourceDefinition` status a real server reports once the names are accepted.
pub fn established_crd_status(crd: &Value, now: &str) -> Value {
    let condition = |t: &str, reason: &str, message: &str| json!({"type": t, "status": "True", "lastTransitionTime": now, "reason": reason, "message": message});
    let stored: Vec<Value> = crd["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["storage"] == Value::Bool(true))
        .map(|v| v["name"].clone())
        .collect();
    json!({
        "acceptedNames": crd["spec"]["names"],
        "conditions": [
            condition("NamesAccepted", "NoConflicts", "no conflicts found"),
            condition("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "storedVersions": stored,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ga_versions_are_preferred_over_beta_and_alpha() {
        let mut v = vec!["v1alpha1", "v1", "v2beta1", "v1beta2"];
        v.sort_by_key(|x| std::cmp::Reverse(version_priority(x)));
        assert_eq!(v, ["v1", "v2beta1", "v1beta2", "v1alpha1"]);
    }

    #[test]
    fn built_ins_are_served_under_their_group_version() {
        let r = Registry::with_built_ins();
        let sts = r.get("apps", "v1", "statefulsets").unwrap();
        assert_eq!(sts.api_version(), "apps/v1");
        assert_eq!(sts.storage_key(), "statefulsets.apps");
        assert!(r.get("", "v1", "pods").unwrap().namespaced);
        assert!(!r.get("", "v1", "namespaces").unwrap().namespaced);
    }
}
