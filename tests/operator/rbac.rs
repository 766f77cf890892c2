//! Least privilege, proven on the request log: run the operator against the simulated API server,
//! then check that every (group, resource, subresource, verb) it used is granted by
//! `manifests/rbac.yaml` — a Role only in its own namespace — and that every grant was used.
//! The operator runs as its ServiceAccount, bound by rbac.yaml's own objects, on a server with
//! the `OwnerReferencesPermissionEnforcement` admission plugin: the authorizations the plugin
//! asks for on the operator's behalf (`update databaseclusters/finalizers`, for its children's
//! `blockOwnerDeletion`) count as used, and must be granted, like its requests. It runs with
//! `--metrics-secure`, as the Deployment does, and is scraped once by a metrics reader: the token
//! and access reviews that costs are requests like the others (the scrape is HTTPS, trusting the
//! self-signed certificate the operator serves).
#![cfg(feature = "sim")]

use crate::common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use common::https::https_get_as;
use common::{WAIT_LIMIT, create_all, eventually, http_get};
use dbcluster_operator::cli::run;
use dbcluster_operator::databasecluster::api::types::{DatabaseCluster, Phase, crd};
use dbcluster_operator::databasecluster::backup::jobs::on_demand_job_name;
use dbcluster_operator::databasecluster::controller::operator;
use dbcluster_operator::runtime::manager::ManagerConfig;
use dbcluster_operator::runtime::manager::leader::LeaseConfig;
use dbcluster_operator::sim::{RequestRecord, SimConfig, SimServer};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, PersistentVolumeClaim, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// One grant: a verb on a resource (`resource` or `resource/subresource`) of a group, cluster-wide
/// or in one namespace.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Grant {
    namespace: Option<String>,
    group: String,
    resource: String,
    verb: String,
}

impl Grant {
    fn allows(&self, request: &RequestRecord) -> bool {
        let resource = match &request.subresource {
            Some(sub) => format!("{}/{sub}", request.resource),
            None => request.resource.clone(),
        };
        let namespace_ok = self.namespace.is_none() || self.namespace == request.namespace;
        namespace_ok && self.group == request.group && self.resource == resource && self.verb == request.verb
    }
}

/// Every (group, resource, verb) a rule names, flattened; wildcards are refused outright.
fn grants_of(rules: &[PolicyRule], namespace: Option<&str>) -> Vec<Grant> {
    let mut grants = Vec::new();
    for rule in rules {
        for group in rule.api_groups.as_deref().unwrap_or_default() {
            for resource in rule.resources.as_deref().unwrap_or_default() {
                for verb in &rule.verbs {
                    assert!(![group, resource, verb].contains(&&"*".to_string()), "wildcard in {rule:?}");
                    grants.push(Grant {
                        namespace: namespace.map(str::to_string),
                        group: group.clone(),
                        resource: resource.clone(),
                        verb: verb.clone(),
                    });
                }
            }
        }
    }
    grants
}

/// The grants `rbac.yaml` makes: the ClusterRole's everywhere, the Role's in its namespace.
fn rbac_grants(yaml: &str) -> Vec<Grant> {
    let documents: Vec<Value> = serde_saphyr::from_multiple(yaml).unwrap();
    let mut grants = Vec::new();
    for document in documents {
        match document["kind"].as_str() {
            Some("ClusterRole") => {
                let role: ClusterRole = serde_json::from_value(document).unwrap();
                grants.extend(grants_of(&role.rules.unwrap_or_default(), None));
            }
            Some("Role") => {
                let role: Role = serde_json::from_value(document).unwrap();
                grants.extend(grants_of(&role.rules.unwrap_or_default(), role.metadata.namespace.as_deref()));
            }
            _ => {}
        }
    }
    grants
}

/// What the log shows against the grants: requests no grant allows, grants no request used.
fn audit(grants: &[Grant], log: &[RequestRecord]) -> (Vec<RequestRecord>, BTreeSet<Grant>) {
    let denied = log.iter().filter(|r| !grants.iter().any(|g| g.allows(r))).cloned().collect();
    let unused = grants.iter().filter(|g| !log.iter().any(|r| g.allows(r))).cloned().collect();
    (denied, unused)
}

fn record(
    verb: &str,
    group: &str,
    resource: &str,
    subresource: Option<&str>,
    namespace: Option<&str>,
) -> RequestRecord {
    RequestRecord {
        verb: verb.into(),
        group: group.into(),
        version: "v1".into(),
        resource: resource.into(),
        subresource: subresource.map(str::to_string),
        namespace: namespace.map(str::to_string),
        name: None,
    }
}

#[test]
fn the_audit_finds_denied_requests_and_unused_grants() {
    let grants = rbac_grants(
        "kind: ClusterRole\napiVersion: rbac.authorization.k8s.io/v1\nmetadata: {name: c}\nrules:\n\
         - {apiGroups: [apps], resources: [statefulsets, statefulsets/status], verbs: [list, patch]}\n---\n\
         kind: Role\napiVersion: rbac.authorization.k8s.io/v1\nmetadata: {name: r, namespace: ops}\nrules:\n\
         - {apiGroups: [coordination.k8s.io], resources: [leases], verbs: [get]}\n",
    );
    let log = [
        record("list", "apps", "statefulsets", None, Some("a")),
        record("patch", "apps", "statefulsets", Some("status"), Some("a")),
        record("get", "coordination.k8s.io", "leases", None, Some("ops")),
        // Denied: the Role's lease grant is for `ops` only; `delete` is granted nowhere; `scale`
        // is another subresource.
        record("get", "coordination.k8s.io", "leases", None, Some("default")),
        record("delete", "apps", "statefulsets", None, Some("a")),
        record("patch", "apps", "statefulsets", Some("scale"), Some("a")),
    ];
    let (denied, unused) = audit(&grants, &log);
    assert_eq!(denied, log[3..].to_vec());
    // A rule grants every verb on every resource it names: two of those four were never used.
    let unused: Vec<(String, String)> = unused.into_iter().map(|g| (g.resource, g.verb)).collect();
    let expected = [("statefulsets", "patch"), ("statefulsets/status", "list")];
    assert_eq!(unused, expected.map(|(r, v)| (r.to_string(), v.to_string())));
}

/// The operator never runs commands in its pods (`kubectl dbc psql` execs with the user's own
/// rights): no grant names `pods/exec`, nor its siblings `pods/attach` and `pods/portforward`.
#[test]
fn rbac_yaml_grants_no_exec_attach_or_port_forward() {
    let grants = rbac_grants(RBAC_YAML);
    let streaming: Vec<&Grant> = grants
        .iter()
        .filter(|g| {
            g.group.is_empty()
                && ["pods/exec", "pods/attach", "pods/portforward"].contains(&g.resource.as_str())
        })
        .collect();
    assert!(streaming.is_empty(), "{streaming:?}");
}

/// The test's own requests, so they can be told apart from the operator's in the server's log.
#[derive(Default)]
struct OwnRequests(Vec<(String, String, String)>);

impl OwnRequests {
    fn note<K: Resource<DynamicType = ()>>(&mut self, verb: &str) {
        self.0.push((verb.to_string(), K::group(&()).to_string(), K::plural(&()).to_string()));
    }

    /// `log` without one record per own request (same verb, group and main resource).
    fn remove_from(&self, log: &[RequestRecord]) -> Vec<RequestRecord> {
        let mut rest = log.to_vec();
        for (verb, group, resource) in &self.0 {
            let own = |r: &RequestRecord| {
                &r.verb == verb && &r.group == group && &r.resource == resource && r.subresource.is_none()
            };
            let at = rest.iter().position(own).unwrap_or_else(|| panic!("own {verb} {resource} not logged"));
            rest.remove(at);
        }
        rest
    }
}

/// Reads `name` until `done` (for at most [`WAIT_LIMIT`]), noting each read.
async fn until<K>(api: &Api<K>, own: &mut OwnRequests, name: &str, done: impl Fn(Option<&K>) -> bool)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let reads = std::cell::Cell::new(0);
    eventually(&format!("{name} to reach the expected state"), WAIT_LIMIT, || async {
        reads.set(reads.get() + 1);
        let seen = api.get_opt(name).await.unwrap();
        if done(seen.as_ref()) { Ok(()) } else { Err(seen) }
    })
    .await;
    for _ in 0..reads.get() {
        own.note::<K>("get");
    }
}

/// Waits until the operator's caches (read on its `/debug/cache`, which makes no API request) hold
/// no object but kept claims, the children collected after the cluster's deletion included, and its
/// `/debug/queue` shows no key queued or in a pass: the passes the deletion brings have made their
/// requests, and the log is complete when the operator is stopped.
async fn await_collected_and_settled(debug: SocketAddr) {
    eventually("the operator to see the cluster's children collected and settle", WAIT_LIMIT, || async {
        let read =
            |path| async move { serde_json::from_str::<Value>(&http_get(debug, path).await.2).unwrap() };
        let (cache, queue) = (read("/debug/cache").await, read("/debug/queue").await);
        let cached: Vec<(String, u64)> = cache["informers"]
            .as_array()
            .unwrap()
            .iter()
            // Claims outlive their cluster (`pvcRetention` Retain, the default): not collected.
            .filter(|i| i["informer"] != "persistentvolumeclaims" && i["objects"].as_u64() != Some(0))
            .map(|i| (i["informer"].to_string(), i["objects"].as_u64().unwrap_or_default()))
            .collect();
        let busy: Vec<Value> = queue["controllers"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|c| c["keys"].as_array().unwrap().clone())
            .filter(|k| k["state"] == "queued" || k["state"] == "processing" || k["runs_again"] == true)
            .collect();
        if cached.is_empty() && busy.is_empty() { Ok(()) } else { Err((cached, busy)) }
    })
    .await
}

fn running(replicas: i32) -> impl Fn(Option<&DatabaseCluster>) -> bool {
    move |cluster| {
        let status = cluster.and_then(|c| c.status.as_ref());
        status.is_some_and(|s| s.phase == Some(Phase::Running) && s.ready_replicas == replicas)
    }
}

fn managed(obj: Option<&impl Resource>) -> bool {
    obj.and_then(|o| o.meta().labels.as_ref()).is_some_and(|labels| {
        labels.get("app.kubernetes.io/managed-by").map(String::as_str) == Some("dbcluster-operator")
    })
}

/// Removes the managed-by label from a child: its informer sees it leave, the operator creates it
/// again, finds it exists (`get`) and applies its labels back (`patch`).
async fn unlabel<K>(client: &Client, own: &mut OwnRequests, name: &str)
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), "default");
    let patch = json!({"metadata": {"labels": {"app.kubernetes.io/managed-by": null}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    own.note::<K>("patch");
    until(&api, own, name, managed).await;
}

const RBAC_YAML: &str = include_str!("../../manifests/rbac.yaml");

/// As deployed, with --metrics-secure: a scrape by rbac.yaml's metrics reader makes the operator
/// review the scraper's token and access (TokenReview, SubjectAccessReview).
async fn scrape_as_the_metrics_reader(
    sim: &SimServer,
    own: &mut OwnRequests,
    metrics: SocketAddr,
    certificate: [rustls_pki_types::CertificateDer<'static>; 1],
) {
    let reader: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "prometheus-dbcluster-metrics"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
            "name": "dbcluster-operator-metrics-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}],
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(sim.client()).create(&PostParams::default(), &reader).await.unwrap();
    own.note::<ClusterRoleBinding>("create");
    let token = sim.issue_token("system:serviceaccount:monitoring:prometheus", &[]);
    let scrape = |token: Option<String>| {
        let certificate = certificate.clone();
        async move {
            https_get_as(metrics, "localhost", &certificate, "/metrics", token.as_deref()).await.unwrap().0
        }
    };
    assert_eq!(scrape(Some(token)).await, 200);
    assert_eq!(scrape(None).await, 401);
}

/// Backups: a schedule (CronJob, backup volume), an on-demand Job, drift on both, then the
/// schedule goes (the CronJob is deleted).
async fn backups_then_no_schedule(client: &kube::Client, own: &mut OwnRequests) {
    let clusters: Api<DatabaseCluster> = Api::namespaced(client.clone(), "default");
    let backups = json!({
        "metadata": {"annotations": {"databases.madmmas.dev/backup-now": "rbac"}},
        "spec": {"backup": {"schedule": "@daily"}},
    });
    clusters.patch("production-postgres", &PatchParams::default(), &Patch::Merge(&backups)).await.unwrap();
    own.note::<DatabaseCluster>("patch");
    let cronjobs: Api<CronJob> = Api::namespaced(client.clone(), "default");
    until(&cronjobs, own, "production-postgres-backup", |c| c.is_some()).await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let on_demand = on_demand_job_name("production-postgres", "rbac");
    until(&jobs, own, &on_demand, |j| j.is_some()).await;
    unlabel::<CronJob>(client, own, "production-postgres-backup").await;
    unlabel::<PersistentVolumeClaim>(client, own, "production-postgres-backups").await;
    let unscheduled = json!({"spec": {"backup": {"schedule": null}}});
    clusters
        .patch("production-postgres", &PatchParams::default(), &Patch::Merge(&unscheduled))
        .await
        .unwrap();
    own.note::<DatabaseCluster>("patch");
    until(&cronjobs, own, "production-postgres-backup", |c| c.is_none()).await;
}

/// The identity rbac.yaml binds its roles to.
const OPERATOR_USER: &str = "system:serviceaccount:dbcluster-system:dbcluster-operator";

/// The operator's requests in the scenario, and the authorizations admission asked for on its
/// behalf, on a server with or without streaming lists (older servers, and the reflector's
/// fallback, use paginated LISTs).
async fn operator_requests(streaming_lists: bool) -> Vec<RequestRecord> {
    let config =
        SimConfig { streaming_lists, owner_references_permission_enforcement: true, ..SimConfig::default() };
    let sim = SimServer::start_with(config).await.unwrap();
    let client = sim.client();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &crd()).await.unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "dbcluster-system"}})).unwrap();
    namespaces.create(&PostParams::default(), &ns).await.unwrap();
    create_all(&client, RBAC_YAML).await;
    let setup_requests = sim.request_log().len();

    // Started as the Deployment starts it: watching all namespaces, leader election in its own.
    let settings = ManagerConfig {
        namespace: None,
        workers: 4,
        metrics_addr: "127.0.0.1:0".parse().unwrap(),
        // Its own loopback listener, as in the Deployment: open, so reading it makes no review.
        debug_addr: "127.0.0.2:0".parse().unwrap(),
        health_addr: "127.0.0.1:0".parse().unwrap(),
        leader_election: Some(LeaseConfig::new("dbcluster-system", "dbcluster-operator", "rbac-test")),
        shutdown_timeout: Duration::from_secs(30),
        metrics_secure: true,
        metrics_cert_dir: None,
    };
    let started = run::start(sim.client_as(OPERATOR_USER), &sim.base_url(), settings).await.unwrap();
    let metrics = started.metrics_addr;
    let debug = started.debug_addr;
    // The self-signed certificate `--metrics-secure` serves without --metrics-cert-dir, trusted
    // exactly (as a scraper given it would).
    let certificate = [started.certificate().expect("--metrics-secure serves TLS")];
    let (signal, signals) = mpsc::channel(1);
    let operator = tokio::spawn(started.run(operator::workload, signals));

    // The seed's walkthrough, drift on every child kind, then deletion.
    let mut own = OwnRequests::default();
    let clusters: Api<DatabaseCluster> = Api::namespaced(client.clone(), "default");
    let sample: DatabaseCluster =
        serde_saphyr::from_str(include_str!("../../manifests/samples/databasecluster.yaml")).unwrap();
    clusters.create(&PostParams::default(), &sample).await.unwrap();
    own.note::<DatabaseCluster>("create");
    until(&clusters, &mut own, "production-postgres", running(3)).await;
    scrape_as_the_metrics_reader(&sim, &mut own, metrics, certificate).await;
    let scale = json!({"spec": {"replicas": 5}});
    clusters.patch("production-postgres", &PatchParams::default(), &Patch::Merge(&scale)).await.unwrap();
    own.note::<DatabaseCluster>("patch");
    until(&clusters, &mut own, "production-postgres", running(5)).await;
    // Storage growth: every claim read and patched.
    let grow = json!({"spec": {"storageSize": "2Gi"}});
    clusters.patch("production-postgres", &PatchParams::default(), &Patch::Merge(&grow)).await.unwrap();
    own.note::<DatabaseCluster>("patch");
    until(&clusters, &mut own, "production-postgres", |c| {
        c.and_then(|c| c.status.as_ref()).is_some_and(|s| {
            s.conditions.iter().any(|c| c.type_ == "Resizing" && c.reason == "ResizeComplete")
        })
    })
    .await;
    unlabel::<StatefulSet>(&client, &mut own, "production-postgres").await;
    unlabel::<Service>(&client, &mut own, "production-postgres").await;
    unlabel::<Secret>(&client, &mut own, "production-postgres-app").await;
    unlabel::<ConfigMap>(&client, &mut own, "production-postgres-scripts").await;
    unlabel::<PodDisruptionBudget>(&client, &mut own, "production-postgres").await;
    // One instance: the PodDisruptionBudget goes.
    let scale = json!({"spec": {"replicas": 1}});
    clusters.patch("production-postgres", &PatchParams::default(), &Patch::Merge(&scale)).await.unwrap();
    own.note::<DatabaseCluster>("patch");
    until(&clusters, &mut own, "production-postgres", running(1)).await;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    until(&pdbs, &mut own, "production-postgres", |p| p.is_none()).await;
    backups_then_no_schedule(&client, &mut own).await;
    clusters.delete("production-postgres", &Default::default()).await.unwrap();
    own.note::<DatabaseCluster>("delete");
    until(&clusters, &mut own, "production-postgres", |c| c.is_none()).await;
    await_collected_and_settled(debug).await;
    signal.send(()).await.unwrap();
    operator.await.unwrap().unwrap();

    let mut requests = own.remove_from(&sim.request_log()[setup_requests..]);
    let authorizations = sim.authorizations();
    assert!(!authorizations.is_empty(), "the children's blockOwnerDeletion was never checked");
    requests.extend(authorizations);
    requests
}

#[tokio::test(start_paused = true)]
async fn the_operator_uses_exactly_what_rbac_yaml_grants() {
    let mut log = operator_requests(true).await;
    log.extend(operator_requests(false).await);
    let (denied, unused) = audit(&rbac_grants(RBAC_YAML), &log);
    assert!(denied.is_empty(), "requests rbac.yaml does not grant: {denied:#?}");
    let unused: Vec<Grant> = unused
        .into_iter()
        .filter(|g| !REAL_POSTGRES_ONLY.contains(&(g.group.as_str(), g.resource.as_str(), g.verb.as_str())))
        .collect();
    assert!(unused.is_empty(), "grants the operator never used: {unused:#?}");
}

/// Grants used only when the operator can reach real PostgreSQL instances (role labels from the
/// observed role, pods deleted by a rolling update), which the timer kubelet of this scenario
/// does not run: `tests/e2e_topology.rs` checks in its request log that the operator makes
/// exactly these requests.
const REAL_POSTGRES_ONLY: &[(&str, &str, &str)] = &[("", "pods", "patch"), ("", "pods", "delete")];
