#!/bin/bash
# dbcluster-operator instance program: bootstraps, runs and probes one PostgreSQL instance of a
# DatabaseCluster. Shipped by the operator in the ConfigMap `<cluster>-scripts`; uses only the
# binaries of the `postgres` image (initdb, pg_basebackup, pg_rewind, pg_controldata, postgres, psql,
# pg_isready) and bash.
#
#   instance.sh init    (init container) make $PGDATA hold this instance's data in its role:
#                       the primary initdb's an empty volume; a standby clones the primary with
#                       pg_basebackup over its replication slot, and re-clones when its data is
#                       missing or belongs to another cluster (system identifier differs). Data
#                       that last ran as a primary (no standby.signal) while the record names
#                       another instance is rewound (pg_rewind) against the recorded primary once
#                       that one accepts writes (or re-cloned when the rewind fails): it never
#                       starts as a second primary. Data shut down cleanly as primary while the
#                       recorded primary is not promoted yet (a switchover) starts as its standby
#                       at once, without a rewind. Idempotent: data already in its role is kept.
#   instance.sh run     (main container) the same preparation as init (a container restart does
#                       not rerun init containers), then start postgres, apply the passwords of the
#                       mounted Secrets on the primary, and turn SIGTERM into a fast shutdown.
#                       While it runs, a watcher reads the record every second: a standby whose
#                       record names a new primary points primary_conninfo at it and reloads
#                       (recovery_target_timeline is latest, so it follows the promotion); a
#                       server out of recovery that the record no longer names primary is fenced:
#                       fast shutdown, after which the container restarts and rejoins as a standby.
#   instance.sh ready   (readiness probe) accepting connections in its role.
#   instance.sh alive   (startup probe) the server answers on its socket.
#
# The probes bound every client call themselves (PROBE_SECONDS, killed then): an exec probe's
# timeoutSeconds is not enforced while a child of the probe command blocks (containerd kills the
# command but waits for its output to close), so a psql against a stopped server would otherwise
# hold the probe for the kubelet's two-minute runtime timeout.
#
# The role comes from the operator's record, the file $DBC_CONFIG/primary (the current primary's
# pod name), never from the pod's ordinal.
#
# Environment (set by the pod spec): PGDATA, POD_NAME, POD_IP, DBC_CONFIG (the ConfigMap: this
# script, postgresql.conf, pg_hba.conf, primary), DBC_SECRETS (superuser/, app/, replication/ each
# with username and password), DBC_RUN (a private emptyDir: socket, pgpass), DBC_PEER_DOMAIN (the
# headless Service's domain, `<svc>.<ns>.svc`), DBC_PORT (5432), DBC_APP_DATABASE (app).
set -euo pipefail

: "${PGDATA:?}" "${POD_NAME:?}" "${POD_IP:?}" "${DBC_CONFIG:?}" "${DBC_SECRETS:?}" "${DBC_RUN:?}"
DBC_PORT=${DBC_PORT:-5432}
DBC_APP_DATABASE=${DBC_APP_DATABASE:-app}
DBC_PEER_DOMAIN=${DBC_PEER_DOMAIN:-}
export PGPASSFILE="$DBC_RUN/pgpass"

log() { echo "instance[$POD_NAME]: $*" >&2; }

secret() { cat "$DBC_SECRETS/$1/$2"; }

primary_name() {
    local name
    name=$(tr -d '[:space:]' <"$DBC_CONFIG/primary" 2>/dev/null || true)
    echo "${name:-${POD_NAME%-*}-0}"
}

is_primary() { [ "$(primary_name)" = "$POD_NAME" ]; }

primary_host() {
    local name
    name=$(primary_name)
    if [ -n "$DBC_PEER_DOMAIN" ]; then echo "$name.$DBC_PEER_DOMAIN"; else echo "$name"; fi
}

# The replication slot of an instance: its ordinal, so that names stay within PostgreSQL's limit.
slot_name() { echo "instance_${POD_NAME##*-}"; }

pgpass_escape() { sed -e 's/\\/\\\\/g' -e 's/:/\\:/g'; }

# A private copy of the replication and superuser passwords for libpq (mode 0600, as libpq
# requires): replication for cloning and streaming, the superuser for pg_rewind's source.
write_pgpass() {
    local tmp="$PGPASSFILE.tmp" login
    (
        umask 077
        : >"$tmp"
        for login in replication superuser; do
            printf '*:*:*:%s:%s\n' "$(secret "$login" username | pgpass_escape)" \
                "$(secret "$login" password | pgpass_escape)" >>"$tmp"
        done
    )
    mv -f "$tmp" "$PGPASSFILE"
}

replication_conninfo() {
    echo "host=$(primary_host) port=$DBC_PORT user=$(secret replication username) passfile=$PGPASSFILE application_name=$POD_NAME connect_timeout=5"
}

local_sysid() { pg_controldata "$PGDATA" | sed -n 's/^Database system identifier: *//p'; }

# "shut down" after a clean shutdown out of recovery ("in production" after a crash).
cluster_state() { pg_controldata "$PGDATA" | sed -n 's/^Database cluster state: *//p'; }

# The recorded primary as the superuser (pg_rewind's source).
superuser_conninfo() {
    echo "host=$(primary_host) port=$DBC_PORT user=$(secret superuser username) dbname=postgres passfile=$PGPASSFILE connect_timeout=5"
}

# Whether the recorded primary answers and accepts writes.
primary_writable() {
    [ "$(psql "$(superuser_conninfo)" -XtAc 'SELECT NOT pg_is_in_recovery()' 2>/dev/null || true)" = t ]
}

# The primary's system identifier over a replication connection; empty when unreachable.
primary_sysid() {
    psql "$(replication_conninfo) replication=true" -XtAc IDENTIFY_SYSTEM 2>/dev/null | cut -d'|' -f1 || true
}

has_data() { [ -f "$PGDATA/PG_VERSION" ]; }

# Settings kept in postgresql.auto.conf because they follow the primary, which may change while the
# server runs (ALTER SYSTEM can then update them).
set_auto_conf() {
    local file="$PGDATA/postgresql.auto.conf"
    touch "$file"
    sed -i -e '/^primary_conninfo *=/d' -e '/^primary_slot_name *=/d' "$file"
    if [ "$#" -gt 0 ]; then
        printf "primary_conninfo = '%s'\nprimary_slot_name = '%s'\n" "$1" "$2" >>"$file"
    fi
}

init_primary() {
    if ! has_data; then
        log "no data: initdb"
        rm -rf "$PGDATA.new"
        initdb -D "$PGDATA.new" -U "$(secret superuser username)" --pwfile=<(secret superuser password) \
            --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --locale=C >&2
        mv "$PGDATA.new" "$PGDATA"
    fi
    if [ -f "$PGDATA/standby.signal" ]; then
        log "the operator names this instance primary: starting out of recovery"
        rm -f "$PGDATA/standby.signal"
    fi
    set_auto_conf
}

init_standby() {
    write_pgpass
    if has_data; then
        local mine theirs
        mine=$(local_sysid)
        theirs=$(primary_sysid)
        if [ -n "$theirs" ] && [ "$mine" != "$theirs" ]; then
            log "data belongs to another cluster (system identifier $mine, primary's $theirs): re-cloning"
            rm -rf "$PGDATA"
        elif [ -z "$theirs" ]; then
            log "primary unreachable: keeping the data (system identifier $mine)"
        fi
    fi
    if has_data && [ ! -f "$PGDATA/standby.signal" ]; then
        if [ "$(cluster_state)" = "shut down" ] && ! primary_writable; then
            # A switchover: the operator promotes the recorded instance only once it has replayed
            # this data's shutdown checkpoint, so this data is an ancestor of its new timeline.
            log "shut down cleanly as primary while $(primary_host) is not promoted yet (a switchover): starting as its standby without a rewind"
        else
            rejoin
        fi
    fi
    until has_data; do
        log "cloning $(primary_host) over slot $(slot_name)"
        rm -rf "$PGDATA.new"
        if pg_basebackup -D "$PGDATA.new" -d "$(replication_conninfo)" -S "$(slot_name)" -X stream \
            --checkpoint=fast --no-password >&2; then
            mv "$PGDATA.new" "$PGDATA"
        else
            log "clone failed; retrying in 2 s"
            sleep 2
        fi
    done
    touch "$PGDATA/standby.signal"
    set_auto_conf "$(replication_conninfo)" "$(slot_name)"
}

# Data that last ran as a primary, while the record names another instance: wait until that one
# accepts writes, then rewind onto its timeline (pg_rewind finishes a crash recovery first), or
# re-clone when the rewind fails. Until then this instance does not start at all.
rejoin() {
    until primary_writable; do
        log "this instance's data last ran as primary; waiting for $(primary_host) to accept writes before rewinding"
        sleep 2
    done
    log "rewinding onto $(primary_host)'s timeline"
    if pg_rewind -D "$PGDATA" --source-server="$(superuser_conninfo)" >&2; then
        log "rewound"
    else
        log "pg_rewind failed: re-cloning"
        rm -rf "$PGDATA"
    fi
}

prepare() {
    mkdir -p "$(dirname "$PGDATA")" "$DBC_RUN"
    if is_primary; then init_primary; else init_standby; fi
    chmod 0700 "$PGDATA"
}

init() { prepare; }

psql_local() { psql -X -v ON_ERROR_STOP=1 -h "$DBC_RUN" -p "$DBC_PORT" -U "$(secret superuser username)" -d postgres "$@"; }

# Makes the database accept exactly the passwords of the mounted Secrets (the passwords go through
# psql's stdin and \set, never a command line, and are kept out of the server log). Commits are
# local: with synchronous replication no standby can stream before the replication role exists.
apply_credentials() {
    psql_local -q <<SQL
SET synchronous_commit = 'local';
SET log_statement = 'none';
SET log_min_error_statement = 'panic';
SET log_min_duration_statement = -1;
\set su_user \`cat "$DBC_SECRETS/superuser/username"\`
\set su_pass \`cat "$DBC_SECRETS/superuser/password"\`
\set repl_user \`cat "$DBC_SECRETS/replication/username"\`
\set repl_pass \`cat "$DBC_SECRETS/replication/password"\`
\set app_user \`cat "$DBC_SECRETS/app/username"\`
\set app_pass \`cat "$DBC_SECRETS/app/password"\`
\set app_db $DBC_APP_DATABASE
SELECT format('CREATE ROLE %I LOGIN REPLICATION', :'repl_user')
  WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'repl_user') \gexec
SELECT format('CREATE ROLE %I LOGIN', :'app_user')
  WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'app_user') \gexec
ALTER ROLE :"su_user" PASSWORD :'su_pass';
ALTER ROLE :"repl_user" WITH LOGIN REPLICATION NOSUPERUSER PASSWORD :'repl_pass';
ALTER ROLE :"app_user" WITH LOGIN NOSUPERUSER NOREPLICATION PASSWORD :'app_pass';
SELECT format('CREATE DATABASE %I OWNER %I', :'app_db', :'app_user')
  WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'app_db') \gexec
SQL
}

# The watcher (see the header): follows a new primary, fences a demoted one. Runs until postgres
# exits; `$1` is the postmaster's pid.
watch_record() {
    local pid=$1 followed recorded recovery
    followed=$(primary_name)
    while kill -0 "$pid" 2>/dev/null; do
        sleep 1
        recorded=$(primary_name)
        [ "$recorded" = "$POD_NAME" ] && continue
        recovery=$(psql_local -tAc 'SELECT pg_is_in_recovery()' 2>/dev/null || true)
        if [ "$recovery" = f ]; then
            log "fencing: the record names $recorded primary; fast shutdown, then rejoin as its standby"
            kill -INT "$pid" 2>/dev/null || true
            return
        fi
        if [ "$recovery" = t ] && [ "$recorded" != "$followed" ]; then
            log "following the new primary $recorded"
            write_pgpass
            set_auto_conf "$(replication_conninfo)" "$(slot_name)"
            psql_local -qc 'SELECT pg_reload_conf()' >/dev/null && followed=$recorded
        fi
    done
}

run() {
    local pid
    rm -f "$DBC_RUN/credentials-applied"
    prepare
    postgres -D "$PGDATA" \
        -c config_file="$DBC_CONFIG/postgresql.conf" \
        -c hba_file="$DBC_CONFIG/pg_hba.conf" \
        -c ident_file="$DBC_CONFIG/pg_ident.conf" \
        -c listen_addresses="$POD_IP" \
        -c port="$DBC_PORT" \
        -c unix_socket_directories="$DBC_RUN" \
        -c unix_socket_permissions=0700 \
        "$@" &
    pid=$!
    # SIGTERM (pod deletion) → SIGINT: a fast shutdown, which does not wait for clients to leave.
    trap 'log "SIGTERM: fast shutdown"; kill -INT "$pid" 2>/dev/null || true' TERM INT
    if is_primary; then
        until pg_isready -q -h "$DBC_RUN" -p "$DBC_PORT"; do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.2
        done
        if kill -0 "$pid" 2>/dev/null; then
            apply_credentials || { log "applying the credentials failed"; kill -INT "$pid"; }
        fi
    fi
    touch "$DBC_RUN/credentials-applied"
    watch_record "$pid" &
    # `wait` returns early (status > 128) when the trap runs; wait again for the server's own status.
    local status=0 again
    while :; do
        if wait "$pid"; then status=0; else status=$?; fi
        kill -0 "$pid" 2>/dev/null || break
    done
    if [ "$status" -gt 128 ]; then
        wait "$pid" 2>/dev/null && again=0 || again=$?
        [ "$again" -ne 127 ] && status=$again
    fi
    exit "$status"
}

# The longest a probe's client call may take: connecting (libpq's connect_timeout) and the query
# together, then it is killed. A primary whose server hangs is unready after three such failures.
PROBE_SECONDS=3

ready() {
    [ -f "$DBC_RUN/credentials-applied" ] || exit 1
    local recovery
    recovery=$(PGCONNECT_TIMEOUT=2 timeout -s KILL "$PROBE_SECONDS" psql -X -h "$DBC_RUN" -p "$DBC_PORT" \
        -U "$(secret superuser username)" -d postgres -tAc 'SELECT pg_is_in_recovery()')
    if is_primary; then [ "$recovery" = f ]; else [ "$recovery" = t ]; fi
}

alive() { timeout -s KILL "$PROBE_SECONDS" pg_isready -q -t 2 -h "$DBC_RUN" -p "$DBC_PORT"; }

case "${1:-}" in
init) init ;;
run) shift; run "$@" ;;
ready) ready ;;
alive) alive ;;
*) echo "usage: instance.sh init|run|ready|alive" >&2; exit 2 ;;
esac
