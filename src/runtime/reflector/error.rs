//! Why a list or watch request failed, and how the loop should react to each kind of failure.

use std::time::Duration;

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
    pub(super) fn refuses_streaming(&self) -> bool {
        matches!(self.code(), Some(400 | 422)) || matches!(self, Self::StreamingListIgnored { .. })
    }

    pub(super) fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Api { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}
