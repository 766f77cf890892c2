//! Work queue benchmarks. Every benchmark runs the queue beside two baselines in the same
//! run: `mutex_vecdeque` (a `Mutex<VecDeque> + HashSet` queue, written here: dedup, no processing
//! set, no delays) and `mpsc` (a `tokio::sync::mpsc` channel: no dedup at all, the floor).
//!
//! `workqueue_causes_on` / `workqueue_causes_off` run the same queue through the controller's
//! `Enqueuer`, recording each add's cause (a watch event, as the informers' handlers build it)
//! and taking the causes at each claim, as the workers do: the cost of `runtime::controller::causes`, on
//! beside off, in the same run.
//!
//! `big_queue`, `big_queue_idle` (the same queue without workers: the floor its memory accesses
//! set), `big_queue_waiting` and `memory` print their figures (add latency percentiles,
//! bytes per queued key) on stdout next to criterion's output; a counting global allocator
//! measures memory. The latencies are timed twice: from a task on the workers' runtime (as
//! client-go's come from a goroutine beside its workers) and from the bench's own thread outside
//! it (on 2 cores, a third runnable thread: see `time_adds`).

#![allow(unsafe_code, reason = "a counting global allocator measures the queue memory")]

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::{HashSet, VecDeque};
use std::future::Future;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dbcluster_operator::runtime::ObjectKey;
use dbcluster_operator::runtime::controller::causes::{
    Cause, CauseNotes, Enqueuer, EventType, ObjectEvent, ResourceVersion,
};
use dbcluster_operator::runtime::controller::writes::{KindName, kind_name};
use dbcluster_operator::runtime::workqueue::{Claim, Priority, QueueConfig, QueueMetrics, WorkQueue};
use tokio::sync::{Notify, mpsc};

/// Counts live heap bytes while `COUNTING` is on.
struct CountingAllocator;

static COUNTING: AtomicBool = AtomicBool::new(false);
static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts sizes.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract for `alloc`, passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract for `dealloc`, passed on unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE_BYTES.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract for `realloc`, passed on unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn keys(n: usize) -> Vec<ObjectKey> {
    (0..n).map(|i| ObjectKey::namespaced(&format!("team-{}", i % 97), &format!("pg-cluster-{i}"))).collect()
}

/// One queue implementation as the benchmarks drive it: a producer side, a consumer side, items.
trait Harness: 'static {
    const NAME: &'static str;
    type Producer: Clone + Send + Sync + 'static;
    type Consumer: Clone + Send + Sync + 'static;
    /// What a worker holds while processing (the claim, for the work queue).
    type Item: Send + 'static;
    fn new() -> (Self::Producer, Self::Consumer);
    fn add(producer: &Self::Producer, key: ObjectKey);
    fn get(consumer: &Self::Consumer) -> impl Future<Output = Option<Self::Item>> + Send;
    fn key(item: &Self::Item) -> &ObjectKey;
    /// Stops intake; consumers drain what is queued, then get `None`.
    fn close(producer: Self::Producer);
    /// Holds `key` without making it ready (a long timer); false if the queue cannot.
    fn add_delayed(_producer: &Self::Producer, _key: ObjectKey) -> bool {
        false
    }
}

/// The work queue; `TIMED` turns metrics on (with [`CountingMetrics`], about what a Prometheus
/// adapter costs), which adds the clock reads they need.
struct Ours<const TIMED: bool>;

/// Metrics that only add to atomics.
#[derive(Default)]
struct CountingMetrics {
    counters: [AtomicU64; 4],
}

impl QueueMetrics for CountingMetrics {
    fn depth(&self, delta: i64) {
        self.counters[0].fetch_add(delta as u64, Ordering::Relaxed);
    }
    fn added(&self) {
        self.counters[1].fetch_add(1, Ordering::Relaxed);
    }
    fn queue_duration(&self, waited: Duration) {
        self.counters[2].fetch_add(waited.as_nanos() as u64, Ordering::Relaxed);
    }
    fn work_duration(&self, worked: Duration) {
        self.counters[3].fetch_add(worked.as_nanos() as u64, Ordering::Relaxed);
    }
    fn unfinished_work(&self, _total: Duration, _longest: Duration) {}
    fn retried(&self) {}
}

impl<const TIMED: bool> Harness for Ours<TIMED> {
    const NAME: &'static str = if TIMED { "workqueue_with_metrics" } else { "workqueue" };
    type Producer = WorkQueue<ObjectKey>;
    type Consumer = WorkQueue<ObjectKey>;
    type Item = Claim<ObjectKey>;

    fn new() -> (Self::Producer, Self::Consumer) {
        let mut config = QueueConfig::default();
        if TIMED {
            config = config.with_metrics(Arc::new(CountingMetrics::default()));
        }
        let queue = WorkQueue::new(config);
        (queue.clone(), queue)
    }

    fn add(producer: &Self::Producer, key: ObjectKey) {
        producer.add(key);
    }

    fn get(consumer: &Self::Consumer) -> impl Future<Output = Option<Self::Item>> + Send {
        consumer.get()
    }

    fn key(item: &Self::Item) -> &ObjectKey {
        item.key()
    }

    fn close(producer: Self::Producer) {
        producer.shutdown();
    }

    fn add_delayed(producer: &Self::Producer, key: ObjectKey) -> bool {
        producer.add_after(key, Duration::from_secs(3600));
        true
    }
}

/// The work queue behind the controller's `Enqueuer`, recording causes when `ON`.
struct WithCauses<const ON: bool>;

impl<const ON: bool> Harness for WithCauses<ON> {
    const NAME: &'static str = if ON { "workqueue_causes_on" } else { "workqueue_causes_off" };
    type Producer = Enqueuer;
    type Consumer = Enqueuer;
    type Item = Claim<ObjectKey, CauseNotes>;

    fn new() -> (Self::Producer, Self::Consumer) {
        let enqueuer = Enqueuer::new(WorkQueue::with_notes(QueueConfig::default()), ON);
        (enqueuer.clone(), enqueuer)
    }

    fn add(producer: &Self::Producer, key: ObjectKey) {
        static INFORMER: std::sync::OnceLock<KindName> = std::sync::OnceLock::new();
        let informer = *INFORMER.get_or_init(|| kind_name("apps/StatefulSet"));
        // As the controller's handlers do: the cause names the key's own object and keeps
        // the queue's key, only when the cause is kept.
        producer.add(key, Priority::Normal, |key| {
            Cause::Watch(ObjectEvent {
                informer,
                event: EventType::Modified,
                object: key.into_owned(),
                resource_version: Some(ResourceVersion::from("4312")),
            })
        });
    }

    async fn get(consumer: &Self::Consumer) -> Option<Self::Item> {
        let mut claim = consumer.queue().get().await?;
        black_box(claim.take_notes());
        Some(claim)
    }

    fn key(item: &Self::Item) -> &ObjectKey {
        item.key()
    }

    fn close(producer: Self::Producer) {
        producer.queue().shutdown();
    }
}

/// The naive deduplicating queue: one `std::sync::Mutex` over a `VecDeque` and a `HashSet`.
#[derive(Default)]
struct MutexQueue {
    inner: Mutex<MutexQueueState>,
    notify: Notify,
}

#[derive(Default)]
struct MutexQueueState {
    queue: VecDeque<ObjectKey>,
    set: HashSet<ObjectKey>,
    closed: bool,
}

struct Baseline;

impl Harness for Baseline {
    const NAME: &'static str = "mutex_vecdeque";
    type Producer = Arc<MutexQueue>;
    type Consumer = Arc<MutexQueue>;
    type Item = ObjectKey;

    fn new() -> (Self::Producer, Self::Consumer) {
        let queue = Arc::new(MutexQueue::default());
        (queue.clone(), queue)
    }

    fn add(producer: &Self::Producer, key: ObjectKey) {
        let mut state = producer.inner.lock().unwrap();
        if state.closed || state.set.contains(&key) {
            return;
        }
        state.set.insert(key.clone());
        state.queue.push_back(key);
        drop(state);
        producer.notify.notify_one();
    }

    async fn get(consumer: &Self::Consumer) -> Option<Self::Item> {
        loop {
            let notified = consumer.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut state = consumer.inner.lock().unwrap();
                if let Some(key) = state.queue.pop_front() {
                    state.set.remove(&key);
                    return Some(key);
                }
                if state.closed {
                    return None;
                }
            }
            notified.await;
        }
    }

    fn key(item: &Self::Item) -> &ObjectKey {
        item
    }

    fn close(producer: Self::Producer) {
        producer.inner.lock().unwrap().closed = true;
        producer.notify.notify_waiters();
    }
}

struct Channel;

impl Harness for Channel {
    const NAME: &'static str = "mpsc";
    type Producer = mpsc::UnboundedSender<ObjectKey>;
    type Consumer = Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<ObjectKey>>>;
    type Item = ObjectKey;

    fn new() -> (Self::Producer, Self::Consumer) {
        let (tx, rx) = mpsc::unbounded_channel();
        (tx, Arc::new(tokio::sync::Mutex::new(rx)))
    }

    fn add(producer: &Self::Producer, key: ObjectKey) {
        let _ = producer.send(key);
    }

    async fn get(consumer: &Self::Consumer) -> Option<Self::Item> {
        consumer.lock().await.recv().await
    }

    fn key(item: &Self::Item) -> &ObjectKey {
        item
    }

    fn close(producer: Self::Producer) {
        drop(producer);
    }
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap()
}

/// 1 000 adds, then 1 000 get + done, on one task.
fn add_get_done<H: Harness>(c: &mut Criterion) {
    let rt = current_thread();
    let keys = keys(1000);
    let mut group = c.benchmark_group("add_get_done");
    group.throughput(Throughput::Elements(keys.len() as u64));
    group.bench_function(H::NAME, |b| {
        let _guard = rt.enter();
        let (producer, consumer) = H::new();
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    for key in &keys {
                        H::add(&producer, key.clone());
                    }
                    for _ in 0..keys.len() {
                        black_box(H::get(&consumer).await);
                    }
                }
                start.elapsed()
            })
        });
    });
    group.finish();
}

/// 1 000 adds of keys that are all already queued.
fn add_duplicates<H: Harness>(c: &mut Criterion) {
    let rt = current_thread();
    let keys = keys(1000);
    let mut group = c.benchmark_group("add_duplicates");
    group.throughput(Throughput::Elements(keys.len() as u64));
    group.bench_function(H::NAME, |b| {
        let _guard = rt.enter();
        let (producer, consumer) = H::new();
        for key in &keys {
            H::add(&producer, key.clone());
        }
        b.iter_custom(|iters| {
            let mut elapsed = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                for key in &keys {
                    H::add(&producer, key.clone());
                }
                elapsed += start.elapsed();
                if H::NAME == Channel::NAME {
                    // No dedup: drain what this round sent so the channel stays at 1 000 items.
                    rt.block_on(async {
                        for _ in 0..keys.len() {
                            black_box(H::get(&consumer).await);
                        }
                    });
                }
            }
            elapsed
        });
    });
    group.finish();
}

/// 4 producers × 25 000 adds over 10 000 keys, 8 workers, multi-thread runtime; timed until every
/// add is processed.
fn contended<H: Harness>(c: &mut Criterion) {
    const PRODUCERS: usize = 4;
    const ADDS: usize = 25_000;
    const WORKERS: usize = 8;
    let rt = multi_thread();
    let keys = Arc::new(keys(10_000));
    let mut group = c.benchmark_group("contended");
    group.throughput(Throughput::Elements((PRODUCERS * ADDS) as u64));
    group.sample_size(30);
    group.bench_function(H::NAME, |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut elapsed = Duration::ZERO;
                for _ in 0..iters {
                    let (producer, consumer) = H::new();
                    let workers: Vec<_> = (0..WORKERS)
                        .map(|_| {
                            let consumer = consumer.clone();
                            tokio::spawn(async move {
                                while let Some(item) = H::get(&consumer).await {
                                    black_box(H::key(&item));
                                }
                            })
                        })
                        .collect();
                    drop(consumer);
                    let start = Instant::now();
                    let producers: Vec<_> = (0..PRODUCERS)
                        .map(|p| {
                            let (producer, keys) = (producer.clone(), keys.clone());
                            tokio::spawn(async move {
                                for j in 0..ADDS {
                                    H::add(&producer, keys[(j * 7 + p * 2503) % keys.len()].clone());
                                }
                            })
                        })
                        .collect();
                    for task in producers {
                        task.await.unwrap();
                    }
                    H::close(producer);
                    for task in workers {
                        task.await.unwrap();
                    }
                    elapsed += start.elapsed();
                }
                elapsed
            })
        });
    });
    group.finish();
}

/// `add` latency with 1 000 000 keys queued and `worker_count` workers (1 000 in `big_queue`) that
/// each take a key, sleep 1 ms, drop it and add it again. Criterion measures the mean add; a
/// separate pass of individually timed adds gives the percentiles. `big_queue_idle` runs it with
/// no worker at all: the latency of the adds' own memory accesses into a queue this large (the
/// floor under the busy figure, on this machine, in this run).
fn big_queue<H: Harness>(c: &mut Criterion, group: &str, worker_count: usize) {
    const QUEUED: usize = 1_000_000;
    const TIMED: usize = 200_000;
    let rt = multi_thread();
    let pool = keys(QUEUED + QUEUED / 10);
    let (producer, consumer) = H::new();
    for key in &pool[..QUEUED] {
        H::add(&producer, key.clone());
    }
    let workers: Vec<_> = (0..worker_count)
        .map(|_| {
            let (producer, consumer) = (producer.clone(), consumer.clone());
            rt.spawn(async move {
                while let Some(item) = H::get(&consumer).await {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    let key = H::key(&item).clone();
                    drop(item);
                    H::add(&producer, key);
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200)); // let every worker take its first key
    let what = format!("{worker_count} workers: add latency over {TIMED} adds");
    time_adds::<H>(c, &rt, group, &producer, &pool, TIMED, &what);
    H::close(producer);
    drop(consumer);
    rt.block_on(async {
        for worker in workers {
            worker.abort();
        }
    });
    drop(rt);
}

/// `add` latency with 1 000 workers parked in `get`: each add wakes one of them, which drops its
/// claim at once and parks again. The work queue also holds 1 000 000 keys on timers (due in an
/// hour); the baselines cannot hold keys that are not ready, so their backlog is empty.
fn big_queue_waiting<H: Harness>(c: &mut Criterion) {
    const DELAYED: usize = 1_000_000;
    const WORKERS: usize = 1000;
    const FRESH: usize = 100_000;
    const TIMED: usize = 200_000;
    let rt = multi_thread();
    let _guard = rt.enter();
    let (producer, consumer) = H::new();
    let mut backlog = 0;
    for key in keys(DELAYED) {
        backlog += usize::from(H::add_delayed(&producer, key));
    }
    let fresh: Vec<ObjectKey> =
        (0..FRESH).map(|i| ObjectKey::namespaced("fresh", &format!("pg-{i}"))).collect();
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let consumer = consumer.clone();
            rt.spawn(async move {
                while let Some(item) = H::get(&consumer).await {
                    black_box(H::key(&item));
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200)); // let every worker park
    let what = format!("{backlog} keys on timers, {WORKERS} parked workers: add latency over {TIMED} adds");
    time_adds::<H>(c, &rt, "big_queue_waiting", &producer, &fresh, TIMED, &what);
    H::close(producer);
    drop(consumer);
    for worker in workers {
        worker.abort();
    }
}

/// Criterion's figure for `add` in group `group`, cycling through `keys`, then the latency
/// percentiles of `timed` single adds, printed with `what`, measured twice:
///
/// - `from a task`: the adds run in a task on `rt`, the runtime of the workers, as client-go's
///   figures come from a goroutine scheduled beside its workers. On 2 cores the runtime's two
///   threads are the only runnable ones.
/// - `from a thread`: the adds run on the bench's own thread, outside the runtime: a third
///   runnable thread on 2 cores, so the tail also holds the OS scheduler's (a lock holder
///   preempted by the adder, a wake-up's system call on the adder's clock).
fn time_adds<H: Harness>(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    group: &str,
    producer: &H::Producer,
    keys: &[ObjectKey],
    timed: usize,
    what: &str,
) {
    let mut next = 0usize;
    let mut bench = c.benchmark_group(group);
    bench.sample_size(30);
    bench.throughput(Throughput::Elements(1));
    bench.bench_function(H::NAME, |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                next = (next + 1) % keys.len();
                H::add(producer, keys[next].clone());
            }
            start.elapsed()
        });
    });
    bench.finish();
    let shared: Arc<Vec<ObjectKey>> = Arc::new(keys.to_vec());
    let in_task = {
        let (producer, keys) = (producer.clone(), Arc::clone(&shared));
        rt.block_on(rt.spawn(async move { single_adds::<H>(&producer, &keys, next, timed) })).unwrap()
    };
    let in_thread = single_adds::<H>(producer, &shared, next + timed, timed);
    for (from, latencies) in [("from a task", in_task), ("from a thread", in_thread)] {
        let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
        println!(
            "{group}/{}: {what}, {from}: p50 {:?}, p99 {:?}, p99.9 {:?}, max {:?}",
            H::NAME,
            at(0.50),
            at(0.99),
            at(0.999),
            latencies[latencies.len() - 1]
        );
    }
}

/// The sorted latencies of `timed` single adds, cycling through `keys` from `start`.
fn single_adds<H: Harness>(
    producer: &H::Producer,
    keys: &[ObjectKey],
    start: usize,
    timed: usize,
) -> Vec<Duration> {
    let mut latencies: Vec<Duration> = (0..timed)
        .map(|i| {
            let key = keys[(start + i + 1) % keys.len()].clone();
            let started = Instant::now();
            H::add(producer, key);
            started.elapsed()
        })
        .collect();
    latencies.sort_unstable();
    latencies
}

/// Heap bytes the queue itself holds per queued key (the key text is shared with the caller).
fn memory<H: Harness>(_c: &mut Criterion) {
    const N: usize = 1_000_000;
    let rt = current_thread();
    let _guard = rt.enter();
    let pool = keys(N);
    let key_bytes: usize = pool.iter().map(|k| 16 + k.as_str().len()).sum();
    LIVE_BYTES.store(0, Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
    let (producer, consumer) = H::new();
    for key in &pool {
        H::add(&producer, key.clone());
    }
    COUNTING.store(false, Ordering::SeqCst);
    let bytes = LIVE_BYTES.load(Ordering::SeqCst);
    println!(
        "memory/{}: {:.1} bytes per queued key for {N} keys (each key's own text, {:.1} bytes on average, is shared with the caller and not counted)",
        H::NAME,
        bytes as f64 / N as f64,
        key_bytes as f64 / N as f64
    );
    drop((producer, consumer));
}

/// A restart's backlog: 10 000 keys queued at once, 4 workers at 1 ms a pass, and a
/// live event every 5 ms. Criterion times the drain (until the last backlog key is served); the
/// latency from each live event's add to the start of its pass is printed as p50/p99. `low`
/// queues the backlog at `Priority::Low` (the controller's choice for initial lists and
/// resyncs); otherwise everything is one FIFO, the baseline.
fn backlog(c: &mut Criterion, low: bool) {
    const BACKLOG: usize = 10_000;
    const WORKERS: usize = 4;
    const PASS: Duration = Duration::from_millis(1);
    const LIVE_EVERY: Duration = Duration::from_millis(5);
    let name = if low { "priority" } else { "fifo" };
    let rt = multi_thread();
    let backlog_keys = Arc::new(keys(BACKLOG));
    let live_latencies = Arc::new(Mutex::new(Vec::<Duration>::new()));
    let mut group = c.benchmark_group("backlog");
    group.sample_size(10);
    group.throughput(Throughput::Elements(BACKLOG as u64));
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut elapsed = Duration::ZERO;
                for _ in 0..iters {
                    let queue = WorkQueue::<ObjectKey>::new(QueueConfig::default());
                    let priority = if low { Priority::Low } else { Priority::Normal };
                    let start = Instant::now();
                    for key in backlog_keys.iter() {
                        queue.add_with_priority(key.clone(), priority);
                    }
                    let remaining = Arc::new(std::sync::atomic::AtomicUsize::new(BACKLOG));
                    let drained = Arc::new(Notify::new());
                    let live_added: Arc<Mutex<Vec<Option<Instant>>>> = Arc::default();
                    let workers: Vec<_> = (0..WORKERS)
                        .map(|_| {
                            let (queue, remaining, drained) =
                                (queue.clone(), remaining.clone(), drained.clone());
                            let (live_added, live_latencies) = (live_added.clone(), live_latencies.clone());
                            tokio::spawn(async move {
                                while let Some(claim) = queue.get().await {
                                    if let Some(n) = claim.key().name().strip_prefix("live-") {
                                        let n: usize = n.parse().unwrap();
                                        let added = live_added.lock().unwrap()[n].take().unwrap();
                                        live_latencies.lock().unwrap().push(added.elapsed());
                                    } else if remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
                                        drained.notify_one();
                                    }
                                    tokio::time::sleep(PASS).await;
                                    drop(claim);
                                }
                            })
                        })
                        .collect();
                    let live = {
                        let (queue, live_added) = (queue.clone(), live_added.clone());
                        tokio::spawn(async move {
                            for n in 0.. {
                                tokio::time::sleep(LIVE_EVERY).await;
                                live_added.lock().unwrap().push(Some(Instant::now()));
                                queue.add(ObjectKey::namespaced("live", &format!("live-{n}")));
                            }
                        })
                    };
                    drained.notified().await;
                    elapsed += start.elapsed();
                    live.abort();
                    queue.shutdown();
                    for worker in workers {
                        worker.await.unwrap();
                    }
                }
                elapsed
            })
        });
    });
    group.finish();
    let mut latencies = std::mem::take(&mut *live_latencies.lock().unwrap());
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    println!(
        "backlog/{name}: {BACKLOG} keys queued, {WORKERS} workers at {PASS:?} a pass: live event to its pass over {} events: p50 {:?}, p99 {:?}",
        latencies.len(),
        at(0.50),
        at(0.99)
    );
}

/// Whether a command-line filter (criterion's positional argument, `group` or `group/queue`)
/// selects the group `name`; used to skip the expensive set-up of benchmarks filtered out.
fn selected(name: &str) -> bool {
    let filters: Vec<String> = std::env::args().skip(1).filter(|arg| !arg.starts_with('-')).collect();
    filters.is_empty()
        || filters.iter().any(|f| f.split('/').next().is_some_and(|group| name.contains(group)))
}

fn all(c: &mut Criterion) {
    add_get_done::<Ours<false>>(c);
    add_get_done::<Ours<true>>(c);
    add_get_done::<Baseline>(c);
    add_get_done::<Channel>(c);
    add_duplicates::<Ours<false>>(c);
    add_duplicates::<Ours<true>>(c);
    add_duplicates::<Baseline>(c);
    add_duplicates::<Channel>(c);
    contended::<Ours<false>>(c);
    contended::<Ours<true>>(c);
    contended::<Baseline>(c);
    contended::<Channel>(c);
    if selected("big_queue") {
        big_queue::<Ours<false>>(c, "big_queue", 1000);
        big_queue::<Baseline>(c, "big_queue", 1000);
        big_queue::<Channel>(c, "big_queue", 1000);
    }
    if selected("big_queue_idle") {
        // No mpsc row: without workers the channel would only grow.
        big_queue::<Ours<false>>(c, "big_queue_idle", 0);
        big_queue::<Baseline>(c, "big_queue_idle", 0);
    }
    if selected("big_queue_waiting") {
        big_queue_waiting::<Ours<false>>(c);
        big_queue_waiting::<Baseline>(c);
        big_queue_waiting::<Channel>(c);
    }
    if selected("backlog") {
        backlog(c, false);
        backlog(c, true);
    }
    if selected("memory") {
        memory::<Ours<false>>(c);
        memory::<Ours<true>>(c);
        memory::<Baseline>(c);
        memory::<Channel>(c);
    }
}

/// The cost of recording causes (`runtime::controller::causes`): the same groups with it on, beside off.
fn causes(c: &mut Criterion) {
    add_get_done::<WithCauses<true>>(c);
    add_get_done::<WithCauses<false>>(c);
    add_duplicates::<WithCauses<true>>(c);
    add_duplicates::<WithCauses<false>>(c);
    contended::<WithCauses<true>>(c);
    contended::<WithCauses<false>>(c);
    if selected("big_queue") {
        big_queue::<WithCauses<true>>(c, "big_queue", 1000);
        big_queue::<WithCauses<false>>(c, "big_queue", 1000);
    }
}

criterion_group!(benches, all, causes);
criterion_main!(benches);
