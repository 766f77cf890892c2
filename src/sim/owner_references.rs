//! The `OwnerReferencesPermissionEnforcement` admission plugin (k8s `plugin/pkg/admission/gc`),
//! an option of the simulator: a client that changes an object's ownerReferences must be allowed
//! to `delete` the object (not checked on create: it could have not created it), and one that
//! sets `blockOwnerDeletion: true` on a reference must be allowed to `update` the owner's
//! `finalizers` subresource. Requests without a user (the simulator's own, and clients that do
//! not impersonate one) are the cluster admin's and pass. Every authorization the plugin asks for
//! is recorded, as an audit log shows it.

use serde_json::Value;

use crate::sim::api_error::ApiError;
use crate::sim::authorizer::{self, Attributes, User};
use crate::sim::request_log::RequestRecord;
use crate::sim::resources::Kind;
use crate::sim::state::State;

const CANNOT_DELETE: &str = "cannot set an ownerRef on a resource you can't delete: , <nil>";
const CANNOT_BLOCK: &str = "cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on: , <nil>";

fn owner_references(obj: Option<&Value>) -> &[Value] {
    obj.and_then(|o| o["metadata"]["ownerReferences"].as_array()).map(Vec::as_slice).unwrap_or_default()
}

fn blocks(reference: &Value) -> bool {
    reference["blockOwnerDeletion"] == Value::Bool(true)
}

/// Refuses (403) a write of `obj` (replacing `old`, on update) by `user` that the plugin forbids,
/// if the state has the plugin on.
pub fn admit(
    state: &mut State,
    kind: &Kind,
    user: Option<&User>,
    obj: &Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    let Some(user) = user.filter(|_| state.owner_references_permission_enforcement) else { return Ok(()) };
    let (new_refs, old_refs) = (owner_references(Some(obj)), owner_references(old));
    if new_refs == old_refs {
        return Ok(());
    }
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let namespace = obj["metadata"]["namespace"].as_str().filter(|_| kind.namespaced);
    if old.is_some() {
        let delete = Attributes {
            verb: "delete",
            group: &kind.group,
            resource: &kind.plural,
            subresource: None,
            namespace,
            name,
        };
        if !authorize(state, user, &delete) {
            return Err(ApiError::forbidden(kind, name, CANNOT_DELETE));
        }
    }
    let newly_blocking = new_refs
        .iter()
        .filter(|r| blocks(r))
        .filter(|r| !old_refs.iter().any(|o| blocks(o) && o["uid"] == r["uid"]));
    for reference in newly_blocking.cloned().collect::<Vec<_>>() {
        let api_version = reference["apiVersion"].as_str().unwrap_or_default();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let owner_kind = reference["kind"].as_str().unwrap_or_default();
        let Some(owner) = state
            .registry
            .all()
            .find(|k| k.group == group && k.version == version && k.kind == owner_kind)
            .cloned()
        else {
            return Err(ApiError::forbidden(
                kind,
                name,
                &format!("no matches for kind \"{owner_kind}\" in version \"{api_version}\""),
            ));
        };
        let finalizers = Attributes {
            verb: "update",
            group: &owner.group,
            resource: &owner.plural,
            subresource: Some("finalizers"),
            namespace,
            name: reference["name"].as_str().unwrap_or_default(),
        };
        if !authorize(state, user, &finalizers) {
            return Err(ApiError::forbidden(kind, name, CANNOT_BLOCK));
        }
    }
    Ok(())
}

/// Asks the authorizer, and records the question.
fn authorize(state: &mut State, user: &User, attributes: &Attributes) -> bool {
    state.authorizations.push(RequestRecord {
        verb: attributes.verb.into(),
        group: attributes.group.into(),
        version: String::new(),
        resource: attributes.resource.into(),
        subresource: attributes.subresource.map(String::from),
        namespace: attributes.namespace.map(String::from),
        name: Some(attributes.name.into()),
    });
    authorizer::allows(&state.store, user, attributes)
}
