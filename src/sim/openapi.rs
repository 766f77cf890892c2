//! OpenAPI documents, just enough for kubectl: an empty protobuf v2 document (so kubectl finds no
//! client-side schema and builds patches from its compiled-in types, or as merge patches for
//! custom resources), and v3 documents whose PATCH operations declare the `fieldValidation`
//! parameter, so kubectl sends `fieldValidation=Strict` and the server validates, as with a real
//! apiserver. Custom resources' schemas are published (for `kubectl explain`); built-in kinds'
//! are not.

use serde_json::{Map, Value, json};

use crate::sim::resources::{Kind, Registry};
use crate::sim::version::KubernetesVersion;

/// The path of a group version in the v3 index: `api/v1`, `apis/apps/v1`.
fn group_version_path(group: &str, version: &str) -> String {
    if group.is_empty() { format!("api/{version}") } else { format!("apis/{group}/{version}") }
}

fn digest(text: &str) -> String {
    let h = text
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3));
    format!("{h:016X}")
}

/// `/openapi/v3`: one entry per served group version, with a hash of its document.
pub fn v3_index(registry: &Registry, server: KubernetesVersion) -> Value {
    let mut paths = Map::new();
    for (group, versions) in registry.groups() {
        for version in versions {
            let path = group_version_path(&group, &version);
            let doc = v3_group_version(registry, &group, &version, server)
                .map(|d| d.to_string())
                .unwrap_or_default();
            paths.insert(
                path.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={}", digest(&doc))}),
            );
        }
    }
    json!({"paths": paths})
}

fn patch_operation(kind: &Kind) -> Value {
    json!({
        "patch": {
            "operationId": format!("patch{}", kind.kind),
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": {"group": kind.group, "version": kind.version, "kind": kind.kind},
            "parameters": [
                {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
                {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
                {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
                {"name": "force", "in": "query", "schema": {"type": "boolean"}},
            ],
            "responses": {"200": {"description": "OK"}},
        }
    })
}

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const OBJECT_META_DESCRIPTION: &str = "ObjectMeta is metadata that all persisted resources must have, \
    which includes all objects users must create.";

/// The name the apiserver gives a custom resource's schema: the group reversed, the version, the
/// kind (`io.madmmas.databases.v1.DatabaseCluster`).
fn definition_name(kind: &Kind) -> String {
    let reversed: Vec<&str> = kind.group.split('.').rev().collect();
    format!("{}.{}.{}", reversed.join("."), kind.version, kind.kind)
}

/// A CRD version's `openAPIV3Schema` as the apiserver publishes it: tagged with its
/// group/version/kind (how `kubectl explain` finds it), with `apiVersion`, `kind` and `metadata`
/// declared.
fn published_schema(kind: &Kind, schema: &Value) -> Value {
    let mut published = schema.clone();
    published["x-kubernetes-group-version-kind"] =
        json!([{"group": kind.group, "version": kind.version, "kind": kind.kind}]);
    let properties = &mut published["properties"];
    if !properties.is_object() {
        *properties = json!({});
    }
    properties["apiVersion"] = json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."});
    properties["kind"] = json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."});
    properties["metadata"] = json!({
        "description": "Standard object's metadata.",
        "allOf": [{"$ref": format!("#/components/schemas/{OBJECT_META}")}],
    });
    published
}

/// `/openapi/v3/api/v1` or `/openapi/v3/apis/{group}/{version}`, if served.
pub fn v3_group_version(
    registry: &Registry,
    group: &str,
    version: &str,
    server: KubernetesVersion,
) -> Option<Value> {
    let kinds: Vec<_> = registry.all().filter(|k| k.group == group && k.version == version).collect();
    if kinds.is_empty() {
        return None;
    }
    let prefix =
        if group.is_empty() { format!("/api/{version}") } else { format!("/apis/{group}/{version}") };
    let (mut paths, mut schemas) = (Map::new(), Map::new());
    for kind in kinds {
        let item = if kind.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", kind.plural)
        } else {
            format!("{prefix}/{}/{{name}}", kind.plural)
        };
        paths.insert(item, patch_operation(kind));
        if let Some(schema) = &kind.openapi_schema {
            schemas.insert(definition_name(kind), published_schema(kind, schema));
        }
    }
    if !schemas.is_empty() {
        schemas.insert(OBJECT_META.into(), json!({"description": OBJECT_META_DESCRIPTION, "type": "object"}));
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": server.git_version()},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_and_documents_cover_the_served_group_versions() {
        let r = Registry::with_built_ins();
        let index = v3_index(&r, KubernetesVersion::default());
        let url = index["paths"]["apis/apps/v1"]["serverRelativeURL"].as_str().unwrap();
        assert!(url.starts_with("/openapi/v3/apis/apps/v1?hash="));
        let doc = v3_group_version(&r, "apps", "v1", KubernetesVersion::default()).unwrap();
        let op = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/statefulsets/{name}"]["patch"];
        assert_eq!(op["x-kubernetes-group-version-kind"]["kind"], "StatefulSet");
        assert!(op["parameters"].as_array().unwrap().iter().any(|p| p["name"] == "fieldValidation"));
        assert!(v3_group_version(&r, "nope", "v1", KubernetesVersion::default()).is_none());
    }
}
