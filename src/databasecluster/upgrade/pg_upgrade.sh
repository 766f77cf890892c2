# The major upgrade of one data directory, run by the upgrade Job in the new version's image with
# the old version's binaries under $DBC_OLD_ROOT (copied there by an init container of the old
# image, in the layout of the official images: <root>/usr/lib/postgresql/<major>/{bin,lib} and
# <root>/usr/share/postgresql/<major>, so that the old binaries find their files relative to
# themselves). Environment: PGDATA (the old data directory), DBC_OLD_MAJOR, DBC_NEW_MAJOR,
# DBC_OLD_ROOT, DBC_SUPERUSER (the bootstrap superuser's name), DBC_PARAMETERS (the names of the
# cluster's spec.postgresql parameters), DBC_WORK (a private writable directory).
#
# 1. Already upgraded ($PGDATA holds the new major): nothing to do. A half-finished switch
#    ($PGDATA gone, the new directory complete) is finished.
# 2. Refuse unless the old data was shut down cleanly (pg_controldata: "shut down"): no WAL may be
#    left behind.
# 3. Refuse parameters the new major does not have (spec.postgresql, postgresql.auto.conf): they
#    are reported, never dropped.
# 4. initdb the new directory beside the old one on the same volume ($PGDATA.next), with the old
#    data's checksum setting; pg_upgrade --check, then pg_upgrade --copy: the old directory is never
#    written, so a failure at any point leaves it as it was.
# 5. Switch: $PGDATA -> $PGDATA-<old major> (kept, untouched), $PGDATA.next -> $PGDATA.
# The termination message says what happened (the operator shows it); on failure, why.
set -Eeuo pipefail
termination=${DBC_TERMINATION_LOG:-/dev/termination-log}
report() { printf '%s\n' "$1" | tail -c 3800 >"$termination"; printf '%s\n' "$1" >&2; }
fail() { report "$1"; exit 1; }
old_bin="$DBC_OLD_ROOT/usr/lib/postgresql/$DBC_OLD_MAJOR/bin"
new_bin="$(dirname "$(command -v pg_upgrade)")"
old="$PGDATA"
new="$PGDATA.next"
kept="$PGDATA-$DBC_OLD_MAJOR"

if [ ! -e "$old/PG_VERSION" ] && [ -e "$new/upgraded" ]; then
  mv "$new" "$old"
fi
if [ "$(cat "$old/PG_VERSION" 2>/dev/null)" = "$DBC_NEW_MAJOR" ]; then
  report "the data directory is already PostgreSQL $DBC_NEW_MAJOR's"
  exit 0
fi
[ "$(cat "$old/PG_VERSION" 2>/dev/null)" = "$DBC_OLD_MAJOR" ] ||
  fail "the data directory $old is not PostgreSQL $DBC_OLD_MAJOR's: nothing was changed"
[ -x "$old_bin/postgres" ] || fail "the old binaries are missing from $old_bin: nothing was changed"

control=$("$old_bin/pg_controldata" "$old")
state=$(sed -n 's/^Database cluster state: *//p' <<<"$control")
[ "$state" = "shut down" ] ||
  fail "the old data directory was not shut down cleanly (pg_controldata: \"$state\"): nothing was changed"

known=$(postgres --describe-config | cut -f1)
names="${DBC_PARAMETERS:-}"
if [ -f "$old/postgresql.auto.conf" ]; then
  names="$names $(sed -n 's/^[[:space:]]*\([A-Za-z_][A-Za-z0-9_]*\)[[:space:]]*=.*/\1/p' "$old/postgresql.auto.conf")"
fi
missing=""
for name in $names; do
  case "$name" in *.*) continue ;; esac # extension parameters are the extension's
  grep -qix -- "$name" <<<"$known" || missing="$missing $name"
done
[ -z "$missing" ] ||
  fail "parameters PostgreSQL $DBC_NEW_MAJOR does not have:$missing (remove them from spec.postgresql or with ALTER SYSTEM RESET): nothing was changed"

checksums=--no-data-checksums
if [ "$(sed -n 's/^Data page checksum version: *//p' <<<"$control")" != 0 ]; then checksums=--data-checksums; fi
rm -rf "$new"
initdb -D "$new" -U "$DBC_SUPERUSER" "$checksums" --auth-local=trust --auth-host=scram-sha-256 \
  -E UTF8 --locale=C >"$DBC_WORK/initdb.log" 2>&1 || fail "initdb failed: $(tail -c 2000 "$DBC_WORK/initdb.log")"
# Both servers only listen on a socket in the private work directory, trusted there.
printf 'local all all trust\n' >"$DBC_WORK/pg_hba.conf"
cd "$DBC_WORK"
args=(-b "$old_bin" -B "$new_bin" -d "$old" -D "$new" -U "$DBC_SUPERUSER" -s "$DBC_WORK" --copy
  -o "-c hba_file=$DBC_WORK/pg_hba.conf" -O "-c hba_file=$DBC_WORK/pg_hba.conf")
why() { # pg_upgrade's own lines, then the lists of problem objects it wrote
  tail -n 25 "$1" | grep -v '^$' || true
  find "$new" -path '*pg_upgrade_output.d*' -name '*.txt' -exec cat {} + 2>/dev/null | head -n 20 || true
}
if ! pg_upgrade --check "${args[@]}" >check.log 2>&1; then
  message="pg_upgrade --check refused the upgrade from $DBC_OLD_MAJOR to $DBC_NEW_MAJOR; nothing was changed: $(why check.log)"
  rm -rf "$new"
  fail "$message"
fi
if ! pg_upgrade "${args[@]}" >upgrade.log 2>&1; then
  message="pg_upgrade failed; the old data directory is untouched: $(why upgrade.log)"
  rm -rf "$new"
  fail "$message"
fi
if [ -f "$old/postgresql.auto.conf" ]; then cp "$old/postgresql.auto.conf" "$new/postgresql.auto.conf"; fi
notes=""
if [ -f update_extensions.sql ]; then
  notes=" Extensions to update (ALTER EXTENSION ... UPDATE): $(grep -o 'EXTENSION [^ ]*' update_extensions.sql | cut -d' ' -f2 | sort -u | tr '\n' ' ')"
fi
touch "$new/upgraded"
rm -rf "$kept"
mv "$old" "$kept"
mv "$new" "$old"
rm -f "$old/upgraded"
report "upgraded from PostgreSQL $DBC_OLD_MAJOR to $DBC_NEW_MAJOR with pg_upgrade --copy; the old data directory is kept beside it as $(basename "$kept").$notes"
