#!/usr/bin/env bash
# pg_embed.threads and the array form, measured in a running server (start one with
# `make demo`): for 1 and 2 threads, the p50 of single-sentence calls, the sentences/s of
# one backend embedding 256 sentences one call per row and with embed(model, text[]), and
# the sentences/s of two concurrent backends calling one row at a time. Prints figures;
# asserts nothing.
#   bench/threads.sh [model]
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
pg_embed_resolve_paths

MODEL="${1:-minilm}"
N=256
psql_b() { "$PGBIN/psql" -X -q -A -t -h 127.0.0.1 -p "$PG_EMBED_PORT" -U "$PG_SUPERUSER" -d "$PG_EMBED_DB" -v ON_ERROR_STOP=1 "$@"; }

# 256 sentences of 5-40 words from a fixed vocabulary (deterministic).
CORPUS_SQL="SELECT string_agg(w, ' ' ORDER BY k) AS s
            FROM generate_series(1, $N) AS i,
                 LATERAL (SELECT k, (ARRAY['the','database','keeps','vectors','for','every','row','and','search','finds',
                                           'similar','sentences','quickly','while','users','write','new','documents',
                                           'about','coffee','trains','music','weather','tests'])[1 + (i * 7 + k * 13) % 24] AS w
                          FROM generate_series(1, 5 + (i * 11) % 36) AS k) t
            GROUP BY i ORDER BY i"

bench_one() { # threads -> "p50_ms rows_per_s array_per_s"
    psql_b -v model="$MODEL" -v threads="$1" <<SQL
SET pg_embed.threads = :threads;
CREATE TEMP TABLE corpus AS $CORPUS_SQL;
CREATE FUNCTION pg_temp.run(model text) RETURNS text LANGUAGE plpgsql AS \$\$
DECLARE t0 timestamptz; v real[]; times numeric[] := '{}'; rows_s numeric; array_s numeric; n int;
BEGIN
    v := embed(model, 'warm up the model');
    FOR i IN 1..60 LOOP
        t0 := clock_timestamp();
        v := embed(model, 'The quick brown fox jumps over the lazy dog near the river bank');
        times := times || (extract(epoch FROM clock_timestamp() - t0) * 1000)::numeric;
    END LOOP;
    t0 := clock_timestamp();
    SELECT sum(array_length(embed(model, s), 1)) INTO n FROM corpus;
    rows_s := (SELECT count(*) FROM corpus) / extract(epoch FROM clock_timestamp() - t0);
    t0 := clock_timestamp();
    SELECT sum(array_length(e, 1)) INTO n FROM embed(model, (SELECT array_agg(s) FROM corpus)) AS e;
    array_s := (SELECT count(*) FROM corpus) / extract(epoch FROM clock_timestamp() - t0);
    RETURN round((SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY t) FROM unnest(times) t)::numeric, 2)
        || ' ' || round(rows_s, 1) || ' ' || round(array_s, 1);
END \$\$;
SELECT pg_temp.run(:'model');
SQL
}

concurrent() { # threads -> sentences/s of two backends, one row per call
    local t0 t1
    t0=$EPOCHREALTIME
    for _ in 1 2; do
        psql_b -v model="$MODEL" -v threads="$1" >/dev/null <<SQL &
SET pg_embed.threads = :threads;
SELECT sum(array_length(embed(:'model', s), 1)) FROM ($CORPUS_SQL) c;
SQL
    done
    wait
    t1=$EPOCHREALTIME
    awk -v n="$N" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", 2 * n / (b - a) }'
}

printf '%-8s %-22s %-26s %-26s %-30s\n' threads "single p50 (ms)" "1 backend, rows/s" "1 backend, array, rows/s" "2 backends, rows/s (total)"
for t in 1 2; do
    read -r p50 rows arr <<<"$(bench_one "$t")"
    printf '%-8s %-22s %-26s %-26s %-30s\n' "$t" "$p50" "$rows" "$arr" "$(concurrent "$t")"
done
