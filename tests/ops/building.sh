#!/usr/bin/env bash
# Building a model's weights in bounded memory, and admission of concurrent builds. A
# BERT-shaped model of 430 MB (float32, seeded random weights written by
# tests/ops/seeded_model.py: CI has no torch) is registered:
#   1. alone: the registering backend's private memory (RssAnon), sampled every 20 ms from
#      outside, stays within the build's admitted working memory, and once register_model
#      has returned it holds no copy of the weights (they are the shared file's pages);
#   2. by two sessions at once (float32 and bfloat16: two files) with
#      pg_embed.max_building_memory below what two builds need: both succeed, in turn (the
#      ledger of builds never holds two at once), no backend dies, the files are whole;
#   3. while another build holds the budget (a process holding a ledger entry): with
#      pg_embed.building_wait = 0 the registration fails at once with SQLSTATE 53200 and a
#      HINT; with a wait, it succeeds once the other build ends;
#   4. by a vectorize worker that must build the weights while the budget is held: its batch
#      fails with 53200, the rows stay queued (nothing lost), and once the budget is free every
#      row gets its vector;
#   5. cancelled mid-build: 57014, its file removed and its memory freed at once;
#   6. killed with kill -9 mid-build: the server recovers, the half-written file is never
#      used, embed.cache_cleanup() removes it, and registering again gives the same vectors.
# The server log must show only the killed backend terminated by a signal.
#   tests/ops/building.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

step "building: bounded memory, admission of concurrent builds, kill -9 mid-build"
log_before="$(wc -l <"$PG_LOG")"
work="$(ops_workdir)"
holder=""
cleanup() {
    [ -n "$holder" ] && kill "$holder" 2>/dev/null || true
    q -c "ALTER SYSTEM RESET pg_embed.max_building_memory" -c "ALTER SYSTEM RESET pg_embed.building_wait" \
        -c "SELECT pg_reload_conf()" >/dev/null 2>&1 || true
    rm -rf "$work" "$MODEL_DIR/ops-seeded-a" "$MODEL_DIR/ops-seeded-c"
}
trap cleanup EXIT

python3 "$REPO/tests/ops/seeded_model.py" "$MODEL_DIR/ops-seeded-a" 1 1024 6 "$MODEL_DIR/all-MiniLM-L6-v2"
python3 "$REPO/tests/ops/seeded_model.py" "$MODEL_DIR/ops-seeded-c" 2 768 4 "$MODEL_DIR/all-MiniLM-L6-v2"
ensure_pg_user_access "$MODEL_DIR" "$MODEL_DIR/ops-seeded-a"
ensure_pg_user_access "$MODEL_DIR" "$MODEL_DIR/ops-seeded-c"
pass "seeded models: $(du -sh "$MODEL_DIR/ops-seeded-a" | cut -f1), $(du -sh "$MODEL_DIR/ops-seeded-c" | cut -f1)"
LEDGER="$PGDATA/pg_embed_building"
CACHE="$PGDATA/pg_embed_cache"
q -c "SET client_min_messages = warning" \
  -c "SELECT embed.drop_model(name) FROM embed.models WHERE name LIKE 'ops_big%'" \
  -c "SELECT count(*) FROM embed.cache_cleanup()" >/dev/null

# One build's need, as admission computes it: twice the largest tensor (the word
# embeddings, 30,522 x 1,024 float32 = 119 MB) and 64 MB.
need_mb=$(( (2 * 30522 * 1024 * 4 + (64 << 20)) >> 20 ))

# hold_budget PID: a process holding a ledger entry of the whole budget, as a build in
# another backend does (its pid in $holder).
hold_budget() {
    python3 - "$LEDGER" "$budget_mb" "$1" >"$work/holder.out" 2>&1 <<'PY' &
import fcntl, json, os, sys, time
ledger, mb, pid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tmp, path = os.path.join(ledger, f"{pid}-0.tmp"), os.path.join(ledger, f"{pid}-0.build")
f = open(tmp, "w")
fcntl.flock(f, fcntl.LOCK_EX)
f.write(json.dumps({"pid": pid, "bytes": mb << 20, "what": "model \"elsewhere\""}))
f.flush()
os.rename(tmp, path)
print("holding", flush=True)
time.sleep(600)
PY
    holder=$!
    for _ in $(seq 1 100); do grep -q holding "$work/holder.out" && break; sleep 0.05; done
    grep -q holding "$work/holder.out" || fail "the budget holder did not start: $(cat "$work/holder.out")"
}

# ---- 1. alone: the registering backend's private memory -----------------------------------
start_session "$work/one" <<'SQL'
SELECT 'anon_before ' || (regexp_match(pg_read_file('/proc/self/status'), 'RssAnon:\s+(\d+) kB'))[1];
SELECT 'registered ' || (embed.register_model('ops_big_f32', 'ops-seeded-a') ->> 'dim');
SELECT 'anon_after ' || (regexp_match(pg_read_file('/proc/self/status'), 'RssAnon:\s+(\d+) kB'))[1];
SELECT 'dims ' || array_length(embed('ops_big_f32', 'one sentence'), 1);
SQL
peak=0
while kill -0 "$SESSION_JOB" 2>/dev/null; do
    kb="$(rss_anon_kb "$SESSION_PID" 2>/dev/null || echo 0)"
    [ "${kb:-0}" -gt "$peak" ] && peak="$kb"
    sleep 0.02
done
grep -q '^dims 1024' "$work/one" || fail "registration: $(cat "$work/one")"
before="$(sed -n 's/^anon_before //p' "$work/one")"
after="$(sed -n 's/^anon_after //p' "$work/one")"
growth_mb=$(( (peak - before) / 1024 ))
after_mb=$(( (after - before) / 1024 ))
weights_mb=$(( $(stat -c %s "$MODEL_DIR/ops-seeded-a/model.safetensors") >> 20 ))
info "registering backend: RssAnon $((before / 1024)) MB before, peak +$growth_mb MB, +$after_mb MB after (weights $weights_mb MB; admitted need $need_mb MB)"
[ "$growth_mb" -le "$need_mb" ] || fail "the build's private memory peaked at +$growth_mb MB, more than its admitted $need_mb MB"
pass "private memory while building: peak +$growth_mb MB <= the admitted $need_mb MB (the weights are $weights_mb MB)"
[ "$after_mb" -le 64 ] || fail "the registering backend keeps +$after_mb MB after register_model"
pass "private memory after register_model: +$after_mb MB <= 64 MB"

# ---- 2. two sessions at once under a budget of one build ------------------------------------
budget_mb=$(( need_mb * 3 / 2 ))
q -c "ALTER SYSTEM SET pg_embed.max_building_memory = '${budget_mb}MB'" -c "SELECT pg_reload_conf()" >/dev/null
sleep 0.3
start_session "$work/s1" <<'SQL'
SELECT 'done ' || (embed.register_model('ops_big_a', 'ops-seeded-a', '{"max_length": 200}') ->> 'dim');
SQL
job1=$SESSION_JOB
start_session "$work/s2" <<'SQL'
SELECT 'done ' || (embed.register_model('ops_big_b', 'ops-seeded-a', '{"precision": "bfloat16"}') ->> 'dim');
SQL
job2=$SESSION_JOB
most=0
while kill -0 "$job1" 2>/dev/null || kill -0 "$job2" 2>/dev/null; do
    n="$(find "$LEDGER" -name '*.build' 2>/dev/null | wc -l)"
    [ "$n" -gt "$most" ] && most="$n"
    sleep 0.01
done
grep -q '^done' "$work/s1" || fail "session 1: $(cat "$work/s1")"
grep -q '^done' "$work/s2" || fail "session 2: $(cat "$work/s2")"
expect_eq "builds in progress at once under a budget of ${budget_mb} MB (one build needs $need_mb MB)" 1 "$most"
files="$(q1 "SELECT count(*) FROM embed.cache_files() WHERE model IN ('ops_big_a', 'ops_big_b') AND file LIKE '%.weights'")"
expect_eq "each registration's shared file is there" 2 "$files"
expect_eq "both registrations give vectors" "1024 1024" \
    "$(q1 "SELECT array_length(embed('ops_big_a', 'x'), 1) || ' ' || array_length(embed('ops_big_b', 'x'), 1)")"

# ---- 3. the budget held by another build ----------------------------------------------------
hold_budget 999999
q -c "SET client_min_messages = warning" -c "SELECT embed.drop_model('ops_big_a')" -c "SELECT count(*) FROM embed.cache_cleanup()" >/dev/null
err="$(q -c "SET pg_embed.building_wait = 0" -c "\\set VERBOSITY verbose" \
    -c "SELECT embed.register_model('ops_big_a', 'ops-seeded-a', '{\"max_length\": 200}')" 2>&1 || true)"
grep -q "ERROR:  53200" <<<"$err" || fail "expected SQLSTATE 53200, got: $err"
grep -q 'held by 1 build(s) in progress: model "elsewhere"' <<<"$err" || fail "the message names the build in progress: $err"
grep -q "HINT:.*pg_embed.max_building_memory" <<<"$err" || fail "the HINT: $err"
pass "no room and no wait: $(grep -o 'ERROR:.*' <<<"$err" | head -1 | cut -c1-160)"
expect_eq "nothing registered or written by the refused registration" "0 0" \
    "$(q1 "SELECT (SELECT count(*) FROM embed.models WHERE name = 'ops_big_a') || ' ' || (SELECT count(*) FROM embed.cache_files() WHERE file LIKE '%.tmp.%')")"
start_session "$work/s3" <<'SQL'
SET pg_embed.building_wait = '60s';
SELECT 'done ' || (embed.register_model('ops_big_a', 'ops-seeded-a', '{"max_length": 200}') ->> 'dim');
SQL
sleep 1
kill -0 "$SESSION_JOB" 2>/dev/null || fail "the registration did not wait: $(cat "$work/s3")"
kill "$holder"; wait "$holder" 2>/dev/null || true; holder=""
wait "$SESSION_JOB"
grep -q '^done' "$work/s3" || fail "the waiting registration: $(cat "$work/s3")"
pass "with pg_embed.building_wait, the registration waited for the other build, then succeeded"

# ---- 4. a vectorize worker that must build while the budget is held -------------------------
q >/dev/null <<'SQL'
SET client_min_messages = warning;
SELECT embed.drop_model(name) FROM embed.models WHERE name = 'ops_big_c';
SELECT embed.register_model('ops_big_c', 'ops-seeded-c');
DROP TABLE IF EXISTS ops_building_docs;
CREATE TABLE ops_building_docs (id int PRIMARY KEY, body text, v real[]);
SQL
# The worker must build: the file of ops_big_c is removed (this session's mapping survives).
file="$(q1 "SELECT file FROM embed.cache_files() WHERE model = 'ops_big_c' AND file LIKE '%.weights'")"
[ -n "$file" ] || fail "no shared file of ops_big_c"
rm -f "$file"
hold_budget 999998
q -c "ALTER SYSTEM SET pg_embed.building_wait = '1s'" -c "SELECT pg_reload_conf()" >/dev/null
sleep 0.3
q >/dev/null <<'SQL'
SET client_min_messages = warning;
INSERT INTO ops_building_docs SELECT i, 'document number ' || i FROM generate_series(1, 50) AS i;
SELECT embed.vectorize('ops_building_docs', 'body', 'v', 'ops_big_c');
SQL
wait_until "SELECT EXISTS (SELECT FROM embed.vectorize_errors WHERE model = 'ops_big_c' AND sqlstate = '53200')" 120
expect_eq "rows still queued while the worker cannot build (none lost)" 50 \
    "$(q1 "SELECT count(*) FROM embed.vectorize_queue q JOIN embed.vectorizers v ON v.id = q.vectorizer WHERE v.model = 'ops_big_c'")"
expect_eq "no vector written meanwhile" 0 "$(q1 "SELECT count(v) FROM ops_building_docs")"
kill "$holder"; wait "$holder" 2>/dev/null || true; holder=""
wait_until "SELECT count(v) = 50 FROM ops_building_docs" 180
expect_eq "every row's vector, once the budget is free" 0 \
    "$(q1 "SELECT count(*) FROM ops_building_docs WHERE NOT (SELECT max(abs(a - b)) <= 1e-5 FROM unnest(v, embed('ops_big_c', body)) AS t(a, b))")"
q -c "SET client_min_messages = warning" -c "SELECT embed.unvectorize('ops_building_docs', 'v')" -c "DROP TABLE ops_building_docs" >/dev/null
q -c "ALTER SYSTEM RESET pg_embed.building_wait" -c "ALTER SYSTEM RESET pg_embed.max_building_memory" -c "SELECT pg_reload_conf()" >/dev/null

# ---- 5. a cancel mid-build ------------------------------------------------------------------
q -c "SET client_min_messages = warning" -c "SELECT embed.drop_model('ops_big_f32')" -c "SELECT count(*) FROM embed.cache_cleanup()" >/dev/null
start_session "$work/c" <<'SQL'
\set ON_ERROR_STOP 0
SELECT 'anon_before ' || (regexp_match(pg_read_file('/proc/self/status'), 'RssAnon:\s+(\d+) kB'))[1];
SELECT embed.register_model('ops_big_f32', 'ops-seeded-a');
SELECT 'anon_after ' || (regexp_match(pg_read_file('/proc/self/status'), 'RssAnon:\s+(\d+) kB'))[1];
SELECT 'temporary ' || count(*) FROM embed.cache_files() WHERE file LIKE '%.tmp.%';
SQL
for _ in $(seq 1 400); do
    [ -n "$(find "$CACHE" -name '*.weights.tmp.*' -size +10M 2>/dev/null)" ] && break
    sleep 0.01
done
[ -n "$(find "$CACHE" -name '*.weights.tmp.*' 2>/dev/null)" ] || fail "no file being written to cancel the build in"
q1 "SELECT pg_cancel_backend($SESSION_PID)" >/dev/null
wait "$SESSION_JOB"
grep -q "canceling statement due to user request" "$work/c" || fail "the cancel: $(cat "$work/c")"
before="$(sed -n 's/^anon_before //p' "$work/c")"
after="$(sed -n 's/^anon_after //p' "$work/c")"
expect_eq "the cancelled build's file, removed at once" "temporary 0" "$(grep '^temporary' "$work/c")"
# The build's memory is gone (its largest tensor alone is 119 MB); what stays is the
# tokenizer and, where the server runs with RUST_BACKTRACE set, the cancel's backtrace and
# the symbol tables read to print it (about 30 MB, once per backend).
[ $(( (after - before) / 1024 )) -le 64 ] || fail "the cancelled build left +$(( (after - before) / 1024 )) MB private"
pass "private memory after the cancel: +$(( (after - before) / 1024 )) MB <= 64 MB"
expect_eq "the cancelled registration registered nothing" 0 "$(q1 "SELECT count(*) FROM embed.models WHERE name = 'ops_big_f32'")"

# ---- 6. kill -9 mid-build -------------------------------------------------------------------
want="$(q1 "SELECT md5(embed('ops_big_b', 'the same sentence')::text)")"
q -c "SET client_min_messages = warning" -c "SELECT embed.drop_model('ops_big_b')" -c "SELECT count(*) FROM embed.cache_cleanup()" >/dev/null
start_session "$work/k" <<'SQL'
SELECT embed.register_model('ops_big_b', 'ops-seeded-a', '{"precision": "bfloat16"}');
SQL
killed="$SESSION_PID"
for _ in $(seq 1 400); do
    [ -n "$(find "$CACHE" -name '*.weights.tmp.*' -size +10M 2>/dev/null)" ] && break
    sleep 0.01
done
[ -n "$(find "$CACHE" -name '*.weights.tmp.*' 2>/dev/null)" ] || fail "no file being written to kill the build in"
kill -9 "$killed"
wait "$SESSION_JOB" 2>/dev/null || true
sleep 1
wait_for_server
left="$(q1 "SELECT count(*) FROM embed.cache_files() WHERE file LIKE '%.tmp.%'")"
info "left by the killed build after recovery: $left temporary file(s) (the store removes those of ended writers when it is next opened)"
expect_eq "the killed build's file is not in use" 0 "$(q1 "SELECT count(*) FROM embed.cache_files() WHERE file LIKE '%.tmp.%' AND in_use")"
q -c "SET client_min_messages = warning" -c "SELECT count(*) FROM embed.cache_cleanup()" >/dev/null
expect_eq "embed.cache_cleanup() removed what the killed build left" 0 "$(q1 "SELECT count(*) FROM embed.cache_files() WHERE file LIKE '%.tmp.%'")"
q -c "SET client_min_messages = warning" -c "SELECT embed.register_model('ops_big_b', 'ops-seeded-a', '{\"precision\": \"bfloat16\"}')" >/dev/null
expect_eq "registered again: the same vector (md5 of its text)" "$want" "$(q1 "SELECT md5(embed('ops_big_b', 'the same sentence')::text)")"
expect_eq "no file left from the killed build's ledger entry" 0 "$(q1 "SELECT count(*) FROM pg_ls_dir('pg_embed_building') AS f WHERE f LIKE '%.build'")"

signals="$(tail -n +"$((log_before + 1))" "$PG_LOG" | grep -c 'terminated by signal' || true)"
expect_eq "backends killed by a signal (only the one kill -9)" 1 "$signals"
q -c "SET client_min_messages = warning" \
  -c "SELECT embed.drop_model(name) FROM embed.models WHERE name LIKE 'ops_big%'" \
  -c "SELECT count(*) FROM embed.cache_cleanup()" >/dev/null
