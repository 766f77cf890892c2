//! A simulated volume expander: a bound claim whose storage request grew is expanded at once
//! (`status.capacity.storage` follows `spec.resources.requests.storage`). It looks at the claims
//! that changed only.

use serde_json::{Value, json};

use crate::sim::controllers::write_status;
use crate::sim::state::State;
use crate::sim::store::ObjectName;

fn needs_expansion(claim: &Value) -> bool {
    claim["status"]["phase"] == "Bound"
        && claim["spec"]["resources"]["requests"]["storage"].is_string()
        && claim["spec"]["resources"]["requests"]["storage"] != claim["status"]["capacity"]["storage"]
}

/// Expands the claim `(namespace, name)` if it is bound and its request differs from its capacity.
pub fn reconcile_named(state: &mut State, (ns, name): &ObjectName) {
    let Some(claim) =
        state.store.get("persistentvolumeclaims", ns, name).filter(|c| needs_expansion(c)).cloned()
    else {
        return;
    };
    let mut status = claim["status"].clone();
    status["capacity"]["storage"] = json!(claim["spec"]["resources"]["requests"]["storage"]);
    write_status(state, "", "persistentvolumeclaims", &claim, status);
}
