//! Request paths resolved against the kind registry: which kind, namespace, name, subresource.

use std::sync::Arc;

use crate::sim::resources::{Kind, Registry};

/// A resource request's target.
#[derive(Debug, Clone)]
pub struct Target {
    /// The kind served at the path's group/version/resource.
    pub kind: Arc<Kind>,
    /// The namespace in the path, if any.
    pub namespace: Option<String>,
    /// The object name, for requests on one object.
    pub name: Option<String>,
    /// The subresource (`status`), if any.
    pub subresource: Option<String>,
}

/// A path under `/api/v1` or `/apis/{group}/{version}`, split into group, version and the rest.
pub fn split_api_path(path: &str) -> Option<(String, String, Vec<String>)> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    match segments.as_slice() {
        ["api", version, rest @ ..] => Some((String::new(), version.to_string(), own(rest))),
        ["apis", group, version, rest @ ..] => Some((group.to_string(), version.to_string(), own(rest))),
        _ => None,
    }
}

fn own(s: &[&str]) -> Vec<String> {
    s.iter().map(|x| x.to_string()).collect()
}

/// Resolves the resource part of a path (`namespaces/ns/pods/name/status`, `nodes/x`, ...).
pub fn resolve(registry: &Registry, group: &str, version: &str, rest: &[String]) -> Option<Target> {
    let namespaced_kind =
        |i: usize| rest.get(i).and_then(|p| registry.get(group, version, p)).filter(|k| k.namespaced);
    let (kind, namespace, tail) = match rest {
        [first, ns, _, ..] if first == "namespaces" && namespaced_kind(2).is_some() => {
            (namespaced_kind(2)?, Some(ns.clone()), &rest[3..])
        }
        [plural, ..] => (registry.get(group, version, plural)?, None, &rest[1..]),
        [] => return None,
    };
    if tail.len() > 2 || (kind.namespaced && namespace.is_none() && !tail.is_empty()) {
        return None;
    }
    Some(Target { kind, namespace, name: tail.first().cloned(), subresource: tail.get(1).cloned() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(path: &str) -> Option<Target> {
        let r = Registry::with_built_ins();
        let (g, v, rest) = split_api_path(path)?;
        resolve(&r, &g, &v, &rest)
    }

    #[test]
    fn paths_resolve_to_kind_namespace_name_and_subresource() {
        let t = target("/apis/apps/v1/namespaces/ns/statefulsets/db/status").unwrap();
        assert_eq!((t.kind.plural.as_str(), t.namespace.as_deref()), ("statefulsets", Some("ns")));
        assert_eq!((t.name.as_deref(), t.subresource.as_deref()), (Some("db"), Some("status")));
        let t = target("/api/v1/pods").unwrap();
        assert!(t.namespace.is_none() && t.name.is_none());
        let t = target("/api/v1/namespaces/ns").unwrap();
        assert_eq!((t.kind.plural.as_str(), t.name.as_deref()), ("namespaces", Some("ns")));
        let t = target("/api/v1/namespaces/ns/status").unwrap();
        assert_eq!(t.subresource.as_deref(), Some("status"));
        assert!(target("/api/v1/pods/x").is_none(), "namespaced object without a namespace");
        assert!(target("/api/v1/nothings").is_none());
    }
}
