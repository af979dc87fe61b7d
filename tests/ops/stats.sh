#!/usr/bin/env bash
# Server-wide statistics (embed.stat_models, embed.stat_reset, pg_embed.log_min_duration)
# with pg_embed in shared_preload_libraries, as a DBA runs it. The test restarts the server
# with it preloaded (and without it at the end), works in a database of its own with a model
# of its own ("sm", all-MiniLM-L6-v2), and checks exact counts against what it ran:
#   1. 8 concurrent sessions, each 5 single calls and one array call of 3 inputs (one NULL);
#   2. a vectorize worker embedding 20 rows (the worker columns; the client columns unmoved);
#   3. an ERROR (an image given to a text model), a truncated input, a statement_timeout;
#   4. pg_embed.log_min_duration: a line per slow call with its outcome, never the input;
#   5. embed.stat_reset (refused to a plain role) and stats_reset;
#   6. the postgres_exporter queries file, run against the server (and a real
#      postgres_exporter scraped when Debian's is installed);
#   then tests/ops/stats_random.py (STATS_SEEDS seeds from STATS_FIRST_SEED, STATS_STEPS
#   steps): random calls, faults, DDL, worker rows and resets from several sessions, checked
#   against an oracle;
#   7. a clean restart keeps the counts; a crash (kill -9 of a backend) resets them.
# Token counts are known without pg_embed: "hello world" is [CLS] hello world [SEP] (4),
# "the cat sat" 5, "a" 3 in BERT's uncased WordPiece vocabulary, which MiniLM uses.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

step "stats: embed.stat_models with pg_embed preloaded: concurrency, a worker, errors, reset, restarts"
DB=ops_stats
out="$(mktemp -d)"
chmod 755 "$out"
restart() {
    "$REPO/scripts/server.sh" stop >/dev/null
    "$REPO/scripts/server.sh" start >/dev/null
    wait_for_server
}
cleanup() {
    q -d postgres -c "ALTER SYSTEM RESET shared_preload_libraries" >/dev/null 2>&1 || true
    restart || true
    rm -rf "$out"
}
trap cleanup EXIT
qs() { q -d "$DB" "$@"; }
qs1() { qs -At -c "SET stats_fetch_consistency = none" -c "$1"; }
# stat COLUMNS: the columns of model sm's row, '|'-separated.
stat() { qs1 "SELECT $1 FROM embed.stat_models WHERE datname = '$DB' AND model = 'sm'"; }

# make test-pg15 runs this test alone: the model of the other database is registered here.
q -c "SET client_min_messages = warning" -c "CREATE EXTENSION IF NOT EXISTS pg_embed" \
  -c "SELECT embed.register_model('$MODEL', 'all-MiniLM-L6-v2') WHERE NOT EXISTS (SELECT FROM embed.models WHERE name = '$MODEL')" >/dev/null
q -d postgres -c "ALTER SYSTEM SET shared_preload_libraries = 'pg_embed'" >/dev/null
restart
q -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB" >/dev/null
qs -c "SET client_min_messages = warning" -c "CREATE EXTENSION pg_embed" \
   -c "SELECT embed.register_model('sm', 'all-MiniLM-L6-v2')" >/dev/null
expect_eq "scope with pg_embed preloaded" server "$(stat scope)"
expect_eq "register_model's load is counted" "1|0|t|t" "$(stat "loads, calls, load_ms > 0, shared_bytes > 0")"
expect_eq "embed.stat_reset('sm') resets its one row" 1 "$(qs1 "SELECT embed.stat_reset('sm')")"

# ---- 1. 8 concurrent sessions ------------------------------------------------------------------
jobs=()
for i in $(seq 1 8); do
    qs -At >"$out/s$i.out" 2>&1 <<'SQL' &
SELECT pg_sleep(0.2);
SELECT array_length(embed('sm', 'hello world'), 1);
SELECT array_length(embed('sm', 'hello world'), 1);
SELECT array_length(embed('sm', 'hello world'), 1);
SELECT array_length(embed('sm', 'hello world'), 1);
SELECT array_length(embed('sm', 'hello world'), 1);
SELECT count(e) FROM embed('sm', ARRAY['the cat sat', NULL, 'a']) AS e;
SQL
    jobs+=($!)
done
for j in "${jobs[@]}"; do wait "$j"; done
for i in $(seq 1 8); do
    [ "$(grep -c '^384$' "$out/s$i.out")" = 5 ] || fail "session $i: $(cat "$out/s$i.out")"
done
# Each session flushed its counts when it ended.
expect_eq "8 sessions x (5 + 1) calls, 7 inputs, 28 tokens: calls|inputs|tokens|errors|cancels|truncated" \
    "48|56|224|0|0|0" "$(stat "calls, inputs, tokens, errors, cancels, truncated_inputs")"
expect_eq "client and worker split: client_calls|client_inputs|worker_calls" "48|56|0" \
    "$(stat "client_calls, client_inputs, worker_calls")"
expect_eq "mean = total / calls, max <= total" t \
    "$(stat "abs(mean_ms - total_ms / calls) < 1e-9 AND max_ms <= total_ms AND max_ms > 0 AND last_call > now() - interval '5 min'")"
expect_eq "every session loaded the model once (from the shared file)" "8|t" "$(stat "loads, shared_bytes > 0")"

# ---- 2. a vectorize worker ---------------------------------------------------------------------
qs -c "SET client_min_messages = warning" \
   -c "CREATE TABLE docs (id int PRIMARY KEY, body text, emb real[])" \
   -c "SELECT embed.vectorize('docs', 'body', 'emb', 'sm', 8)" \
   -c "INSERT INTO docs SELECT g, 'hello world' FROM generate_series(1, 20) g" >/dev/null
expect_eq "the worker embedded the 20 rows" t "$(qs1 "SELECT embed.vectorize_wait('docs', 'emb', '120 seconds')")"
expect_eq "all 20 rows have a vector" 20 "$(qs1 "SELECT count(*) FROM docs WHERE array_length(emb, 1) = 384")"
wait_until "SELECT worker_inputs = 20 FROM embed.stat_models WHERE datname = '$DB' AND model = 'sm'" 30
sleep 1.5
expect_eq "worker_inputs|worker_tokens (20 x 4), once each" "20|80" "$(stat "worker_inputs, worker_tokens")"
expect_eq "the worker's calls are in calls and not in client_calls" t \
    "$(stat "worker_calls >= 3 AND calls = 48 + worker_calls AND client_calls = 48 AND inputs = 76 AND worker_ms > 0 AND client_ms > 0")"

# ---- 3. errors, truncation, a cancel -----------------------------------------------------------
expect_eq "reset before the error checks" 1 "$(qs1 "SELECT embed.stat_reset('sm')")"
qs -c "SELECT embed_image('sm', '\\x89504e47'::bytea)" >/dev/null 2>&1 && fail "embed_image on a text model did not fail"
qs -At -c "SELECT array_length(embed('sm', repeat('word ', 300)), 1)" >/dev/null
expect_eq "an ERROR and a truncated input (256 tokens): calls|errors|cancels|inputs|truncated|tokens" \
    "2|1|0|1|1|256" "$(stat "calls, errors, cancels, inputs, truncated_inputs, tokens")"
# The session loads the model first (a call), so that the timeout lands in the next call.
cancel_out="$(qs -c "SELECT count(*) FROM embed('sm', ARRAY['hello world'])" -c "SET statement_timeout = '300ms'" \
    -c "SELECT count(*) FROM embed('sm', (SELECT array_agg(repeat('word ', 300)) FROM generate_series(1, 400)))" 2>&1 || true)"
grep -q "canceling statement due to statement timeout" <<<"$cancel_out" || fail "no timeout: $cancel_out"
expect_eq "the statement_timeout counted as a cancel, not an error: calls|errors|cancels" \
    "4|1|1" "$(stat "calls, errors, cancels")"

# ---- 4. pg_embed.log_min_duration ----------------------------------------------------------------
marker="zebracorn$$"
lines_before="$(wc -l <"$PG_LOG")"
qs -At -c "SET pg_embed.log_min_duration = 0" -c "SELECT array_length(embed('sm', '$marker says hi'), 1)" \
    -c "SET pg_embed.log_min_duration = '1h'" -c "SELECT array_length(embed('sm', '$marker again'), 1)" >/dev/null
qs -c "SET pg_embed.log_min_duration = 0" -c "SELECT embed_image('sm', '\\x00'::bytea)" >/dev/null 2>&1 || true
sleep 0.5
new_lines="$(tail -n +"$((lines_before + 1))" "$PG_LOG")"
expect_eq "log lines of the two calls at or over 0 ms (not of the one under 1 h)" 2 \
    "$(grep -c 'pg_embed: duration: [0-9.]* ms  model: sm' <<<"$new_lines" || true)"
grep -q 'model: sm  function: embed  inputs: 1  tokens: [0-9]*  truncated: 0  chunked: 0  outcome: ok' <<<"$new_lines" \
    || fail "no ok line: $new_lines"
grep -q 'model: sm  function: embed_image  inputs: 0  tokens: 0  truncated: 0  chunked: 0  outcome: error' <<<"$new_lines" \
    || fail "no error line: $new_lines"
pass "each line names the model, the function, the counts and the outcome"
if grep 'pg_embed: duration' <<<"$new_lines" | grep -q "$marker"; then fail "the input text was logged"; fi
pass "the input text is not in the pg_embed log lines"
expect_eq "a plain role may not set pg_embed.log_min_duration" 42501 "$(qs -At -c "
    DO \$\$ BEGIN CREATE ROLE ops_stats_plain; EXCEPTION WHEN duplicate_object THEN NULL; END \$\$;
    SET ROLE ops_stats_plain;
    DO \$\$ BEGIN SET pg_embed.log_min_duration = 0; EXCEPTION WHEN OTHERS THEN RAISE NOTICE '%', SQLSTATE; END \$\$" 2>&1 \
    | sed -n 's/.*NOTICE:  //p')"

# ---- 5. reset ------------------------------------------------------------------------------------
expect_eq "a plain role may not reset" 42501 "$(qs -At -c "SET ROLE ops_stats_plain" \
    -c "DO \$\$ BEGIN PERFORM embed.stat_reset(); EXCEPTION WHEN OTHERS THEN RAISE NOTICE '%', SQLSTATE; END \$\$" 2>&1 \
    | sed -n 's/.*NOTICE:  //p')"
q -At -c "SELECT array_length(embed('$MODEL', 'hello world'), 1)" >/dev/null
expect_eq "the superuser sees both databases' rows" 2 "$(qs1 "SELECT count(DISTINCT datname) FROM embed.stat_models")"
expect_eq "a plain role sees only its own database's rows" "1|$DB" \
    "$(qs -At -c "SET ROLE ops_stats_plain" -c "SELECT count(*), string_agg(DISTINCT datname, ',') FROM embed.stat_models")"
expect_eq "embed.stat_reset() resets the database's rows" 1 "$(qs1 "SELECT embed.stat_reset()")"
expect_eq "after the reset: calls|errors|cancels|tokens|last_call|stats_reset recent" "0|0|0|0||t" \
    "$(stat "calls, errors, cancels, tokens, last_call, stats_reset > now() - interval '1 min'")"

# ---- 6. the postgres_exporter queries file ------------------------------------------------------
for i in 1 2 3; do qs -At -c "SELECT array_length(embed('sm', 'hello world'), 1)" >/dev/null; done
expect_eq "3 calls since the reset" "3|12" "$(stat "calls, tokens")"
"$VENV/bin/python" "$REPO/tests/ops/stats_exporter.py" --yaml "$REPO/docker/postgres_exporter/pg_embed.yaml" \
    --port "$PG_EMBED_PORT" --user "$PG_SUPERUSER" --dbname postgres --datname "$DB" --model sm \
    --expect calls_total=3 inputs_total=3 tokens_total=12 errors_total=0 cancels_total=0 worker_calls_total=0

# ---- randomized: operation sequences from several sessions against an oracle ------------------
qs -c "SET client_min_messages = warning" -c "SELECT embed.register_model('sm_rand', 'all-MiniLM-L6-v2')" >/dev/null
"$VENV/bin/python" "$REPO/tests/ops/stats_random.py" \
    --dsn "host=127.0.0.1 port=$PG_EMBED_PORT user=$PG_SUPERUSER dbname=$DB" --model sm_rand \
    --source all-MiniLM-L6-v2 --first "${STATS_FIRST_SEED:-1}" --seeds "${STATS_SEEDS:-4}" --steps "${STATS_STEPS:-60}" \
    || fail "stats_random: a seed failed (its replay command is above)"

# ---- 7. restarts -----------------------------------------------------------------------------
restart
expect_eq "a clean restart keeps the counts: calls|tokens|loads|scope" "3|12|3|server" "$(stat "calls, tokens, loads, scope")"
start_session "$out/victim" <<SQL
SELECT pg_sleep(60);
SQL
kill -9 "$SESSION_PID"
wait "$SESSION_JOB" || true
sleep 0.5
wait_for_server
expect_eq "a crash restart resets them (as PostgreSQL discards its statistics in crash recovery)" 0 \
    "$(qs1 "SELECT count(*) FROM embed.stat_models WHERE model = 'sm'")"
qs -c "SELECT embed.unvectorize('docs', 'emb')" >/dev/null
q -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE $DB WITH (FORCE)" -c "DROP ROLE IF EXISTS ops_stats_plain" >/dev/null
pass "stats: done"
