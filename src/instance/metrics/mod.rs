//! `/metrics` on the manager's metrics port (`$DBC_METRICS_PORT`, 9187, the container port
//! `metrics`): Prometheus text, read afresh at each scrape over the local socket.
//!
//! - `pg_up` (1 when the server answered), `pg_in_recovery`, then the built-in queries
//!   ([`builtin`]: replication and replay lag, the WAL receiver, backends, transactions,
//!   conflicts, database sizes, the archiver, checkpoints and buffers), each as the superuser in
//!   the `postgres` database within [`BUILTIN_LIMIT`] in all. A server that does not answer (or
//!   that `postmaster.pid` says is starting or stopping: not asked) gives `pg_up 0` and nothing else; a built-in query that fails (a view another major version
//!   lacks) leaves its families out and is logged once.
//! - The user's queries ([`custom`]), when `$DBC_CUSTOM_QUERIES` names a file (the optional
//!   volume of `spec.monitoring.customQueriesConfigMap`): the file is read at each scrape and
//!   parsed again when it changed. Each query runs in the application database, in its own
//!   read-only transaction under `SET LOCAL ROLE pg_monitor` (PostgreSQL's monitoring role: the
//!   statistics, not the data, unless granted) with a statement timeout of [`QUERY_LIMIT`], all
//!   of them within [`CUSTOM_BUDGET`]. The metrics sessions keep their errors out of the server's
//!   log ([`collect::QUIET`]). A query that fails (or cannot run) adds one to
//!   `pg_custom_query_errors_total{query}` and is logged once until it succeeds again or its
//!   definition changes; the others are served. `pg_custom_queries_file_loaded` says whether the
//!   file was read and parsed (a missing ConfigMap or invalid YAML: 0, logged once, the built-in
//!   metrics served as ever).
//!
//! The decisions are pure and tested: the text format ([`text`]), results into families
//! ([`query`]), the file's shape and the failure bookkeeping ([`custom`]); running the queries is
//! [`collect`]'s I/O.

pub mod builtin;
pub mod collect;
pub mod custom;
pub mod query;
pub mod text;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use self::custom::{Definition, FileState, Report, Tracker};
use self::query::QuerySpec;
use self::text::{Family, Kind, render};
use super::local::{ADMIN_LIMIT, Local};
use super::settings::Settings;

/// How long the built-in queries may take together (connecting included).
pub const BUILTIN_LIMIT: Duration = ADMIN_LIMIT;
/// A custom query's statement timeout.
pub const QUERY_LIMIT: Duration = Duration::from_secs(2);
/// How long the custom queries may take together; those left when it is spent fail.
pub const CUSTOM_BUDGET: Duration = Duration::from_secs(3);

/// The metrics sessions' `application_name`.
pub const APPLICATION_NAME: &str = "dbcluster-metrics";

/// The parsed custom queries file, kept with the text it was parsed from.
type Parsed = (String, Result<Arc<Vec<Definition>>, String>);

/// What the scrapes remember: the parsed file, the last file state logged, the failures.
#[derive(Debug, Default)]
struct State {
    parsed: Option<Parsed>,
    file: Option<FileState>,
    custom: Tracker,
    builtin: Tracker,
}

/// The `/metrics` exporter of one instance.
#[derive(Debug)]
pub struct Exporter {
    local: Local,
    app: Local,
    queries_file: Option<PathBuf>,
    builtin: Vec<QuerySpec>,
    reserved: Vec<String>,
    state: Mutex<State>,
}

fn up(value: f64) -> Family {
    Family::new(builtin::UP, Kind::Gauge, "Whether the server answered on its local socket.").with(&[], value)
}

fn log(report: Option<Report>, what: &str) {
    match report {
        Some(Report::Failed { query, error }) => {
            tracing::warn!(%query, %error, "{what} failed (logged again once it succeeds or changes)");
        }
        Some(Report::Recovered { query }) => tracing::info!(%query, "{what} succeeds again"),
        None => {}
    }
}

impl Exporter {
    /// The exporter of `settings`' instance, whose server `local` reaches as the superuser.
    pub fn new(settings: &Settings, local: &Local) -> Exporter {
        Exporter {
            local: local.for_sessions("postgres", APPLICATION_NAME, collect::QUIET),
            app: local.for_sessions(&settings.app_database, APPLICATION_NAME, collect::QUIET),
            queries_file: settings.custom_queries.clone(),
            builtin: builtin::queries(),
            reserved: builtin::names(),
            state: Mutex::new(State::default()),
        }
    }

    /// The metrics text.
    pub async fn scrape(&self) -> String {
        let specs = &self.builtin;
        let read = async {
            self.local.accepting().await?;
            self.local
                .with(BUILTIN_LIMIT, |client| async move { collect::builtin(client, specs).await })
                .await
        };
        let (in_recovery, results) = match read.await {
            Ok(read) => read,
            Err(error) => {
                tracing::debug!(%error, "metrics: the server did not answer");
                return render(&[up(0.0)]);
            }
        };
        let recovery =
            Family::new(builtin::IN_RECOVERY, Kind::Gauge, "1 on a standby (in recovery), 0 on a primary.");
        let mut families = vec![up(1.0), recovery.with(&[], if in_recovery { 1.0 } else { 0.0 })];
        for (name, result) in results {
            let report = self.state.lock().builtin.record(
                &name,
                &name,
                result.as_ref().map(drop).map_err(String::as_str),
            );
            log(report, "built-in metrics query");
            families.extend(result.unwrap_or_default());
        }
        if let Some((file, definitions)) = self.load() {
            families.extend(self.custom(&definitions, in_recovery).await);
            families.push(self.state.lock().custom.family());
            families.push(file.family());
        }
        render(&families)
    }

    /// Runs the custom queries that run on this role; their families.
    async fn custom(&self, definitions: &[Definition], in_recovery: bool) -> Vec<Family> {
        let runnable: Vec<&QuerySpec> = definitions
            .iter()
            .filter_map(|d| d.spec.as_ref().ok())
            .filter(|s| s.runs_on.runs(in_recovery))
            .collect();
        let mut results = Vec::new();
        if !runnable.is_empty() {
            let limit = CUSTOM_BUDGET + QUERY_LIMIT + super::local::PROBE_LIMIT;
            match self.app.with(limit, |client| collect::custom(client, &runnable)).await {
                Ok(ran) => results = ran,
                Err(error) => tracing::debug!(%error, "metrics: the application database did not answer"),
            }
        }
        let mut families = Vec::new();
        let mut state = self.state.lock();
        for definition in definitions {
            let outcome = match &definition.spec {
                Err(error) => Err(error.as_str()),
                Ok(_) => match results.iter().find(|(name, _)| *name == definition.name) {
                    Some((_, Ok(made))) => {
                        families.extend(made.iter().cloned());
                        Ok(())
                    }
                    Some((_, Err(error))) => Err(error.as_str()),
                    None => continue,
                },
            };
            log(state.custom.record(&definition.name, &definition.fingerprint, outcome), "custom query");
        }
        families
    }

    /// The custom queries file's state and definitions (parsed again only when its text changed);
    /// `None` when no file is configured. A new state is logged.
    fn load(&self) -> Option<(FileState, Arc<Vec<Definition>>)> {
        let path = self.queries_file.as_ref()?;
        let mut state = self.state.lock();
        let (file, definitions) = match std::fs::read_to_string(path) {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                (FileState::Missing, Arc::default())
            }
            Err(error) => {
                (FileState::Invalid(format!("reading {}: {error}", path.display())), Arc::default())
            }
            Ok(text) => {
                if state.parsed.as_ref().is_none_or(|(known, _)| *known != text) {
                    let parsed = custom::parse(&text, &self.reserved).map(Arc::new);
                    state.parsed = Some((text, parsed));
                }
                match state.parsed.as_ref().map(|(_, parsed)| parsed) {
                    Some(Ok(definitions)) => (FileState::Loaded(definitions.len()), definitions.clone()),
                    Some(Err(error)) => (FileState::Invalid(error.clone()), Arc::default()),
                    None => (FileState::Missing, Arc::default()),
                }
            }
        };
        if custom::file_news(state.file.as_ref(), &file) {
            let path = path.display();
            match &file {
                FileState::Missing => {
                    tracing::warn!(%path, "the custom queries file is missing (its ConfigMap or key does not exist): serving the built-in metrics")
                }
                FileState::Invalid(error) => {
                    tracing::warn!(%path, %error, "the custom queries file is invalid: serving the built-in metrics")
                }
                FileState::Loaded(queries) => tracing::info!(%path, queries, "custom queries loaded"),
            }
            state.file = Some(file.clone());
        }
        Some((file, definitions))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_server_that_does_not_answer_is_down() {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = Settings::sample();
        settings.run_dir = dir.path().to_owned();
        settings.custom_queries = Some(dir.path().join("queries.yaml"));
        let exporter = Exporter::new(&settings, &Local::new(&settings, "postgres"));
        let text = exporter.scrape().await;
        assert_eq!(text, render(&[up(0.0)]));
    }

    #[test]
    fn the_file_is_parsed_once_per_text_and_its_state_follows_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = Settings::sample();
        let path = dir.path().join("queries.yaml");
        settings.custom_queries = Some(path.clone());
        let exporter = Exporter::new(&settings, &Local::new(&settings, "postgres"));
        let state = |e: &Exporter| e.load().map(|(file, definitions)| (file, definitions.len()));
        assert_eq!(state(&exporter), Some((FileState::Missing, 0)));
        std::fs::write(&path, "q:\n  query: SELECT 1 AS v\n  metrics: [{v: {usage: GAUGE}}]\n").unwrap();
        assert_eq!(state(&exporter), Some((FileState::Loaded(1), 1)));
        let first = exporter.load().unwrap().1;
        assert!(Arc::ptr_eq(&first, &exporter.load().unwrap().1), "not parsed again");
        std::fs::write(&path, "q: [unclosed").unwrap();
        assert!(matches!(state(&exporter), Some((FileState::Invalid(_), 0))));
        settings.custom_queries = None;
        assert_eq!(state(&Exporter::new(&settings, &Local::new(&settings, "postgres"))), None);
    }
}
