#!/usr/bin/env bash
# What counting the statistics (embed.stat_models) costs, in a running server: the same
# calls with pg_embed.track_stats on and off, interleaved in one session (ROUNDS rounds; in
# each, both settings in turn, the order alternating), so that drift of the machine falls on
# both alike. Figures per setting:
#   - single calls: p50 and p90 of CALLS embed(model, 12-word sentence) per round;
#   - batches: sentences/s of embed(model, text[]) over BATCH corpus sentences, median of
#     the rounds;
# and the ratio on / off. Run it on a server with pg_embed in shared_preload_libraries to
# measure the server-wide path (PostgreSQL 18: the custom statistics kind); without it the
# backend's own counts are measured. Prints the CPU and the scope first; writes
# bench/results/stats-<commit>-<time>.txt. Asserts nothing.
#   bench/stats.sh [model] [rounds] [calls per round] [batch sentences]
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
# shellcheck source=bench/lib.sh
source "$REPO/bench/lib.sh"
pg_embed_resolve_paths

MODEL="${1:-minilm}"
ROUNDS="${2:-10}"
CALLS="${3:-300}"
BATCH="${4:-256}"
SENTENCE="The quick brown fox jumps over the lazy dog near the river bank"
mkdir -p "$REPO/bench/results"
result="$REPO/bench/results/stats-$(git -C "$REPO" rev-parse --short HEAD)-$(date -u +%Y%m%dT%H%M%S).txt"

{
bench_header "pg_embed.threads = $(nproc), $ROUNDS rounds x ($CALLS single calls + 1 batch of $BATCH) per setting"
"$PGBIN/psql" -X -q -h 127.0.0.1 -p "$PG_EMBED_PORT" -U "$PG_SUPERUSER" -d "$PG_EMBED_DB" \
    -v ON_ERROR_STOP=1 -v model="$MODEL" -v rounds="$ROUNDS" -v calls="$CALLS" -v batch="$BATCH" \
    -v sentence="$SENTENCE" <<SQL
\pset footer off
SELECT current_setting('server_version') AS server, current_setting('shared_preload_libraries') AS preloaded;
CREATE TEMP TABLE corpus (n int GENERATED ALWAYS AS IDENTITY, body text);
\copy corpus (body) FROM '$REPO/bench/corpus.txt'
CREATE TEMP TABLE single (setting text, ms float8);
CREATE TEMP TABLE batch (setting text, per_s float8);
CREATE FUNCTION pg_temp.run(model text, sentence text, rounds int, calls int, batch int) RETURNS void
LANGUAGE plpgsql AS \$\$
DECLARE
    t0 timestamptz;
    v real[];
    texts text[] := (SELECT array_agg(body ORDER BY n) FROM (SELECT * FROM corpus ORDER BY n LIMIT batch) c);
    setting text;
BEGIN
    -- Warm-up: the model loaded, the caches and the compute threads running.
    FOR i IN 1..50 LOOP v := embed(model, sentence); END LOOP;
    PERFORM count(*) FROM embed(model, texts);
    FOR r IN 1..rounds LOOP
        FOREACH setting IN ARRAY CASE WHEN r % 2 = 1 THEN ARRAY['on', 'off'] ELSE ARRAY['off', 'on'] END LOOP
            PERFORM set_config('pg_embed.track_stats', setting, false);
            FOR i IN 1..calls LOOP
                t0 := clock_timestamp();
                v := embed(model, sentence);
                INSERT INTO single VALUES (setting, extract(epoch FROM clock_timestamp() - t0) * 1000);
            END LOOP;
            t0 := clock_timestamp();
            PERFORM count(*) FROM embed(model, texts);
            INSERT INTO batch VALUES (setting, batch / extract(epoch FROM clock_timestamp() - t0));
        END LOOP;
    END LOOP;
    PERFORM set_config('pg_embed.track_stats', 'on', false);
END \$\$;
SELECT pg_temp.run(:'model', :'sentence', :rounds, :calls, :batch);
SELECT DISTINCT scope FROM embed.stat_models WHERE model = :'model';
WITH s AS (
    SELECT setting,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) AS p50,
           percentile_cont(0.9) WITHIN GROUP (ORDER BY ms) AS p90,
           count(*) AS calls
      FROM single GROUP BY setting
), b AS (
    SELECT setting, percentile_cont(0.5) WITHIN GROUP (ORDER BY per_s) AS per_s FROM batch GROUP BY setting
)
SELECT s.setting AS track_stats, s.calls, round(s.p50::numeric, 4) AS single_p50_ms,
       round(s.p90::numeric, 4) AS single_p90_ms, round(b.per_s::numeric, 1) AS batch_sentences_per_s
  FROM s JOIN b USING (setting) ORDER BY s.setting DESC;
WITH s AS (
    SELECT setting, percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) AS p50 FROM single GROUP BY setting
), b AS (
    SELECT setting, percentile_cont(0.5) WITHIN GROUP (ORDER BY per_s) AS per_s FROM batch GROUP BY setting
)
SELECT round(((SELECT p50 FROM s WHERE setting = 'on') / (SELECT p50 FROM s WHERE setting = 'off'))::numeric, 4)
           AS single_p50_on_over_off,
       round(((SELECT per_s FROM b WHERE setting = 'on') / (SELECT per_s FROM b WHERE setting = 'off'))::numeric, 4)
           AS batch_rate_on_over_off;
SQL
} 2>&1 | tee "$result"
info "written: $result"
