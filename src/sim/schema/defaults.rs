//! Defaulting, as the apiserver does it for custom resources: absent fields (and nulls in fields that
//! may not be null) take their schema default, recursively, and other nulls in non-nullable fields go.

use serde_json::Value;

use super::node::SchemaNode;

/// Applies `node`'s defaults to `value` and to everything under it.
pub(super) fn apply(node: &SchemaNode, value: &mut Value) {
    match value {
        Value::Object(fields) => {
            for (key, prop) in &node.properties {
                let Some(default) = &prop.default else { continue };
                let absent_or_null = fields.get(key).is_none_or(|v| v.is_null() && !prop.nullable);
                if absent_or_null {
                    fields.insert(key.clone(), default.clone());
                }
            }
            fields.retain(|key, child| {
                let Some(child_node) = node.property(key) else { return true };
                if child.is_null() && !child_node.nullable && child_node.default.is_none() {
                    return false;
                }
                apply(child_node, child);
                true
            });
        }
        Value::Array(items) => {
            if let Some(item_node) = node.items.as_deref() {
                for item in items {
                    apply(item_node, item);
                }
            }
        }
        _ => {}
    }
}
