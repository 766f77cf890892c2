//! A DatabaseCluster as one row of the live page, a pure function of the cluster and the time
//! ([`cluster_row`]): its phase, primary, each instance's role, readiness and lag, the last
//! backup, and the archive's state, each figure with how old it is.
//!
//! Everything comes from the cluster's status as the operator last wrote it, never from a guess:
//! the instances' figures are as old as `status.instancesObservedAt`, the last backup as old as
//! its end, and a figure the status does not carry is an empty cell that says so (the status has
//! no archive state: the operator does not archive WAL).

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::databasecluster::api::types::{DatabaseCluster, DatabaseClusterStatus, InstanceStatus, Phase};
use crate::databasecluster::view::age::ago;
use crate::runtime::ObjectKey;
use crate::runtime::observe::introspection::{Cell, ObjectRow, Tone};

/// The columns of [`cluster_row`], after the key.
pub const COLUMNS: [&str; 5] = ["phase", "primary", "instances", "last backup", "archive"];

/// What the archive cell says: the status has no such figure.
pub const NO_ARCHIVE_STATE: &str = "not in the status: the operator reports no WAL archive state";

/// The row of `cluster` at `now`.
pub fn cluster_row(cluster: &DatabaseCluster, now: Timestamp) -> ObjectRow {
    let key = ObjectKey::of(cluster).to_string();
    let Some(status) = cluster.status.as_ref() else {
        let none = || Cell::absent("no status yet");
        return ObjectRow {
            key,
            cells: vec![none(), none(), none(), none(), Cell::absent(NO_ARCHIVE_STATE)],
        };
    };
    let observed = status.instances_observed_at.as_ref().map(|at| observed_age(at, now));
    let cells = vec![
        phase_cell(status, cluster.spec.replicas, now),
        primary_cell(status, observed.as_deref()),
        instances_cell(&status.instances, observed.as_deref()),
        backup_cell(cluster, status, now),
        Cell::absent(NO_ARCHIVE_STATE),
    ];
    ObjectRow { key, cells }
}

fn observed_age(at: &Time, now: Timestamp) -> String {
    ago(at.0, now)
}

/// What a figure of the instances is suffixed with: its age, or that the status does not say.
fn age_suffix(observed: Option<&str>) -> String {
    observed.map_or_else(|| "(observation time not recorded)".to_owned(), |age| format!("({age})"))
}

fn phase_cell(status: &DatabaseClusterStatus, desired: i32, now: Timestamp) -> Cell {
    let Some(phase) = status.phase else { return Cell::absent("no phase yet") };
    let tone = match phase {
        Phase::Running => Tone::Good,
        Phase::Failed | Phase::Degraded => Tone::Bad,
        Phase::Hibernated => Tone::Plain,
        _ => Tone::Warn,
    };
    let text = format!("{}\n{}/{desired} ready", phase.as_str(), status.ready_replicas);
    let ready = status.conditions.iter().find(|c| c.type_ == "Ready");
    let note = ready.map(|c| format!("Ready={} since {}", c.status, ago(c.last_transition_time.0, now)));
    let cell = Cell::text(text).tone(tone);
    match note {
        Some(note) => cell.note(note),
        None => cell,
    }
}

fn primary_cell(status: &DatabaseClusterStatus, observed: Option<&str>) -> Cell {
    let Some(primary) = status.current_primary.as_deref() else {
        return Cell::absent("no instance observed accepting writes");
    };
    let mut text = format!("{primary} {}", age_suffix(observed));
    match status.target_primary.as_deref() {
        Some(target) if target != primary => {
            text.push_str(&format!("\n→ {target} (the operator's record)"));
            Cell::text(text).tone(Tone::Warn)
        }
        _ => Cell::text(text),
    }
}

/// One line per instance: `pg-1 replica, ready, lag 0 B, streaming (12 s ago)`.
fn instances_cell(instances: &[InstanceStatus], observed: Option<&str>) -> Cell {
    if instances.is_empty() {
        return Cell::absent("no instance observed yet");
    }
    let suffix = age_suffix(observed);
    let lines: Vec<String> = instances
        .iter()
        .map(|instance| {
            let mut figures = vec![role(instance).to_owned(), readiness(instance).to_owned()];
            if let Some(lag) = instance.lag_bytes {
                figures.push(format!("lag {}", bytes(lag)));
            }
            match (instance.replication_state.as_deref(), instance.role.as_str()) {
                (Some(state), _) => figures.push(state.to_owned()),
                (None, "replica") => figures.push("not streaming".to_owned()),
                _ => {}
            }
            let mut line = format!("{} {} {suffix}", instance.name, figures.join(", "));
            if let Some(message) = &instance.message {
                line.push_str(&format!("\n  {message}"));
            }
            line
        })
        .collect();
    let all_ready = instances.iter().all(|i| i.ready);
    Cell::text(lines.join("\n")).tone(if all_ready { Tone::Good } else { Tone::Warn })
}

/// The instance's role; `role unknown` when the operator could not ask it.
fn role(instance: &InstanceStatus) -> &str {
    if instance.role == "unknown" { "role unknown" } else { &instance.role }
}

fn readiness(instance: &InstanceStatus) -> &'static str {
    if instance.ready { "ready" } else { "not ready" }
}

fn backup_cell(cluster: &DatabaseCluster, status: &DatabaseClusterStatus, now: Timestamp) -> Cell {
    let backups = status.backups.as_ref();
    let job = backups.and_then(|b| b.last_job.as_ref()).map(|job| format!("job {}: {}", job.name, job.state));
    let last = match (backups.and_then(|b| b.last.as_ref()), status.last_backup_time.as_ref()) {
        (Some(last), _) => {
            Some(format!("{}\nended {}, {}", last.name, ago(last.end_time.0, now), bytes(last.size_bytes)))
        }
        (None, Some(time)) => Some(format!("ended {}", ago(time.0, now))),
        (None, None) => None,
    };
    let failed = backups.and_then(|b| b.last_job.as_ref()).is_some_and(|job| job.state == "Failed");
    let configured = cluster.spec.backup.is_some() || cluster.spec.backup_schedule.is_some();
    let text: Vec<String> = last.into_iter().chain(job).collect();
    match (text.is_empty(), configured) {
        (true, false) => Cell::absent("no backups configured"),
        (true, true) => Cell::text("none yet"),
        (false, _) => Cell::text(text.join("\n")).tone(if failed { Tone::Bad } else { Tone::Plain }),
    }
}

/// `bytes` for a reader: `0 B`, `4096 B`, `12.3 MiB`, `1.5 GiB`.
pub fn bytes(bytes: i64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes.unsigned_abs() < 10 * 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64;
    let mut unit = "B";
    for next in UNITS {
        if value.abs() < 1024.0 {
            break;
        }
        value /= 1024.0;
        unit = next;
    }
    format!("{value:.1} {unit}")
}

#[cfg(test)]
mod tests;
