//! The `pods/log` subresource over the process kubelet's log files (`kubectl logs`): the current
//! run of a container (`container=`, needed when the pod has several), the one before it
//! (`previous=true`), the last lines (`tailLines=`), and `follow=true`, which streams what the
//! container writes until that run ends. Errors are a real apiserver's: a container still waiting
//! (`is waiting to start: <reason>`) and no previous run (`previous terminated container … not
//! found`) answer 400.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Response, header};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use crate::sim::api_error::ApiError;
use crate::sim::cluster::Cluster;
use crate::sim::handlers::{Body, Query};
use crate::sim::kubelet::pod::PodEntry;
use crate::sim::kubelet::status::ContainerState;
use crate::sim::resources::Kind;

/// How often a followed log is read for more.
const FOLLOW_POLL: Duration = Duration::from_millis(100);

fn container_name(pod: &Value, query: &Query) -> Result<String, ApiError> {
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let names: Vec<&str> = ["initContainers", "containers"]
        .iter()
        .flat_map(|f| pod["spec"][*f].as_array().into_iter().flatten())
        .filter_map(|c| c["name"].as_str())
        .collect();
    match query.get("container") {
        Some(c) if names.contains(&c.as_str()) => Ok(c.clone()),
        Some(c) => Err(ApiError::bad_request(format!("container {c} is not valid for pod {name}"))),
        None => {
            let main: Vec<&str> = pod["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["name"].as_str())
                .collect();
            match main.as_slice() {
                [one] => Ok((*one).to_owned()),
                _ => Err(ApiError::bad_request(format!(
                    "a container name must be specified for pod {name}, choose one of: [{}]",
                    main.join(" ")
                ))),
            }
        }
    }
}

/// The runs of `container` with a log file, oldest first.
fn runs(entry: &PodEntry, container: &str) -> Vec<(u32, PathBuf)> {
    let dir = entry.dirs.logs(container);
    let mut runs: Vec<(u32, PathBuf)> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_str()?.strip_suffix(".log")?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    runs.sort();
    runs
}

/// The last `lines` lines of `text` (all of it with `None`).
pub fn tail(text: &[u8], lines: Option<usize>) -> Bytes {
    let Some(n) = lines else { return Bytes::copy_from_slice(text) };
    let mut starts: Vec<usize> = vec![0];
    starts.extend(
        text.iter().enumerate().filter(|(i, b)| **b == b'\n' && i + 1 < text.len()).map(|(i, _)| i + 1),
    );
    let from = starts.len().saturating_sub(n);
    Bytes::copy_from_slice(&text[starts.get(from).copied().unwrap_or(text.len())..])
}

fn text_response(body: Body) -> Response<Body> {
    let mut resp = Response::new(body);
    resp.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/plain"));
    resp
}

/// Answers `GET …/pods/<name>/log`.
pub fn respond(
    cluster: &Arc<Cluster>,
    kind: &Kind,
    namespace: &str,
    name: &str,
    query: &Query,
) -> Result<Response<Body>, ApiError> {
    let pod = cluster
        .read(|s| s.store.get("pods", namespace, name).cloned())
        .ok_or_else(|| ApiError::not_found(kind, name))?;
    let container = container_name(&pod, query)?;
    let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
    let waiting = || {
        let reason = ["initContainerStatuses", "containerStatuses"]
            .iter()
            .flat_map(|f| pod["status"][*f].as_array().into_iter().flatten())
            .find(|c| c["name"] == container.as_str())
            .and_then(|c| c["state"]["waiting"]["reason"].as_str())
            .unwrap_or("ContainerCreating")
            .to_owned();
        ApiError::bad_request(format!(
            "container \"{container}\" in pod \"{name}\" is waiting to start: {reason}"
        ))
    };
    let entry = cluster.node.pod(uid).ok_or_else(waiting)?;
    let runs = runs(&entry, &container);
    let previous = query.get("previous").is_some_and(|v| v == "true");
    let chosen = if previous {
        let restart_count = {
            let model = entry.model.lock();
            model
                .init
                .iter()
                .chain(model.containers.iter())
                .find(|c| c.name == container)
                .map_or(0, |c| c.restart_count)
        };
        runs.iter().find(|(n, _)| restart_count > 0 && *n + 1 == restart_count).cloned().ok_or_else(|| {
            ApiError::bad_request(format!(
                "previous terminated container \"{container}\" in pod \"{name}\" not found"
            ))
        })?
    } else {
        runs.last().cloned().ok_or_else(waiting)?
    };
    let lines = query.get("tailLines").and_then(|n| n.parse().ok());
    let text = std::fs::read(&chosen.1).unwrap_or_default();
    let first = tail(&text, lines);
    if previous || query.get("follow").is_none_or(|v| v != "true") {
        return Ok(text_response(Full::new(first).boxed_unsync()));
    }
    let offset = text.len() as u64;
    let follow = Follow { entry, container, run: chosen.0, path: chosen.1, offset, first: Some(first) };
    let frames = futures::stream::unfold(follow, |mut f| async move {
        let chunk = f.next().await?;
        Some((Ok::<_, Infallible>(Frame::data(chunk)), f))
    });
    Ok(text_response(StreamBody::new(frames).boxed_unsync()))
}

/// A followed log: its file and how far it was read.
struct Follow {
    entry: Arc<PodEntry>,
    container: String,
    run: u32,
    path: PathBuf,
    offset: u64,
    first: Option<Bytes>,
}

impl Follow {
    fn run_is_live(&self) -> bool {
        let model = self.entry.model.lock();
        model
            .init
            .iter()
            .chain(model.containers.iter())
            .find(|c| c.name == self.container)
            .is_some_and(|c| c.restart_count == self.run && matches!(c.state, ContainerState::Running { .. }))
    }

    async fn read_more(&mut self) -> Option<Bytes> {
        let mut file = tokio::fs::File::open(&self.path).await.ok()?;
        file.seek(std::io::SeekFrom::Start(self.offset)).await.ok()?;
        let mut buf = Vec::new();
        file.read_to_end(&mut buf).await.ok()?;
        self.offset += buf.len() as u64;
        (!buf.is_empty()).then(|| Bytes::from(buf))
    }

    async fn next(&mut self) -> Option<Bytes> {
        if let Some(first) = self.first.take()
            && !first.is_empty()
        {
            return Some(first);
        }
        loop {
            let live = self.run_is_live();
            if let Some(more) = self.read_more().await {
                return Some(more);
            }
            if !live {
                return None;
            }
            tokio::time::sleep(FOLLOW_POLL).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail(b"a\nb\nc\n", Some(2)), Bytes::from_static(b"b\nc\n"));
        assert_eq!(tail(b"a\nb\nc", Some(1)), Bytes::from_static(b"c"));
        assert_eq!(tail(b"a\n", Some(5)), Bytes::from_static(b"a\n"));
        assert_eq!(tail(b"a\nb\n", None), Bytes::from_static(b"a\nb\n"));
    }
}
