//! Which changes of `spec.version` a cluster admits: the same rule twice, as the CRD's CEL
//! transition rule ([`version_change_rule`]) and as the operator's own check
//! ([`check_version_change`]) for a spec that slipped past an older CRD.
//!
//! 1. A version with the same major as the spec had, or as the instances run
//!    (`status.currentVersion`), is always admitted: a minor change rolls, and returning to the
//!    running major after a failed upgrade is how a user gives it up.
//! 2. A later major is admitted when the running major (the spec's, before anything ran) is
//!    PostgreSQL 10 or later: `pg_upgrade` upgrades from 9.2 or later to its own version, so every
//!    upward move between the majors the operator runs (10 and later, whose major is the first
//!    number) is one it can do, 15 to 18 in one step included.
//! 3. Anything else is refused: a lower major (a data directory cannot go back) and a move from
//!    a 9.x or earlier version (the first number is then not the major).

use thiserror::Error;

/// The lowest major version the operator upgrades from.
pub const LOWEST_UPGRADABLE_MAJOR: u32 = 10;

/// Message of the CEL rule that refuses a downgrade or a major change `pg_upgrade` cannot do.
pub const VERSION_CHANGE_MESSAGE: &str = "spec.version may move to a later major version (PostgreSQL 10 \
     or later, upgraded in place with pg_upgrade) or back to the major the instances run, never to an \
     earlier major: a data directory cannot be downgraded; create a new cluster and migrate the data";

/// The version pattern under which the rule compares numbers (the CRD's own pattern, which an
/// object stored under an older CRD may not meet: such a value is left to the operator's check).
const NUMERIC: &str = "^[0-9]+([.][0-9]+)?$";

/// The major of `var` (a version string) as CEL text.
fn major(var: &str) -> String {
    format!("{var}.split('.')[0]")
}

/// The CEL transition rule on the whole object (it reads `status.currentVersion`, which a rule on
/// `spec.version` cannot see), compiled by Kubernetes 1.28: see the module docs.
pub fn version_change_rule() -> String {
    let (new, old, running) = ("self.spec.version", "oldSelf.spec.version", "self.status.currentVersion");
    let has_running = "has(self.status) && has(self.status.currentVersion)";
    let base = format!("(({has_running}) ? {running} : {old})");
    format!(
        "{new_major} == {old_major} || (({has_running}) && {new_major} == {running_major}) || \
         (!{new}.matches('{NUMERIC}') || !{base}.matches('{NUMERIC}') ? false : \
         int({base_major}) >= {LOWEST_UPGRADABLE_MAJOR} && int({new_major}) > int({base_major}))",
        new_major = major(new),
        old_major = major(old),
        running_major = major(running),
        base_major = major(&base),
    )
}

/// A change of `spec.version` the cluster does not admit.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum VersionChangeError {
    /// The desired major is below the running one.
    #[error(
        "spec.version {desired:?} would downgrade a cluster running {running:?}: a data directory \
         cannot go back to an earlier major version; create a new cluster and migrate the data"
    )]
    Downgrade {
        /// The version the instances run.
        running: String,
        /// The version the spec asks for.
        desired: String,
    },
    /// The running major is one the operator does not upgrade from.
    #[error(
        "spec.version {desired:?} changes the major version of a cluster running {running:?}: \
         in-place upgrades start from PostgreSQL {LOWEST_UPGRADABLE_MAJOR} or later"
    )]
    Unsupported {
        /// The version the instances run.
        running: String,
        /// The version the spec asks for.
        desired: String,
    },
}

/// The major version (the first number) of a version string, if it has one.
pub fn major_number(version: &str) -> Option<u32> {
    version.split('.').next()?.parse().ok()
}

/// Checks `desired` against the version the instances run: `Ok(true)` when it is a major upgrade,
/// `Ok(false)` for the same major; see the module docs.
pub fn check_version_change(running: &str, desired: &str) -> Result<bool, VersionChangeError> {
    let (from, to) = (major_number(running), major_number(desired));
    let pair = || (running.to_owned(), desired.to_owned());
    match (from, to) {
        (Some(from), Some(to)) if from == to => Ok(false),
        (Some(from), Some(to)) if to < from => {
            let (running, desired) = pair();
            Err(VersionChangeError::Downgrade { running, desired })
        }
        (Some(from), Some(_)) if from >= LOWEST_UPGRADABLE_MAJOR => Ok(true),
        _ => {
            let (running, desired) = pair();
            Err(VersionChangeError::Unsupported { running, desired })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upward_major_from_10_or_later_is_an_upgrade_and_the_same_major_is_not() {
        assert_eq!(check_version_change("15.4", "18"), Ok(true));
        assert_eq!(check_version_change("15", "16.2"), Ok(true));
        assert_eq!(check_version_change("10.1", "18.1"), Ok(true));
        assert_eq!(check_version_change("15.4", "15.5"), Ok(false));
        assert_eq!(check_version_change("15.4", "15"), Ok(false));
    }

    #[test]
    fn a_downgrade_and_a_move_from_before_10_are_refused_with_the_versions() {
        let down = check_version_change("18", "15.4").unwrap_err();
        assert!(matches!(down, VersionChangeError::Downgrade { .. }));
        assert!(down.to_string().contains("\"15.4\"") && down.to_string().contains("\"18\""), "{down}");
        let old = check_version_change("9.6", "15").unwrap_err();
        assert!(matches!(old, VersionChangeError::Unsupported { .. }), "{old}");
        assert!(old.to_string().contains("PostgreSQL 10"), "{old}");
    }
}
