//! `run` as a library against the simulated API server, on the paused clock: shutdown with work in
//! flight (finish it, start nothing new, release the lease), the shutdown deadline, a second
//! signal, two replicas with leader election, and start-up errors.
#![cfg(feature = "sim")]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{eventually, http_get};
use dbcluster_operator::cli::run;
use dbcluster_operator::databasecluster::api::types::crd;
use dbcluster_operator::runtime::ObjectKey;
use dbcluster_operator::runtime::controller::{Action, Controller, ControllerConfig, ReconcileError};
use dbcluster_operator::runtime::informer::Informer;
use dbcluster_operator::runtime::manager::leader::LeaseConfig;
use dbcluster_operator::runtime::manager::{Manager, ManagerConfig, ManagerError, WorkloadContext};
use dbcluster_operator::runtime::observe::introspection::ControllerProbe;
use dbcluster_operator::runtime::workqueue::KeyPhase;
use dbcluster_operator::sim::SimServer;
use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::PostParams;
use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

async fn sim_with_crd() -> SimServer {
    let sim = SimServer::start().await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(sim.client());
    crds.create(&PostParams::default(), &crd()).await.unwrap();
    sim
}

async fn create_config_map(sim: &SimServer, name: &str) {
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
}

fn settings(identity: Option<&str>, shutdown_timeout: Duration) -> ManagerConfig {
    let local = "127.0.0.1:0".parse().unwrap();
    ManagerConfig {
        namespace: None,
        workers: 1,
        metrics_addr: local,
        debug_addr: local,
        health_addr: local,
        leader_election: identity.map(|id| LeaseConfig::new("default", "dbcluster-operator", id)),
        shutdown_timeout,
        metrics_secure: false,
        metrics_cert_dir: None,
    }
}

async fn start(sim: &SimServer, settings: ManagerConfig) -> Manager {
    run::start(sim.client(), &sim.base_url(), settings).await.unwrap()
}

/// What the test operators did: `("started" | "finished", instance, key)`, in order.
#[derive(Default)]
struct Journal {
    entries: Mutex<Vec<(&'static str, &'static str, String)>>,
    probe: Mutex<Option<ControllerProbe>>,
}

impl Journal {
    fn record(&self, what: &'static str, instance: &'static str, key: &ObjectKey) {
        self.entries.lock().push((what, instance, key.name().to_string()));
    }

    fn count(&self, what: &str, instance: &str) -> usize {
        self.entries.lock().iter().filter(|(w, i, _)| *w == what && *i == instance).count()
    }

    fn has(&self, what: &str, key: &str) -> bool {
        self.entries.lock().iter().any(|(w, _, k)| *w == what && k == key)
    }

    /// Waits (bounded by the harness's limit) until `done` holds for the journal.
    async fn until(&self, done: impl Fn(&Self) -> bool) {
        eventually("the journal to satisfy the condition", common::WAIT_LIMIT, || async {
            if done(self) { Ok(()) } else { Err(self.entries.lock().clone()) }
        })
        .await
    }
}

#[derive(Debug, thiserror::Error)]
#[error("never")]
struct Never;
impl ReconcileError for Never {}

type Lead = Box<dyn FnOnce(CancellationToken) -> BoxFuture<'static, Result<(), String>> + Send>;

/// A small operator over the ConfigMaps of `default` whose reconcile takes `work` of (simulated)
/// time, journaling each start and finish. Its informer starts on every replica (stage 1); its
/// workers run while leading (stage 2).
fn operator(
    instance: &'static str,
    work: Duration,
    journal: Arc<Journal>,
) -> impl FnOnce(WorkloadContext) -> BoxFuture<'static, Result<Lead, String>> {
    move |context| {
        Box::pin(async move {
            let informer =
                Arc::new(Informer::new(Api::<ConfigMap>::namespaced(context.client.clone(), "default")));
            informer.start();
            context.view.add_informer("configmaps", informer.clone());
            let lead: Lead = Box::new(move |stop: CancellationToken| {
                Box::pin(async move {
                    let mut config = ControllerConfig::named("configmap");
                    config.shutdown_timeout = context.shutdown_timeout;
                    config.metrics = Some(context.metrics.controller("configmap"));
                    let controller = Controller::new(&informer, config).workers(context.workers);
                    context.view.add_controller(controller.probe());
                    *journal.probe.lock() = Some(controller.probe());
                    let reconcile = move |key: ObjectKey, journal: Arc<Journal>| async move {
                        journal.record("started", instance, &key);
                        tokio::time::sleep(work).await;
                        journal.record("finished", instance, &key);
                        Ok::<_, Never>(Action::Done)
                    };
                    controller
                        .run(reconcile, journal, stop.cancelled_owned())
                        .await
                        .map_err(|e| e.to_string())
                }) as BoxFuture<'static, Result<(), String>>
            });
            Ok(lead)
        })
    }
}

async fn lease_holder(sim: &SimServer) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(sim.client(), "default");
    leases.get("dbcluster-operator").await.unwrap().spec.unwrap().holder_identity
}

#[tokio::test(start_paused = true)]
async fn shutdown_finishes_the_reconcile_in_flight_starts_nothing_new_and_releases_the_lease() {
    let sim = sim_with_crd().await;
    create_config_map(&sim, "a").await;
    let journal = Arc::new(Journal::default());
    let started = start(&sim, settings(Some("one"), Duration::from_secs(30))).await;
    let (signal, signals) = mpsc::channel(4);
    let task = tokio::spawn(started.run(operator("one", Duration::from_secs(5), journal.clone()), signals));
    journal.until(|j| j.has("started", "a")).await;

    // "b" is queued behind "a" (one worker) when the signal comes: it must not start.
    create_config_map(&sim, "b").await;
    let probe = journal.probe.lock().clone().unwrap();
    eventually("b queued behind a", Duration::from_secs(5), || async {
        let keys = probe.keys();
        let queued = keys.iter().any(|k| {
            k.key.name() == "b" && matches!(k.queue.as_ref().map(|q| &q.phase), Some(KeyPhase::Queued { .. }))
        });
        if queued { Ok(()) } else { Err(keys) }
    })
    .await;
    let signalled = Instant::now();
    signal.send(()).await.unwrap();
    task.await.unwrap().unwrap();

    assert!(journal.has("finished", "a"), "the reconcile in flight finished");
    assert!(!journal.has("started", "b"), "nothing new started after the signal");
    assert!(
        signalled.elapsed() <= Duration::from_secs(6),
        "no waiting beyond the work: {:?}",
        signalled.elapsed()
    );
    assert_eq!(lease_holder(&sim).await, None, "the lease was released");
}

#[tokio::test(start_paused = true)]
async fn reconciles_that_outlive_the_shutdown_deadline_are_cancelled() {
    let sim = sim_with_crd().await;
    create_config_map(&sim, "a").await;
    let journal = Arc::new(Journal::default());
    let started = start(&sim, settings(Some("one"), Duration::from_secs(3))).await;
    let (signal, signals) = mpsc::channel(4);
    let task = tokio::spawn(started.run(operator("one", Duration::from_secs(600), journal.clone()), signals));
    journal.until(|j| j.has("started", "a")).await;

    let signalled = Instant::now();
    signal.send(()).await.unwrap();
    task.await.unwrap().unwrap();
    let took = signalled.elapsed();
    assert!(took >= Duration::from_secs(3) && took < Duration::from_secs(4), "{took:?}");
    assert!(!journal.has("finished", "a"));
    assert_eq!(lease_holder(&sim).await, None, "the lease was released after the deadline");
}

#[tokio::test(start_paused = true)]
async fn a_second_signal_exits_at_once() {
    let sim = sim_with_crd().await;
    create_config_map(&sim, "a").await;
    let journal = Arc::new(Journal::default());
    let started = start(&sim, settings(None, Duration::from_secs(30))).await;
    let (signal, signals) = mpsc::channel(4);
    let task = tokio::spawn(started.run(operator("one", Duration::from_secs(600), journal.clone()), signals));
    journal.until(|j| j.has("started", "a")).await;

    let signalled = Instant::now();
    signal.send(()).await.unwrap();
    signal.send(()).await.unwrap();
    let result = task.await.unwrap();
    assert!(matches!(result, Err(ManagerError::Interrupted)), "{result:?}");
    assert_eq!(
        signalled.elapsed(),
        Duration::ZERO,
        "no waiting for the 600 s reconcile or the 30 s deadline"
    );
}

#[tokio::test(start_paused = true)]
async fn of_two_replicas_exactly_one_reconciles_and_the_other_takes_over_when_it_dies() {
    let sim = sim_with_crd().await;
    for name in ["a", "b"] {
        create_config_map(&sim, name).await;
    }
    let journal = Arc::new(Journal::default());
    let one = start(&sim, settings(Some("one"), Duration::from_secs(30))).await;
    let two = start(&sim, settings(Some("two"), Duration::from_secs(30))).await;
    let addrs = [("one", one.metrics_addr, one.health_addr), ("two", two.metrics_addr, two.health_addr)];
    let (_keep_one, signals_one) = mpsc::channel(1);
    let (_keep_two, signals_two) = mpsc::channel(1);
    let one = tokio::spawn(one.run(operator("one", Duration::from_millis(10), journal.clone()), signals_one));
    let two = tokio::spawn(two.run(operator("two", Duration::from_millis(10), journal.clone()), signals_two));

    journal.until(|j| j.count("finished", "one") + j.count("finished", "two") >= 2).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let (by_one, by_two) = (journal.count("started", "one"), journal.count("started", "two"));
    assert!((by_one == 2) ^ (by_two == 2) && by_one * by_two == 0, "one: {by_one}, two: {by_two}");

    let (leader, standby, standby_name) = if by_one == 2 { (one, two, "two") } else { (two, one, "one") };
    // The standby's cache is warm and it reports ready, though it reconciles nothing.
    let (_, standby_metrics, standby_health) = addrs.iter().find(|(name, ..)| *name == standby_name).unwrap();
    assert_eq!(http_get(*standby_health, "/readyz").await.2, "ok\n");
    let cache: serde_json::Value =
        serde_json::from_str(&http_get(*standby_metrics, "/debug/cache").await.2).unwrap();
    assert_eq!(cache["informers"][0]["synced"], true);
    assert_eq!(cache["informers"][0]["objects"], 2);
    let queue: serde_json::Value =
        serde_json::from_str(&http_get(*standby_metrics, "/debug/queue").await.2).unwrap();
    assert_eq!(queue["leading"], false);
    assert_eq!(queue["controllers"].as_array().unwrap().len(), 0);
    let (_, leader_metrics, _) = addrs.iter().find(|(name, ..)| *name != standby_name).unwrap();
    let status =
        |leading: u8| format!("leader_election_master_status{{name=\"dbcluster-operator\"}} {leading}");
    assert!(http_get(*standby_metrics, "/metrics").await.2.lines().any(|l| l == status(0)));
    assert!(http_get(*leader_metrics, "/metrics").await.2.lines().any(|l| l == status(1)));
    leader.abort();
    let died = Instant::now();
    eventually(&format!("{standby_name} to hold the lease"), Duration::from_secs(30), || async {
        match lease_holder(&sim).await {
            Some(holder) if holder == standby_name => Ok(()),
            holder => Err(holder),
        }
    })
    .await;
    let took = died.elapsed();
    assert!(took <= Duration::from_secs(15) + Duration::from_millis(4800), "took over after {took:?}");
    journal.until(|j| j.count("finished", standby_name) == 2).await;
    standby.abort();
}

#[tokio::test]
async fn start_names_the_missing_crd_and_what_to_do() {
    let sim = SimServer::start().await.unwrap();
    let error = run::start(sim.client(), &sim.base_url(), settings(None, Duration::from_secs(1)))
        .await
        .err()
        .unwrap();
    let message = error.to_string();
    assert!(message.contains("`kubectl apply -f manifests/crd.yaml`"), "{message}");
    assert!(!message.contains('\n'));
}

#[tokio::test]
async fn start_names_an_address_already_in_use() {
    let sim = sim_with_crd().await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut settings = settings(None, Duration::from_secs(1));
    settings.health_addr = taken.local_addr().unwrap();
    let error = run::start(sim.client(), &sim.base_url(), settings).await.err().unwrap();
    assert!(matches!(error, ManagerError::Listen { flag: "health-addr", .. }), "{error}");
    assert!(error.to_string().starts_with(&format!("cannot listen on {}", taken.local_addr().unwrap())));
}
