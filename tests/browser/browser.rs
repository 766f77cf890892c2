//! The live page in a real browser: headless Chromium (Debian's `chromium`), driven over WebDriver
//! by `chromedriver` (Debian's `chromium-driver`; `scripts/test` installs both) from fantoccini,
//! loads `/debug/` from the operator running on the simulated cluster as `run` runs it, shows the
//! cluster's key, reflects a scale-up within a second (the pass it caused, with the triggering
//! resourceVersion, on the timeline), and opens the key's history on a click. The page's
//! screenshot is saved as `debug-page.png` in cargo's per-test temporary directory (the README's
//! `docs/debug-page.png` is a copy). Every wait is bounded; a script error (the page shows it in
//! its status line) fails the test.
#![cfg(feature = "sim")]

use crate::common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use dbcluster_operator::cli::run;
use dbcluster_operator::databasecluster::controller::operator;
use fantoccini::{Client, ClientBuilder, Locator};
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

const NAME: &str = "production-postgres";

/// How long the browser may take to start and to load the page.
const BROWSER_LIMIT: Duration = Duration::from_secs(60);

/// How soon the page must show a change.
const LIVE_LIMIT: Duration = Duration::from_secs(1);

/// `chromedriver` on a free loopback port, ended (with its browser) when dropped.
struct Driver {
    child: Child,
    url: String,
}

impl Driver {
    /// Starts `$CHROMEDRIVER` (default `chromedriver`) and waits for the port it announces.
    async fn start() -> Driver {
        let program = std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into());
        let mut child = Command::new(&program)
            .arg("--port=0")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("{program}: {e} (scripts/test installs chromium-driver)"));
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let port = within_limit("chromedriver's port", BROWSER_LIMIT, async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Some(rest) = line.split("started successfully on port ").nth(1) {
                    return rest.trim_end_matches('.').parse::<u16>().unwrap();
                }
            }
            panic!("chromedriver ended before announcing its port");
        })
        .await;
        // Keep reading its output so that it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Driver { child, url: format!("http://127.0.0.1:{port}") }
    }

    /// A headless Chromium session (`$CHROMIUM`, default Debian's `/usr/bin/chromium`).
    async fn browser(&self) -> Client {
        let binary = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
        let capabilities = json!({
            "browserName": "chrome",
            "goog:loggingPrefs": {"browser": "ALL"},
            "goog:chromeOptions": {
                "binary": binary,
                // As root in a container there is no sandbox to set up.
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--window-size=1280,1400"],
            },
        });
        let Value::Object(capabilities) = capabilities else { unreachable!() };
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        within_limit(
            "a Chromium session",
            BROWSER_LIMIT,
            ClientBuilder::new(connector).capabilities(capabilities).connect(&self.url),
        )
        .await
        .expect("chromedriver starts a headless Chromium session")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// `script`'s value in the page, polled every 20 ms until `done` accepts it, for at most `limit`;
/// returns it with how long it took.
async fn await_page(
    browser: &Client,
    what: &str,
    limit: Duration,
    script: &str,
    done: impl Fn(&Value) -> bool,
) -> (Value, Duration) {
    let start = Instant::now();
    let value = eventually_every(what, limit, Duration::from_millis(20), || async {
        let value = browser.execute(script, Vec::new()).await.expect("the script runs");
        if done(&value) { Ok(value) } else { Err(value) }
    })
    .await;
    (value, start.elapsed())
}

/// The page's text (what a reader sees).
const PAGE_TEXT: &str = "return document.body.innerText;";

fn text_contains(needle: &str) -> impl Fn(&Value) -> bool + '_ {
    move |value| value.as_str().is_some_and(|text| text.contains(needle))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_page_shows_the_cluster_follows_a_scale_up_and_opens_a_keys_history() {
    let cluster = TestCluster::start().await;
    let config = local_manager_config();
    let manager = run::start(cluster.sim.client(), &cluster.sim.base_url(), config).await.unwrap();
    let page = format!("http://{}/debug/", manager.debug_addr);
    let (signal, signals) = mpsc::channel(1);
    let running = tokio::spawn(manager.run(operator::workload, signals));
    cluster.clusters().create(&PostParams::default(), &sample()).await.unwrap();
    await_object(&cluster.clusters(), NAME, "Running 3/3", |c| phase(c) == Some("Running") && ready(c) == 3)
        .await;

    let driver = Driver::start().await;
    let browser = driver.browser().await;
    within_limit("the page to load", BROWSER_LIMIT, browser.goto(&page)).await.unwrap();

    // The cluster's key, its informers and the stream's heartbeat.
    let key = format!("default/{NAME}");
    await_page(&browser, "the cluster's key", BROWSER_LIMIT, PAGE_TEXT, text_contains(&key)).await;
    let (text, _) = await_page(&browser, "the informers", BROWSER_LIMIT, PAGE_TEXT, |v| {
        text_contains("databaseclusters")(v) && text_contains("statefulsets")(v)
    })
    .await;
    let text = text.as_str().unwrap().to_owned();
    assert!(text.contains("updated "), "the status line: {text}");
    assert!(!text.contains("disconnected"), "{text}");

    // A scale-up: the pass it triggers is on the page within a second.
    let scaled = cluster
        .clusters()
        .patch(NAME, &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 4}})))
        .await
        .unwrap();
    let rv = scaled.metadata.resource_version.unwrap();
    let trigger = format!("DatabaseCluster {key} modified rv={rv}");
    let (_, took) =
        await_page(&browser, "the scale-up's pass", LIVE_LIMIT, PAGE_TEXT, text_contains(&trigger)).await;
    eprintln!("the scale-up's pass was on the page {took:?} after the patch");

    // A click on the key's row opens its history: its passes, with their causes and writes.
    let row = format!("tr.key[data-key=\"{key}\"]");
    eventually("a click on the key's row", BROWSER_LIMIT, || async {
        // The row is re-rendered with each snapshot: a click may land on a replaced element.
        match browser.find(Locator::Css(&row)).await {
            Ok(element) => element.click().await.map(|_| ()).map_err(|e| e.to_string()),
            Err(error) => Err(error.to_string()),
        }
    })
    .await;
    let history = "const box = document.getElementById('history'); \
        return box.offsetParent === null ? '' : box.innerText;";
    let (shown, _) = await_page(&browser, "the key's history", BROWSER_LIMIT, history, |v| {
        text_contains(&format!("History of {key}"))(v) && text_contains(&trigger)(v)
    })
    .await;
    let shown = shown.as_str().unwrap();
    assert!(shown.contains(&format!("apps/StatefulSet {key}")), "the passes' writes: {shown}");
    let passes = browser.find_all(Locator::Css("#history tr.pass")).await.unwrap();
    assert!(passes.len() >= 2, "the provisioning passes and the scale-up's: {shown}");

    // The page reports its own script errors in its status line: there were none.
    let (text, _) = await_page(&browser, "the page's text", BROWSER_LIMIT, PAGE_TEXT, Value::is_string).await;
    assert!(!text.as_str().unwrap().contains("script error"), "{text}");

    let png = browser.screenshot().await.unwrap();
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("debug-page.png");
    std::fs::write(&path, &png).unwrap();
    eprintln!("screenshot: {}", path.display());
    assert!(png.starts_with(b"\x89PNG"), "a PNG");

    within_limit("the browser to close", BROWSER_LIMIT, browser.close()).await.unwrap();
    drop(driver);
    signal.send(()).await.unwrap();
    within("the manager to stop", running).await.unwrap().unwrap();
}
