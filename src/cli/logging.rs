//! Log setup: `tracing` to stderr, filtered by `RUST_LOG`, as text or JSON. Text is coloured
//! only when stderr is a terminal: a file, a pipe or a log collector gets plain lines.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::cli::LogFormat;

/// The filter without `RUST_LOG`: `info`, minus the kube client's own line per failed request
/// (the runtime reports failures itself, with context, so they would appear twice).
const DEFAULT_FILTER: &str = "info,kube_client::client::builder=off";

/// Installs the global subscriber; a second call (as in tests) leaves the first in place.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
