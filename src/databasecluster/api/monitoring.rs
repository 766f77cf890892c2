//! What a user writes about monitoring (`spec.monitoring`) and the checks the CRD cannot make.
//!
//! `spec.monitoring.customQueriesConfigMap: {name, key}` names a ConfigMap in the cluster's
//! namespace whose key holds custom metrics queries (YAML in CloudNativePG's shape, read by the
//! instance manager: `crate::instance::metrics::custom`). The operator never reads that
//! ConfigMap (so it needs no permission on it): the pods mount it as an optional volume, so a
//! ConfigMap or key that does not exist does not keep a pod from starting, and the kubelet
//! refreshes the file when the ConfigMap changes (no restart: the manager reads it at each
//! scrape). Adding, changing or removing the reference changes the pod template, which rolls the
//! instances.

use serde::{Deserialize, Serialize};

use crate::databasecluster::api::types::STORAGE_CLASS_PATTERN;
use crate::databasecluster::api::validation::is_storage_class_name;

/// What a ConfigMap key may be, as the API server checks a ConfigMap's keys: letters, digits,
/// `-`, `_` and `.`, neither `.` nor `..` nor starting with `..`.
pub const CONFIG_MAP_KEY_PATTERN: &str = r"^([-_a-zA-Z0-9]|\.[-_a-zA-Z0-9])[-._a-zA-Z0-9]*$";

/// Monitoring of the instances (each serves Prometheus metrics on its port `metrics`, 9187).
#[derive(Deserialize, Serialize, schemars::JsonSchema, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct MonitoringSpec {
    /// A key of a ConfigMap in the cluster's namespace holding custom queries (CloudNativePG's
    /// YAML shape: `name: {query, metrics: [{column: {usage: LABEL|COUNTER|GAUGE|DISCARD,
    /// description}}], primary: true}`), served on every instance's `/metrics` as
    /// `<name>_<column>`. The ConfigMap may be created later; edits reach the pods without a
    /// restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_queries_config_map: Option<ConfigMapKeyRef>,
}

/// One key of a ConfigMap.
#[derive(Deserialize, Serialize, schemars::JsonSchema, Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigMapKeyRef {
    /// The ConfigMap's name.
    #[schemars(length(min = 1, max = 253), regex(pattern = STORAGE_CLASS_PATTERN))]
    pub name: String,
    /// The key.
    #[schemars(length(min = 1, max = 253), regex(pattern = CONFIG_MAP_KEY_PATTERN))]
    pub key: String,
}

/// Whether `key` may be a ConfigMap's key (see [`CONFIG_MAP_KEY_PATTERN`]), at most 253 bytes.
pub fn is_config_map_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 253
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && key != "."
        && !key.starts_with("..")
}

/// The custom queries' ConfigMap key of `monitoring`, checked; `Err` says what is wrong.
pub fn custom_queries(monitoring: Option<&MonitoringSpec>) -> Result<Option<ConfigMapKeyRef>, String> {
    let Some(reference) = monitoring.and_then(|m| m.custom_queries_config_map.as_ref()) else {
        return Ok(None);
    };
    if !is_storage_class_name(&reference.name) {
        return Err(format!("name {:?} is not a ConfigMap name (a DNS-1123 subdomain)", reference.name));
    }
    if !is_config_map_key(&reference.key) {
        return Err(format!(
            "key {:?} is not a ConfigMap key (letters, digits, '-', '_' and '.')",
            reference.key
        ));
    }
    Ok(Some(reference.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_is_a_config_map_name_and_key() {
        let with = |name: &str, key: &str| {
            let monitoring = MonitoringSpec {
                custom_queries_config_map: Some(ConfigMapKeyRef { name: name.into(), key: key.into() }),
            };
            custom_queries(Some(&monitoring)).map(|r| r.map(|r| (r.name, r.key)))
        };
        let cases: [(&str, &str, bool); 9] = [
            ("queries", "queries.yaml", true),
            ("my.queries-1", "custom_queries", true),
            ("Queries", "q", false),
            ("", "q", false),
            ("-q", "q", false),
            ("q", "", false),
            ("q", "a/b", false),
            ("q", "..", false),
            ("q", &"k".repeat(254), false),
        ];
        for (name, key, valid) in cases {
            let got = with(name, key);
            assert_eq!(got.is_ok(), valid, "{name:?} {key:?}: {got:?}");
            if valid {
                assert_eq!(got, Ok(Some((name.to_owned(), key.to_owned()))));
            }
        }
        assert_eq!(custom_queries(None), Ok(None));
        assert_eq!(custom_queries(Some(&MonitoringSpec::default())), Ok(None));
        assert!(with("q", "a b").unwrap_err().starts_with("key \"a b\""));
        assert!(with("Q", "q").unwrap_err().starts_with("name \"Q\""));
    }

    #[test]
    fn the_crd_pattern_and_the_check_agree_on_keys() {
        let pattern = regex::Regex::new(CONFIG_MAP_KEY_PATTERN).unwrap();
        for key in ["a", "a.b", "A-b_c", ".a", "a..", "a b", "a/b", "é", "..", ".", "..a", ""] {
            assert_eq!(pattern.is_match(key), is_config_map_key(key), "{key:?}");
        }
    }
}
