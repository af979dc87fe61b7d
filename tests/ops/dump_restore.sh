#!/usr/bin/env bash
# Dump and restore, as a DBA moves a database: pg_dump -Fc of a database that uses pg_embed
# (a registered model, trigger-kept, backfilled and vectorized tables, rows still queued for
# the workers), pg_restore into a new database, and then the restored database has
#   - the same registrations, vectorizers, queue and backfill runs (pg_embed's configuration
#     tables are dumped as such, pg_extension_config_dump: each once, nothing twice);
#   - the same vectors, and the same HNSW search results;
#   - triggers that fire, a backfill that runs, workers that embed the restored queue.
set -euo pipefail
here="$(dirname "${BASH_SOURCE[0]}")"
source "$here/lib.sh"
source "$here/scenario.sh"

step "dump and restore: pg_dump -Fc of a database using pg_embed, pg_restore into a new one"
src=pg_embed_dump_src
dst=pg_embed_dump_dst
cleanup() {
    q -c "DROP DATABASE IF EXISTS $src WITH (FORCE)" -c "DROP DATABASE IF EXISTS $dst WITH (FORCE)" >/dev/null 2>&1 || true
}
trap cleanup EXIT
for db in $src $dst; do
    q -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null
done
q -c "CREATE DATABASE $src" >/dev/null
PG_EMBED_DB=$src q -c "SET client_min_messages = warning" -c "CREATE EXTENSION vector" -c "CREATE EXTENSION pg_embed" >/dev/null
scenario_setup $src
# Rows the workers have still to embed when the dump is taken: the vectorizer waits.
PG_EMBED_DB=$src q <<SQL >/dev/null
UPDATE embed.vectorizers SET paused_until = now() + interval '1 hour' WHERE tbl = 'sc_async'::regclass;
INSERT INTO sc_async (id, body) SELECT i, s FROM sc_corpus WHERE i BETWEEN 311 AND 330;
SQL
expect_eq "rows queued in the source at the dump" 20 \
    "$(PG_EMBED_DB=$src q1 "SELECT queued FROM embed.vectorize_status WHERE tbl = 'sc_async'::regclass")"

# The state that must come through, table by table (ids and names, never oids).
state() {
    PG_EMBED_DB="$1" q -At <<'SQL'
SELECT 'models', string_agg(concat_ws(' ', name, source, options, task, architecture, dim, revision, registered_by), ',' ORDER BY name) FROM embed.models;
SELECT 'revision', last_value FROM embed.model_revision;
SELECT 'vectorizers', string_agg(concat_ws(' ', id, tbl, source_column, target_column, model, batch_size, key_column, key_type, owner, rows_done), ',' ORDER BY id) FROM embed.vectorizers;
SELECT 'queue', string_agg(concat_ws(' ', id, vectorizer, key), ',' ORDER BY id) FROM embed.vectorize_queue;
SELECT 'errors', count(*) FROM embed.vectorize_errors;
SELECT 'backfill', string_agg(concat_ws(' ', id, relation, relid, rows_total, rows_done, batches, finished_at IS NOT NULL), ',' ORDER BY id) FROM embed.backfill_runs;
SELECT 'triggers', string_agg(concat_ws(' ', tgrelid::regclass, tgname, tgenabled), ',' ORDER BY tgrelid::regclass::text, tgname) FROM pg_trigger WHERE NOT tgisinternal;
SQL
}
state_src="$(state $src)"
vectors_src="$(scenario_vectors $src)"
nearest_src="$(scenario_nearest $src)"

dump="$(ops_workdir)/pg_embed.dump"
t0=$EPOCHREALTIME
"$PGBIN/pg_dump" -h 127.0.0.1 -p "$PG_EMBED_PORT" -U "$PG_SUPERUSER" -Fc -f "$dump" $src
t1=$EPOCHREALTIME
pass "pg_dump -Fc: $(( $(stat -c %s "$dump") / 1024 )) kB in $(ms_between "$t0" "$t1") ms"
# Each configuration table's rows once in the dump (as TABLE DATA of the extension's table).
toc="$("$PGBIN/pg_restore" -l "$dump")"
for t in models vectorizers vectorize_queue vectorize_errors backfill_runs; do
    expect_eq "TABLE DATA embed.$t entries in the dump" 1 "$(grep -c "TABLE DATA embed $t " <<<"$toc" || true)"
done
for s in model_revision vectorizers_id_seq vectorize_queue_id_seq backfill_runs_id_seq; do
    expect_eq "SEQUENCE SET embed.$s entries in the dump" 1 "$(grep -c "SEQUENCE SET embed $s " <<<"$toc" || true)"
done

q -c "CREATE DATABASE $dst" >/dev/null
t0=$EPOCHREALTIME
"$PGBIN/pg_restore" -h 127.0.0.1 -p "$PG_EMBED_PORT" -U "$PG_SUPERUSER" --exit-on-error -d $dst "$dump"
t1=$EPOCHREALTIME
pass "pg_restore without an error in $(ms_between "$t0" "$t1") ms"

expect_eq "restored registrations, vectorizers, queue, errors, backfill runs and triggers" "$state_src" "$(state $dst)"
expect_eq "restored vectors (digest of all three tables)" "$vectors_src" "$(scenario_vectors $dst)"
expect_eq "HNSW search on the restored index" "$nearest_src" "$(scenario_nearest $dst)"
# The restored queue: the workers embed it once the vectorizer may run.
PG_EMBED_DB=$dst q -c "UPDATE embed.vectorizers SET paused_until = NULL" >/dev/null
expect_eq "the workers embed the restored queue" t \
    "$(PG_EMBED_DB=$dst q1 "SELECT embed.vectorize_wait('sc_async', 'emb', '2 minutes')")"
scenario_check $dst "restored"
# A new registration in the restored database continues the restored revision sequence.
PG_EMBED_DB=$dst q -c "SELECT embed.register_model('minilm_restored', 'all-MiniLM-L6-v2')" >/dev/null
expect_eq "a new registration's revision follows the restored ones" t \
    "$(PG_EMBED_DB=$dst q1 "SELECT revision > (SELECT max(revision) FROM embed.models WHERE name <> 'minilm_restored') FROM embed.models WHERE name = 'minilm_restored'")"
