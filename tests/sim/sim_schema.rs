//! The CRD schema module: pruning, defaulting, OpenAPI validation and CEL rules, with the apiserver's
//! error paths and messages.
#![cfg(feature = "sim")]

use dbcluster_operator::sim::schema::{FieldError, FieldErrorReason, SchemaError, StructuralSchema};
use serde_json::{Value, json};

mod cel;
mod defaulting;
mod openapi;

/// A DatabaseCluster-like CRD schema carrying the two CEL rules of the team contract.
fn database_cluster_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {
                "type": "object",
                "required": ["version"],
                "properties": {
                    "replicas": {"type": "integer", "minimum": 1, "maximum": 9, "default": 3},
                    "version": {
                        "type": "string",
                        "pattern": "^[0-9]+\\.[0-9]+$",
                        "x-kubernetes-validations": [{
                            "rule": "self.split('.')[0] == oldSelf.split('.')[0]",
                            "message": "changing the major version is not supported: create a new cluster and migrate the data"
                        }]
                    },
                    "storageSize": {
                        "anyOf": [{"type": "integer"}, {"type": "string"}],
                        "x-kubernetes-int-or-string": true,
                        "pattern": "^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$",
                        "default": "1Gi",
                        "x-kubernetes-validations": [{
                            "rule": "quantity(string(self)).compareTo(quantity(string(oldSelf))) >= 0",
                            "message": "storageSize may not shrink"
                        }]
                    }
                }
            },
            "status": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true
            }
        }
    })
}

fn compile(schema: Value) -> StructuralSchema {
    StructuralSchema::compile(&schema).unwrap_or_else(|e| panic!("schema compiles: {e}"))
}

fn cluster(spec: Value) -> Value {
    json!({"apiVersion": "db.example.com/v1", "kind": "DatabaseCluster", "metadata": {"name": "pg"}, "spec": spec})
}

/// A schema with one property `x` of the given schema under `spec`.
fn spec_with(x: Value) -> StructuralSchema {
    compile(json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {"x": x}}}}))
}

fn errors_for(schema: &StructuralSchema, x: Value) -> Vec<FieldError> {
    schema.validate(&json!({"spec": {"x": x}}), None)
}

/// The only error, as `field: message`, ignoring the "rules not checked" note.
fn only_error(errors: &[FieldError]) -> String {
    let real: Vec<&FieldError> =
        errors.iter().filter(|e| !e.message.contains("rules were not checked")).collect();
    assert_eq!(real.len(), 1, "expected one error, got {errors:#?}");
    format!("{}: {}", real[0].field, real[0].message)
}
