#!/usr/bin/env bash
# A backend's memory stays flat: after loading the model and a warm-up, CALLS more calls of
# embed() (default 10,000, in statements of 1,000 distinct texts) and batches of 1,000 inputs
# through embed(model, text[]) must not grow it. Two measures, both of this backend alone:
#   - its PostgreSQL memory contexts (pg_backend_memory_contexts): a palloc leak per call into
#     a long-lived context shows here byte for byte; must grow by at most 64 kB in all;
#   - its private resident memory (RssAnon of /proc/self/status: heaps, weights, thread
#     stacks; not the shared buffers it touched): must grow by at most 4 MB in all (400 bytes
#     a call; a leak of one token's activations per call, 1.5 kB for all-MiniLM-L6-v2, fails).
# Prints the figures after the load, after the warm-up and after the calls.
#   tests/ops/memory.sh [calls]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CALLS="${1:-10000}"
ROUNDS=$(( CALLS / 1000 ))
step "memory: one backend, $CALLS calls of embed() after a warm-up"

# ROUNDS rounds of 1,000 distinct single calls, then a batch of 1,000 inputs.
calls() {
    cat <<SQL
SELECT 'round ' || r || ' ' || pg_temp.mem()
  FROM generate_series(1, $1) AS r,
       LATERAL (SELECT sum(array_length(embed(:'model', 'call ' || r || '.' || i || repeat(' word', i % 40)), 1))
                  FROM generate_series(1, 1000) AS i) AS c
 WHERE c.sum IS NOT NULL;
SELECT count(*) AS batch_rows
  FROM embed(:'model', (SELECT array_agg('batch sentence ' || i || repeat(' word', i % 40))
                          FROM generate_series(1, 1000) AS i)) \gset
SQL
}
out="$(q -At <<SQL
CREATE FUNCTION pg_temp.mem() RETURNS text LANGUAGE sql AS \$\$
    SELECT (regexp_match(pg_read_file('/proc/self/status'), 'RssAnon:\s+(\d+)'))[1] || ' '
           || (SELECT sum(total_bytes) FROM pg_backend_memory_contexts)
\$\$;
SELECT 'start ' || pg_temp.mem();
SELECT array_length(embed(:'model', 'load the model'), 1) AS loaded_dim \gset
SELECT 'loaded ' || pg_temp.mem();
-- The warm-up runs the same statements once: the buffers of the single-input path and of
-- batches reach their working size, and this session's caches take these statements.
$(calls 1)
SELECT 'warm ' || pg_temp.mem();
$(calls "$ROUNDS")
SELECT 'end ' || pg_temp.mem();
SQL
)"
mb() { awk -v k="$1" 'BEGIN { printf "%.1f MB", k / 1024 }'; }
read -r _ start_rss start_ctx <<<"$(grep '^start ' <<<"$out")"
read -r _ loaded_rss loaded_ctx <<<"$(grep '^loaded ' <<<"$out")"
read -r _ warm_rss warm_ctx <<<"$(grep '^warm ' <<<"$out")"
read -r _ end_rss end_ctx <<<"$(grep '^end ' <<<"$out")"
info "RssAnon: $(mb "$start_rss") at connect, $(mb "$loaded_rss") after the load, $(mb "$warm_rss") after the warm-up, $(mb "$end_rss") after $CALLS calls and a batch"
info "memory contexts: $loaded_ctx bytes after the load, $warm_ctx after the warm-up, $end_ctx at the end"
info "RssAnon after each 1,000 calls (kB): $(grep '^round ' <<<"$out" | tail -n +2 | awk '{ printf "%s ", $3 }')"
rss_growth=$(( end_rss - warm_rss ))
ctx_growth=$(( end_ctx - warm_ctx ))
[ "$ctx_growth" -le 65536 ] || fail "memory contexts grew by $ctx_growth bytes over $CALLS calls"
pass "memory contexts grew by $ctx_growth bytes over $CALLS calls (at most 65536)"
[ "$rss_growth" -le 4096 ] || fail "RssAnon grew by $rss_growth kB over $CALLS calls"
pass "RssAnon grew by $rss_growth kB over $CALLS calls (at most 4096)"
