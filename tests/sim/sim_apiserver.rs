//! The simulated API server refusing and serving what a real one does: the
//! `OwnerReferencesPermissionEnforcement` admission option, RBAC kinds and Deployments for
//! `kubectl apply --dry-run=server -k manifests/`, OpenAPI v3 for `kubectl explain`, one 422 for
//! every field error, the CEL libraries of each version, `demo --kubernetes-version`, the
//! reflector's INFO line for a refused streaming list, and what uninstalling the CRD deletes.
//! kubectl is the real binary.
#![cfg(feature = "sim")]

use crate::common;

use std::path::Path;
use std::sync::Arc;

use common::TestCluster;
use dbcluster_operator::cli::demo::{Demo, DemoOptions};
use dbcluster_operator::runtime::informer::Informer;
use dbcluster_operator::sim::{KubernetesVersion, SimConfig, SimServer};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::api::rbac::v1::{ClusterRole, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use tracing_subscriber::layer::SubscriberExt;

fn from_json<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap()
}

/// The status code and message of a refused request.
fn refusal<T: std::fmt::Debug>(result: kube::Result<T>) -> (u16, String) {
    match result {
        Err(kube::Error::Api(status)) => (status.code, status.message),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Runs kubectl against `sim` with `args`; (success, stdout, stderr).
async fn kubectl(sim: &SimServer, dir: &Path, args: &[&str]) -> (bool, String, String) {
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, sim.kubeconfig_yaml()).unwrap();
    let out = tokio::process::Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", &kubeconfig)
        .env("HOME", dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .await
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

#[tokio::test]
async fn blocking_an_owners_deletion_needs_update_on_its_finalizers() {
    let config = SimConfig { owner_references_permission_enforcement: true, ..SimConfig::default() };
    let sim = SimServer::start_with(config).await.unwrap();
    let admin = sim.client();
    let owner = Api::<ConfigMap>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &from_json(json!({"metadata": {"name": "owner"}})))
        .await
        .unwrap();
    let reference = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
        "uid": owner.metadata.uid.unwrap(), "blockOwnerDeletion": true});
    let dependent: Secret =
        from_json(json!({"metadata": {"name": "dependent", "ownerReferences": [reference]}}));
    let as_alice = Api::<Secret>::namespaced(sim.client_as("alice"), "default");
    let roles = Api::<Role>::namespaced(admin.clone(), "default");
    let bindings = Api::<RoleBinding>::namespaced(admin.clone(), "default");
    let grant = |name: &str, resource: &str, verb: &str| -> (Role, RoleBinding) {
        (
            from_json(json!({"metadata": {"name": name},
                "rules": [{"apiGroups": [""], "resources": [resource], "verbs": [verb]}]})),
            from_json(json!({"metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": [{"kind": "User", "name": "alice"}]})),
        )
    };

    let (code, message) = refusal(as_alice.create(&PostParams::default(), &dependent).await);
    assert_eq!(code, 403);
    assert!(message.contains("cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on"), "{message}");
    let asked = sim.authorizations();
    assert_eq!(asked.len(), 1);
    assert_eq!(
        (asked[0].verb.as_str(), asked[0].resource.as_str(), asked[0].subresource.as_deref()),
        ("update", "configmaps", Some("finalizers"))
    );
    // The admin (no impersonated user) is not judged.
    let mut by_admin = dependent.clone();
    by_admin.metadata.name = Some("by-admin".into());
    Api::<Secret>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &by_admin)
        .await
        .unwrap();

    let (role, binding) = grant("finalizers", "configmaps/finalizers", "update");
    roles.create(&PostParams::default(), &role).await.unwrap();
    bindings.create(&PostParams::default(), &binding).await.unwrap();
    let created = as_alice.create(&PostParams::default(), &dependent).await.unwrap();

    // Changing the references of an existing object needs `delete` on it.
    let mut changed = created.clone();
    let mut other = serde_json::to_value(&created.metadata.owner_references.as_ref().unwrap()[0]).unwrap();
    other["name"] = json!("other");
    other["uid"] = json!("other-uid");
    other["blockOwnerDeletion"] = json!(false);
    changed.metadata.owner_references.as_mut().unwrap().push(from_json(other));
    let (code, message) = refusal(as_alice.replace("dependent", &PostParams::default(), &changed).await);
    assert_eq!(code, 403);
    assert!(message.contains("cannot set an ownerRef on a resource you can't delete"), "{message}");
    let (role, binding) = grant("delete", "secrets", "delete");
    roles.create(&PostParams::default(), &role).await.unwrap();
    bindings.create(&PostParams::default(), &binding).await.unwrap();
    as_alice.replace("dependent", &PostParams::default(), &changed).await.unwrap();
}

#[tokio::test]
async fn without_the_option_anyone_may_block_an_owners_deletion() {
    let sim = SimServer::start().await.unwrap();
    let reference = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "u",
        "blockOwnerDeletion": true});
    let dependent: Secret = from_json(json!({"metadata": {"name": "d", "ownerReferences": [reference]}}));
    let as_alice = Api::<Secret>::namespaced(sim.client_as("alice"), "default");
    as_alice.create(&PostParams::default(), &dependent).await.unwrap();
    assert!(sim.authorizations().is_empty());
}

#[tokio::test]
async fn kubectl_applies_the_manifests_as_a_server_dry_run_and_for_real() {
    let sim = SimServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // As on a real cluster, a dry-run Namespace is not there for the objects in it.
    let (ok, _, stderr) = kubectl(&sim, dir.path(), &["create", "namespace", "dbcluster-system"]).await;
    assert!(ok, "{stderr}");

    let (ok, stdout, stderr) =
        kubectl(&sim, dir.path(), &["apply", "--dry-run=server", "-k", "manifests/"]).await;
    assert!(ok, "{stdout}{stderr}");
    for object in [
        "customresourcedefinition.apiextensions.k8s.io/databaseclusters.databases.madmmas.dev created (server dry run)",
        "serviceaccount/dbcluster-operator created (server dry run)",
        "clusterrole.rbac.authorization.k8s.io/dbcluster-operator created (server dry run)",
        "clusterrolebinding.rbac.authorization.k8s.io/dbcluster-operator created (server dry run)",
        "role.rbac.authorization.k8s.io/dbcluster-operator-leader-election created (server dry run)",
        "rolebinding.rbac.authorization.k8s.io/dbcluster-operator-leader-election created (server dry run)",
        "deployment.apps/dbcluster-operator created (server dry run)",
    ] {
        assert!(stdout.contains(object), "{object:?} missing from:\n{stdout}");
    }
    let client = sim.client();
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    assert!(crds.get_opt("databaseclusters.databases.madmmas.dev").await.unwrap().is_none(), "dry run wrote");
    assert!(Api::<ClusterRole>::all(client.clone()).get_opt("dbcluster-operator").await.unwrap().is_none());
    let deployments = Api::<Deployment>::namespaced(client.clone(), "dbcluster-system");
    assert!(deployments.get_opt("dbcluster-operator").await.unwrap().is_none());

    let (ok, stdout, stderr) = kubectl(&sim, dir.path(), &["apply", "-k", "manifests/"]).await;
    assert!(ok, "{stdout}{stderr}");
    let deployment = deployments.get("dbcluster-operator").await.unwrap();
    assert_eq!(deployment.metadata.generation, Some(1));
    let role = Api::<ClusterRole>::all(client.clone()).get("dbcluster-operator").await.unwrap();
    let rules = role.rules.unwrap();
    assert!(rules.iter().any(|r| {
        r.resources.as_deref().unwrap_or_default().contains(&"databaseclusters/finalizers".to_string())
    }));
    let (ok, stdout, stderr) = kubectl(
        &sim,
        dir.path(),
        &["get", "sa,role,rolebinding,deploy", "-n", "dbcluster-system", "-o", "name"],
    )
    .await;
    assert!(ok, "{stderr}");
    for name in [
        "serviceaccount/dbcluster-operator",
        "role.rbac.authorization.k8s.io/dbcluster-operator-leader-election",
        "rolebinding.rbac.authorization.k8s.io/dbcluster-operator-leader-election",
        "deployment.apps/dbcluster-operator",
    ] {
        assert!(stdout.lines().any(|l| l == name), "{name} missing from:\n{stdout}");
    }
}

#[tokio::test]
async fn kubectl_explain_reads_the_crd_schema_from_openapi_v3() {
    let cluster = TestCluster::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (ok, stdout, stderr) = kubectl(&cluster.sim, dir.path(), &["explain", "dbc.spec"]).await;
    assert!(ok, "{stdout}{stderr}");
    assert!(stdout.contains("KIND:       DatabaseCluster"), "{stdout}");
    assert!(stdout.contains("FIELD: spec <Object>"), "{stdout}");
    for field in ["replicas\t<integer> -required-", "storageSize\t<string>", "version\t<string> -required-"] {
        assert!(stdout.contains(field), "{field:?} missing from:\n{stdout}");
    }
    assert!(stdout.contains("Number of PostgreSQL instances (0 to 10)"), "{stdout}");
    // The allowed values are listed (in the description: kubectl before 1.30 does not print a
    // field's enum), and a description reads as one paragraph (kubectl wraps it).
    for (field, values) in
        [("primaryUpdateMethod", ["Switchover", "Restart"]), ("pvcRetention", ["Retain", "Delete"])]
    {
        let path = format!("dbc.spec.{field}");
        let (ok, stdout, stderr) = kubectl(&cluster.sim, dir.path(), &["explain", &path]).await;
        let listed = format!("One of: `{}`, `{}`.", values[0], values[1]);
        assert!(
            ok && stdout.split_whitespace().collect::<Vec<_>>().join(" ").contains(&listed),
            "{stdout}{stderr}"
        );
    }
    let (ok, stdout, stderr) =
        kubectl(&cluster.sim, dir.path(), &["explain", "dbc.spec.failoverDelay"]).await;
    // kubectl wraps at 76 columns itself: a break kept from the source's wrapping would leave a
    // short line inside the paragraph ("… promoted in its" / "place (default" / "5); …").
    let description: Vec<&str> = stdout
        .lines()
        .skip_while(|l| *l != "DESCRIPTION:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .collect();
    let (last, wrapped) = description.split_last().expect("a description");
    assert!(last.contains("not failed over") && !wrapped.is_empty(), "{stdout}{stderr}");
    assert!(ok && wrapped.iter().all(|l| l.trim().len() >= 60), "a line broken early:\n{stdout}");
    let (ok, stdout, stderr) = kubectl(&cluster.sim, dir.path(), &["explain", "dbc.metadata"]).await;
    assert!(ok && stdout.contains("ObjectMeta is metadata"), "{stdout}{stderr}");
}

#[tokio::test]
async fn every_field_error_comes_in_one_422_the_metadatas_first() {
    let cluster = TestCluster::start().await;
    let bad = json!({"apiVersion": "databases.madmmas.dev/v1alpha1", "kind": "DatabaseCluster",
        "metadata": {"name": "Bad_Name", "labels": {"app": "-x"}}, "spec": {"replicas": -1, "version": "15.4"}});
    let (code, message) = refusal(cluster.clusters().create(&PostParams::default(), &from_json(bad)).await);
    assert_eq!(code, 422);
    let (name, label, replicas) = (
        message.find("metadata.name: Invalid value: \"Bad_Name\"").expect(&message),
        message.find("metadata.labels: Invalid value: \"-x\"").expect(&message),
        message
            .find(
                "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0",
            )
            .expect(&message),
    );
    assert!(name < label && label < replicas, "{message}");
}

/// A CRD of `example.com` (`plural`, `kind`) whose `spec` has the schema `properties`.
fn example_crd(plural: &str, kind: &str, properties: Value) -> CustomResourceDefinition {
    from_json(json!({
        "metadata": {"name": format!("{plural}.example.com")},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": plural, "kind": kind},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {"spec": {"type": "object", "properties": properties}}}}}]},
    }))
}

/// A CRD of `example.com` whose one field has the CEL `rule`.
fn crd_with_rule(rule: &str) -> CustomResourceDefinition {
    example_crd(
        "widgets",
        "Widget",
        json!({"tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-validations": [{"rule": rule}]}}),
    )
}

async fn crd_accepted(version: u32, rule: &str) -> Result<(), String> {
    let config = SimConfig { kubernetes_version: KubernetesVersion::new(version), ..SimConfig::default() };
    let sim = SimServer::start_with(config).await.unwrap();
    let crds = Api::<CustomResourceDefinition>::all(sim.client());
    crds.create(&PostParams::default(), &crd_with_rule(rule)).await.map(|_| ()).map_err(|e| e.to_string())
}

#[tokio::test]
async fn new_cel_rules_get_the_libraries_of_the_previous_minors_base_environment() {
    // Lists, regex and URLs: in every version's environment.
    crd_accepted(28, "self.all(t, t.matches('^[a-z]+$'))").await.unwrap();
    // The sets library and strings version 2 arrive in 1.29's, so new rules use them from 1.30.
    let refused = crd_accepted(29, "sets.contains(self, ['a'])").await.unwrap_err();
    assert!(
        refused.contains("undeclared reference to 'sets'") && refused.contains("compiled for 1.28"),
        "{refused}"
    );
    crd_accepted(30, "sets.contains(self, ['a'])").await.unwrap();
    assert!(crd_accepted(29, "'%s'.format(['a']) == 'a'").await.is_err());
    crd_accepted(30, "'%s'.format(['a']) == 'a'").await.unwrap();
    // IP and CIDR (1.30's), the format library (1.31's).
    assert!(crd_accepted(30, "self.all(t, isIP(t))").await.is_err());
    crd_accepted(31, "self.all(t, isIP(t))").await.unwrap();
    assert!(crd_accepted(31, "self.all(t, format.dns1123Label().validate(t).hasValue())").await.is_err());
}

#[tokio::test]
async fn demo_serves_the_kubernetes_version_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let options = DemoOptions {
        addr: "127.0.0.1:0".parse().unwrap(),
        kubeconfig_out: dir.path().join("kubeconfig"),
        kubernetes_version: "1.30".parse().unwrap(),
        kubelet: dbcluster_operator::sim::KubeletKind::Timer,
    };
    let demo = Demo::start(&options).await.unwrap();
    let (status, _, body) = common::http_get(demo.server().addr(), "/version").await;
    assert_eq!(status, 200);
    let version: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((&version["gitVersion"], &version["minor"]), (&json!("v1.30.0"), &json!("30")));
}

#[tokio::test]
async fn demo_refuses_a_kubernetes_version_it_does_not_know() {
    for bad in ["1.27", "1.35", "2.0", "latest"] {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_dbcluster-operator"))
            .args(["demo", "--kubernetes-version", bad])
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {stderr}");
        assert!(
            stderr.contains(&format!("invalid value '{bad}' for '--kubernetes-version <MAJOR.MINOR>'"))
                && stderr.contains("is not a Kubernetes version from 1.28 to 1.34"),
            "{stderr}"
        );
    }
}

/// The level and message of every event, as a layer sees them.
#[derive(Clone, Default)]
struct Recorded(Arc<parking_lot::Mutex<Vec<(tracing::Level, String)>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Recorded {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let mut message = String::new();
        event.record(&mut |field: &tracing::field::Field, value: &dyn std::fmt::Debug| {
            if field.name() == "message" {
                message = format!("{value:?}");
            }
        });
        self.0.lock().push((*event.metadata().level(), message));
    }
}

#[tokio::test(start_paused = true)]
async fn a_streaming_list_refused_with_422_is_logged_at_info() {
    let recorded = Recorded::default();
    let subscriber = tracing_subscriber::registry().with(recorded.clone());
    let _guard = tracing::subscriber::set_default(subscriber);
    let sim = SimServer::start().await.unwrap();
    // A 1.28 apiserver (WatchList off) answers a streaming list with 422.
    sim.faults().fail_next("configmaps", 1, 422);
    let informer = Informer::new(Api::<ConfigMap>::namespaced(sim.client(), "default"));
    informer.start();
    common::within("the informer to sync", informer.synced()).await;
    assert_eq!(informer.stats().initial_list, Some("paginated"));
    let events = recorded.0.lock().clone();
    let refused: Vec<_> =
        events.iter().filter(|(_, m)| m.contains("server refused a streaming list")).collect();
    assert_eq!(refused.len(), 1, "{events:?}");
    assert_eq!(refused[0].0, tracing::Level::INFO);
    assert!(events.iter().all(|(level, _)| *level > tracing::Level::WARN), "{events:?}");
}

#[tokio::test(start_paused = true)]
async fn uninstalling_the_crd_deletes_the_databases_objects_but_not_their_claims() {
    let cluster = TestCluster::start().await;
    let operator = cluster.start_operator().await;
    let mut sample = common::sample();
    sample.spec.replicas = 2;
    cluster.clusters().create(&PostParams::default(), &sample).await.unwrap();
    let statefulsets = cluster.api::<StatefulSet>();
    common::await_object(&statefulsets, "production-postgres", "the StatefulSet's pods ready", |s| {
        s.status.as_ref().and_then(|s| s.ready_replicas) == Some(2)
    })
    .await;
    let claims = cluster.api::<PersistentVolumeClaim>();
    let claim_names = ["data-production-postgres-0", "data-production-postgres-1"];
    for claim in claim_names {
        let found = claims.get(claim).await.unwrap();
        assert!(found.metadata.owner_references.is_none(), "{claim} is owned: {found:?}");
    }

    let crds = Api::<CustomResourceDefinition>::all(cluster.client.clone());
    crds.delete("databaseclusters.databases.madmmas.dev", &Default::default()).await.unwrap();
    common::await_absent(&statefulsets, "production-postgres", "the StatefulSet collected").await;
    common::await_absent(&cluster.api::<Service>(), "production-postgres", "the Service collected").await;
    common::await_absent(&cluster.api::<Secret>(), "production-postgres-app", "the Secret collected").await;
    common::await_absent(&cluster.api::<Pod>(), "production-postgres-0", "the pods collected").await;
    for claim in claim_names {
        assert!(claims.get_opt(claim).await.unwrap().is_some(), "{claim} was deleted");
    }
    operator.stop().await;
}

/// A rule of a CEL library on one field of `spec`: (field, field schema, rule, an accepted value, a
/// refused value).
type LibraryCase = (&'static str, Value, &'static str, Value, Value);

/// A list schema, bounded as a real apiserver's cost estimate wants it.
fn list_of(item_type: &str) -> Value {
    json!({"type": "array", "maxItems": 8, "items": {"type": item_type, "maxLength": 16}})
}

/// A string schema, bounded as a real apiserver's cost estimate wants it.
fn short_string() -> Value {
    json!({"type": "string", "maxLength": 64})
}

/// The lists and URL libraries and the strings extension: every version's environment has them.
fn libraries_of_every_version() -> Vec<LibraryCase> {
    let (ints, doubles, strings, string) =
        (|| list_of("integer"), || list_of("number"), || list_of("string"), short_string);
    vec![
        ("isSorted", ints(), "self.isSorted()", json!([1, 2, 2, 3]), json!([3, 1])),
        ("isSortedStrings", strings(), "self.isSorted()", json!(["a", "b"]), json!(["b", "a"])),
        ("sum", ints(), "self.sum() == 6", json!([1, 2, 3]), json!([1, 2])),
        ("sumDoubles", doubles(), "self.sum() == 1.5", json!([1, 0.5]), json!([1])),
        ("min", ints(), "self.min() == 1", json!([3, 1, 2]), json!([3, 2])),
        ("max", strings(), "self.max() == 'c'", json!(["a", "c", "b"]), json!(["a"])),
        ("indexOf", strings(), "self.indexOf('b') == 1", json!(["a", "b", "b"]), json!(["b", "a"])),
        ("lastIndexOf", ints(), "self.lastIndexOf(2) == 2", json!([2, 1, 2]), json!([2, 2, 1])),
        ("isURL", string(), "isURL(self)", json!("/absolute-path"), json!("../relative-path")),
        (
            "url",
            string(),
            "url(self).getScheme() == 'https'",
            json!("https://example.com"),
            json!("http://e.com"),
        ),
        (
            "getHost",
            string(),
            "url(self).getHost() == 'e.com:8443'",
            json!("https://e.com:8443/"),
            json!("https://e.com/"),
        ),
        (
            "getHostname",
            string(),
            "url(self).getHostname() == '::1'",
            json!("http://[::1]:80/"),
            json!("http://h/"),
        ),
        (
            "getPort",
            string(),
            "url(self).getPort() == '80'",
            json!("http://[::1]:80/"),
            json!("http://[::1]/"),
        ),
        (
            "getEscapedPath",
            string(),
            "url(self).getEscapedPath() == '/a%20b/'",
            json!("https://e.com/a b/"),
            json!("https://e.com/ab/"),
        ),
        (
            "getQuery",
            string(),
            "url(self).getQuery() == {'k': ['a', 'b']}",
            json!("https://e.com/?k=a&k=b"),
            json!("https://e.com/?k=a"),
        ),
        ("charAt", string(), "self.charAt(1) == 'b'", json!("abc"), json!("acb")),
        ("stringIndexOf", string(), "self.indexOf('c') == 2", json!("abc"), json!("acb")),
        ("stringLastIndexOf", string(), "self.lastIndexOf('a') == 2", json!("aba"), json!("aab")),
        ("lowerAscii", string(), "self.lowerAscii() == 'abc'", json!("AbC"), json!("AbD")),
        ("upperAscii", string(), "self.upperAscii() == 'ABC'", json!("aBc"), json!("aBd")),
        ("replace", string(), "self.replace('-', '.') == 'a.b'", json!("a-b"), json!("a_b")),
        ("split", string(), "self.split(',') == ['a', 'b']", json!("a,b"), json!("a;b")),
        ("substring", string(), "self.substring(1, 3) == 'bc'", json!("abcd"), json!("abdc")),
        ("trim", string(), "self.trim() == 'x'", json!(" x "), json!(" y ")),
        ("join", strings(), "self.join('-') == 'a-b'", json!(["a", "b"]), json!(["a", "c"])),
    ]
}

/// The sets extension, which new rules may call from 1.30.
fn sets_library() -> Vec<LibraryCase> {
    let strings = || list_of("string");
    vec![
        ("contains", strings(), "sets.contains(self, ['a'])", json!(["b", "a"]), json!(["b"])),
        ("equivalent", strings(), "sets.equivalent(self, ['a', 'b'])", json!(["b", "a", "a"]), json!(["a"])),
        ("intersects", strings(), "sets.intersects(self, ['a', 'z'])", json!(["z"]), json!(["b"])),
    ]
}

/// A `Gadget` CRD with one field per case, each field carrying its case's rule, whose message
/// names the field.
fn library_crd(cases: &[LibraryCase]) -> CustomResourceDefinition {
    let properties: serde_json::Map<String, Value> = cases
        .iter()
        .map(|(field, schema, rule, _, _)| {
            let mut schema = schema.clone();
            schema["x-kubernetes-validations"] =
                json!([{"rule": rule, "message": format!("{field} failed")}]);
            ((*field).to_owned(), schema)
        })
        .collect();
    example_crd("gadgets", "Gadget", Value::Object(properties))
}

/// Starts a sim of `version` and installs [`library_crd`] of `cases`.
async fn sim_with_library_crd(version: u32, cases: &[LibraryCase]) -> kube::Result<SimServer> {
    let config = SimConfig { kubernetes_version: KubernetesVersion::new(version), ..SimConfig::default() };
    let sim = SimServer::start_with(config).await.unwrap();
    let crds = Api::<CustomResourceDefinition>::all(sim.client());
    crds.create(&PostParams::default(), &library_crd(cases)).await.map(|_| sim)
}

/// Each case's accepted value is stored, and its refused value gets a 422 naming its field.
async fn assert_cases_evaluate(sim: &SimServer, cases: &[LibraryCase]) {
    use kube::api::DynamicObject;
    use kube::core::{ApiResource, GroupVersionKind};
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("example.com", "v1", "Gadget"), "gadgets");
    let gadgets = Api::<DynamicObject>::namespaced_with(sim.client(), "default", &resource);
    let gadget = |name: String, field: &str, value: &Value| -> DynamicObject {
        from_json(json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": name},
            "spec": {(field): value}}))
    };
    for (i, (field, _, rule, good, bad)) in cases.iter().enumerate() {
        let pp = PostParams::default();
        if let Err(e) = gadgets.create(&pp, &gadget(format!("ok-{i}"), field, good)).await {
            panic!("{rule} refused {good}: {e}");
        }
        let (code, message) = refusal(gadgets.create(&pp, &gadget(format!("bad-{i}"), field, bad)).await);
        assert_eq!(code, 422, "{rule}: {message}");
        let expected = format!("spec.{field}: Invalid value: ");
        assert!(
            message.contains(&expected) && message.contains(&format!("{field} failed")),
            "{rule}: {message}"
        );
    }
}

#[tokio::test]
async fn the_lists_url_and_strings_libraries_are_evaluated_on_1_28() {
    let cases = libraries_of_every_version();
    let sim = sim_with_library_crd(28, &cases).await.unwrap();
    assert_cases_evaluate(&sim, &cases).await;
}

#[tokio::test]
async fn the_sets_library_is_refused_by_1_28_and_evaluated_by_1_30() {
    let cases = sets_library();
    let Err(refused) = sim_with_library_crd(28, &cases).await else { panic!("1.28 accepted sets.contains") };
    let (code, message) = refusal::<()>(Err(refused));
    assert_eq!(code, 422);
    assert!(message.contains("undeclared reference to 'sets'"), "{message}");
    let sim = sim_with_library_crd(30, &cases).await.unwrap();
    assert_cases_evaluate(&sim, &cases).await;
}
