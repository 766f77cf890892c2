//! How a reconcile pass ends: what it asks for next ([`Action`]), the errors it may return
//! ([`ReconcileError`]), why a controller cannot run ([`ControllerError`]) and the recorded result
//! of each pass ([`PassResult`]). A leaf: it imports nothing of the controller.

use std::time::Duration;

use serde::Serialize;
/// What a successful reconcile pass asks for next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// The object is as it should be: nothing until the next event.
    Done,
    /// Run again after this long, even without an event (e.g. while waiting for pods).
    RequeueAfter(Duration),
}

/// An error a reconcile function can return. Errors are retried with per-key exponential backoff
/// unless they are terminal: a terminal error (say, an invalid spec) cannot be fixed by retrying,
/// only by a change to the object, which brings its own event.
pub trait ReconcileError: std::error::Error + Send + Sync + 'static {
    /// Whether retrying is pointless. Defaults to `false`.
    fn is_terminal(&self) -> bool {
        false
    }

    /// How long the server asked to wait before trying again (its `Retry-After`), if it did: the
    /// retry comes no earlier, whatever the backoff says. Defaults to `None`; see
    /// [`crate::runtime::client::retry_after`] for a `kube::Error`.
    fn retry_after(&self) -> Option<Duration> {
        None
    }
}

/// Why a controller could not run.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// An informer did not finish its first list in time: usually missing RBAC or a missing CRD.
    #[error("the caches of controller {controller} did not sync within {timeout:?}")]
    CacheSyncTimeout {
        /// The controller's name.
        controller: String,
        /// How long it waited.
        timeout: Duration,
    },
}

/// How one reconcile pass ended, for `controller_runtime_reconcile_total{result}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PassResult {
    /// `Ok(Action::Done)`.
    Success,
    /// `Ok(Action::RequeueAfter(_))`.
    RequeueAfter,
    /// An error, retried with backoff.
    Error,
    /// An error that is not retried.
    TerminalError,
    /// The pass panicked (counted as an error too).
    Panic,
    /// The pass outlived the reconcile timeout (counted as an error too, as controller-runtime
    /// counts the context's deadline error).
    Timeout,
}

impl PassResult {
    /// A lower-case name for logs and the debug endpoint.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::RequeueAfter => "requeue_after",
            Self::Error => "error",
            Self::TerminalError => "terminal_error",
            Self::Panic => "panic",
            Self::Timeout => "timeout",
        }
    }
}
