#!/bin/bash
# dbcluster-operator backup program: one physical backup of a DatabaseCluster into its backup
# volume, then retention. Run by the backup Job's pod (CronJob `<cluster>-backup`, or an on-demand
# Job from the same template); uses only the binaries of the `postgres` image (pg_basebackup, psql)
# and coreutils.
#
# 1. Source: the first of $DBC_BACKUP_HOSTS (the `-ro` Service, then the `-rw` one) that answers a
#    replication connection, so a streaming standby is preferred and the primary is the fallback.
# 2. pg_basebackup: tar format, gzip, WAL streamed into the backup (pg_wal.tar.gz), fast
#    checkpoint, over TLS with the replication user's client certificate. Written to `<name>.partial`, renamed to `<name>`
#    (the UTC start time, e.g. 20261201T103000Z) once complete with its manifest.json: start and
#    end time, size, PostgreSQL version, system identifier, WAL range, source host.
# 3. Retention: a complete backup is kept when it is among the newest $DBC_KEEP_LAST, or started
#    less than $DBC_KEEP_NEWER_THAN_SECONDS ago (either rule keeps it; neither set keeps all); the
#    backup just taken is always kept. Leftover `.partial` directories are removed first (the
#    CronJob's concurrencyPolicy Forbid means no other backup is running).
# 4. Report: the manifest (one line of JSON) is the container's termination message, which is how
#    the operator learns the backup's name and size; on failure the message says why.
#
# Environment: DBC_BACKUP_HOSTS (space-separated), DBC_PORT (5432), DBC_SECRETS (replication-tls/
# with tls.crt and tls.key, server-ca/ with the ca.crt that verifies the servers), DBC_BACKUPS (the backup volume), DBC_RUN (a private writable
# directory), DBC_KEEP_LAST, DBC_KEEP_NEWER_THAN_SECONDS, DBC_TERMINATION_LOG
# (/dev/termination-log).
set -euo pipefail

: "${DBC_BACKUP_HOSTS:?}" "${DBC_SECRETS:?}" "${DBC_BACKUPS:?}" "${DBC_RUN:?}"
DBC_PORT=${DBC_PORT:-5432}
DBC_TERMINATION_LOG=${DBC_TERMINATION_LOG:-/dev/termination-log}
NAME_PATTERN='^[0-9]{8}T[0-9]{6}Z$'

log() { echo "backup: $*" >&2; }

report() { printf '%s' "$1" >"$DBC_TERMINATION_LOG" 2>/dev/null || log "cannot write $DBC_TERMINATION_LOG"; }

fail() {
    log "$*"
    report "$*"
    exit 1
}

# TLS verifying the server against the cluster's CA, authenticated by the replication user's
# client certificate (no password); its key copied private, as libpq refuses a group-readable key.
tls="$DBC_SECRETS/replication-tls"
user=replicator
(umask 077 && cat "$tls/tls.key" >"$DBC_RUN/client.key")

conninfo() { echo "host=$1 port=$DBC_PORT user=$user sslmode=verify-full sslrootcert=$DBC_SECRETS/server-ca/ca.crt sslcert=$tls/tls.crt sslkey=$DBC_RUN/client.key connect_timeout=5 application_name=dbc-backup"; }

replication_query() { psql "$(conninfo "$1") replication=true" -XtAc "$2" 2>>"$DBC_RUN/source.err"; }

source_host='' sysid=''
: >"$DBC_RUN/source.err"
for host in $DBC_BACKUP_HOSTS; do
    if identity=$(replication_query "$host" IDENTIFY_SYSTEM); then
        source_host=$host
        sysid=${identity%%|*}
        break
    fi
    log "$host does not answer: $(tail -n 1 "$DBC_RUN/source.err")"
done
[ -n "$source_host" ] ||
    fail "no instance answers at ${DBC_BACKUP_HOSTS}: $(tail -n 1 "$DBC_RUN/source.err")"
version=$(replication_query "$source_host" 'SHOW server_version') || version=unknown

# The name is the start time in UTC, to the second; a second backup within the same second waits.
while :; do
    epoch=$(date -u +%s)
    name=$(date -u -d "@$epoch" +%Y%m%dT%H%M%SZ)
    [ -e "$DBC_BACKUPS/$name" ] || break
    sleep 1
done
start=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
rm -rf "$DBC_BACKUPS"/*.partial
partial="$DBC_BACKUPS/$name.partial"
log "backing up $source_host (system identifier $sysid, PostgreSQL $version) into $name"
if ! pg_basebackup -d "$(conninfo "$source_host")" -D "$partial" -Ft -z -X stream --checkpoint=fast \
    --no-password --verbose 2>"$DBC_RUN/basebackup.log"; then
    cat "$DBC_RUN/basebackup.log" >&2
    rm -rf "$partial"
    fail "pg_basebackup from $source_host failed: $(grep -v '^pg_basebackup: \(initiating\|checkpoint\|waiting\|removing\)' "$DBC_RUN/basebackup.log" | tail -n 1)"
fi
cat "$DBC_RUN/basebackup.log" >&2
wal_start=$(sed -n 's/.*write-ahead log start point: \([0-9A-F/]*\).*/\1/p' "$DBC_RUN/basebackup.log")
wal_end=$(sed -n 's/.*write-ahead log end point: \([0-9A-F/]*\).*/\1/p' "$DBC_RUN/basebackup.log")
timeline=$(sed -n 's/.*write-ahead log start point: .* on timeline \([0-9]*\).*/\1/p' "$DBC_RUN/basebackup.log")
end=$(date -u +%Y-%m-%dT%H:%M:%SZ)
size=$(du -sb "$partial" | cut -f1)
manifest=$(printf '{"name":"%s","startTime":"%s","endTime":"%s","sizeBytes":%s,"postgresVersion":"%s","systemIdentifier":"%s","timeline":%s,"walStart":"%s","walEnd":"%s","source":"%s"}' \
    "$name" "$start" "$end" "$size" "$version" "$sysid" "${timeline:-0}" "$wal_start" "$wal_end" "$source_host")
printf '%s\n' "$manifest" >"$partial/manifest.json"
sync "$partial" 2>/dev/null || sync
mv "$partial" "$DBC_BACKUPS/$name"
log "complete: $manifest"

# Retention.
to_epoch() {
    local n=$1
    date -u -d "${n:0:4}-${n:4:2}-${n:6:2}T${n:9:2}:${n:11:2}:${n:13:2}Z" +%s
}
if [ -n "${DBC_KEEP_LAST:-}" ] || [ -n "${DBC_KEEP_NEWER_THAN_SECONDS:-}" ]; then
    now=$(date -u +%s)
    rank=0
    for dir in $(ls -1 "$DBC_BACKUPS" | sort -r); do
        [[ $dir =~ $NAME_PATTERN ]] && [ -f "$DBC_BACKUPS/$dir/manifest.json" ] || continue
        rank=$((rank + 1))
        keep=false
        [ "$dir" = "$name" ] && keep=true
        [ -n "${DBC_KEEP_LAST:-}" ] && [ "$rank" -le "$DBC_KEEP_LAST" ] && keep=true
        if [ -n "${DBC_KEEP_NEWER_THAN_SECONDS:-}" ] &&
            [ $((now - $(to_epoch "$dir"))) -lt "$DBC_KEEP_NEWER_THAN_SECONDS" ]; then
            keep=true
        fi
        if ! $keep; then
            log "retention: removing $dir"
            rm -rf "${DBC_BACKUPS:?}/$dir"
        fi
    done
fi

report "$manifest"
echo "$manifest"
