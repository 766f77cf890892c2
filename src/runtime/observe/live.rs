//! The live page of the loop: `GET /debug/` serves one self-contained HTML page (its script and
//! style are in the binary; nothing is fetched from elsewhere), which follows `GET /debug/live`, a
//! server-sent-events stream of [`LiveSnapshot`]s every [`LIVE_PERIOD`]: the informers (objects,
//! resourceVersion, events per second, watch restarts), each controller's keys counted by state,
//! the workers (the key each processes, for how long), one page of keys with their timers and
//! retries, and a timeline of the latest passes with their triggers and results. Clicking a key
//! opens its history from `/debug/queue/<namespace>/<name>`.
//!
//! It stays usable with many keys: the counts are aggregated, the keys come one page
//! ([`PAGE_SIZE`]) at a time, filtered by a substring and a state (`?filter=…&state=…&page=…`), and
//! the timeline holds the [`TIMELINE`] latest passes (of any keys) only. The snapshot is a pure
//! function of the `/debug/queue` and `/debug/cache` reports and the latest passes
//! ([`live_snapshot`]).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use http_body_util::StreamBody;
use hyper::body::Frame;
use serde::Serialize;
use tokio::time::Instant;

use crate::runtime::observe::introspection::{
    CacheReport, Introspection, KeyView, LatestPasses, QueueReport,
};

/// The page, as served.
///
/// Tests: `tests/live.rs` (the stream over HTTP) and the unit tests below (paging, 10 000 keys).
pub const PAGE_HTML: &str = include_str!("live.html");

/// How often the stream sends a snapshot.
pub const LIVE_PERIOD: Duration = Duration::from_millis(250);

/// Keys per page.
pub const PAGE_SIZE: usize = 100;

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

/// One snapshot of the stream.
#[derive(Debug, Clone, Serialize)]
pub struct LiveSnapshot {
    /// When it was taken (RFC 3339).
    pub now: String,
    /// Whether this replica leads, with leader election.
    pub leading: Option<bool>,
    /// One entry per informer.
    pub informers: Vec<LiveInformer>,
    /// One entry per controller.
    pub controllers: Vec<LiveController>,
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
    /// Changes applied per second since the previous snapshot.
    pub events_per_second: f64,
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

/// The events an informer applied so far, to turn into a rate.
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

/// The snapshot of `queue`, `cache` and each controller's `latest` passes for `query`;
/// `previous` (the last snapshot's cache report and how long ago it was taken) gives the events
/// per second.
pub fn live_snapshot(
    queue: &QueueReport,
    cache: &CacheReport,
    latest: &[LatestPasses],
    previous: Option<(&CacheReport, Duration)>,
    query: &LiveQuery,
) -> LiveSnapshot {
    let informers = cache
        .informers
        .iter()
        .map(|informer| {
            let rate = previous.map_or(0.0, |(before, elapsed)| {
                let delta =
                    events(cache, &informer.informer).saturating_sub(events(before, &informer.informer));
                if elapsed.is_zero() { 0.0 } else { delta as f64 / elapsed.as_secs_f64() }
            });
            LiveInformer {
                informer: informer.informer.clone(),
                objects: informer.objects,
                synced: informer.synced,
                resource_version: informer.last_resource_version.clone(),
                events_per_second: (rate * 10.0).round() / 10.0,
                watch_restarts: informer.watch_restarts,
            }
        })
        .collect();
    let controllers = queue
        .controllers
        .iter()
        .map(|controller| {
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
                .filter(|k| {
                    k.key.contains(&query.filter) && (query.state.is_empty() || k.state == query.state)
                })
                .collect();
            matching.sort_by_key(|k| state_rank(k.state));
            let keys =
                matching.iter().skip(query.page * PAGE_SIZE).take(PAGE_SIZE).map(|k| (*k).clone()).collect();
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
        })
        .collect();
    LiveSnapshot { now: queue.now.clone(), leading: queue.leading, informers, controllers }
}

/// The `/debug/live` body: a snapshot at once, then one every [`LIVE_PERIOD`], each as an SSE
/// `data:` line, until the client goes away.
pub fn live_stream(
    view: Introspection,
    query: LiveQuery,
) -> StreamBody<impl Stream<Item = Result<Frame<Bytes>, Infallible>>> {
    let start: Option<(CacheReport, Instant)> = None;
    let stream = futures::stream::unfold((view, query, start), |(view, query, previous)| async move {
        if previous.is_some() {
            tokio::time::sleep(LIVE_PERIOD).await;
        }
        let cache = view.cache_report();
        let now = Instant::now();
        let snapshot = live_snapshot(
            &view.queue_report(),
            &cache,
            &view.latest_passes(TIMELINE),
            previous.as_ref().map(|(before, at)| (before, now - *at)),
            &query,
        );
        let json = serde_json::to_string(&snapshot).unwrap_or_default();
        let frame = Frame::data(Bytes::from(format!("data: {json}\n\n")));
        Some((Ok(frame), (view, query, Some((cache, now)))))
    });
    StreamBody::new(stream)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::controller::PassResult;
    use crate::runtime::controller::causes::CauseLog;
    use crate::runtime::observe::introspection::{ControllerReport, PassView};

    fn key(i: usize, state: &'static str) -> KeyView {
        KeyView {
            key: format!("team-{}/pg-{i}", i % 10),
            state,
            queued_since: None,
            queued_since_seconds_ago: None,
            processing_since: None,
            processing_since_seconds_ago: (state == "processing").then_some(1.5),
            runs_again: false,
            waiting_until: None,
            waiting_seconds_left: (state == "waiting").then_some(9.0),
            requeues: 0,
            low_priority: false,
            pending_causes: CauseLog::default(),
            last_pass: Some(PassView {
                trigger: format!("\"ConfigMap team/pg-{i} modified rv={i}\""),
                causes: CauseLog::default(),
                started: String::new(),
                result: PassResult::Success,
                error: None,
                finished: String::new(),
                finished_seconds_ago: i as f64,
                took_seconds: 0.001,
                writes: Box::default(),
                stale_cache_wait_seconds: None,
                stale_cache_wait_timed_out: false,
                hot_loop: false,
            }),
        }
    }

    fn report(n: usize) -> QueueReport {
        let states = ["idle", "waiting", "queued", "processing"];
        let keys = (0..n).map(|i| key(i, states[i % states.len()])).collect();
        QueueReport {
            now: "2026-01-01T00:00:00Z".into(),
            leading: Some(true),
            controllers: vec![ControllerReport { controller: "databasecluster".into(), keys }],
        }
    }

    /// Each key's last pass, as the controller's latest passes.
    fn latest(queue: &QueueReport) -> Vec<LatestPasses> {
        let keys = &queue.controllers[0].keys;
        let passes = keys.iter().filter_map(|k| Some((k.key.clone(), k.last_pass.clone()?))).collect();
        vec![LatestPasses { controller: "databasecluster".into(), passes }]
    }

    #[test]
    fn ten_thousand_keys_are_counted_paged_and_the_timeline_bounded() {
        let queue = report(10_000);
        let cache = CacheReport { informers: Vec::new() };
        let snapshot = live_snapshot(&queue, &cache, &latest(&queue), None, &LiveQuery::default());
        let controller = &snapshot.controllers[0];
        assert_eq!(controller.by_state.values().sum::<usize>(), 10_000);
        assert_eq!(controller.by_state["processing"], 2_500);
        assert_eq!((controller.matching, controller.keys.len()), (10_000, PAGE_SIZE));
        assert_eq!(controller.pages, 100);
        assert!(controller.keys.iter().all(|k| k.state == "processing"), "processing keys come first");
        assert_eq!(controller.timeline.len(), TIMELINE);
        assert_eq!(controller.timeline[0].key, "team-0/pg-0", "newest first");
        let bytes = serde_json::to_vec(&snapshot).unwrap().len();
        assert!(bytes < 400_000, "a snapshot of 10 000 keys is {bytes} bytes");
    }

    #[test]
    fn a_query_filters_by_substring_and_state_and_pages() {
        let queue = report(1_000);
        let cache = CacheReport { informers: Vec::new() };
        let query = LiveQuery::parse("filter=team-3%2Fpg-&state=waiting&page=0");
        assert_eq!((query.filter.as_str(), query.state.as_str()), ("team-3/pg-", "waiting"));
        let snapshot = live_snapshot(&queue, &cache, &latest(&queue), None, &query);
        let controller = &snapshot.controllers[0];
        assert!(controller.keys.iter().all(|k| k.key.starts_with("team-3/") && k.state == "waiting"));
        assert_eq!((controller.matching, controller.pages), (50, 1));
        let second = live_snapshot(
            &queue,
            &cache,
            &latest(&queue),
            None,
            &LiveQuery { page: 9, ..LiveQuery::default() },
        );
        assert_eq!(second.controllers[0].keys.len(), PAGE_SIZE);
        let past = live_snapshot(
            &queue,
            &cache,
            &latest(&queue),
            None,
            &LiveQuery { page: 10, ..LiveQuery::default() },
        );
        assert!(past.controllers[0].keys.is_empty());
        assert_eq!(LiveQuery::parse("page=x&filter=a+b%zz&other").filter, "a b%zz");
    }
}
