#!/usr/bin/env bash
# Per-call figures of embed() in a running server (start one with `make demo`):
# first-call latency (catalog lookup + model load + one embedding, in a fresh backend),
# median and p99 of N steady calls with a 12-word sentence, backend RSS before and after
# the load, and the installed .so size. Prints figures; asserts nothing.
#   bench/latency.sh [model] [calls]
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
pg_embed_resolve_paths

MODEL="${1:-minilm}"
CALLS="${2:-200}"
SENTENCE="The quick brown fox jumps over the lazy dog near the river bank"

"$PGBIN/psql" -X -q -h 127.0.0.1 -p "$PG_EMBED_PORT" -U "$PG_SUPERUSER" -d "$PG_EMBED_DB" \
    -v ON_ERROR_STOP=1 -v model="$MODEL" -v calls="$CALLS" -v sentence="$SENTENCE" <<'SQL'
CREATE FUNCTION pg_temp.rss_mb() RETURNS numeric LANGUAGE sql AS $$
    SELECT round((regexp_match(pg_read_file('/proc/self/status'), 'VmRSS:\s+(\d+) kB'))[1]::numeric / 1024, 1)
$$;
CREATE FUNCTION pg_temp.bench(model text, sentence text, calls int)
RETURNS TABLE (figure text, value numeric) LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz;
    v real[];
    first_ms numeric;
    rss_before numeric := pg_temp.rss_mb();
    times numeric[] := '{}';
BEGIN
    t0 := clock_timestamp();
    v := embed(model, sentence);           -- arguments are variables: evaluated every call
    first_ms := extract(epoch FROM clock_timestamp() - t0) * 1000;
    FOR i IN 1..calls LOOP
        t0 := clock_timestamp();
        v := embed(model, sentence);
        times := times || (extract(epoch FROM clock_timestamp() - t0) * 1000)::numeric;
    END LOOP;
    RETURN QUERY VALUES
        ('first call, ms (load + embed)', round(first_ms, 1)),
        ('steady call p50, ms', round((SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY t) FROM unnest(times) t)::numeric, 2)),
        ('steady call p99, ms', round((SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY t) FROM unnest(times) t)::numeric, 2)),
        ('steady calls', calls),
        ('dimensions', array_length(v, 1)),
        ('backend RSS before load, MB', rss_before),
        ('backend RSS after load + calls, MB', pg_temp.rss_mb());
END $$;
\pset footer off
\echo 'embed(' :'model' ', 12-word sentence):'
SELECT * FROM pg_temp.bench(:'model', :'sentence', :calls);
SQL
so="$("$PG_CONFIG" --pkglibdir)/pg_embed.so"
printf 'installed %s: %s MB\n' "$so" "$(du -m "$so" | cut -f1)"
