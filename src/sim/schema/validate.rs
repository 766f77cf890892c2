//! Validation of a custom resource against its compiled schema: OpenAPI keywords worded as kube-openapi
//! words them, then CEL rules, with old values correlated as the apiserver correlates them.

use serde_json::{Map, Value};

use super::cel;
use super::errors::{FieldError, render_float};
use super::formats;
use super::node::{JsonType, ListType, SchemaNode};

/// A path under construction, shared down the walk: `spec`, `spec.members[0]`, `spec.labels.app`.
pub(super) struct FieldPath(String);

impl FieldPath {
    pub(super) fn root() -> Self {
        FieldPath(String::new())
    }

    /// A path starting at `name` (e.g. `default`, for checking a schema's default value).
    pub(super) fn at(name: &str) -> Self {
        FieldPath(name.to_owned())
    }

    pub(super) fn as_str(&self) -> &str {
        &self.0
    }

    /// Runs `f` with the path extended by the property `name`.
    pub(super) fn with_key<R>(&mut self, name: &str, f: impl FnOnce(&mut Self) -> R) -> R {
        let len = self.0.len();
        if len > 0 {
            self.0.push('.');
        }
        self.0.push_str(name);
        let result = f(self);
        self.0.truncate(len);
        result
    }

    /// Runs `f` with the path extended by the list index `index`.
    pub(super) fn with_index<R>(&mut self, index: usize, f: impl FnOnce(&mut Self) -> R) -> R {
        let len = self.0.len();
        self.0.push_str(&format!("[{index}]"));
        let result = f(self);
        self.0.truncate(len);
        result
    }
}

/// The JSON type name kube-openapi reports a value as having.
fn value_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Whether `value` is of the declared type (integral doubles count as integers, integers as numbers).
fn has_type(value: &Value, json_type: JsonType) -> bool {
    match (json_type, value) {
        (JsonType::Object, Value::Object(_))
        | (JsonType::Array, Value::Array(_))
        | (JsonType::String, Value::String(_))
        | (JsonType::Boolean, Value::Bool(_))
        | (JsonType::Number, Value::Number(_)) => true,
        (JsonType::Integer, Value::Number(n)) => !n.is_f64() || n.as_f64().is_some_and(|f| f.fract() == 0.0),
        _ => false,
    }
}

/// The list-map key of an item: the values of the map keys, as a comparable string.
pub(super) fn list_map_key(item: &Value, keys: &[String]) -> Option<String> {
    let object = item.as_object()?;
    Some(
        keys.iter()
            .map(|k| object.get(k).map_or_else(|| "null".to_owned(), Value::to_string))
            .collect::<Vec<_>>()
            .join(","),
    )
}

/// The old item a new list item corresponds to: same list-map key (listType=map lists only).
fn correlated_item<'a>(node: &SchemaNode, item: &Value, old: Option<&'a Value>) -> Option<&'a Value> {
    let ListType::Map(keys) = &node.list_type else { return None };
    let key = list_map_key(item, keys)?;
    old?.as_array()?.iter().find(|o| list_map_key(o, keys).as_deref() == Some(key.as_str()))
}

/// Calls `visit` for each property or item of `value` that `node` describes, with its schema, the
/// old value it correlates with (by property name, or by key in a `listType=map` list) and its path.
fn for_each_child(
    node: &SchemaNode,
    value: &Value,
    old: Option<&Value>,
    path: &mut FieldPath,
    mut visit: impl FnMut(&SchemaNode, &Value, Option<&Value>, &mut FieldPath),
) {
    match value {
        Value::Object(fields) => {
            for (key, child) in fields {
                if let Some(child_node) = node.property(key) {
                    let old_child = old.and_then(|o| o.get(key));
                    path.with_key(key, |p| visit(child_node, child, old_child, p));
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_node) = node.items.as_deref() {
                for (i, item) in items.iter().enumerate() {
                    let old_item = correlated_item(node, item, old);
                    path.with_index(i, |p| visit(item_node, item, old_item, p));
                }
            }
        }
        _ => {}
    }
}

/// OpenAPI validation of `value` under `node`, recursing into children.
pub(super) fn schema_errors(
    node: &SchemaNode,
    value: &Value,
    old: Option<&Value>,
    path: &mut FieldPath,
    errors: &mut Vec<FieldError>,
) {
    if old == Some(value) {
        // Validation ratcheting: an unchanged value is not re-judged.
        return;
    }
    if !value_errors(node, value, path.as_str(), errors) {
        return;
    }
    for_each_child(node, value, old, path, |n, v, o, p| schema_errors(n, v, o, p, errors));
    required_errors(node, value, path.as_str(), errors);
}

/// The keyword checks of one node on one value (not its children). Returns false when the value's
/// type is wrong or it is an allowed null, so that its children are not examined.
fn value_errors(node: &SchemaNode, value: &Value, path: &str, errors: &mut Vec<FieldError>) -> bool {
    if value.is_null() {
        if node.nullable {
            return false;
        }
        if let Some(json_type) = node.json_type {
            let detail = format!("{path} in body must be of type {}: \"null\"", json_type.name());
            errors.push(FieldError::type_invalid(path, value, &detail));
            return false;
        }
    }
    if node.int_or_string {
        if !matches!(value, Value::String(_)) && !has_type(value, JsonType::Integer) {
            let detail =
                format!("{path} in body must be of type integer,string: {:?}", value_type_name(value));
            errors.push(FieldError::type_invalid(path, value, &detail));
            return false;
        }
    } else if let Some(json_type) = node.json_type
        && !has_type(value, json_type)
    {
        let detail =
            format!("{path} in body must be of type {}: {:?}", json_type.name(), value_type_name(value));
        errors.push(FieldError::type_invalid(path, value, &detail));
        return false;
    }
    composition_errors(node, value, path, errors);
    keyword_errors(node, value, path, errors)
}

/// Keywords on the value itself; false when an object's property count stops further checks.
fn keyword_errors(node: &SchemaNode, value: &Value, path: &str, errors: &mut Vec<FieldError>) -> bool {
    if let Some(allowed) = &node.enumeration
        && !allowed.contains(value)
    {
        errors.push(FieldError::not_supported(path, value, allowed));
    }
    match value {
        Value::Object(fields) => return object_errors(node, fields, path, errors),
        Value::Array(items) => array_errors(node, items, path, errors),
        Value::String(s) => string_errors(node, s, value, path, errors),
        Value::Number(n) => {
            if let Some(f) = n.as_f64() {
                number_errors(node, f, value, path, errors);
            }
        }
        _ => {}
    }
    true
}

/// Property counts; false when they fail, which stops kube-openapi from looking inside the object.
fn object_errors(
    node: &SchemaNode,
    fields: &Map<String, Value>,
    path: &str,
    errors: &mut Vec<FieldError>,
) -> bool {
    if let Some(min) = node.min_properties
        && (fields.len() as u64) < min
    {
        let detail = format!("{path} in body should have at least {min} properties");
        errors.push(FieldError::invalid(path, &Value::from(fields.len()), &detail));
        return false;
    }
    if let Some(max) = node.max_properties
        && fields.len() as u64 > max
    {
        errors.push(FieldError::too_many(path, fields.len(), max));
        return false;
    }
    true
}

/// Missing required properties, reported (as kube-openapi does) after the properties' own errors.
fn required_errors(node: &SchemaNode, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let Value::Object(fields) = value else { return };
    for name in &node.required {
        if !fields.contains_key(name) {
            let field = if path.is_empty() { name.clone() } else { format!("{path}.{name}") };
            errors.push(FieldError::required(&field, ""));
        }
    }
}

fn array_errors(node: &SchemaNode, items: &[Value], path: &str, errors: &mut Vec<FieldError>) {
    if let Some(max) = node.max_items
        && items.len() as u64 > max
    {
        errors.push(FieldError::too_many(path, items.len(), max));
    }
    if let Some(min) = node.min_items
        && (items.len() as u64) < min
    {
        let detail = format!("{path} in body should have at least {min} items");
        errors.push(FieldError::invalid(path, &Value::from(items.len()), &detail));
    }
    match &node.list_type {
        ListType::Atomic => {}
        // As the apiserver does, only the second appearance of a repeated value is reported.
        ListType::Set => {
            for (i, item) in items.iter().enumerate() {
                if items[..i].iter().filter(|earlier| *earlier == item).count() == 1 {
                    errors.push(FieldError::duplicate(&format!("{path}[{i}]"), item));
                }
            }
        }
        ListType::Map(keys) => {
            let seen: Vec<Option<String>> = items.iter().map(|item| list_map_key(item, keys)).collect();
            for (i, key) in seen.iter().enumerate() {
                if key.is_some() && seen[..i].iter().filter(|earlier| *earlier == key).count() == 1 {
                    let key_value: Map<String, Value> =
                        keys.iter().filter_map(|k| items[i].get(k).map(|v| (k.clone(), v.clone()))).collect();
                    errors.push(FieldError::duplicate(&format!("{path}[{i}]"), &Value::Object(key_value)));
                }
            }
        }
    }
}

fn string_errors(node: &SchemaNode, s: &str, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let chars = s.chars().count() as u64;
    if let Some(max) = node.max_length
        && chars > max
    {
        errors.push(FieldError::too_long(path, max));
    }
    if let Some(min) = node.min_length
        && chars < min
    {
        let detail = format!("{path} in body should be at least {min} chars long");
        errors.push(FieldError::invalid(path, value, &detail));
    }
    if let Some((source, regex)) = &node.pattern
        && !regex.is_match(s)
    {
        let detail = format!("{path} in body should match '{source}'");
        errors.push(FieldError::invalid(path, value, &detail));
    }
    if let Some(format) = &node.format
        && !formats::is_valid(format, s)
    {
        let detail = format!("{path} in body must be of type {format}: {s:?}");
        errors.push(FieldError::type_invalid(path, value, &detail));
    }
}

fn number_errors(node: &SchemaNode, n: f64, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    if let Some(max) = node.maximum {
        let (broken, relation) = if max.exclusive {
            (n >= max.value, "less than")
        } else {
            (n > max.value, "less than or equal to")
        };
        if broken {
            let detail = format!("{path} in body should be {relation} {}", render_float(max.value));
            errors.push(FieldError::invalid(path, value, &detail));
        }
    }
    if let Some(min) = node.minimum {
        let (broken, relation) = if min.exclusive {
            (n <= min.value, "greater than")
        } else {
            (n < min.value, "greater than or equal to")
        };
        if broken {
            let detail = format!("{path} in body should be {relation} {}", render_float(min.value));
            errors.push(FieldError::invalid(path, value, &detail));
        }
    }
}

/// A composite keyword's failure: kube-openapi reports it without a field, and the apiserver shows it
/// under `<nil>` with an empty value.
fn composite_error(detail: String) -> FieldError {
    FieldError::invalid("<nil>", &Value::from(""), &detail)
}

/// All errors of a value-only sub-schema (an `allOf`/`anyOf`/`oneOf`/`not` branch) on `value`.
fn branch_errors(branch: &SchemaNode, value: &Value, path: &str) -> Vec<FieldError> {
    let mut found = Vec::new();
    if value_errors(branch, value, path, &mut found) {
        required_errors(branch, value, path, &mut found);
    }
    found
}

/// `allOf`, `anyOf`, `oneOf` and `not`: value-only schemas (CRDs use them for int-or-string and for
/// "one of these fields" constraints). A failing `anyOf`/`oneOf` also reports the errors of the branch
/// that came closest (the first with the fewest errors).
fn composition_errors(node: &SchemaNode, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    if !node.any_of.is_empty() {
        let results: Vec<Vec<FieldError>> =
            node.any_of.iter().map(|b| branch_errors(b, value, path)).collect();
        if results.iter().all(|r| !r.is_empty()) {
            errors.push(composite_error(format!("\"{path}\" must validate at least one schema (anyOf)")));
            errors.extend(results.into_iter().min_by_key(Vec::len).unwrap_or_default());
        }
    }
    if !node.one_of.is_empty() {
        let results: Vec<Vec<FieldError>> =
            node.one_of.iter().map(|b| branch_errors(b, value, path)).collect();
        let passing = results.iter().filter(|r| r.is_empty()).count();
        if passing != 1 {
            let found = if passing == 0 {
                "Found none valid".to_owned()
            } else {
                format!("Found {passing} valid alternatives")
            };
            errors.push(composite_error(format!(
                "\"{path}\" must validate one and only one schema (oneOf). {found}"
            )));
            if passing == 0 {
                errors.extend(results.into_iter().min_by_key(Vec::len).unwrap_or_default());
            }
        }
    }
    if !node.all_of.is_empty() {
        let mut passing = 0;
        for branch in &node.all_of {
            let found = branch_errors(branch, value, path);
            passing += usize::from(found.is_empty());
            errors.extend(found);
        }
        if passing != node.all_of.len() {
            let none = if passing == 0 { ". None validated" } else { "" };
            errors.push(composite_error(format!("\"{path}\" must validate all the schemas (allOf){none}")));
        }
    }
    if let Some(not) = &node.not
        && branch_errors(not, value, path).is_empty()
    {
        errors.push(composite_error(format!("\"{path}\" must not validate the schema (not)")));
    }
}

/// CEL validation of `value` under `node` and its children; `old` is the correlated old value.
pub(super) fn rule_errors(
    node: &SchemaNode,
    value: &Value,
    old: Option<&Value>,
    path: &mut FieldPath,
    errors: &mut Vec<FieldError>,
) {
    if old == Some(value) {
        return;
    }
    if value.is_null() {
        return;
    }
    if !node.rules.is_empty() {
        cel::evaluate_rules(node, value, old, path.as_str(), errors);
    }
    for_each_child(node, value, old, path, |n, v, o, p| rule_errors(n, v, o, p, errors));
}
