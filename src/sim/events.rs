//! Events stored once and served in two versions, as the apiserver serves them: `core/v1`
//! (`involvedObject`, `message`; what `kubectl get events` and `kubectl describe` read) and
//! `events.k8s.io/v1` (`regarding`, `note`; what controllers write). Objects are stored in the
//! core shape and converted on the way in and out; both versions are validated alike. Pure.

use serde_json::{Map, Value};

use crate::sim::api_error::Cause;
use crate::sim::resources::Kind;

/// Fields renamed between `events.k8s.io/v1` (first) and `core/v1` (second).
const RENAMED: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// The longest `reason` an Event may have.
const REASON_MAX: usize = 128;

/// Whether `kind` is `events.k8s.io/v1` Events (stored as core Events).
pub fn is_events_v1(kind: &Kind) -> bool {
    kind.group == "events.k8s.io" && kind.plural == "events"
}

fn rename(obj: &mut Value, from_index: usize, api_version: &str) {
    if let Some(map) = obj.as_object_mut() {
        let mut renamed = Map::new();
        for (k, v) in std::mem::take(map) {
            let to = RENAMED.iter().find_map(|pair| {
                let (a, b) = (pair.0, pair.1);
                let (from, to) = if from_index == 0 { (a, b) } else { (b, a) };
                (k == from).then_some(to)
            });
            renamed.insert(to.map_or(k, str::to_owned), v);
        }
        *map = renamed;
        map.insert("apiVersion".into(), Value::String(api_version.to_owned()));
    }
}

/// An `events.k8s.io/v1` field selector (`regarding.name=pg`) over the stored `core/v1` shape
/// (`involvedObject.name=pg`), as the apiserver's field label conversion does.
pub fn core_field_selector(selector: &str) -> String {
    let term = |term: &str| {
        let term = term.trim();
        RENAMED
            .iter()
            .find_map(|(v1, core)| {
                let rest = term.strip_prefix(v1)?;
                rest.starts_with(['.', '=', '!']).then(|| format!("{core}{rest}"))
            })
            .unwrap_or_else(|| term.to_owned())
    };
    selector.split(',').map(term).collect::<Vec<_>>().join(",")
}

/// An `events.k8s.io/v1` Event in the stored `core/v1` shape.
pub fn to_core(obj: &mut Value) {
    rename(obj, 0, "v1");
}

/// A stored (`core/v1`) Event as `events.k8s.io/v1` presents it.
pub fn to_events_v1(obj: &mut Value) {
    rename(obj, 1, "events.k8s.io/v1");
}

/// The causes of a 422 for a (core-shaped) Event written through `kind`'s version, as 1.28's
/// `ValidateEventCreate` and `legacyValidateEvent` (pkg/apis/core/validation/events.go) give them:
///
/// - either version: the object it is about is required; `type` is `Normal` or `Warning` (may be
///   empty on `core/v1`); `reason` at most 128 characters.
/// - an Event with an `eventTime` (a "new" Event, through either version): the reporting
///   controller, reporting instance, action and reason are required.
/// - through `events.k8s.io/v1`: `eventTime` is required and the older API's
///   `deprecatedFirstTimestamp`, `deprecatedLastTimestamp`, `deprecatedCount` and
///   `deprecatedSource` must be unset (through `core/v1` they may be set beside `eventTime`).
pub fn causes(kind: &Kind, event: &Value) -> Vec<Cause> {
    let v1 = is_events_v1(kind);
    let mut causes = Vec::new();
    let about = &event["involvedObject"];
    if about.as_object().is_none_or(|m| m.values().all(|v| v.as_str().is_some_and(str::is_empty))) {
        causes.push(required(if v1 { "regarding" } else { "involvedObject" }));
    }
    match event["type"].as_str() {
        Some("Normal" | "Warning") => {}
        None | Some("") if !v1 => {}
        other => {
            let other = other.unwrap_or_default();
            causes.push(invalid("type", "", &format!("has invalid value: {other}")));
        }
    }
    if let Some(reason) = event["reason"].as_str().filter(|r| r.chars().count() > REASON_MAX) {
        causes.push(invalid("reason", reason, &format!("can have at most {REASON_MAX} characters")));
    }
    let set = |field: &str| event.get(field).is_some_and(|v| !v.is_null() && v != "" && v != 0);
    if set("eventTime") {
        let controller = if v1 { "reportingController" } else { "reportingComponent" };
        for (stored, shown) in [
            ("reportingComponent", controller),
            ("reportingInstance", "reportingInstance"),
            ("action", "action"),
            ("reason", "reason"),
        ] {
            if !set(stored) {
                causes.push(required(shown));
            }
        }
    } else if v1 {
        causes.push(required("eventTime"));
    }
    if v1 {
        for (stored, shown) in [
            ("firstTimestamp", "deprecatedFirstTimestamp"),
            ("lastTimestamp", "deprecatedLastTimestamp"),
            ("count", "deprecatedCount"),
        ] {
            if set(stored) {
                causes.push(invalid(shown, "", "needs to be unset"));
            }
        }
        let source = &event["source"];
        if ["component", "host"].iter().any(|f| source[f].as_str().is_some_and(|s| !s.is_empty())) {
            causes.push(invalid("deprecatedSource", "", "needs to be unset"));
        }
    }
    causes
}

fn required(field: &str) -> Cause {
    Cause { reason: "FieldValueRequired".into(), message: "Required value".into(), field: field.into() }
}

fn invalid(field: &str, value: &str, why: &str) -> Cause {
    Cause {
        reason: "FieldValueInvalid".into(),
        message: format!("Invalid value: {value:?}: {why}"),
        field: field.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_v1_field_selectors_read_the_core_shape() {
        assert_eq!(
            core_field_selector("regarding.kind=DatabaseCluster, regarding.name=pg,reason!=X,note=hi"),
            "involvedObject.kind=DatabaseCluster,involvedObject.name=pg,reason!=X,message=hi"
        );
        assert_eq!(core_field_selector("regardingx=1"), "regardingx=1");
    }

    #[test]
    fn events_convert_both_ways() {
        let v1 = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "regarding": {"name": "pg"}, "note": "hi", "reason": "R", "reportingController": "c"});
        let mut core = v1.clone();
        to_core(&mut core);
        assert_eq!(
            core,
            json!({"apiVersion": "v1", "kind": "Event", "involvedObject": {"name": "pg"}, "message": "hi", "reason": "R", "reportingComponent": "c"})
        );
        to_events_v1(&mut core);
        assert_eq!(core, v1);
    }
}
