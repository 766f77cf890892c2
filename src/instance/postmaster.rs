//! The postmaster as the manager's child: started with the ConfigMap's files and this pod's
//! address, socket directory and port as `-c` options, its log on its stderr (no logging
//! collector: the manager turns each message into a JSON line, [`super::server_log`]), in the data
//! directory (a working directory its user can read: PostgreSQL's programs go back to theirs
//! after finding their own executable, and complain when they cannot), and its exit status turned
//! into the manager's own (`128 + signal` when a signal ended it, as a shell reports it), so the
//! container exits as the server did.

use std::ffi::OsString;
use std::process::{ExitStatus, Stdio};

use tokio::process::{Child, Command};

use super::settings::Settings;

/// The `postgres` arguments for `settings`, then `extra` (from `instance run -- …`).
pub fn arguments(settings: &Settings, extra: &[String]) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["-D".into(), settings.pgdata.clone().into()];
    let option =
        |name: &str, value: String| -> [OsString; 2] { ["-c".into(), format!("{name}={value}").into()] };
    let file = |name: &str| settings.config_file(name).display().to_string();
    for [c, value] in [
        option("config_file", file("postgresql.conf")),
        option("hba_file", file("pg_hba.conf")),
        option("ident_file", file("pg_ident.conf")),
        option("listen_addresses", settings.pod_ip.clone()),
        option("port", settings.port.to_string()),
        option("unix_socket_directories", settings.run_dir.display().to_string()),
        option("unix_socket_permissions", "0700".to_owned()),
        option("logging_collector", "off".to_owned()),
        option("log_destination", "stderr".to_owned()),
    ] {
        args.push(c);
        args.push(value);
    }
    for (name, value) in super::tls::server_options(settings) {
        args.extend(option(name, value));
    }
    args.extend(extra.iter().map(OsString::from));
    args
}

/// Starts `postgres` (found on `PATH`) with its stdout and stderr piped to the manager.
pub fn spawn(settings: &Settings, extra: &[String]) -> std::io::Result<Child> {
    Command::new("postgres")
        .args(arguments(settings, extra))
        .current_dir(&settings.pgdata)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
}

/// The exit code a shell would report for `status`.
pub fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    let code = match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => 1,
    };
    u8::try_from(code).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    #[test]
    fn the_exit_code_is_the_servers() {
        // Raw wait statuses: code << 8 for an exit, the signal number for a kill.
        let cases = [(0, 0), (1 << 8, 1), (3 << 8, 3), (libc::SIGKILL, 137), (libc::SIGINT, 130)];
        for (raw, want) in cases {
            assert_eq!(exit_code(ExitStatus::from_raw(raw)), want, "raw status {raw}");
        }
    }

    #[test]
    fn the_server_binds_the_pod_address_and_the_private_socket() {
        let settings = Settings::sample();
        let args: Vec<String> = arguments(&settings, &["-c".into(), "work_mem=8MB".into()])
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let joined = args.join(" ");
        for want in [
            "-D /data/pgdata",
            "-c config_file=/etc/dbcluster/postgresql.conf",
            "-c listen_addresses=10.0.0.3",
            "-c port=5432",
            "-c unix_socket_directories=/run/dbcluster",
            "-c unix_socket_permissions=0700",
            "-c logging_collector=off",
            "-c log_destination=stderr",
        ] {
            assert!(joined.contains(want), "{want} in {joined}");
        }
        assert!(joined.ends_with("-c work_mem=8MB"));
    }
}
