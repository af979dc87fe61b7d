#!/usr/bin/env bash
# Load test in a running server (start one with `make demo`): pgbench with C clients (default
# 8) for T seconds (default 60); each transaction inserts a corpus sentence into a table whose
# statement-level embed trigger fills its vector(384) column (HNSW-indexed), then runs a
# similarity query with a freshly embedded corpus sentence (embedded once, in a scalar
# subquery: `emb <=> embed(m, (SELECT ...))` would embed once per row a plan scans). Afterwards: transactions/s,
# latency p50/p95/p99 from pgbench's per-transaction log, failed transactions, whether
# every stored vector equals a fresh embed() of its text, the clients' backend RSS after
# warm-up and at the end, and whether the server log shows a crashed backend.
# Prints figures; asserts nothing.
#   bench/load.sh [clients] [seconds] [model]
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
pg_embed_resolve_paths

CLIENTS="${1:-8}"
SECONDS_RUN="${2:-60}"
MODEL="${3:-minilm}"
CORPUS="$REPO/bench/corpus.txt"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if is_root; then chown "$PG_USER:" "$work"; fi

psql_load() {
    "$PGBIN/psql" -X -q -h 127.0.0.1 -p "$PG_EMBED_PORT" -U "$PG_SUPERUSER" -d "$PG_EMBED_DB" \
        -v ON_ERROR_STOP=1 -v model="$MODEL" "$@"
}

psql_load <<SQL
SET client_min_messages = warning;
DROP TABLE IF EXISTS load_docs, load_corpus;
CREATE TABLE load_corpus (n int PRIMARY KEY GENERATED ALWAYS AS IDENTITY, body text NOT NULL);
\copy load_corpus (body) FROM '$CORPUS'
CREATE TABLE load_docs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, body text, emb vector(384));
CREATE TRIGGER load_embed AFTER INSERT ON load_docs REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION embed.embed_trigger(:'model', 'body', 'emb');
CREATE INDEX ON load_docs USING hnsw (emb vector_cosine_ops);
SQL

cat >"$work/txn.sql" <<SQL
\set n random(1, 2000)
\set q random(1, 2000)
INSERT INTO load_docs (body) SELECT body FROM load_corpus WHERE n = :n;
SELECT id FROM load_docs ORDER BY emb <=> (SELECT embed('$MODEL', body)::vector(384) FROM load_corpus WHERE n = :q) LIMIT 5;
SQL

log_before="$(wc -l <"$PG_LOG" 2>/dev/null || echo 0)"
rss_of_clients() {
    local pids
    pids="$(psql_load -At -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgbench' AND pid <> pg_backend_pid()")"
    for p in $pids; do awk '/VmRSS/ { printf "%.0f ", $2 / 1024 }' "/proc/$p/status" 2>/dev/null || true; done
}

echo "pgbench: $CLIENTS clients, ${SECONDS_RUN} s, pg_embed.threads 1 per backend, model $MODEL"
(
    cd "$work"
    PGOPTIONS="-c pg_embed.threads=1" "$PGBIN/pgbench" -n -h 127.0.0.1 -p "$PG_EMBED_PORT" -U "$PG_SUPERUSER" \
        -c "$CLIENTS" -j 2 -T "$SECONDS_RUN" -f txn.sql -l --log-prefix=load "$PG_EMBED_DB" >pgbench.out 2>&1
) &
bench=$!
sleep $((SECONDS_RUN / 6 + 5))
rss_warm="$(rss_of_clients)"
sleep $((SECONDS_RUN * 5 / 6 - 10 > 0 ? SECONDS_RUN * 5 / 6 - 10 : 1))
rss_end="$(rss_of_clients)"
wait "$bench" || true

grep -E "number of (transactions|failed)|tps|latency average" "$work/pgbench.out" || cat "$work/pgbench.out"
cat "$work"/load* | awk '{ print $3 / 1000 }' | sort -n | awk '
    { v[NR] = $1 } END {
        if (NR == 0) { print "no transactions logged"; exit }
        printf "latency from the log (%d transactions): p50 %.1f ms, p95 %.1f ms, p99 %.1f ms\n",
            NR, v[int(NR * 0.50) + 1], v[int(NR * 0.95) + 1], v[int(NR * 0.99) + 1] }'
echo "client backends' RSS (MB) after warm-up: $rss_warm"
echo "client backends' RSS (MB) near the end:  $rss_end"
psql_load -At <<'SQL'
SELECT format('rows %s, with vector %s, equal to a fresh embed() within 1e-5: %s',
              count(*), count(emb),
              count(*) FILTER (WHERE (SELECT max(abs(a - b)) <= 1e-5
                                        FROM unnest(emb::real[], embed(:'model', body)) AS t(a, b))))
FROM load_docs;
SQL
if [ -f "$PG_LOG" ] && tail -n +"$((log_before + 1))" "$PG_LOG" | grep -q "terminated by signal"; then
    echo "server log: a backend was terminated by a signal"
else
    echo "server log: no backend terminated by a signal"
fi
psql_load -c "DROP TABLE load_docs, load_corpus"
