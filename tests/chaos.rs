//! A chaos soak on the paused clock: 200 DatabaseClusters; for 60 simulated seconds a seeded
//! driver changes specs at random (replicas, version within the major, postgresConfig, storage
//! growth) and deletes a few clusters, while the simulator drops every watch, answers some
//! re-watches 410, fails bursts of requests with 500 and 429 (`Retry-After`), and adds 300 ms of
//! latency; the operator is stopped and started again twice. Then, with faults off:
//!
//! - every cluster converges to its last spec (status and StatefulSet agree with it);
//! - every live cluster has exactly one StatefulSet, Service and Secret, a deleted one none;
//! - no Secret's password changed;
//! - the operator's writes stay within [`WRITES_PER_CHANGE`] per change made, and none at rest.
//!
//! The seed is printed first (and in every failure message); `CHAOS_SEED=N` replays a run, as
//! deterministically as the single-threaded paused runtime makes it.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use common::*;
use dbcluster_operator::databasecluster::resources::{app_secret_password, label};
use dbcluster_operator::databasecluster::types::{DatabaseCluster, DatabaseClusterSpec};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Secret, Service};
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

const CLUSTERS: usize = 200;
const ROUNDS: usize = 60;
const ROUND: Duration = Duration::from_secs(1);
/// The operator's writes per spec change, retries under the faults included: a change costs a
/// StatefulSet update, a few status patches and an Event or two when it goes well.
const WRITES_PER_CHANGE: usize = 25;

fn spec(replicas: i32, minor: u32, storage_gi: u32, config: Option<u32>) -> DatabaseClusterSpec {
    DatabaseClusterSpec {
        replicas,
        version: format!("15.{minor}"),
        storage_size: format!("{storage_gi}Gi"),
        backup_schedule: None,
        postgres_config: config.map(|c| BTreeMap::from([("work_mem".to_owned(), format!("{c}MB"))])),
    }
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
    config: Option<u32>,
}

impl Wanted {
    fn spec(self) -> DatabaseClusterSpec {
        spec(self.replicas, self.minor, self.storage_gi, self.config)
    }

    fn changed(self, rng: &mut StdRng) -> Wanted {
        let mut next = self;
        match rng.random_range(0..4) {
            0 => next.replicas = rng.random_range(1..=4),
            1 => next.minor = rng.random_range(1..=9),
            2 => next.config = Some(rng.random_range(1..=64)),
            _ => next.storage_gi += rng.random_range(1..=3),
        }
        next
    }
}

fn converged(c: &DatabaseCluster, wanted: Wanted) -> bool {
    let Some(status) = &c.status else { return false };
    phase(c) == Some("Running")
        && status.observed_generation == c.metadata.generation
        && status.ready_replicas == wanted.replicas
        && status.current_version.as_deref() == Some(wanted.spec().version.as_str())
}

/// One random fault for the coming round.
fn inject(cluster: &TestCluster, rng: &mut StdRng) {
    let faults = cluster.sim.faults();
    faults.set_latency(Duration::ZERO);
    match rng.random_range(0..6) {
        0 => faults.close_watches(),
        1 => {
            faults.gone_next_watch(["databaseclusters", "statefulsets", "secrets"][rng.random_range(0..3)]);
            faults.close_watches();
        }
        2 => faults.fail_next("databaseclusters/status", rng.random_range(1..=5), 500),
        3 => faults.fail_next("statefulsets", rng.random_range(1..=5), 429),
        4 => faults.set_latency(Duration::from_millis(300)),
        _ => {}
    }
}

/// The operator's writes so far (the driver writes DatabaseClusters themselves only).
fn operator_writes(cluster: &TestCluster) -> usize {
    cluster.writes().iter().filter(|r| !(r.resource == "databaseclusters" && r.subresource.is_none())).count()
}

async fn secret_passwords(cluster: &TestCluster) -> HashMap<String, String> {
    let secrets: kube::Api<Secret> = cluster.api();
    let managed = ListParams::default().labels(&format!("{}=dbcluster-operator", label::MANAGED_BY));
    let list = secrets.list(&managed).await.expect("list secrets").items;
    list.into_iter().filter_map(|s| Some((s.metadata.name.clone()?, app_secret_password(&s)?))).collect()
}

#[tokio::test(start_paused = true)]
async fn the_operator_converges_under_faults_and_restarts() {
    let seed: u64 =
        std::env::var("CHAOS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    println!("chaos seed {seed} (replay with CHAOS_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);
    let cluster = TestCluster::start().await;
    let api = cluster.clusters();
    let mut operator = cluster.start_operator().await;

    let mut wanted: HashMap<String, Wanted> = HashMap::new();
    for i in 0..CLUSTERS {
        let w = Wanted { replicas: rng.random_range(1..=3), minor: 4, storage_gi: 1, config: None };
        let c = DatabaseCluster {
            metadata: ObjectMeta { name: Some(name(i)), ..ObjectMeta::default() },
            spec: w.spec(),
            status: None,
        };
        api.create(&PostParams::default(), &c).await.expect("create a cluster");
        wanted.insert(name(i), w);
    }
    within("every cluster Running before the chaos", async {
        loop {
            let list = api.list(&ListParams::default()).await.expect("list").items;
            if list.iter().all(|c| converged(c, wanted[c.metadata.name.as_deref().unwrap_or_default()])) {
                return;
            }
            tokio::time::sleep(POLL_INTERVAL * 10).await;
        }
    })
    .await;
    let passwords = secret_passwords(&cluster).await;
    assert_eq!(passwords.len(), CLUSTERS, "seed {seed}: one Secret per cluster");
    let writes_before = operator_writes(&cluster);

    let mut changes = 0;
    let mut deleted: HashSet<String> = HashSet::new();
    for round in 0..ROUNDS {
        inject(&cluster, &mut rng);
        for _ in 0..rng.random_range(1..=8) {
            let target = name(rng.random_range(0..CLUSTERS));
            if deleted.contains(&target) {
                continue;
            }
            if rng.random_ratio(1, 40) {
                api.delete(&target, &DeleteParams::default()).await.expect("delete a cluster");
                wanted.remove(&target);
                deleted.insert(target);
                continue;
            }
            let next = wanted[&target].changed(&mut rng);
            let patch = Patch::Merge(json!({"spec": next.spec()}));
            // The driver's own requests may meet the injected faults too; a refused change is not made.
            if api.patch(&target, &PatchParams::default(), &patch).await.is_ok() {
                wanted.insert(target, next);
                changes += 1;
            }
        }
        if round == ROUNDS / 3 || round == 2 * ROUNDS / 3 {
            operator.stop().await;
            operator = cluster.start_operator().await;
        }
        tokio::time::sleep(ROUND).await;
    }
    cluster.sim.faults().set_latency(Duration::ZERO);

    within(&format!("seed {seed}: every cluster converged to its last spec"), async {
        loop {
            let list = api.list(&ListParams::default()).await.expect("list").items;
            let done = list.len() == wanted.len()
                && list.iter().all(|c| converged(c, wanted[c.metadata.name.as_deref().unwrap_or_default()]));
            if done {
                return;
            }
            tokio::time::sleep(POLL_INTERVAL * 10).await;
        }
    })
    .await;
    // The garbage collector removes a deleted cluster's children in the background.
    within(&format!("seed {seed}: no child of a deleted cluster"), async {
        loop {
            let sts = cluster.api::<StatefulSet>().list(&ListParams::default()).await.expect("list").items;
            if sts.iter().all(|s| !deleted.contains(s.metadata.name.as_deref().unwrap_or_default())) {
                return;
            }
            tokio::time::sleep(POLL_INTERVAL * 10).await;
        }
    })
    .await;
    let writes_during = operator_writes(&cluster) - writes_before;

    let statefulsets = cluster.api::<StatefulSet>().list(&ListParams::default()).await.expect("list").items;
    let services = cluster.api::<Service>().list(&ListParams::default()).await.expect("list").items;
    for (i, w) in &wanted {
        let sts: Vec<_> = statefulsets.iter().filter(|s| s.metadata.name.as_deref() == Some(i)).collect();
        assert_eq!(sts.len(), 1, "seed {seed}: {i} has one StatefulSet");
        let sts_spec = sts[0].spec.as_ref().expect("spec");
        assert_eq!(sts_spec.replicas, Some(w.replicas), "seed {seed}: {i} StatefulSet replicas");
        let container = &sts_spec.template.spec.as_ref().expect("pod spec").containers[0];
        assert_eq!(
            container.image.as_deref(),
            Some(format!("postgres:{}", w.spec().version).as_str()),
            "seed {seed}: {i} image"
        );
        if let Some(c) = w.config {
            let args = container.args.clone().unwrap_or_default().join(" ");
            assert!(args.contains(&format!("work_mem={c}MB")), "seed {seed}: {i} postgresConfig in {args}");
        }
        let owned_services = services
            .iter()
            .filter(|s| s.metadata.labels.as_ref().and_then(|l| l.get(label::INSTANCE)) == Some(i))
            .count();
        assert_eq!(owned_services, 1, "seed {seed}: {i} has one Service");
    }
    for gone in &deleted {
        assert!(
            !services
                .iter()
                .any(|s| s.metadata.labels.as_ref().and_then(|l| l.get(label::INSTANCE)) == Some(gone)),
            "seed {seed}: the Service of deleted {gone} is gone"
        );
    }
    let now_passwords = secret_passwords(&cluster).await;
    for (secret, password) in &now_passwords {
        assert_eq!(passwords.get(secret), Some(password), "seed {seed}: Secret {secret} kept its password");
    }
    assert_eq!(now_passwords.len(), wanted.len(), "seed {seed}: one Secret per live cluster");
    println!("seed {seed}: {changes} changes, {} deletions, {writes_during} operator writes", deleted.len());
    assert!(
        writes_during <= WRITES_PER_CHANGE * (changes + deleted.len()),
        "seed {seed}: {writes_during} writes for {changes} changes exceed {WRITES_PER_CHANGE} per change"
    );

    let at_rest = operator_writes(&cluster);
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(operator_writes(&cluster), at_rest, "seed {seed}: no write at rest");
    operator.stop().await;
}
