#!/usr/bin/env bash
# A hot standby of the test server, as the README's scaling section describes it: a streaming
# replica made with pg_basebackup (its own data directory and port), then
#   - a model registered on the primary is usable on the standby once replayed;
#   - embed() there gives the same vectors as on the primary, bit for bit, and an HNSW search
#     there returns the same rows;
#   - the calls that write fail there at once with SQLSTATE 25006 and a message that says to
#     run them on the primary (register_model, drop_model, backfill, vectorize, unvectorize),
#     and so do writes through the triggers and new triggers (PostgreSQL's own refusal).
# Prints how long the registration took to reach the standby and the standby's first call.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

step "hot standby: pg_basebackup replica of the test server, reads there, writes refused"
STANDBY_PORT="${PG_EMBED_STANDBY_PORT:-$((PG_EMBED_PORT + 1))}"
STANDBY_DATA="$REPO/.pg/standby-data"
standby() { PG_EMBED_PORT="$STANDBY_PORT" PGDATA="$STANDBY_DATA" PG_LOG="$REPO/.pg/log/standby-data.log" "$@"; }
stop_standby() { standby "$REPO/scripts/server.sh" stop >/dev/null 2>&1 || true; }
cleanup() {
    stop_standby
    rm -rf "$STANDBY_DATA"
    q -c "DROP TABLE IF EXISTS sb_docs" -c "SELECT embed.drop_model('minilm_replica') FROM embed.models WHERE name = 'minilm_replica'" >/dev/null 2>&1 || true
}
trap cleanup EXIT
stop_standby
rm -rf "$STANDBY_DATA"

q <<SQL >/dev/null
SET client_min_messages = warning;
DROP TABLE IF EXISTS sb_docs;
CREATE TABLE sb_docs (id bigint PRIMARY KEY, body text, emb vector(:dim));
CREATE TRIGGER sb_docs_insert AFTER INSERT ON sb_docs REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION embed.embed_trigger(:'model', 'body', 'emb');
CREATE TEMP TABLE c (s text);
\copy c FROM '$CORPUS'
INSERT INTO sb_docs (id, body) SELECT row_number() OVER (), s FROM (SELECT s FROM c LIMIT 300) s;
CREATE INDEX sb_docs_hnsw ON sb_docs USING hnsw (emb vector_cosine_ops);
SQL

t0=$EPOCHREALTIME
mkdir -p "$STANDBY_DATA"
if is_root; then chown "$PG_USER:" "$STANDBY_DATA"; fi
chmod 700 "$STANDBY_DATA"
as_pg_user "$PGBIN/pg_basebackup" -h 127.0.0.1 -p "$PG_EMBED_PORT" -U "$PG_SUPERUSER" -D "$STANDBY_DATA" \
    -X stream -R --checkpoint=fast
pass "pg_basebackup: $(du -sm "$STANDBY_DATA" | cut -f1) MB in $(ms_between "$t0" "$EPOCHREALTIME") ms"
standby "$REPO/scripts/server.sh" start >/dev/null
sq() { PG_EMBED_PORT="$STANDBY_PORT" q "$@"; }
sq1() { PG_EMBED_PORT="$STANDBY_PORT" q1 "$@"; }
expect_eq "the standby is in recovery" t "$(sq1 "SELECT pg_is_in_recovery()")"

# A registration on the primary reaches the standby by replication.
t0=$EPOCHREALTIME
q -c "SELECT embed.register_model('minilm_replica', 'all-MiniLM-L6-v2', '{\"max_length\": 128}')" >/dev/null
lsn="$(q1 "SELECT pg_current_wal_lsn()")"
PG_EMBED_PORT="$STANDBY_PORT" wait_until "SELECT pg_last_wal_replay_lsn() >= '$lsn'" 30
t1=$EPOCHREALTIME
pass "registration on the primary visible on the standby after $(ms_between "$t0" "$t1") ms (register_model included)"
expect_eq "the registration on the standby" "minilm_replica all-MiniLM-L6-v2 128" \
    "$(sq1 "SELECT name || ' ' || source || ' ' || max_length FROM embed.models WHERE name = 'minilm_replica'")"

# Same vectors, bit for bit, and the same nearest rows through the replicated HNSW index.
vectors() { "$@" -At -c "SELECT md5(string_agg(embed(m, body)::text, ';' ORDER BY m, id)) FROM
    unnest(ARRAY['minilm_replica', '$MODEL']) m, (SELECT id, body FROM sb_docs ORDER BY id LIMIT 40) d"; }
t0=$EPOCHREALTIME
first="$(sq -At -c "SELECT array_length(embed('minilm_replica', 'first call on the standby'), 1)")"
t1=$EPOCHREALTIME
expect_eq "embed() on the standby" "$DIM" "$first"
pass "first embed() on the standby (model load) took $(ms_between "$t0" "$t1") ms"
# (Assignments, so that a failing query stops the test.)
on_primary="$(vectors q)"
on_standby="$(vectors sq)"
expect_eq "embed() of 40 rows with both models, standby = primary (digest)" "$on_primary" "$on_standby"
on_primary="$(q1 "SELECT md5(string_agg(emb::text, ';' ORDER BY id)) FROM sb_docs")"
on_standby="$(sq1 "SELECT md5(string_agg(emb::text, ';' ORDER BY id)) FROM sb_docs")"
expect_eq "stored vectors, standby = primary (digest)" "$on_primary" "$on_standby"
knn="SET enable_seqscan = off; SELECT string_agg(id::text, ',') FROM (SELECT id FROM sb_docs
     ORDER BY emb <=> embed('$MODEL', 'children play in the snow')::vector($DIM) LIMIT 10) s"
on_primary="$(q -At -c "$knn")"
on_standby="$(sq -At -c "$knn")"
expect_eq "HNSW search, standby = primary" "$on_primary" "$on_standby"
expect_eq "the standby's plan uses the HNSW index" 1 \
    "$(sq -At -c "SET enable_seqscan = off" -c "EXPLAIN SELECT id FROM sb_docs ORDER BY emb <=> embed('$MODEL', 'x')::vector($DIM) LIMIT 10" | grep -c 'sb_docs_hnsw' || true)"

# Writes need the primary: pg_embed's own calls say so (25006), and PostgreSQL refuses the rest.
refused() { # refused WHAT SQL PATTERN: the statement fails on the standby with a message matching PATTERN
    local out
    if out="$(sq -v VERBOSITY=verbose -c "$2" 2>&1)"; then
        fail "$1 succeeded on the standby: $out"
    fi
    grep -qE "$3" <<<"$out" || fail "$1 on the standby: expected /$3/, got: $out"
    pass "$1 refused on the standby: $(grep -m1 ERROR <<<"$out")"
}
primary_msg='ERROR:  25006: .* cannot run on a hot standby: it writes to the database'
refused "embed.register_model" "SELECT embed.register_model('x', 'all-MiniLM-L6-v2')" "$primary_msg"
refused "embed.drop_model" "SELECT embed.drop_model('minilm_replica')" "$primary_msg"
refused "embed.backfill" "CALL embed.backfill('sb_docs', 'body', 'emb', '$MODEL')" "$primary_msg"
refused "embed.vectorize" "SELECT embed.vectorize('sb_docs', 'body', 'emb', '$MODEL')" "$primary_msg"
refused "embed.unvectorize" "SELECT embed.unvectorize('sb_docs', 'emb')" "$primary_msg"
refused "INSERT through the embedding trigger" "INSERT INTO sb_docs (id, body) VALUES (100000, 'x')" \
    'ERROR:  25006: cannot execute INSERT in a read-only transaction'
refused "CREATE TRIGGER with embed.embed_trigger" \
    "CREATE TRIGGER t AFTER INSERT ON sb_docs REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION embed.embed_trigger('$MODEL', 'body', 'emb')" \
    'ERROR:  25006: cannot execute CREATE TRIGGER in a read-only transaction'
expect_eq "the standby's log shows no crashed process" 0 "$(grep -c 'terminated by signal' "$REPO/.pg/log/standby-data.log" || true)"
