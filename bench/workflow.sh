#!/usr/bin/env bash
# Speed of the in-database workflow in a running server (start one with `make demo`), on the
# bench corpus (bench/corpus.txt, sentences of mean ~37 tokens) and a registered model:
#   1. CALL embed.backfill over a table of N rows (default 10,000), rows per second;
#   2. one multi-row INSERT of M rows (default 1,000) through the statement-level trigger
#      (one batched call) and through the row-level trigger (a call per row), and the ratio.
# Both in the same run, same backend settings. Prints figures; asserts nothing.
#   bench/workflow.sh [model] [backfill rows] [insert rows] [batch size]
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
pg_embed_resolve_paths

MODEL="${1:-minilm}"
ROWS="${2:-10000}"
INSERT_ROWS="${3:-1000}"
BATCH="${4:-64}"
CORPUS="$REPO/bench/corpus.txt"

psql_bench() {
    "$PGBIN/psql" -X -q -h 127.0.0.1 -p "$PG_EMBED_PORT" -U "$PG_SUPERUSER" -d "$PG_EMBED_DB" \
        -v ON_ERROR_STOP=1 -v model="$MODEL" -v rows="$ROWS" -v insert_rows="$INSERT_ROWS" \
        -v batch="$BATCH" "$@"
}

# The corpus, loaded once as (n, sentence); rows cycle through it.
psql_bench <<SQL
SET client_min_messages = warning;
DROP TABLE IF EXISTS bench_corpus, bench_backfill, bench_stmt, bench_row;
CREATE TABLE bench_corpus (n serial PRIMARY KEY, body text NOT NULL);
\copy bench_corpus (body) FROM '$CORPUS'
SQL

threads="$(psql_bench -At -c "LOAD 'pg_embed'" -c 'SHOW pg_embed.threads')"
echo "model $MODEL, pg_embed.threads $threads (0: one per core), corpus $(wc -l <"$CORPUS") sentences"

# 1. Backfill (its NOTICEs are left out; embed.backfill_progress has the figures).
psql_bench -At <<'SQL'
SELECT embed(:'model', 'warm up') IS NOT NULL AS warm \gset
CREATE TABLE bench_backfill (id int PRIMARY KEY, body text, emb vector(384));
INSERT INTO bench_backfill
SELECT i, c.body FROM generate_series(1, :rows) AS i
JOIN bench_corpus c ON c.n = 1 + (i - 1) % (SELECT count(*) FROM bench_corpus);
SQL
t0=$EPOCHREALTIME
psql_bench <<'SQL'
SET client_min_messages = warning;
CALL embed.backfill('bench_backfill', 'body', 'emb', :'model', :batch);
SQL
t1=$EPOCHREALTIME
psql_bench -At <<'SQL'
SELECT format('backfill: %s of %s rows filled; embed.backfill_progress: %s rows/s over %s batches of %s',
              (SELECT count(emb) FROM bench_backfill), :rows, p.rows_per_second, p.batches, p.batch_size)
  FROM embed.backfill_progress p WHERE p.relation = 'bench_backfill'::regclass ORDER BY p.id DESC LIMIT 1;
SQL
awk -v a="$t0" -v b="$t1" -v n="$ROWS" 'BEGIN { printf "backfill wall clock (CALL, client side): %.1f s, %.1f rows/s\n", b - a, n / (b - a) }'

# 2. Statement-level vs row-level trigger, one INSERT ... SELECT of M rows each.
psql_bench -At <<'SQL'
CREATE TABLE bench_stmt (id int PRIMARY KEY, body text, emb vector(384));
CREATE TRIGGER e AFTER INSERT ON bench_stmt REFERENCING NEW TABLE AS n
    FOR EACH STATEMENT EXECUTE FUNCTION embed.embed_trigger(:'model', 'body', 'emb');
CREATE TABLE bench_row (id int PRIMARY KEY, body text, emb vector(384));
CREATE TRIGGER e BEFORE INSERT OR UPDATE ON bench_row
    FOR EACH ROW EXECUTE FUNCTION embed.embed_trigger(:'model', 'body', 'emb');
SELECT embed(:'model', 'warm up') IS NOT NULL AS warm \gset
CREATE FUNCTION pg_temp.timed(tbl text) RETURNS numeric LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz := clock_timestamp();
BEGIN
    EXECUTE format('INSERT INTO %I SELECT i, c.body FROM generate_series(1, %s) AS i
                    JOIN bench_corpus c ON c.n = i', tbl, current_setting('bench.rows'));
    RETURN extract(epoch FROM clock_timestamp() - t0);
END $$;
CREATE FUNCTION pg_temp.timed_array() RETURNS numeric LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz := clock_timestamp(); n bigint;
BEGIN
    SELECT count(*) INTO n FROM embed(current_setting('bench.model'),
        (SELECT array_agg(body ORDER BY c.n) FROM bench_corpus c WHERE c.n <= current_setting('bench.rows')::int));
    RETURN extract(epoch FROM clock_timestamp() - t0);
END $$;
SELECT set_config('bench.rows', :'insert_rows', false) AS r0, set_config('bench.model', :'model', false) AS m0 \gset
SELECT pg_temp.timed_array() AS a \gset
SELECT pg_temp.timed('bench_stmt') AS s \gset
SELECT pg_temp.timed('bench_row') AS r \gset
SELECT format('INSERT of %s rows, statement trigger: %s s (%s rows/s)', :insert_rows, round(:s, 2), round(:insert_rows / :s, 1));
SELECT format('INSERT of %s rows, row trigger:       %s s (%s rows/s)', :insert_rows, round(:r, 2), round(:insert_rows / :r, 1));
SELECT format('baseline, embed(model, text[]) of the same rows, no table: %s s (%s rows/s)', round(:a, 2), round(:insert_rows / :a, 1));
SELECT format('statement trigger / row trigger speed: %sx; statement trigger / baseline: %s', round(:r / :s, 2), round(:a / :s, 2));
SELECT format('all vectors filled: %s', (SELECT count(emb) FROM bench_stmt) = :insert_rows AND (SELECT count(emb) FROM bench_row) = :insert_rows);
SQL
psql_bench -c "DROP TABLE bench_corpus, bench_backfill, bench_stmt, bench_row"
