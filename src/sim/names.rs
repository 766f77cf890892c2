//! Object metadata as the apiserver validates it (apimachinery `validation`): names by kind (DNS
//! subdomain for most, DNS-1035 label for Services, DNS-1123 label for namespaces), `generateName`
//! prefixes, label keys and values, and the total size of annotations. Pure functions.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use crate::sim::api_error::Cause;

const DNS1123_LABEL: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_SUBDOMAIN: &str = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1035_LABEL: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const QUALIFIED_NAME: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_VALUE: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";

/// The most bytes all of an object's annotations (keys and values) may hold.
pub const ANNOTATIONS_MAX_BYTES: usize = 256 * 1024;

fn anchored(pattern: &str) -> Regex {
    // Invariant: the patterns are the constants above, which compile.
    Regex::new(&format!("^(?:{pattern})$")).expect("constant patterns compile")
}

static LABEL: LazyLock<Regex> = LazyLock::new(|| anchored(DNS1123_LABEL));
static SUBDOMAIN: LazyLock<Regex> = LazyLock::new(|| anchored(DNS1123_SUBDOMAIN));
static DNS1035: LazyLock<Regex> = LazyLock::new(|| anchored(DNS1035_LABEL));
static QUALIFIED: LazyLock<Regex> = LazyLock::new(|| anchored(QUALIFIED_NAME));
static VALUE: LazyLock<Regex> = LazyLock::new(|| anchored(LABEL_VALUE));

/// Which rule a kind's object names follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// RFC 1123 subdomain, at most 253 characters: most kinds.
    Subdomain,
    /// RFC 1123 label, at most 63 characters: namespaces.
    Label,
    /// RFC 1035 label (starts with a letter), at most 63 characters: Services.
    Dns1035Label,
    /// Any name usable as a URL path segment (`system:controller:x` too): the RBAC kinds.
    PathSegment,
}

impl NameRule {
    /// The rule for the kind `plural` of `group`.
    pub fn of(group: &str, plural: &str) -> NameRule {
        match (group, plural) {
            ("", "namespaces") => NameRule::Label,
            ("", "services") => NameRule::Dns1035Label,
            ("rbac.authorization.k8s.io", _) => NameRule::PathSegment,
            _ => NameRule::Subdomain,
        }
    }

    /// The apiserver's messages for what is wrong with `name` under this rule; empty if valid.
    pub fn problems(self, name: &str) -> Vec<String> {
        if self == NameRule::PathSegment {
            return path_segment_problems(name);
        }
        let (max, regex, what, example): (usize, &Regex, &str, &str) = match self {
            NameRule::Subdomain | NameRule::PathSegment => (
                253,
                &SUBDOMAIN,
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '",
                "')",
            ),
            NameRule::Label => (
                63,
                &LABEL,
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '",
                "')",
            ),
            NameRule::Dns1035Label => (
                63,
                &DNS1035,
                "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '",
                "')",
            ),
        };
        let pattern = match self {
            NameRule::Subdomain | NameRule::PathSegment => DNS1123_SUBDOMAIN,
            NameRule::Label => DNS1123_LABEL,
            NameRule::Dns1035Label => DNS1035_LABEL,
        };
        let mut problems = Vec::new();
        if name.len() > max {
            problems.push(format!("must be no more than {max} characters"));
        }
        if !regex.is_match(name) {
            problems.push(format!("{what}{pattern}{example}"));
        }
        problems
    }
}

/// apimachinery's `IsValidPathSegmentName`: not `.` or `..`, no `/` or `%`.
fn path_segment_problems(name: &str) -> Vec<String> {
    if name == "." || name == ".." {
        return vec![format!("may not be '{name}'")];
    }
    ['/', '%'].iter().filter(|c| name.contains(**c)).map(|c| format!("may not contain '{c}'")).collect()
}

fn invalid(field: &str, value: &str, problems: &[String]) -> Cause {
    Cause {
        reason: "FieldValueInvalid".into(),
        message: format!("Invalid value: {value:?}: {}", problems.join(", ")),
        field: field.into(),
    }
}

/// The causes of a 422 for the name (or, when the name was generated, the `generateName` prefix,
/// judged as the apiserver does: as a name whose trailing `-` is allowed).
pub fn name_causes(rule: NameRule, name: &str, generate_name: Option<&str>) -> Vec<Cause> {
    if let Some(prefix) = generate_name {
        let masked = match prefix.strip_suffix('-') {
            Some(stem) => format!("{stem}a"),
            None => prefix.to_owned(),
        };
        let problems = rule.problems(&masked);
        if !problems.is_empty() {
            return vec![invalid("metadata.generateName", prefix, &problems)];
        }
    }
    let problems = rule.problems(name);
    if problems.is_empty() { vec![] } else { vec![invalid("metadata.name", name, &problems)] }
}

/// What is wrong with a label or annotation key: a name of at most 63 characters, optionally
/// after a DNS-subdomain prefix and `/`.
fn key_problems(key: &str) -> Vec<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let mut problems = Vec::new();
    if let Some(prefix) = prefix {
        problems.extend(NameRule::Subdomain.problems(prefix).into_iter().map(|p| format!("prefix part {p}")));
    }
    if name.is_empty() || name.len() > 63 || !QUALIFIED.is_match(name) {
        problems.push(format!(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with \
             an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation \
             is '{QUALIFIED_NAME}') and be no more than 63 characters"
        ));
    }
    problems
}

/// The causes of a 422 for the labels and annotations of `metadata`.
pub fn label_and_annotation_causes(metadata: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    for (key, value) in metadata["labels"].as_object().into_iter().flatten() {
        let key_problems = key_problems(key);
        if !key_problems.is_empty() {
            causes.push(invalid("metadata.labels", key, &key_problems));
        }
        let value = value.as_str().unwrap_or_default();
        let mut problems = Vec::new();
        if value.len() > 63 {
            problems.push("must be no more than 63 characters".to_owned());
        }
        if !VALUE.is_match(value) {
            problems.push(format!(
                "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', \
                 and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or \
                 '12345', regex used for validation is '{LABEL_VALUE}')"
            ));
        }
        if !problems.is_empty() {
            causes.push(invalid("metadata.labels", value, &problems));
        }
    }
    let mut total = 0;
    for (key, value) in metadata["annotations"].as_object().into_iter().flatten() {
        let problems = key_problems(&key.to_lowercase());
        if !problems.is_empty() {
            causes.push(invalid("metadata.annotations", key, &problems));
        }
        total += key.len() + value.as_str().map_or(0, str::len);
    }
    if total > ANNOTATIONS_MAX_BYTES {
        causes.push(Cause {
            reason: "FieldValueTooLong".into(),
            message: format!("Too long: must have at most {ANNOTATIONS_MAX_BYTES} bytes"),
            field: "metadata.annotations".into(),
        });
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_follow_their_kinds_rule() {
        let sub = NameRule::of("apps", "statefulsets");
        assert!(sub.problems("db.prod-1").is_empty());
        assert!(!sub.problems(&"a".repeat(254)).is_empty());
        assert!(sub.problems(&"a".repeat(253)).is_empty());
        assert!(!sub.problems("Db").is_empty() && !sub.problems("db.").is_empty());
        let svc = NameRule::of("", "services");
        assert!(svc.problems(&"a".repeat(63)).is_empty());
        assert!(!svc.problems(&"a".repeat(64)).is_empty());
        assert!(!svc.problems("1db").is_empty() && !svc.problems("db.prod").is_empty());
        let role = NameRule::of("rbac.authorization.k8s.io", "clusterroles");
        assert!(role.problems("system:controller:x").is_empty());
        assert_eq!(role.problems("a/b%"), ["may not contain '/'", "may not contain '%'"]);
        assert_eq!(role.problems(".."), ["may not be '..'"]);
        let ns = NameRule::of("", "namespaces");
        assert!(ns.problems("1ns").is_empty());
        assert!(!ns.problems("ns.prod").is_empty() && !ns.problems(&"a".repeat(64)).is_empty());
    }

    #[test]
    fn a_generate_name_prefix_may_end_in_a_dash_but_not_a_dot() {
        let rule = NameRule::Subdomain;
        assert!(name_causes(rule, "pg-x7k2p", Some("pg-")).is_empty());
        let causes = name_causes(rule, "pg.x7k2p", Some("pg."));
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "metadata.generateName");
        assert!(causes[0].message.starts_with("Invalid value: \"pg.\": a lowercase RFC 1123 subdomain"));
    }

    #[test]
    fn label_values_are_63_characters_with_alphanumeric_ends() {
        let labels = |value: &str| label_and_annotation_causes(&json!({"labels": {"app": value}}));
        assert!(labels("").is_empty() && labels("a.b_c-d").is_empty() && labels(&"a".repeat(63)).is_empty());
        assert_eq!(labels(&"a".repeat(64)).len(), 1);
        assert_eq!(labels("-a").len(), 1);
        assert_eq!(labels("a b").len(), 1);
        let key = label_and_annotation_causes(&json!({"labels": {"example.com/a/b": "x"}}));
        assert_eq!(key.len(), 1);
        assert!(label_and_annotation_causes(&json!({"labels": {"app.kubernetes.io/name": "x"}})).is_empty());
    }

    #[test]
    fn annotations_may_hold_256_kib_in_all() {
        let big = |n: usize| json!({"annotations": {"a": "x".repeat(n - 1)}});
        assert!(label_and_annotation_causes(&big(ANNOTATIONS_MAX_BYTES)).is_empty());
        let causes = label_and_annotation_causes(&big(ANNOTATIONS_MAX_BYTES + 1));
        assert_eq!(causes[0].reason, "FieldValueTooLong");
    }
}
