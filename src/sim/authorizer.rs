//! RBAC as the apiserver's authorizer evaluates it: may a user do a verb on a resource, by the
//! stored ClusterRoleBindings, and the RoleBindings of the request's namespace, and the rules of
//! the roles they bind. Users are named as the apiserver names them (a ServiceAccount is
//! `system:serviceaccount:<namespace>:<name>`). Pure over the store; no aggregation rules.

use serde_json::Value;

use crate::sim::store::Store;

const RBAC: &str = "rbac.authorization.k8s.io";

/// Who makes a request: the user name and its groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// `system:serviceaccount:dbcluster-system:dbcluster-operator`, `alice`.
    pub name: String,
    /// The groups, `system:authenticated` and (for ServiceAccounts) theirs included.
    pub groups: Vec<String>,
}

impl User {
    /// A user as authentication (here: impersonation) names it, with the groups the apiserver
    /// adds: every user is `system:authenticated`; a ServiceAccount is also in
    /// `system:serviceaccounts` and `system:serviceaccounts:<namespace>`.
    pub fn new(name: &str, mut groups: Vec<String>) -> Self {
        groups.push("system:authenticated".into());
        if let Some(namespace) = name
            .strip_prefix("system:serviceaccount:")
            .and_then(|rest| rest.split_once(':'))
            .map(|(ns, _)| ns)
        {
            groups.push("system:serviceaccounts".into());
            groups.push(format!("system:serviceaccounts:{namespace}"));
        }
        User { name: name.to_owned(), groups }
    }
}

/// What a request would do, as RBAC names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributes<'a> {
    /// `get`, `update`, `delete`…
    pub verb: &'a str,
    /// API group, empty for the core group.
    pub group: &'a str,
    /// Plural resource name.
    pub resource: &'a str,
    /// `finalizers`, `status`…
    pub subresource: Option<&'a str>,
    /// The namespace, for namespaced resources.
    pub namespace: Option<&'a str>,
    /// The object's name.
    pub name: &'a str,
}

/// Whether some binding in `store` grants `user` what `attributes` describe.
pub fn allows(store: &Store, user: &User, attributes: &Attributes) -> bool {
    let cluster_wide = store
        .list(&format!("clusterrolebindings.{RBAC}"), None)
        .filter(|binding| binds(binding, user, None))
        .any(|binding| role_allows(store, binding, None, attributes));
    cluster_wide
        || attributes.namespace.is_some_and(|ns| {
            store
                .list(&format!("rolebindings.{RBAC}"), Some(ns))
                .filter(|binding| binds(binding, user, Some(ns)))
                .any(|binding| role_allows(store, binding, Some(ns), attributes))
        })
}

/// Which ClusterRoleBinding lets `user` do `verb` on the non-resource URL `path` (`/metrics`), as
/// RBAC's reason says it; `None` if none does. Only ClusterRoles bound cluster-wide grant
/// non-resource URLs; a rule's URL matches exactly, or by prefix if it ends in `*`.
pub fn allows_non_resource(store: &Store, user: &User, verb: &str, path: &str) -> Option<String> {
    let url_matches = |url: &str| match url.strip_suffix('*') {
        Some(prefix) => path.starts_with(prefix),
        None => url == path,
    };
    let rule_allows = |rule: &Value| {
        let listed = |field: &str, wanted: &dyn Fn(&str) -> bool| {
            rule[field].as_array().into_iter().flatten().filter_map(Value::as_str).any(wanted)
        };
        listed("verbs", &|v| v == "*" || v == verb) && listed("nonResourceURLs", &url_matches)
    };
    store.list(&format!("clusterrolebindings.{RBAC}"), None).filter(|b| binds(b, user, None)).find_map(
        |binding| {
            let role_name = binding["roleRef"]["name"].as_str().unwrap_or_default();
            let role = (binding["roleRef"]["kind"] == "ClusterRole")
                .then(|| store.get(&format!("clusterroles.{RBAC}"), "", role_name))
                .flatten()?;
            role["rules"].as_array().into_iter().flatten().any(rule_allows).then(|| {
                let binding_name = binding["metadata"]["name"].as_str().unwrap_or_default();
                format!(
                    "RBAC: allowed by ClusterRoleBinding \"{binding_name}\" of ClusterRole \"{role_name}\""
                )
            })
        },
    )
}

/// Whether a binding (a RoleBinding in `namespace`, or a ClusterRoleBinding) names the user.
fn binds(binding: &Value, user: &User, namespace: Option<&str>) -> bool {
    binding["subjects"].as_array().into_iter().flatten().any(|subject| {
        let name = subject["name"].as_str().unwrap_or_default();
        match subject["kind"].as_str() {
            Some("User") => user.name == name,
            Some("Group") => user.groups.iter().any(|g| g == name),
            Some("ServiceAccount") => {
                let ns = subject["namespace"].as_str().or(namespace).unwrap_or_default();
                user.name == format!("system:serviceaccount:{ns}:{name}")
            }
            _ => false,
        }
    })
}

/// Whether the role a binding refers to has a rule allowing `attributes`.
fn role_allows(store: &Store, binding: &Value, namespace: Option<&str>, attributes: &Attributes) -> bool {
    let role_ref = &binding["roleRef"];
    let name = role_ref["name"].as_str().unwrap_or_default();
    let role = match (role_ref["kind"].as_str(), namespace) {
        (Some("ClusterRole"), _) => store.get(&format!("clusterroles.{RBAC}"), "", name),
        (Some("Role"), Some(ns)) => store.get(&format!("roles.{RBAC}"), ns, name),
        _ => None,
    };
    role.and_then(|r| r["rules"].as_array()).into_iter().flatten().any(|rule| rule_allows(rule, attributes))
}

/// RBAC's rule matching: the verb, the group, the resource (`resource/subresource`, with `*`
/// and `*/subresource` wildcards) and, if the rule lists any, the name.
fn rule_allows(rule: &Value, attributes: &Attributes) -> bool {
    let names = |field: &str| -> Vec<&str> {
        rule[field].as_array().into_iter().flatten().filter_map(Value::as_str).collect()
    };
    let has = |field: &str, wanted: &str| names(field).iter().any(|n| *n == "*" || *n == wanted);
    let resource_ok = match attributes.subresource {
        None => has("resources", attributes.resource),
        Some(sub) => {
            let resources = names("resources");
            let combined = format!("{}/{sub}", attributes.resource);
            let any_of = format!("*/{sub}");
            resources.iter().any(|r| *r == "*" || *r == combined || *r == any_of)
        }
    };
    let resource_names = names("resourceNames");
    has("verbs", attributes.verb)
        && has("apiGroups", attributes.group)
        && resource_ok
        && (resource_names.is_empty() || resource_names.contains(&attributes.name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn store_with(objects: &[(&str, Value)]) -> Store {
        let mut store = Store::new(100);
        for (key, obj) in objects {
            store.put(key, obj.clone());
        }
        store
    }

    fn attributes<'a>(verb: &'a str, resource: &'a str, subresource: Option<&'a str>) -> Attributes<'a> {
        Attributes { verb, group: "example.com", resource, subresource, namespace: Some("a"), name: "w" }
    }

    #[test]
    fn bindings_grant_their_roles_rules_to_their_subjects_only() {
        let sa = User::new("system:serviceaccount:ops:op", vec![]);
        let other = User::new("system:serviceaccount:ops:other", vec![]);
        let store = store_with(&[
            (
                "clusterroles.rbac.authorization.k8s.io",
                json!({"metadata": {"name": "c"}, "rules": [
                    {"apiGroups": ["example.com"], "resources": ["widgets/finalizers"], "verbs": ["update"]}]}),
            ),
            (
                "clusterrolebindings.rbac.authorization.k8s.io",
                json!({"metadata": {"name": "c"}, "roleRef": {"kind": "ClusterRole", "name": "c"},
                    "subjects": [{"kind": "ServiceAccount", "name": "op", "namespace": "ops"}]}),
            ),
            (
                "roles.rbac.authorization.k8s.io",
                json!({"metadata": {"name": "r", "namespace": "a"}, "rules": [
                    {"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["patch"], "resourceNames": ["w"]}]}),
            ),
            (
                "rolebindings.rbac.authorization.k8s.io",
                json!({"metadata": {"name": "r", "namespace": "a"}, "roleRef": {"kind": "Role", "name": "r"},
                    "subjects": [{"kind": "Group", "name": "system:serviceaccounts:ops"}]}),
            ),
        ]);
        assert!(allows(&store, &sa, &attributes("update", "widgets", Some("finalizers"))));
        assert!(!allows(&store, &other, &attributes("update", "widgets", Some("finalizers"))));
        assert!(!allows(&store, &sa, &attributes("update", "widgets", None)), "not the main resource");
        assert!(
            !allows(&store, &sa, &attributes("delete", "widgets", Some("finalizers"))),
            "not another verb"
        );
        assert!(
            allows(&store, &other, &attributes("patch", "gadgets", Some("status"))),
            "by group, wildcards"
        );
        let elsewhere = Attributes { namespace: Some("b"), ..attributes("patch", "gadgets", Some("status")) };
        assert!(!allows(&store, &other, &elsewhere), "a Role grants in its namespace only");
        let another = Attributes { name: "v", ..attributes("patch", "gadgets", Some("status")) };
        assert!(!allows(&store, &other, &another), "resourceNames limit the names");
    }
}
