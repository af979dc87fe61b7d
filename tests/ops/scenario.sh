# shellcheck shell=bash
# A database that uses pg_embed the ways the README shows, for the release tests (upgrade.sh,
# dump_restore.sh): a registered model, a table kept embedded by statement triggers with an
# HNSW index, a table filled by embed.backfill, a table kept embedded by embed.vectorize.
# Source it after lib.sh.

# scenario_setup DB: the tables, their triggers and the model, in DB (pg_embed and vector
# installed there already).
scenario_setup() {
    PG_EMBED_DB="$1" q <<SQL >/dev/null
SET client_min_messages = warning;
SELECT embed.register_model(:'model', 'all-MiniLM-L6-v2');
CREATE TABLE sc_corpus (i serial PRIMARY KEY, s text);
\copy sc_corpus (s) FROM '$CORPUS'

CREATE TABLE sc_notes (id bigint PRIMARY KEY, body text, emb vector(:dim));
CREATE TRIGGER sc_notes_insert AFTER INSERT ON sc_notes REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION embed.embed_trigger(:'model', 'body', 'emb');
CREATE TRIGGER sc_notes_update AFTER UPDATE ON sc_notes REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION embed.embed_trigger(:'model', 'body', 'emb');
CREATE INDEX sc_notes_hnsw ON sc_notes USING hnsw (emb vector_cosine_ops);
INSERT INTO sc_notes (id, body) SELECT i, s FROM sc_corpus WHERE i <= 100;

CREATE TABLE sc_old (id bigint PRIMARY KEY, body text, emb vector(:dim));
INSERT INTO sc_old (id, body) SELECT i, s FROM sc_corpus WHERE i BETWEEN 101 AND 250;
CALL embed.backfill('sc_old', 'body', 'emb', :'model', 64);

CREATE TABLE sc_async (id bigint PRIMARY KEY, body text, emb vector(:dim));
SELECT embed.vectorize('sc_async', 'body', 'emb', :'model', 16);
INSERT INTO sc_async (id, body) SELECT i, s FROM sc_corpus WHERE i BETWEEN 251 AND 310;
SELECT embed.vectorize_wait('sc_async', 'emb', '2 minutes');
SQL
}

# scenario_vectors DB: one digest of every vector of the three tables, in key order.
scenario_vectors() {
    PG_EMBED_DB="$1" q1 "SELECT md5(string_agg(t || id || ':' || emb::text, ';' ORDER BY t, id)) FROM (
        SELECT 'n' AS t, id, emb FROM sc_notes UNION ALL SELECT 'o', id, emb FROM sc_old
        UNION ALL SELECT 'a', id, emb FROM sc_async) v"
}

# scenario_nearest DB [exact]: the ids of sc_notes nearest to a query, through the HNSW index
# (or, with "exact", by a scan of every row).
scenario_nearest() {
    local plan="SET enable_seqscan = off" ids
    if [ "${2:-}" = exact ]; then plan="SET enable_indexscan = off; SET enable_bitmapscan = off"; fi
    ids="$(PG_EMBED_DB="$1" q -At -c "$plan" -c "SELECT string_agg(id::text, ',') FROM (SELECT id FROM sc_notes
        ORDER BY emb <=> embed('$MODEL', 'trains in winter')::vector($DIM) LIMIT 5) s")"
    [ -n "$ids" ] || fail "no rows from the nearest-neighbour search in $1"
    echo "$ids"
}

# scenario_check DB LABEL: every vector is right, and each way of filling them still works:
# the triggers embed new and changed rows, a second backfill fills new rows, the workers
# embed new rows of the vectorized table, the HNSW index answers as an exact scan does.
scenario_check() {
    local db="$1" label="$2" t
    for t in sc_notes sc_old sc_async; do
        expect_eq "$label: $t rows without a vector" 0 "$(PG_EMBED_DB="$db" q1 "SELECT count(*) FROM $t WHERE emb IS NULL")"
        expect_eq "$label: $t vectors that differ from embed()" 0 "$(PG_EMBED_DB="$db" count_wrong_vectors "$t" emb)"
    done
    # New keys each time (the check runs more than once on a database).
    PG_EMBED_DB="$db" q <<SQL >/dev/null
SET client_min_messages = warning;
INSERT INTO sc_notes (id, body) SELECT m + i, s FROM sc_corpus, (SELECT max(id) AS m FROM sc_notes) x WHERE i BETWEEN 401 AND 410;
UPDATE sc_notes SET body = body || ' Again.' WHERE id <= 5;
INSERT INTO sc_old (id, body) SELECT m + i, s FROM sc_corpus, (SELECT max(id) AS m FROM sc_old) x WHERE i BETWEEN 411 AND 430;
CALL embed.backfill('sc_old', 'body', 'emb', :'model', 8);
INSERT INTO sc_async (id, body) SELECT m + i, s FROM sc_corpus, (SELECT max(id) AS m FROM sc_async) x WHERE i BETWEEN 431 AND 450;
SQL
    expect_eq "$label: the workers embed new rows of sc_async" t \
        "$(PG_EMBED_DB="$db" q1 "SELECT embed.vectorize_wait('sc_async', 'emb', '2 minutes')")"
    for t in sc_notes sc_old sc_async; do
        expect_eq "$label: after new writes, $t rows without a vector" 0 \
            "$(PG_EMBED_DB="$db" q1 "SELECT count(*) FROM $t WHERE emb IS NULL")"
        expect_eq "$label: after new writes, $t vectors that differ from embed()" 0 \
            "$(PG_EMBED_DB="$db" count_wrong_vectors "$t" emb)"
    done
    expect_eq "$label: backfill runs (2 or more), each done and naming its table" "t|0" \
        "$(PG_EMBED_DB="$db" q1 "SELECT count(*) >= 2, count(*) FILTER (WHERE relation <> 'sc_old'::regclass OR state <> 'done')
                                  FROM embed.backfill_progress")"
    expect_eq "$label: the HNSW search finds what an exact scan finds" \
        "$(scenario_nearest "$db" exact)" "$(scenario_nearest "$db")"
}
