//! Custom resources as the apiserver handles them: a CRD version's `openAPIV3Schema` compiled once into
//! a [`StructuralSchema`] that prunes unknown fields, applies defaults, and validates objects (OpenAPI
//! keywords, then `x-kubernetes-validations` CEL rules, transition rules included). Pure: no I/O.
//!
//! A write is handled in the apiserver's order: [`StructuralSchema::prune`], then
//! [`StructuralSchema::apply_defaults`], then [`StructuralSchema::validate`] against the stored object.

mod cel;
mod cel_lists;
mod cel_urls;
mod defaults;
mod errors;
mod formats;
mod go_regex;
mod go_url;
mod node;
mod prune;
pub mod quantity;
mod validate;

use serde_json::Value;

pub use errors::{FieldError, FieldErrorReason};

use crate::sim::version::KubernetesVersion;
use node::SchemaNode;
use validate::FieldPath;

/// Why an `openAPIV3Schema` could not be compiled (the apiserver would refuse such a CRD).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// A keyword is malformed, a pattern does not compile, a default fails its schema, a CEL rule does
    /// not parse or uses `oldSelf` where no old value can be found; `path` names the schema node, e.g.
    /// `openAPIV3Schema.properties.spec.x-kubernetes-validations[0]`.
    #[error("{path}: {message}")]
    Invalid {
        /// Where in the schema the problem is.
        path: String,
        /// What is wrong there.
        message: String,
    },
}

/// One CRD version's schema, compiled once (patterns and CEL programs included) and reused for every
/// request against that version.
#[derive(Debug)]
pub struct StructuralSchema {
    root: SchemaNode,
}

/// The message of the cause the apiserver adds when schema errors kept CEL rules from running.
const RULES_NOT_CHECKED: &str = "some validation rules were not checked because the object was invalid; \
                                 correct the existing errors to complete validation";

impl StructuralSchema {
    /// Compiles `open_api_v3_schema` (the CRD version's `schema.openAPIV3Schema`).
    pub fn compile(open_api_v3_schema: &Value) -> Result<Self, SchemaError> {
        Ok(StructuralSchema { root: SchemaNode::compile(open_api_v3_schema, "openAPIV3Schema", true)? })
    }

    /// Refuses the schema if a CEL expression not among the `stored` ones (the sources the CRD
    /// already held, which the apiserver compiles with its own, newer environment) calls a function
    /// that `version` does not offer to new expressions (see [`KubernetesVersion`]).
    pub fn check_new_expressions(
        &self,
        version: KubernetesVersion,
        stored: &dyn Fn(&str) -> bool,
    ) -> Result<(), SchemaError> {
        self.root.all_rules().into_iter().try_for_each(|rule| rule.check_new_expression(version, stored))
    }

    /// Applies the schema's defaults to `obj` in place: absent fields (and nulls where null is not
    /// allowed) get their default, inside nested objects, list items and map values too; nulls in
    /// non-nullable fields without a default are dropped.
    pub fn apply_defaults(&self, obj: &mut Value) {
        defaults::apply(&self.root, obj);
    }

    /// Removes the fields the schema does not declare (except under `x-kubernetes-preserve-unknown-fields`
    /// and the root's `apiVersion`, `kind` and `metadata`) and returns their paths, e.g. `spec.foo`, so a
    /// `fieldValidation=Strict` request can be refused with them.
    pub fn prune(&self, obj: &mut Value) -> Vec<String> {
        let mut removed = Vec::new();
        prune::prune(&self.root, obj, true, &mut FieldPath::root(), &mut removed);
        removed
    }

    /// Validates `obj` (the whole custom resource) against the schema; `old` is the stored object on
    /// update, which enables transition rules (`oldSelf`) and ratcheting (unchanged values are not
    /// re-judged). Returns every error, as the apiserver lists them in a 422's causes.
    pub fn validate(&self, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
        let mut errors = Vec::new();
        validate::schema_errors(&self.root, obj, old, &mut FieldPath::root(), &mut errors);
        // The apiserver checks list-set and list-map uniqueness in a pass of its own, after the schema.
        errors.sort_by_key(|e| e.reason == FieldErrorReason::Duplicate);
        if errors.iter().any(|e| cel::blocks_rules(e.reason)) {
            errors.push(FieldError::invalid("<nil>", &Value::Null, RULES_NOT_CHECKED));
        } else {
            validate::rule_errors(&self.root, obj, old, &mut FieldPath::root(), &mut errors);
        }
        errors
    }
}
