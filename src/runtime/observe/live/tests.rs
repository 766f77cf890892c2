//! The live snapshot as a pure function: paging 10 000 keys, filtering, the loop's figures, the
//! objects beside their keys, and the page's own promises (self-contained, no open connection).

use super::*;
use crate::runtime::controller::PassResult;
use crate::runtime::controller::causes::CauseLog;
use crate::runtime::observe::introspection::{
    ControllerReport, EventCounts, InformerReport, ObjectRow, PassView, Tone,
};

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

fn informer(name: &str, objects: usize, events: u64, synced: bool) -> InformerReport {
    InformerReport {
        informer: name.into(),
        objects,
        synced,
        last_resource_version: Some("7".into()),
        initial_list: None,
        relists: 0,
        watch_restarts: 1,
        gone: 0,
        failures: 0,
        events: EventCounts { added: events, updated: 1, deleted: 0, bookmarks: 5 },
        malformed_skipped: 0,
        handler_panics: 0,
    }
}

fn inputs(queue: QueueReport) -> LiveInputs {
    let latest = latest(&queue);
    LiveInputs {
        queue,
        cache: CacheReport { informers: Vec::new() },
        latest,
        totals: Vec::new(),
        objects: Vec::new(),
    }
}

#[test]
fn ten_thousand_keys_are_counted_paged_and_the_timeline_bounded() {
    let snapshot = live_snapshot(&inputs(report(10_000)), &LiveQuery::default());
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
    let inputs = inputs(report(1_000));
    let query = LiveQuery::parse("filter=team-3%2Fpg-&state=waiting&page=0");
    assert_eq!((query.filter.as_str(), query.state.as_str()), ("team-3/pg-", "waiting"));
    let snapshot = live_snapshot(&inputs, &query);
    let controller = &snapshot.controllers[0];
    assert!(controller.keys.iter().all(|k| k.key.starts_with("team-3/") && k.state == "waiting"));
    assert_eq!((controller.matching, controller.pages), (50, 1));
    let second = live_snapshot(&inputs, &LiveQuery { page: 9, ..LiveQuery::default() });
    assert_eq!(second.controllers[0].keys.len(), PAGE_SIZE);
    let past = live_snapshot(&inputs, &LiveQuery { page: 10, ..LiveQuery::default() });
    assert!(past.controllers[0].keys.is_empty());
    assert_eq!(LiveQuery::parse("page=x&filter=a+b%zz&other").filter, "a b%zz");
}

#[test]
fn the_loops_stages_sum_the_informers_the_queue_and_the_passes() {
    let mut inputs = inputs(report(8));
    inputs.cache.informers = vec![informer("databaseclusters", 2, 10, true), informer("pods", 6, 30, false)];
    let totals = PassCounts { passes: 40, seconds: 0.5, writes: 12 };
    inputs.totals = vec![("databasecluster".into(), 4, totals), ("other".into(), 2, totals)];
    let stages = loop_stages(&inputs);
    let expected = LoopStages {
        watches: 2,
        synced: 1,
        watch_restarts: 2,
        events: 42,
        objects: 8,
        queued: 2,
        waiting: 2,
        busy: 2,
        workers: 6,
        totals: PassCounts { passes: 80, seconds: 1.0, writes: 24 },
    };
    assert_eq!(stages, expected);
    let snapshot = live_snapshot(&inputs, &LiveQuery::default());
    assert_eq!(snapshot.informers[1].events, 31, "added + updated + deleted, not bookmarks");
    assert_eq!(snapshot.period_ms, 500);
}

#[test]
fn each_object_is_shown_beside_its_key_and_an_unknown_key_beside_nothing() {
    let queue = report(4);
    let table = ObjectTable {
        title: "DatabaseClusters".into(),
        columns: vec!["phase".into(), "archive".into()],
        matching: 2,
        rows: vec![
            ObjectRow {
                key: "team-1/pg-1".into(),
                cells: vec![Cell::text("Running").tone(Tone::Good), Cell::absent("not in the status")],
            },
            ObjectRow { key: "team-9/new".into(), cells: vec![Cell::text("Provisioning"), Cell::default()] },
        ],
    };
    let objects = beside_keys("databasecluster", &table, &queue);
    assert_eq!((objects.title.as_str(), objects.matching, objects.rows.len()), ("DatabaseClusters", 2, 2));
    let known = objects.rows[0].queue.as_ref().expect("the controller knows team-1/pg-1");
    assert_eq!((known.key.as_str(), known.state), ("team-1/pg-1", "waiting"));
    assert!(objects.rows[1].queue.is_none());
    assert!(beside_keys("another", &table, &queue).rows[0].queue.is_none(), "another controller's keys");
}

#[test]
fn the_page_is_self_contained_and_never_holds_a_request_open() {
    for outside in ["http://", "https://", "src=\"//", "<link", "@import"] {
        assert!(!PAGE_HTML.contains(outside), "the page fetches nothing from elsewhere ({outside})");
    }
    for open in ["EventSource", "setInterval", "WebSocket"] {
        assert!(
            !PAGE_HTML.contains(open),
            "{open} would keep virtual time from expiring or a connection open"
        );
    }
    assert!(PAGE_HTML.contains("fetch(\"live.json?\""), "the page polls the snapshot");
    assert!(PAGE_HTML.contains("document.hidden"), "the page stops polling while hidden");
}
