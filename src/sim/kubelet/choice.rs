//! Which kubelet a simulator should run when the user did not say: the process kubelet when it
//! can run PostgreSQL here (root, and the server binaries of the operator's default major
//! version installed), the timer kubelet otherwise — with the reason, for the `demo` command to
//! print at start.

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

/// The kubelet for `requested` (the user's choice, if any), running PostgreSQL `major`.
pub fn choose(requested: Option<KubeletKind>, major: u32) -> Choice {
    let bin = images::postgres_bin_dir(major);
    match (requested, bin, is_root()) {
        (Some(KubeletKind::Timer), ..) => Choice {
            kind: KubeletKind::Timer,
            reason: "the timer kubelet, as asked: pods turn Ready on a timer and run nothing".into(),
        },
        (Some(KubeletKind::Process), _, _) | (None, Some(_), true) => Choice {
            kind: KubeletKind::Process,
            reason: format!(
                "the process kubelet: pods run as local processes, postgres:{major} with the PostgreSQL {major} binaries in {}",
                images::postgres_bin_dir(major)
                    .map_or_else(|| "(not found)".to_owned(), |d| d.display().to_string())
            ),
        },
        (None, None, _) => Choice {
            kind: KubeletKind::Timer,
            reason: format!(
                "the timer kubelet (pods turn Ready on a timer): no PostgreSQL {major} server binaries here (Debian: apt-get install postgresql-{major})"
            ),
        },
        (None, Some(_), false) => Choice {
            kind: KubeletKind::Timer,
            reason: "the timer kubelet (pods turn Ready on a timer): the process kubelet needs root".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_explicit_choice_wins_and_the_default_depends_on_the_host() {
        assert_eq!(choose(Some(KubeletKind::Timer), 15).kind, KubeletKind::Timer);
        assert_eq!(choose(Some(KubeletKind::Process), 15).kind, KubeletKind::Process);
        let missing = choose(None, 3);
        assert_eq!(missing.kind, KubeletKind::Timer);
        assert!(missing.reason.contains("postgresql-3"), "{}", missing.reason);
        let here = choose(None, 15);
        let expected = if images::postgres_bin_dir(15).is_some() && is_root() {
            KubeletKind::Process
        } else {
            KubeletKind::Timer
        };
        assert_eq!(here.kind, expected, "{}", here.reason);
    }
}
