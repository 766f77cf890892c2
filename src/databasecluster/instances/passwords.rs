//! Whether the database holds the login Secrets' passwords, decided purely from what the primary's
//! instance manager reports. The manager sets the passwords itself, at its start and whenever the
//! mounted Secret files change; it reports each login's version
//! ([`crate::instance::status::credential_version`]: a keyed hash, never the password). The
//! operator compares them with the versions of its Secrets ([`desired_versions`]):
//!
//! - a login whose reported version differs is pending: the pass looks again soon (the kubelet
//!   has still to refresh the mounted files, or the manager to apply them);
//! - a login whose reported version matches, while the status recorded another version before, was
//!   applied since: Event `PasswordApplied`;
//! - `status.appliedSecretVersions` records each login's version once the primary reports it
//!   (the first version recorded brings no Event: the instance applied it at its start).

use std::collections::BTreeMap;

use crate::instance::status::credential_version;

/// Per login directory (`superuser`, `replication`, `app`): a version.
pub type Versions = BTreeMap<String, String>;

/// The versions of the Secrets' logins (`(login directory, user, password)`) under `token`.
pub fn desired_versions<'a>(
    token: &str,
    logins: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>,
) -> Versions {
    logins
        .into_iter()
        .map(|(login, user, password)| (login.to_owned(), credential_version(token, user, password)))
        .collect()
}

/// What [`password_progress`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PasswordProgress {
    /// Logins whose Secret the primary has not applied yet.
    pub pending: Vec<String>,
    /// Logins whose Secret the primary applied since the status recorded another version.
    pub applied: Vec<String>,
    /// What the status records now.
    pub record: Versions,
}

/// Compares `desired` with what the primary `reported` (`None`: it was not observed, and nothing
/// is known) and what the status `recorded`.
pub fn password_progress(
    desired: &Versions,
    reported: Option<&Versions>,
    recorded: &Versions,
) -> PasswordProgress {
    let mut progress = PasswordProgress { record: recorded.clone(), ..PasswordProgress::default() };
    let Some(reported) = reported else { return progress };
    for (login, want) in desired {
        if reported.get(login) != Some(want) {
            progress.pending.push(login.clone());
            continue;
        }
        if recorded.get(login).is_some_and(|before| before != want) {
            progress.applied.push(login.clone());
        }
        progress.record.insert(login.clone(), want.clone());
    }
    progress
}

#[cfg(test)]
mod tests {
    use super::*;

    fn versions(pairs: &[(&str, &str)]) -> Versions {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn a_changed_secret_is_pending_until_the_primary_reports_it_then_applied_once() {
        let desired = versions(&[("app", "v2"), ("superuser", "s1")]);
        let strings = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        // (reported, recorded) → (pending, applied, record)
        let cases = [
            // Not observed: nothing known, the record kept.
            (None, versions(&[("app", "v1")]), strings(&[]), strings(&[]), versions(&[("app", "v1")])),
            // The primary still holds v1: pending, the record kept.
            (
                Some(versions(&[("app", "v1"), ("superuser", "s1")])),
                versions(&[("app", "v1"), ("superuser", "s1")]),
                strings(&["app"]),
                strings(&[]),
                versions(&[("app", "v1"), ("superuser", "s1")]),
            ),
            // Applied since: one Event, recorded.
            (
                Some(versions(&[("app", "v2"), ("superuser", "s1")])),
                versions(&[("app", "v1"), ("superuser", "s1")]),
                strings(&[]),
                strings(&["app"]),
                desired.clone(),
            ),
            // Recorded already: no second Event.
            (Some(desired.clone()), desired.clone(), strings(&[]), strings(&[]), desired.clone()),
            // The first versions recorded (a new cluster): no Event.
            (Some(desired.clone()), Versions::new(), strings(&[]), strings(&[]), desired.clone()),
            // A manager that reports nothing yet: every login pending.
            (
                Some(Versions::new()),
                Versions::new(),
                strings(&["app", "superuser"]),
                strings(&[]),
                Versions::new(),
            ),
        ];
        for (reported, recorded, pending, applied, record) in cases {
            let want = PasswordProgress { pending, applied, record };
            assert_eq!(
                password_progress(&desired, reported.as_ref(), &recorded),
                want,
                "{reported:?} {recorded:?}"
            );
        }
    }

    #[test]
    fn versions_are_the_managers() {
        let desired = desired_versions("token", [("app", "app", "pw")]);
        assert_eq!(desired, versions(&[("app", &credential_version("token", "app", "pw"))]));
    }
}
