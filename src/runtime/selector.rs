//! Label selectors in the `labelSelector` query syntax (`app=db,tier!=x,env in (a,b),!gone`),
//! parsed once and matched against an object's labels.
//!
//! The runtime matches a write's labels against each informer's selector, to know which informer
//! delivers the write (read-your-writes, `freshness`); the simulated API server filters lists and
//! watches with the same parser.

use std::collections::BTreeMap;

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

/// A selector that does not parse (a set without its closing parenthesis).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unable to parse requirement: invalid label selector {0:?}")]
pub struct InvalidSelector(pub String);

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<Requirement>);

impl LabelSelector {
    /// Parses the `labelSelector` query syntax.
    pub fn parse(s: &str) -> Result<Self, InvalidSelector> {
        let bad = || InvalidSelector(s.to_string());
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

    /// Whether labels, read through `label` (a key's value, if set), satisfy every requirement.
    pub fn matches_with<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => label(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => label(k) != Some(v.as_str()),
            Requirement::In(k, vs) => label(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => label(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            Requirement::Exists(k) => label(k).is_some(),
            Requirement::DoesNotExist(k) => label(k).is_none(),
        })
    }

    /// Whether `labels` (an object's `metadata.labels`) satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_with(|k| labels.get(k).map(String::as_str))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_selector_operators() {
        let labels: BTreeMap<String, String> =
            [("app", "db"), ("tier", "x")].into_iter().map(|(k, v)| (k.into(), v.into())).collect();
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
            assert_eq!(LabelSelector::parse(sel).unwrap().matches(&labels), want, "{sel}");
        }
        assert!(LabelSelector::parse("app in (db").is_err());
    }
}
