//! The simulated API server through the real `kubectl` binary (with a temporary kubeconfig):
//! apply, get as a table with the CRD's printer columns, short names, `get -w`, patch, get -o
//! json, delete, and client-side apply of a built-in kind.
#![cfg(feature = "sim")]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use dbcluster_operator::sim::SimServer;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: databaseclusters.databases.example.dev
spec:
  group: databases.example.dev
  scope: Namespaced
  names: {kind: DatabaseCluster, plural: databaseclusters, singular: databasecluster, shortNames: [dbc]}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Phase, type: string, jsonPath: .status.phase}
    - {name: Ready, type: integer, jsonPath: .status.readyReplicas}
    - {name: Version, type: string, jsonPath: .status.currentVersion}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [replicas, version]
            properties:
              replicas: {type: integer, minimum: 1, maximum: 10}
              version: {type: string}
              storageSize: {type: string, default: 10Gi}
          status:
            type: object
            x-kubernetes-preserve-unknown-fields: true
"#;

const SAMPLE: &str = r#"apiVersion: databases.example.dev/v1alpha1
kind: DatabaseCluster
metadata:
  name: production-postgres
  namespace: default
spec:
  replicas: 3
  version: "15.4"
  storageSize: "1Gi"
"#;

/// A server, a temporary directory holding its kubeconfig and the manifests.
struct Fixture {
    sim: SimServer,
    dir: tempfile::TempDir,
}

impl Fixture {
    async fn new() -> Self {
        let sim = SimServer::start().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config"), sim.kubeconfig_yaml()).unwrap();
        std::fs::write(dir.path().join("crd.yaml"), CRD).unwrap();
        std::fs::write(dir.path().join("sample.yaml"), SAMPLE).unwrap();
        Self { sim, dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut c = tokio::process::Command::new("kubectl");
        c.args(args).env("KUBECONFIG", self.path("config")).env("HOME", self.dir.path());
        c
    }

    /// Runs kubectl; panics with its output unless it succeeds; returns stdout.
    async fn ok(&self, args: &[&str]) -> String {
        let out = self.command(args).output().await.unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "kubectl {args:?} failed:\n{stdout}\n{stderr}");
        stdout.into_owned()
    }

    /// Runs kubectl expecting failure; returns stderr.
    async fn fails(&self, args: &[&str]) -> String {
        let out = self.command(args).output().await.unwrap();
        assert!(!out.status.success(), "kubectl {args:?} should fail");
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    async fn install(&self) {
        self.ok(&["apply", "-f", path_str(&self.path("crd.yaml"))]).await;
        self.ok(&["apply", "-f", path_str(&self.path("sample.yaml"))]).await;
    }

    fn clusters(&self) -> Api<DynamicObject> {
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("databases.example.dev", "v1alpha1", "DatabaseCluster"),
            "databaseclusters",
        );
        Api::default_namespaced_with(self.sim.client(), &ar)
    }
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[tokio::test]
async fn kubectl_applies_gets_tables_patches_and_deletes() {
    let f = Fixture::new().await;
    f.install().await;
    f.clusters()
        .patch_status(
            "production-postgres",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"phase": "Running", "readyReplicas": 3, "currentVersion": "15.4"}}),
            ),
        )
        .await
        .unwrap();

    let table = f.ok(&["get", "databaseclusters"]).await;
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "PHASE", "READY", "VERSION", "AGE"]);
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(&row[..4], ["production-postgres", "Running", "3", "15.4"]);
    assert!(row[4].ends_with('s'), "age {:?}", row[4]);

    assert!(f.ok(&["get", "dbc"]).await.contains("production-postgres"), "short name");

    f.ok(&["patch", "dbc", "production-postgres", "--type", "merge", "-p", r#"{"spec":{"replicas":4}}"#])
        .await;
    let json: serde_json::Value =
        serde_json::from_str(&f.ok(&["get", "databasecluster", "production-postgres", "-o", "json"]).await)
            .unwrap();
    assert_eq!(json["spec"]["replicas"], 4);
    assert_eq!(json["spec"]["storageSize"], "1Gi");
    assert_eq!(json["metadata"]["generation"], 2);

    // Re-applying the sample restores the replicas (client-side apply computes a merge patch).
    f.ok(&["apply", "-f", path_str(&f.path("sample.yaml"))]).await;
    let json: serde_json::Value =
        serde_json::from_str(&f.ok(&["get", "dbc", "production-postgres", "-o", "json"]).await).unwrap();
    assert_eq!(json["spec"]["replicas"], 3);

    // The schema applies to kubectl's writes: a refused patch shows the apiserver's message.
    let err = f
        .fails(&[
            "patch",
            "dbc",
            "production-postgres",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"replicas":0}}"#,
        ])
        .await;
    assert!(err.contains("spec.replicas"), "{err}");

    f.ok(&["delete", "dbc", "production-postgres"]).await;
    let err = f.fails(&["get", "dbc", "production-postgres"]).await;
    assert!(err.contains("NotFound") || err.contains("not found"), "{err}");
}

#[tokio::test]
async fn kubectl_apply_is_strict_about_unknown_fields() {
    let f = Fixture::new().await;
    f.ok(&["apply", "-f", path_str(&f.path("crd.yaml"))]).await;
    std::fs::write(f.path("typo.yaml"), SAMPLE.replace("replicas: 3", "replcas: 3")).unwrap();
    let err = f.fails(&["apply", "-f", path_str(&f.path("typo.yaml"))]).await;
    assert!(err.contains("unknown field \"spec.replcas\""), "{err}");
    // Without strict validation the field is pruned and the required one is missing.
    let err = f.fails(&["apply", "--validate=false", "-f", path_str(&f.path("typo.yaml"))]).await;
    assert!(err.contains("spec.replicas: Required value"), "{err}");
    // Built-in kinds too: decoded as the apiserver decodes them.
    std::fs::write(
        f.path("cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndta:\n  a: b\n",
    )
    .unwrap();
    let err = f.fails(&["apply", "-f", path_str(&f.path("cm.yaml"))]).await;
    assert!(err.contains("unknown field \"dta\""), "{err}");
}

#[tokio::test]
async fn kubectl_get_watch_sees_a_change() {
    let f = Fixture::new().await;
    f.install().await;
    let mut child =
        f.command(&["get", "dbc", "-w"]).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let header = lines.next_line().await.unwrap().unwrap();
    assert!(header.starts_with("NAME"), "{header}");
    let first = lines.next_line().await.unwrap().unwrap();
    assert!(first.starts_with("production-postgres"), "{first}");
    f.clusters()
        .patch_status(
            "production-postgres",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Creating"}})),
        )
        .await
        .unwrap();
    common::within("kubectl get -w to print the new phase", async {
        loop {
            let line = lines.next_line().await.unwrap().expect("kubectl get -w ended early");
            if line.contains("Creating") {
                break;
            }
        }
    })
    .await;
    child.kill().await.unwrap();
}

#[tokio::test]
async fn kubectl_applies_a_built_in_kind_twice() {
    let f = Fixture::new().await;
    let cm = |value: &str| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  mode: {value}\n")
    };
    std::fs::write(f.path("cm.yaml"), cm("a")).unwrap();
    f.ok(&["apply", "-f", path_str(&f.path("cm.yaml"))]).await;
    std::fs::write(f.path("cm.yaml"), cm("b")).unwrap();
    assert!(f.ok(&["apply", "-f", path_str(&f.path("cm.yaml"))]).await.contains("configured"));
    assert_eq!(f.ok(&["get", "configmap", "settings", "-o", "jsonpath={.data.mode}"]).await, "b");
    assert!(f.ok(&["get", "configmaps"]).await.contains("settings"));
}

#[tokio::test]
async fn kubectl_rolls_out_a_statefulset_and_lists_ready_pods() {
    let f = Fixture::new().await;
    let sts = r#"apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web}
spec:
  replicas: 2
  serviceName: web
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: nginx, image: "nginx:1.27"}]
"#;
    std::fs::write(f.path("sts.yaml"), sts).unwrap();
    f.ok(&["apply", "-f", path_str(&f.path("sts.yaml"))]).await;
    // `rollout status` watches until the simulated controller reports every replica ready.
    assert!(f.ok(&["rollout", "status", "statefulset/web"]).await.contains("roll out complete"));
    let pods = f.ok(&["get", "pods"]).await;
    let header: Vec<&str> = pods.lines().next().unwrap().split_whitespace().collect();
    // The columns of 1.28's pod printer (pkg/printers/internalversion/printers.go), the node
    // and IP with -o wide only.
    assert_eq!(header, ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]);
    for line in pods.lines().skip(1) {
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(&cells[1..4], ["1/1", "Running", "0"], "{line}");
    }
    let wide = f.ok(&["get", "pods", "-o", "wide"]).await;
    let header = wide.lines().next().unwrap();
    for column in ["IP", "NODE", "NOMINATED NODE", "READINESS GATES"] {
        assert!(header.contains(column), "{column} in {header}");
    }
    // Each running pod is bound to the node (`spec.nodeName`), as the scheduler's binding leaves it.
    for line in wide.lines().skip(1) {
        assert!(line.split_whitespace().any(|cell| cell == "sim-node"), "{line}");
    }
    let service = "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec:\n  selector: {app: web}\n  ports: [{port: 5432, targetPort: 5432}]\n";
    std::fs::write(f.path("svc.yaml"), service).unwrap();
    f.ok(&["apply", "-f", path_str(&f.path("svc.yaml"))]).await;
    let services = f.ok(&["get", "svc", "web", "-o", "wide"]).await;
    let header: Vec<&str> = services.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE", "SELECTOR"]);
    let row = services.lines().nth(1).unwrap();
    assert!(row.contains("5432/TCP") && row.contains("<none>") && row.contains("app=web"), "{row}");
    let sets = f.ok(&["get", "sts"]).await;
    assert!(sets.lines().nth(1).unwrap().split_whitespace().any(|c| c == "2/2"), "{sets}");

    // `kubectl scale` goes through the scale subresource.
    f.ok(&["scale", "statefulset/web", "--replicas=3"]).await;
    f.ok(&["rollout", "status", "statefulset/web"]).await;
    assert_eq!(f.ok(&["get", "sts", "web", "-o", "jsonpath={.status.readyReplicas}"]).await, "3");
}

/// An `events.k8s.io/v1` Event about the sample cluster, as the operator writes one.
async fn event_about_the_sample(f: &Fixture) {
    let cluster = f.clusters().get("production-postgres").await.unwrap();
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::default_namespaced(f.sim.client());
    let event = json!({
        "metadata": {"name": "production-postgres.1a2b3c"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "type": "Normal", "reason": "CreatedService", "action": "Create",
        "note": "Created Service production-postgres",
        "reportingController": "databases.example.dev/op", "reportingInstance": "op-0",
        "regarding": {"apiVersion": "databases.example.dev/v1alpha1", "kind": "DatabaseCluster",
                      "name": "production-postgres", "namespace": "default", "uid": cluster.metadata.uid},
    });
    events.create(&Default::default(), &serde_json::from_value(event).unwrap()).await.unwrap();
}

#[tokio::test]
async fn events_written_as_events_k8s_io_show_in_kubectl_get_events_and_describe() {
    let f = Fixture::new().await;
    f.install().await;
    event_about_the_sample(&f).await;
    let listed = f.ok(&["get", "events"]).await;
    assert!(listed.contains("CreatedService"), "{listed}");
    let described = f.ok(&["describe", "dbc", "production-postgres"]).await;
    assert!(
        described.contains("CreatedService") && described.contains("Created Service production-postgres"),
        "{described}"
    );
}

/// The operator's Events carry both generations' times, so `kubectl get events` sorts them either
/// way a user asks.
#[tokio::test]
async fn the_operators_events_sort_by_last_timestamp_and_by_event_time() {
    use dbcluster_operator::databasecluster::controller::events::{EventNote, build_event};
    let f = Fixture::new().await;
    f.install().await;
    let cluster: dbcluster_operator::databasecluster::api::types::DatabaseCluster = serde_json::from_value(
        serde_json::to_value(f.clusters().get("production-postgres").await.unwrap()).unwrap(),
    )
    .unwrap();
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::default_namespaced(f.sim.client());
    let now = jiff::Timestamp::now();
    for (i, reason) in ["CreatedService", "CreatedSecret"].into_iter().enumerate() {
        let note = EventNote::created(&reason["Created".len()..], "production-postgres");
        let at = now + jiff::SignedDuration::from_secs(i64::try_from(i).unwrap());
        events.create(&Default::default(), &build_event(&cluster, &note, "op-0", at)).await.unwrap();
    }
    for field in [".lastTimestamp", ".eventTime", ".firstTimestamp"] {
        let listed = f.ok(&["get", "events", "--sort-by", field]).await;
        let (service, secret) = (listed.find("CreatedService"), listed.find("CreatedSecret"));
        assert!(service.is_some() && service < secret, "sorted by {field}: {listed}");
    }
}

#[tokio::test]
async fn kubectl_creates_namespaces_config_maps_and_secrets() {
    // kubectl sends JSON for these requests (`kubectl create` encodes built-in kinds as JSON
    // unless told otherwise); the simulator answers JSON, which kubectl reads.
    let f = Fixture::new().await;
    f.ok(&["create", "namespace", "foo"]).await;
    f.ok(&["create", "configmap", "settings", "-n", "foo", "--from-literal=a=1"]).await;
    f.ok(&["create", "secret", "generic", "creds", "-n", "foo", "--from-literal=password=s3cret"]).await;
    let got = f.ok(&["get", "configmap", "settings", "-n", "foo", "-o", "jsonpath={.data.a}"]).await;
    assert_eq!(got, "1");
    let got = f.ok(&["get", "secret", "creds", "-n", "foo", "-o", "jsonpath={.data.password}"]).await;
    assert_eq!(got, "czNjcmV0");
    let refused = f.fails(&["create", "namespace", "Foo.Bar"]).await;
    assert!(refused.contains("RFC 1123 label"), "{refused}");
}
