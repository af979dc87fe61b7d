#!/usr/bin/env bash
# How fast a long batch stops, in a running server (start one with `make demo`): a call of
# embed(model, text[]) over N inputs (default 10,000) is stopped (1) by statement_timeout and
# (2) by pg_cancel_backend from another session, and each time the script prints how long
# after the timeout / cancel the statement ended, then checks that the session still embeds.
# Prints figures; part 2 fails if the cancel does not end the batch with 57014.
#   bench/cancel.sh [model] [inputs]
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
pg_embed_resolve_paths

MODEL="${1:-minilm}"
INPUTS="${2:-10000}"
psql_bench() {
    "$PGBIN/psql" -X -q -h 127.0.0.1 -p "$PG_EMBED_PORT" -U "$PG_SUPERUSER" -d "$PG_EMBED_DB" \
        -v model="$MODEL" -v inputs="$INPUTS" "$@"
}
BATCH_SQL="SELECT count(*) FROM embed(:'model', (SELECT array_agg('sentence number ' || i || ' about how fast a long batch stops when asked to') FROM generate_series(1, :inputs) AS i));"

echo "model $MODEL, $INPUTS inputs in one embed(model, text[]) call"

# 1. statement_timeout of 1 s: the statement's total time, less 1 s, is the overrun.
for timeout_ms in 1000 2000; do
    out="$(psql_bench -At <<SQL 2>&1 || true
SELECT embed(:'model', 'warm up') IS NOT NULL AS warm \gset
SET statement_timeout = ${timeout_ms};
\timing on
$BATCH_SQL
\timing off
RESET statement_timeout;
SELECT 'usable after: ' || (array_length(embed(:'model', 'after'), 1) = 384);
SQL
)"
    took="$(grep -o 'Time: [0-9.]*' <<<"$out" | head -1 | cut -d' ' -f2)"
    echo "statement_timeout ${timeout_ms} ms: statement ended after ${took} ms (overrun $(awk -v t="$took" -v l="$timeout_ms" 'BEGIN { printf "%.0f", t - l }') ms); $(grep -o 'canceling statement[^$]*' <<<"$out" | head -1); $(grep -o 'usable after: [a-z]*' <<<"$out")"
done

# 2. pg_cancel_backend from another session, 1 s after the batch started (tests/ops/cancel.sh,
#    which also checks the error's SQLSTATE and that the session embeds the same vector after).
MODEL="$MODEL" "$REPO/tests/ops/cancel.sh" "$INPUTS"
