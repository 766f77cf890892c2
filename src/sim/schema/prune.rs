//! Pruning: dropping the fields a structural schema does not declare, as the apiserver does before
//! storing a custom resource.

use serde_json::Value;

use super::node::SchemaNode;
use super::validate::FieldPath;

/// The fields every Kubernetes object (and every `x-kubernetes-embedded-resource`) keeps whatever its
/// schema says; the server, not the schema, owns them.
const OBJECT_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// Removes from `value` every field `node` does not declare (unless preserved), appending each removed
/// field's path to `removed`. `keeps_object_fields` is true at the root and in embedded resources.
pub(super) fn prune(
    node: &SchemaNode,
    value: &mut Value,
    keeps_object_fields: bool,
    path: &mut FieldPath,
    removed: &mut Vec<String>,
) {
    match value {
        Value::Object(fields) => {
            fields.retain(|key, child| {
                if keeps_object_fields && OBJECT_FIELDS.contains(&key.as_str()) {
                    return true;
                }
                match node.property(key) {
                    Some(child_node) => {
                        path.with_key(key, |p| {
                            prune(child_node, child, child_node.embedded_resource, p, removed)
                        });
                        true
                    }
                    None if node.preserve_unknown_fields => true,
                    None => {
                        path.with_key(key, |p| removed.push(p.as_str().to_owned()));
                        false
                    }
                }
            });
        }
        Value::Array(items) => {
            if let Some(item_node) = node.items.as_deref() {
                for (i, item) in items.iter_mut().enumerate() {
                    path.with_index(i, |p| prune(item_node, item, item_node.embedded_resource, p, removed));
                }
            }
        }
        _ => {}
    }
}
