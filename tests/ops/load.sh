#!/usr/bin/env bash
# Load through the trigger: pgbench with CLIENTS clients (default 8) for SECONDS (default 20).
# Each transaction inserts a corpus sentence into a table whose statement-level
# embed.embed_trigger fills its vector column (HNSW-indexed), then runs a similarity query
# with another freshly embedded sentence (embedded once, in a scalar subquery).
# Checks: no failed transaction, every stored vector equal to a fresh embed() of its text,
# no server process terminated by a signal. Prints transactions/s, latency p50/p95/p99 from
# pgbench's per-transaction log, and the clients' private memory (RssAnon) after warm-up and
# near the end. bench/load.sh runs it for 60 s.
#   tests/ops/load.sh [clients] [seconds]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CLIENTS="${1:-8}"
SECONDS_RUN="${2:-20}"
step "load: pgbench, $CLIENTS clients for $SECONDS_RUN s, insert through the statement trigger + HNSW search"
work="$(ops_workdir)"
trap 'rm -rf "$work"' EXIT

q <<SQL
SET client_min_messages = warning;
DROP TABLE IF EXISTS ops_load_docs, ops_load_corpus;
CREATE TABLE ops_load_corpus (n int PRIMARY KEY GENERATED ALWAYS AS IDENTITY, body text NOT NULL);
\copy ops_load_corpus (body) FROM '$CORPUS'
CREATE TABLE ops_load_docs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, body text, emb vector(:dim));
CREATE TRIGGER ops_load_embed AFTER INSERT ON ops_load_docs REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION embed.embed_trigger(:'model', 'body', 'emb');
CREATE INDEX ON ops_load_docs USING hnsw (emb vector_cosine_ops);
SQL
corpus_rows="$(q1 "SELECT count(*) FROM ops_load_corpus")"

cat >"$work/txn.sql" <<SQL
\set n random(1, $corpus_rows)
\set q random(1, $corpus_rows)
INSERT INTO ops_load_docs (body) SELECT body FROM ops_load_corpus WHERE n = :n;
SELECT id FROM ops_load_docs
 ORDER BY emb <=> (SELECT embed('$MODEL', body)::vector($DIM) FROM ops_load_corpus WHERE n = :q) LIMIT 5;
SQL

log_before="$(wc -l <"$PG_LOG")"
rss_of_clients() {
    local p kb
    for p in $(q1 "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgbench'"); do
        kb="$(rss_anon_kb "$p" 2>/dev/null || true)"
        if [ -n "$kb" ]; then printf '%s ' "$(( (kb + 512) / 1024 ))"; fi
    done
}

(
    cd "$work"
    PGOPTIONS="-c pg_embed.threads=1" "$PGBIN/pgbench" -n -h 127.0.0.1 -p "$PG_EMBED_PORT" -U "$PG_SUPERUSER" \
        -c "$CLIENTS" -j 2 -T "$SECONDS_RUN" -f txn.sql -l --log-prefix=load "$PG_EMBED_DB" >pgbench.out 2>&1
) &
bench=$!
sleep $(( SECONDS_RUN / 4 + 2 ))
rss_warm="$(rss_of_clients)"
sleep $(( SECONDS_RUN * 3 / 4 - 4 > 0 ? SECONDS_RUN * 3 / 4 - 4 : 1 ))
rss_end="$(rss_of_clients)"
status=0
wait "$bench" || status=$?

out="$work/pgbench.out"
grep -E "number of (transactions|failed)|tps|latency average" "$out" | sed 's/^/    /' || true
[ "$status" = 0 ] || fail "pgbench exited with $status: $(cat "$out")"
done_txns="$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$out")"
[ "${done_txns:-0}" -gt 0 ] || fail "no transaction completed: $(cat "$out")"
expect_eq "failed transactions" 0 "$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$out")"
cat "$work"/load* | awk '{ print $3 / 1000 }' | sort -n | awk '
    { v[NR] = $1 } END {
        printf "    latency (pgbench log, %d transactions): p50 %.1f ms, p95 %.1f ms, p99 %.1f ms\n",
            NR, v[int(NR * 0.50) + 1], v[int(NR * 0.95) + 1], v[int(NR * 0.99) + 1] }'
info "clients' RssAnon (MB) after warm-up: $rss_warm"
info "clients' RssAnon (MB) near the end:  $rss_end"

expect_eq "rows inserted" "$done_txns" "$(q1 "SELECT count(*) FROM ops_load_docs")"
expect_eq "rows without a vector" 0 "$(q1 "SELECT count(*) FROM ops_load_docs WHERE emb IS NULL")"
expect_eq "stored vectors that differ from a fresh embed()" 0 "$(count_wrong_vectors ops_load_docs emb)"
if tail -n +"$(( log_before + 1 ))" "$PG_LOG" | grep "terminated by signal"; then
    fail "a server process was terminated by a signal during the load"
fi
pass "no server process terminated by a signal"
q -c "DROP TABLE ops_load_docs, ops_load_corpus"
