#!/usr/bin/env bash
# What the asynchronous path costs a writer: single-row INSERT latency (pgbench, one client,
# autocommit) into the same small table (bigint key, text, vector; no index but the key)
#   plain       no trigger
#   vectorize   embed.vectorize's queue triggers (a worker embeds behind the writes)
#   pgai-like   the design of pgai's vectorizer queue: a per-table row trigger with static
#               SQL inserting NEW's key into a queue table typed like the key
#   pgmq-like   the design of pg_vectorize: a row trigger building a jsonb job message
#               ({job_name, record_ids: [key::text]}) inserted into a queue table (as
#               pgmq.send does)
# measured interleaved: ROUNDS rounds, each INSERTS inserts into every table in turn (each
# round starting with the next variant), so that drift of the machine hits every variant alike; p50 and p99 over all rounds, and each
# variant's p50 against plain's. The anchors are written here after those projects' published
# designs (neither is installed: pgmq and pgai's Python are not available), without their
# workers. Prints the CPU first. Needs a running server with MODEL registered (`make demo`).
# Asserts nothing; not part of the tests.
#   bench/vectorize_insert.sh [rounds] [inserts per round]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../tests/ops/lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROUNDS="${1:-10}"
INSERTS="${2:-200}"
work="$(ops_workdir)"
trap 'rm -rf "$work"' EXIT
bench_header "single-row INSERTs, $ROUNDS interleaved rounds of $INSERTS per variant"
pgb() { "$PGBIN/pgbench" -n -h 127.0.0.1 -p "$PG_EMBED_PORT" -U "$PG_SUPERUSER" -d "$PG_EMBED_DB" "$@"; }

q <<SQL >/dev/null
SET client_min_messages = warning;
DROP TABLE IF EXISTS vi_plain, vi_vectorize, vi_pgai, vi_pgmq, vi_pgai_queue, vi_pgmq_queue;
CREATE TABLE vi_plain (id bigint PRIMARY KEY, body text, emb vector($DIM));
CREATE TABLE vi_vectorize (LIKE vi_plain INCLUDING ALL);
CREATE TABLE vi_pgai (LIKE vi_plain INCLUDING ALL);
CREATE TABLE vi_pgmq (LIKE vi_plain INCLUDING ALL);
SELECT embed.vectorize('vi_vectorize', 'body', 'emb', :'model', 64);

CREATE TABLE vi_pgai_queue (id bigint NOT NULL, queued_at timestamptz NOT NULL DEFAULT now());
CREATE INDEX ON vi_pgai_queue (id);
CREATE OR REPLACE FUNCTION public.vi_pgai_enqueue() RETURNS trigger LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS \$\$
BEGIN
    INSERT INTO public.vi_pgai_queue (id) VALUES (NEW.id);
    RETURN NULL;
END \$\$;
CREATE TRIGGER vi_pgai_enqueue AFTER INSERT OR UPDATE ON vi_pgai
    FOR EACH ROW EXECUTE FUNCTION public.vi_pgai_enqueue();

CREATE TABLE vi_pgmq_queue (msg_id bigserial PRIMARY KEY, read_ct int NOT NULL DEFAULT 0,
    enqueued_at timestamptz NOT NULL DEFAULT now(), vt timestamptz NOT NULL DEFAULT clock_timestamp(), message jsonb);
CREATE OR REPLACE FUNCTION public.vi_pgmq_send(job_name text, record_ids text[]) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO public.vi_pgmq_queue (message)
    VALUES (jsonb_build_object('job_name', job_name, 'record_ids', record_ids));
END \$\$;
CREATE OR REPLACE FUNCTION public.vi_pgmq_enqueue() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
    PERFORM public.vi_pgmq_send(TG_ARGV[0], ARRAY[NEW.id::text]);
    RETURN NULL;
END \$\$;
CREATE TRIGGER vi_pgmq_enqueue AFTER INSERT OR UPDATE ON vi_pgmq
    FOR EACH ROW EXECUTE FUNCTION public.vi_pgmq_enqueue('vi_pgmq');
SQL

variants=(plain vectorize pgai pgmq)
for v in "${variants[@]}"; do
    cat >"$work/$v.sql" <<SQL
\\set id random(1, 1000000000000)
INSERT INTO vi_$v (id, body) VALUES (:id, 'a sentence of about ten words to embed in the queue');
SQL
    pgb -c 1 -t 50 -f "$work/$v.sql" >/dev/null  # warm-up (plans, the worker's first load)
done
for r in $(seq 1 "$ROUNDS"); do
    # Each round starts with another variant (the first of a round was seen to run slower).
    n=${#variants[@]}
    for k in $(seq 0 $((n - 1))); do
        v="${variants[$(((r + k) % n))]}"
        (cd "$work" && pgb -c 1 -t "$INSERTS" -f "$work/$v.sql" -l --log-prefix="$work/lat_${v}_$r" >/dev/null)
    done
done
# p50 and p99 of pgbench's per-transaction logs (latency in microseconds, 3rd field), in ms.
pct() { cat "$work"/lat_"$1"_* | awk '{ print $3 / 1000 }' | sort -n | awk -v p="$2" '{ a[NR] = $1 } END { printf "%.3f", a[int(NR * p + 0.5)] }'; }
base="$(pct plain 0.5)"
printf '    %-10s %9s %9s %9s\n' variant "p50 ms" "p99 ms" "p50/plain"
for v in "${variants[@]}"; do
    p50="$(pct "$v" 0.5)"
    printf '    %-10s %9s %9s %9s\n' "$v" "$p50" "$(pct "$v" 0.99)" "$(awk -v a="$p50" -v b="$base" 'BEGIN { printf "%.2fx", a / b }')"
done
q1 "SELECT embed.vectorize_wait('vi_vectorize', 'emb', '10 minutes')" >/dev/null
q -c "SELECT embed.unvectorize('vi_vectorize', 'emb')" \
  -c "DROP TABLE vi_plain, vi_vectorize, vi_pgai, vi_pgmq, vi_pgai_queue, vi_pgmq_queue" \
  -c "DROP FUNCTION public.vi_pgai_enqueue(), public.vi_pgmq_enqueue(), public.vi_pgmq_send(text, text[])" >/dev/null
