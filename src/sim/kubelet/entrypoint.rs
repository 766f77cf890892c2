//! The official `postgres` image's entrypoint contract, for containers of a `postgres:*` image that
//! give no `command` (the image's `ENTRYPOINT` then runs with the container's `args` as its `CMD`).
//!
//! What the image documents, reproduced: no arguments means `postgres`; arguments starting with
//! `-` are options to `postgres`; any other program is run as is. For `postgres`, an empty
//! `PGDATA` (the image's default, [`default_pgdata`]) is initialised with `initdb` as `POSTGRES_USER`
//! (default `postgres`) with `POSTGRES_PASSWORD` (required unless `POSTGRES_HOST_AUTH_METHOD=trust`)
//! and `POSTGRES_INITDB_ARGS`; `pg_hba.conf` gets `host all all all <POSTGRES_HOST_AUTH_METHOD,
//! default scram-sha-256>`; `POSTGRES_DB` (default the user's name) is created when it is not
//! `postgres`; then `postgres "$@"` replaces the shell. Not reproduced: `/docker-entrypoint-initdb.d`
//! scripts, `POSTGRES_INITDB_WALDIR`, `*_FILE` variables.
//!
//! The one departure: the image listens on `*`; every pod here shares the host's network, so the
//! server listens on the pod IP instead, given last so that it wins over any `listen_addresses` in
//! the arguments (`*` in a pod means "the pod's addresses", which is the pod IP here).

/// The image's `PGDATA` for `major`: `/var/lib/postgresql/data` up to 17; from 18 on,
/// `/var/lib/postgresql/<major>/docker` (the layout of `pg_ctlcluster`, so that the volume at
/// `/var/lib/postgresql` can hold two majors' directories side by side for `pg_upgrade`).
pub fn default_pgdata(major: u32) -> String {
    if major >= 18 {
        format!("/var/lib/postgresql/{major}/docker")
    } else {
        "/var/lib/postgresql/data".to_owned()
    }
}

/// The script, run as `bash -c SCRIPT docker-entrypoint.sh <pod-ip> <args…>`.
pub const SCRIPT: &str = r#"set -Eeo pipefail
pod_ip="$1"; shift
if [ "$#" -eq 0 ] || [ "${1:0:1}" = '-' ]; then set -- postgres "$@"; fi
if [ "$1" != postgres ]; then exec "$@"; fi
shift
export PGDATA="${PGDATA:?the kubelet sets the image default}"
user="${POSTGRES_USER:-postgres}"
db="${POSTGRES_DB:-$user}"
auth="${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}"
mkdir -p "$PGDATA"
chmod 00700 "$PGDATA" 2>/dev/null || true
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "$auth" != trust ]; then
    echo 'Error: Database is uninitialized and superuser password is not specified.' >&2
    echo '       You must specify POSTGRES_PASSWORD to a non-empty value for the superuser.' >&2
    exit 1
  fi
  # shellcheck disable=SC2086
  initdb --username="$user" --pwfile=<(printf '%s\n' "${POSTGRES_PASSWORD:-}") ${POSTGRES_INITDB_ARGS:-}
  printf '\nhost all all all %s\n' "$auth" >> "$PGDATA/pg_hba.conf"
  if [ "$db" != postgres ]; then
    pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start
    psql -v ON_ERROR_STOP=1 --username "$user" --no-password --dbname postgres \
      --set db="$db" <<<'CREATE DATABASE :"db";'
    pg_ctl -D "$PGDATA" -m fast -w stop
  fi
  echo 'PostgreSQL init process complete; ready for start up.'
fi
exec postgres "$@" -c listen_addresses="$pod_ip"
"#;

/// The program and arguments that run the entrypoint with the container's `args`.
pub fn command(pod_ip: &str, args: &[String]) -> (String, Vec<String>) {
    let mut argv =
        vec!["-c".to_owned(), SCRIPT.to_owned(), "docker-entrypoint.sh".to_owned(), pod_ip.to_owned()];
    argv.extend(args.iter().cloned());
    ("/bin/bash".to_owned(), argv)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_images_data_directory_moved_under_the_major_in_18() {
        assert_eq!(default_pgdata(15), "/var/lib/postgresql/data");
        assert_eq!(default_pgdata(17), "/var/lib/postgresql/data");
        assert_eq!(default_pgdata(18), "/var/lib/postgresql/18/docker");
    }
}
