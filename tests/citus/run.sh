#!/usr/bin/env bash
# `make test-citus`: pg_embed on a Citus cluster (scripts/citus.sh: a coordinator and two
# workers on loopback ports, Citus built from the vendored source or already installed),
# each result compared with the same work on a plain table of the coordinator (a single
# node):
#   1. registration from the coordinator reaches every worker; a worker that refuses leaves
#      every node as it was, and the error names it; refused inside a transaction block;
#      embed.cluster_check() finds a node that differs, embed.cluster_sync() mends it, also
#      for a worker added later; drop_model for the cluster
#   2. UPDATE ... SET emb = embed(...) runs on the workers and equals the single node's
#      vectors bit for bit
#   3. embed.backfill of a distributed table fills each row with its own vector (node by
#      node, shard by shard), and again does nothing; a reference table is refused (0A000)
#   4. embed.vectorize of a distributed table: every row embedded by the node that holds it,
#      through INSERT, UPDATE, DELETE, a column rename and shard moves; unvectorize and DROP
#      TABLE leave nothing behind on any node; reference tables and calls on a worker refused
#      (0A000); a table distributed after embed.vectorize, or a shard moved to a worker added
#      later, refuses writes (55000) until embed.vectorize is called again, never leaving a row
#      unqueued
#   5. row and statement embed.embed_trigger on a distributed table
#   6. similarity search: the same rows as an exact scan of the single node; where the
#      query vector is computed for each query shape (pg_stat_user_functions per node)
#   7. pg_embed.preload is skipped for Citus's own connections between nodes
#   8. tests/citus/citus_random.py: seeded random sequences of registrations (with a worker that
#      refuses or is down), DML, backfills (some cut short) and worker restarts against an
#      oracle (CITUS_SEEDS seeds of CITUS_STEPS steps, default 4 of 24; make soak-citus runs many)
# Prints the figures the README's "Scaling out" section quotes.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/env.sh"
pg_embed_resolve_paths
require_pginstall
export PG_EMBED_PORT="${CITUS_PORT:-28840}"
source "$REPO/tests/ops/lib.sh"
unset RUST_BACKTRACE

CITUS="$REPO/scripts/citus.sh"
W1=$((PG_EMBED_PORT + 1)); W2=$((PG_EMBED_PORT + 2)); W3=$((PG_EMBED_PORT + 3))
on() { local port="$1"; shift; PG_EMBED_PORT="$port" q "$@"; }  # psql on a node by port
on1() { PG_EMBED_PORT="$1" q1 "$2"; }
# expect_error WHAT SQLSTATE SQL [port]: the statement fails with that SQLSTATE; prints the message.
expect_error() {
    local out
    if out="$(PG_EMBED_PORT="${4:-$PG_EMBED_PORT}" q -v VERBOSITY=verbose -c "$3" 2>&1)"; then
        fail "$1: succeeded, expected SQLSTATE $2"
    fi
    grep -q "ERROR:  $2:" <<<"$out" || fail "$1: expected SQLSTATE $2, got: $(head -n 3 <<<"$out")"
    pass "$1: $2 $(sed -n "s/^ERROR:  $2: //p" <<<"$out" | head -n 1 | cut -c1-160)"
}
# Each node's registrations as one line (name source options).
registrations() { on1 "$1" "SELECT coalesce(string_agg(name || ' ' || source || ' ' || options::text, '; ' ORDER BY name), 'none') FROM embed.models"; }
# embed() calls per node since reset_calls, as "coordinator/worker1/worker2".
reset_calls() { local p; for p in "$PG_EMBED_PORT" "$W1" "$W2"; do on "$p" -c "SELECT pg_stat_reset()" >/dev/null; done; }
calls() {
    local p out=""
    sleep 0.6  # the statistics of a backend that just ended reach the server
    for p in "$PG_EMBED_PORT" "$W1" "$W2"; do
        out+="$(on1 "$p" "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions WHERE schemaname = 'public' AND funcname = 'embed'")/"
    done
    echo "${out%/}"
}

t_all=$EPOCHREALTIME
step "Citus: build (or use the installed one) and start a coordinator and two workers"
"$CITUS" build
"$REPO/scripts/fetch_model.sh" >/dev/null
"$CITUS" stop >/dev/null 2>&1 || true
rm -rf "$REPO"/.pg/citus-* "$REPO"/.pg/log/citus-*.log
# A backend or worker process that died by a signal on any node, with the lines before it
# in that node's log: printed when the run fails, so a CI log shows why.
crashes() {
    local log
    for log in "$REPO"/.pg/log/citus-*.log; do
        [ -f "$log" ] || continue
        { grep -n -B 30 -A 3 -E "terminated by signal|PANIC:" "$log" || true; } | sed "s|^|$(basename "$log"): |" | tail -n 80
    done
}
cleanup() {
    local rc=$?
    if [ "$rc" -ne 0 ]; then
        local found
        found="$(crashes)"
        [ -n "$found" ] && printf '%s\n%s\n' "==> crashed processes in the nodes' logs" "$found" >&2
    fi
    "$CITUS" stop >/dev/null 2>&1 || true
}
trap cleanup EXIT
"$CITUS" start
ensure_pg_user_access "$MODEL_DIR/all-MiniLM-L6-v2/config.json" "$MODEL_DIR"
for p in "$PG_EMBED_PORT" "$W1" "$W2"; do
    on "$p" -c "ALTER SYSTEM SET track_functions = 'all'" -c "SELECT pg_reload_conf()" >/dev/null
done
on "$PG_EMBED_PORT" -c "SET client_min_messages = warning" -c "CREATE EXTENSION vector" -c "CREATE EXTENSION pg_embed" >/dev/null
expect_eq "pg_embed created on the workers by Citus" "t t" \
    "$(on1 "$W1" "SELECT count(*) = 1 FROM pg_extension WHERE extname = 'pg_embed'") $(on1 "$W2" "SELECT count(*) = 1 FROM pg_extension WHERE extname = 'pg_embed'")"

# ---- 1. registration for the cluster -------------------------------------------------------
step "registration from the coordinator, for every node or none"
t0=$EPOCHREALTIME
q -c "SELECT embed.register_model('minilm', 'all-MiniLM-L6-v2')" >/dev/null
reg_ms="$(ms_between "$t0" "$EPOCHREALTIME")"
for p in "$PG_EMBED_PORT" "$W1" "$W2"; do
    expect_eq "registration on node :$p" "minilm all-MiniLM-L6-v2 {}" "$(registrations "$p")"
done
pass "register_model for 3 nodes: $reg_ms ms"
expect_eq "cluster_check() with every node equal" "" "$(q1 "SELECT string_agg(node || ' ' || model || ' ' || difference, '; ') FROM embed.cluster_check()")"
q -c "SELECT embed.register_model('minilm', 'all-MiniLM-L6-v2', '{\"max_length\": 128}')" >/dev/null
for p in "$W1" "$W2"; do
    expect_eq "a re-registration on node :$p" 'minilm all-MiniLM-L6-v2 {"max_length": 128}' "$(registrations "$p")"
done

# A worker that cannot read the model's files (its own pg_embed.model_dir) refuses: every node
# stays as it was, and the error names that worker.
empty="$(ops_workdir)"
on "$W2" -c "ALTER SYSTEM SET pg_embed.model_dir = '$empty'" -c "SELECT pg_reload_conf()" >/dev/null
expect_error "a registration one worker refuses" 58P01 "SELECT embed.register_model('minilm_b', 'all-MiniLM-L6-v2')"
out="$(q -c "SELECT embed.register_model('minilm_b', 'all-MiniLM-L6-v2')" 2>&1 || true)"
grep -q "worker node 127.0.0.1:$W2 refused" <<<"$out" || fail "the error does not name worker :$W2: $out"
pass "the error names the worker 127.0.0.1:$W2"
expect_error "a re-registration one worker refuses" 58P01 "SELECT embed.register_model('minilm', 'all-MiniLM-L6-v2', '{\"pooling\": \"cls\"}')"
for p in "$PG_EMBED_PORT" "$W1" "$W2"; do
    expect_eq "node :$p as before both refusals" 'minilm all-MiniLM-L6-v2 {"max_length": 128}' "$(registrations "$p")"
done
expect_eq "cluster_check() names the worker that cannot read the files" \
    "127.0.0.1:$W2 minilm files not readable there: 58P01" \
    "$(q1 "SELECT string_agg(node || ' ' || model || ' ' || left(difference, 31), '; ') FROM embed.cluster_check()")"
on "$W2" -c "ALTER SYSTEM RESET pg_embed.model_dir" -c "SELECT pg_reload_conf()" >/dev/null
expect_error "register_model inside a transaction block" 25001 \
    "BEGIN; SELECT embed.register_model('minilm_b', 'all-MiniLM-L6-v2'); COMMIT;"

# A worker registered by hand with other options (the cosine of 0.59 a mixed registration
# gave): found, then mended.
on "$W1" -c "SELECT embed.register_model('minilm', 'all-MiniLM-L6-v2', '{\"pooling\": \"cls\"}')" >/dev/null
expect_eq "cluster_check() finds the worker registered by hand" \
    "127.0.0.1:$W1 minilm options: {\"max_length\": 128} here, {\"pooling\": \"cls\"} there" \
    "$(q1 "SELECT string_agg(node || ' ' || model || ' ' || difference, '; ') FROM embed.cluster_check()")"
expect_eq "cluster_sync() mends it" "127.0.0.1:$W1 minilm registered" \
    "$(q1 "SELECT string_agg(node || ' ' || model || ' ' || action, '; ') FROM embed.cluster_sync()")"
expect_eq "cluster_check() after cluster_sync()" "" "$(q1 "SELECT string_agg(node || ' ' || model, '; ') FROM embed.cluster_check()")"

# A worker added later has pg_embed (Citus creates it) but no registration until cluster_sync().
"$CITUS" add 3 >/dev/null
expect_eq "cluster_check() after citus_add_node" "127.0.0.1:$W3 minilm not registered on the worker" \
    "$(q1 "SELECT string_agg(node || ' ' || model || ' ' || difference, '; ') FROM embed.cluster_check()")"
expect_eq "cluster_sync() registers on the new worker" "127.0.0.1:$W3 minilm registered" \
    "$(q1 "SELECT string_agg(node || ' ' || model || ' ' || action, '; ') FROM embed.cluster_sync()")"
expect_eq "the new worker's registration" 'minilm all-MiniLM-L6-v2 {"max_length": 128}' "$(registrations "$W3")"
q -c "SELECT citus_remove_node('127.0.0.1', $W3)" >/dev/null
PG_EMBED_PORT="$W3" PGDATA="$REPO/.pg/citus-3" PG_LOG="$REPO/.pg/log/citus-3.log" "$REPO/scripts/server.sh" stop >/dev/null

# A worker that is down: refused before anything changes, naming it.
w2() { PG_EMBED_PORT="$W2" PGDATA="$REPO/.pg/citus-2" PG_LOG="$REPO/.pg/log/citus-2.log" "$REPO/scripts/server.sh" "$@" >/dev/null; }
w2 stop
expect_error "a registration while a worker is down" 08006 "SELECT embed.register_model('minilm_b', 'all-MiniLM-L6-v2')"
w2 start
expect_eq "nothing registered on the coordinator or worker :$W1 meanwhile" "f f" \
    "$(q1 "SELECT count(*) > 0 FROM embed.models WHERE name = 'minilm_b'") $(on1 "$W1" "SELECT count(*) > 0 FROM embed.models WHERE name = 'minilm_b'")"

# A member of embed_admin (no superuser) registers for the cluster too.
q -c "SET client_min_messages = warning" -c "CREATE ROLE citus_admin LOGIN IN ROLE embed_admin" >/dev/null
q -c "SET ROLE citus_admin" -c "SELECT embed.register_model('minilm_b', 'all-MiniLM-L6-v2')" >/dev/null
expect_eq "minilm_b, registered by a member of embed_admin, on worker :$W2" "t" "$(on1 "$W2" "SELECT count(*) = 1 FROM embed.models WHERE name = 'minilm_b'")"
q -c "SELECT embed.drop_model('minilm_b')" >/dev/null
for p in "$PG_EMBED_PORT" "$W1" "$W2"; do
    expect_eq "drop_model for the cluster, node :$p" 'minilm all-MiniLM-L6-v2 {"max_length": 128}' "$(registrations "$p")"
done
q -c "SELECT embed.register_model('minilm', 'all-MiniLM-L6-v2')" >/dev/null

# ---- 2. pushed-down UPDATE ---------------------------------------------------------------------
step "UPDATE ... SET emb = embed(...) on a distributed table"
q <<SQL >/dev/null
SET client_min_messages = warning;
CREATE TEMP TABLE c (s text);
\copy c FROM '$CORPUS'
CREATE TABLE single (id bigint PRIMARY KEY, body text, emb vector($DIM));
INSERT INTO single (id, body) SELECT row_number() OVER (), s FROM (SELECT s FROM c LIMIT 600) s;
UPDATE single SET emb = embed('$MODEL', body)::vector($DIM);
CREATE TABLE docs (id bigint PRIMARY KEY, body text, emb vector($DIM));
SELECT create_distributed_table('docs', 'id', shard_count := 32);
INSERT INTO docs (id, body) SELECT id, body FROM single;
SQL
# Same vectors on every shard as on the single node, bit for bit.
same_as_single() { q1 "SELECT count(*) FILTER (WHERE d.emb IS NULL) || ' NULL, ' || count(*) FILTER (WHERE d.emb::text <> s.emb::text) || ' differ, of ' || count(*) FROM $1 d JOIN single s USING (id)"; }
reset_calls
t0=$EPOCHREALTIME
q -c "UPDATE docs SET emb = embed('$MODEL', body)::vector($DIM)" >/dev/null
upd_ms="$(ms_between "$t0" "$EPOCHREALTIME")"
expect_eq "vectors against the single node" "0 NULL, 0 differ, of 600" "$(same_as_single docs)"
per_node="$(calls)"
expect_eq "embed() on the coordinator" 0 "${per_node%%/*}"
workers_sum=$(( $(cut -d/ -f2 <<<"$per_node") + $(cut -d/ -f3 <<<"$per_node") ))
expect_eq "embed() calls on the workers" 600 "$workers_sum"
pass "UPDATE of 600 rows over 32 shards: $upd_ms ms (calls per node $per_node)"
q -c "UPDATE single SET emb = NULL" >/dev/null
t0=$EPOCHREALTIME
q -c "UPDATE single SET emb = embed('$MODEL', body)::vector($DIM)" >/dev/null
pass "the same UPDATE on the single node: $(ms_between "$t0" "$EPOCHREALTIME") ms"
for pool in 1 4; do
    q -c "UPDATE docs SET emb = NULL" >/dev/null
    t0=$EPOCHREALTIME
    q -c "SET citus.max_adaptive_executor_pool_size = $pool" -c "UPDATE docs SET emb = embed('$MODEL', body)::vector($DIM)" >/dev/null
    pass "UPDATE of 600 rows with citus.max_adaptive_executor_pool_size = $pool: $(ms_between "$t0" "$EPOCHREALTIME") ms"
done

# ---- 3. backfill ---------------------------------------------------------------------------------
step "embed.backfill of a distributed table"
q -c "UPDATE docs SET emb = NULL" >/dev/null
t0=$EPOCHREALTIME
q -c "CALL embed.backfill('docs', 'body', 'emb', '$MODEL', 32)" >/dev/null
bf_ms="$(ms_between "$t0" "$EPOCHREALTIME")"
expect_eq "backfilled vectors against the single node" "0 NULL, 0 differ, of 600" "$(same_as_single docs)"
pass "backfill of 600 rows over 32 shards on 2 workers: $bf_ms ms"
# Half filled (as if stopped), then resumed: only the rest is written.
q -c "UPDATE docs SET emb = NULL WHERE id % 2 = 0" >/dev/null
reset_calls
q -c "CALL embed.backfill('docs', 'body', 'emb', '$MODEL', 32)" >/dev/null
calls >/dev/null  # (waits for the statistics)
updated=0
for p in "$W1" "$W2"; do
    # (Citus hides the shards from a client's catalog queries unless told not to.)
    updated=$((updated + $(PG_EMBED_PORT="$p" q -At -c "SET citus.override_table_visibility = off" \
        -c "SELECT coalesce(sum(n_tup_upd), 0) FROM pg_stat_user_tables WHERE relname LIKE 'docs\_%'")))
done
expect_eq "rows a resumed backfill writes (those left NULL)" 300 "$updated"
expect_eq "after the resumed backfill" "0 NULL, 0 differ, of 600" "$(same_as_single docs)"
q -c "UPDATE single SET emb = NULL" >/dev/null
t0=$EPOCHREALTIME
q -c "CALL embed.backfill('single', 'body', 'emb', '$MODEL', 32)" >/dev/null
pass "the same backfill on the single node: $(ms_between "$t0" "$EPOCHREALTIME") ms"
# statement_timeout on the coordinator ends the workers' runs too (what they committed stays).
q <<SQL >/dev/null
SET client_min_messages = warning;
CREATE TABLE big (id bigint PRIMARY KEY, body text, emb vector($DIM));
SELECT create_distributed_table('big', 'id', shard_count := 8);
CREATE TEMP TABLE c (s text);
\copy c FROM '$CORPUS'
INSERT INTO big (id, body) SELECT row_number() OVER (), s FROM c;
SQL
t0=$EPOCHREALTIME
out="$(q -c "SET statement_timeout = '1s'" -c "CALL embed.backfill('big', 'body', 'emb', '$MODEL', 32)" 2>&1 || true)"
grep -q "canceling statement due to statement timeout" <<<"$out" || fail "backfill under statement_timeout: $out"
pass "backfill of 2,000 rows under statement_timeout = 1s ended after $(ms_between "$t0" "$EPOCHREALTIME") ms"
filled="$(q1 "SELECT count(*) FROM big WHERE emb IS NOT NULL")"
sleep 2
expect_eq "rows filled 2 s after the timeout (the workers stopped too)" "$filled" "$(q1 "SELECT count(*) FROM big WHERE emb IS NOT NULL")"
expect_eq "... and those rows hold their own vectors" 0 "$(q1 "SELECT count(*) FROM big WHERE emb IS NOT NULL AND emb::text <> embed('$MODEL', body)::vector($DIM)::text")"
q -c "DROP TABLE big" >/dev/null
q <<'SQL' >/dev/null
SET client_min_messages = warning;
CREATE TABLE ref (id bigint PRIMARY KEY, body text, emb vector(384));
SELECT create_reference_table('ref');
SQL
expect_error "backfill of a reference table" 0A000 "CALL embed.backfill('ref', 'body', 'emb', 'minilm')"
# A worker without the model (dropped there by hand): refused before any row is written.
q -c "SELECT embed.register_model('minilm_c', 'all-MiniLM-L6-v2')" >/dev/null
on "$W2" -c "SELECT embed.drop_model('minilm_c')" >/dev/null
q -c "UPDATE docs SET emb = NULL WHERE id <= 10" >/dev/null
out="$(q -v VERBOSITY=verbose -c "CALL embed.backfill('docs', 'body', 'emb', 'minilm_c')" 2>&1 || true)"
grep -q "ERROR:  42704: embed.backfill(public.docs): node 127.0.0.1:$W2 refused: model \"minilm_c\" is not registered" <<<"$out" \
    || fail "backfill with a model worker :$W2 does not have: $out"
pass "backfill with a model a worker does not have: 42704, naming node 127.0.0.1:$W2"
expect_eq "rows written by the refused backfill" 10 "$(q1 "SELECT count(*) FROM docs WHERE emb IS NULL")"
q -c "SELECT embed.drop_model('minilm_c')" -c "CALL embed.backfill('docs', 'body', 'emb', '$MODEL')" >/dev/null

# ---- 4. vectorize ----------------------------------------------------------------------------------
step "embed.vectorize of a distributed table: each node embeds its shards' rows"
# vec_check TABLE: rows without a vector (with a source), rows with a vector but no source, rows
# whose vector is not embed() of their source, rows.
vec_check() { q1 "SELECT count(*) FILTER (WHERE emb IS NULL AND body IS NOT NULL) || ' missing, '
                        || count(*) FILTER (WHERE emb IS NOT NULL AND body IS NULL) || ' stale, '
                        || count(*) FILTER (WHERE emb::text <> embed('$MODEL', body)::vector($DIM)::text) || ' wrong, of '
                        || count(*) FROM $1"; }
wait_vec() { expect_eq "vectorize_wait($1)" t "$(q1 "SELECT embed.vectorize_wait('$1', 'emb', '60 s')")"; }
q <<SQL >/dev/null
SET client_min_messages = warning;
CREATE TABLE av (id bigint PRIMARY KEY, body text, emb vector($DIM));
SELECT create_distributed_table('av', 'id', shard_count := 8);
INSERT INTO av (id, body) SELECT id, body FROM single WHERE id <= 100;
SQL
expect_eq "vectorize queues the rows without a vector, on the workers" 100 "$(q1 "SELECT embed.vectorize('av', 'body', 'emb', '$MODEL')")"
expect_eq "each worker has the vectorizer's copy" "1 1" \
    "$(on1 "$W1" "SELECT count(*) FROM embed.vectorizers") $(on1 "$W2" "SELECT count(*) FROM embed.vectorizers")"
wait_vec av
expect_eq "after vectorize" "0 missing, 0 stale, 0 wrong, of 100" "$(vec_check av)"
q <<SQL >/dev/null
INSERT INTO av (id, body) SELECT id, body FROM single WHERE id > 100 AND id <= 150;
UPDATE av SET body = 'changed ' || id::text WHERE id % 7 = 0;
UPDATE av SET body = NULL WHERE id % 11 = 0;
UPDATE av SET emb = NULL WHERE id % 13 = 0;
DELETE FROM av WHERE id % 17 = 0;
SQL
wait_vec av
expect_eq "after INSERT, UPDATE (source, NULL source, vector cleared), DELETE" "0 missing, 0 stale, 0 wrong, of 142" "$(vec_check av)"
q -c "ALTER TABLE av RENAME COLUMN body TO content" -c "INSERT INTO av (id, content) VALUES (1001, 'after the rename')" >/dev/null
expect_eq "vectorize_wait after RENAME COLUMN" t "$(q1 "SELECT embed.vectorize_wait('av', 'emb', '60 s')")"
q -c "ALTER TABLE av RENAME COLUMN content TO body" >/dev/null
expect_eq "after RENAME COLUMN (and back)" "0 missing, 0 stale, 0 wrong, of 143" "$(vec_check av)"
# A shard moved to the other worker: Citus carries the trigger; rows written after the move are
# queued and embedded there.
q -c "SELECT citus_move_shard_placement(s.shardid, '127.0.0.1', s.nodeport, '127.0.0.1', CASE s.nodeport WHEN $W1 THEN $W2 ELSE $W1 END, shard_transfer_mode := 'block_writes')
        FROM citus_shards s WHERE s.table_name = 'av'::regclass ORDER BY s.shardid LIMIT 2" >/dev/null
q -c "INSERT INTO av (id, body) SELECT id, body FROM single WHERE id > 150 AND id <= 250" \
  -c "UPDATE av SET body = 'changed after the move ' || id::text WHERE id % 5 = 0" >/dev/null
wait_vec av
expect_eq "after two shards moved, then INSERT and UPDATE" "0 missing, 0 stale, 0 wrong, of 243" "$(vec_check av)"
expect_eq "errors on the workers" "0 0" \
    "$(on1 "$W1" "SELECT count(*) FROM embed.vectorize_errors") $(on1 "$W2" "SELECT count(*) FROM embed.vectorize_errors")"
q -c "SELECT embed.unvectorize('av', 'emb')" >/dev/null
expect_eq "unvectorize: the workers' copies and the queue function gone" "0 0 0 0" \
    "$(on1 "$W1" "SELECT count(*) FROM embed.vectorizers") $(on1 "$W2" "SELECT count(*) FROM embed.vectorizers") $(on1 "$W1" "SELECT count(*) FROM pg_proc WHERE proname LIKE 'pg\_embed\_vectorize\_%'") $(on1 "$W2" "SELECT count(*) FROM pg_proc WHERE proname LIKE 'pg\_embed\_vectorize\_%'")"
q -c "INSERT INTO av (id, body) VALUES (2001, 'after unvectorize')" >/dev/null
expect_eq "a row written after unvectorize is left alone" 1 "$(q1 "SELECT count(*) FROM av WHERE emb IS NULL AND body IS NOT NULL")"
q -c "SELECT embed.vectorize('av', 'body', 'emb', '$MODEL')" >/dev/null
wait_vec av
q -c "DROP TABLE av" >/dev/null
expect_eq "DROP TABLE of a vectorized distributed table: no vectorizer left on any node" "0 0 0" \
    "$(q1 "SELECT count(*) FROM embed.vectorizers") $(on1 "$W1" "SELECT count(*) FROM embed.vectorizers") $(on1 "$W2" "SELECT count(*) FROM embed.vectorizers")"
expect_error "vectorize of a reference table" 0A000 "SELECT embed.vectorize('ref', 'body', 'emb', 'minilm')"
expect_error "vectorize of a distributed table on a worker" 0A000 "SELECT embed.vectorize('docs', 'body', 'emb', 'minilm')" "$W1"
# A plain vectorized table distributed afterwards: Citus refuses it (a table with triggers)
# unless told otherwise; then its rows are refused (55000) as they are copied into the shards,
# and an empty one takes no write until embed.vectorize is called again on the coordinator,
# which gives every node its copy: never a row silently left unqueued.
q <<'SQL' >/dev/null
CREATE TABLE vec (id bigint PRIMARY KEY, body text, emb vector(384));
SELECT embed.vectorize('vec', 'body', 'emb', 'minilm');
INSERT INTO vec VALUES (1, 'while a plain table');
SQL
expect_error "create_distributed_table of a vectorized table" XX000 "SELECT create_distributed_table('vec', 'id')"
# expect_unqueued WHAT SQL: refused by the queue trigger of a node without the vectorizer's
# copy (55000 there; Citus passes on an error of its COPY into the shards as XX000).
expect_unqueued() {
    local out
    out="$(q -v VERBOSITY=verbose -c "SET citus.enable_unsafe_triggers = on" -c "$2" 2>&1 || true)"
    grep -Eq "ERROR:  (55000|XX000): cannot queue the rows of vec_[0-9]+: its vectorizer \([0-9]+\) has no copy on this node" <<<"$out" \
        || fail "$1: $out"
    pass "$1: $(grep -Eo '(55000|XX000): cannot queue.*' <<<"$out" | head -n 1)"
}
expect_unqueued "... with citus.enable_unsafe_triggers: its rows, copied into the shards, are refused" \
    "SELECT create_distributed_table('vec', 'id', shard_count := 4)"
q -c "INSERT INTO vec VALUES (2, 'still a plain table')" >/dev/null
wait_vec vec
expect_eq "the table, still plain, still vectorized" "0 missing, 0 stale, 0 wrong, of 2" "$(vec_check vec)"
q -c "DELETE FROM vec" -c "SET client_min_messages = warning" -c "SET citus.enable_unsafe_triggers = on" \
  -c "SELECT create_distributed_table('vec', 'id', shard_count := 4)" >/dev/null
expect_unqueued "distributed empty: a write before embed.vectorize again" "INSERT INTO vec SELECT g, 'refused ' || g::text FROM generate_series(1, 40) g"
expect_unqueued "... also one row" "INSERT INTO vec VALUES (1, 'refused')"
expect_eq "embed.vectorize again (no rows yet)" 0 "$(q1 "SELECT embed.vectorize('vec', 'body', 'emb', 'minilm')")"
q -c "INSERT INTO vec SELECT g, 'accepted ' || g::text FROM generate_series(1, 40) g" >/dev/null
wait_vec vec
expect_eq "the distributed table, vectorized again" "0 missing, 0 stale, 0 wrong, of 40" "$(vec_check vec)"
# A worker added later: Citus gives it the table, its trigger and the function, not the
# vectorizer's copy. A shard moved onto it refuses writes (55000) until embed.vectorize again.
"$CITUS" add 3 >/dev/null
shard="$(q1 "SELECT min(shardid) FROM citus_shards WHERE table_name = 'vec'::regclass")"
q -c "SELECT replicate_reference_tables('block_writes')" \
  -c "SELECT citus_move_shard_placement($shard, '127.0.0.1', (SELECT nodeport FROM citus_shards WHERE shardid = $shard), '127.0.0.1', $W3, shard_transfer_mode := 'block_writes')" >/dev/null
moved="$(q1 "SELECT min(g) FROM generate_series(1, 40) g WHERE get_shard_id_for_distribution_column('vec', g) = $shard")"
expect_unqueued "a write to a shard on the added worker before embed.vectorize again" "UPDATE vec SET body = 'moved' WHERE id = $moved"
q -c "SELECT embed.vectorize('vec', 'body', 'emb', 'minilm')" -c "UPDATE vec SET body = 'moved' WHERE id = $moved" >/dev/null
wait_vec vec
expect_eq "after embed.vectorize again, the added worker embeds its shard's rows" "0 missing, 0 stale, 0 wrong, of 40" "$(vec_check vec)"
q -c "DROP TABLE vec" -c "SELECT citus_drain_node('127.0.0.1', $W3, shard_transfer_mode := 'block_writes')" \
  -c "SELECT citus_remove_node('127.0.0.1', $W3)" >/dev/null
PG_EMBED_PORT="$W3" PGDATA="$REPO/.pg/citus-3" PG_LOG="$REPO/.pg/log/citus-3.log" "$REPO/scripts/server.sh" stop >/dev/null

# A distributed partitioned table: vectorize covers its partitions' shards, including a row
# written straight into a partition.
q <<SQL >/dev/null
SET client_min_messages = warning;
CREATE TABLE vp (id bigint PRIMARY KEY, body text, emb vector($DIM)) PARTITION BY HASH (id);
CREATE TABLE vp_0 PARTITION OF vp FOR VALUES WITH (MODULUS 2, REMAINDER 0);
CREATE TABLE vp_1 PARTITION OF vp FOR VALUES WITH (MODULUS 2, REMAINDER 1);
SELECT create_distributed_table('vp', 'id', shard_count := 4);
INSERT INTO vp (id, body) SELECT id, body FROM single WHERE id <= 20;
SQL
expect_eq "vectorize of a distributed partitioned table queues its rows" 20 "$(q1 "SELECT embed.vectorize('vp', 'body', 'emb', '$MODEL')")"
q -c "INSERT INTO vp (id, body) SELECT id, body FROM single WHERE id BETWEEN 21 AND 40" \
  -c "INSERT INTO vp_1 (id, body) SELECT id, 'straight into a partition ' || id::text FROM single WHERE id BETWEEN 41 AND 60 AND satisfies_hash_partition('vp'::regclass, 2, 1, id)" \
  -c "UPDATE vp SET body = 'changed ' || id::text WHERE id % 3 = 0" >/dev/null
wait_vec vp
expect_eq "rows written straight into a partition" t "$(q1 "SELECT count(*) > 0 FROM vp_1 WHERE body LIKE 'straight%'")"
expect_eq "the distributed partitioned table" "0 missing, 0 stale, 0 wrong, of $(q1 "SELECT count(*) FROM vp")" "$(vec_check vp)"
q -c "DROP TABLE vp" >/dev/null
expect_eq "DROP TABLE of it: no vectorizer left on any node" "0 0 0" \
    "$(q1 "SELECT count(*) FROM embed.vectorizers") $(on1 "$W1" "SELECT count(*) FROM embed.vectorizers") $(on1 "$W2" "SELECT count(*) FROM embed.vectorizers")"

# ---- 5. triggers --------------------------------------------------------------------------------------
step "embed.embed_trigger on a distributed table"
q <<SQL >/dev/null
SET client_min_messages = warning;
SET citus.enable_unsafe_triggers = on;
CREATE TABLE trig_row (id bigint PRIMARY KEY, body text, emb vector($DIM));
CREATE TRIGGER embed_row BEFORE INSERT OR UPDATE OF body ON trig_row
    FOR EACH ROW EXECUTE FUNCTION embed.embed_trigger('$MODEL', 'body', 'emb');
SELECT create_distributed_table('trig_row', 'id', shard_count := 8);
CREATE TABLE trig_stmt (id bigint PRIMARY KEY, body text, emb vector($DIM));
SELECT create_distributed_table('trig_stmt', 'id', shard_count := 8);
CREATE TRIGGER embed_stmt AFTER INSERT ON trig_stmt REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION embed.embed_trigger('$MODEL', 'body', 'emb');
INSERT INTO trig_row (id, body) SELECT id, body FROM single WHERE id <= 200;
INSERT INTO trig_stmt (id, body) SELECT id, body FROM single WHERE id <= 200;
SQL
q -c "UPDATE single SET emb = embed('$MODEL', body)::vector($DIM)" >/dev/null
expect_eq "row trigger against the single node" "0 NULL, 0 differ, of 200" "$(same_as_single trig_row)"
expect_eq "statement trigger against the single node" "0 NULL, 0 differ, of 200" "$(same_as_single trig_stmt)"

# ---- 6. search ---------------------------------------------------------------------------------------
step "similarity search on the distributed table"
search() { q1 "SELECT string_agg(id::text, ',') FROM (SELECT id FROM $1 ORDER BY emb <=> embed('$MODEL', 'how do I cook rice')::vector($DIM), id LIMIT 10) s"; }
expect_eq "top 10 against an exact scan of the single node" "$(search single)" "$(search docs)"
# Where the query vector is computed: embed() calls on coordinator/worker 1/worker 2.
shape() { # shape WHAT SQL
    reset_calls
    q -c "$2" >/dev/null
    pass "query vector of $1: embed() calls $(calls) (coordinator/worker/worker)"
}
Q="embed('$MODEL', 'how do I cook rice')::vector($DIM)"
shape "ORDER BY emb <=> embed(...) LIMIT 10 (all shards)" "SELECT id FROM docs ORDER BY emb <=> $Q LIMIT 10"
expect_eq "  the coordinator computes it once" "1/0/0" "$(calls)"
shape "a prepared statement, embed(\$1) (all shards)" \
    "PREPARE s1(text) AS SELECT id FROM docs ORDER BY emb <=> embed('$MODEL', \$1)::vector($DIM) LIMIT 10; EXECUTE s1('how do I cook rice')"
shape "ORDER BY emb <=> (SELECT embed(...)) (all shards)" "SELECT id FROM docs ORDER BY emb <=> (SELECT $Q) LIMIT 10"
shape "WHERE id = 7 (one shard)" "SELECT id FROM docs WHERE id = 7 ORDER BY emb <=> $Q LIMIT 10"
shape "a prepared statement, WHERE id = 7 (one shard)" \
    "PREPARE s2(text) AS SELECT id FROM docs WHERE id = 7 ORDER BY emb <=> embed('$MODEL', \$1)::vector($DIM) LIMIT 10; EXECUTE s2('how do I cook rice')"

# ---- 7. preload ------------------------------------------------------------------------------------
step "pg_embed.preload and Citus's own connections"
on "$W1" -c "ALTER SYSTEM SET pg_embed.preload = 'minilm'" -c "SELECT pg_reload_conf()" >/dev/null
sleep 0.3
loaded_as() { PGAPPNAME="$1" on1 "$W1" "SELECT count(*) FROM embed.loaded_models()"; }
expect_eq "a client connection to a worker preloads" 1 "$(loaded_as psql)"
expect_eq "a connection named as Citus's own (citus_internal gpid=...) does not" 0 "$(loaded_as "citus_internal gpid=10000000001")"
expect_eq "... nor citus_run_command gpid=..." 0 "$(loaded_as "citus_run_command gpid=10000000001")"
for preload in on off; do
    [ "$preload" = off ] && on "$W1" -c "ALTER SYSTEM RESET pg_embed.preload" -c "SELECT pg_reload_conf()" >/dev/null
    t0=$EPOCHREALTIME
    q -c "SELECT count(*) FROM docs" >/dev/null
    pass "a 32-shard count(*), preload $preload on a worker: $(ms_between "$t0" "$EPOCHREALTIME") ms"
done
# ---- 8. randomized --------------------------------------------------------------------------------
first="${CITUS_FIRST_SEED:-1}"; seeds="${CITUS_SEEDS:-4}"; steps="${CITUS_STEPS:-24}"
step "randomized: registrations with faults, DML, backfill cut short, restarts; seeds $first..$((first + seeds - 1)), $steps steps each"
CITUS_PORT="$PG_EMBED_PORT" CITUS_EMPTY_DIR="$empty" "$VENV/bin/python" "$REPO/tests/citus/citus_random.py" \
    --first "$first" --seeds "$seeds" --steps "$steps" || fail "tests/citus/citus_random.py: a seed failed (its replay command is above)"
found="$(crashes)"
[ -z "$found" ] || fail "a process of a node died by a signal (the nodes' logs, above):
$found"
pass "no process of any node died by a signal (the nodes' logs)"
step "Citus tests: all passed in $(elapsed_since "$t_all")"
