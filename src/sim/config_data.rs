//! What the apiserver refuses in the data of a ConfigMap or a Secret, worded as it words it
//! (Kubernetes 1.28 `ValidateConfigMap`, `ValidateSecret`): a key that is not a config key
//! (letters, digits, `-`, `_` and `.`, at most 253 characters, not `.`, `..` or `..`-prefixed),
//! a ConfigMap key in both `data` and `binaryData`, and values of more than 1 MiB in all (a
//! Secret's counted decoded).

use base64::Engine;
use serde_json::Value;

use crate::sim::api_error::Cause;
use crate::sim::resources::Kind;

/// The most a ConfigMap's or Secret's values may hold in all (`MaxSecretSize`).
const MAX_DATA_BYTES: usize = 1024 * 1024;

/// The apiserver's words for a key with other characters (`IsConfigMapKey`).
const CONFIG_KEY_PROBLEM: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";

fn key_problems(key: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if key.len() > 253 {
        problems.push("must be no more than 253 characters".to_owned());
    }
    if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')) {
        problems.push(CONFIG_KEY_PROBLEM.to_owned());
    }
    match key {
        "." => problems.push("must not be '.'".to_owned()),
        ".." => problems.push("must not be '..'".to_owned()),
        _ if key.starts_with("..") => problems.push("must not start with '..'".to_owned()),
        _ => {}
    }
    problems
}

fn invalid(field: String, value: &str, problem: &str) -> Cause {
    Cause {
        reason: "FieldValueInvalid".into(),
        message: format!("Invalid value: {}: {problem}", Value::from(value)),
        field,
    }
}

/// The refusals of a ConfigMap or Secret being written (none for other kinds).
pub fn causes(kind: &Kind, obj: &Value) -> Vec<Cause> {
    let secret = match (kind.group.as_str(), kind.plural.as_str()) {
        ("", "secrets") => true,
        ("", "configmaps") => false,
        _ => return Vec::new(),
    };
    let fields: &[&str] = if secret { &["data"] } else { &["data", "binaryData"] };
    let mut causes = Vec::new();
    let mut total = 0;
    for field in fields {
        for (key, value) in obj[*field].as_object().into_iter().flatten() {
            for problem in key_problems(key) {
                causes.push(invalid(format!("{field}[{key}]"), key, &problem));
            }
            if *field == "data" && obj["binaryData"].get(key).is_some() && !secret {
                causes.push(invalid(format!("data[{key}]"), key, "duplicate of key present in binaryData"));
            }
            let text = value.as_str().unwrap_or_default();
            total += if secret || *field == "binaryData" {
                base64::engine::general_purpose::STANDARD.decode(text).map_or(text.len(), |bytes| bytes.len())
            } else {
                text.len()
            };
        }
    }
    if total > MAX_DATA_BYTES {
        causes.push(Cause {
            reason: "FieldValueTooLong".into(),
            message: format!("Too long: must have at most {MAX_DATA_BYTES} bytes"),
            field: if secret { "data".into() } else { String::new() },
        });
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kind(plural: &str) -> std::sync::Arc<Kind> {
        crate::sim::resources::Registry::with_built_ins().get("", "v1", plural).expect("a built-in kind")
    }

    fn refusals(plural: &str, obj: Value) -> Vec<String> {
        causes(&kind(plural), &obj).into_iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
    }

    #[test]
    fn keys_must_be_config_keys() {
        assert!(
            refusals("configmaps", json!({"data": {"postgresql.conf": "x", "pg_hba.conf": "", "A-b_c": ""}}))
                .is_empty()
        );
        let refused = refusals("configmaps", json!({"data": {"a b": "x", "..x": "y"}}));
        assert_eq!(refused.len(), 2, "{refused:?}");
        assert!(
            refused[0].starts_with("data[..x]: Invalid value: \"..x\": must not start with '..'"),
            "{refused:?}"
        );
        assert!(
            refused[1].starts_with("data[a b]: Invalid value: \"a b\": a valid config key must consist"),
            "{refused:?}"
        );
        let twice = refusals("configmaps", json!({"data": {"k": "x"}, "binaryData": {"k": "eA=="}}));
        assert_eq!(twice, ["data[k]: Invalid value: \"k\": duplicate of key present in binaryData"]);
        assert_eq!(refusals("secrets", json!({"data": {"user/name": "eA=="}})).len(), 1);
    }

    #[test]
    fn values_may_hold_one_mebibyte_in_all() {
        let half = "x".repeat(MAX_DATA_BYTES / 2);
        assert!(refusals("configmaps", json!({"data": {"a": half, "b": half}})).is_empty());
        assert_eq!(
            refusals("configmaps", json!({"data": {"a": half, "b": half, "c": "x"}})),
            [": Too long: must have at most 1048576 bytes"]
        );
        // A Secret's values count decoded: 1 MiB of bytes is 4/3 as much base64.
        let mebibyte = base64::engine::general_purpose::STANDARD.encode(vec![0u8; MAX_DATA_BYTES]);
        assert!(refusals("secrets", json!({"data": {"a": mebibyte}})).is_empty());
        let over = base64::engine::general_purpose::STANDARD.encode(vec![0u8; MAX_DATA_BYTES + 1]);
        assert_eq!(
            refusals("secrets", json!({"data": {"a": over}})),
            ["data: Too long: must have at most 1048576 bytes"]
        );
    }
}
