//! The live page lets Chromium's virtual time run out: `chromium --headless
//! --virtual-time-budget=5000 --dump-dom <page>` returns, bounded in real time, with the page
//! rendered from the snapshots it polled (the loop's figures, the cluster's row).
//!
//! Chromium holds virtual time while a network request is pending. The page used to follow a
//! server-sent-events stream, a request that never ends, so the budget never ran out and the
//! command never returned; a timer that repeats (the page's ticks) does not hold it. The page now
//! polls with one short request at a time, chained by timers.
#![cfg(feature = "sim")]

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use tokio::process::Command;

use crate::browser::Operated;
use crate::common;

/// How long, in real time, Chromium may take to start, spend the page's 5 s of virtual time and
/// print the DOM (it takes a few seconds; a page that holds virtual time never returns).
const DUMP_LIMIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_virtual_time_budget_runs_out_and_the_dumped_page_shows_the_loop_and_the_cluster() {
    let operated = Operated::start().await;
    let binary = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let profile = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut chromium = Command::new(&binary);
    chromium
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(["--virtual-time-budget=5000", "--dump-dom", &operated.page])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let output = within_limit("chromium --virtual-time-budget=5000 --dump-dom", DUMP_LIMIT, async {
        chromium.output().await.unwrap_or_else(|e| panic!("{binary}: {e} (scripts/test installs chromium)"))
    })
    .await;
    let took = started.elapsed();
    eprintln!("chromium spent the virtual time budget and dumped the page in {took:?}");
    assert!(output.status.success(), "chromium: {}", output.status);
    let dom = String::from_utf8_lossy(&output.stdout);
    let status = dom.split(r#"id="status""#).nth(1).and_then(|rest| rest.split('>').nth(1));
    let status = status.and_then(|text| text.split('<').next()).unwrap_or_default();
    assert!(status.starts_with("updated "), "the page polled and rendered, no script error: {status}");
    assert!(dom.contains(r#"data-key="default/production-postgres""#), "the cluster's row: {dom}");
    let cache = dom.split(r#"id="st-cache">"#).nth(1).and_then(|rest| rest.split('<').next());
    assert!(cache.is_some_and(|figure| figure.ends_with(" objects")), "the cache's figure: {cache:?}");
    operated.stop().await;
}
