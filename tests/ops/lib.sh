# shellcheck shell=bash
# Shared by the operational tests in tests/ops/: a running server is driven from outside, as
# a DBA would (psql, pgbench, pg_cancel_backend, kill -9). Source it; don't execute it.
# The server is the one scripts/env.sh points at (PG_EMBED_PORT, PGDATA, PG_LOG), with
# pg_embed installed; MODEL names a registered embedding model of DIM dimensions.
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/env.sh"
pg_embed_resolve_paths
require_pginstall

MODEL="${MODEL:-minilm}"
DIM="${DIM:-384}"
CORPUS="$REPO/bench/corpus.txt"

# psql as the superuser, stopping at the first error; extra arguments are psql's.
q() {
    "$PGBIN/psql" -X -q -h 127.0.0.1 -p "$PG_EMBED_PORT" -U "$PG_SUPERUSER" -d "$PG_EMBED_DB" \
        -v ON_ERROR_STOP=1 -v model="$MODEL" -v dim="$DIM" "$@"
}
# One value: q1 "SELECT ..."
q1() { q -At -c "$1"; }

fail() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }
pass() { printf '    ok: %s\n' "$*"; }
# expect_eq WHAT EXPECTED ACTUAL
expect_eq() {
    if [ "$2" != "$3" ]; then fail "$1: expected '$2', got '$3'"; fi
    pass "$1: $3"
}

# The backend's private memory in kB (anonymous pages: its heaps, the model's weights, the
# compute threads' stacks), apart from the shared buffers it has touched (RssShmem).
rss_anon_kb() { awk '/^RssAnon:/ { print $2 }' "/proc/$1/status"; }

# Blocks until the server accepts connections again (after a crash, recovery runs first).
wait_for_server() {
    local i
    for i in $(seq 1 600); do
        if "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$PG_EMBED_PORT" -U "$PG_SUPERUSER" -d "$PG_EMBED_DB"; then
            return 0
        fi
        sleep 0.1
    done
    fail "the server did not accept connections again within 60 s"
}

# wait_until SQL [seconds]: polls until the query returns 't'.
wait_until() {
    local i tries=$(( ${2:-60} * 20 ))
    for i in $(seq 1 "$tries"); do
        [ "$(q1 "$1" 2>/dev/null || true)" = t ] && return 0
        sleep 0.05
    done
    fail "timed out waiting for: $1"
}

# Rows of TABLE whose COLUMN differs from a fresh embed() of BODY by more than 1e-5
# (NULL vectors are not counted: callers count them apart).
count_wrong_vectors() {
    q1 "SELECT count(*) FROM $1 WHERE $2 IS NOT NULL AND NOT (SELECT max(abs(a - b)) <= 1e-5
            FROM unnest($2::real[], embed('$MODEL', body)) AS t(a, b))"
}

# start_session OUT: runs the SQL on stdin in a new session, in the background, with its
# output in OUT; returns once the session is connected. Sets SESSION_PID (its backend's
# pid) and SESSION_JOB (the background job, to wait for).
start_session() {
    local out="$1"
    { echo "SELECT 'pid ' || pg_backend_pid();"; cat; } >"$out.sql"
    ( q -At -f "$out.sql" >"$out" 2>&1 || true ) &
    SESSION_JOB=$!
    for _ in $(seq 1 600); do grep -q '^pid ' "$out" && break; sleep 0.05; done
    SESSION_PID="$(sed -n 's/^pid //p' "$out")"
    [ -n "$SESSION_PID" ] || fail "the session did not start: $(cat "$out")"
}

# Milliseconds between two $EPOCHREALTIME readings.
ms_between() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", (b - a) * 1000 }'; }

# A scratch directory the server's OS user may write (pgbench logs).
ops_workdir() {
    local d
    d="$(mktemp -d)"
    if is_root; then chown "$PG_USER:" "$d"; fi
    echo "$d"
}

# SQL that embeds with model $1 until this backend maps it from the shared prepared file (a
# backend that built the weights maps the file on its first call after the file is written).
wait_mapped_sql() {
    cat <<SQL
DO \$\$ BEGIN
  FOR i IN 1..1000 LOOP
    PERFORM embed('$1', 'wait for the shared file ' || i);
    EXIT WHEN (SELECT shared_file IS NOT NULL FROM embed.loaded_models() WHERE name = '$1');
    PERFORM pg_sleep(0.01);
  END LOOP;
END \$\$;
SQL
}
