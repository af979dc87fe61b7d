#!/usr/bin/env bash
# Asynchronous embedding (embed.vectorize) against the synchronous trigger, one run:
#   1. INSERT latency of single-row inserts (pgbench, one client, autocommit): no trigger,
#      the vectorize queue trigger (1 worker x 1 thread embedding behind it), and
#      embed.embed_trigger as a row trigger;
#   2. rows/s the workers embed (1 worker x 2 threads, 2 workers x 1 thread) against one bare
#      embed(model, text[]) call over the same rows on 2 threads;
#   3. the lag (age of the oldest queued row) under a steady insert rate of half the 1-worker
#      throughput, sampled every 0.2 s.
# Prints the CPU at the top. Needs a running server with 'minilm' registered (`make demo`).
# Asserts nothing; not part of the tests.
#   bench/vectorize.sh [rows] [lag seconds]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../tests/ops/lib.sh"

ROWS="${1:-2000}"
LAG_SECONDS="${2:-20}"
INSERTS=400
work="$(ops_workdir)"
trap 'rm -rf "$work"' EXIT

step "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
pgb() { "$PGBIN/pgbench" -n -h 127.0.0.1 -p "$PG_EMBED_PORT" -U "$PG_SUPERUSER" -d "$PG_EMBED_DB" "$@"; }
# p50 and p99 of pgbench's per-transaction log (latency in microseconds, 3rd field), in ms.
percentiles() { cat "$1".* | awk '{ print $3 / 1000 }' | sort -n | awk '{ a[NR] = $1 } END {
    printf "p50 %.2f ms, p99 %.2f ms", a[int(NR * 0.5 + 0.5)], a[int(NR * 0.99 + 0.5)] }'; }
set_workers() {
    q -c "ALTER SYSTEM SET pg_embed.workers = $1" -c "ALTER SYSTEM SET pg_embed.worker_threads = $2" \
      -c "SELECT pg_reload_conf()" >/dev/null
    sleep 0.5
    # Workers beyond the new count leave when ended (their slot no longer exists).
    q1 "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity WHERE backend_type = 'pg_embed vectorize'" >/dev/null
    sleep 1.5
}

q <<SQL >/dev/null
SET client_min_messages = warning;
DROP TABLE IF EXISTS vb_plain, vb_async, vb_sync, vb_corpus;
CREATE TABLE vb_corpus (i serial, s text);
\copy vb_corpus (s) FROM '$CORPUS'
CREATE TABLE vb_plain (id bigserial PRIMARY KEY, body text, emb vector($DIM));
CREATE TABLE vb_async (id bigserial PRIMARY KEY, body text, emb vector($DIM));
CREATE TABLE vb_sync (id bigserial PRIMARY KEY, body text, emb vector($DIM));
CREATE TRIGGER vb_sync_embed BEFORE INSERT OR UPDATE ON vb_sync
    FOR EACH ROW EXECUTE FUNCTION embed.embed_trigger(:'model', 'body', 'emb');
SELECT embed.vectorize('vb_async', 'body', 'emb', :'model', 64);
SQL

# ---- 1. INSERT latency ---------------------------------------------------------------------
# One worker on one thread: the writer keeps a core (on 2 cores a 2-thread worker takes both).
set_workers 1 1
for t in vb_plain vb_async vb_sync; do
    cat >"$work/$t.sql" <<SQL
\\set i random(1, 2000)
INSERT INTO $t (body) SELECT s FROM vb_corpus WHERE i = :i;
SQL
    # A warm-up (the model loads in the trigger's backend), then the measured run.
    pgb -c 1 -t 20 -f "$work/$t.sql" >/dev/null
    ( cd "$work" && pgb -c 1 -t "$INSERTS" -f "$work/$t.sql" -l --log-prefix="$work/lat_$t" >/dev/null )
    printf '    INSERT of one row, %-9s %s\n' "$t:" "$(percentiles "$work/lat_$t")"
done
q1 "SELECT embed.vectorize_wait('vb_async', 'emb', '5 minutes')" >/dev/null

# ---- 2. throughput -------------------------------------------------------------------------
bare="$(q1 "SET pg_embed.threads = 2;
  SELECT round($ROWS / extract(epoch FROM clock_timestamp() - t0)) FROM (SELECT clock_timestamp() AS t0) s,
    LATERAL (SELECT count(*) FROM embed('$MODEL', ARRAY(SELECT s FROM vb_corpus ORDER BY i LIMIT $ROWS))) e")"
echo "    bare embed(model, text[]) over $ROWS rows, 2 threads: $bare rows/s"
for config in "1 2" "2 1"; do
    set -- $config
    set_workers "$1" "$2"
    q -c "TRUNCATE vb_async" >/dev/null
    q1 "SELECT embed._vectorize_launch(true)" >/dev/null
    t0=$EPOCHREALTIME
    q -c "INSERT INTO vb_async (body) SELECT s FROM vb_corpus ORDER BY i LIMIT $ROWS" >/dev/null
    q1 "SELECT embed.vectorize_wait('vb_async', 'emb', '10 minutes')" >/dev/null
    t1=$EPOCHREALTIME
    rate="$(awk -v a="$t0" -v b="$t1" -v n="$ROWS" 'BEGIN { printf "%.0f", n / (b - a) }')"
    printf '    %s worker(s) x %s thread(s): %s rows/s (%.0f%% of the bare call)\n' "$1" "$2" "$rate" \
        "$(awk -v r="$rate" -v b="$bare" 'BEGIN { print 100 * r / b }')"
    [ "$1" = 1 ] && one_worker="$rate"
done

# ---- 3. lag at half the 1-worker throughput ------------------------------------------------
set_workers 1 2
half=$(( one_worker / 2 ))
q -c "TRUNCATE vb_async" >/dev/null
q1 "SELECT embed._vectorize_launch(true)" >/dev/null
( pgb -c 2 -R "$half" -T "$LAG_SECONDS" -f "$work/vb_async.sql" >"$work/rate.out" 2>&1 ) &
job=$!
: >"$work/lag"
while kill -0 "$job" 2>/dev/null; do
    q1 "SELECT coalesce(extract(epoch FROM lag) * 1000, 0) FROM embed.vectorize_status WHERE tbl = 'vb_async'::regclass" >>"$work/lag"
    sleep 0.2
done
sort -n "$work/lag" | awk -v r="$half" '{ a[NR] = $1 } END {
    printf "    lag at %d inserts/s (half of 1 worker): p50 %.0f ms, p99 %.0f ms, max %.0f ms over %d samples\n",
        r, a[int(NR * 0.5 + 0.5)], a[int(NR * 0.99 + 0.5)], a[NR], NR }'
q1 "SELECT embed.vectorize_wait('vb_async', 'emb', '5 minutes')" >/dev/null
set_workers 1 0
q -c "SELECT embed.unvectorize('vb_async', 'emb')" -c "DROP TABLE vb_plain, vb_async, vb_sync, vb_corpus" \
  -c "ALTER SYSTEM RESET pg_embed.workers" -c "ALTER SYSTEM RESET pg_embed.worker_threads" -c "SELECT pg_reload_conf()" >/dev/null
