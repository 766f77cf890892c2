//! The CRD's descriptions as `kubectl explain` shows them. The doc comments they come from are
//! wrapped at the source's line width, and kubectl wraps again to the terminal, so each kept break
//! would cut a sentence in two; and kubectl before 1.30 does not print a field's `enum`, so the
//! allowed values are said in the description too. Pure.

use serde_json::Value;

/// Every `description` under `value` with its lines joined ([`unwrap_lines`]) and, where the
/// schema has an `enum`, its values named ([`with_allowed_values`]).
pub(crate) fn unwrap_descriptions(value: &mut Value) {
    match value {
        Value::Object(map) => {
            let allowed: Vec<String> = map
                .get("enum")
                .and_then(Value::as_array)
                .map(|values| values.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                .unwrap_or_default();
            for (key, field) in map.iter_mut() {
                match field {
                    Value::String(text) if key == "description" => {
                        *text = with_allowed_values(&unwrap_lines(text), &allowed);
                    }
                    other => unwrap_descriptions(other),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(unwrap_descriptions),
        _ => {}
    }
}

/// `description` followed by `One of: `A`, `B`.` (nothing when `allowed` is empty).
pub fn with_allowed_values(description: &str, allowed: &[String]) -> String {
    if allowed.is_empty() {
        return description.to_owned();
    }
    let values: Vec<String> = allowed.iter().map(|v| format!("`{v}`")).collect();
    format!("{description} One of: {}.", values.join(", "))
}

/// A doc comment's text as `kubectl explain` should show it: the line breaks of the source's
/// wrapping become spaces (kubectl wraps to the terminal itself, so kept breaks cut sentences),
/// while blank lines between paragraphs and the breaks before list items stay.
pub fn unwrap_lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        out.push_str(line);
        match lines.peek() {
            None => {}
            Some(next) if line.is_empty() || next.is_empty() || next.trim_start().starts_with("- ") => {
                out.push('\n');
            }
            Some(_) => out.push(' '),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_join_wrapped_lines_and_keep_paragraphs_and_lists() {
        for (written, shown) in [
            ("one line", "one line"),
            ("a sentence wrapped\nat eighty columns.", "a sentence wrapped at eighty columns."),
            ("first.\n\nsecond\nparagraph.", "first.\n\nsecond paragraph."),
            ("items:\n- one\n- two\nstill two", "items:\n- one\n- two still two"),
        ] {
            assert_eq!(unwrap_lines(written), shown, "{written:?}");
        }
    }

    #[test]
    fn an_enums_description_names_its_values() {
        let allowed = ["Switchover".to_owned(), "Restart".to_owned()];
        assert_eq!(with_allowed_values("How.", &allowed), "How. One of: `Switchover`, `Restart`.");
        assert_eq!(with_allowed_values("How.", &[]), "How.");
        let schema = serde_json::to_value(crate::databasecluster::api::types::crd()).unwrap();
        let spec = &schema["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        let method = spec["properties"]["primaryUpdateMethod"]["description"].as_str().unwrap();
        assert!(method.ends_with("One of: `Switchover`, `Restart`."), "{method}");
    }

    #[test]
    fn the_crds_descriptions_have_no_wrapping_breaks() {
        let yaml = crate::databasecluster::api::types::crd_yaml();
        let schema = serde_json::to_value(crate::databasecluster::api::types::crd()).unwrap();
        let backup = &schema["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
            ["backup"]["properties"]["schedule"]["description"];
        let text = backup.as_str().unwrap();
        assert!(
            text.starts_with("Cron schedule in UTC: five fields") && !text.contains('\n'),
            "{text:?}\n{yaml}"
        );
    }
}
