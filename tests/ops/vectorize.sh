#!/usr/bin/env bash
# Asynchronous embedding (embed.vectorize) as a DBA would stress it:
#   1. kill -9 of the worker in the middle of its batches: the server recovers, the worker is
#      started again and carries on; every row ends with the right vector, written exactly
#      once (a trigger counts the writes of each row's vector);
#   2. a server restart with rows queued: the queue survives, a worker starts again (at the
#      first write or vectorize_wait of a session) and finishes it, each row written once;
#   3. pg_terminate_backend of the worker: started again within seconds;
#   4. pgbench inserting and updating through the queue while the worker runs: afterwards
#      every row's vector is what embed() gives for its current text;
#   5. DROP DATABASE of a database with a vectorizer: its workers end and are not restarted.
# Needs the test server of make test (scripts/server.sh restarts it).
#   tests/ops/vectorize.sh [rows] [pgbench seconds]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROWS="${1:-600}"
SECONDS_RUN="${2:-8}"
step "vectorize: kill -9 of the worker, a server restart with rows queued, pgbench through the queue"

worker_pid() { q1 "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_embed vectorize' AND datname = current_database() LIMIT 1"; }
# Rows whose vector was written other than once, rows without the right vector.
check_once() {
    expect_eq "$1: rows whose vector was written other than once" 0 \
        "$(q1 "SELECT count(*) FROM vq LEFT JOIN vq_writes w USING (id) WHERE coalesce(w.n, 0) <> 1")"
    expect_eq "$1: rows without a vector" 0 "$(q1 "SELECT count(*) FROM vq WHERE emb IS NULL")"
    expect_eq "$1: vectors that differ from embed() of the row's text" 0 "$(count_wrong_vectors vq emb)"
}
# Inserts rows FROM..TO with sentences of the corpus.
insert_rows() {
    q -c "INSERT INTO vq (id, body) SELECT g.i, c.s FROM generate_series($1, $2) AS g(i)
          JOIN vq_corpus c ON c.i = 1 + g.i % (SELECT count(*) FROM vq_corpus)"
}

q <<SQL >/dev/null
SET client_min_messages = warning;
DROP TABLE IF EXISTS vq, vq_writes, vq_corpus;
CREATE TABLE vq_corpus (i serial, s text);
\copy vq_corpus (s) FROM '$CORPUS'
CREATE TABLE vq (id bigint PRIMARY KEY, body text, emb vector($DIM));
-- How many times each row's vector was written (a write that rolls back does not count).
CREATE TABLE vq_writes (id bigint PRIMARY KEY, n int NOT NULL);
CREATE OR REPLACE FUNCTION public.vq_count() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO vq_writes AS w VALUES (NEW.id, 1) ON CONFLICT (id) DO UPDATE SET n = w.n + 1;
    RETURN NULL;
END \$\$;
CREATE TRIGGER vq_count AFTER UPDATE OF emb ON vq FOR EACH ROW
    WHEN (NEW.emb IS DISTINCT FROM OLD.emb) EXECUTE FUNCTION public.vq_count();
SELECT embed.vectorize('vq', 'body', 'emb', :'model', 16);
SQL

# ---- 1. kill -9 of the worker mid-batch ----------------------------------------------------
log_before="$(wc -l <"$PG_LOG")"
insert_rows 1 "$ROWS"
wait_until "SELECT rows_done >= 64 FROM embed.vectorizers WHERE tbl = 'vq'::regclass"
wait_until "SELECT state = 'active' FROM pg_stat_activity WHERE backend_type = 'pg_embed vectorize' AND datname = current_database()"
pid="$(worker_pid)"
done_before="$(q1 "SELECT rows_done FROM embed.vectorizers WHERE tbl = 'vq'::regclass")"
kill -9 "$pid"
pass "worker $pid killed with SIGKILL during a batch (about $done_before of $ROWS rows done)"
sleep 0.5
wait_for_server
wait_until "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'pg_embed vectorize' AND datname = current_database()" 30
[ "$(worker_pid)" != "$pid" ] || fail "the same worker is still running"
pass "the postmaster started the worker again (pid $(worker_pid))"
expect_eq "the queue is empty again" t "$(q1 "SELECT embed.vectorize_wait('vq', 'emb', '120 seconds')")"
check_once "after kill -9"
tail -n +"$((log_before + 1))" "$PG_LOG" | grep -q "background worker \"pg_embed vectorize\" (PID $pid) was terminated by signal 9" \
    || fail "the server log does not show worker $pid killed"

# ---- 2. a server restart with rows queued --------------------------------------------------
insert_rows $((ROWS + 1)) $((ROWS * 3))
"$REPO/scripts/server.sh" stop >/dev/null
"$REPO/scripts/server.sh" start >/dev/null
queued="$(q1 "SELECT queued FROM embed.vectorize_status WHERE tbl = 'vq'::regclass")"
[ "$queued" -gt 0 ] || fail "nothing was queued across the restart"
pass "$queued rows were still queued after the restart"
expect_eq "the queue is empty again" t "$(q1 "SELECT embed.vectorize_wait('vq', 'emb', '300 seconds')")"
check_once "after a restart"

# ---- 3. pg_terminate_backend ---------------------------------------------------------------
pid="$(worker_pid)"
expect_eq "pg_terminate_backend" t "$(q1 "SELECT pg_terminate_backend($pid, 5000)")"
wait_until "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'pg_embed vectorize' AND datname = current_database() AND pid <> $pid" 30
pass "started again after pg_terminate_backend (pid $(worker_pid))"

# ---- 4. pgbench through the queue ----------------------------------------------------------
work="$(ops_workdir)"
cat >"$work/vq.sql" <<'SQL'
\set id random(1, 5000)
INSERT INTO vq (id, body) VALUES (:id, 'pgbench row ' || :id)
    ON CONFLICT (id) DO UPDATE SET body = 'pgbench row ' || :id || ' changed at ' || clock_timestamp();
SQL
"$PGBIN/pgbench" -n -h 127.0.0.1 -p "$PG_EMBED_PORT" -U "$PG_SUPERUSER" -d "$PG_EMBED_DB" \
    -c 4 -T "$SECONDS_RUN" -f "$work/vq.sql" >"$work/pgbench.out" 2>&1 || fail "pgbench: $(cat "$work/pgbench.out")"
tps="$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$work/pgbench.out" | head -1)"
pass "pgbench: 4 clients inserting and updating for $SECONDS_RUN s, $tps transactions/s, no errors"
expect_eq "the queue is empty again" t "$(q1 "SELECT embed.vectorize_wait('vq', 'emb', '300 seconds')")"
expect_eq "rows without a vector" 0 "$(q1 "SELECT count(*) FROM vq WHERE emb IS NULL")"
expect_eq "vectors that differ from embed() of the row's current text" 0 "$(count_wrong_vectors vq emb)"
expect_eq "errors recorded" 0 "$(q1 "SELECT count(*) FROM embed.vectorize_errors")"

# ---- 5. DROP DATABASE of a database with a vectorizer ----------------------------------------
# Its workers end, and none is started again (a worker of a missing database would fail to
# connect, exit with code 1 and be restarted every second, forever).
q -c "DROP DATABASE IF EXISTS pg_embed_vq_dropped WITH (FORCE)" -c "CREATE DATABASE pg_embed_vq_dropped" >/dev/null
PG_EMBED_DB=pg_embed_vq_dropped q -c "SET client_min_messages = warning" -c "CREATE EXTENSION vector" \
    -c "CREATE EXTENSION pg_embed" -c "SELECT embed.register_model('$MODEL', 'all-MiniLM-L6-v2')" \
    -c "CREATE TABLE d (id int PRIMARY KEY, body text, emb vector($DIM))" \
    -c "SELECT embed.vectorize('d', 'body', 'emb', '$MODEL')" -c "INSERT INTO d VALUES (1, 'one')" \
    -c "SELECT embed.vectorize_wait('d', 'emb', '60 seconds')" >/dev/null
dropped_oid="$(q1 "SELECT oid FROM pg_database WHERE datname = 'pg_embed_vq_dropped'")"
wait_until "SELECT count(*) >= 1 FROM pg_stat_activity WHERE backend_type = 'pg_embed vectorize' AND datid = $dropped_oid"
pass "a worker runs in database $dropped_oid"
log_before="$(wc -l <"$PG_LOG")"
# Ended first: the postmaster starts it again a second later, after the database is gone.
q -c "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE backend_type = 'pg_embed vectorize' AND datid = $dropped_oid" \
  -c "DROP DATABASE pg_embed_vq_dropped WITH (FORCE)" >/dev/null
sleep 4
expect_eq "workers of the dropped database 4 s later" 0 \
    "$(q1 "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_embed vectorize' AND datid = $dropped_oid")"
expect_eq "log lines about the dropped database not existing (a worker restarted in a loop)" 0 \
    "$(tail -n +"$((log_before + 1))" "$PG_LOG" | grep -c "database $dropped_oid does not exist" || true)"

q -c "SELECT embed.unvectorize('vq', 'emb')" -c "DROP TABLE vq, vq_writes, vq_corpus" \
  -c "DROP FUNCTION public.vq_count()" >/dev/null
rm -rf "$work"
pass "vectorize: done"
