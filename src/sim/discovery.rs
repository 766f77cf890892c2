//! Discovery documents: `/version`, `/api`, `/apis`, `/api/v1` and `/apis/{group}/{version}`,
//! built from the kind registry so CRD-served kinds (with short names and categories) appear.

use serde_json::{Value, json};

use crate::sim::resources::{Kind, Registry};
use crate::sim::version::KubernetesVersion;

/// `/version`, reporting `version`.
pub fn version(version: KubernetesVersion) -> Value {
    json!({
        "major": "1",
        "minor": version.minor.to_string(),
        "gitVersion": version.git_version(),
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// `/api`: the core group's versions.
pub fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn group_entry(name: &str, versions: &[String]) -> Value {
    let versions: Vec<Value> =
        versions.iter().map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v})).collect();
    json!({"name": name, "versions": versions, "preferredVersion": versions[0]})
}

/// `/apis`: every named group.
pub fn groups(registry: &Registry) -> Value {
    let groups: Vec<Value> = registry
        .groups()
        .iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, versions)| group_entry(g, versions))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`: one group, if served.
pub fn group(registry: &Registry, name: &str) -> Option<Value> {
    let groups = registry.groups();
    let (_, versions) = groups.iter().find(|(g, _)| g == name && !g.is_empty())?;
    let mut g = group_entry(name, versions);
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    Some(g)
}

const VERBS: &[&str] = &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];

fn resource_entries(kind: &Kind) -> Vec<Value> {
    let mut main = json!({
        "name": kind.plural,
        "singularName": kind.singular,
        "namespaced": kind.namespaced,
        "kind": kind.kind,
        "verbs": if crate::sim::reviews::is_review(kind) { &["create"][..] } else { VERBS },
    });
    if !kind.short_names.is_empty() {
        main["shortNames"] = json!(kind.short_names);
    }
    if !kind.categories.is_empty() {
        main["categories"] = json!(kind.categories);
    }
    let mut entries = vec![main];
    if kind.status_subresource {
        entries.push(json!({
            "name": format!("{}/status", kind.plural),
            "singularName": "",
            "namespaced": kind.namespaced,
            "kind": kind.kind,
            "verbs": ["get", "patch", "update"],
        }));
    }
    if kind.scale_subresource {
        entries.push(json!({
            "name": format!("{}/scale", kind.plural),
            "singularName": "",
            "namespaced": kind.namespaced,
            "group": "autoscaling",
            "version": "v1",
            "kind": "Scale",
            "verbs": ["get", "patch", "update"],
        }));
    }
    entries
}

/// `/api/v1` or `/apis/{group}/{version}`: the resources served there, if any.
pub fn resources(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let kinds: Vec<_> = registry.all().filter(|k| k.group == group && k.version == version).collect();
    if kinds.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    let resources: Vec<Value> = kinds.iter().flat_map(|k| resource_entries(k)).collect();
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_resources_list_status_subresources() {
        let r = Registry::with_built_ins();
        let doc = resources(&r, "", "v1").unwrap();
        let names: Vec<&str> =
            doc["resources"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
        assert!(names.contains(&"pods") && names.contains(&"pods/status"));
        assert!(!names.contains(&"configmaps/status"));
        assert!(resources(&r, "nope", "v1").is_none());
        assert!(groups(&r)["groups"].as_array().unwrap().iter().any(|g| g["name"] == "apps"));
    }
}
