//! Which kubelet a simulator should run: the user's choice when given, else the process kubelet
//! when it can run PostgreSQL here (root, and the server binaries of the sample's major version
//! installed), the timer kubelet otherwise — with the reason, for the `demo` command to print at
//! start. Asking for the process kubelet where it cannot run PostgreSQL is an error saying what is
//! missing (without root it would run nothing; without the binaries every `postgres` pod would be
//! `ErrImagePull`).

use std::path::PathBuf;

use crate::sim::KubeletKind;
use crate::sim::kubelet::{images, is_root};

/// A kubelet and why it was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// The kubelet.
    pub kind: KubeletKind,
    /// One sentence: why.
    pub reason: String,
}

/// What the choice depends on about this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// Where the PostgreSQL server binaries of the wanted major version are, if installed.
    pub postgres_bin: Option<PathBuf>,
    /// Whether this process runs as root.
    pub root: bool,
}

impl Host {
    /// This host, for PostgreSQL `major`.
    pub fn here(major: u32) -> Self {
        Self { postgres_bin: images::postgres_bin_dir(major), root: is_root() }
    }
}

/// The kubelet for `requested` (the user's choice, if any) on this host, running PostgreSQL `major`.
pub fn choose(requested: Option<KubeletKind>, major: u32) -> Result<Choice, String> {
    choose_on(requested, major, &Host::here(major))
}

/// [`choose`] on a given host (pure).
pub fn choose_on(requested: Option<KubeletKind>, major: u32, host: &Host) -> Result<Choice, String> {
    let install = format!("Debian: apt-get install postgresql-{major}");
    match (requested, &host.postgres_bin, host.root) {
        (Some(KubeletKind::Timer), ..) => Ok(Choice {
            kind: KubeletKind::Timer,
            reason: "the timer kubelet, as asked: pods turn Ready on a timer and run nothing".into(),
        }),
        (_, Some(bin), true) => Ok(Choice {
            kind: KubeletKind::Process,
            reason: format!(
                "the process kubelet{}: pods run as local processes, postgres:{major} with the PostgreSQL {major} binaries in {}",
                if requested.is_some() { ", as asked" } else { "" },
                bin.display()
            ),
        }),
        (Some(KubeletKind::Process), _, false) => Err(
            "the process kubelet needs root (mount and PID namespaces, bind mounts, runAsUser): run as root, or use --kubelet timer"
                .to_owned(),
        ),
        (Some(KubeletKind::Process), None, true) => Err(format!(
            "the process kubelet needs the PostgreSQL {major} server binaries ({install}), or use --kubelet timer"
        )),
        (None, None, _) => Ok(Choice {
            kind: KubeletKind::Timer,
            reason: format!(
                "the timer kubelet (pods turn Ready on a timer, nothing runs): no PostgreSQL {major} server binaries here ({install})"
            ),
        }),
        (None, Some(_), false) => Ok(Choice {
            kind: KubeletKind::Timer,
            reason: "the timer kubelet (pods turn Ready on a timer, nothing runs): the process kubelet needs root".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(bin: bool, root: bool) -> Host {
        Host { postgres_bin: bin.then(|| PathBuf::from("/usr/lib/postgresql/15/bin")), root }
    }

    #[test]
    fn the_default_is_the_process_kubelet_only_as_root_with_the_binaries() {
        let process = choose_on(None, 15, &host(true, true)).unwrap();
        assert_eq!(process.kind, KubeletKind::Process);
        assert!(process.reason.contains("/usr/lib/postgresql/15/bin"), "{}", process.reason);
        let no_root = choose_on(None, 15, &host(true, false)).unwrap();
        assert_eq!(no_root.kind, KubeletKind::Timer);
        assert!(no_root.reason.contains("needs root"), "{}", no_root.reason);
        let no_bin = choose_on(None, 15, &host(false, true)).unwrap();
        assert_eq!(no_bin.kind, KubeletKind::Timer);
        assert!(no_bin.reason.contains("apt-get install postgresql-15"), "{}", no_bin.reason);
    }

    #[test]
    fn an_explicit_choice_wins_or_says_what_is_missing() {
        for (bin, root) in [(true, true), (false, false), (true, false), (false, true)] {
            let timer = choose_on(Some(KubeletKind::Timer), 15, &host(bin, root)).unwrap();
            assert_eq!(timer.kind, KubeletKind::Timer);
        }
        let asked = choose_on(Some(KubeletKind::Process), 15, &host(true, true)).unwrap();
        assert_eq!(asked.kind, KubeletKind::Process);
        assert!(asked.reason.contains("as asked"), "{}", asked.reason);
        let no_root = choose_on(Some(KubeletKind::Process), 15, &host(true, false)).unwrap_err();
        assert!(no_root.contains("needs root") && no_root.contains("--kubelet timer"), "{no_root}");
        let no_bin = choose_on(Some(KubeletKind::Process), 15, &host(false, true)).unwrap_err();
        assert!(no_bin.contains("postgresql-15"), "{no_bin}");
    }

    #[test]
    fn this_host_is_read_as_it_is() {
        assert_eq!(Host::here(15), Host { postgres_bin: images::postgres_bin_dir(15), root: is_root() });
        assert!(Host::here(3).postgres_bin.is_none());
    }
}
