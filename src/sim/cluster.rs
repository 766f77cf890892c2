//! The running server's shared core: state behind one lock, faults, the request log, the
//! configuration, and the signals that wake the garbage collector and stop everything.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::sim::SimConfig;
use crate::sim::faults::Faults;
use crate::sim::gc;
use crate::sim::kubelet::Node;
use crate::sim::nodes::SimNodes;
use crate::sim::request_log::RequestLog;
use crate::sim::state::State;

/// Shared by the request handlers, the watch streams and the background tasks.
#[derive(Debug)]
pub struct Cluster {
    state: Arc<Mutex<State>>,
    /// Faults to inject.
    pub faults: Faults,
    /// Every resource request.
    pub log: RequestLog,
    /// The configuration the server was started with.
    pub config: SimConfig,
    /// The bearer tokens TokenReviews authenticate.
    pub tokens: crate::sim::reviews::Tokens,
    /// Cancelled when the server shuts down.
    pub shutdown: CancellationToken,
    /// The process kubelet's host side (its files, processes and pods' logs).
    pub node: Arc<Node>,
    /// The process kubelet's simulated nodes.
    pub nodes: Arc<SimNodes>,
    gc_wake: Notify,
    /// How far the controller manager's clock has been moved ahead of `tokio::time`, in ms.
    clock_ahead_ms: AtomicU64,
    /// Wakes the simulated controllers (after the clock moved).
    pub(crate) controllers_wake: Notify,
    /// Change events sent on watch streams so far (bookmarks and errors not counted).
    pub watch_events_sent: AtomicU64,
    /// Watches answered `410 Gone` so far (expired resourceVersions and injected ones).
    pub watch_gone_sent: AtomicU64,
    /// Streaming lists (watches with `sendInitialEvents=true`) served so far.
    pub streaming_lists_sent: AtomicU64,
}

impl Cluster {
    /// A cluster with built-in kinds and no objects.
    pub fn new(config: SimConfig) -> Self {
        let mut state = State::new(config.history_limit, config.kubernetes_version);
        state.graceful_pod_deletion = config.kubelet == crate::sim::KubeletKind::Process;
        state.owner_references_permission_enforcement = config.owner_references_permission_enforcement;
        state.default_toleration_seconds = config.default_toleration_seconds;
        let state = Arc::new(Mutex::new(state));
        let node = Arc::new(Node::default());
        let nodes = Arc::new(SimNodes::new(config.nodes));
        Self {
            faults: Faults::new(state.clone(), node.clone(), nodes.clone()),
            nodes,
            state,
            log: RequestLog::default(),
            config,
            tokens: Default::default(),
            shutdown: CancellationToken::new(),
            node,
            gc_wake: Notify::new(),
            clock_ahead_ms: AtomicU64::new(0),
            controllers_wake: Notify::new(),
            watch_events_sent: AtomicU64::new(0),
            watch_gone_sent: AtomicU64::new(0),
            streaming_lists_sent: AtomicU64::new(0),
        }
    }

    /// Moves the controller manager's clock (what CronJob schedules follow) `by` ahead, as a
    /// cluster whose time jumps would, and wakes the controllers.
    pub fn advance_controller_clock(&self, by: Duration) {
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.clock_ahead_ms.fetch_add(ms, Ordering::SeqCst);
        self.controllers_wake.notify_one();
    }

    /// How far [`Cluster::advance_controller_clock`] has moved the controllers' clock in total.
    pub fn controller_clock_ahead(&self) -> Duration {
        Duration::from_millis(self.clock_ahead_ms.load(Ordering::SeqCst))
    }

    /// Runs `f` with the state locked; wakes the garbage collector if `f` left it work.
    pub fn write<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let (result, gc_pending) = {
            let mut state = self.state.lock();
            let r = f(&mut state);
            (r, !state.gc_queue.is_empty())
        };
        if gc_pending {
            self.gc_wake.notify_one();
        }
        result
    }

    /// Runs `f` with the state locked, for reads.
    pub fn read<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        f(&self.state.lock())
    }

    /// The garbage collector's loop: collect whenever deletions queue work, until shutdown.
    pub async fn run_gc(self: Arc<Self>) {
        loop {
            tokio::select! {
                _ = self.gc_wake.notified() => {}
                _ = self.shutdown.cancelled() => return,
            }
            while self.write(gc::step) {}
        }
    }
}
