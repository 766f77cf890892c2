#!/bin/bash
# dbcluster-operator restore program: fills instance 0's empty data volume from a backup, before
# the new cluster's StatefulSet exists. Run by the restore Job `<cluster>-restore`, which mounts
# the source cluster's backup volume read-only at $DBC_RESTORE_DIR and the new cluster's first
# data volume; uses only tar, gzip and coreutils of the `postgres` image.
#
# The backup is $DBC_RESTORE_BACKUP, or with `latest` the newest complete one (a directory named
# by its UTC start time holding a manifest.json). base.tar.gz becomes $PGDATA and pg_wal.tar.gz its
# pg_wal, so that the server, started by the instance program, recovers to the end of the backup
# and comes up as the primary. Idempotent: a volume this program already restored is left alone
# (the marker `restored-from` beside $PGDATA names the backup); a volume holding other data is
# refused rather than overwritten. The backup's name is the termination message.
#
# Environment: PGDATA, DBC_RESTORE_DIR, DBC_RESTORE_BACKUP, DBC_TERMINATION_LOG
# (/dev/termination-log).
set -euo pipefail

: "${PGDATA:?}" "${DBC_RESTORE_DIR:?}" "${DBC_RESTORE_BACKUP:?}"
DBC_TERMINATION_LOG=${DBC_TERMINATION_LOG:-/dev/termination-log}
marker="$(dirname "$PGDATA")/restored-from"

log() { echo "restore: $*" >&2; }

report() { printf '%s' "$1" >"$DBC_TERMINATION_LOG" 2>/dev/null || log "cannot write $DBC_TERMINATION_LOG"; }

fail() {
    log "$*"
    report "$*"
    exit 1
}

if [ -f "$PGDATA/PG_VERSION" ]; then
    [ -f "$marker" ] || fail "$PGDATA already holds data that was not restored from a backup: refusing to overwrite it"
    done_name=$(cat "$marker")
    log "already restored from $done_name"
    report "$done_name"
    exit 0
fi

complete() { [[ $1 =~ ^[0-9]{8}T[0-9]{6}Z$ ]] && [ -f "$DBC_RESTORE_DIR/$1/manifest.json" ]; }

name=$DBC_RESTORE_BACKUP
if [ "$name" = latest ]; then
    name=''
    for dir in $(ls -1 "$DBC_RESTORE_DIR" | sort -r); do
        if complete "$dir"; then
            name=$dir
            break
        fi
    done
    [ -n "$name" ] || fail "no complete backup in the source's backup volume"
fi
complete "$name" || fail "backup $name not found (or incomplete) in the source's backup volume"

backup="$DBC_RESTORE_DIR/$name"
log "restoring $name: $(cat "$backup/manifest.json")"
rm -rf "$PGDATA.new"
mkdir -p "$PGDATA.new"
tar -xzf "$backup/base.tar.gz" -C "$PGDATA.new"
mkdir -p "$PGDATA.new/pg_wal"
tar -xzf "$backup/pg_wal.tar.gz" -C "$PGDATA.new/pg_wal"
rm -f "$PGDATA.new/standby.signal" "$PGDATA.new/recovery.signal"
chmod 0700 "$PGDATA.new"
rm -rf "$PGDATA"
mv "$PGDATA.new" "$PGDATA"
printf '%s\n' "$name" >"$marker"
log "restored $name into $PGDATA"
report "$name"
