//! Failures answered as the apiserver answers them: a `metav1.Status` body with code, reason,
//! message and details, so the `kube` client and kubectl decode them as from a real cluster.

use serde_json::{Value, json};

use crate::sim::resources::Kind;

/// One field-level cause of an `Invalid` answer (`details.causes[]`).
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    /// `FieldValueRequired`, `FieldValueInvalid`, ...
    pub reason: String,
    /// The message of the field error.
    pub message: String,
    /// The field path, like `spec.replicas`.
    pub field: String,
}

/// A failed request: the HTTP code and the `Status` fields the apiserver would send.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// The `reason` of the Status, like `NotFound`.
    pub reason: &'static str,
    /// The human-readable message.
    pub message: String,
    /// `details` of the Status, if any.
    pub details: Option<Value>,
    /// `Retry-After` seconds for 429 answers.
    pub retry_after: Option<u64>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self { code, reason, message: message.into(), details: None, retry_after: None }
    }

    fn with_details(mut self, kind: &Kind, name: &str) -> Self {
        self.details = Some(json!({"name": name, "group": kind.group, "kind": kind.plural}));
        self
    }

    /// 404 for a missing object.
    pub fn not_found(kind: &Kind, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{} \"{name}\" not found", kind.qualified_resource()))
            .with_details(kind, name)
    }

    /// 404 for a path that names no served resource.
    pub fn no_route(path: &str) -> Self {
        Self::new(404, "NotFound", format!("the server could not find the requested resource ({path})"))
    }

    /// 404 for a missing namespace when creating into it.
    pub fn namespace_not_found(ns: &str) -> Self {
        Self::new(404, "NotFound", format!("namespaces \"{ns}\" not found"))
            .with_details_raw(json!({"name": ns, "kind": "namespaces"}))
    }

    /// 403 for a request the server refuses outright.
    pub fn forbidden(kind: &Kind, name: &str, why: &str) -> Self {
        Self::new(403, "Forbidden", format!("{} \"{name}\" is forbidden: {why}", kind.qualified_resource()))
            .with_details(kind, name)
    }

    /// 403 for a create in a namespace that is being deleted.
    pub fn namespace_terminating(kind: &Kind, obj: &Value, ns: &str) -> Self {
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        Self::new(
            403,
            "Forbidden",
            format!("{} \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated", kind.qualified_resource()),
        )
        .with_details(kind, name)
    }

    /// 409 for a create of a name already taken.
    pub fn already_exists(kind: &Kind, name: &str) -> Self {
        Self::new(409, "AlreadyExists", format!("{} \"{name}\" already exists", kind.qualified_resource()))
            .with_details(kind, name)
    }

    /// 409 for a write based on a stale resourceVersion.
    pub fn conflict(kind: &Kind, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {} \"{name}\": {why}", kind.qualified_resource()),
        )
        .with_details(kind, name)
    }

    /// The usual stale-resourceVersion conflict.
    pub fn stale(kind: &Kind, name: &str) -> Self {
        Self::conflict(
            kind,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 409 for a server-side apply that would take fields other managers own.
    pub fn apply_conflicts(kind: &Kind, name: &str, conflicts: &[crate::sim::apply::Conflict]) -> Self {
        let message = match conflicts {
            [one] => format!(
                "Apply failed with 1 conflict: conflict with \"{}\" using {}: {}",
                one.manager, one.api_version, one.field
            ),
            many => {
                let lines: Vec<String> = many
                    .iter()
                    .map(|c| format!("conflict with \"{}\" using {}: {}", c.manager, c.api_version, c.field))
                    .collect();
                format!("Apply failed with {} conflicts: {}", many.len(), lines.join("\n"))
            }
        };
        let causes: Vec<Value> = conflicts
            .iter()
            .map(|c| {
                json!({"reason": "FieldManagerConflict", "message": format!("conflict with \"{}\" using {}", c.manager, c.api_version), "field": c.field})
            })
            .collect();
        let mut e = Self::new(409, "Conflict", message);
        e.details = Some(json!({"name": name, "group": kind.group, "kind": kind.plural, "causes": causes}));
        e
    }

    /// 400 for a malformed request.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 405 for a verb the resource does not support.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    /// 415 for a patch content type the server does not know.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json; got {content_type}"
            ),
        )
    }

    /// 410 for a resourceVersion older than the server keeps.
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 422 for a request that is well-formed but cannot be carried out (a failed JSON patch test).
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", message)
    }

    /// 422 with one cause per invalid field.
    pub fn invalid(kind: &Kind, name: &str, causes: Vec<Cause>) -> Self {
        let summary: Vec<String> = causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
        let message = if summary.len() == 1 {
            format!("{} \"{name}\" is invalid: {}", kind.qualified_kind(), summary[0])
        } else {
            format!("{} \"{name}\" is invalid: [{}]", kind.qualified_kind(), summary.join(", "))
        };
        let causes: Vec<Value> = causes
            .iter()
            .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
            .collect();
        let mut e = Self::new(422, "Invalid", message);
        e.details = Some(json!({"name": name, "group": kind.group, "kind": kind.kind, "causes": causes}));
        e
    }

    /// An injected failure: 429 with `Retry-After`, or any other code as an internal error.
    pub fn injected(code: u16) -> Self {
        if code == 429 {
            let mut e = Self::new(
                429,
                "TooManyRequests",
                "injected fault: too many requests, please try again later",
            );
            e.retry_after = Some(1);
            e.details = Some(json!({"retryAfterSeconds": 1}));
            e
        } else {
            Self::new(code, "InternalError", format!("injected fault: status {code}"))
        }
    }

    fn with_details_raw(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// The `Status` object sent as the body.
    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}
