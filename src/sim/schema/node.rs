//! One compiled schema node: an `openAPIV3Schema` (or a sub-schema of it) read once into typed fields,
//! with its pattern and CEL rules compiled.

use std::collections::BTreeMap;

use regex::Regex;
use serde_json::{Map, Value};

use super::SchemaError;
use super::cel::CelRule;
use super::validate::{self, FieldPath};
use super::{defaults, prune};

/// The JSON type a schema node declares with `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum JsonType {
    Object,
    Array,
    String,
    Integer,
    Number,
    Boolean,
}

impl JsonType {
    /// The name the schema (and the apiserver's messages) use for this type.
    pub(super) fn name(self) -> &'static str {
        match self {
            JsonType::Object => "object",
            JsonType::Array => "array",
            JsonType::String => "string",
            JsonType::Integer => "integer",
            JsonType::Number => "number",
            JsonType::Boolean => "boolean",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "object" => JsonType::Object,
            "array" => JsonType::Array,
            "string" => JsonType::String,
            "integer" => JsonType::Integer,
            "number" => JsonType::Number,
            "boolean" => JsonType::Boolean,
            _ => return None,
        })
    }
}

/// How a list's items relate, from `x-kubernetes-list-type`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ListType {
    /// A list replaced as a whole; the default.
    Atomic,
    /// A list of unique scalars.
    Set,
    /// A list of objects identified by the values of these keys.
    Map(Vec<String>),
}

/// A numeric bound (`minimum`/`maximum`) and whether it is exclusive.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bound {
    pub(super) value: f64,
    pub(super) exclusive: bool,
}

/// A compiled schema node.
#[derive(Debug)]
pub(super) struct SchemaNode {
    pub(super) json_type: Option<JsonType>,
    pub(super) nullable: bool,
    pub(super) int_or_string: bool,
    pub(super) preserve_unknown_fields: bool,
    pub(super) embedded_resource: bool,
    pub(super) properties: BTreeMap<String, SchemaNode>,
    pub(super) additional_properties: Option<Box<SchemaNode>>,
    pub(super) items: Option<Box<SchemaNode>>,
    pub(super) required: Vec<String>,
    pub(super) default: Option<Value>,
    pub(super) enumeration: Option<Vec<Value>>,
    pub(super) pattern: Option<(String, Regex)>,
    pub(super) format: Option<String>,
    pub(super) minimum: Option<Bound>,
    pub(super) maximum: Option<Bound>,
    pub(super) min_length: Option<u64>,
    pub(super) max_length: Option<u64>,
    pub(super) min_items: Option<u64>,
    pub(super) max_items: Option<u64>,
    pub(super) min_properties: Option<u64>,
    pub(super) max_properties: Option<u64>,
    pub(super) all_of: Vec<SchemaNode>,
    pub(super) any_of: Vec<SchemaNode>,
    pub(super) one_of: Vec<SchemaNode>,
    pub(super) not: Option<Box<SchemaNode>>,
    pub(super) list_type: ListType,
    pub(super) rules: Vec<CelRule>,
}

fn invalid(path: &str, message: impl Into<String>) -> SchemaError {
    SchemaError::Invalid { path: path.to_owned(), message: message.into() }
}
/// `type`, if given.
fn json_type(schema: &Map<String, Value>, path: &str) -> Result<Option<JsonType>, SchemaError> {
    match schema.get("type") {
        None => Ok(None),
        Some(Value::String(name)) => {
            Ok(Some(JsonType::parse(name).ok_or_else(|| invalid(path, format!("unknown type {name:?}")))?))
        }
        Some(_) => Err(invalid(path, "type must be a string")),
    }
}

/// `properties`, each compiled.
fn properties(
    schema: &Map<String, Value>,
    path: &str,
    correlatable: bool,
) -> Result<BTreeMap<String, SchemaNode>, SchemaError> {
    match schema.get("properties") {
        None => Ok(BTreeMap::new()),
        Some(Value::Object(props)) => props
            .iter()
            .map(|(name, prop)| {
                Ok((
                    name.clone(),
                    SchemaNode::compile(prop, &format!("{path}.properties.{name}"), correlatable)?,
                ))
            })
            .collect(),
        Some(_) => Err(invalid(path, "properties must be an object")),
    }
}

/// `additionalProperties`: `true` is a node that keeps anything, `false` none.
fn additional_properties(
    schema: &Map<String, Value>,
    path: &str,
    correlatable: bool,
) -> Result<Option<Box<SchemaNode>>, SchemaError> {
    let additional_path = format!("{path}.additionalProperties");
    Ok(match schema.get("additionalProperties") {
        None | Some(Value::Bool(false)) => None,
        Some(Value::Bool(true)) => Some(Box::new(SchemaNode::compile(
            &serde_json::json!({"x-kubernetes-preserve-unknown-fields": true}),
            &additional_path,
            correlatable,
        )?)),
        Some(sub) => Some(Box::new(SchemaNode::compile(sub, &additional_path, correlatable)?)),
    })
}

/// `x-kubernetes-list-type` (atomic when absent), with a map's keys.
fn list_type(schema: &Map<String, Value>, path: &str) -> Result<ListType, SchemaError> {
    match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
        None | Some("atomic") => Ok(ListType::Atomic),
        Some("set") => Ok(ListType::Set),
        Some("map") => {
            let keys = string_list(schema, "x-kubernetes-list-map-keys", path)?;
            if keys.is_empty() {
                return Err(invalid(path, "x-kubernetes-list-type map needs x-kubernetes-list-map-keys"));
            }
            Ok(ListType::Map(keys))
        }
        Some(other) => Err(invalid(path, format!("unknown x-kubernetes-list-type {other:?}"))),
    }
}

/// `pattern`, compiled as Go's RE2 reads it.
fn pattern(schema: &Map<String, Value>, path: &str) -> Result<Option<(String, Regex)>, SchemaError> {
    match schema.get("pattern") {
        None => Ok(None),
        Some(Value::String(p)) => {
            let regex = super::go_regex::compile(p)
                .map_err(|e| invalid(path, format!("pattern {p:?} does not compile: {e}")))?;
            Ok(Some((p.clone(), regex)))
        }
        Some(_) => Err(invalid(path, "pattern must be a string")),
    }
}

/// `enum`, if given.
fn enumeration(schema: &Map<String, Value>, path: &str) -> Result<Option<Vec<Value>>, SchemaError> {
    match schema.get("enum") {
        None => Ok(None),
        Some(Value::Array(values)) => Ok(Some(values.clone())),
        Some(_) => Err(invalid(path, "enum must be a list")),
    }
}

/// `x-kubernetes-validations`, each compiled against `node`.
fn rules(
    schema: &Map<String, Value>,
    node: &SchemaNode,
    correlatable: bool,
    path: &str,
) -> Result<Vec<CelRule>, SchemaError> {
    match schema.get("x-kubernetes-validations") {
        None => Ok(Vec::new()),
        Some(Value::Array(rules)) => rules
            .iter()
            .enumerate()
            .map(|(i, rule)| {
                CelRule::compile(rule, node, correlatable, &format!("{path}.x-kubernetes-validations[{i}]"))
            })
            .collect(),
        Some(_) => Err(invalid(path, "x-kubernetes-validations must be a list")),
    }
}

fn bool_field(schema: &Map<String, Value>, key: &str, path: &str) -> Result<bool, SchemaError> {
    match schema.get(key) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(invalid(path, format!("{key} must be a boolean"))),
    }
}

fn count_field(schema: &Map<String, Value>, key: &str, path: &str) -> Result<Option<u64>, SchemaError> {
    match schema.get(key) {
        None => Ok(None),
        Some(v) => {
            v.as_u64().map(Some).ok_or_else(|| invalid(path, format!("{key} must be a non-negative integer")))
        }
    }
}

fn bound_field(
    schema: &Map<String, Value>,
    key: &str,
    exclusive_key: &str,
    path: &str,
) -> Result<Option<Bound>, SchemaError> {
    let exclusive = bool_field(schema, exclusive_key, path)?;
    match schema.get(key) {
        None => Ok(None),
        Some(v) => {
            let value = v.as_f64().ok_or_else(|| invalid(path, format!("{key} must be a number")))?;
            Ok(Some(Bound { value, exclusive }))
        }
    }
}

fn string_list(schema: &Map<String, Value>, key: &str, path: &str) -> Result<Vec<String>, SchemaError> {
    match schema.get(key) {
        None => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str().map(str::to_owned).ok_or_else(|| invalid(path, format!("{key} must list strings")))
            })
            .collect(),
        Some(_) => Err(invalid(path, format!("{key} must be a list of strings"))),
    }
}

fn sub_schemas(schema: &Map<String, Value>, key: &str, path: &str) -> Result<Vec<SchemaNode>, SchemaError> {
    match schema.get(key) {
        None => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| SchemaNode::compile(item, &format!("{path}.{key}[{i}]"), false))
            .collect(),
        Some(_) => Err(invalid(path, format!("{key} must be a list of schemas"))),
    }
}

impl SchemaNode {
    /// Compiles the schema at `path` (used only to name where a compile error is). `correlatable` says
    /// whether an old value can be found for values here (not under the items of a list that is not a
    /// `listType=map`), which transition rules need.
    pub(super) fn compile(schema: &Value, path: &str, correlatable: bool) -> Result<SchemaNode, SchemaError> {
        let schema = schema.as_object().ok_or_else(|| invalid(path, "a schema must be an object"))?;
        // In a fixed order, which decides the error reported first.
        let json_type = json_type(schema, path)?;
        let properties = properties(schema, path, correlatable)?;
        let additional_properties = additional_properties(schema, path, correlatable)?;
        let list_type = list_type(schema, path)?;
        let items = match schema.get("items") {
            None => None,
            Some(sub) => {
                let items_correlatable = correlatable && matches!(list_type, ListType::Map(_));
                Some(Box::new(SchemaNode::compile(sub, &format!("{path}.items"), items_correlatable)?))
            }
        };
        let pattern = pattern(schema, path)?;
        let enumeration = enumeration(schema, path)?;
        let not = match schema.get("not") {
            None => None,
            Some(sub) => Some(Box::new(SchemaNode::compile(sub, &format!("{path}.not"), false)?)),
        };
        let node = SchemaNode {
            json_type,
            nullable: bool_field(schema, "nullable", path)?,
            int_or_string: bool_field(schema, "x-kubernetes-int-or-string", path)?,
            preserve_unknown_fields: bool_field(schema, "x-kubernetes-preserve-unknown-fields", path)?,
            embedded_resource: bool_field(schema, "x-kubernetes-embedded-resource", path)?,
            properties,
            additional_properties,
            items,
            required: string_list(schema, "required", path)?,
            default: schema.get("default").cloned(),
            enumeration,
            pattern,
            format: schema.get("format").and_then(Value::as_str).map(str::to_owned),
            minimum: bound_field(schema, "minimum", "exclusiveMinimum", path)?,
            maximum: bound_field(schema, "maximum", "exclusiveMaximum", path)?,
            min_length: count_field(schema, "minLength", path)?,
            max_length: count_field(schema, "maxLength", path)?,
            min_items: count_field(schema, "minItems", path)?,
            max_items: count_field(schema, "maxItems", path)?,
            min_properties: count_field(schema, "minProperties", path)?,
            max_properties: count_field(schema, "maxProperties", path)?,
            all_of: sub_schemas(schema, "allOf", path)?,
            any_of: sub_schemas(schema, "anyOf", path)?,
            one_of: sub_schemas(schema, "oneOf", path)?,
            not,
            list_type,
            rules: Vec::new(),
        };
        // The rules compile against the node they check (its fields' types).
        let rules = rules(schema, &node, correlatable, path)?;
        let node = SchemaNode { rules, ..node };
        node.check_default(path)?;
        Ok(node)
    }

    /// Refuses a default the apiserver would refuse: one that fails this node's schema, or that has
    /// fields the schema would prune.
    fn check_default(&self, path: &str) -> Result<(), SchemaError> {
        let Some(default) = &self.default else { return Ok(()) };
        // The default is judged with its own fields defaulted, as it will be stored.
        let mut defaulted = default.clone();
        defaults::apply(self, &mut defaulted);
        let mut errors = Vec::new();
        validate::schema_errors(self, &defaulted, None, &mut FieldPath::at("default"), &mut errors);
        if let Some(error) = errors.first() {
            return Err(invalid(path, format!("default is invalid: {}: {}", error.field, error.message)));
        }
        let mut removed = Vec::new();
        prune::prune(
            self,
            &mut defaulted,
            self.embedded_resource,
            &mut FieldPath::at("default"),
            &mut removed,
        );
        if !removed.is_empty() {
            return Err(invalid(
                path,
                format!("default has fields the schema prunes: {}", removed.join(", ")),
            ));
        }
        Ok(())
    }

    /// Every CEL rule of this node and the nodes under it.
    pub(super) fn all_rules(&self) -> Vec<&CelRule> {
        let mut rules: Vec<&CelRule> = self.rules.iter().collect();
        let children = self
            .properties
            .values()
            .chain(self.additional_properties.as_deref())
            .chain(self.items.as_deref())
            .chain(self.all_of.iter())
            .chain(self.any_of.iter())
            .chain(self.one_of.iter())
            .chain(self.not.as_deref());
        for child in children {
            rules.extend(child.all_rules());
        }
        rules
    }

    /// The schema for the value under `key` of an object this node describes.
    pub(super) fn property(&self, key: &str) -> Option<&SchemaNode> {
        self.properties.get(key).or(self.additional_properties.as_deref())
    }

    /// The type name CEL errors show as the value (`"string"`, `"object"`, or `""` for untyped nodes).
    pub(super) fn type_name(&self) -> &'static str {
        self.json_type.map_or("", JsonType::name)
    }
}
