//! A container's environment, as a kubelet builds it: `envFrom` first, then `env` in order, each
//! value with `$(VAR)` references expanded against the variables defined before it; `valueFrom`
//! reads Secrets, ConfigMaps and the pod's own fields (`fieldRef`). `command` and `args` are
//! expanded against the finished environment. Pure: the objects are looked up through [`Sources`].
//!
//! Expansion follows Kubernetes: `$(NAME)` of a defined variable is replaced, `$$` is an escaped
//! `$`, and a reference to an undefined variable is left as written.

use base64::Engine;
use serde_json::Value;

/// Where `valueFrom` and `envFrom` read objects from.
pub trait Sources {
    /// The Secret `name` in the pod's namespace.
    fn secret(&self, name: &str) -> Option<Value>;
    /// The ConfigMap `name` in the pod's namespace.
    fn config_map(&self, name: &str) -> Option<Value>;
}

/// Why a container's configuration cannot be built (the kubelet's `CreateContainerConfigError`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// Expands `$(VAR)` references in `text` with `lookup`.
pub fn expand(text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(close) = inner.find(')')
        {
            let name = &inner[..close];
            match lookup(name) {
                Some(value) => out.push_str(&value),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &inner[close + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// The value of a `fieldRef` path on the pod (`metadata.name`, `metadata.labels['k']`, `status.podIP`…).
pub fn field_value(pod: &Value, path: &str, pod_ip: &str) -> Option<String> {
    let quoted =
        |prefix: &str| path.strip_prefix(prefix)?.strip_prefix("['")?.strip_suffix("']").map(str::to_owned);
    if let Some(key) = quoted("metadata.labels") {
        return Some(pod["metadata"]["labels"][key].as_str().unwrap_or_default().to_owned());
    }
    if let Some(key) = quoted("metadata.annotations") {
        return Some(pod["metadata"]["annotations"][key].as_str().unwrap_or_default().to_owned());
    }
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    match path {
        "metadata.name" => Some(text(&pod["metadata"]["name"])),
        "metadata.namespace" => Some(text(&pod["metadata"]["namespace"])),
        "metadata.uid" => Some(text(&pod["metadata"]["uid"])),
        "spec.nodeName" => Some(text(&pod["spec"]["nodeName"])),
        "spec.serviceAccountName" => Some(text(&pod["spec"]["serviceAccountName"])),
        "status.podIP" | "status.podIPs" => Some(pod_ip.to_owned()),
        "status.hostIP" | "status.hostIPs" => Some("127.0.0.1".to_owned()),
        _ => None,
    }
}

/// Every key of a Secret's or ConfigMap's `data`, decoded.
pub fn object_entries(object: &Value, is_secret: bool) -> Vec<(String, Vec<u8>)> {
    let mut entries = Vec::new();
    for (key, value) in object["data"].as_object().into_iter().flatten() {
        let Some(text) = value.as_str() else { continue };
        let bytes = if is_secret {
            base64::engine::general_purpose::STANDARD.decode(text).unwrap_or_default()
        } else {
            text.as_bytes().to_vec()
        };
        entries.push((key.clone(), bytes));
    }
    if !is_secret {
        for (key, value) in object["binaryData"].as_object().into_iter().flatten() {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(value.as_str().unwrap_or_default())
                .unwrap_or_default();
            entries.push((key.clone(), bytes));
        }
    }
    entries
}

/// A `secretKeyRef`'s value (decoded), or `None` when it is optional and missing.
fn secret_value(sources: &dyn Sources, selector: &Value) -> Result<Option<String>, ConfigError> {
    key_ref_value(selector, "secret", "Secret", |name| sources.secret(name), decode_secret)
}

/// A `configMapKeyRef`'s value, or `None` when it is optional and missing.
fn config_map_value(sources: &dyn Sources, selector: &Value) -> Result<Option<String>, ConfigError> {
    key_ref_value(
        selector,
        "configmap",
        "ConfigMap",
        |name| sources.config_map(name),
        |map, key| map["data"][key].as_str().map(str::to_owned),
    )
}

/// Resolves a key reference as the kubelet does: a missing object or key is an error unless the
/// reference is `optional`, with the kubelet's messages (`kind` lower-case for the object, `Kind`
/// for the key).
fn key_ref_value(
    selector: &Value,
    kind: &str,
    key_kind: &str,
    object: impl Fn(&str) -> Option<Value>,
    value: impl Fn(&Value, &str) -> Option<String>,
) -> Result<Option<String>, ConfigError> {
    let name = selector["name"].as_str().unwrap_or_default();
    let key = selector["key"].as_str().unwrap_or_default();
    let optional = selector["optional"] == true;
    match object(name) {
        None if optional => Ok(None),
        None => Err(ConfigError(format!("{kind} \"{name}\" not found"))),
        Some(found) => match value(&found, key) {
            Some(v) => Ok(Some(v)),
            None if optional => Ok(None),
            None => Err(ConfigError(format!("couldn't find key {key} in {key_kind} {name}"))),
        },
    }
}

fn decode_secret(secret: &Value, key: &str) -> Option<String> {
    let encoded = secret["data"][key].as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD.decode(encoded).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// The container's environment, in definition order (a later definition of a name wins).
pub fn build(
    pod: &Value,
    container: &Value,
    pod_ip: &str,
    sources: &dyn Sources,
) -> Result<Vec<(String, String)>, ConfigError> {
    let mut vars: Vec<(String, String)> = Vec::new();
    let set = |vars: &mut Vec<(String, String)>, name: String, value: String| {
        vars.retain(|(n, _)| *n != name);
        vars.push((name, value));
    };
    for from in container["envFrom"].as_array().into_iter().flatten() {
        let prefix = from["prefix"].as_str().unwrap_or_default();
        let (object, is_secret, optional) = if from["secretRef"].is_object() {
            let name = from["secretRef"]["name"].as_str().unwrap_or_default();
            (sources.secret(name).ok_or(name), true, from["secretRef"]["optional"] == true)
        } else {
            let name = from["configMapRef"]["name"].as_str().unwrap_or_default();
            (sources.config_map(name).ok_or(name), false, from["configMapRef"]["optional"] == true)
        };
        match object {
            Ok(object) => {
                for (key, bytes) in object_entries(&object, is_secret) {
                    set(&mut vars, format!("{prefix}{key}"), String::from_utf8_lossy(&bytes).into_owned());
                }
            }
            Err(_) if optional => {}
            Err(name) => {
                let what = if is_secret { "secret" } else { "configmap" };
                return Err(ConfigError(format!("{what} \"{name}\" not found")));
            }
        }
    }
    for var in container["env"].as_array().into_iter().flatten() {
        let name = var["name"].as_str().unwrap_or_default().to_owned();
        let value = if let Some(raw) = var["value"].as_str() {
            let defined = vars.clone();
            Some(expand(raw, &|n| defined.iter().rev().find(|(k, _)| k == n).map(|(_, v)| v.clone())))
        } else if var["valueFrom"]["secretKeyRef"].is_object() {
            secret_value(sources, &var["valueFrom"]["secretKeyRef"])?
        } else if var["valueFrom"]["configMapKeyRef"].is_object() {
            config_map_value(sources, &var["valueFrom"]["configMapKeyRef"])?
        } else if let Some(path) = var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            Some(
                field_value(pod, path, pod_ip)
                    .ok_or_else(|| ConfigError(format!("unsupported fieldPath {path}")))?,
            )
        } else {
            Some(String::new())
        };
        if let Some(value) = value {
            set(&mut vars, name, value);
        }
    }
    Ok(vars)
}

/// `command` and `args` with `$(VAR)` expanded against `env`.
pub fn expand_all(list: &Value, env: &[(String, String)]) -> Vec<String> {
    let lookup = |n: &str| env.iter().rev().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    list.as_array().into_iter().flatten().filter_map(Value::as_str).map(|s| expand(s, &lookup)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Fixed;
    impl Sources for Fixed {
        fn secret(&self, name: &str) -> Option<Value> {
            (name == "app").then(|| json!({"kind": "Secret", "data": {"password": "czNjcjN0"}}))
        }
        fn config_map(&self, name: &str) -> Option<Value> {
            (name == "cfg").then(|| json!({"kind": "ConfigMap", "data": {"mode": "fast", "level": "3"}}))
        }
    }

    fn pod() -> Value {
        json!({"metadata": {"name": "db-0", "namespace": "prod", "uid": "u1", "labels": {"role": "primary"}}})
    }

    #[test]
    fn references_expand_like_kubernetes() {
        let lookup = |n: &str| (n == "A").then(|| "x".to_owned());
        assert_eq!(expand("$(A)-$(A)", &lookup), "x-x");
        assert_eq!(expand("$$(A) $(B) $ $(", &lookup), "$(A) $(B) $ $(");
    }

    #[test]
    fn values_come_from_secrets_config_maps_and_fields_in_order() {
        let container = json!({
            "envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "CFG_"}],
            "env": [
                {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "app", "key": "password"}}},
                {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}},
                {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "ROLE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['role']"}}},
                {"name": "URL", "value": "$(NAME).$(MODE):$(LATER)"},
                {"name": "LATER", "value": "1"},
            ],
        });
        let env = build(&pod(), &container, "127.10.0.9", &Fixed).unwrap();
        let get = |n: &str| env.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        assert_eq!(get("CFG_level"), Some("3"));
        assert_eq!(get("PASSWORD"), Some("s3cr3t"));
        assert_eq!(get("MODE"), Some("fast"));
        assert_eq!(get("IP"), Some("127.10.0.9"));
        assert_eq!(get("ROLE"), Some("primary"));
        assert_eq!(get("URL"), Some("db-0.fast:$(LATER)"));
        let args = expand_all(&json!(["-h", "$(IP)", "$(LATER)"]), &env);
        assert_eq!(args, ["-h", "127.10.0.9", "1"]);
    }

    #[test]
    fn a_missing_secret_is_a_config_error_unless_optional() {
        let missing =
            json!({"env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "k"}}}]});
        assert_eq!(build(&pod(), &missing, "", &Fixed).unwrap_err().0, "secret \"gone\" not found");
        let optional = json!({"env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "k", "optional": true}}}]});
        assert!(build(&pod(), &optional, "", &Fixed).unwrap().is_empty());
        let no_key =
            json!({"env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "app", "key": "k"}}}]});
        assert_eq!(build(&pod(), &no_key, "", &Fixed).unwrap_err().0, "couldn't find key k in Secret app");
    }
}
