//! Label and field selectors as list and watch requests give them (`labelSelector=app=db,tier!=x`,
//! `fieldSelector=metadata.name=foo`), parsed once and matched against JSON objects.

use serde_json::Value;

use crate::runtime::selector;
use crate::sim::api_error::ApiError;

/// A parsed label selector (the runtime's, see [`selector`]); the empty selector matches
/// everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(selector::LabelSelector);

impl LabelSelector {
    /// Parses the `labelSelector` query syntax; a malformed one is a 400.
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        selector::LabelSelector::parse(s).map(Self).map_err(|e| ApiError::bad_request(e.to_string()))
    }

    /// Whether the object's `metadata.labels` satisfy every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = &obj["metadata"]["labels"];
        self.0.matches_with(|k| labels.get(k).and_then(Value::as_str))
    }
}

/// A parsed field selector: `path=value` and `path!=value` terms over dotted object paths.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(Vec<String>, bool, String)>);

impl FieldSelector {
    /// Parses the `fieldSelector` query syntax.
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let mut terms = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (path, equal, value) = if let Some((p, v)) = part.split_once("!=") {
                (p, false, v)
            } else if let Some((p, v)) = part.split_once("==") {
                (p, true, v)
            } else if let Some((p, v)) = part.split_once('=') {
                (p, true, v)
            } else {
                return Err(ApiError::bad_request(format!("invalid field selector: {s:?}")));
            };
            terms.push((path.trim().split('.').map(String::from).collect(), equal, value.trim().to_string()));
        }
        Ok(Self(terms))
    }

    /// Whether every term holds for the object (a missing field compares as the empty string).
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(path, equal, want)| {
            let found = path.iter().try_fold(obj, |v, seg| v.get(seg));
            let have = match found {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (have == *want) == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj() -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": {"app": "db", "tier": "x"}}, "status": {"phase": "Running"}})
    }

    /// The operators themselves are tested in `runtime::selector`; here, the JSON labels and
    /// the 400 for a malformed selector.
    #[test]
    fn label_selectors_read_the_json_labels() {
        let o = obj();
        assert!(LabelSelector::parse("app=db,tier in (x)").unwrap().matches(&o));
        assert!(!LabelSelector::parse("app=db,!tier").unwrap().matches(&o));
        assert!(LabelSelector::parse("").unwrap().matches(&json!({"metadata": {}})));
        assert!(LabelSelector::parse("app in (db").is_err());
    }

    #[test]
    fn field_selector_terms() {
        let o = obj();
        assert!(FieldSelector::parse("metadata.name=a").unwrap().matches(&o));
        assert!(!FieldSelector::parse("metadata.name=b").unwrap().matches(&o));
        assert!(FieldSelector::parse("metadata.namespace!=x,status.phase=Running").unwrap().matches(&o));
        assert!(FieldSelector::parse("nonsense").is_err());
    }
}
