//! Field errors worded as the apiserver words them (`k8s.io/apimachinery/pkg/util/validation/field`),
//! so a rejected write carries the causes a real cluster would send.

use serde_json::Value;

/// One reason a custom resource is invalid: the field it concerns, and the apiserver's message for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The JSON path of the field, e.g. `spec.replicas` or `spec.members[0].name`; `<nil>` when the error
    /// concerns no one field.
    pub field: String,
    /// What kind of error it is; becomes the `StatusCause`'s `reason`.
    pub reason: FieldErrorReason,
    /// The message without the field name, e.g. `Invalid value: 0: spec.replicas in body should be
    /// greater than or equal to 1`; becomes the `StatusCause`'s `message`.
    pub message: String,
}

/// The kind of a [`FieldError`], one to one with the apiserver's `field.ErrorType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldErrorReason {
    /// A required field is missing.
    Required,
    /// A value breaks a constraint.
    Invalid,
    /// A value is not one of an enum's values.
    Unsupported,
    /// A value has the wrong type.
    TypeInvalid,
    /// A value is not allowed (a CEL rule with `reason: FieldValueForbidden`).
    Forbidden,
    /// A string is longer than `maxLength`.
    TooLong,
    /// A list or map has more than `maxItems` / `maxProperties` entries.
    TooMany,
    /// A value repeats another (a CEL rule with `reason: FieldValueDuplicate`).
    Duplicate,
}

impl FieldErrorReason {
    /// The `StatusCause.reason` the apiserver sends for this kind of error.
    pub fn as_cause_type(&self) -> &'static str {
        match self {
            FieldErrorReason::Required => "FieldValueRequired",
            FieldErrorReason::Invalid => "FieldValueInvalid",
            FieldErrorReason::Unsupported => "FieldValueNotSupported",
            FieldErrorReason::TypeInvalid => "FieldValueTypeInvalid",
            FieldErrorReason::Forbidden => "FieldValueForbidden",
            FieldErrorReason::TooLong => "FieldValueTooLong",
            FieldErrorReason::TooMany => "FieldValueTooMany",
            FieldErrorReason::Duplicate => "FieldValueDuplicate",
        }
    }

    /// The words a message of this kind starts with.
    fn label(&self) -> &'static str {
        match self {
            FieldErrorReason::Required => "Required value",
            FieldErrorReason::Invalid | FieldErrorReason::TypeInvalid => "Invalid value",
            FieldErrorReason::Unsupported => "Unsupported value",
            FieldErrorReason::Forbidden => "Forbidden",
            FieldErrorReason::TooLong => "Too long",
            FieldErrorReason::TooMany => "Too many",
            FieldErrorReason::Duplicate => "Duplicate value",
        }
    }
}

/// The value an error shows, as the apiserver (Kubernetes 1.33) prints it: Go's `%v` for numbers and
/// booleans, a quoted string for strings and for null, Go's `%#v` for lists and maps.
pub(super) fn render_value(value: &Value) -> String {
    match value {
        Value::Null => "\"null\"".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => render_number(n),
        Value::String(s) => format!("{s:?}"),
        Value::Array(_) | Value::Object(_) => go_syntax(value),
    }
}

fn render_number(n: &serde_json::Number) -> String {
    match (n.as_i64(), n.as_u64(), n.as_f64()) {
        (Some(i), _, _) => i.to_string(),
        (None, Some(u), _) => u.to_string(),
        (None, None, Some(f)) => render_float(f),
        _ => n.to_string(),
    }
}

/// A decoded JSON value as Go's `%#v` prints it (`map[string]interface {}{"a":1}`), map keys sorted.
fn go_syntax(value: &Value) -> String {
    match value {
        Value::Null => "interface {}(nil)".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => render_number(n),
        Value::String(s) => format!("{s:?}"),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(go_syntax).collect();
            format!("[]interface {{}}{{{}}}", items.join(", "))
        }
        Value::Object(fields) => {
            let mut entries: Vec<(&String, &Value)> = fields.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            let entries: Vec<String> =
                entries.iter().map(|(k, v)| format!("{k:?}:{}", go_syntax(v))).collect();
            format!("map[string]interface {{}}{{{}}}", entries.join(", "))
        }
    }
}

/// A float as Go's `%v` prints it: no trailing `.0` on whole numbers.
pub(super) fn render_float(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e21 { format!("{}", f as i128) } else { format!("{f}") }
}

impl FieldError {
    fn new(field: &str, reason: FieldErrorReason, value: Option<&Value>, detail: &str) -> Self {
        let mut message = reason.label().to_owned();
        if let Some(value) = value {
            message.push_str(": ");
            message.push_str(&render_value(value));
        }
        if !detail.is_empty() {
            message.push_str(": ");
            message.push_str(detail);
        }
        // The apiserver's root path is nil, which prints as `<nil>`.
        let field = if field.is_empty() { "<nil>" } else { field };
        FieldError { field: field.to_owned(), reason, message }
    }

    pub(super) fn required(field: &str, detail: &str) -> Self {
        Self::new(field, FieldErrorReason::Required, None, detail)
    }

    pub(super) fn invalid(field: &str, value: &Value, detail: &str) -> Self {
        Self::new(field, FieldErrorReason::Invalid, Some(value), detail)
    }

    pub(super) fn type_invalid(field: &str, value: &Value, detail: &str) -> Self {
        Self::new(field, FieldErrorReason::TypeInvalid, Some(value), detail)
    }

    pub(super) fn forbidden(field: &str, detail: &str) -> Self {
        Self::new(field, FieldErrorReason::Forbidden, None, detail)
    }

    pub(super) fn duplicate(field: &str, value: &Value) -> Self {
        Self::new(field, FieldErrorReason::Duplicate, Some(value), "")
    }

    pub(super) fn not_supported(field: &str, value: &Value, allowed: &[Value]) -> Self {
        let allowed: Vec<String> = allowed
            .iter()
            .map(|v| match v {
                Value::String(s) => format!("{s:?}"),
                other => format!("{:?}", render_value(other)),
            })
            .collect();
        let detail = format!("supported values: {}", allowed.join(", "));
        Self::new(field, FieldErrorReason::Unsupported, Some(value), &detail)
    }

    pub(super) fn too_long(field: &str, max: u64) -> Self {
        Self::new(field, FieldErrorReason::TooLong, None, &format!("may not be more than {max} bytes"))
    }

    pub(super) fn too_many(field: &str, actual: usize, max: u64) -> Self {
        let detail = format!("must have at most {max} items");
        Self::new(field, FieldErrorReason::TooMany, Some(&Value::from(actual)), &detail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_follow_the_apiserver_wording() {
        let e = FieldError::invalid("spec.replicas", &json!(0), "spec.replicas in body should be >= 1");
        assert_eq!(e.message, "Invalid value: 0: spec.replicas in body should be >= 1");
        assert_eq!(FieldError::required("spec.version", "").message, "Required value");
        assert_eq!(
            FieldError::not_supported("spec.mode", &json!("x"), &[json!("a"), json!(2)]).message,
            r#"Unsupported value: "x": supported values: "a", "2""#
        );
        assert_eq!(FieldError::too_long("spec.name", 5).message, "Too long: may not be more than 5 bytes");
        assert_eq!(FieldError::too_many("spec.l", 4, 3).message, "Too many: 4: must have at most 3 items");
        assert_eq!(FieldError::forbidden("spec.x", "no").message, "Forbidden: no");
        assert_eq!(render_value(&json!(1.5)), "1.5");
        assert_eq!(render_value(&json!(2.0)), "2");
        assert_eq!(render_value(&Value::Null), "\"null\"");
        assert_eq!(
            render_value(&json!({"b": [1, "x", null], "a": true})),
            r#"map[string]interface {}{"a":true, "b":[]interface {}{1, "x", interface {}(nil)}}"#
        );
    }

    #[test]
    fn cause_types_match_the_apiserver() {
        assert_eq!(FieldErrorReason::Required.as_cause_type(), "FieldValueRequired");
        assert_eq!(FieldErrorReason::Unsupported.as_cause_type(), "FieldValueNotSupported");
        assert_eq!(FieldErrorReason::TypeInvalid.as_cause_type(), "FieldValueTypeInvalid");
        assert_eq!(FieldErrorReason::TooMany.as_cause_type(), "FieldValueTooMany");
    }
}
