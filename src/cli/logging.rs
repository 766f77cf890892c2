//! Log setup: `tracing` filtered by `RUST_LOG`, to stderr as text or JSON (`run`), or to a file
//! as text without colours (`demo`, whose table owns the terminal). Text on stderr is coloured
//! only when stderr is a terminal: a file, a pipe or a log collector gets plain lines.

use std::io::IsTerminal;
use std::path::Path;
use std::sync::Arc;

use tracing_subscriber::EnvFilter;

use crate::cli::LogFormat;

/// The filter without `RUST_LOG`: `info`, minus the kube client's own line per failed request
/// (the runtime reports failures itself, with context, so they would appear twice).
const DEFAULT_FILTER: &str = "info,kube_client::client::builder=off";

fn filter() -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER))
}

/// Installs the global subscriber writing to stderr; a second call (as in tests) leaves the first
/// in place.
pub fn init(format: LogFormat) {
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// Installs the global subscriber writing text lines without ANSI colours to `path` (created, or
/// truncated, with its directories); a second call leaves the first subscriber in place.
pub fn init_file(path: &Path) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let file = Arc::new(std::fs::File::create(path)?);
    let _ = tracing_subscriber::fmt().with_env_filter(filter()).with_ansi(false).with_writer(file).try_init();
    Ok(())
}
