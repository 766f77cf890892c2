//! The Kubernetes version the simulated server behaves as, and what follows from it: the version
//! it reports, and which CEL functions a new expression may use.
//!
//! The apiserver compiles a CRD's new CEL expressions against the environment of the previous
//! minor version (its compatibility version, so that a rollback still understands them) and the
//! expressions already stored against its own (k8s.io/apiserver `pkg/cel/environment/base.go`).
//! So a library introduced in 1.28, like the quantity library, is usable by new expressions only
//! from 1.29 on.

use std::fmt;
use std::str::FromStr;

/// A Kubernetes minor version (the major is always 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KubernetesVersion {
    /// The minor version: 28 for 1.28.
    pub minor: u32,
}

impl KubernetesVersion {
    /// The oldest version the project supports, and the simulator's default.
    pub const OLDEST_SUPPORTED: KubernetesVersion = KubernetesVersion { minor: 28 };
    /// The newest version the simulator knows the CEL environment of.
    pub const NEWEST_KNOWN: KubernetesVersion = KubernetesVersion { minor: 34 };

    /// `1.<minor>`.
    pub const fn new(minor: u32) -> Self {
        KubernetesVersion { minor }
    }

    /// `v1.28.0`, as `/version` reports it.
    pub fn git_version(self) -> String {
        format!("v1.{}.0", self.minor)
    }

    /// Whether a new CEL expression on this server may call `function` (the version whose
    /// environment compiles new expressions is the previous minor).
    pub fn allows_new_cel_function(self, function: &str) -> bool {
        match cel_function_introduced(function) {
            Some(introduced) => self.minor > introduced,
            None => true,
        }
    }
}

impl Default for KubernetesVersion {
    fn default() -> Self {
        Self::OLDEST_SUPPORTED
    }
}

impl fmt::Display for KubernetesVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "1.{}", self.minor)
    }
}

/// Why a version string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a Kubernetes version from 1.28 to 1.34 (write it as 1.28 or v1.28)")]
pub struct VersionError(String);

impl FromStr for KubernetesVersion {
    type Err = VersionError;

    /// Parses `1.28`, `v1.28` or `v1.28.3`, within the versions the simulator knows.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || VersionError(text.to_owned());
        let rest = text.strip_prefix('v').unwrap_or(text);
        let mut parts = rest.split('.');
        if parts.next() != Some("1") {
            return Err(bad());
        }
        let minor: u32 = parts.next().and_then(|m| m.parse().ok()).ok_or_else(bad)?;
        if parts.next().is_some_and(|patch| patch.parse::<u32>().is_err()) || parts.next().is_some() {
            return Err(bad());
        }
        let version = KubernetesVersion { minor };
        let known = KubernetesVersion::OLDEST_SUPPORTED..=KubernetesVersion::NEWEST_KNOWN;
        if known.contains(&version) { Ok(version) } else { Err(bad()) }
    }
}

/// The minor version whose base environment introduced a CEL function, as k8s.io/apiserver
/// `pkg/cel/environment/base.go` adds libraries; `None` for what every supported version has (the
/// standard library, the lists, regex and URL libraries, and the strings extension at version 0).
/// `reverse` (strings version 3) is in no Kubernetes base environment the simulator knows, so it
/// never compiles.
fn cel_function_introduced(function: &str) -> Option<u32> {
    /// Library functions (and, ending in `.`, namespaces) by the version whose environment added them.
    const LIBRARIES: &[(u32, &[&str])] = &[
        // The quantity library.
        (
            28,
            &[
                "quantity",
                "isQuantity",
                "compareTo",
                "isLessThan",
                "isGreaterThan",
                "asInteger",
                "isInteger",
                "asApproximateFloat",
                "sign",
                "add",
                "sub",
            ],
        ),
        // ext.Strings(version 2) replaces version 0; ext.Sets.
        (29, &["format", "strings.", "sets."]),
        // The IP and CIDR libraries.
        (
            30,
            &[
                "ip",
                "isIP",
                "ip.isCanonical",
                "family",
                "isUnspecified",
                "isLoopback",
                "isLinkLocalMulticast",
                "isLinkLocalUnicast",
                "isGlobalUnicast",
                "cidr",
                "isCIDR",
                "containsIP",
                "containsCIDR",
                "masked",
                "prefixLength",
            ],
        ),
        // The format library (`format.dns1123Label()` and the like, `validate`).
        (31, &["format.", "validate"]),
        // The semver and image libraries.
        (33, &["semver", "isSemver", "major", "minor", "patch", "image", "isImage", "containsDigest"]),
    ];
    if function == "reverse" {
        return Some(u32::MAX);
    }
    LIBRARIES.iter().find(|(_, functions)| functions.contains(&function)).map(|(introduced, _)| *introduced)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_with_or_without_v_and_patch() {
        assert_eq!("1.28".parse(), Ok(KubernetesVersion::new(28)));
        assert_eq!("v1.30".parse(), Ok(KubernetesVersion::new(30)));
        assert_eq!("v1.29.4".parse(), Ok(KubernetesVersion::new(29)));
        for bad in ["1.27", "2.28", "1.x", "1.28.x", "1.28.0.1", "", "1.35"] {
            assert!(bad.parse::<KubernetesVersion>().is_err(), "{bad}");
        }
    }

    #[test]
    fn new_expressions_get_a_library_one_minor_after_it_is_introduced() {
        let (v28, v29, v30) =
            (KubernetesVersion::new(28), KubernetesVersion::new(29), KubernetesVersion::new(30));
        assert!(!v28.allows_new_cel_function("isQuantity"));
        assert!(v29.allows_new_cel_function("isQuantity"));
        assert!(!v29.allows_new_cel_function("format"));
        assert!(v30.allows_new_cel_function("format"));
        assert!(v28.allows_new_cel_function("split") && v28.allows_new_cel_function("join"));
        assert!(!KubernetesVersion::NEWEST_KNOWN.allows_new_cel_function("reverse"));
    }

    #[test]
    fn libraries_arrive_as_base_go_adds_them() {
        let at = KubernetesVersion::new;
        // Lists, regex and URLs are in every base environment.
        for function in ["isSorted", "sum", "min", "max", "indexOf", "find", "findAll", "url", "isURL"] {
            assert!(at(28).allows_new_cel_function(function), "{function}");
        }
        assert!(!at(29).allows_new_cel_function("sets.") && at(30).allows_new_cel_function("sets."));
        assert!(!at(30).allows_new_cel_function("isIP") && at(31).allows_new_cel_function("isIP"));
        assert!(!at(31).allows_new_cel_function("format.") && at(32).allows_new_cel_function("format."));
        assert!(!at(33).allows_new_cel_function("isSemver") && at(34).allows_new_cel_function("isSemver"));
    }
}
