//! `x-kubernetes-validations`: CEL rules compiled once with the `cel` crate, in an environment with
//! cel-go's strings and sets extensions and Kubernetes' lists, regex, URL and quantity libraries, and evaluated with `self` (and `oldSelf`) bound as the
//! apiserver binds them.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use cel::common::types::{CelBool, CelDouble, CelInt, CelList, CelString, Type};
use cel::common::value::Val;
use cel::objects::{Key, Map};
use cel::{Context, DeclarationError, Env, ExecutionError, Program};
use serde_json::Value;

use super::errors::FieldError;
use super::node::{JsonType, SchemaNode};
use super::quantity::Quantity;
use super::{FieldErrorReason, SchemaError};
use crate::sim::version::KubernetesVersion;

/// The CEL type of quantities, named as Kubernetes names it.
static QUANTITY_TYPE: Type = Type::new_unspecified_type("kubernetes.Quantity");

/// The one environment every rule is compiled for and run in: the standard library, the strings
/// extension (`split`, `lowerAscii`, `join`, ...), the sets extension and Kubernetes' lists, URL,
/// quantity and regex libraries. Which of them a new rule may call is the version's business
/// ([`CelRule::check_new_expression`]).
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    // Invariant: the extensions declare disjoint overloads on a fresh stdlib env, so registering them
    // cannot fail; a failure is a programming error caught by every test.
    env.add_extension(cel::extensions::strings).expect("strings extension registers once");
    env.add_extension(quantity_library).expect("quantity library registers once");
    env.add_extension(regex_library).expect("regex library registers once");
    env.add_extension(super::cel_lists::lists_library).expect("lists library registers once");
    env.add_extension(super::cel_lists::sets_library).expect("sets library registers once");
    env.add_extension(super::cel_urls::url_library).expect("URL library registers once");
    Arc::new(env)
});

/// The pattern of a regex library call, or the error cel-go reports for one that does not compile.
fn pattern(function: &str, regex: &CelString<'_>) -> Result<regex::Regex, ExecutionError> {
    super::go_regex::compile(regex.inner())
        .map_err(|e| ExecutionError::function_error(function, e.to_string()))
}

/// `matches`: whether the pattern matches somewhere in the string (the standard library's, with
/// Go's ASCII `\s`, `\d`, `\w`; the `cel` crate's own is built without its `regex` feature).
fn matches(this: &CelString<'_>, regex: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    Ok(CelBool::from(pattern("matches", regex)?.is_match(this.inner())))
}

/// `find`: the first match of the pattern, or the empty string.
fn find(this: &CelString<'_>, regex: &CelString<'_>) -> Result<CelString<'static>, ExecutionError> {
    let found = pattern("find", regex)?.find(this.inner()).map(|m| m.as_str().to_owned());
    Ok(CelString::from(found.unwrap_or_default()))
}

/// `findAll` with a limit: at most `limit` matches (all of them when it is negative).
fn find_all_n(
    this: &CelString<'_>,
    regex: &CelString<'_>,
    limit: &CelInt,
) -> Result<CelList<'static>, ExecutionError> {
    let limit = usize::try_from(*limit.inner()).unwrap_or(usize::MAX);
    let matches = pattern("findAll", regex)?
        .find_iter(this.inner())
        .take(limit)
        .map(|m| Box::new(CelString::from(m.as_str().to_owned())) as Box<dyn Val>)
        .collect::<Vec<_>>();
    Ok(matches.into())
}

/// `findAll`: every match of the pattern.
fn find_all(this: &CelString<'_>, regex: &CelString<'_>) -> Result<CelList<'static>, ExecutionError> {
    find_all_n(this, regex, &CelInt::from(-1))
}

/// Kubernetes' regex library (`k8s.io/apiserver/pkg/cel/library/regex.go`), in every version's
/// base environment.
fn regex_library(env: &mut Env) -> Result<(), DeclarationError> {
    cel::add_overload!(env, fn matches: (CelString, CelString) -> Result<CelBool>, id = "matches")?;
    cel::add_member_overload!(env, fn matches: (CelString, CelString) -> Result<CelBool>)?;
    cel::add_member_overload!(env, fn find: (CelString, CelString) -> Result<CelString>)?;
    cel::add_member_overload!(env, fn find_all: (CelString, CelString) -> Result<CelList>)?;
    cel::add_member_overload!(env, fn find_all_n: (CelString, CelString, CelInt) -> Result<CelList>,
        name = "findAll")?;
    Ok(())
}

/// Implements [`Val`] for a library's value type (`$value`, cloneable and comparable with `==`),
/// whose CEL type is the static `$cel_type`.
macro_rules! library_value {
    ($value:ty, $cel_type:ident) => {
        impl cel::common::value::Val for $value {
            fn get_type(&self) -> &cel::common::types::Type {
                &$cel_type
            }

            fn cel_type() -> &'static cel::common::types::Type {
                &$cel_type
            }

            fn equals(&self, other: &dyn cel::common::value::Val) -> bool {
                other.downcast_ref::<$value>().is_some_and(|o| o == self)
            }

            fn clone_as_boxed<'v>(&self) -> Box<dyn cel::common::value::Val + 'v> {
                Box::new(self.clone())
            }

            fn as_any(&self) -> Option<&dyn std::any::Any> {
                Some(self)
            }
        }

        impl cel::common::value::StaticVal for $value {}
    };
}
pub(super) use library_value;

library_value!(Quantity, QUANTITY_TYPE);

fn quantity(text: &CelString<'_>) -> Result<Quantity, ExecutionError> {
    text.inner().parse().map_err(|e| ExecutionError::function_error("quantity", e))
}

fn is_quantity(text: &CelString<'_>) -> CelBool {
    text.inner().parse::<Quantity>().is_ok().into()
}

fn compare_to(this: &Quantity, other: &Quantity) -> CelInt {
    (this.compare(other) as i64).into()
}

fn is_less_than(this: &Quantity, other: &Quantity) -> CelBool {
    this.compare(other).is_lt().into()
}

fn is_greater_than(this: &Quantity, other: &Quantity) -> CelBool {
    this.compare(other).is_gt().into()
}

fn as_integer(this: &Quantity) -> Result<CelInt, ExecutionError> {
    this.as_integer()
        .map(CelInt::from)
        .ok_or_else(|| ExecutionError::function_error("asInteger", "cannot convert value to integer"))
}

fn is_integer(this: &Quantity) -> CelBool {
    this.as_integer().is_some().into()
}

fn as_approximate_float(this: &Quantity) -> CelDouble {
    this.as_approximate_float().into()
}

fn sign(this: &Quantity) -> CelInt {
    this.sign().into()
}

fn overflow(function: &str) -> ExecutionError {
    ExecutionError::function_error(function, "quantity overflow")
}

fn add(this: &Quantity, other: &Quantity) -> Result<Quantity, ExecutionError> {
    this.checked_add(other).ok_or_else(|| overflow("add"))
}

fn add_int(this: &Quantity, other: &CelInt) -> Result<Quantity, ExecutionError> {
    this.checked_add(&Quantity::from_units(*other.inner())).ok_or_else(|| overflow("add"))
}

fn sub(this: &Quantity, other: &Quantity) -> Result<Quantity, ExecutionError> {
    this.checked_sub(other).ok_or_else(|| overflow("sub"))
}

fn sub_int(this: &Quantity, other: &CelInt) -> Result<Quantity, ExecutionError> {
    this.checked_sub(&Quantity::from_units(*other.inner())).ok_or_else(|| overflow("sub"))
}

/// Kubernetes' quantity library (`k8s.io/apiserver/pkg/cel/library/quantity.go`), on [`Quantity`].
fn quantity_library(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_type(QUANTITY_TYPE.to_owned())?;
    cel::add_overload!(env, fn quantity: (CelString) -> Result<Quantity>)?;
    cel::add_overload!(env, fn is_quantity: (CelString) -> CelBool)?;
    cel::add_member_overload!(env, fn compare_to: (Quantity, Quantity) -> CelInt)?;
    cel::add_member_overload!(env, fn is_less_than: (Quantity, Quantity) -> CelBool)?;
    cel::add_member_overload!(env, fn is_greater_than: (Quantity, Quantity) -> CelBool)?;
    cel::add_member_overload!(env, fn as_integer: (Quantity) -> Result<CelInt>)?;
    cel::add_member_overload!(env, fn is_integer: (Quantity) -> CelBool)?;
    cel::add_member_overload!(env, fn as_approximate_float: (Quantity) -> CelDouble)?;
    cel::add_member_overload!(env, fn sign: (Quantity) -> CelInt)?;
    cel::add_member_overload!(env, fn add: (Quantity, Quantity) -> Result<Quantity>)?;
    cel::add_member_overload!(env, fn add_int: (Quantity, CelInt) -> Result<Quantity>, name = "add")?;
    cel::add_member_overload!(env, fn sub: (Quantity, Quantity) -> Result<Quantity>)?;
    cel::add_member_overload!(env, fn sub_int: (Quantity, CelInt) -> Result<Quantity>, name = "sub")?;
    Ok(())
}

/// A rule's `reason`: which kind of field error a failing rule reports.
#[derive(Debug, Clone, Copy)]
enum RuleReason {
    Invalid,
    Forbidden,
    Required,
    Duplicate,
}

/// One compiled `x-kubernetes-validations` entry.
#[derive(Debug)]
pub(super) struct CelRule {
    /// Where the rule is in the schema, e.g. `openAPIV3Schema.properties.spec.x-kubernetes-validations[0]`.
    path: String,
    source: String,
    program: Program,
    message: Option<String>,
    /// `messageExpression`: its source (trimmed) and program.
    message_expression: Option<(String, Program)>,
    /// `fieldPath` with its leading dot removed, appended to the rule's own path on failure.
    field_path: Option<String>,
    reason: RuleReason,
    /// A transition rule: evaluated only on update, when the old value exists.
    uses_old_self: bool,
}

fn rule_error(path: &str, message: impl Into<String>) -> SchemaError {
    SchemaError::Invalid { path: path.to_owned(), message: message.into() }
}

fn optional_string<'a>(
    rule: &'a serde_json::Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<&'a str>, SchemaError> {
    match rule.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(rule_error(path, format!("{key} must be a string"))),
    }
}

/// Checks a rule's `fieldPath` (`.a.b` or `['a.b']` segments) against the schema and normalises it.
fn normalize_field_path(field_path: &str, node: &SchemaNode, path: &str) -> Result<String, SchemaError> {
    let bad = || rule_error(path, format!("fieldPath {field_path:?} does not name a field of the schema"));
    let mut rest = field_path;
    let mut current = node;
    let mut normalized = String::new();
    while !rest.is_empty() {
        let (name, shown, tail) = if let Some(after) = rest.strip_prefix("['") {
            let end = after.find("']").ok_or_else(bad)?;
            (&after[..end], format!("['{}']", &after[..end]), &after[end + 2..])
        } else if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            (&after[..end], after[..end].to_owned(), &after[end..])
        } else {
            return Err(bad());
        };
        current = current.property(name).filter(|_| !name.is_empty()).ok_or_else(bad)?;
        if !normalized.is_empty() && !shown.starts_with('[') {
            normalized.push('.');
        }
        normalized.push_str(&shown);
        rest = tail;
    }
    Ok(normalized)
}

fn compile_program(source: &str, path: &str, what: &str) -> Result<Program, SchemaError> {
    ENV.compile(source).map_err(|e| rule_error(path, format!("{what} compilation failed: {e}")))
}

impl CelRule {
    /// Compiles one `x-kubernetes-validations` entry of `node`; `path` names it in errors, and
    /// `correlatable` says whether old values exist there (transition rules are refused where not).
    pub(super) fn compile(
        rule: &Value,
        node: &SchemaNode,
        correlatable: bool,
        path: &str,
    ) -> Result<CelRule, SchemaError> {
        let rule = rule.as_object().ok_or_else(|| rule_error(path, "a validation rule must be an object"))?;
        let source =
            optional_string(rule, "rule", path)?.ok_or_else(|| rule_error(path, "rule is required"))?;
        let program = compile_program(source, path, "rule")?;
        let message_expression = optional_string(rule, "messageExpression", path)?
            .map(|expr| compile_program(expr, path, "messageExpression").map(|p| (expr.trim().to_owned(), p)))
            .transpose()?;
        let reason = match optional_string(rule, "reason", path)? {
            None | Some("FieldValueInvalid") => RuleReason::Invalid,
            Some("FieldValueForbidden") => RuleReason::Forbidden,
            Some("FieldValueRequired") => RuleReason::Required,
            Some("FieldValueDuplicate") => RuleReason::Duplicate,
            Some(other) => return Err(rule_error(path, format!("unsupported reason {other:?}"))),
        };
        let field_path = optional_string(rule, "fieldPath", path)?
            .map(|fp| normalize_field_path(fp, node, path))
            .transpose()?;
        let uses_old_self = program.references().has_variable("oldSelf");
        if uses_old_self && !correlatable {
            return Err(rule_error(
                path,
                "oldSelf cannot be used on the uncorrelatable portion of the schema",
            ));
        }
        Ok(CelRule {
            path: path.to_owned(),
            source: source.trim().to_owned(),
            program,
            message: optional_string(rule, "message", path)?
                .map(|m| m.trim().to_owned())
                .filter(|m| !m.is_empty()),
            message_expression,
            field_path,
            reason,
            uses_old_self,
        })
    }

    /// Refuses the rule if it is new (not among the `stored` sources) and calls a function that
    /// `version`'s environment for new expressions does not declare, as the apiserver's compiler
    /// does: `undeclared reference to 'isQuantity'` on 1.28.
    pub(super) fn check_new_expression(
        &self,
        version: KubernetesVersion,
        stored: &dyn Fn(&str) -> bool,
    ) -> Result<(), SchemaError> {
        let message = self.message_expression.as_ref().map(|(source, program)| (source.as_str(), program));
        let expressions =
            [("rule", Some((self.source.as_str(), &self.program))), ("messageExpression", message)];
        for (what, expression) in expressions {
            let Some((source, program)) = expression else { continue };
            if stored(source) {
                continue;
            }
            let references = program.references();
            // A library's namespace (`sets.contains(…)`) parses as a variable (`sets`) with a
            // member call; no CRD rule has variables besides `self` and `oldSelf`.
            let namespaces = references.variables().into_iter().map(|v| format!("{v}."));
            let mut functions: Vec<String> =
                references.functions().into_iter().map(String::from).chain(namespaces).collect();
            functions.sort_unstable();
            if let Some(missing) = functions.into_iter().find(|f| !version.allows_new_cel_function(f)) {
                return Err(rule_error(
                    &format!("{}.{what}", self.path),
                    format!(
                        "compilation failed: ERROR: <input>: undeclared reference to '{name}' \
                         (in container '') (new expressions on Kubernetes {version} are compiled for {previous})",
                        previous = KubernetesVersion::new(version.minor - 1),
                        name = missing.trim_end_matches('.'),
                    ),
                ));
            }
        }
        Ok(())
    }

    /// What runtime errors cite the rule by: its message if it has one, else its source.
    fn error_string(&self) -> &str {
        self.message.as_deref().unwrap_or(&self.source)
    }

    /// The message a failing rule reports when no `messageExpression` gives one.
    fn message_or_default(&self) -> String {
        self.message.clone().unwrap_or_else(|| format!("failed rule: {}", self.source))
    }

    /// The message from `messageExpression`, if it evaluates to a usable one-line string.
    fn expressed_message(&self, context: &Context) -> Option<String> {
        let (_, expression) = self.message_expression.as_ref()?;
        match expression.execute(context) {
            Ok(cel::Value::String(s)) if !s.trim().is_empty() && !s.contains('\n') => {
                Some(s.trim().to_owned())
            }
            _ => None,
        }
    }
}

/// `value` as CEL sees it under `node`: `number` fields are doubles even when written as integers,
/// integers stay integers, `date-time` strings are timestamps, objects become maps.
fn to_cel(node: Option<&SchemaNode>, value: &Value) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => {
            let wants_double = node.and_then(|n| n.json_type) == Some(JsonType::Number);
            match (n.as_i64(), n.as_u64()) {
                (Some(i), _) if !wants_double => cel::Value::Int(i),
                (None, Some(u)) if !wants_double => cel::Value::UInt(u),
                _ => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
            }
        }
        Value::String(s) => {
            let is_date_time =
                matches!(node.and_then(|n| n.format.as_deref()), Some("date-time" | "datetime"));
            is_date_time
                .then(|| as_timestamp(s))
                .flatten()
                .unwrap_or_else(|| cel::Value::String(Arc::new(s.clone())))
        }
        Value::Array(items) => {
            let item_node = node.and_then(|n| n.items.as_deref());
            cel::Value::List(Arc::new(items.iter().map(|v| to_cel(item_node, v)).collect()))
        }
        Value::Object(fields) => {
            let map: HashMap<Key, cel::Value> = fields
                .iter()
                .map(|(k, v)| (Key::String(Arc::new(k.clone())), to_cel(node.and_then(|n| n.property(k)), v)))
                .collect();
            cel::Value::Map(Map { map: Arc::new(map) })
        }
    }
}

/// A `date-time` string as the CEL timestamp the apiserver binds it as, parsed by CEL's own
/// `timestamp()`; `None` if it does not parse (schema validation reports that).
fn as_timestamp(text: &str) -> Option<cel::Value> {
    // Invariant: a constant, valid expression; every test that converts a date-time parses it.
    static TIMESTAMP: LazyLock<Program> =
        LazyLock::new(|| ENV.compile("timestamp(text)").expect("constant expression parses"));
    let mut context = Context::with_env(Arc::clone(&ENV));
    context.add_variable_from_value("text", text.to_owned());
    match TIMESTAMP.execute(&context) {
        Ok(timestamp @ cel::Value::Timestamp(_)) => Some(timestamp),
        _ => None,
    }
}

/// The resource root as rules see it: like [`to_cel`], but of `metadata` only `name` and
/// `generateName`, as the apiserver exposes them.
fn root_to_cel(node: &SchemaNode, value: &Value) -> cel::Value {
    let Value::Object(fields) = value else { return to_cel(Some(node), value) };
    let map: HashMap<Key, cel::Value> = fields
        .iter()
        .map(|(k, v)| {
            let converted = if k == "metadata" {
                let visible: serde_json::Map<String, Value> = v
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(mk, _)| matches!(mk.as_str(), "name" | "generateName"))
                    .map(|(mk, mv)| (mk.clone(), mv.clone()))
                    .collect();
                to_cel(None, &Value::Object(visible))
            } else {
                to_cel(node.property(k), v)
            };
            (Key::String(Arc::new(k.clone())), converted)
        })
        .collect();
    cel::Value::Map(Map { map: Arc::new(map) })
}

/// A runtime error as cel-go words it, which is what the apiserver's messages quote.
fn describe_runtime_error(error: &ExecutionError) -> String {
    match error {
        ExecutionError::NoSuchKey(key) => format!("no such key: {key}"),
        ExecutionError::DivisionByZero(_) => "division by zero".to_owned(),
        ExecutionError::RemainderByZero(_) => "modulus by zero".to_owned(),
        ExecutionError::IndexOutOfBounds(index) => format!("index out of bounds: {index:?}"),
        ExecutionError::Overflow(..) => "integer overflow".to_owned(),
        ExecutionError::FunctionError { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

/// Evaluates `node`'s rules on `value` (at `path`), with `old` as `oldSelf` when it was correlated.
pub(super) fn evaluate_rules(
    node: &SchemaNode,
    value: &Value,
    old: Option<&Value>,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    // A null old value is no old value, as for the apiserver's decoded (nil) objects.
    let old = old.filter(|o| !o.is_null() && node.rules.iter().any(|r| r.uses_old_self));
    let convert = |v| if path.is_empty() { root_to_cel(node, v) } else { to_cel(Some(node), v) };
    let mut context = Context::with_env(Arc::clone(&ENV));
    context.add_variable_from_value("self", convert(value));
    if let Some(old) = old {
        context.add_variable_from_value("oldSelf", convert(old));
    }
    let type_value = Value::from(node.type_name());
    for rule in &node.rules {
        if rule.uses_old_self && old.is_none() {
            continue;
        }
        let result = match rule.program.execute(&context) {
            Ok(result) => result,
            Err(ExecutionError::NoSuchOverload(overload)) => {
                let detail = format!(
                    "'no such overload: {overload}': call arguments did not match a supported operator, \
                     function or macro signature for rule: {}",
                    rule.error_string()
                );
                errors.push(FieldError::invalid(path, &type_value, &detail));
                continue;
            }
            Err(error) => {
                let detail =
                    format!("{} evaluating rule: {}", describe_runtime_error(&error), rule.error_string());
                errors.push(FieldError::invalid(path, &type_value, &detail));
                continue;
            }
        };
        if result == cel::Value::Bool(true) {
            continue;
        }
        let message = rule.expressed_message(&context).unwrap_or_else(|| rule.message_or_default());
        let field = match &rule.field_path {
            Some(sub) if path.is_empty() => sub.clone(),
            Some(sub) if sub.starts_with('[') => format!("{path}{sub}"),
            Some(sub) => format!("{path}.{sub}"),
            None => path.to_owned(),
        };
        errors.push(match rule.reason {
            RuleReason::Invalid => FieldError::invalid(&field, &type_value, &message),
            RuleReason::Forbidden => FieldError::forbidden(&field, &message),
            RuleReason::Required => FieldError::required(&field, &message),
            RuleReason::Duplicate => FieldError::duplicate(&field, &type_value),
        });
    }
}

/// Whether a reason stops CEL rules from running at all, as the apiserver decides: rules see only
/// objects whose types and sizes the schema already accepted.
pub(super) fn blocks_rules(reason: FieldErrorReason) -> bool {
    matches!(
        reason,
        FieldErrorReason::Unsupported
            | FieldErrorReason::Required
            | FieldErrorReason::TooLong
            | FieldErrorReason::TooMany
            | FieldErrorReason::TypeInvalid
    )
}

#[cfg(test)]
mod tests;
