//! A chaos soak on the paused clock (simulated time; the timer kubelet): 200 DatabaseClusters, and
//! for [`ROUNDS`] simulated seconds a seeded driver changes specs at random (replicas, version
//! within the major, postgresConfig, storage growth) and deletes a few clusters, while the
//! simulator drops every watch, answers some re-watches 410, fails bursts of requests with 500
//! and 429 (`Retry-After: 1`) and 409 (conflicts), and adds 300 ms to every request for a round.
//! The operator runs as leader-elected replicas: the first is killed and replaced twice, and then
//! of two replicas the leader is killed once, so the standby takes over. Then, with faults off:
//!
//! - every cluster converges to its last spec within [`CONVERGENCE_LIMIT`] (status, StatefulSet
//!   replicas and image, and the configuration ConfigMap agree with it; no resize under way);
//! - every live cluster has the children it had before the chaos, each once, owned by it, and a
//!   deleted cluster has none left;
//! - no Secret's data (passwords) changed;
//! - the operators' writes stay within [`WRITES_PER_CHANGE`] per change made, and none at rest
//!   (the leader's Lease renewals aside);
//! - the operators' figures agree with the simulator's: the informers' relists with the lists it
//!   served (LISTs and streaming lists), the 410s they saw with the 410s it sent, and the failed
//!   passes with the status patches it failed (each fails its pass), within what a killed replica
//!   may lose in flight.
//!
//! The seed is printed first and in every failure message; `CHAOS_SEED=N` replays a run, as
//! deterministically as the single-threaded paused runtime makes it.
#![cfg(feature = "sim")]

use crate::common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::*;
use dbcluster_operator::databasecluster::api::types::{DatabaseCluster, DatabaseClusterSpec};
use dbcluster_operator::databasecluster::controller::operator::{Operator, OperatorHandles, OperatorOptions};
use dbcluster_operator::runtime::manager::leader::{LeaderElector, LeaseConfig};
use dbcluster_operator::runtime::observe::metrics::Metrics;
use dbcluster_operator::sim::RequestRecord;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const CLUSTERS: usize = 200;
/// Simulated seconds of chaos.
const ROUNDS: usize = 30;
const ROUND: Duration = Duration::from_secs(1);
/// The operators' writes per change made (a spec change or a deletion), retries under the faults
/// included: a change costs a StatefulSet update, a ConfigMap update, a few status patches, a
/// pod deletion or two of a roll and an Event or two when it goes well.
const WRITES_PER_CHANGE: usize = 30;
/// How long (simulated) every cluster may take to converge once the faults are off.
const CONVERGENCE_LIMIT: Duration = Duration::from_secs(600);
/// Replicas killed: twice the only one, once the leader of two.
const KILLS: u64 = 3;
/// Informers per replica, and workers (passes at once) per replica.
const INFORMERS: u64 = 11;
const WORKERS: u64 = 4;
/// How long (simulated) the operators are watched at rest.
const REST: Duration = Duration::from_secs(60);

/// LIST requests the test itself made (the operators' are compared with the log's).
static OWN_LISTS: AtomicU64 = AtomicU64::new(0);

/// Lists every `K` in `default`, counted in [`OWN_LISTS`].
async fn list<K>(cluster: &TestCluster) -> Vec<K>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    OWN_LISTS.fetch_add(1, Ordering::Relaxed);
    cluster.api::<K>().list(&ListParams::default()).await.expect("list").items
}

fn name(i: usize) -> String {
    format!("chaos-{i}")
}

/// The spec the driver last set, kept as the parts it varies.
#[derive(Clone, Copy, Debug)]
struct Wanted {
    replicas: i32,
    minor: u32,
    storage_gi: u32,
    work_mem_mb: Option<u32>,
}

impl Wanted {
    fn version(self) -> String {
        format!("15.{}", self.minor)
    }

    fn spec(self) -> DatabaseClusterSpec {
        DatabaseClusterSpec {
            replicas: self.replicas,
            version: self.version(),
            storage_size: format!("{}Gi", self.storage_gi),
            postgres_config: self
                .work_mem_mb
                .map(|mb| BTreeMap::from([("work_mem".to_owned(), format!("{mb}MB"))])),
            ..DatabaseClusterSpec::default()
        }
    }

    fn changed(self, rng: &mut StdRng) -> Wanted {
        let mut next = self;
        match rng.random_range(0..4) {
            0 => next.replicas = rng.random_range(1..=4),
            1 => next.minor = rng.random_range(1..=9),
            2 => next.work_mem_mb = Some(rng.random_range(1..=64)),
            _ => next.storage_gi += rng.random_range(1..=2),
        }
        next
    }
}

fn converged(c: &DatabaseCluster, wanted: Wanted) -> bool {
    let Some(status) = &c.status else { return false };
    // A storage growth is done when no resize is under way (the simulator expands a claim a
    // while after its request grew, as a real resizer does).
    let resizing = condition(c, "Resizing").is_some_and(|(status, _)| status == "True");
    phase(c) == Some("Running")
        && status.observed_generation == c.metadata.generation
        && status.ready_replicas == wanted.replicas
        && status.current_version.as_deref() == Some(wanted.version().as_str())
        && !resizing
}

/// One operator replica running `run`'s workload under leader election.
struct Replica {
    task: JoinHandle<()>,
    handles: OperatorHandles,
    leading: tokio::sync::watch::Receiver<bool>,
}

impl Replica {
    fn start(cluster: &TestCluster, identity: &str) -> Replica {
        let client = cluster.sim.client();
        let options = OperatorOptions {
            instance: identity.into(),
            metrics: Arc::new(Metrics::new()),
            starts_on_leadership: true,
            ..OperatorOptions::default()
        };
        let operator = Operator::new(client.clone(), options);
        let handles = operator.handles();
        operator.start_informers();
        let lease = LeaseConfig::new("default", "dbcluster-operator", identity);
        let elector = LeaderElector::new(client, lease).expect("the default lease timing is valid");
        let leading = elector.leading();
        let task = tokio::spawn(async move {
            let _ =
                elector.run(CancellationToken::new(), move |stop| operator.run(stop.cancelled_owned())).await;
        });
        Replica { task, handles, leading }
    }

    async fn leads(&mut self) {
        within("a replica to lead", self.leading.wait_for(|leading| *leading)).await.expect("elector alive");
    }

    /// A counter summed over its label sets whose line contains `filter`.
    fn metric(&self, name: &str, filter: &str) -> u64 {
        let prefix = format!("{name}{{");
        self.handles
            .metrics
            .encode()
            .lines()
            .filter(|line| line.starts_with(&prefix) && line.contains(filter))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }

    /// Kills the replica at once: its passes, its lease renewals and its informers.
    async fn kill(mut self) -> Figures {
        self.task.abort();
        // Its passes and its elector are dropped once the task is; its informers with `self`.
        let _ = (&mut self.task).await;
        Figures::of(&self)
    }
}

/// What a replica's metrics said when it ended.
#[derive(Debug, Default, Clone, Copy)]
struct Figures {
    relists: u64,
    gone: u64,
    errors: u64,
}

impl Figures {
    fn of(replica: &Replica) -> Figures {
        let h = &replica.handles;
        let stats = [
            h.clusters.stats(),
            h.statefulsets.stats(),
            h.services.stats(),
            h.secrets.stats(),
            h.app_secrets.stats(),
            h.configmaps.stats(),
            h.pdbs.stats(),
            h.pods.stats(),
            h.jobs.stats(),
            h.cronjobs.stats(),
            h.volumes.stats(),
        ];
        Figures {
            relists: stats.iter().map(|s| s.relists).sum(),
            gone: stats.iter().map(|s| s.gone).sum(),
            errors: replica
                .metric("controller_runtime_reconcile_errors_total", "controller=\"databasecluster\""),
        }
    }

    fn add(self, other: Figures) -> Figures {
        Figures {
            relists: self.relists + other.relists,
            gone: self.gone + other.gone,
            errors: self.errors + other.errors,
        }
    }
}

/// One random fault for the coming round.
fn inject(cluster: &TestCluster, rng: &mut StdRng) {
    let faults = cluster.sim.faults();
    faults.set_latency(Duration::ZERO);
    match rng.random_range(0..7) {
        0 => faults.close_watches(),
        1 => {
            let resource = ["databaseclusters", "statefulsets", "secrets", "pods"][rng.random_range(0..4)];
            faults.gone_next_watch(resource);
            faults.close_watches();
        }
        2 => faults.fail_next("databaseclusters/status", rng.random_range(1..=5), 500),
        3 => faults.fail_next("statefulsets", rng.random_range(1..=5), 429),
        4 => faults.set_latency(Duration::from_millis(300)),
        5 => {
            faults.fail_next(["configmaps", "services"][rng.random_range(0..2)], rng.random_range(1..=3), 409)
        }
        _ => {}
    }
}

/// The operators' writes so far: not the driver's own (it writes DatabaseClusters themselves
/// only), and not the leader election's Lease renewals (every 2 s, at rest too).
fn operator_writes(cluster: &TestCluster) -> usize {
    let driver = |r: &RequestRecord| r.resource == "databaseclusters" && r.subresource.is_none();
    cluster.writes().iter().filter(|r| !driver(r) && r.resource != "leases").count()
}

/// The children of `kind` per owning cluster uid, each as its name with the cluster's name cut.
async fn children<K>(cluster: &TestCluster, uids: &HashMap<String, String>) -> HashMap<String, Vec<String>>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let by_uid: HashMap<&str, &str> = uids.iter().map(|(n, u)| (u.as_str(), n.as_str())).collect();
    let mut found: HashMap<String, Vec<String>> = HashMap::new();
    for object in list::<K>(cluster).await {
        let meta = object.meta();
        for owner in meta.owner_references.iter().flatten().filter(|o| o.kind == "DatabaseCluster") {
            let name = meta.name.clone().unwrap_or_default();
            let cut = by_uid.get(owner.uid.as_str()).map_or(name.clone(), |c| name.replacen(c, "{c}", 1));
            found.entry(owner.uid.clone()).or_default().push(cut);
        }
    }
    for names in found.values_mut() {
        names.sort();
    }
    found
}

/// Children per kind, per owning cluster uid.
type Children = BTreeMap<&'static str, HashMap<String, Vec<String>>>;

/// Every child kind's children per owning cluster uid.
async fn all_children(cluster: &TestCluster, uids: &HashMap<String, String>) -> Children {
    BTreeMap::from([
        ("StatefulSet", children::<StatefulSet>(cluster, uids).await),
        ("Service", children::<Service>(cluster, uids).await),
        ("Secret", children::<Secret>(cluster, uids).await),
        ("ConfigMap", children::<ConfigMap>(cluster, uids).await),
        ("PodDisruptionBudget", children::<PodDisruptionBudget>(cluster, uids).await),
    ])
}

/// The data of every Secret the clusters own, by name.
async fn secret_data(cluster: &TestCluster) -> BTreeMap<String, BTreeMap<String, Vec<u8>>> {
    let secrets = list::<Secret>(cluster).await;
    secrets
        .into_iter()
        .filter(|s| s.metadata.owner_references.iter().flatten().any(|o| o.kind == "DatabaseCluster"))
        .map(|s| {
            let data = s.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect();
            (s.metadata.name.unwrap_or_default(), data)
        })
        .collect()
}

/// Lists the clusters, counted in [`OWN_LISTS`].
async fn list_clusters(api: &Api<DatabaseCluster>) -> Vec<DatabaseCluster> {
    OWN_LISTS.fetch_add(1, Ordering::Relaxed);
    api.list(&ListParams::default()).await.expect("list clusters").items
}

async fn await_converged(api: &Api<DatabaseCluster>, wanted: &HashMap<String, Wanted>, what: &str) {
    eventually_every(what, CONVERGENCE_LIMIT, Duration::from_secs(5), || async {
        let list = list_clusters(api).await;
        let behind: Vec<String> = list
            .iter()
            .filter(|c| {
                let name = c.metadata.name.as_deref().unwrap_or_default();
                wanted.get(name).is_none_or(|w| !converged(c, *w))
            })
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        if list.len() == wanted.len() && behind.is_empty() {
            Ok(())
        } else {
            Err(format!("{} of {} clusters listed; behind: {behind:?}", list.len(), wanted.len()))
        }
    })
    .await;
}

/// Creates the clusters, each with a random number of instances; what each should become.
async fn create_clusters(api: &Api<DatabaseCluster>, rng: &mut StdRng) -> HashMap<String, Wanted> {
    let mut wanted = HashMap::new();
    for i in 0..CLUSTERS {
        let w = Wanted { replicas: rng.random_range(1..=3), minor: 4, storage_gi: 1, work_mem_mb: None };
        let c = DatabaseCluster {
            metadata: ObjectMeta { name: Some(name(i)), ..ObjectMeta::default() },
            spec: w.spec(),
            status: None,
        };
        api.create(&PostParams::default(), &c).await.expect("create a cluster");
        wanted.insert(name(i), w);
    }
    wanted
}

/// One round's spec changes and, rarely, a deletion, on random clusters; the changes made.
async fn drive_changes(
    api: &Api<DatabaseCluster>,
    rng: &mut StdRng,
    wanted: &mut HashMap<String, Wanted>,
    deleted: &mut BTreeSet<String>,
) -> usize {
    let mut changes = 0;
    for _ in 0..rng.random_range(1..=6) {
        let target = name(rng.random_range(0..CLUSTERS));
        if deleted.contains(&target) {
            continue;
        }
        if rng.random_ratio(1, 40) {
            // The driver's own requests meet the faults too; a refused change is not made.
            if api.delete(&target, &DeleteParams::default()).await.is_ok() {
                wanted.remove(&target);
                deleted.insert(target);
            }
            continue;
        }
        let next = wanted[&target].changed(rng);
        let patch = Patch::Merge(json!({"spec": next.spec()}));
        if api.patch(&target, &PatchParams::default(), &patch).await.is_ok() {
            wanted.insert(target, next);
            changes += 1;
        }
    }
    changes
}

/// Every surviving cluster's children: the StatefulSet and configuration its last spec asks
/// for, the same Secrets, Services and StatefulSet as before, and no child nobody knew.
async fn assert_specs_applied(
    cluster: &TestCluster,
    seed: u64,
    wanted: &HashMap<String, Wanted>,
    uids: &HashMap<String, String>,
    (children_before, children_after, known): (&Children, &Children, &BTreeSet<(&str, &str)>),
) {
    let statefulsets = list::<StatefulSet>(cluster).await;
    let config_maps = list::<ConfigMap>(cluster).await;
    for (name, w) in wanted {
        let sts = statefulsets.iter().find(|s| s.metadata.name.as_deref() == Some(name));
        let sts_spec = sts
            .and_then(|s| s.spec.as_ref())
            .unwrap_or_else(|| panic!("seed {seed}: {name} has a StatefulSet"));
        assert_eq!(sts_spec.replicas, Some(w.replicas), "seed {seed}: {name}'s StatefulSet replicas");
        let image =
            sts_spec.template.spec.as_ref().and_then(|p| p.containers.first()).and_then(|c| c.image.clone());
        assert_eq!(image, Some(format!("postgres:{}", w.version())), "seed {seed}: {name}'s image");
        if let Some(mb) = w.work_mem_mb {
            let conf = config_maps
                .iter()
                .filter(|c| c.metadata.name.as_deref().is_some_and(|n| n.starts_with(name.as_str())))
                .filter_map(|c| c.data.as_ref()?.get("postgresql.conf").cloned())
                .collect::<Vec<_>>()
                .join("\n");
            assert!(
                conf.contains(&format!("work_mem = '{mb}MB'")),
                "seed {seed}: {name}'s work_mem in {conf}"
            );
        }
        for (kind, per_uid) in children_after {
            let before = children_before[kind].get(&uids[name]);
            let after = per_uid.get(&uids[name]);
            // These do not depend on the spec the driver varies: exactly the same ones.
            if matches!(*kind, "StatefulSet" | "Service" | "Secret") {
                assert_eq!(after, before, "seed {seed}: {name}'s {kind} children, the same and each once");
            }
            for child in after.into_iter().flatten() {
                assert!(
                    known.contains(&(*kind, child.as_str())),
                    "seed {seed}: {name} has an unknown {kind} {child}"
                );
            }
        }
    }
}

/// The metrics against the simulator's log. A replica killed may have lost, per informer, a
/// request in flight (a LIST counted but never received, a streaming list or a 410 sent but
/// never read), and, per worker, a failed pass not yet counted.
fn assert_figures_match_log(cluster: &TestCluster, seed: u64, figures: Figures, started: std::time::Instant) {
    let log = cluster.sim.request_log();
    let lists = log.iter().filter(|r| r.verb == "list").count() as u64 - OWN_LISTS.load(Ordering::Relaxed);
    let served = lists + cluster.sim.streaming_lists_sent();
    let gone_sent = cluster.sim.watch_gone_sent();
    let status_failures = cluster.sim.faults().injected_failures("databaseclusters/status");
    let seen = format!(
        "seed {seed}: {figures:?}; {lists} LISTs and {} streaming lists served, {gone_sent} 410s sent, {status_failures} status patches failed",
        served - lists
    );
    println!("{seen}; {:.1?} of real time", started.elapsed());
    assert!(figures.relists.abs_diff(served) <= KILLS * INFORMERS, "relists against lists served: {seen}");
    assert!(figures.gone <= gone_sent && gone_sent <= figures.gone + KILLS * INFORMERS, "410s: {seen}");
    // Only the operators write status: every injected failure of a status patch failed its pass.
    assert!(status_failures > 0, "no status patch failed, so the next check shows nothing: {seen}");
    assert!(figures.errors + KILLS * WORKERS >= status_failures, "failed passes: {seen}");
}

#[tokio::test(start_paused = true)]
async fn the_operator_converges_under_faults_restarts_and_a_leader_kill() {
    let seed: u64 =
        std::env::var("CHAOS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    println!("chaos seed {seed} (replay with CHAOS_SEED={seed})");
    let started = std::time::Instant::now();
    let mut rng = StdRng::seed_from_u64(seed);
    let cluster = TestCluster::start().await;
    let api = cluster.clusters();
    let mut ended = Figures::default();
    let mut leader = Replica::start(&cluster, "replica-0");
    leader.leads().await;

    let mut wanted = create_clusters(&api, &mut rng).await;
    await_converged(&api, &wanted, &format!("seed {seed}: every cluster Running")).await;
    println!("seed {seed}: {CLUSTERS} clusters Running after {:.1?} of real time", started.elapsed());
    let uids: HashMap<String, String> = list_clusters(&api)
        .await
        .into_iter()
        .map(|c| (c.metadata.name.unwrap_or_default(), c.metadata.uid.unwrap_or_default()))
        .collect();
    let children_before = all_children(&cluster, &uids).await;
    // Every child name any cluster had, with the cluster's name cut.
    let known: BTreeSet<(&str, &str)> = children_before
        .iter()
        .flat_map(|(kind, per_uid)| per_uid.values().flatten().map(move |n| (*kind, n.as_str())))
        .collect();
    let secrets_before = secret_data(&cluster).await;
    let writes_before = operator_writes(&cluster);

    let mut changes = 0usize;
    let mut deleted: BTreeSet<String> = BTreeSet::new();
    let mut standby: Option<Replica> = None;
    for round in 0..ROUNDS {
        inject(&cluster, &mut rng);
        if round == 0 {
            // Whatever the seed, some status patches fail, so the failed-passes check below is
            // never vacuous.
            cluster.sim.faults().fail_next("databaseclusters/status", 2, 500);
        }
        changes += drive_changes(&api, &mut rng, &mut wanted, &mut deleted).await;
        match round {
            // Killed and replaced, twice.
            r if r == ROUNDS / 4 || r == ROUNDS / 2 => {
                ended = ended.add(leader.kill().await);
                leader = Replica::start(&cluster, &format!("replica-{r}"));
            }
            // A standby joins, and the leader is killed: the standby takes over.
            r if r == 3 * ROUNDS / 4 - 5 => standby = Some(Replica::start(&cluster, "standby")),
            r if r == 3 * ROUNDS / 4 => {
                ended = ended.add(leader.kill().await);
                leader = standby.take().expect("the standby was started");
            }
            _ => {}
        }
        tokio::time::sleep(ROUND).await;
    }
    cluster.sim.faults().clear();
    leader.leads().await;

    await_converged(&api, &wanted, &format!("seed {seed}: every cluster converged to its last spec")).await;
    println!("seed {seed}: converged after {:.1?} of real time", started.elapsed());
    let deleted_uids: BTreeSet<&str> = deleted.iter().map(|n| uids[n].as_str()).collect();
    let what = format!("seed {seed}: no child of a deleted cluster");
    let children_after = eventually_every(&what, CONVERGENCE_LIMIT, Duration::from_secs(5), || async {
        let now = all_children(&cluster, &uids).await;
        let left: Vec<(&str, &String)> = now
            .iter()
            .flat_map(|(kind, per_uid)| per_uid.keys().map(move |uid| (*kind, uid)))
            .filter(|(_, uid)| deleted_uids.contains(uid.as_str()))
            .collect();
        if left.is_empty() { Ok(now) } else { Err(format!("children of deleted clusters: {left:?}")) }
    })
    .await;
    let writes_during = operator_writes(&cluster) - writes_before;

    let children = (&children_before, &children_after, &known);
    assert_specs_applied(&cluster, seed, &wanted, &uids, children).await;
    let secrets_after = secret_data(&cluster).await;
    for (secret, data) in &secrets_after {
        assert_eq!(secrets_before.get(secret), Some(data), "seed {seed}: Secret {secret} kept its data");
    }
    println!(
        "seed {seed}: {changes} changes, {} deletions, {writes_during} operator writes ({:.1} per change)",
        deleted.len(),
        writes_during as f64 / (changes + deleted.len()).max(1) as f64
    );
    assert!(
        writes_during <= WRITES_PER_CHANGE * (changes + deleted.len()),
        "seed {seed}: {writes_during} writes for {changes} changes and {} deletions exceed {WRITES_PER_CHANGE} per change",
        deleted.len()
    );

    let at_rest = operator_writes(&cluster);
    tokio::time::sleep(REST).await;
    assert_eq!(operator_writes(&cluster), at_rest, "seed {seed}: no write at rest");

    assert_figures_match_log(&cluster, seed, ended.add(Figures::of(&leader)), started);
    drop(leader);
}
