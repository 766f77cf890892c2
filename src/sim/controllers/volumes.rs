//! A simulated volume expander: a bound claim whose storage request grew is expanded at once
//! (`status.capacity.storage` follows `spec.resources.requests.storage`).

use serde_json::{Value, json};

use crate::sim::controllers::write_status;
use crate::sim::state::State;

/// Expands every bound claim whose request differs from its capacity.
pub fn reconcile_all(state: &mut State) {
    let claims: Vec<Value> = state
        .store
        .list("persistentvolumeclaims", None)
        .filter(|c| {
            c["status"]["phase"] == "Bound"
                && c["spec"]["resources"]["requests"]["storage"].is_string()
                && c["spec"]["resources"]["requests"]["storage"] != c["status"]["capacity"]["storage"]
        })
        .cloned()
        .collect();
    for claim in claims {
        let mut status = claim["status"].clone();
        status["capacity"]["storage"] = json!(claim["spec"]["resources"]["requests"]["storage"]);
        write_status(state, "", "persistentvolumeclaims", &claim, status);
    }
}
