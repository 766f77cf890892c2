//! The list + watch loop that keeps a local view of one kind current with the API server.
//!
//! A [`Reflector`] turns the API server's responses into a sequence of [`ReflectorEvent`]s for a
//! sink (the informer, which applies them to its cache):
//!
//! 1. **Initial list.** First a *streaming list*: a watch with `sendInitialEvents=true`,
//!    `resourceVersionMatch=NotOlderThan` and bookmarks, whose synthetic ADDED events are the list
//!    and whose bookmark annotated `k8s.io/initial-events-end` closes it; the same stream then goes on
//!    as the watch. A server that refuses it (400/422, as Kubernetes 1.27–1.31 do with the
//!    feature off) or ignores it (a plain bookmark arrives before the closing one, as from servers
//!    before 1.27) gets a paginated LIST (`limit=500`) from then on. The choice is logged once.
//! 2. **Watch** from the last resourceVersion with bookmarks; bookmarks advance the resourceVersion.
//!    The server ending a watch at its timeout is normal: the reflector watches again from the same
//!    resourceVersion, without relisting.
//! 3. **410 Gone** (on a watch, or on a list's continue token) → relist at once. The sink reconciles
//!    the relist against what it holds (see `cache::Relist`).
//! 4. **Errors** (connection refused, 5xx, 429, a broken stream, a watch that ends before saying
//!    anything) → after a [`Backoff`] delay (0.8 s → 30 s, factor 2, jitter, reset after 2 minutes
//!    without failure) watch again from the last resourceVersion delivered, or list again if the
//!    list had not finished. A 429's `Retry-After` is honoured as a lower bound. (kube's default
//!    client retries 429/503/504 itself first; build the client with `default_retry = false` to
//!    leave those to this schedule.)
//! 5. **A malformed object** in a stream or a list page is logged, counted and skipped.
//!
//! Unless told otherwise, `metadata.managedFields` is cut out of the raw JSON before decoding
//! ([`elide_managed_fields`]): it is a third of a typical object's bytes and most of its
//! allocations, and the cache would drop it anyway.
//!
//! Watch lines are framed and decoded here rather than by kube's `Api::watch`, so that one object
//! that fails to decode costs one event, not the stream. Everything timed goes through
//! `tokio::time`.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, Status};
use kube::client::Body;
use kube::{Api, Client, Resource};
use serde::de::{DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use tokio::time::Instant;

/// The annotation on the bookmark that ends a streaming list's initial events.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// What the reflector tells its sink, in the order the server said it.
#[derive(Debug, Clone, PartialEq)]
pub enum ReflectorEvent<K> {
    /// A full list begins; `Listed` events follow, then `RelistDone`.
    RelistStarted,
    /// One object of the list in progress.
    Listed(K),
    /// The list is complete: objects held but not listed since `RelistStarted` are gone.
    RelistDone {
        /// The resourceVersion the list is consistent with.
        resource_version: String,
    },
    /// A watch saw an object created or changed.
    Applied(K),
    /// A watch saw an object deleted; this is its final state.
    Deleted(K),
    /// The server confirmed the view is current up to this resourceVersion.
    Bookmark {
        /// The bookmark's resourceVersion.
        resource_version: String,
    },
}

/// How the first list is obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitialList {
    /// Try a streaming list (`sendInitialEvents`), and fall back to a paginated LIST if refused.
    StreamingWithFallback,
    /// Paginated LIST only.
    Paginated,
}

/// Exponential backoff settings for failed requests (client-go's reflector numbers by default).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackoffConfig {
    /// The first delay.
    pub initial: Duration,
    /// The largest delay before jitter.
    pub max: Duration,
    /// Each failure multiplies the delay by this.
    pub factor: f64,
    /// A delay `d` becomes a random value in `[d, d × (1 + jitter))`; 0 disables jitter.
    pub jitter: f64,
    /// After this long without a failure the next delay starts from `initial` again.
    pub reset_after: Duration,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(800),
            max: Duration::from_secs(30),
            factor: 2.0,
            jitter: 1.0,
            reset_after: Duration::from_secs(120),
        }
    }
}

/// Delays between retries of a failing request: exponential with jitter, reset after a quiet spell.
#[derive(Debug, Clone)]
pub struct Backoff {
    config: BackoffConfig,
    next: Duration,
    /// When the last delay handed out ends: failures measure "healthy for" from here.
    quiet_since: Option<Instant>,
}

impl Backoff {
    /// A backoff whose first delay is `config.initial`.
    pub fn new(config: BackoffConfig) -> Self {
        Self { config, next: config.initial, quiet_since: None }
    }

    /// The delay before the next retry, for a failure observed at `now`; `unit` (in `[0, 1)`)
    /// draws the jitter.
    pub fn next_delay(&mut self, now: Instant, unit: f64) -> Duration {
        if self
            .quiet_since
            .is_some_and(|since| now.saturating_duration_since(since) >= self.config.reset_after)
        {
            self.next = self.config.initial;
        }
        let base = self.next;
        self.next = base.mul_f64(self.config.factor).min(self.config.max);
        let delay = base.mul_f64(1.0 + self.config.jitter * unit.clamp(0.0, 1.0));
        self.quiet_since = Some(now + delay);
        delay
    }
}

/// Settings of one reflector.
#[derive(Debug, Clone)]
pub struct ReflectorConfig {
    /// Streaming list first, or paginated LIST only.
    pub initial_list: InitialList,
    /// Objects per LIST page.
    pub page_size: u32,
    /// The server-side watch timeout asked for (`timeoutSeconds`), before jitter.
    pub watch_timeout: Duration,
    /// Each watch asks for `watch_timeout × (1 + watch_timeout_jitter × random[0, 1))`, so that many
    /// informers do not re-watch in step (client-go: 5–10 minutes).
    pub watch_timeout_jitter: f64,
    /// Delays between retries of failed requests.
    pub backoff: BackoffConfig,
    /// Restricts the objects to those matching this label selector.
    pub label_selector: Option<String>,
    /// Drop `metadata.managedFields` from the raw JSON before decoding (see
    /// [`elide_managed_fields`]): faster, and the cache's default transform drops them anyway.
    pub elide_managed_fields: bool,
}

impl Default for ReflectorConfig {
    fn default() -> Self {
        Self {
            initial_list: InitialList::StreamingWithFallback,
            page_size: 500,
            watch_timeout: Duration::from_secs(300),
            watch_timeout_jitter: 1.0,
            backoff: BackoffConfig::default(),
            label_selector: None,
            elide_managed_fields: true,
        }
    }
}

const MODE_STREAMING: u8 = 1;
const MODE_PAGINATED: u8 = 2;

/// Counters the reflector keeps for metrics and the debug endpoint.
#[derive(Debug, Default)]
pub struct ReflectorStats {
    /// Full lists started (the first one included).
    pub relists: AtomicU64,
    /// Watches started again from a known resourceVersion after the previous one ended.
    pub watch_restarts: AtomicU64,
    /// `410 Gone` answers (on a watch or on a list continue token).
    pub gone: AtomicU64,
    /// Objects that failed to decode and were skipped.
    pub malformed_skipped: AtomicU64,
    /// Failed requests or streams that were retried after a backoff delay.
    pub failures: AtomicU64,
    /// The initial-list method in use: 0 not yet known, else `MODE_STREAMING` or `MODE_PAGINATED`.
    mode: AtomicU8,
    /// The last backoff delay, in milliseconds (stored before `failures` is incremented).
    pub last_backoff_ms: AtomicU64,
    /// Ticks whenever a figure changes, so a reader can await a condition on them.
    changes: tokio::sync::watch::Sender<u64>,
}

impl ReflectorStats {
    /// How the reflector lists, once known.
    pub fn initial_list_mode(&self) -> Option<InitialList> {
        match self.mode.load(Ordering::Relaxed) {
            MODE_STREAMING => Some(InitialList::StreamingWithFallback),
            MODE_PAGINATED => Some(InitialList::Paginated),
            _ => None,
        }
    }

    /// Adds one to `counter` and signals a change.
    pub fn bump(&self, counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
        self.touch();
    }

    /// Signals that a figure (this struct's or its owner's) changed.
    pub fn touch(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver that sees every later change signal.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

/// Why a request or a stream failed.
#[derive(Debug, thiserror::Error)]
pub enum ReflectorError {
    /// The request could not be sent or no response arrived (connection refused, reset, …).
    #[error("request GET {url} failed: {source}")]
    Transport {
        /// The request's path and query.
        url: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// The server answered with an error status.
    #[error("GET {url} answered {code} {reason}: {message}")]
    Api {
        /// The request's path and query.
        url: String,
        /// HTTP status code (or the Status object's code for an ERROR watch event).
        code: u16,
        /// The Status reason (`Expired`, `TooManyRequests`, …), if given.
        reason: String,
        /// The Status message, if given.
        message: String,
        /// The `Retry-After` header, if given.
        retry_after: Option<Duration>,
    },
    /// The response body broke off or stalled.
    #[error("reading the response of GET {url} failed: {message}")]
    Body {
        /// The request's path and query.
        url: String,
        /// What went wrong.
        message: String,
    },
    /// A list response was not a list.
    #[error("the response of GET {url} is not a list: {source}")]
    NotAList {
        /// The request's path and query.
        url: String,
        /// The decoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// The watch ended before the streaming list's closing bookmark.
    #[error("the streaming list from {url} ended before its initial-events-end bookmark")]
    StreamingListCut {
        /// The request's path and query.
        url: String,
    },
    /// A bookmark without the `k8s.io/initial-events-end` annotation came during the initial
    /// events: the server ignores `sendInitialEvents` (as servers before 1.27 do).
    #[error("{url} ignores sendInitialEvents: a plain bookmark came before the initial-events-end one")]
    StreamingListIgnored {
        /// The request's path and query.
        url: String,
    },
    /// The watch ended at once without a single event: treated as a failure so a server that
    /// keeps closing watches is not hammered.
    #[error("the watch {url} ended at once without an event")]
    EmptyWatch {
        /// The request's path and query.
        url: String,
    },
}

impl ReflectorError {
    fn code(&self) -> Option<u16> {
        match self {
            Self::Api { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether the server said the resourceVersion (or continue token) is too old: relist.
    pub fn is_gone(&self) -> bool {
        self.code() == Some(410)
    }

    /// Whether the server refused a streaming list (the fallback to LIST applies).
    fn refuses_streaming(&self) -> bool {
        matches!(self.code(), Some(400 | 422)) || matches!(self, Self::StreamingListIgnored { .. })
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Api { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// One decoded line of a watch stream.
#[derive(Debug, Clone, PartialEq)]
pub enum WatchLine<K> {
    /// `ADDED`.
    Added(K),
    /// `MODIFIED`.
    Modified(K),
    /// `DELETED`, with the object's final state.
    Deleted(K),
    /// `BOOKMARK`.
    Bookmark {
        /// The resourceVersion the stream has reached.
        resource_version: String,
        /// Whether this bookmark ends a streaming list's initial events.
        initial_events_end: bool,
    },
    /// `ERROR`, with the server's Status.
    Error {
        /// The Status code (410 for an expired resourceVersion).
        code: u16,
        /// The Status reason.
        reason: String,
        /// The Status message.
        message: String,
    },
}

/// A watch line that could not be decoded; the stream goes on without it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("malformed {event_type} event for {object}: {error}")]
pub struct MalformedLine {
    /// The event's `type`, or `?` if even that was unreadable.
    pub event_type: String,
    /// `namespace/name` of the object if readable, else `?`.
    pub object: String,
    /// The decoder's message.
    pub error: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "UPPERCASE")]
enum LineType {
    Added,
    Modified,
    Deleted,
    Bookmark,
    Error,
}

#[derive(Deserialize)]
struct TypedLine<K> {
    #[serde(rename = "type")]
    kind: LineType,
    object: K,
}

/// Decodes one line of a watch stream. The common case (an object event that decodes as `K`) is a
/// single pass; bookmarks and errors that are not valid `K`s, and malformed objects, take a slower
/// second pass through `serde_json::Value` to say what they were.
pub fn decode_watch_line<K: Resource + DeserializeOwned>(line: &[u8]) -> Result<WatchLine<K>, MalformedLine> {
    match serde_json::from_slice::<TypedLine<K>>(line) {
        Ok(TypedLine { kind: LineType::Added, object }) => Ok(WatchLine::Added(object)),
        Ok(TypedLine { kind: LineType::Modified, object }) => Ok(WatchLine::Modified(object)),
        Ok(TypedLine { kind: LineType::Deleted, object }) => Ok(WatchLine::Deleted(object)),
        Ok(TypedLine { kind: LineType::Bookmark, object }) => {
            let meta = object.meta();
            Ok(WatchLine::Bookmark {
                resource_version: meta.resource_version.clone().unwrap_or_default(),
                initial_events_end: is_initial_events_end(meta.annotations.as_ref()),
            })
        }
        Ok(TypedLine { kind: LineType::Error, .. }) | Err(_) => decode_untyped_line(line),
    }
}

fn is_initial_events_end(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations.and_then(|a| a.get(INITIAL_EVENTS_END)).is_some_and(|v| v == "true")
}

fn decode_untyped_line<K: DeserializeOwned>(line: &[u8]) -> Result<WatchLine<K>, MalformedLine> {
    let value: serde_json::Value = serde_json::from_slice(line).map_err(|e| MalformedLine {
        event_type: "?".into(),
        object: "?".into(),
        error: e.to_string(),
    })?;
    let event_type = value["type"].as_str().unwrap_or("?").to_string();
    let object = &value["object"];
    match event_type.as_str() {
        "BOOKMARK" => {
            let meta = &object["metadata"];
            Ok(WatchLine::Bookmark {
                resource_version: meta["resourceVersion"].as_str().unwrap_or_default().to_string(),
                initial_events_end: meta["annotations"][INITIAL_EVENTS_END].as_str() == Some("true"),
            })
        }
        "ERROR" => {
            let status: Status = serde_json::from_value(object.clone()).unwrap_or_default();
            Ok(WatchLine::Error {
                code: status.code.and_then(|c| u16::try_from(c).ok()).unwrap_or(500),
                reason: status.reason.unwrap_or_default(),
                message: status.message.unwrap_or_default(),
            })
        }
        _ => {
            let error = match serde_json::from_value::<K>(object.clone()) {
                Err(e) => e.to_string(),
                Ok(_) => format!("unknown event type {event_type:?}"),
            };
            Err(MalformedLine { event_type, object: describe(object), error })
        }
    }
}

fn describe(object: &serde_json::Value) -> String {
    let meta = &object["metadata"];
    match (meta["namespace"].as_str(), meta["name"].as_str()) {
        (Some(ns), Some(name)) => format!("{ns}/{name}"),
        (None, Some(name)) => name.to_string(),
        _ => "?".to_string(),
    }
}

/// Removes `metadata.managedFields` from the raw JSON of a watch line (`{"type":…,"object":{…}}`)
/// or of a list (`{"items":[{…},…]}`) before it is decoded, so the field's many small allocations
/// are never made. Returns `None` when there is nothing to remove (or the text is not shaped as
/// expected, in which case the typed decoder will say what is wrong). Only the `managedFields`
/// member of each object's own `metadata` is touched: the same name anywhere else (inside a
/// string, in a spec) is left alone.
pub fn elide_managed_fields(json: &[u8]) -> Option<Vec<u8>> {
    memchr::memmem::find(json, b"\"managedFields\"")?;
    let mut cuts = Vec::new();
    if let Some((_, object)) = find_member(json, 0, b"object") {
        cuts.extend(managed_fields_member(json, object));
    } else if let Some((_, items)) = find_member(json, 0, b"items")
        && json.get(items) == Some(&b'[')
    {
        let mut i = skip_ws(json, items + 1);
        while json.get(i).is_some_and(|&b| b != b']') {
            cuts.extend(managed_fields_member(json, i));
            i = skip_ws(json, skip_value(json, i)?);
            if json.get(i) == Some(&b',') {
                i = skip_ws(json, i + 1);
            }
        }
    }
    if cuts.is_empty() {
        return None;
    }
    let removed: usize = cuts.iter().map(|cut: &std::ops::Range<usize>| cut.len()).sum();
    let mut out = Vec::with_capacity(json.len() - removed);
    let mut from = 0;
    for cut in cuts {
        out.extend_from_slice(&json[from..cut.start]);
        from = cut.end;
    }
    out.extend_from_slice(&json[from..]);
    Some(out)
}

/// The byte range to cut to drop `metadata.managedFields` (with one separating comma) from the
/// object starting at `object`.
fn managed_fields_member(json: &[u8], object: usize) -> Option<std::ops::Range<usize>> {
    let (_, metadata) = find_member(json, object, b"metadata")?;
    let (member, value) = find_member(json, metadata, b"managedFields")?;
    let end = skip_value(json, value)?;
    let after = skip_ws(json, end);
    if json.get(after) == Some(&b',') {
        return Some(member..after + 1);
    }
    let before = json[..member].iter().rposition(|b| !b.is_ascii_whitespace())?;
    Some(if json[before] == b',' { before..end } else { member..end })
}

/// Finds the member `key` of the JSON object starting at `object` (after whitespace):
/// the offsets of the member's key and of its value.
fn find_member(json: &[u8], object: usize, key: &[u8]) -> Option<(usize, usize)> {
    let mut i = skip_ws(json, object);
    if json.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_ws(json, i + 1);
    while json.get(i) == Some(&b'"') {
        let key_end = skip_string(json, i)?;
        let colon = skip_ws(json, key_end);
        if json.get(colon) != Some(&b':') {
            return None;
        }
        let value = skip_ws(json, colon + 1);
        if &json[i + 1..key_end - 1] == key {
            return Some((i, value));
        }
        i = skip_ws(json, skip_value(json, value)?);
        if json.get(i) != Some(&b',') {
            return None;
        }
        i = skip_ws(json, i + 1);
    }
    None
}

fn skip_ws(json: &[u8], mut i: usize) -> usize {
    while json.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    i
}

/// The offset just past the string starting at `start` (which holds `"`).
fn skip_string(json: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    loop {
        i += memchr::memchr2(b'"', b'\\', json.get(i..)?)?;
        if json[i] == b'\\' {
            i += 2;
        } else {
            return Some(i + 1);
        }
    }
}

/// The offset just past the JSON value starting at `start`.
fn skip_value(json: &[u8], start: usize) -> Option<usize> {
    match *json.get(start)? {
        b'"' => skip_string(json, start),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = start;
            loop {
                match *json.get(i)? {
                    b'"' => {
                        i = skip_string(json, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        _ => {
            let len =
                json[start..].iter().position(|b| matches!(b, b',' | b'}' | b']') || b.is_ascii_whitespace());
            Some(start + len.unwrap_or(json.len() - start))
        }
    }
}

/// Splits a byte stream into newline-terminated lines (a watch response's framing).
#[derive(Debug, Default)]
pub struct LineBuffer {
    buf: BytesMut,
    /// Bytes of `buf` already searched for a newline.
    scanned: usize,
}

impl LineBuffer {
    /// Appends received bytes.
    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The next complete line (without its newline), if one has arrived; blank lines are skipped.
    pub fn next_line(&mut self) -> Option<Bytes> {
        loop {
            let newline = self.buf[self.scanned..].iter().position(|&b| b == b'\n')?;
            let mut line = self.buf.split_to(self.scanned + newline + 1);
            self.scanned = 0;
            line.truncate(line.len() - 1);
            if line.iter().any(|b| !b.is_ascii_whitespace()) {
                return Some(line.freeze());
            }
        }
    }

    /// Marks the buffered bytes as searched (call when `next_line` returned `None`).
    pub fn searched_all(&mut self) {
        self.scanned = self.buf.len();
    }

    /// Whether a partial line is buffered.
    pub fn has_partial(&self) -> bool {
        self.buf.iter().any(|b| !b.is_ascii_whitespace())
    }
}

/// A watch that ends sooner than this without a single event counts as a failure (backoff).
const EMPTY_WATCH: Duration = Duration::from_millis(100);

/// Where the reflector is in its cycle.
#[derive(Debug, Clone, PartialEq)]
enum Phase {
    /// The view must be rebuilt by a full list.
    Relist,
    /// The view is current up to this resourceVersion: watch from it.
    Watch(String),
}

/// Keeps one kind's view current: lists, watches, and recovers from failures (see module docs).
pub struct Reflector<K> {
    client: Client,
    url: String,
    config: ReflectorConfig,
    stats: Arc<ReflectorStats>,
    backoff: Backoff,
    streaming: bool,
    /// Where to pick up after a failure: the last resourceVersion the sink is current with.
    resume: Phase,
    _kind: PhantomData<fn() -> K>,
}

impl<K> fmt::Debug for Reflector<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reflector").field("url", &self.url).field("config", &self.config).finish()
    }
}

impl<K> Reflector<K>
where
    K: Resource + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
{
    /// A reflector over the objects `api` addresses (one namespace, or all of them).
    pub fn new(api: Api<K>, config: ReflectorConfig) -> Self {
        let url = api.resource_url().to_string();
        let streaming = config.initial_list == InitialList::StreamingWithFallback;
        Self {
            client: api.into_client(),
            url,
            backoff: Backoff::new(config.backoff),
            config,
            stats: Arc::default(),
            streaming,
            resume: Phase::Relist,
            _kind: PhantomData,
        }
    }

    /// The counters this reflector updates (shared: read them while it runs).
    pub fn stats(&self) -> Arc<ReflectorStats> {
        Arc::clone(&self.stats)
    }

    /// Runs forever, feeding `sink` (stop it by dropping or aborting the task that runs it).
    pub async fn run(mut self, mut sink: impl FnMut(ReflectorEvent<K>)) {
        let mut phase = Phase::Relist;
        loop {
            self.resume = phase.clone();
            let result = match &phase {
                Phase::Relist if self.streaming => self.watch_stream(None, &mut sink).await,
                Phase::Relist => self.paginated_list(&mut sink).await.map(Phase::Watch),
                Phase::Watch(rv) => self.watch_stream(Some(rv.clone()), &mut sink).await,
            };
            phase = match result {
                Ok(next) => next,
                Err(e) if self.streaming && phase == Phase::Relist && e.refuses_streaming() => {
                    tracing::warn!(url = %self.url, error = %e, "server refused a streaming list; using paginated LIST");
                    self.streaming = false;
                    Phase::Relist
                }
                Err(e) if e.is_gone() => {
                    self.stats.bump(&self.stats.gone);
                    tracing::info!(url = %self.url, error = %e, "resourceVersion expired; relisting");
                    Phase::Relist
                }
                Err(e) => {
                    let delay = self
                        .backoff
                        .next_delay(Instant::now(), rand::random::<f64>())
                        .max(e.retry_after().unwrap_or_default());
                    self.stats.last_backoff_ms.store(delay.as_millis() as u64, Ordering::Relaxed);
                    self.stats.bump(&self.stats.failures);
                    tracing::warn!(url = %self.url, error = %e, delay_ms = delay.as_millis() as u64, "retrying after backoff");
                    tokio::time::sleep(delay).await;
                    // A stream that broke after some events resumes after them.
                    self.resume.clone()
                }
            };
        }
    }

    /// Records how lists are made; logs it the first time (and if it ever changes).
    fn note_mode(&self, mode: u8) {
        if self.stats.mode.swap(mode, Ordering::Relaxed) != mode {
            let how =
                if mode == MODE_STREAMING { "streaming list (sendInitialEvents)" } else { "paginated LIST" };
            tracing::info!(url = %self.url, initial_list = how, "initial list method chosen");
            self.stats.touch();
        }
    }

    /// A paginated LIST reconciled into the sink; returns the list's resourceVersion.
    async fn paginated_list(
        &mut self,
        sink: &mut impl FnMut(ReflectorEvent<K>),
    ) -> Result<String, ReflectorError> {
        self.note_mode(MODE_PAGINATED);
        self.stats.bump(&self.stats.relists);
        let mut continue_token: Option<String> = None;
        let mut started = false;
        loop {
            let url = self.list_url(continue_token.as_deref());
            let response = self.get(&url, Duration::from_secs(60)).await?;
            let body = tokio::time::timeout(Duration::from_secs(60), response.into_body().collect())
                .await
                .map_err(|_| ReflectorError::Body { url: url.clone(), message: "timed out".into() })?
                .map_err(|e| ReflectorError::Body { url: url.clone(), message: e.to_string() })?
                .to_bytes();
            if !started {
                sink(ReflectorEvent::RelistStarted);
                started = true;
            }
            let meta =
                decode_list_page::<K>(&body, &mut |obj| sink(ReflectorEvent::Listed(obj)), &self.stats)
                    .map_err(|source| ReflectorError::NotAList { url: url.clone(), source })?;
            match meta.continue_.filter(|token| !token.is_empty()) {
                Some(token) => continue_token = Some(token),
                None => {
                    let resource_version = meta.resource_version.unwrap_or_default();
                    sink(ReflectorEvent::RelistDone { resource_version: resource_version.clone() });
                    return Ok(resource_version);
                }
            }
        }
    }

    /// One watch request, read to its end. `from == None` makes it a streaming list.
    async fn watch_stream(
        &mut self,
        from: Option<String>,
        sink: &mut impl FnMut(ReflectorEvent<K>),
    ) -> Result<Phase, ReflectorError> {
        let streaming_list = from.is_none();
        let timeout =
            self.config.watch_timeout.mul_f64(1.0 + self.config.watch_timeout_jitter * rand::random::<f64>());
        let url = self.watch_url(from.as_deref(), timeout);
        // The server ends the watch at `timeout`; a stream silent for longer is dead.
        let idle_limit = timeout + Duration::from_secs(30);
        let response = self.get(&url, idle_limit).await?;
        if streaming_list {
            self.stats.bump(&self.stats.relists);
            sink(ReflectorEvent::RelistStarted);
        }
        let started = Instant::now();
        let mut listing = streaming_list;
        let mut events = 0u64;
        let mut lines = LineBuffer::default();
        let mut body = response.into_body();
        let events = loop {
            let frame = match tokio::time::timeout(idle_limit, body.frame()).await {
                Err(_) => {
                    return Err(ReflectorError::Body { url, message: format!("no data for {idle_limit:?}") });
                }
                Ok(None) => break events,
                Ok(Some(Err(e))) => return Err(ReflectorError::Body { url, message: e.to_string() }),
                Ok(Some(Ok(frame))) => frame,
            };
            let Ok(data) = frame.into_data() else { continue };
            lines.push(&data);
            while let Some(line) = lines.next_line() {
                events += 1;
                let elided = self.config.elide_managed_fields.then(|| elide_managed_fields(&line)).flatten();
                match decode_watch_line::<K>(elided.as_deref().unwrap_or(&line)) {
                    Ok(WatchLine::Added(obj) | WatchLine::Modified(obj)) if listing => {
                        sink(ReflectorEvent::Listed(obj));
                    }
                    Ok(WatchLine::Added(obj) | WatchLine::Modified(obj)) => {
                        self.advance(obj.meta().resource_version.as_deref());
                        sink(ReflectorEvent::Applied(obj));
                    }
                    Ok(WatchLine::Deleted(obj)) => {
                        if !listing {
                            self.advance(obj.meta().resource_version.as_deref());
                        }
                        sink(ReflectorEvent::Deleted(obj));
                    }
                    Ok(WatchLine::Bookmark { resource_version: rv, initial_events_end }) => {
                        if listing && !initial_events_end {
                            return Err(ReflectorError::StreamingListIgnored { url });
                        }
                        if listing {
                            listing = false;
                            self.note_mode(MODE_STREAMING);
                            sink(ReflectorEvent::RelistDone { resource_version: rv.clone() });
                        } else {
                            sink(ReflectorEvent::Bookmark { resource_version: rv.clone() });
                        }
                        self.advance(Some(&rv));
                    }
                    Ok(WatchLine::Error { code, reason, message }) => {
                        // A 410 here sends `run` to relist; anything else is retried after a backoff.
                        return Err(ReflectorError::Api { url, code, reason, message, retry_after: None });
                    }
                    Err(malformed) => {
                        self.stats.bump(&self.stats.malformed_skipped);
                        tracing::warn!(url = %url, event_type = %malformed.event_type, object = %malformed.object,
                            error = %malformed.error, "skipping a watch event that does not decode");
                    }
                }
            }
            lines.searched_all();
        };
        if listing {
            return Err(ReflectorError::StreamingListCut { url });
        }
        if lines.has_partial() {
            tracing::debug!(url = %url, "watch ended inside an event; it will be seen again");
        }
        self.stats.bump(&self.stats.watch_restarts);
        if events == 0 && started.elapsed() < EMPTY_WATCH {
            return Err(ReflectorError::EmptyWatch { url });
        }
        // Where this watch started, or the last resourceVersion it delivered.
        Ok(self.resume.clone())
    }

    /// Notes that the sink is now current up to `rv` (if given and not empty).
    fn advance(&mut self, rv: Option<&str>) {
        if let Some(rv) = rv.filter(|rv| !rv.is_empty()) {
            self.resume = Phase::Watch(rv.to_string());
        }
    }

    /// The path and query of one LIST page.
    fn list_url(&self, continue_token: Option<&str>) -> String {
        let mut query = url::form_urlencoded::Serializer::new(String::new());
        query.append_pair("limit", &self.config.page_size.to_string());
        if let Some(token) = continue_token {
            query.append_pair("continue", token);
        }
        if let Some(selector) = &self.config.label_selector {
            query.append_pair("labelSelector", selector);
        }
        format!("{}?{}", self.url, query.finish())
    }

    /// The path and query of a watch from `from`, or of a streaming list when `from` is `None`.
    fn watch_url(&self, from: Option<&str>, timeout: Duration) -> String {
        let mut query = url::form_urlencoded::Serializer::new(String::new());
        query.append_pair("watch", "true");
        query.append_pair("allowWatchBookmarks", "true");
        query.append_pair("timeoutSeconds", &timeout.as_secs().max(1).to_string());
        if let Some(selector) = &self.config.label_selector {
            query.append_pair("labelSelector", selector);
        }
        match from {
            Some(rv) => query.append_pair("resourceVersion", rv),
            None => query
                .append_pair("sendInitialEvents", "true")
                .append_pair("resourceVersionMatch", "NotOlderThan"),
        };
        format!("{}?{}", self.url, query.finish())
    }

    /// Sends a GET and turns a non-2xx answer into `ReflectorError::Api`.
    async fn get(&self, url: &str, timeout: Duration) -> Result<http::Response<Body>, ReflectorError> {
        let request = http::Request::get(url)
            .header(http::header::ACCEPT, "application/json")
            .header(http::header::ACCEPT_ENCODING, "identity")
            .body(Body::from(Vec::new()))
            .map_err(|e| ReflectorError::Body { url: url.to_string(), message: e.to_string() })?;
        let response = tokio::time::timeout(timeout, self.client.send(request))
            .await
            .map_err(|_| ReflectorError::Body {
                url: url.to_string(),
                message: "no response headers".into(),
            })?
            .map_err(|source| ReflectorError::Transport { url: url.to_string(), source })?;
        if response.status().is_success() {
            return Ok(response);
        }
        let code = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let body = tokio::time::timeout(Duration::from_secs(10), response.into_body().collect())
            .await
            .ok()
            .and_then(Result::ok)
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let status: Status = serde_json::from_slice(&body).unwrap_or_default();
        Err(ReflectorError::Api {
            url: url.to_string(),
            code,
            reason: status.reason.unwrap_or_default(),
            message: status.message.unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned()),
            retry_after,
        })
    }
}

/// Decodes a LIST response, handing each item to `on_item` as soon as it is decoded (the page is
/// never held as a `Vec` of objects). Items that do not decode are counted, logged and skipped;
/// items before a bad one may then be handed over twice, which a relist absorbs (same
/// resourceVersion → unchanged).
pub fn decode_list_page<K: DeserializeOwned>(
    body: &[u8],
    on_item: &mut dyn FnMut(K),
    stats: &ReflectorStats,
) -> Result<ListMeta, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(body);
    match (ListPageSeed { on_item: &mut *on_item, _kind: PhantomData::<K> }).deserialize(&mut de) {
        Ok(meta) => Ok(meta),
        Err(_) => {
            let page: UntypedPage = serde_json::from_slice(body)?;
            for item in page.items {
                match serde_json::from_value::<K>(item) {
                    Ok(obj) => on_item(obj),
                    Err(error) => {
                        stats.bump(&stats.malformed_skipped);
                        tracing::warn!(%error, "skipping a listed object that does not decode");
                    }
                }
            }
            Ok(page.metadata)
        }
    }
}

#[derive(Deserialize)]
struct UntypedPage {
    #[serde(default)]
    metadata: ListMeta,
    #[serde(default)]
    items: Vec<serde_json::Value>,
}

struct ListPageSeed<'a, K> {
    on_item: &'a mut dyn FnMut(K),
    _kind: PhantomData<K>,
}

impl<'de, K: DeserializeOwned> DeserializeSeed<'de> for ListPageSeed<'_, K> {
    type Value = ListMeta;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<ListMeta, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de, K: DeserializeOwned> Visitor<'de> for ListPageSeed<'_, K> {
    type Value = ListMeta;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes list")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ListMeta, A::Error> {
        let mut meta = ListMeta::default();
        while let Some(field) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match field.as_ref() {
                "metadata" => meta = map.next_value()?,
                "items" => {
                    map.next_value_seed(ItemsSeed { on_item: &mut *self.on_item, _kind: PhantomData::<K> })?
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(meta)
    }
}

struct ItemsSeed<'a, K> {
    on_item: &'a mut dyn FnMut(K),
    _kind: PhantomData<K>,
}

impl<'de, K: DeserializeOwned> DeserializeSeed<'de> for ItemsSeed<'_, K> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_option(self)
    }
}

impl<'de, K: DeserializeOwned> Visitor<'de> for ItemsSeed<'_, K> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of objects")
    }

    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(item) = seq.next_element::<K>()? {
            (self.on_item)(item);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn ms(d: Duration) -> u128 {
        d.as_millis()
    }

    #[test]
    fn backoff_doubles_from_800ms_caps_at_30s_and_resets_after_two_quiet_minutes() {
        let mut b = Backoff::new(BackoffConfig { jitter: 0.0, ..Default::default() });
        let mut now = Instant::now();
        let mut delays = Vec::new();
        for _ in 0..8 {
            let d = b.next_delay(now, 0.5);
            delays.push(ms(d));
            now += d;
        }
        assert_eq!(delays, [800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
        assert_eq!(
            ms(b.next_delay(now + Duration::from_secs(119), 0.0)),
            30000,
            "not yet healthy long enough"
        );
        now += Duration::from_secs(119) + Duration::from_secs(30);
        assert_eq!(ms(b.next_delay(now + Duration::from_secs(120), 0.0)), 800);
    }

    #[test]
    fn backoff_jitter_stretches_each_delay_by_up_to_its_own_length() {
        let mut b = Backoff::new(BackoffConfig::default());
        let now = Instant::now();
        assert_eq!(ms(b.next_delay(now, 0.0)), 800);
        assert_eq!(ms(b.next_delay(now, 0.5)), 2400);
        assert_eq!(ms(b.next_delay(now, 0.999_999)), 6399);
    }

    #[test]
    fn decodes_object_events_bookmarks_and_errors() {
        let added = br#"{"type":"ADDED","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"n","resourceVersion":"5"}}}"#;
        match decode_watch_line::<ConfigMap>(added) {
            Ok(WatchLine::Added(cm)) => assert_eq!(cm.metadata.resource_version.as_deref(), Some("5")),
            other => panic!("{other:?}"),
        }
        let bookmark = br#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"9","annotations":{"k8s.io/initial-events-end":"true"}}}}"#;
        assert_eq!(
            decode_watch_line::<ConfigMap>(bookmark),
            Ok(WatchLine::Bookmark { resource_version: "9".into(), initial_events_end: true })
        );
        let error = br#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","code":410,"reason":"Expired","message":"too old"}}"#;
        assert_eq!(
            decode_watch_line::<ConfigMap>(error),
            Ok(WatchLine::Error { code: 410, reason: "Expired".into(), message: "too old".into() })
        );
    }

    #[test]
    fn a_malformed_object_is_reported_with_its_name() {
        let bad = br#"{"type":"MODIFIED","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"n"},"data":{"k":17}}}"#;
        let err = decode_watch_line::<ConfigMap>(bad).unwrap_err();
        assert_eq!((err.event_type.as_str(), err.object.as_str()), ("MODIFIED", "n/a"));
        let garbage = decode_watch_line::<ConfigMap>(b"{not json").unwrap_err();
        assert_eq!(garbage.event_type, "?");
    }

    #[test]
    fn managed_fields_are_elided_from_watch_lines_and_list_items_only_where_they_belong() {
        let line = br#"{"type":"ADDED","object":{"kind":"ConfigMap","metadata":{"name":"a","managedFields":[{"manager":"x","fieldsV1":{"f:data":{"f:\"]}":{}}}}],"namespace":"n"},"data":{"managedFields":"kept"}}}"#;
        let elided = elide_managed_fields(line).unwrap();
        assert_eq!(
            std::str::from_utf8(&elided).unwrap(),
            r#"{"type":"ADDED","object":{"kind":"ConfigMap","metadata":{"name":"a","namespace":"n"},"data":{"managedFields":"kept"}}}"#
        );
        let last = br#"{"type":"MODIFIED","object":{"metadata":{"name":"a", "managedFields" : [] }}}"#;
        assert_eq!(
            elide_managed_fields(last).unwrap(),
            br#"{"type":"MODIFIED","object":{"metadata":{"name":"a" }}}"#
        );
        let only = br#"{"type":"MODIFIED","object":{"metadata":{"managedFields":[1]}}}"#;
        assert_eq!(elide_managed_fields(only).unwrap(), br#"{"type":"MODIFIED","object":{"metadata":{}}}"#);
        assert_eq!(elide_managed_fields(br#"{"type":"ADDED","object":{"data":{"managedFields":[]}}}"#), None);

        let list = br#"{"metadata":{"resourceVersion":"1"},"items":[{"metadata":{"managedFields":[{}],"name":"a"}},{"metadata":{"name":"b"}},{"metadata":{"name":"c","managedFields":[]}}]}"#;
        assert_eq!(
            std::str::from_utf8(&elide_managed_fields(list).unwrap()).unwrap(),
            r#"{"metadata":{"resourceVersion":"1"},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}},{"metadata":{"name":"c"}}]}"#
        );
        assert_eq!(elide_managed_fields(br#"{"items":[{"metadata":{"managedFields":[{"#), None);
    }

    #[test]
    fn line_buffer_frames_across_chunk_boundaries_and_skips_blank_lines() {
        let mut lines = LineBuffer::default();
        lines.push(b"{\"a\":");
        assert_eq!(lines.next_line(), None);
        lines.searched_all();
        lines.push(b"1}\n\n  \n{\"b\"");
        assert_eq!(lines.next_line().as_deref(), Some(&b"{\"a\":1}"[..]));
        assert_eq!(lines.next_line(), None);
        assert!(lines.has_partial());
        lines.searched_all();
        lines.push(b":2}\n");
        assert_eq!(lines.next_line().as_deref(), Some(&b"{\"b\":2}"[..]));
        assert!(!lines.has_partial());
    }

    #[test]
    fn list_pages_stream_items_and_skip_malformed_ones() {
        let stats = ReflectorStats::default();
        let page = br#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"42","continue":"tok"},
            "items":[{"metadata":{"name":"a","namespace":"n"}},{"metadata":{"name":"b","namespace":"n"}}]}"#;
        let mut names = Vec::new();
        let meta =
            decode_list_page::<ConfigMap>(page, &mut |cm| names.push(cm.metadata.name.unwrap()), &stats)
                .unwrap();
        assert_eq!(
            (names, meta.resource_version.as_deref(), meta.continue_.as_deref()),
            (vec!["a".to_string(), "b".to_string()], Some("42"), Some("tok"))
        );

        let bad = br#"{"metadata":{"resourceVersion":"43"},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"},"data":{"k":1}},{"metadata":{"name":"c"}}]}"#;
        let mut names = Vec::new();
        let meta =
            decode_list_page::<ConfigMap>(bad, &mut |cm| names.push(cm.metadata.name.unwrap()), &stats)
                .unwrap();
        assert_eq!(meta.resource_version.as_deref(), Some("43"));
        assert_eq!(names.last().map(String::as_str), Some("c"));
        assert!(!names.contains(&"b".to_string()));
        assert_eq!(stats.malformed_skipped.load(Ordering::Relaxed), 1);

        let empty = br#"{"metadata":{"resourceVersion":"44"},"items":null}"#;
        let meta = decode_list_page::<ConfigMap>(empty, &mut |_| panic!("no items"), &stats).unwrap();
        assert_eq!(meta.resource_version.as_deref(), Some("44"));
    }
}
