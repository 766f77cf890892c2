//! `watch`: a chunked stream of newline-delimited JSON events. Starts from the requested
//! resourceVersion (replaying kept history, or 410 when it is older), or from the current state
//! (synthetic ADDED events; with `sendInitialEvents` ended by the `k8s.io/initial-events-end`
//! bookmark); sends periodic bookmarks when allowed; ends at `timeoutSeconds`, on
//! `Faults::close_watches`, on shutdown, or when the client goes away.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http::{Response, header};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use super::read::filter;
use super::{Body, Call, present};
use crate::sim::api_error::ApiError;
use crate::sim::cluster::Cluster;
use crate::sim::resources::Kind;
use crate::sim::table::{self, TableOptions};
use crate::sim::watch::{Event, EventType, Filter};

/// How the watch starts.
enum Start {
    /// Answer one 410 error event and end.
    Gone(String),
    /// Send these lines first, then follow live events.
    Lines(Vec<Value>),
}

/// Per-watch settings taken from the query.
struct Settings {
    kind: Arc<Kind>,
    filter: Filter,
    bookmarks: bool,
    table: Option<TableOptions>,
}

impl Settings {
    fn event(&self, event_type: &str, obj: &Value) -> Value {
        let obj = present(&self.kind, obj);
        let object = match &self.table {
            Some(opts) => {
                let rv = obj["metadata"]["resourceVersion"].clone();
                table::table(&self.kind, std::slice::from_ref(&obj), opts, rv)
            }
            None => obj,
        };
        json!({"type": event_type, "object": object})
    }

    fn bookmark(&self, rv: u64, initial_events_end: bool) -> Value {
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if initial_events_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        json!({"type": "BOOKMARK", "object": {"kind": self.kind.kind, "apiVersion": self.kind.api_version(), "metadata": metadata}})
    }
}

fn error_event(e: &ApiError) -> Value {
    json!({"type": "ERROR", "object": e.to_status()})
}

/// Starts a watch response.
pub fn watch(cluster: Arc<Cluster>, call: &Call) -> Result<Response<Body>, ApiError> {
    let q = &call.query;
    let flag = |k: &str| q.get(k).is_some_and(|v| v == "true" || v == "1");
    let settings = Settings {
        kind: call.target.kind.clone(),
        filter: filter(call)?,
        bookmarks: flag("allowWatchBookmarks"),
        table: table::requested(&call.accept, q),
    };
    // A server without streaming lists ignores the parameter, as servers before 1.27 do.
    let send_initial = flag("sendInitialEvents") && cluster.config.streaming_lists;
    if send_initial && !settings.bookmarks {
        return Err(ApiError::invalid(
            &settings.kind,
            "",
            vec![crate::sim::api_error::Cause {
                reason: "FieldValueForbidden".into(),
                message: "Forbidden: sendInitialEvents requires setting allowWatchBookmarks to true".into(),
                field: "allowWatchBookmarks".into(),
            }],
        ));
    }
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map_or(cluster.config.default_watch_timeout, Duration::from_secs);
    let requested_rv = match q.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => None,
        Some(rv) => Some(
            rv.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version {rv:?}")))?,
        ),
    };
    let gone_fault = cluster.faults.take_gone_watch(&settings.kind.plural);
    let (start, start_rv, receiver) = cluster.read(|s| {
        let current = s.store.resource_version();
        let receiver = s.store.hub.subscribe();
        let snapshot = |settings: &Settings| -> Vec<Value> {
            s.store
                .list(&settings.filter.key, settings.filter.namespace.as_deref())
                .filter(|o| settings.filter.matches(o))
                .map(|o| settings.event("ADDED", o))
                .collect()
        };
        let start = if gone_fault {
            Start::Gone(format!("too old resource version: {} ({current})", requested_rv.unwrap_or(0)))
        } else if send_initial || requested_rv.is_none() {
            let mut lines = snapshot(&settings);
            if send_initial {
                cluster.streaming_lists_sent.fetch_add(1, Ordering::Relaxed);
                lines.push(settings.bookmark(current, true));
            }
            Start::Lines(lines)
        } else {
            let rv = requested_rv.unwrap_or_default();
            match s.store.hub.since(rv) {
                None => Start::Gone(format!("too old resource version: {rv} ({current})")),
                Some(events) => Start::Lines(
                    events
                        .iter()
                        .filter_map(|e| settings.filter.translate(e))
                        .map(|(t, o)| settings.event(t.as_str(), o))
                        .collect(),
                ),
            }
        };
        (start, current, receiver)
    });
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    // Subscribed before the response goes out, so a `close_watches` right after is not missed.
    let mut closer = cluster.faults.watch_closer();
    closer.mark_unchanged();
    let open = OpenWatch { settings, start, start_rv, receiver, closer, timeout, tx };
    tokio::spawn(stream_events(cluster, open));
    let frames = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    let mut resp = Response::new(StreamBody::new(frames).boxed_unsync());
    resp.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
    Ok(resp)
}

/// One event line as the API server writes it (Go's `metav1.WatchEvent`): `type` first, then
/// `object`. Written by hand, since a `serde_json` map orders its keys and would put the object
/// first, which clients that read the type first must then buffer.
fn line(event: &Value) -> Bytes {
    let mut s = format!("{{\"type\":{},\"object\":{}}}", event["type"], event["object"]);
    s.push('\n');
    Bytes::from(s)
}

/// A watch whose start was decided under the state lock, ready to stream.
struct OpenWatch {
    settings: Settings,
    start: Start,
    start_rv: u64,
    receiver: broadcast::Receiver<Arc<Event>>,
    closer: tokio::sync::watch::Receiver<u64>,
    timeout: Duration,
    tx: mpsc::Sender<Bytes>,
}

async fn stream_events(cluster: Arc<Cluster>, open: OpenWatch) {
    let OpenWatch { settings, start, start_rv, mut receiver, mut closer, timeout, tx } = open;
    let lines = match start {
        Start::Gone(message) => {
            cluster.watch_gone_sent.fetch_add(1, Ordering::Relaxed);
            let _ = tx.send(line(&error_event(&ApiError::gone(message)))).await;
            return;
        }
        Start::Lines(lines) => lines,
    };
    let counted = lines.iter().filter(|l| l["type"] != "BOOKMARK").count() as u64;
    cluster.watch_events_sent.fetch_add(counted, Ordering::Relaxed);
    for l in &lines {
        if tx.send(line(l)).await.is_err() {
            return;
        }
    }
    let mut last_rv = start_rv;
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let period = cluster.config.bookmark_interval;
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    let send = |ev: &Event, last_rv: &mut u64| {
        *last_rv = ev.resource_version;
        let (t, o): (EventType, &Value) = settings.filter.translate(ev)?;
        cluster.watch_events_sent.fetch_add(1, Ordering::Relaxed);
        Some(line(&settings.event(t.as_str(), o)))
    };
    loop {
        let out = tokio::select! {
            _ = &mut deadline => return,
            _ = closer.changed() => return,
            _ = cluster.shutdown.cancelled() => return,
            _ = tx.closed() => return,
            received = receiver.recv() => match received {
                Ok(ev) => send(&ev, &mut last_rv),
                // A watch that fell behind is ended; the client resumes from its last version.
                Err(_) => return,
            },
            _ = ticks.tick(), if settings.bookmarks => {
                // Drain what is already published so the bookmark is not ahead of unsent events.
                loop {
                    match receiver.try_recv() {
                        Ok(ev) => {
                            if let Some(l) = send(&ev, &mut last_rv)
                                && tx.send(l).await.is_err()
                            {
                                return;
                            }
                        }
                        Err(broadcast::error::TryRecvError::Empty) => break,
                        Err(_) => return,
                    }
                }
                Some(line(&settings.bookmark(last_rv, false)))
            }
        };
        let lag = cluster.faults.watch_event_latency();
        if out.is_some() && !lag.is_zero() {
            tokio::time::sleep(lag).await;
        }
        if let Some(l) = out
            && tx.send(l).await.is_err()
        {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_line_has_its_type_first_as_the_api_server_writes_it() {
        let event = json!({"type": "ADDED", "object": {"kind": "Pod", "metadata": {"name": "a"}}});
        let written = line(&event);
        assert!(written.starts_with(br#"{"type":"ADDED","object":{"#), "{written:?}");
        assert!(written.ends_with(b"}\n"));
        let read: Value = serde_json::from_slice(&written).unwrap();
        assert_eq!(read, event);
    }
}
