#!/usr/bin/env python3
"""Randomized, model-based test of pg_embed's write paths on a Citus cluster.

Each seed makes a distributed table (a random shard count) and runs a random sequence of:

    register_model / re-register (random options) / drop_model from the coordinator, each
    with or without a fault: a worker that cannot read the model's files (its own
    pg_embed.model_dir emptied), or a worker that is down;
    INSERT, UPDATE of the source (its vector set to NULL, as a user re-embedding does),
    DELETE, TRUNCATE on the distributed table;
    CALL embed.backfill (random batch size), sometimes cut short by statement_timeout;
    a worker restarted.

and, on a second distributed table kept by embed.vectorize (a random key type: int, bigint,
text, uuid, date, timestamptz or numeric), from transactions with random DateStyle, TimeZone
and extra_float_digits (SET LOCAL, which Citus carries to the workers):

    INSERT, UPDATE of the source, of the source to NULL, of the vector to NULL, DELETE,
    TRUNCATE; a rename of the source column (and back); a shard moved to the other worker;
    the vectorize workers of a node terminated; a worker restarted.

The oracle is a Python model: the registrations every node must hold (a registration or
drop either happens on every node or, when a fault makes it fail, on none), and the rows of
the table. After every step each node's embed.models equals the model's; after every
backfill no row holds a vector other than embed(model, its source); at the end, after a
backfill without faults, every row holds exactly that and embed.cluster_check() is empty; and
after embed.vectorize_wait, every row of the vectorized table holds embed(model, source) of
its current source (NULL for a NULL source).
A failure prints the seed; run it again with

    tests/citus/citus_random.py --first N --seeds 1 [--steps S]

Needs the cluster of scripts/citus.sh (CITUS_PORT, the coordinator; workers on the next
ports) with pgvector, pg_embed and the model "minilm" (all-MiniLM-L6-v2) registered.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import time

import psycopg

PORT = int(os.environ.get("CITUS_PORT", "28840"))
WORKERS = [PORT + 1, PORT + 2]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EMPTY_DIR = os.environ["CITUS_EMPTY_DIR"]
NAMES = ["rnd_a", "rnd_b"]
OPTIONS = [{}, {"max_length": 128}, {"max_length": 64}, {"pooling": "cls"}, {"normalize": False}]
WORDS = ("alpha beta gamma delta river mountain quiet storm paper glass orange violet "
         "engine garden winter summer signal copper marble ribbon lantern harbor").split()


def connect(port):
    return psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres", autocommit=True)


def node_server(port, action):
    n = port - PORT
    env = dict(os.environ, PG_EMBED_PORT=str(port), PGDATA=f"{REPO}/.pg/citus-{n}",
               PG_LOG=f"{REPO}/.pg/log/citus-{n}.log")
    subprocess.run([f"{REPO}/scripts/server.sh", action], env=env, check=True, stdout=subprocess.DEVNULL)
    if action == "start":
        settle()


def registrations(port):
    with connect(port) as c:
        rows = c.execute("SELECT name, options FROM embed.models WHERE name LIKE 'rnd\\_%' ORDER BY name").fetchall()
    return {name: options for name, options in rows}


class Failure(Exception):
    pass


# Connection failures Citus reports under another SQLSTATE than class 08: a shard move asks
# the target worker for its disk space over a new connection, which fails the same way right
# after that worker restarted (seen once in seed 4: "Could not fetch disk stats for node: ...").
TRANSIENT = ("Could not fetch disk stats for node",)


def retrying(f):
    """f(), again up to 4 times a second apart while it fails with a connection error (class
    08, or one of TRANSIENT) or as a deadlock's victim (40P01): Citus's connections to a worker
    that has just restarted can fail a few times, for any statement, and a multi-row write can
    deadlock with a vectorize worker writing the same rows in another order (PostgreSQL or
    Citus's detector cancels one of the two; an application retries it, as here). A failed
    statement changed nothing, so the oracle is updated after f() only."""
    for attempt in range(5):
        try:
            return f()
        except psycopg.Error as e:
            state = e.sqlstate or ""
            transient = state.startswith("08") or state == "40P01" or any(t in str(e) for t in TRANSIENT)
            if not transient or attempt == 4:
                raise
            time.sleep(1)


def settle():
    """Waits until every node reaches every other (after a restart), up to 30 s."""
    for _ in range(60):
        try:
            with connect(PORT) as c:
                if c.execute("SELECT bool_and(result) FROM citus_check_cluster_node_health()").fetchone()[0]:
                    return
        except psycopg.OperationalError:
            pass
        time.sleep(0.5)


def run_seed(seed, steps):
    rng = random.Random(seed)
    log = []
    admin = connect(PORT)
    admin.execute("SET client_min_messages = warning")

    def reopen():
        # Citus's connections of a session to a worker that restarted fail once (its own
        # behaviour, for any query): a new session, as an application reconnects.
        nonlocal admin
        admin.close()
        admin = connect(PORT)
        admin.execute("SET client_min_messages = warning")
    for name in NAMES:
        admin.execute("SELECT embed.drop_model(name) FROM embed.models WHERE name = %s", (name,))
    admin.execute("DROP TABLE IF EXISTS rnd")
    admin.execute("CREATE TABLE rnd (id int PRIMARY KEY, body text, emb vector(384))")
    shards = rng.choice([4, 8, 16])
    admin.execute("SELECT create_distributed_table('rnd', 'id', shard_count := %s)", (shards,))
    log.append(f"{shards} shards")
    model = {}   # name -> options: what every node must hold
    rows = {}    # id -> body
    next_id = 1

    def text():
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))

    def check_registrations(what):
        for port in [PORT] + WORKERS:
            got = registrations(port)
            if got != model:
                raise Failure(f"after {what}: node :{port} holds {got}, the model {model}")

    def check_vectors(what, complete):
        wrong = admin.execute(
            "SELECT count(*) FROM rnd WHERE emb IS NOT NULL"
            " AND emb::text <> embed('minilm', body)::vector(384)::text").fetchone()[0]
        if wrong:
            raise Failure(f"after {what}: {wrong} rows hold another text's vector")
        got = dict(admin.execute("SELECT id, body FROM rnd").fetchall())
        if got != rows:
            raise Failure(f"after {what}: the table's rows differ from the model's ({len(got)} against {len(rows)})")
        if complete:
            empty = admin.execute("SELECT count(*) FROM rnd WHERE emb IS NULL AND body IS NOT NULL").fetchone()[0]
            if empty:
                raise Failure(f"after {what}: {empty} rows without a vector")

    for step in range(steps):
        op = rng.choice(["register", "register", "drop", "insert", "insert", "update", "delete",
                         "truncate", "backfill", "backfill", "restart"])
        if op == "register":
            name, options = rng.choice(NAMES), rng.choice(OPTIONS)
            fault = rng.choice([None, None, "files", "down"])
            worker = rng.choice(WORKERS)
            what = f"register {name} {json.dumps(options)} fault={fault}@{worker}"
            if fault == "files":
                with connect(worker) as w:
                    w.execute(f"ALTER SYSTEM SET pg_embed.model_dir = '{EMPTY_DIR}'")
                    w.execute("SELECT pg_reload_conf()")
                time.sleep(0.2)
            elif fault == "down":
                node_server(worker, "stop")
            try:
                admin.execute("SELECT embed.register_model(%s, 'all-MiniLM-L6-v2', %s::jsonb)",
                              (name, json.dumps(options)))
                if fault:
                    raise Failure(f"{what}: succeeded")
                model[name] = options
            except psycopg.Error as e:
                if not fault:
                    raise Failure(f"{what}: {e}")
                expected = "58P01" if fault == "files" else "08006"
                if e.sqlstate != expected or f":{worker}" not in str(e):
                    raise Failure(f"{what}: expected {expected} naming :{worker}, got {e.sqlstate} {e}")
            finally:
                if fault == "files":
                    with connect(worker) as w:
                        w.execute("ALTER SYSTEM RESET pg_embed.model_dir")
                        w.execute("SELECT pg_reload_conf()")
                    time.sleep(0.2)
                elif fault == "down":
                    node_server(worker, "start")
                    reopen()
            check_registrations(what)
        elif op == "drop" and model:
            name = rng.choice(sorted(model))
            down = rng.random() < 0.3
            worker = rng.choice(WORKERS)
            what = f"drop {name} down={down}@{worker}"
            if down:
                node_server(worker, "stop")
            try:
                admin.execute("SELECT embed.drop_model(%s)", (name,))
                if down:
                    raise Failure(f"{what}: succeeded")
                del model[name]
            except psycopg.Error as e:
                if not down or e.sqlstate != "08006":
                    raise Failure(f"{what}: {e.sqlstate} {e}")
            finally:
                if down:
                    node_server(worker, "start")
                    reopen()
            check_registrations(what)
        elif op == "insert":
            new = {next_id + i: text() for i in range(rng.randint(1, 30))}
            next_id += len(new)
            retrying(lambda: admin.cursor().executemany("INSERT INTO rnd (id, body) VALUES (%s, %s)", list(new.items())))
            rows.update(new)
            what = f"insert {len(new)}"
        elif op == "update" and rows:
            ids = rng.sample(sorted(rows), min(len(rows), rng.randint(1, 10)))
            for i in ids:
                rows[i] = text()
                retrying(lambda: admin.execute("UPDATE rnd SET body = %s, emb = NULL WHERE id = %s", (rows[i], i)))
            what = f"update {len(ids)}"
        elif op == "delete" and rows:
            ids = rng.sample(sorted(rows), min(len(rows), rng.randint(1, 10)))
            retrying(lambda: admin.execute("DELETE FROM rnd WHERE id = ANY(%s)", (ids,)))
            for i in ids:
                del rows[i]
            what = f"delete {len(ids)}"
        elif op == "truncate":
            retrying(lambda: admin.execute("TRUNCATE rnd"))
            rows.clear()
            what = "truncate"
        elif op == "backfill":
            batch = rng.choice([1, 7, 32, 64])
            timeout = rng.choice([None, None, 300, 800])
            what = f"backfill batch={batch} timeout={timeout}"
            try:
                admin.execute(f"SET statement_timeout = {timeout or 0}")
                admin.execute("CALL embed.backfill('rnd', 'body', 'emb', 'minilm', %s)", (batch,))
            except psycopg.errors.QueryCanceled:
                if not timeout:
                    raise
            finally:
                admin.execute("SET statement_timeout = 0")
            time.sleep(0.3 if timeout else 0)  # (a cut-short run's workers stop at their next batch)
            check_vectors(what, complete=not timeout)
        elif op == "restart":
            worker = rng.choice(WORKERS)
            node_server(worker, "stop")
            node_server(worker, "start")
            reopen()
            what = f"restart :{worker}"
        else:
            continue
        log.append(what)

    admin.execute("CALL embed.backfill('rnd', 'body', 'emb', 'minilm', 64)")
    check_vectors("the last backfill", complete=True)
    check_registrations("the end")
    differences = admin.execute(
        "SELECT count(*) FROM embed.cluster_check() WHERE model LIKE 'rnd\\_%'").fetchone()[0]
    if differences:
        raise Failure(f"cluster_check() lists {differences} differences")
    return f"{len(rows)} rows, {len(model)} models; " + (", ".join(log) if os.environ.get("CITUS_VERBOSE") else f"{log[0]}, {len(log) - 1} steps")


KEY_TYPES = ["int", "bigint", "text", "uuid", "date", "timestamptz", "numeric"]
DATESTYLES = ["ISO, MDY", "SQL, DMY", "German", "Postgres, DMY"]
TIMEZONES = ["UTC", "America/New_York", "Asia/Kolkata", "Pacific/Chatham"]


def key_literal(kind, i):
    """The i-th key of a type, as SQL text that no session setting reads otherwise."""
    if kind in ("int", "bigint"):
        return str(i if kind == "int" else 10**12 + i * 7919)
    if kind == "text":
        return f"'key {i:04d} é'"
    if kind == "uuid":
        return f"'00000000-0000-4000-8000-{i:012d}'::uuid"
    if kind == "date":
        return f"(date '2024-01-01' + {i})"
    if kind == "timestamptz":
        return f"(timestamptz '2024-01-01 00:00:00+00' + interval '{i} hours 7 minutes')"
    return f"({i}.125::numeric)"


def run_vectorize_seed(seed, steps):
    """The vectorized distributed table of seed `seed` (see the module's text)."""
    rng = random.Random(seed * 7919 + 1)
    kind = rng.choice(KEY_TYPES)
    admin = connect(PORT)
    admin.execute("SET client_min_messages = warning")
    admin.execute("DROP TABLE IF EXISTS rvec")
    admin.execute(f"CREATE TABLE rvec (k {kind} PRIMARY KEY, body text, emb vector(384))")
    admin.execute("SELECT create_distributed_table('rvec', 'k', shard_count := %s)", (rng.choice([2, 4, 8]),))
    rows = {}    # i -> body (None for a NULL source)
    source = "body"
    log = [f"{kind} key"]

    def text():
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 10)))

    def write(statement, params=()):
        # A writer's settings, carried to the workers' connections as Citus does it (SET LOCAL
        # with citus.propagate_set_commands = local: Citus sends the constants it folded on the
        # coordinator as text, which a worker must read with the same DateStyle).
        settings = (rng.choice(DATESTYLES), rng.choice(TIMEZONES), rng.choice([-15, 0, 3]))

        def attempt():
            with connect(PORT) as w:
                w.execute("SET citus.propagate_set_commands = 'local'")
                with w.transaction():
                    w.execute(f"SET LOCAL DateStyle = '{settings[0]}'")
                    w.execute(f"SET LOCAL TimeZone = '{settings[1]}'")
                    w.execute(f"SET LOCAL extra_float_digits = {settings[2]}")
                    w.execute(statement, params)
        retrying(attempt)

    def insert(n):
        ids = rng.sample([i for i in range(1, 400) if i not in rows], n)
        values = ", ".join(f"({key_literal(kind, i)}, %s)" for i in ids)
        bodies = [text() for _ in ids]
        write(f"INSERT INTO rvec (k, {source}) VALUES {values}", bodies)
        rows.update(zip(ids, bodies))

    admin.execute("SELECT embed.vectorize('rvec', 'body', 'emb', 'minilm')")
    for step in range(steps):
        op = rng.choice(["insert", "insert", "update", "null", "clear", "delete", "truncate", "rename",
                         "move", "terminate", "restart"])
        if op == "insert":
            n = rng.randint(1, 20)
            insert(n)
            what = f"insert {n}"
        elif op in ("update", "null", "clear", "delete") and rows:
            ids = rng.sample(sorted(rows), min(len(rows), rng.randint(1, 8)))
            keys = ", ".join(key_literal(kind, i) for i in ids)
            if op == "update":
                new = text()
                write(f"UPDATE rvec SET {source} = %s WHERE k IN ({keys})", (new,))
                for i in ids:
                    rows[i] = new
            elif op == "null":
                write(f"UPDATE rvec SET {source} = NULL WHERE k IN ({keys})")
                for i in ids:
                    rows[i] = None
            elif op == "clear":
                write(f"UPDATE rvec SET emb = NULL WHERE k IN ({keys})")
            else:
                write(f"DELETE FROM rvec WHERE k IN ({keys})")
                for i in ids:
                    del rows[i]
            what = f"{op} {len(ids)}"
        elif op == "truncate":
            retrying(lambda: admin.execute("TRUNCATE rvec"))
            rows.clear()
            what = "truncate"
        elif op == "rename":
            new = "content" if source == "body" else "body"
            retrying(lambda: admin.execute(f"ALTER TABLE rvec RENAME COLUMN {source} TO {new}"))
            source = new
            what = f"rename to {new}"
        elif op == "move":
            retrying(lambda: admin.execute(
                f"SELECT citus_move_shard_placement(s.shardid, '127.0.0.1', s.nodeport, '127.0.0.1',"
                f" CASE s.nodeport WHEN {WORKERS[0]} THEN {WORKERS[1]} ELSE {WORKERS[0]} END,"
                f" shard_transfer_mode := 'block_writes')"
                f" FROM citus_shards s WHERE s.table_name = 'rvec'::regclass ORDER BY random() LIMIT 1"))
            what = "move a shard"
        elif op == "terminate":
            worker = rng.choice(WORKERS)
            with connect(worker) as w:
                n = w.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                              " WHERE backend_type = 'pg_embed vectorize'").fetchone()[0]
            what = f"terminate {n} vectorize workers on :{worker}"
        elif op == "restart":
            worker = rng.choice(WORKERS)
            node_server(worker, "stop")
            node_server(worker, "start")
            admin.close()
            admin = connect(PORT)
            admin.execute("SET client_min_messages = warning")
            what = f"restart :{worker}"
        else:
            continue
        log.append(what)

    if source != "body":
        admin.execute(f"ALTER TABLE rvec RENAME COLUMN {source} TO body")
    if not admin.execute("SELECT embed.vectorize_wait('rvec', 'emb', '120 s')").fetchone()[0]:
        raise Failure("vectorize_wait timed out")
    wrong = admin.execute(
        "SELECT count(*) FILTER (WHERE body IS NOT NULL AND (emb IS NULL OR emb::text <> embed('minilm', body)::vector(384)::text)),"
        " count(*) FILTER (WHERE body IS NULL AND emb IS NOT NULL), count(*) FROM rvec").fetchone()
    errors = sum(connect(w).execute("SELECT count(*) FROM embed.vectorize_errors").fetchone()[0] for w in WORKERS)
    if wrong[0] or wrong[1] or wrong[2] != len(rows) or errors:
        raise Failure(f"after the queue drained: {wrong[0]} rows without their vector, {wrong[1]} with a stale one,"
                      f" {wrong[2]} rows against the model's {len(rows)}, {errors} errors")
    bodies = dict(admin.execute("SELECT body, count(*) FROM rvec GROUP BY body").fetchall())
    model_bodies = {}
    for b in rows.values():
        model_bodies[b] = model_bodies.get(b, 0) + 1
    if bodies != model_bodies:
        raise Failure("the table's sources differ from the model's")
    admin.execute("DROP TABLE rvec")
    return f"{len(rows)} rows; " + (", ".join(log) if os.environ.get("CITUS_VERBOSE") else f"{log[0]}, {len(log) - 1} steps")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--first", type=int, default=1)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=16)
    a = p.parse_args()
    failed = 0
    for seed in range(a.first, a.first + a.seeds):
        t0 = time.time()
        try:
            summary = run_seed(seed, a.steps)
            summary_v = run_vectorize_seed(seed, a.steps)
            print(f"    seed {seed}: ok (registrations and backfill: {summary}; vectorize: {summary_v};"
                  f" {time.time() - t0:.1f} s)", flush=True)
        except Exception as e:  # any failure: print the seed to replay
            failed += 1
            print(f"FAIL: seed {seed}: {e}\n    replay: tests/citus/citus_random.py --first {seed} --seeds 1 --steps {a.steps}",
                  flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
