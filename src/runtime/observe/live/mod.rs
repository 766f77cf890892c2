//! The live page of the loop: `GET /debug/` serves one self-contained HTML page (its script, style
//! and pictures are in the binary; nothing is fetched from elsewhere), which polls `GET
//! /debug/live.json` for a [`LiveSnapshot`] every [`LIVE_PERIOD`]: the loop drawn as a picture
//! (watch streams → cache → queue → workers → API writes, with the figures of each stage:
//! [`LoopStages`]), small graphs of queue depth, passes per second and pass latency that the page
//! keeps from the snapshots it received, the objects as the operator describes them
//! ([`ObjectView`](crate::runtime::observe::introspection::ObjectView)) beside the loop's view of
//! each one's key, the informers, each controller's keys counted by state, the workers, one page of
//! keys with their timers and retries, and a timeline of the latest passes. Clicking a key opens
//! its history from `/debug/queue/<namespace>/<name>`.
//!
//! The page polls with a chain of timers and one short request at a time, and stops while it is
//! hidden: it never holds a connection open. A request that never ends (a server-sent-events
//! stream, a long poll) keeps a headless Chromium's virtual time from advancing, so
//! `--virtual-time-budget` never expires and `--dump-dom` or `--screenshot` never returns.
//! Rates are computed by the page from two snapshots' running totals, so the server keeps no
//! state per reader.
//!
//! It stays usable with many keys: the counts are aggregated, the keys come one page
//! ([`PAGE_SIZE`]) at a time, filtered by a substring and a state (`?filter=…&state=…&page=…`), the
//! objects one page ([`OBJECTS_PER_PAGE`]) at a time, and the timeline holds the [`TIMELINE`]
//! latest passes (of any keys) only. The snapshot is a pure function of the `/debug/queue` and
//! `/debug/cache` reports, the latest passes, the pass totals and the object views' tables
//! ([`live_snapshot`]).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde::Serialize;

use crate::runtime::observe::introspection::{
    CacheReport, Cell, Introspection, KeyView, LatestPasses, ObjectTable, PassCounts, QueueReport,
};

/// The page, as served.
///
/// Tests: `tests/runtime/live.rs` (the endpoints over HTTP), `tests/browser/` (a real browser),
/// and the unit tests (paging, 10 000 keys, the loop's figures, the objects beside their keys).
pub const PAGE_HTML: &str = include_str!("live.html");

/// How often the page asks for a snapshot (it reads this from each snapshot).
pub const LIVE_PERIOD: Duration = Duration::from_millis(500);

/// Keys per page.
pub const PAGE_SIZE: usize = 100;

/// Objects per page.
pub const OBJECTS_PER_PAGE: usize = 50;

/// Passes in the timeline.
pub const TIMELINE: usize = 50;

/// What the page asks for: a substring of the key, a state, a page number (from 0).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveQuery {
    /// Only keys containing this.
    pub filter: String,
    /// Only keys in this state (`queued`, `processing`, …); empty for all.
    pub state: String,
    /// Which page of the matching keys.
    pub page: usize,
}

impl LiveQuery {
    /// Parses `filter=…&state=…&page=…` (percent-encoded, `+` for a space); unknown or malformed
    /// parameters are ignored.
    pub fn parse(query: &str) -> Self {
        let mut parsed = Self::default();
        for pair in query.split('&') {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_decode(value);
            match name {
                "filter" => parsed.filter = value,
                "state" => parsed.state = value,
                "page" => parsed.page = value.parse().unwrap_or(0),
                _ => {}
            }
        }
        parsed
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|hex| u8::from_str_radix(hex, 16).ok()) {
                    Some(byte) => {
                        out.push(byte);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One snapshot, as `/debug/live.json` serves it.
#[derive(Debug, Clone, Serialize)]
pub struct LiveSnapshot {
    /// When it was taken (RFC 3339).
    pub now: String,
    /// How long the page waits before asking for the next one, in milliseconds.
    pub period_ms: u64,
    /// Whether this replica leads, with leader election.
    pub leading: Option<bool>,
    /// The loop's stages, summed over the informers and controllers: the picture's figures.
    pub stages: LoopStages,
    /// One entry per informer.
    pub informers: Vec<LiveInformer>,
    /// One entry per controller.
    pub controllers: Vec<LiveController>,
    /// One table per registered object view.
    pub objects: Vec<LiveObjects>,
}

/// The figures of each stage of the loop. Totals are running totals since the process started:
/// the page divides the difference of two snapshots by the time between them for a rate.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LoopStages {
    /// Watch streams (one per informer).
    pub watches: usize,
    /// Of those, the ones whose first list is applied.
    pub synced: usize,
    /// Watches resumed after one ended, in all.
    pub watch_restarts: u64,
    /// Changes the informers applied to their caches (added, updated, deleted), in all.
    pub events: u64,
    /// Objects cached.
    pub objects: usize,
    /// Keys ready for a worker (queued, or waiting for the retry budget): the queue's depth.
    pub queued: usize,
    /// Keys waiting for a timer (a requeue or a retry's backoff).
    pub waiting: usize,
    /// Workers processing a key now.
    pub busy: usize,
    /// Workers in all.
    pub workers: usize,
    /// Passes, their summed duration and their API writes, in all.
    pub totals: PassCounts,
}

/// An informer on the page.
#[derive(Debug, Clone, Serialize)]
pub struct LiveInformer {
    /// Its name.
    pub informer: String,
    /// Objects cached.
    pub objects: usize,
    /// Whether its first list is applied.
    pub synced: bool,
    /// The last resourceVersion it saw.
    pub resource_version: Option<String>,
    /// Changes applied so far (the page turns two readings into a rate).
    pub events: u64,
    /// Watches resumed after the previous one ended.
    pub watch_restarts: u64,
}

/// A controller on the page.
#[derive(Debug, Clone, Serialize)]
pub struct LiveController {
    /// Its name.
    pub controller: String,
    /// Every key it knows, by state.
    pub by_state: BTreeMap<&'static str, usize>,
    /// The keys being processed (one per busy worker) and for how long.
    pub workers: Vec<LiveWorker>,
    /// Keys matching the query.
    pub matching: usize,
    /// The page shown.
    pub page: usize,
    /// How many pages the matching keys fill (at least 1).
    pub pages: usize,
    /// The keys of that page, processing first, then queued, waiting, idle.
    pub keys: Vec<KeyView>,
    /// The latest passes, newest first.
    pub timeline: Vec<LivePass>,
}

/// A busy worker.
#[derive(Debug, Clone, Serialize)]
pub struct LiveWorker {
    /// The key it processes.
    pub key: String,
    /// Since when (RFC 3339): the page counts up from it between snapshots.
    pub since: Option<String>,
    /// For how long, in seconds.
    pub seconds: f64,
}

/// A pass in the timeline.
#[derive(Debug, Clone, Serialize)]
pub struct LivePass {
    /// The key.
    pub key: String,
    /// How it ended.
    pub result: String,
    /// Its trigger.
    pub trigger: String,
    /// The error, if it failed.
    pub error: Option<String>,
    /// When it ended (RFC 3339).
    pub finished: String,
    /// Seconds since it ended.
    pub finished_seconds_ago: f64,
    /// How long it took.
    pub took_seconds: f64,
}

/// One object view's page of objects, each beside its controller's view of its key.
#[derive(Debug, Clone, Serialize)]
pub struct LiveObjects {
    /// The controller whose keys the objects are.
    pub controller: String,
    /// What the objects are.
    pub title: String,
    /// The columns after the key's, as the view names them.
    pub columns: Vec<String>,
    /// How many objects match the filter.
    pub matching: usize,
    /// The page's objects.
    pub rows: Vec<LiveObjectRow>,
}

/// One object and the loop's view of its key.
#[derive(Debug, Clone, Serialize)]
pub struct LiveObjectRow {
    /// The object's key.
    pub key: String,
    /// Its cells, as the view rendered them.
    pub cells: Vec<Cell>,
    /// Its key in the controller's queue, with its last pass; `None` if the controller does not
    /// know it (yet).
    pub queue: Option<KeyView>,
}

/// The events an informer applied so far.
fn events(report: &CacheReport, informer: &str) -> u64 {
    report
        .informers
        .iter()
        .find(|i| i.informer == informer)
        .map_or(0, |i| i.events.added + i.events.updated + i.events.deleted)
}

fn state_rank(state: &str) -> u8 {
    match state {
        "processing" => 0,
        "queued" => 1,
        "waiting_for_retry_budget" => 2,
        "waiting" => 3,
        _ => 4,
    }
}

/// Everything a snapshot is made of, as read from the registry at one moment.
#[derive(Debug, Clone)]
pub struct LiveInputs {
    /// `/debug/queue`'s report.
    pub queue: QueueReport,
    /// `/debug/cache`'s report.
    pub cache: CacheReport,
    /// Each controller's latest passes.
    pub latest: Vec<LatestPasses>,
    /// Each controller's name, workers and pass totals.
    pub totals: Vec<(String, usize, PassCounts)>,
    /// Each object view's controller and page of objects.
    pub objects: Vec<(String, ObjectTable)>,
}

impl LiveInputs {
    /// Reads the registry for `query`.
    pub fn read(view: &Introspection, query: &LiveQuery) -> Self {
        let offset = query.page * OBJECTS_PER_PAGE;
        LiveInputs {
            queue: view.queue_report(),
            cache: view.cache_report(),
            latest: view.latest_passes(TIMELINE),
            totals: view.pass_totals(),
            objects: view.object_tables(&query.filter, offset, OBJECTS_PER_PAGE),
        }
    }
}

/// The snapshot of `inputs` for `query`.
pub fn live_snapshot(inputs: &LiveInputs, query: &LiveQuery) -> LiveSnapshot {
    let informers = inputs
        .cache
        .informers
        .iter()
        .map(|informer| LiveInformer {
            informer: informer.informer.clone(),
            objects: informer.objects,
            synced: informer.synced,
            resource_version: informer.last_resource_version.clone(),
            events: events(&inputs.cache, &informer.informer),
            watch_restarts: informer.watch_restarts,
        })
        .collect();
    let controllers =
        inputs.queue.controllers.iter().map(|c| live_controller(c, &inputs.latest, query)).collect();
    LiveSnapshot {
        now: inputs.queue.now.clone(),
        period_ms: LIVE_PERIOD.as_millis() as u64,
        leading: inputs.queue.leading,
        stages: loop_stages(inputs),
        informers,
        controllers,
        objects: inputs
            .objects
            .iter()
            .map(|(controller, table)| beside_keys(controller, table, &inputs.queue))
            .collect(),
    }
}

/// The figures of each stage of the loop, summed over the informers and controllers.
pub fn loop_stages(inputs: &LiveInputs) -> LoopStages {
    let mut stages = LoopStages { watches: inputs.cache.informers.len(), ..LoopStages::default() };
    for informer in &inputs.cache.informers {
        stages.synced += usize::from(informer.synced);
        stages.watch_restarts += informer.watch_restarts;
        stages.events += events(&inputs.cache, &informer.informer);
        stages.objects += informer.objects;
    }
    for key in inputs.queue.controllers.iter().flat_map(|c| &c.keys) {
        match key.state {
            "queued" | "waiting_for_retry_budget" => stages.queued += 1,
            "waiting" => stages.waiting += 1,
            "processing" => stages.busy += 1,
            _ => {}
        }
        // A key processing with a timer set is also waiting; it counts as busy.
    }
    for (_, workers, totals) in &inputs.totals {
        stages.workers += workers;
        stages.totals.passes += totals.passes;
        stages.totals.seconds += totals.seconds;
        stages.totals.writes += totals.writes;
    }
    stages
}

/// `table`'s rows, each beside `controller`'s view of its key in `queue`.
pub fn beside_keys(controller: &str, table: &ObjectTable, queue: &QueueReport) -> LiveObjects {
    let keys: HashMap<&str, &KeyView> = queue
        .controllers
        .iter()
        .filter(|c| c.controller == controller)
        .flat_map(|c| &c.keys)
        .map(|k| (k.key.as_str(), k))
        .collect();
    let rows = table
        .rows
        .iter()
        .map(|row| LiveObjectRow {
            key: row.key.clone(),
            cells: row.cells.clone(),
            queue: keys.get(row.key.as_str()).map(|k| (*k).clone()),
        })
        .collect();
    LiveObjects {
        controller: controller.to_owned(),
        title: table.title.clone(),
        columns: table.columns.clone(),
        matching: table.matching,
        rows,
    }
}

fn live_controller(
    controller: &crate::runtime::observe::introspection::ControllerReport,
    latest: &[LatestPasses],
    query: &LiveQuery,
) -> LiveController {
    let mut by_state = BTreeMap::new();
    for key in &controller.keys {
        *by_state.entry(key.state).or_insert(0) += 1;
    }
    let workers = controller
        .keys
        .iter()
        .filter(|k| k.state == "processing")
        .map(|k| LiveWorker {
            key: k.key.clone(),
            since: k.processing_since.clone(),
            seconds: k.processing_since_seconds_ago.unwrap_or(0.0),
        })
        .collect();
    let mut matching: Vec<&KeyView> = controller
        .keys
        .iter()
        .filter(|k| k.key.contains(&query.filter) && (query.state.is_empty() || k.state == query.state))
        .collect();
    matching.sort_by_key(|k| state_rank(k.state));
    let keys = matching.iter().skip(query.page * PAGE_SIZE).take(PAGE_SIZE).map(|k| (*k).clone()).collect();
    let passes = latest.iter().filter(|l| l.controller == controller.controller);
    let mut timeline: Vec<LivePass> = passes
        .flat_map(|l| &l.passes)
        .map(|(key, pass)| LivePass {
            key: key.clone(),
            result: pass.result.as_str().to_owned(),
            trigger: pass.trigger.clone(),
            error: pass.error.clone(),
            finished: pass.finished.clone(),
            finished_seconds_ago: pass.finished_seconds_ago,
            took_seconds: pass.took_seconds,
        })
        .collect();
    timeline.sort_by(|a, b| a.finished_seconds_ago.total_cmp(&b.finished_seconds_ago));
    timeline.truncate(TIMELINE);
    LiveController {
        controller: controller.controller.clone(),
        by_state,
        workers,
        matching: matching.len(),
        page: query.page,
        pages: matching.len().div_ceil(PAGE_SIZE).max(1),
        keys,
        timeline,
    }
}

/// The `/debug/live.json` document for the query string `query`.
pub fn snapshot_json(view: &Introspection, query: &str) -> serde_json::Result<Vec<u8>> {
    let query = LiveQuery::parse(query);
    serde_json::to_vec(&live_snapshot(&LiveInputs::read(view, &query), &query))
}

#[cfg(test)]
mod tests;
