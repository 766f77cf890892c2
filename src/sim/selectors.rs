//! Label and field selectors as list and watch requests give them (`labelSelector=app=db,tier!=x`,
//! `fieldSelector=metadata.name=foo`), parsed once and matched against JSON objects.

use serde_json::Value;

use crate::sim::api_error::ApiError;

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<Requirement>);

impl LabelSelector {
    /// Parses the `labelSelector` query syntax.
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let bad =
            || ApiError::bad_request(format!("unable to parse requirement: invalid label selector {s:?}"));
        let mut reqs = Vec::new();
        for part in split_top_level(s) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let req = if let Some(key) = part.strip_prefix('!') {
                Requirement::DoesNotExist(key.trim().to_string())
            } else if let Some((key, values)) = split_set(part, " notin ") {
                Requirement::NotIn(key, values.ok_or_else(bad)?)
            } else if let Some((key, values)) = split_set(part, " in ") {
                Requirement::In(key, values.ok_or_else(bad)?)
            } else if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==") {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once('=') {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else {
                Requirement::Exists(part.to_string())
            };
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    /// Whether the object's `metadata.labels` satisfy every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = &obj["metadata"]["labels"];
        let get = |k: &str| labels.get(k).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::DoesNotExist(k) => get(k).is_none(),
        })
    }
}

/// Splits on commas that are not inside `( … )`.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

/// `key in (a,b)` → `(key, Some([a, b]))`; `None` values when the parentheses are malformed.
fn split_set(part: &str, op: &str) -> Option<(String, Option<Vec<String>>)> {
    let (key, rest) = part.split_once(op)?;
    let rest = rest.trim();
    let values = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .map(|inner| inner.split(',').map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect());
    Some((key.trim().to_string(), values))
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

    #[test]
    fn label_selector_operators() {
        let o = obj();
        for (sel, want) in [
            ("", true),
            ("app=db", true),
            ("app==db,tier=x", true),
            ("app!=db", false),
            ("app in (web, db)", true),
            ("app notin (db)", false),
            ("missing notin (db)", true),
            ("tier", true),
            ("!tier", false),
            ("!missing,app in (db),tier=x", true),
        ] {
            assert_eq!(LabelSelector::parse(sel).unwrap().matches(&o), want, "{sel}");
        }
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
