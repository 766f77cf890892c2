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
//!    the relist against what it holds (see `cache::CacheWriter`).
//! 4. **Errors** (connection refused, 5xx, 429, a broken stream, a watch that ends before saying
//!    anything) → after a [`ReconnectBackoff`] delay (0.8 s → 30 s, factor 2, jitter, reset after 2
//!    minutes without failure) watch again from the last resourceVersion delivered, or list again if
//!    the list had not finished. A 429's `Retry-After` is honoured as a lower bound. (kube's default
//!    client retries 429/503/504 itself first; build the client with `default_retry = false` to
//!    leave those to this schedule.)
//! 5. **A malformed object** in a stream or a list page is logged, counted and skipped.
//!
//! The loop is a state machine: [`Reflector::run`] repeats one step, which takes the current state
//! (list, watch from a resourceVersion, or wait before retrying) and returns the next one; the way
//! lists are made ([`InitialList`]) travels in the state, so a fallback to LIST is a transition, not
//! a flag.
//!
//! Unless told otherwise, `metadata.managedFields` is cut out of the raw JSON before decoding
//! ([`elide_managed_fields`]): it is a third of a typical object's bytes and most of its
//! allocations, and the cache would drop it anyway.
//!
//! Watch lines are framed ([`framing`]) and decoded ([`decode`]) here rather than by kube's
//! `Api::watch`, so that one object that fails to decode costs one event, not the stream. Failures
//! are [`ReflectorError`]s ([`error`]). Everything timed goes through `tokio::time`.

pub mod backoff;
pub mod decode;
pub mod elide;
pub mod error;
pub mod framing;

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http_body_util::BodyExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::client::Body;
use kube::{Api, Client};
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::runtime::object::InformerObject;

pub use backoff::{ReconnectBackoff, ReconnectBackoffConfig};
pub use decode::{INITIAL_EVENTS_END, MalformedLine, WatchLine, decode_list_page, decode_watch_line};
pub use elide::{cut_metadata_members, elide_managed_fields};
pub use error::ReflectorError;
pub use framing::LineBuffer;

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

/// How lists are made: the one representation of the list mode, in the settings (how to start),
/// in the loop's state (how the next list is made) and in the figures (how lists are made now).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitialList {
    /// Try a streaming list (`sendInitialEvents`), and fall back to a paginated LIST if refused.
    StreamingWithFallback,
    /// Paginated LIST only.
    Paginated,
}

impl InitialList {
    /// `"streaming"` or `"paginated"`, for logs, metrics and the debug endpoint.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::StreamingWithFallback => "streaming",
            Self::Paginated => "paginated",
        }
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
    pub backoff: ReconnectBackoffConfig,
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
            backoff: ReconnectBackoffConfig::default(),
            label_selector: None,
            elide_managed_fields: true,
        }
    }
}

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
    /// How lists are made, once the first list has shown it.
    mode: Mutex<Option<InitialList>>,
    /// The last backoff delay, in milliseconds (stored before `failures` is incremented).
    pub last_backoff_ms: AtomicU64,
    /// Ticks whenever a figure changes, so a reader can await a condition on them.
    changes: tokio::sync::watch::Sender<u64>,
}

impl ReflectorStats {
    /// How the reflector lists, once known.
    pub fn initial_list_mode(&self) -> Option<InitialList> {
        *self.mode.lock()
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

/// A watch that ends sooner than this without a single event counts as a failure (backoff).
const EMPTY_WATCH: Duration = Duration::from_millis(100);

/// Where the reflector is in its cycle: each step of the loop takes one and returns the next.
#[derive(Debug, Clone, PartialEq)]
enum State {
    /// The view must be rebuilt by a full list, made as `lists` says.
    List {
        /// How this list (and every later one) is made.
        lists: InitialList,
    },
    /// The view is current up to `resource_version`: watch from it.
    Watch {
        /// Where the watch starts.
        resource_version: String,
        /// How the next list, if one is needed, is made.
        lists: InitialList,
    },
    /// A request failed: wait `delay`, then go on with `then`.
    Backoff {
        /// How long to wait.
        delay: Duration,
        /// Where to pick up afterwards: the last state the sink is current with.
        then: Box<State>,
    },
}

impl State {
    /// How lists are made in this state and the states it leads to.
    fn lists(&self) -> InitialList {
        match self {
            Self::List { lists } | Self::Watch { lists, .. } => *lists,
            Self::Backoff { then, .. } => then.lists(),
        }
    }
}

/// A failed list or watch, and the state the sink was left current with (where a retry picks up:
/// a stream that broke after some events resumes after them).
#[derive(Debug)]
struct Failure {
    error: ReflectorError,
    resume: State,
}

/// Keeps one kind's view current: lists, watches, and recovers from failures (see module docs).
pub struct Reflector<K> {
    client: Client,
    url: String,
    config: ReflectorConfig,
    stats: Arc<ReflectorStats>,
    backoff: ReconnectBackoff,
    _kind: PhantomData<fn() -> K>,
}

impl<K> fmt::Debug for Reflector<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reflector").field("url", &self.url).field("config", &self.config).finish()
    }
}

impl<K> Reflector<K>
where
    K: InformerObject,
{
    /// A reflector over the objects `api` addresses (one namespace, or all of them), decoded as
    /// `K` (the resource itself, or a cached form of it).
    pub fn new(api: Api<K::Resource>, config: ReflectorConfig) -> Self {
        let url = api.resource_url().to_string();
        Self {
            client: api.into_client(),
            url,
            backoff: ReconnectBackoff::new(config.backoff),
            config,
            stats: Arc::default(),
            _kind: PhantomData,
        }
    }

    /// The counters this reflector updates (shared: read them while it runs).
    pub fn stats(&self) -> Arc<ReflectorStats> {
        Arc::clone(&self.stats)
    }

    /// Runs forever, feeding `sink` (stop it by dropping or aborting the task that runs it).
    pub async fn run(mut self, mut sink: impl FnMut(ReflectorEvent<K>)) {
        let mut state = State::List { lists: self.config.initial_list };
        loop {
            state = self.step(state, &mut sink).await;
        }
    }

    /// One step of the loop: does what `state` says and returns the state that follows.
    async fn step(&mut self, state: State, sink: &mut impl FnMut(ReflectorEvent<K>)) -> State {
        let outcome = match &state {
            State::List { lists: InitialList::StreamingWithFallback } => {
                self.watch_stream(None, InitialList::StreamingWithFallback, sink).await
            }
            State::List { lists: InitialList::Paginated } => self.paginated_list(sink).await,
            State::Watch { resource_version, lists } => {
                self.watch_stream(Some(resource_version), *lists, sink).await
            }
            State::Backoff { delay, then } => {
                tokio::time::sleep(*delay).await;
                return (**then).clone();
            }
        };
        match outcome {
            Ok(next) => next,
            Err(failure) => self.recover(&state, failure),
        }
    }

    /// The state after `attempted` failed.
    fn recover(&mut self, attempted: &State, Failure { error, resume }: Failure) -> State {
        if *attempted == (State::List { lists: InitialList::StreamingWithFallback })
            && error.refuses_streaming()
        {
            // The normal path on servers without the WatchList feature (off by default before
            // 1.32): worth a line, not a warning.
            tracing::info!(url = %self.url, error = %error, "server refused a streaming list; using paginated LIST");
            return State::List { lists: InitialList::Paginated };
        }
        if error.is_gone() {
            self.stats.bump(&self.stats.gone);
            tracing::info!(url = %self.url, error = %error, "resourceVersion expired; relisting");
            return State::List { lists: resume.lists() };
        }
        let delay = self
            .backoff
            .next_delay(Instant::now(), rand::random::<f64>())
            .max(error.retry_after().unwrap_or_default());
        self.stats.last_backoff_ms.store(delay.as_millis() as u64, Ordering::Relaxed);
        self.stats.bump(&self.stats.failures);
        tracing::warn!(url = %self.url, error = %error, delay_ms = delay.as_millis() as u64, "retrying after backoff");
        State::Backoff { delay, then: Box::new(resume) }
    }

    /// Records how lists are made; logs it the first time (and if it ever changes).
    fn note_mode(&self, mode: InitialList) {
        if self.stats.mode.lock().replace(mode) != Some(mode) {
            let how = match mode {
                InitialList::StreamingWithFallback => "streaming list (sendInitialEvents)",
                InitialList::Paginated => "paginated LIST",
            };
            tracing::info!(url = %self.url, initial_list = how, "initial list method chosen");
            self.stats.touch();
        }
    }

    /// A paginated LIST reconciled into the sink; then a watch from the list's resourceVersion.
    async fn paginated_list(&mut self, sink: &mut impl FnMut(ReflectorEvent<K>)) -> Result<State, Failure> {
        let lists = InitialList::Paginated;
        let fail = |error| Failure { error, resume: State::List { lists } };
        self.note_mode(lists);
        self.stats.bump(&self.stats.relists);
        let mut continue_token: Option<String> = None;
        let mut started = false;
        loop {
            let url = self.list_url(continue_token.as_deref());
            let response = self.get(&url, Duration::from_secs(60)).await.map_err(fail)?;
            let body = tokio::time::timeout(Duration::from_secs(60), response.into_body().collect())
                .await
                .map_err(|_| fail(ReflectorError::Body { url: url.clone(), message: "timed out".into() }))?
                .map_err(|e| fail(ReflectorError::Body { url: url.clone(), message: e.to_string() }))?
                .to_bytes();
            if !started {
                sink(ReflectorEvent::RelistStarted);
                started = true;
            }
            let meta =
                decode_list_page::<K>(&body, &mut |obj| sink(ReflectorEvent::Listed(obj)), &self.stats)
                    .map_err(|source| fail(ReflectorError::NotAList { url: url.clone(), source }))?;
            match meta.continue_.filter(|token| !token.is_empty()) {
                Some(token) => continue_token = Some(token),
                None => {
                    let resource_version = meta.resource_version.unwrap_or_default();
                    sink(ReflectorEvent::RelistDone { resource_version: resource_version.clone() });
                    return Ok(State::Watch { resource_version, lists });
                }
            }
        }
    }

    /// One watch request, read to its end. `from == None` makes it a streaming list. Returns the
    /// state to go on with: a watch from the last resourceVersion delivered (or from where it
    /// started).
    async fn watch_stream(
        &mut self,
        from: Option<&str>,
        lists: InitialList,
        sink: &mut impl FnMut(ReflectorEvent<K>),
    ) -> Result<State, Failure> {
        let mut resume = match from {
            Some(rv) => State::Watch { resource_version: rv.to_string(), lists },
            None => State::List { lists },
        };
        let streaming_list = from.is_none();
        let timeout =
            self.config.watch_timeout.mul_f64(1.0 + self.config.watch_timeout_jitter * rand::random::<f64>());
        let url = self.watch_url(from, timeout);
        // The server ends the watch at `timeout`; a stream silent for longer is dead.
        let idle_limit = timeout + Duration::from_secs(30);
        let response = match self.get(&url, idle_limit).await {
            Ok(response) => response,
            Err(error) => return Err(Failure { error, resume }),
        };
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
                    let error = ReflectorError::Body { url, message: format!("no data for {idle_limit:?}") };
                    return Err(Failure { error, resume });
                }
                Ok(None) => break events,
                Ok(Some(Err(e))) => {
                    return Err(Failure {
                        error: ReflectorError::Body { url, message: e.to_string() },
                        resume,
                    });
                }
                Ok(Some(Ok(frame))) => frame,
            };
            let Ok(data) = frame.into_data() else { continue };
            lines.push(&data);
            while let Some(line) = lines.next_line() {
                events += 1;
                let elided = self.config.elide_managed_fields.then(|| elide_managed_fields(&line)).flatten();
                let decoded = decode_watch_line::<K>(elided.as_deref().unwrap_or(&line));
                if let Err(error) =
                    self.on_watch_line(decoded, &mut listing, (&mut resume, lists), &url, sink)
                {
                    return Err(Failure { error, resume });
                }
            }
            lines.searched_all();
        };
        if listing {
            return Err(Failure { error: ReflectorError::StreamingListCut { url }, resume });
        }
        if lines.has_partial() {
            tracing::debug!(url = %url, "watch ended inside an event; it will be seen again");
        }
        self.stats.bump(&self.stats.watch_restarts);
        if events == 0 && started.elapsed() < EMPTY_WATCH {
            return Err(Failure { error: ReflectorError::EmptyWatch { url }, resume });
        }
        Ok(resume)
    }

    /// Hands one line of a watch (or of a streaming list, while `listing`) to `sink`, and moves
    /// `resume` to the resourceVersion the sink is now current up to. An error ends the stream.
    fn on_watch_line(
        &mut self,
        decoded: Result<WatchLine<K>, MalformedLine>,
        listing: &mut bool,
        (resume, lists): (&mut State, InitialList),
        url: &str,
        sink: &mut impl FnMut(ReflectorEvent<K>),
    ) -> Result<(), ReflectorError> {
        match decoded {
            Ok(WatchLine::Added(obj) | WatchLine::Modified(obj)) if *listing => {
                sink(ReflectorEvent::Listed(obj));
            }
            Ok(WatchLine::Added(obj) | WatchLine::Modified(obj)) => {
                advance(resume, lists, obj.resource_version());
                sink(ReflectorEvent::Applied(obj));
            }
            Ok(WatchLine::Deleted(obj)) => {
                if !*listing {
                    advance(resume, lists, obj.resource_version());
                }
                sink(ReflectorEvent::Deleted(obj));
            }
            Ok(WatchLine::Bookmark { resource_version: rv, initial_events_end }) => {
                if *listing && !initial_events_end {
                    return Err(ReflectorError::StreamingListIgnored { url: url.to_owned() });
                }
                if *listing {
                    *listing = false;
                    self.note_mode(InitialList::StreamingWithFallback);
                    sink(ReflectorEvent::RelistDone { resource_version: rv.clone() });
                } else {
                    sink(ReflectorEvent::Bookmark { resource_version: rv.clone() });
                }
                advance(resume, lists, Some(&rv));
            }
            Ok(WatchLine::Error { code, reason, message }) => {
                // A 410 here sends the loop to relist; anything else is retried after a backoff.
                return Err(ReflectorError::Api {
                    url: url.to_owned(),
                    code,
                    reason,
                    message,
                    retry_after: None,
                });
            }
            Err(malformed) => {
                self.stats.bump(&self.stats.malformed_skipped);
                tracing::warn!(url = %url, event_type = %malformed.event_type, object = %malformed.object,
                    error = %malformed.error, "skipping a watch event that does not decode");
            }
        }
        Ok(())
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

/// Notes that the sink is now current up to `rv` (if given and not empty): a watch resumes there.
fn advance(resume: &mut State, lists: InitialList, rv: Option<&str>) {
    if let Some(rv) = rv.filter(|rv| !rv.is_empty()) {
        *resume = State::Watch { resource_version: rv.to_string(), lists };
    }
}
