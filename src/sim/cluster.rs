//! The running server's shared core: state behind one lock, faults, the request log, the
//! configuration, and the signals that wake the garbage collector and stop everything.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::sim::SimConfig;
use crate::sim::faults::Faults;
use crate::sim::gc;
use crate::sim::kubelet::Node;
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
    /// Cancelled when the server shuts down.
    pub shutdown: CancellationToken,
    /// The process kubelet's host side (its files, processes and pods' logs).
    pub node: Arc<Node>,
    gc_wake: Notify,
}

impl Cluster {
    /// A cluster with built-in kinds and no objects.
    pub fn new(config: SimConfig) -> Self {
        let mut state = State::new(config.history_limit, config.kubernetes_version);
        state.graceful_pod_deletion = config.kubelet == crate::sim::KubeletKind::Process;
        state.owner_references_permission_enforcement = config.owner_references_permission_enforcement;
        let state = Arc::new(Mutex::new(state));
        Self {
            faults: Faults::new(state.clone()),
            state,
            log: RequestLog::default(),
            config,
            shutdown: CancellationToken::new(),
            node: Arc::new(Node::default()),
            gc_wake: Notify::new(),
        }
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
