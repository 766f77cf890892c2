//! TokenReview (`authentication.k8s.io/v1`) and SubjectAccessReview (`authorization.k8s.io/v1`) as
//! a 1.28 apiserver serves them: create only (any other verb is 405), nothing stored, the request
//! answered with its `status` filled in (201 Created). What a 1.28 apiserver refuses is refused:
//! a TokenReview without `spec.token` (400); a SubjectAccessReview with metadata, with neither or
//! both of `resourceAttributes` and `nonResourceAttributes`, or with neither `user` nor `groups`
//! (422). A token is authenticated if [`Tokens::issue`] issued it (the simulator's token
//! authenticator, standing in for ServiceAccount tokens) for an audience the review asks for; a
//! SubjectAccessReview is decided by the simulator's RBAC authorizer over the stored roles
//! (`authorizer`), for the user and groups exactly as given.

use std::collections::HashMap;

use parking_lot::Mutex;
use rand::Rng;
use serde_json::{Value, json};

use crate::sim::api_error::{ApiError, Cause};
use crate::sim::authorizer::{self, Attributes, User};
use crate::sim::resources::Kind;
use crate::sim::store::Store;

/// The (group, plural) of the two review kinds.
pub const REVIEWS: [(&str, &str); 2] =
    [("authentication.k8s.io", "tokenreviews"), ("authorization.k8s.io", "subjectaccessreviews")];

/// The audience of the tokens [`Tokens::issue`] issues, and of a review that names none: the
/// apiserver's own, as kubeadm and kind configure it.
pub const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

/// Whether `kind` is one of [`REVIEWS`].
pub fn is_review(kind: &Kind) -> bool {
    REVIEWS.contains(&(kind.group.as_str(), kind.plural.as_str()))
}

/// The bearer tokens the simulator authenticates, and whom each names.
#[derive(Debug, Default)]
pub struct Tokens {
    issued: Mutex<HashMap<String, User>>,
}

impl Tokens {
    /// A new random token for `user` (with the groups [`User::new`] gives it), for [`API_AUDIENCE`].
    pub fn issue(&self, user: User) -> String {
        let bytes: [u8; 24] = rand::rng().random();
        let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        self.issued.lock().insert(token.clone(), user);
        token
    }

    fn authenticate(&self, token: &str) -> Option<User> {
        self.issued.lock().get(token).cloned()
    }
}

/// The answer to `verb` on a review `kind` with `body`: 201 and the review with its status for a
/// `create`.
pub fn respond(
    store: &Store,
    tokens: &Tokens,
    kind: &Kind,
    verb: &str,
    body: &[u8],
) -> Result<(u16, Value), ApiError> {
    if verb != "create" {
        return Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({verb} {})",
            kind.plural
        )));
    }
    let mut review: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not a {}: {e}", kind.kind)))?;
    if !review.is_object() {
        return Err(ApiError::bad_request(format!("the request body is not a {}", kind.kind)));
    }
    review["status"] = match kind.plural.as_str() {
        "tokenreviews" => token_review(tokens, &review["spec"])?,
        _ => {
            let causes = access_review_causes(&review);
            if !causes.is_empty() {
                return Err(ApiError::invalid(kind, "", causes));
            }
            access_review(store, &review["spec"])
        }
    };
    review["apiVersion"] = json!(kind.api_version());
    review["kind"] = json!(kind.kind);
    if review["metadata"].is_null() {
        review["metadata"] = json!({"creationTimestamp": null});
    }
    Ok((201, review))
}

/// A TokenReview's status: authenticated with the token's user, or not.
fn token_review(tokens: &Tokens, spec: &Value) -> Result<Value, ApiError> {
    let token = spec["token"].as_str().unwrap_or_default();
    if token.is_empty() {
        return Err(ApiError::bad_request("token is required for TokenReview in authentication"));
    }
    let wanted: Vec<&str> = match spec["audiences"].as_array() {
        Some(audiences) if !audiences.is_empty() => audiences.iter().filter_map(Value::as_str).collect(),
        _ => vec![API_AUDIENCE],
    };
    let Some(user) = tokens.authenticate(token) else {
        return Ok(json!({"authenticated": false, "user": {}}));
    };
    if !wanted.contains(&API_AUDIENCE) {
        return Ok(json!({"authenticated": false, "user": {},
            "error": format!("[invalid bearer token, token audiences [\"{API_AUDIENCE}\"] is invalid for the target audiences {wanted:?}]")}));
    }
    Ok(json!({
        "authenticated": true,
        "user": {"username": user.name, "uid": format!("uid-{}", user.name), "groups": user.groups},
        "audiences": [API_AUDIENCE],
    }))
}

/// What 1.28's `ValidateSubjectAccessReview` refuses.
fn access_review_causes(review: &Value) -> Vec<Cause> {
    let spec = &review["spec"];
    let invalid = |field: &str, value: &Value, detail: &str| Cause {
        reason: "FieldValueInvalid".into(),
        message: format!("Invalid value: {value}: {detail}"),
        field: field.into(),
    };
    let mut causes = Vec::new();
    let given = |field: &str| spec[field].is_object();
    match (given("resourceAttributes"), given("nonResourceAttributes")) {
        (true, true) => causes.push(invalid(
            "spec.nonResourceAttributes",
            &spec["nonResourceAttributes"],
            "cannot be specified in combination with resourceAttributes",
        )),
        (false, false) => causes.push(invalid(
            "spec.resourceAttributes",
            &Value::Null,
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )),
        _ => {}
    }
    let user = spec["user"].as_str().unwrap_or_default();
    if user.is_empty() && spec["groups"].as_array().is_none_or(Vec::is_empty) {
        causes.push(invalid("spec.user", &json!(user), "at least one of user or group must be specified"));
    }
    let metadata = review["metadata"].as_object().into_iter().flatten();
    let meaningful = metadata.filter(|(field, value)| *field != "managedFields" && !value.is_null()).count();
    if meaningful > 0 {
        causes.push(invalid("metadata", &review["metadata"], "must be empty"));
    }
    causes
}

/// A SubjectAccessReview's status, by RBAC for the spec's user and groups as given.
fn access_review(store: &Store, spec: &Value) -> Value {
    let strings = |value: &Value| -> Vec<String> {
        value.as_array().into_iter().flatten().filter_map(|g| g.as_str().map(String::from)).collect()
    };
    let user =
        User { name: spec["user"].as_str().unwrap_or_default().to_owned(), groups: strings(&spec["groups"]) };
    let field = |attributes: &Value, name: &str| attributes[name].as_str().unwrap_or_default().to_owned();
    let allowed_by = if spec["nonResourceAttributes"].is_object() {
        let attributes = &spec["nonResourceAttributes"];
        authorizer::allows_non_resource(store, &user, &field(attributes, "verb"), &field(attributes, "path"))
    } else {
        let attributes = &spec["resourceAttributes"];
        let (verb, group, resource) =
            (field(attributes, "verb"), field(attributes, "group"), field(attributes, "resource"));
        let (subresource, namespace, name) =
            (field(attributes, "subresource"), field(attributes, "namespace"), field(attributes, "name"));
        let attributes = Attributes {
            verb: &verb,
            group: &group,
            resource: &resource,
            subresource: Some(subresource.as_str()).filter(|s| !s.is_empty()),
            namespace: Some(namespace.as_str()).filter(|s| !s.is_empty()),
            name: &name,
        };
        authorizer::allows(store, &user, &attributes).then(|| "RBAC: allowed".to_owned())
    };
    match allowed_by {
        Some(reason) => json!({"allowed": true, "reason": reason}),
        None => json!({"allowed": false}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::resources::Registry;

    fn kind(plural: &str) -> std::sync::Arc<Kind> {
        let registry = Registry::with_built_ins();
        let (group, _) = REVIEWS.iter().find(|(_, p)| *p == plural).unwrap();
        registry.get(group, "v1", plural).unwrap()
    }

    fn reader_store() -> Store {
        let mut store = Store::new(100);
        store.put(
            "clusterroles.rbac.authorization.k8s.io",
            json!({"metadata": {"name": "reader"}, "rules": [{"nonResourceURLs": ["/metrics", "/debug/*"], "verbs": ["get"]}]}),
        );
        store.put(
            "clusterrolebindings.rbac.authorization.k8s.io",
            json!({"metadata": {"name": "readers"}, "roleRef": {"kind": "ClusterRole", "name": "reader"},
                "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}]}),
        );
        store
    }

    fn review(plural: &str, store: &Store, tokens: &Tokens, body: Value) -> Result<(u16, Value), ApiError> {
        respond(store, tokens, &kind(plural), "create", body.to_string().as_bytes())
    }

    #[test]
    fn a_token_review_authenticates_issued_tokens_for_the_apiservers_audience() {
        let (store, tokens) = (Store::new(10), Tokens::default());
        let token = tokens.issue(User::new("system:serviceaccount:monitoring:prometheus", vec![]));
        let body = |token: &str, audiences: Value| {
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": {"token": token, "audiences": audiences}})
        };
        let (code, answer) = review("tokenreviews", &store, &tokens, body(&token, Value::Null)).unwrap();
        assert_eq!(code, 201);
        let status = &answer["status"];
        assert_eq!(status["authenticated"], true);
        assert_eq!(status["user"]["username"], "system:serviceaccount:monitoring:prometheus");
        assert!(
            status["user"]["groups"]
                .as_array()
                .unwrap()
                .contains(&json!("system:serviceaccounts:monitoring"))
        );
        assert_eq!(answer["spec"]["token"], token.as_str(), "the request comes back");

        let (_, answer) = review("tokenreviews", &store, &tokens, body("forged", Value::Null)).unwrap();
        assert_eq!(answer["status"]["authenticated"], false);
        let (_, answer) = review("tokenreviews", &store, &tokens, body(&token, json!(["vault"]))).unwrap();
        assert_eq!(answer["status"]["authenticated"], false, "another audience");
        assert!(answer["status"]["error"].as_str().unwrap().contains("invalid for the target audiences"));

        let error = review("tokenreviews", &store, &tokens, body("", Value::Null)).unwrap_err();
        assert_eq!(
            (error.code, error.message.as_str()),
            (400, "token is required for TokenReview in authentication")
        );
        let error = respond(&store, &tokens, &kind("tokenreviews"), "list", b"").unwrap_err();
        assert_eq!(error.code, 405, "create only");
    }

    #[test]
    fn a_subject_access_review_asks_rbac_about_a_non_resource_url_or_a_resource() {
        let (store, tokens) = (reader_store(), Tokens::default());
        let ask = |user: &str, groups: Value, path: &str| {
            let body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": {"user": user, "groups": groups, "nonResourceAttributes": {"path": path, "verb": "get"}}});
            review("subjectaccessreviews", &store, &tokens, body).unwrap().1["status"].clone()
        };
        let sa_groups =
            json!(["system:serviceaccounts", "system:serviceaccounts:monitoring", "system:authenticated"]);
        let allowed = ask("system:serviceaccount:monitoring:prometheus", sa_groups.clone(), "/metrics");
        assert_eq!(allowed["allowed"], true);
        assert!(allowed["reason"].as_str().unwrap().contains("ClusterRoleBinding \"readers\""), "{allowed}");
        assert_eq!(
            ask("system:serviceaccount:monitoring:prometheus", sa_groups.clone(), "/debug/queue")["allowed"],
            true
        );
        assert_eq!(
            ask("system:serviceaccount:monitoring:prometheus", sa_groups, "/healthz")["allowed"],
            false
        );
        assert_eq!(ask("alice", json!(["system:authenticated"]), "/metrics"), json!({"allowed": false}));

        let resource = json!({"spec": {"user": "alice", "resourceAttributes": {"verb": "get", "resource": "pods", "namespace": "a"}}});
        let (code, answer) = review("subjectaccessreviews", &store, &tokens, resource).unwrap();
        assert_eq!((code, &answer["status"]["allowed"]), (201, &json!(false)));
    }

    #[test]
    fn a_subject_access_review_is_validated_as_1_28_validates_it() {
        let (store, tokens) = (Store::new(10), Tokens::default());
        let refused = |body: Value| review("subjectaccessreviews", &store, &tokens, body).unwrap_err();
        let error = refused(json!({"spec": {"user": "alice"}}));
        assert_eq!(error.code, 422);
        assert!(
            error.message.contains("exactly one of nonResourceAttributes or resourceAttributes"),
            "{}",
            error.message
        );
        let both = json!({"spec": {"user": "alice", "resourceAttributes": {}, "nonResourceAttributes": {}}});
        assert!(refused(both).message.contains("cannot be specified in combination"));
        let nobody = json!({"spec": {"nonResourceAttributes": {"path": "/metrics", "verb": "get"}}});
        assert!(refused(nobody).message.contains("at least one of user or group must be specified"));
        let named = json!({"metadata": {"name": "x"}, "spec": {"user": "a", "nonResourceAttributes": {"path": "/", "verb": "get"}}});
        let error = refused(named);
        assert!(
            error.message.starts_with("SubjectAccessReview.authorization.k8s.io \"\" is invalid: metadata: "),
            "{}",
            error.message
        );
    }
}
