//! The live page in a real browser: headless Chromium (Debian's `chromium`), driven over WebDriver
//! by `chromedriver` (Debian's `chromium-driver`; `scripts/test` installs both) from fantoccini,
//! loads `/debug/` from the operator running on the simulated cluster as `run` runs it, draws the
//! loop with its figures and the cluster's row (phase, primary, instances with their ages, the
//! named empty archive cell, the loop's view of its key), reflects a scale-up within a second (the
//! pass it caused, with the triggering resourceVersion, on the timeline) and then in the row (a
//! fourth instance), shows a second cluster's row and the larger cache, and opens a key's history
//! on a click. The page's screenshot is saved as `live-page.png` in cargo's per-test temporary
//! directory, and also at `$LIVE_PAGE_PNG` when set (the README's `docs/live-page.png` is made with
//! `LIVE_PAGE_PNG=docs/live-page.png scripts/test --test browser`). Every wait is bounded; a script
//! error (the page shows it in its status line) fails the test.
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

/// How long a cluster may take to converge (pods start on the simulated kubelet's timers).
const CONVERGE_LIMIT: Duration = Duration::from_secs(90);

/// The operator as `run` runs it, on a simulated cluster holding the sample cluster, Running 3/3.
pub(crate) struct Operated {
    /// The simulated cluster.
    pub cluster: TestCluster,
    /// The live page's address.
    pub page: String,
    signal: mpsc::Sender<()>,
    running: tokio::task::JoinHandle<Result<(), dbcluster_operator::runtime::manager::ManagerError>>,
}

impl Operated {
    /// Starts the simulated cluster and the operator, creates the sample, waits until it runs.
    pub async fn start() -> Operated {
        let cluster = TestCluster::start().await;
        let manager =
            run::start(cluster.sim.client(), &cluster.sim.base_url(), local_manager_config()).await.unwrap();
        let page = format!("http://{}/debug/", manager.debug_addr);
        let (signal, signals) = mpsc::channel(1);
        let running = tokio::spawn(manager.run(operator::workload, signals));
        cluster.clusters().create(&PostParams::default(), &sample()).await.unwrap();
        await_object(&cluster.clusters(), NAME, "Running 3/3", |c| {
            phase(c) == Some("Running") && ready(c) == 3
        })
        .await;
        Operated { cluster, page, signal, running }
    }

    /// Stops the operator, bounded.
    pub async fn stop(self) {
        self.signal.send(()).await.unwrap();
        within("the manager to stop", self.running).await.unwrap().unwrap();
    }
}

/// `chromedriver` on a free loopback port, ended (with its browser) when dropped.
struct Driver {
    child: Child,
    url: String,
}

impl Driver {
    /// Starts `$CHROMEDRIVER` (default `chromedriver`) and waits for the port it announces. A
    /// chromedriver that exits before announcing one (seen once on a loaded machine) is started
    /// again, up to three times.
    async fn start() -> Driver {
        for _ in 0..3 {
            if let Some(driver) = Self::try_start().await {
                return driver;
            }
        }
        panic!("chromedriver ended three times before announcing its port");
    }

    /// One start: `None` when chromedriver ends before announcing its port.
    async fn try_start() -> Option<Driver> {
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
                    return Some(rest.trim_end_matches('.').parse::<u16>().unwrap());
                }
            }
            None
        })
        .await?;
        // Keep reading its output so that it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Some(Driver { child, url: format!("http://127.0.0.1:{port}") })
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
                    "--window-size=1280,1500"],
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

/// The text of the cluster row's cell in `column` (`key` is `namespace/name`).
fn cell_script(key: &str, column: &str) -> String {
    format!(
        "const row = document.querySelector('table.objects tr.object[data-key=\"{key}\"]'); \
         const cell = row && row.querySelector('td[data-column=\"{column}\"]'); \
         return cell ? cell.innerText : null;"
    )
}

/// The figure shown in the loop picture's stage `stage` (`watch`, `cache`, `queue`, …).
fn stage_script(stage: &str) -> String {
    format!("return document.getElementById('st-{stage}').textContent;")
}

/// The objects in the loop picture's cache stage (`N objects`).
fn cached_objects(figure: &Value) -> Option<u64> {
    figure.as_str().and_then(|t| t.trim_end_matches(" objects").parse::<u64>().ok())
}

/// The loop as a picture, with a figure on each stage, and the graphs drawn from two polls;
/// returns the cache's object count.
async fn check_the_picture(browser: &Client) -> u64 {
    for stage in ["watch", "cache", "queue", "workers", "writes"] {
        let (figure, _) = await_page(browser, stage, BROWSER_LIMIT, &stage_script(stage), |v| {
            v.as_str().is_some_and(|figure| !figure.starts_with('–'))
        })
        .await;
        eprintln!("stage {stage}: {figure}");
    }
    let (cached, _) = await_page(browser, "the cache's figure", BROWSER_LIMIT, &stage_script("cache"), |v| {
        cached_objects(v).is_some()
    })
    .await;
    let graph = "return document.querySelector('#g-rate path').getAttribute('d');";
    await_page(browser, "the passes graph", BROWSER_LIMIT, graph, |v| {
        v.as_str().is_some_and(|d| d.contains('L'))
    })
    .await;
    cached_objects(&cached).unwrap()
}

/// The cluster's row: its phase, primary and instances, each figure with its age; the archive
/// cell is empty and says why; the loop's view of the key beside it.
async fn check_the_row(browser: &Client, key: &str) {
    let (phase, _) = await_page(browser, "the row's phase", BROWSER_LIMIT, &cell_script(key, "phase"), |v| {
        text_contains("Running")(v) && text_contains("3/3 ready")(v)
    })
    .await;
    assert!(phase.as_str().unwrap().contains("Ready=True since "), "{phase}");
    let (instances, _) =
        await_page(browser, "the row's instances", BROWSER_LIMIT, &cell_script(key, "instances"), |v| {
            v.as_str().is_some_and(|t| t.lines().filter(|l| l.ends_with(" ago)")).count() == 3)
        })
        .await;
    let instances = instances.as_str().unwrap();
    // The simulated kubelet runs no PostgreSQL: the operator cannot ask the instances their
    // role or lag, and the row says so rather than guessing.
    assert!(instances.contains(&format!("{NAME}-1 role unknown, ready (")), "{instances}");
    let (archive, _) = await_page(
        browser,
        "the archive cell",
        BROWSER_LIMIT,
        &cell_script(key, "archive"),
        Value::is_string,
    )
    .await;
    assert!(archive.as_str().unwrap().starts_with("not in the status"), "named, empty of data: {archive}");
    await_page(browser, "the key's queue state", BROWSER_LIMIT, &cell_script(key, "queue"), |v| {
        text_contains("idle")(v) || text_contains("waiting")(v)
    })
    .await;
    let last_pass = cell_script(key, "last pass");
    await_page(browser, "the key's last pass", BROWSER_LIMIT, &last_pass, text_contains(" ago, took ")).await;
}

/// A click on the key's row opens its history, which holds `trigger`'s pass with its causes and
/// writes; the history is closed again.
async fn check_the_history(browser: &Client, key: &str, trigger: &str) {
    let row = format!("#controllers tr.key[data-key=\"{key}\"]");
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
    let (shown, _) = await_page(browser, "the key's history", BROWSER_LIMIT, history, |v| {
        text_contains(&format!("History of {key}"))(v) && text_contains(trigger)(v)
    })
    .await;
    let shown = shown.as_str().unwrap();
    assert!(shown.contains(&format!("apps/StatefulSet {key}")), "the passes' writes: {shown}");
    let passes = browser.find_all(Locator::Css("#history tr.pass")).await.unwrap();
    assert!(passes.len() >= 2, "the provisioning passes and the scale-up's: {shown}");
    browser.find(Locator::Id("close-history")).await.unwrap().click().await.unwrap();
}

/// Saves the page's screenshot in cargo's temporary directory and at `$LIVE_PAGE_PNG` if set.
async fn save_screenshot(browser: &Client) {
    let png = browser.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("live-page.png");
    std::fs::write(&path, &png).unwrap();
    eprintln!("screenshot: {}", path.display());
    if let Ok(copy) = std::env::var("LIVE_PAGE_PNG") {
        std::fs::write(&copy, &png).unwrap_or_else(|e| panic!("{copy}: {e}"));
        eprintln!("screenshot copied to {copy}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_page_draws_the_loop_shows_the_clusters_follows_changes_and_opens_a_keys_history() {
    let operated = Operated::start().await;
    let driver = Driver::start().await;
    let browser = driver.browser().await;
    within_limit("the page to load", BROWSER_LIMIT, browser.goto(&operated.page)).await.unwrap();

    // The cluster's key, its informers and the page's status line.
    let key = format!("default/{NAME}");
    await_page(&browser, "the cluster's key", BROWSER_LIMIT, PAGE_TEXT, text_contains(&key)).await;
    let (text, _) = await_page(&browser, "the informers", BROWSER_LIMIT, PAGE_TEXT, |v| {
        text_contains("databaseclusters")(v) && text_contains("statefulsets")(v)
    })
    .await;
    let text = text.as_str().unwrap().to_owned();
    assert!(text.contains("updated "), "the status line: {text}");
    assert!(!text.contains("disconnected"), "{text}");
    let objects = check_the_picture(&browser).await;
    check_the_row(&browser, &key).await;

    // A scale-up: the pass it triggers is on the page within a second, the fourth instance in the
    // row once the operator observes it.
    let scaled = operated
        .cluster
        .clusters()
        .patch(NAME, &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 4}})))
        .await
        .unwrap();
    let rv = scaled.metadata.resource_version.unwrap();
    let trigger = format!("DatabaseCluster {key} modified rv={rv}");
    let (_, took) =
        await_page(&browser, "the scale-up's pass", LIVE_LIMIT, PAGE_TEXT, text_contains(&trigger)).await;
    eprintln!("the scale-up's pass was on the page {took:?} after the patch");
    let fourth = format!("{NAME}-3 role unknown, ready (");
    let instances = cell_script(&key, "instances");
    let (_, took) =
        await_page(&browser, "the fourth instance", CONVERGE_LIMIT, &instances, text_contains(&fourth)).await;
    eprintln!("the fourth instance was in the row {took:?} later");

    // A second cluster: its row, and more objects in the cache.
    let mut second = sample();
    second.metadata.name = Some("analytics".into());
    operated.cluster.clusters().create(&PostParams::default(), &second).await.unwrap();
    let phase = cell_script("default/analytics", "phase");
    await_page(&browser, "the second cluster's row", BROWSER_LIMIT, &phase, Value::is_string).await;
    await_page(&browser, "the larger cache", BROWSER_LIMIT, &stage_script("cache"), |v| {
        cached_objects(v).is_some_and(|now| now > objects)
    })
    .await;

    check_the_history(&browser, &key, &trigger).await;
    // The page reports its own script errors in its status line: there were none.
    let (text, _) = await_page(&browser, "the page's text", BROWSER_LIMIT, PAGE_TEXT, Value::is_string).await;
    assert!(!text.as_str().unwrap().contains("script error"), "{text}");
    save_screenshot(&browser).await;

    within_limit("the browser to close", BROWSER_LIMIT, browser.close()).await.unwrap();
    drop(driver);
    operated.stop().await;
}
