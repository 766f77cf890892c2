//! The instance manager's decisions, as pure functions over observed facts (no I/O here; each has
//! a table of cases below):
//!
//! - [`recorded_primary`]: who the record (`$DBC_CONFIG/primary`) names primary; instance 0 of the
//!   StatefulSet when the record is missing or empty (a new cluster).
//! - [`role`]: primary when the record names this pod, a standby otherwise. Never the ordinal.
//! - [`plan_primary`]: initdb an empty volume; start kept data out of recovery.
//! - [`plan_standby`]: clone an empty volume; re-clone data of another cluster (system identifiers
//!   differ) or of another major version (a standby after a major upgrade of its primary); keep a standby's data; start data shut down cleanly as primary as the new primary's
//!   standby without a rewind while that one is not writable yet (a switchover: the operator
//!   promotes it only once it replayed this data's shutdown checkpoint); rewind data that last ran
//!   as primary once the recorded primary accepts writes; wait for it until then (never start as a
//!   second primary).
//! - [`watch`]: while the server runs: fence (fast shutdown) a server out of recovery that the
//!   record no longer names; re-point a standby at a newly recorded primary.
//! - [`readiness`]: ready when the server answers in its role with the credentials applied.
//! - [`credentials_action`]: while the server runs, re-apply the mounted Secrets on a primary
//!   (or rewrite a standby's password file) when they are not the ones last applied in this role.
//! - [`slot_name_allowed`]: the only slots the operator may have the manager create or drop.

use std::collections::BTreeMap;

/// What this instance must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The record names this pod.
    Primary,
    /// The record names another pod.
    Standby,
}

impl Role {
    /// `primary` or `standby`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Primary => "primary",
            Role::Standby => "standby",
        }
    }
}

/// The pod the record names primary: the file's content without whitespace, or `<statefulset>-0`
/// (this pod's name with its ordinal replaced) when the file is missing or blank.
pub fn recorded_primary(record: Option<&str>, pod_name: &str) -> String {
    let named: String = record.unwrap_or_default().chars().filter(|c| !c.is_whitespace()).collect();
    if !named.is_empty() {
        return named;
    }
    match pod_name.rsplit_once('-') {
        Some((statefulset, _)) => format!("{statefulset}-0"),
        None => format!("{pod_name}-0"),
    }
}

/// This pod's role under the record.
pub fn role(recorded: &str, pod_name: &str) -> Role {
    if recorded == pod_name { Role::Primary } else { Role::Standby }
}

/// What to do with the data directory of the recorded primary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrimaryPlan {
    /// No data: initdb.
    Initdb,
    /// Data that ran as a standby: remove `standby.signal`, start out of recovery.
    LeaveRecovery,
    /// Data already a primary's: start it.
    Keep,
}

/// The recorded primary's plan from whether it has data and a `standby.signal`.
pub fn plan_primary(has_data: bool, standby_signal: bool) -> PrimaryPlan {
    match (has_data, standby_signal) {
        (false, _) => PrimaryPlan::Initdb,
        (true, true) => PrimaryPlan::LeaveRecovery,
        (true, false) => PrimaryPlan::Keep,
    }
}

/// What a standby's preparation observed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StandbyFacts {
    /// `PG_VERSION` exists in the data directory.
    pub has_data: bool,
    /// The data's system identifier (`pg_controldata`), when it has data.
    pub local_system_id: Option<u64>,
    /// The recorded primary, when it answered.
    pub primary: Option<PrimaryFacts>,
    /// `standby.signal` exists: the data last ran (or was set up to run) as a standby.
    pub standby_signal: bool,
    /// The control file's state is `shut down`: a clean shutdown out of recovery.
    pub clean_shutdown: bool,
    /// The data's `PG_VERSION` is not the server's major version: written by another major.
    pub other_major: bool,
}

/// What the recorded primary says about itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrimaryFacts {
    /// Its system identifier.
    pub system_id: u64,
    /// Out of recovery: accepts writes.
    pub writable: bool,
}

/// What a standby does with its data directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StandbyPlan {
    /// No data: clone the primary.
    Clone,
    /// The data belongs to another cluster or major version: remove it and clone.
    Reclone,
    /// A standby's data: keep it.
    Keep,
    /// Shut down cleanly as primary while the recorded primary is not writable yet (a
    /// switchover): start as its standby without a rewind.
    JoinWithoutRewind,
    /// Last ran as primary and the recorded primary accepts writes: rewind onto its timeline.
    Rewind,
    /// Last ran as primary and the recorded primary is not writable (or did not answer): wait,
    /// then look again.
    WaitForPrimary,
}

/// The standby's plan (see the module docs). An unreachable primary leaves the data as it is:
/// identifiers cannot be compared, and a clean primary shutdown joins without rewind.
pub fn plan_standby(facts: &StandbyFacts) -> StandbyPlan {
    if !facts.has_data {
        return StandbyPlan::Clone;
    }
    if facts.other_major {
        return StandbyPlan::Reclone;
    }
    if let (Some(mine), Some(primary)) = (facts.local_system_id, facts.primary)
        && mine != primary.system_id
    {
        return StandbyPlan::Reclone;
    }
    if facts.standby_signal {
        return StandbyPlan::Keep;
    }
    let writable = facts.primary.is_some_and(|p| p.writable);
    match (facts.clean_shutdown, writable) {
        (true, false) => StandbyPlan::JoinWithoutRewind,
        (_, true) => StandbyPlan::Rewind,
        (false, false) => StandbyPlan::WaitForPrimary,
    }
}

/// What the watcher does on one tick.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchAction {
    /// Nothing to do.
    Nothing,
    /// Out of recovery while the record names `recorded`: fast shutdown (the container restarts
    /// and rejoins as a standby).
    Fence {
        /// The recorded primary.
        recorded: String,
    },
    /// A standby following another primary than `recorded`: re-point `primary_conninfo`, reload.
    Follow {
        /// The recorded primary.
        recorded: String,
    },
}

/// One tick of the watcher: `recorded` is the record now, `followed` the primary this standby was
/// last pointed at, `in_recovery` what the server answered (`None`: no answer, so nothing is done).
pub fn watch(pod_name: &str, recorded: &str, followed: &str, in_recovery: Option<bool>) -> WatchAction {
    if recorded == pod_name {
        return WatchAction::Nothing;
    }
    match in_recovery {
        Some(false) => WatchAction::Fence { recorded: recorded.to_owned() },
        Some(true) if recorded != followed => WatchAction::Follow { recorded: recorded.to_owned() },
        _ => WatchAction::Nothing,
    }
}

/// Why `/readyz` refuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotReady {
    /// The server is starting, or the primary's credentials are not applied yet.
    Starting,
    /// The server did not answer in time.
    NoAnswer,
    /// The server answers, but not in its role (a primary in recovery, a standby out of it).
    WrongRole,
}

/// Readiness: started with credentials applied, answering, and in recovery exactly when a standby.
pub fn readiness(role: Role, started: bool, in_recovery: Option<bool>) -> Result<(), NotReady> {
    if !started {
        return Err(NotReady::Starting);
    }
    match (role, in_recovery) {
        (_, None) => Err(NotReady::NoAnswer),
        (Role::Primary, Some(false)) | (Role::Standby, Some(true)) => Ok(()),
        _ => Err(NotReady::WrongRole),
    }
}

/// What the manager last applied of the mounted Secrets: in which role, and their versions
/// (`super::credentials::Versions`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The role it applied them in: a primary sets the roles' passwords, a standby writes its
    /// password file.
    pub role: Role,
    /// Per login directory, the version applied.
    pub versions: BTreeMap<String, String>,
}

/// What the watcher does about the credentials on one tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CredentialsAction {
    /// They are applied.
    Nothing,
    /// A primary: set the passwords from the mounted Secrets.
    Apply,
    /// A standby: rewrite the password file it replicates (and rewinds) with.
    WritePasswordFile,
}

/// The credentials step of a tick: `mounted` are the versions of the files now, `applied` what
/// was last applied, `in_recovery` what the server answered. A primary applies once it answers
/// out of recovery (a promoted standby applies too: it never set the passwords); a standby
/// rewrites its password file; nothing while the server has not started (its start applies them).
pub fn credentials_action(
    role: Role,
    started: bool,
    in_recovery: Option<bool>,
    mounted: &BTreeMap<String, String>,
    applied: Option<&Applied>,
) -> CredentialsAction {
    let current = applied.is_some_and(|a| a.role == role && &a.versions == mounted);
    if !started || current {
        return CredentialsAction::Nothing;
    }
    match (role, in_recovery) {
        (Role::Primary, Some(false)) => CredentialsAction::Apply,
        (Role::Primary, _) => CredentialsAction::Nothing,
        (Role::Standby, _) => CredentialsAction::WritePasswordFile,
    }
}

/// Whether the operator may have the manager create or drop slot `name`: only the instances'
/// own slots (`instance_<ordinal>`), never another tool's.
pub fn slot_name_allowed(name: &str) -> bool {
    name.strip_prefix("instance_")
        .is_some_and(|n| !n.is_empty() && n.len() <= 9 && n.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_applied_again_when_the_mounted_files_change() {
        use CredentialsAction::*;
        let v = |app: &str| BTreeMap::from([("app".to_owned(), app.to_owned())]);
        let applied = |role, app: &str| Some(Applied { role, versions: v(app) });
        let (p, s) = (Role::Primary, Role::Standby);
        // (role, started, in recovery, mounted, applied) → action
        let cases = [
            (p, true, Some(false), v("a"), applied(p, "a"), Nothing),
            (p, true, Some(false), v("b"), applied(p, "a"), Apply),
            (p, true, None, v("b"), applied(p, "a"), Nothing),
            (p, true, Some(true), v("b"), applied(p, "a"), Nothing),
            (p, false, Some(false), v("b"), None, Nothing),
            // Promoted: it wrote a password file as a standby, it never set the passwords.
            (p, true, Some(false), v("a"), applied(s, "a"), Apply),
            (p, true, Some(false), v("a"), None, Apply),
            (s, true, Some(true), v("a"), applied(s, "a"), Nothing),
            (s, true, Some(true), v("b"), applied(s, "a"), WritePasswordFile),
            (s, true, None, v("b"), None, WritePasswordFile),
            (s, false, Some(true), v("b"), None, Nothing),
        ];
        for (role, started, recovery, mounted, applied, want) in cases {
            assert_eq!(
                credentials_action(role, started, recovery, &mounted, applied.as_ref()),
                want,
                "{role:?} started {started} {recovery:?} {mounted:?} {applied:?}"
            );
        }
    }

    #[test]
    fn only_the_instances_slots_may_be_managed() {
        for (name, want) in [
            ("instance_0", true),
            ("instance_12", true),
            ("instance_", false),
            ("instance_x", false),
            ("instance_1; DROP", false),
            ("backup_slot", false),
            ("instance_1234567890", false),
            ("", false),
        ] {
            assert_eq!(slot_name_allowed(name), want, "{name}");
        }
    }

    #[test]
    fn the_record_names_the_primary_and_defaults_to_instance_zero() {
        let cases = [
            (Some("db-postgres-1\n"), "db-postgres-2", "db-postgres-1"),
            (Some("  db-postgres-2 "), "db-postgres-2", "db-postgres-2"),
            (Some(""), "db-postgres-2", "db-postgres-0"),
            (Some(" \n"), "db-postgres-1", "db-postgres-0"),
            (None, "db-postgres-1", "db-postgres-0"),
            (None, "solo", "solo-0"),
        ];
        for (record, pod, want) in cases {
            assert_eq!(recorded_primary(record, pod), want, "{record:?} seen from {pod}");
        }
    }

    #[test]
    fn the_role_is_the_records_never_the_ordinal() {
        let cases = [
            ("db-0", "db-0", Role::Primary),
            ("db-1", "db-1", Role::Primary),
            ("db-1", "db-0", Role::Standby),
            ("db-0", "db-2", Role::Standby),
        ];
        for (recorded, pod, want) in cases {
            assert_eq!(role(recorded, pod), want, "record {recorded}, pod {pod}");
        }
    }

    #[test]
    fn a_primary_initialises_an_empty_volume_and_leaves_recovery() {
        let cases = [
            (false, false, PrimaryPlan::Initdb),
            (false, true, PrimaryPlan::Initdb),
            (true, true, PrimaryPlan::LeaveRecovery),
            (true, false, PrimaryPlan::Keep),
        ];
        for (has_data, signal, want) in cases {
            assert_eq!(plan_primary(has_data, signal), want, "data {has_data}, standby.signal {signal}");
        }
    }

    #[test]
    fn a_standby_keeps_clones_rewinds_or_waits() {
        use StandbyPlan::*;
        let up = |system_id, writable| Some(PrimaryFacts { system_id, writable });
        // (has data, local id, primary, standby.signal, clean shutdown) → plan
        let cases = [
            (false, None, up(1, true), false, false, Clone),
            (false, None, None, false, false, Clone),
            // Another cluster's data, whatever state it is in.
            (true, Some(2), up(1, true), true, false, Reclone),
            (true, Some(2), up(1, false), false, true, Reclone),
            // A standby's data: kept, reachable primary or not.
            (true, Some(1), up(1, true), true, false, Keep),
            (true, Some(1), None, true, true, Keep),
            // Last ran as primary, shut down cleanly, the new primary not promoted yet: a switchover.
            (true, Some(1), up(1, false), false, true, JoinWithoutRewind),
            (true, Some(1), None, false, true, JoinWithoutRewind),
            // Last ran as primary and the recorded one accepts writes: rewind (crashed or clean).
            (true, Some(1), up(1, true), false, false, Rewind),
            (true, Some(1), up(1, true), false, true, Rewind),
            // Crashed as primary, the recorded one not writable or unreachable: never start.
            (true, Some(1), up(1, false), false, false, WaitForPrimary),
            (true, Some(1), None, false, false, WaitForPrimary),
            // The local identifier unreadable: compared with nothing, the rest decides.
            (true, None, up(1, true), true, false, Keep),
        ];
        for (has_data, local_system_id, primary, standby_signal, clean_shutdown, want) in cases {
            let facts = StandbyFacts {
                has_data,
                local_system_id,
                primary,
                standby_signal,
                clean_shutdown,
                other_major: false,
            };
            assert_eq!(plan_standby(&facts), want, "{facts:?}");
        }
    }

    #[test]
    fn a_standby_whose_data_another_major_wrote_is_recloned() {
        let primary = Some(PrimaryFacts { system_id: 1, writable: true });
        let facts = StandbyFacts {
            has_data: true,
            primary,
            standby_signal: true,
            other_major: true,
            ..Default::default()
        };
        assert_eq!(plan_standby(&facts), StandbyPlan::Reclone);
    }

    #[test]
    fn the_watcher_fences_a_demoted_primary_and_follows_a_new_one() {
        let fence = |r: &str| WatchAction::Fence { recorded: r.into() };
        let follow = |r: &str| WatchAction::Follow { recorded: r.into() };
        // (pod, recorded, followed, in recovery) → action
        let cases = [
            ("db-0", "db-0", "db-0", Some(false), WatchAction::Nothing),
            ("db-0", "db-0", "db-1", Some(true), WatchAction::Nothing),
            ("db-0", "db-1", "db-0", Some(false), fence("db-1")),
            ("db-0", "db-1", "db-1", Some(false), fence("db-1")),
            ("db-2", "db-1", "db-0", Some(true), follow("db-1")),
            ("db-2", "db-1", "db-1", Some(true), WatchAction::Nothing),
            ("db-2", "db-1", "db-0", None, WatchAction::Nothing),
            ("db-0", "db-1", "db-0", None, WatchAction::Nothing),
        ];
        for (pod, recorded, followed, recovery, want) in cases {
            assert_eq!(
                watch(pod, recorded, followed, recovery),
                want,
                "{pod} {recorded} {followed} {recovery:?}"
            );
        }
    }

    #[test]
    fn ready_means_answering_in_its_role_with_credentials_applied() {
        use NotReady::*;
        let cases = [
            (Role::Primary, false, Some(false), Err(Starting)),
            (Role::Primary, true, Some(false), Ok(())),
            (Role::Primary, true, Some(true), Err(WrongRole)),
            (Role::Primary, true, None, Err(NoAnswer)),
            (Role::Standby, true, Some(true), Ok(())),
            (Role::Standby, true, Some(false), Err(WrongRole)),
            (Role::Standby, false, Some(true), Err(Starting)),
            (Role::Standby, true, None, Err(NoAnswer)),
        ];
        for (role, started, recovery, want) in cases {
            assert_eq!(readiness(role, started, recovery), want, "{role:?} {started} {recovery:?}");
        }
    }
}
