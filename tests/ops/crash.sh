#!/usr/bin/env bash
# Crash safety of data: a backend is killed with SIGKILL (kill -9) in the middle of
#   1. an INSERT of ROWS rows through the row-level embed trigger,
#   2. an INSERT of ROWS rows through the statement-level embed trigger (the rows are written,
#      then embedded in one batch and updated: the kill lands in the batch),
#   3. CALL embed.backfill over a table of BACKFILL rows, once some batches have committed.
# Each time the postmaster restarts every backend and recovers; then the test checks that
# the rows committed before are all there with vectors equal to a fresh embed(), that no
# row of the killed transaction is visible (none with a NULL vector either), and for the
# backfill that the committed batches stay filled, written once, that its progress shows
# "interrupted", and that running it again fills the rest, each row written exactly once.
# The server log must show exactly the killed backends terminated by signal 9, nothing else.
# Run it last against a server: killing a backend ends every other session.
#   tests/ops/crash.sh [rows] [backfill rows]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROWS="${1:-1900}"
BACKFILL="${2:-1000}"
step "crash: kill -9 during trigger-driven INSERTs and during a backfill"
log_before="$(wc -l <"$PG_LOG")"
killed=()
out="$(mktemp)"
trap 'rm -f "$out" "$out.sql"' EXIT

# run_and_kill SQL WHEN: runs SQL in a new session, waits until the query WHEN returns 't'
# (polled from another session), kills the first session's backend with SIGKILL and waits
# for the server to recover.
run_and_kill() {
    local sql="$1" when="$2" pid
    start_session "$out" <<SQL
$sql
SELECT 'finished';
SQL
    pid=$SESSION_PID
    wait_until "$when"
    expect_eq "the statement is still running before the kill" active \
        "$(q1 "SELECT state FROM pg_stat_activity WHERE pid = $pid")"
    kill -9 "$pid"
    killed+=("$pid")
    wait "$SESSION_JOB" || true
    grep -q '^finished' "$out" && fail "the killed statement finished: $(cat "$out")"
    grep -q 'server closed the connection unexpectedly' "$out" \
        || fail "the session did not lose its connection: $(cat "$out")"
    pass "backend $pid killed with SIGKILL mid-statement"
    sleep 0.5
    wait_for_server
    pass "the server recovered and accepts connections"
}

q <<SQL
SET client_min_messages = warning;
DROP TABLE IF EXISTS ops_crash_corpus, ops_crash_row, ops_crash_statement, ops_crash_fill, ops_crash_writes;
CREATE TABLE ops_crash_corpus (n int PRIMARY KEY GENERATED ALWAYS AS IDENTITY, body text NOT NULL);
\copy ops_crash_corpus (body) FROM '$CORPUS'
CREATE TABLE ops_crash_row (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, body text, emb vector(:dim));
CREATE TRIGGER embed_row BEFORE INSERT OR UPDATE ON ops_crash_row
    FOR EACH ROW EXECUTE FUNCTION embed.embed_trigger(:'model', 'body', 'emb');
CREATE TABLE ops_crash_statement (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, body text, emb vector(:dim));
CREATE TRIGGER embed_stmt AFTER INSERT ON ops_crash_statement REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION embed.embed_trigger(:'model', 'body', 'emb');
-- Committed before the kills.
INSERT INTO ops_crash_row (body) SELECT body FROM ops_crash_corpus WHERE n <= 20;
INSERT INTO ops_crash_statement (body) SELECT body FROM ops_crash_corpus WHERE n <= 20;
-- The backfill's table, and a count of the writes of each row's vector.
CREATE TABLE ops_crash_fill (id int PRIMARY KEY, body text, emb vector(:dim));
INSERT INTO ops_crash_fill SELECT n, body FROM ops_crash_corpus WHERE n <= $BACKFILL;
CREATE TABLE ops_crash_writes (id int);
CREATE OR REPLACE FUNCTION ops_crash_count_write() RETURNS trigger LANGUAGE plpgsql AS
    \$\$ BEGIN INSERT INTO ops_crash_writes VALUES (NEW.id); RETURN NULL; END \$\$;
CREATE TRIGGER count_writes AFTER UPDATE OF emb ON ops_crash_fill
    FOR EACH ROW WHEN (NEW.emb IS NOT NULL) EXECUTE FUNCTION ops_crash_count_write();
SQL

# A statement that has been running for a while (the embedding is under way by then).
running_for() { echo "SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE '%$1%' AND state = 'active' AND query NOT LIKE '%pg_stat_activity%' AND now() - query_start > interval '$2'"; }

# ---- 1, 2. row-level and statement-level triggers --------------------------------------------
for level in row statement; do
    table="ops_crash_$level"
    info "kill -9 during INSERT of $ROWS rows through the $level-level trigger"
    run_and_kill "INSERT INTO $table (body) SELECT body FROM ops_crash_corpus WHERE n > 20 AND n <= 20 + $ROWS;" \
        "$(running_for "INSERT INTO $table" '1 s')"
    expect_eq "rows visible after the crash (the 20 committed before)" 20 "$(q1 "SELECT count(*) FROM $table")"
    expect_eq "visible rows without a vector (half-written)" 0 "$(q1 "SELECT count(*) FROM $table WHERE emb IS NULL")"
    expect_eq "committed rows whose vector differs from a fresh embed()" 0 "$(count_wrong_vectors "$table" emb)"
    # The table takes writes through its trigger again.
    q -c "INSERT INTO $table (body) VALUES ('written after the crash')"
    expect_eq "rows with a vector after an INSERT after the recovery" 21 \
        "$(q1 "SELECT count(*) FROM $table WHERE emb IS NOT NULL")"
    expect_eq "rows whose vector differs from a fresh embed()" 0 "$(count_wrong_vectors "$table" emb)"
done

# ---- 3. backfill ------------------------------------------------------------------------------
info "kill -9 during CALL embed.backfill of $BACKFILL rows (batches of 16)"
run_and_kill "CALL embed.backfill('ops_crash_fill', 'body', 'emb', :'model', 16);" \
    "SELECT coalesce(max(rows_done) >= 64, false) FROM embed.backfill_runs WHERE relid = 'ops_crash_fill'::regclass"
filled="$(q1 "SELECT count(*) FROM ops_crash_fill WHERE emb IS NOT NULL")"
info "rows filled by the committed batches: $filled of $BACKFILL"
[ "$filled" -ge 64 ] && [ "$filled" -lt "$BACKFILL" ] || fail "expected a partial backfill, found $filled filled rows"
expect_eq "the run's recorded progress equals the filled rows" "$filled" \
    "$(q1 "SELECT rows_done FROM embed.backfill_progress WHERE relation = 'ops_crash_fill'::regclass")"
expect_eq "the run's state" interrupted \
    "$(q1 "SELECT state FROM embed.backfill_progress WHERE relation = 'ops_crash_fill'::regclass")"
expect_eq "committed writes (one per filled row)" "$filled" "$(q1 "SELECT count(*) FROM ops_crash_writes")"
expect_eq "filled rows whose vector differs from a fresh embed()" 0 "$(count_wrong_vectors ops_crash_fill emb)"
q -c "SET client_min_messages = warning" -c "CALL embed.backfill('ops_crash_fill', 'body', 'emb', '$MODEL', 16)"
expect_eq "rows without a vector after the second run" 0 "$(q1 "SELECT count(*) FROM ops_crash_fill WHERE emb IS NULL")"
expect_eq "rows the second run filled" "$(( BACKFILL - filled ))" \
    "$(q1 "SELECT rows_done FROM embed.backfill_progress WHERE relation = 'ops_crash_fill'::regclass AND state = 'done'")"
expect_eq "rows written other than exactly once" 0 \
    "$(q1 "SELECT count(*) FROM (SELECT id FROM ops_crash_writes GROUP BY id HAVING count(*) <> 1) w")"
expect_eq "rows written" "$BACKFILL" "$(q1 "SELECT count(*) FROM ops_crash_writes")"
expect_eq "rows whose vector differs from a fresh embed()" 0 "$(count_wrong_vectors ops_crash_fill emb)"

# ---- the server log --------------------------------------------------------------------------
signalled="$(tail -n +"$(( log_before + 1 ))" "$PG_LOG" | grep "terminated by signal" || true)"
printf '%s\n' "$signalled" | sed 's/^/    log: /'
expected="$(for p in "${killed[@]}"; do echo "PID $p signal 9"; done | sort)"
seen="$(sed -n 's/.*(PID \([0-9]*\)) was terminated by signal \([0-9]*\).*/PID \1 signal \2/p' <<<"$signalled" | sort)"
expect_eq "processes terminated by a signal (only the killed backends, by SIGKILL)" \
    "$(tr '\n' ' ' <<<"$expected")" "$(tr '\n' ' ' <<<"$seen")"
q -c "DROP TABLE ops_crash_corpus, ops_crash_row, ops_crash_statement, ops_crash_fill, ops_crash_writes" \
  -c "DROP FUNCTION ops_crash_count_write()"
