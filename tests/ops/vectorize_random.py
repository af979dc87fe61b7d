#!/usr/bin/env python3
"""Randomized, model-based test of the asynchronous path (embed.vectorize).

Each seed makes one vectorized table (a random key type: int, bigint, text, uuid, date,
timestamptz or numeric; plain, or hash-partitioned in two) and runs a random sequence of
transactions that commit or roll back, from writer sessions with random DateStyle,
IntervalStyle, TimeZone, extra_float_digits and search_path.

The target: odd seeds vectorize a dense `emb vector(DIM)` with MODEL; even seeds a
multi-vector `emb real[]` with the late-interaction (ColBERT) MULTI_MODEL, whose rows are
embed_multi's 2-D arrays, and keep a second column `emb_t real[]` with a row-level
embed.embed_trigger(MULTI_MODEL, 'body', 'emb_t') (BEFORE INSERT OR UPDATE ... FOR EACH ROW,
made before the first row). As seed % 2 and seed % 7 (the key type) are independent, any 14
consecutive seeds run every key type with both targets. --target forces one.

The transactions:

    INSERT (one row, several, COPY, straight into a partition), UPDATE of the source, of
    another column, of the key, of the source to NULL, DELETE, TRUNCATE

mixed with faults and DDL from an admin session:

    pg_terminate_backend and SIGKILL of a worker, the model dropped and registered again
    (on multi seeds, half the time it stays dropped for 1-4 steps: the row trigger refuses
    the writers' INSERTs and UPDATEs meanwhile, 42704, and those transactions roll back),
    RENAME of the table and of the source column (and back; on multi seeds the row trigger
    is made again with the new column name in the same transaction: its arguments are names,
    and a trigger left naming the old column refuses every write), ALTER TYPE of an int key to
    bigint, DETACH and ATTACH of a partition, ADD and DROP of an unrelated column, DROP
    COLUMN of the key, source or target (must be refused, 2BP01), DROP TABLE (must take the
    vectorizer, its queue and errors; the run goes on with a new table, vectorized again).

A Python model of the table (key -> source, kept per transaction and applied on commit)
is the oracle. At the end, after embed.vectorize_wait: the table holds exactly the model's
rows, and every row holds embed(model, source) of its current source (embed_multi's array on
multi seeds: the same array_dims, every element within 1e-5), NULL for a NULL source, or
has a row in embed.vectorize_errors; on multi seeds every row's emb_t holds embed_multi of
its source too (NULL for a NULL source), whatever extra_float_digits the writer had (-15
included: the trigger passes the arrays through text). A failure prints the seed; run it
again with

    tests/ops/vectorize_random.py --seed N [--steps S]

Needs the test server of make test (scripts/env.sh: PG_EMBED_PORT, PG_EMBED_DB, PGDATA) with
pg_embed and pgvector installed, and MODEL (a registered embedding model, DIM dimensions,
resolved from SOURCE); MULTI_MODEL (default colbert) is registered from MULTI_SOURCE (default
late-colbert: tests/fixtures/late/colbert copied into pg_embed.model_dir, as
tests/ops/vectorize_random.sh does) if it is not already.
"""

import argparse
import datetime
import decimal
import os
import random
import signal
import sys
import time
import uuid

import psycopg
from psycopg import sql

KEY_TYPES = ["int", "bigint", "text", "uuid", "date", "timestamptz", "numeric"]
DATESTYLES = ["ISO, MDY", "SQL, DMY", "SQL, MDY", "German", "Postgres, DMY", "Postgres, MDY", "ISO, DMY"]
INTERVALSTYLES = ["postgres", "postgres_verbose", "sql_standard", "iso_8601"]
TIMEZONES = ["UTC", "America/New_York", "Asia/Kolkata", "Pacific/Chatham", "Europe/Berlin"]
FLOAT_DIGITS = ["-15", "0", "1", "3"]
SEARCH_PATHS = ['"$user", public', "pg_catalog", "vr_other, public", "pg_temp"]
WORDS = ("alpha beta gamma delta river mountain quiet storm paper glass orange violet "
         "engine garden winter summer signal copper marble ribbon lantern harbor").split()


def key_value(kind, i):
    """The i-th key of a key type, as a Python value psycopg sends unambiguously."""
    if kind == "int":
        return i
    if kind == "bigint":
        return 10**12 + i * 7919
    if kind == "text":
        return f"key {i:03d} é"
    if kind == "uuid":
        return uuid.UUID(int=(i * 0x9E3779B97F4A7C15) % (1 << 128))
    if kind == "date":
        # Day and month both at most 12 for many of them: what DMY and MDY read differently.
        return datetime.date(2024, 1, 2) + datetime.timedelta(days=i * 31)
    if kind == "timestamptz":
        base = datetime.datetime(2024, 3, 10, 1, 30, tzinfo=datetime.timezone.utc)
        return base + datetime.timedelta(minutes=i * 457, microseconds=i * 13)
    if kind == "numeric":
        return decimal.Decimal(i) / decimal.Decimal(8) + decimal.Decimal("0.001")
    raise ValueError(kind)


class Run:
    def __init__(self, args, seed):
        self.args = args
        self.seed = seed
        self.rng = random.Random(seed)
        self.kind = KEY_TYPES[seed % len(KEY_TYPES)] if args.key_type is None else args.key_type
        self.partitioned = self.rng.random() < 0.5
        # The target, from the seed alone (no draw: a dense seed replays as before).
        self.multi = seed % 2 == 0 if args.target is None else args.target == "multi"
        self.table = f"vr_{seed}"
        self.source = "body"
        self.model = args.multi_model if self.multi else args.model
        self.model_source = args.multi_source if self.multi else args.source
        self.model_dropped = None  # steps left while the model stays dropped (multi seeds)
        self.rows = {}  # key index -> source (None: NULL)
        self.detached = None  # (partition name, {key index: source}) while a partition is detached
        self.log = []
        self.counts = {}
        self.problems = []  # found during the run (a refusal that did not refuse, ...)

    # ---- connections ------------------------------------------------------------------
    def connect(self, settings=None):
        conn = psycopg.connect(self.args.dsn, autocommit=True)
        if settings:
            with conn.cursor() as cur:
                for name, value in settings.items():
                    cur.execute("SELECT set_config(%s, %s, false)", (name, value))
        return conn

    def writer_settings(self):
        r = self.rng
        return {
            "DateStyle": r.choice(DATESTYLES),
            "IntervalStyle": r.choice(INTERVALSTYLES),
            "TimeZone": r.choice(TIMEZONES),
            "extra_float_digits": r.choice(FLOAT_DIGITS),
            "search_path": r.choice(SEARCH_PATHS),
        }

    def admin(self, query, params=None):
        """One statement from a fresh admin connection (reconnects across server restarts)."""
        for attempt in range(600):
            try:
                with self.connect() as conn:
                    with conn.cursor() as cur:
                        cur.execute(query, params)
                        return cur.fetchall() if cur.description else None
            except psycopg.OperationalError:
                if attempt == 599:
                    raise
                time.sleep(0.1)

    def qualified(self, name=None):
        return sql.Identifier("public", name or self.table)

    def note(self, what):
        self.log.append(what)
        # Faults, DDL and rollbacks by an error by name; transactions by outcome.
        kind = what if what.split(" ")[0] in ("ddl", "fault", "rolled_back_by") else what.split(" ")[0]
        self.counts[kind] = self.counts.get(kind, 0) + 1

    # ---- setup ------------------------------------------------------------------------
    def setup(self):
        self.admin("CREATE SCHEMA IF NOT EXISTS vr_other")
        self.drop_tables()
        if self.multi:
            columns = sql.SQL("emb real[], emb_t real[]")
            self.admin("SELECT embed.register_model(%(n)s, %(s)s) WHERE NOT EXISTS "
                       "(SELECT FROM embed.models WHERE name = %(n)s AND source = %(s)s AND task = 'multi')",
                       {"n": self.model, "s": self.model_source})
        else:
            columns = sql.SQL("emb vector({})").format(sql.Literal(self.args.dim))
        ddl = sql.SQL("CREATE TABLE {} (k {} PRIMARY KEY, body text, other int, {})").format(
            self.qualified(), sql.SQL(self.kind), columns)
        if self.partitioned:
            ddl = sql.SQL("{} PARTITION BY HASH (k)").format(ddl)
        self.admin(ddl)
        if self.partitioned:
            for r in (0, 1):
                self.admin(sql.SQL("CREATE TABLE {} PARTITION OF {} FOR VALUES WITH (MODULUS 2, REMAINDER {})").format(
                    self.qualified(f"{self.table}_p{r}"), self.qualified(), sql.Literal(r)))
        if self.multi:
            # Before the first row: every row the oracle knows has been through it.
            self.admin(self.create_trigger())
        # A few rows before vectorize: queued by it.
        writer = self.connect()
        self.transaction(writer, [self.op_insert_many for _ in range(2)], commit=True)
        writer.close()
        self.admin("SELECT embed.vectorize(%s, %s, 'emb', %s, %s)",
                   (f"public.{self.table}", self.source, self.model, self.rng.choice([1, 4, 16, 64])))

    def create_trigger(self):
        """The row trigger that keeps emb_t (multi seeds), on the source column as it is named now."""
        return sql.SQL("CREATE TRIGGER vr_emb_t BEFORE INSERT OR UPDATE ON {} FOR EACH ROW "
                       "EXECUTE FUNCTION embed.embed_trigger({}, {}, 'emb_t')").format(
            self.qualified(), sql.Literal(self.model), sql.Literal(self.source))

    def admin_transaction(self, queries):
        """Several statements in one transaction, from a fresh admin connection."""
        with self.connect() as conn:
            with conn.transaction():
                with conn.cursor() as cur:
                    for query in queries:
                        cur.execute(query)

    def register_again(self):
        """Ends a drop of the model that lasted several steps (multi seeds)."""
        if self.model_dropped is not None:
            self.admin("SELECT embed.register_model(%s, %s)", (self.model, self.model_source))
            self.model_dropped = None

    def drop_tables(self):
        """This seed's tables, from an earlier run too (renamed ones included)."""
        for (name,) in self.admin("SELECT c.relname FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace "
                                  "AND c.relkind IN ('r', 'p') AND (c.relname = %s OR c.relname LIKE %s)",
                                  (f"vr_{self.seed}", f"vr\\_{self.seed}\\_%")) or []:
            self.admin(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(self.qualified(name)))

    # ---- the oracle's view of a transaction -----------------------------------------------
    def free_key(self, view):
        taken = set(view) | set(self.detached[1] if self.detached else {})
        free = [i for i in range(self.args.keys) if i not in taken]
        return self.rng.choice(free) if free else None

    def text(self):
        return " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(1, 8)))

    def sql_type(self):
        return "bigint" if self.kind == "bigint_from_int" else self.kind

    def key(self, i):
        """Key i as a Python value (an int key altered to bigint keeps its values)."""
        return key_value("int" if self.kind == "bigint_from_int" else self.kind, i)

    # Each op: (statement, params, effect on the view) or None when it does not apply.
    def op_insert(self, view):
        i = self.free_key(view)
        if i is None:
            return None
        body = self.text() if self.rng.random() > 0.1 else None
        stmt = sql.SQL("INSERT INTO {} (k, {}, other) VALUES (%s, %s, 1)").format(self.qualified(), sql.Identifier(self.source))
        return "insert", stmt, (self.key(i), body), lambda v: v.__setitem__(i, body)

    def op_insert_many(self, view):
        keys, taken = [], set(view) | set(self.detached[1] if self.detached else {})
        for i in self.rng.sample(range(self.args.keys), self.args.keys):
            if i not in taken and len(keys) < self.rng.randint(2, 6):
                keys.append(i)
        if not keys:
            return None
        bodies = [self.text() for _ in keys]
        stmt = sql.SQL("INSERT INTO {} (k, {}) SELECT * FROM unnest(%s::{}[], %s::text[])").format(
            self.qualified(), sql.Identifier(self.source), sql.SQL(self.sql_type()))
        return "insert_many", stmt, ([self.key(i) for i in keys], bodies), \
            lambda v: v.update(dict(zip(keys, bodies)))

    def op_copy(self, view):
        i = self.free_key(view)
        if i is None:
            return None
        body = self.text()
        return "copy", ("copy", i, body), None, lambda v: v.__setitem__(i, body)

    def op_insert_partition(self, view):
        if not self.partitioned:
            return None
        i = self.free_key(view)
        if i is None:
            return None
        part = self.rng.choice(["p0", "p1"])
        if self.detached and self.detached[0] == part:
            return None
        body = self.text()
        stmt = sql.SQL("INSERT INTO {} (k, {}) VALUES (%s, %s)").format(
            self.qualified(f"{self.table}_{part}"), sql.Identifier(self.source))
        # The wrong partition for the key fails (23514): the transaction rolls back.
        return "insert_partition", stmt, (self.key(i), body), lambda v: v.__setitem__(i, body)

    def existing(self, view):
        return self.rng.choice(sorted(view)) if view else None

    def op_update_source(self, view):
        i = self.existing(view)
        if i is None:
            return None
        body = self.text()
        stmt = sql.SQL("UPDATE {} SET {} = %s WHERE k = %s").format(self.qualified(), sql.Identifier(self.source))
        return "update_source", stmt, (body, self.key(i)), lambda v: v.__setitem__(i, body)

    def op_update_null(self, view):
        i = self.existing(view)
        if i is None:
            return None
        stmt = sql.SQL("UPDATE {} SET {} = NULL WHERE k = %s").format(self.qualified(), sql.Identifier(self.source))
        return "update_null", stmt, (self.key(i),), lambda v: v.__setitem__(i, None)

    def op_update_other(self, view):
        i = self.existing(view)
        if i is None:
            return None
        stmt = sql.SQL("UPDATE {} SET other = coalesce(other, 0) + 1 WHERE k = %s").format(self.qualified())
        return "update_other", stmt, (self.key(i),), lambda v: None

    def op_update_key(self, view):
        i, j = self.existing(view), self.free_key(view)
        if i is None or j is None:
            return None
        change_body = self.rng.random() < 0.5
        body = self.text()
        if change_body:
            stmt = sql.SQL("UPDATE {} SET k = %s, {} = %s WHERE k = %s").format(self.qualified(), sql.Identifier(self.source))
            params = (self.key(j), body, self.key(i))
        else:
            stmt = sql.SQL("UPDATE {} SET k = %s WHERE k = %s").format(self.qualified())
            params = (self.key(j), self.key(i))

        def effect(v):
            old = v.pop(i)
            v[j] = body if change_body else old
        return "update_key", stmt, params, effect

    def op_swap_keys(self, view):
        if len(view) < 2:
            return None
        i, j = self.rng.sample(sorted(view), 2)
        stmt = sql.SQL("UPDATE {} SET k = CASE WHEN k = %s THEN %s ELSE %s END WHERE k IN (%s, %s)").format(self.qualified())
        params = (self.key(i), self.key(j), self.key(i), self.key(i), self.key(j))

        def effect(v):
            v[i], v[j] = v[j], v[i]
        # A unique violation midway (the key is checked per row) rolls the transaction back.
        return "swap_keys", stmt, params, effect

    def op_delete(self, view):
        i = self.existing(view)
        if i is None:
            return None
        stmt = sql.SQL("DELETE FROM {} WHERE k = %s").format(self.qualified())
        return "delete", stmt, (self.key(i),), lambda v: v.pop(i)

    def op_truncate(self, view):
        if self.rng.random() > 0.15:
            return None
        stmt = sql.SQL("TRUNCATE {}").format(self.qualified())
        return "truncate", stmt, None, lambda v: v.clear()

    OPS = ["op_insert"] * 4 + ["op_insert_many", "op_copy", "op_insert_partition", "op_update_source",
           "op_update_source", "op_update_null", "op_update_other", "op_update_key", "op_update_key",
           "op_swap_keys", "op_delete", "op_truncate"]

    def transaction(self, conn, ops, commit):
        """Runs ops in one transaction; the model takes the effects if it commits."""
        view = dict(self.rows)
        done = []
        name = None
        try:
            with conn.transaction():
                with conn.cursor() as cur:
                    for make in ops:
                        op = make(view)
                        if op is None:
                            continue
                        name, stmt, params, effect = op
                        if isinstance(stmt, tuple) and stmt[0] == "copy":
                            _, i, body = stmt
                            copy = sql.SQL("COPY {} (k, {}) FROM STDIN").format(self.qualified(), sql.Identifier(self.source))
                            with cur.copy(copy) as c:
                                c.write_row((self.key(i), body))
                        else:
                            cur.execute(stmt, params)
                        effect(view)
                        done.append(name)
                    if not commit:
                        raise psycopg.Rollback()
        except psycopg.errors.UniqueViolation:
            self.note("rolled_back_by unique_violation")
            return
        except psycopg.errors.CheckViolation:
            self.note("rolled_back_by partition_check")
            return
        except psycopg.errors.FeatureNotSupported as e:
            # The same wrong partition where the partition has a BEFORE ROW trigger (multi
            # seeds: the clone of the row trigger): PostgreSQL checks the partition's
            # constraint after each cloned BEFORE ROW trigger, and says 0A000 "moving row to
            # another partition during a BEFORE FOR EACH ROW trigger is not supported" first.
            if not (self.multi and name == "insert_partition" and "moving row to another partition" in str(e)):
                raise
            self.note("rolled_back_by partition_check")
            return
        except psycopg.errors.UndefinedObject as e:
            # The row trigger (multi seeds) while the model is dropped: the statement fails,
            # the transaction rolls back. Anywhere else it is the seed's failure.
            if self.model_dropped is None or "is not registered" not in str(e):
                raise
            self.note("rolled_back_by model_not_registered")
            return
        except psycopg.errors.UndefinedTable:
            raise
        if commit:
            self.rows = view
            self.note("commit " + ",".join(done))
        else:
            self.note("rollback " + ",".join(done))

    # ---- faults and DDL ---------------------------------------------------------------
    def worker_pids(self):
        rows = self.admin("SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_embed vectorize' "
                          "AND datname = current_database()")
        return [r[0] for r in rows or []]

    def fault(self):
        r = self.rng
        # (DDL and faults run with the model registered: a drop that lasts ends here.)
        self.register_again()
        choice = r.choice(["terminate", "kill", "model", "rename_table", "rename_column", "alter_type",
                           "partition", "add_drop_column", "refused_drop", "drop_table"])
        if choice == "terminate":
            for pid in self.worker_pids()[:1]:
                self.admin("SELECT pg_terminate_backend(%s)", (pid,))
            self.note("fault terminate")
        elif choice == "kill" and r.random() < self.args.kill_rate:
            pids = self.worker_pids()
            if pids:
                os.kill(pids[0], signal.SIGKILL)
                time.sleep(0.5)
                self.admin("SELECT 1")  # waits out crash recovery
                self.note("fault sigkill")
        elif choice == "model":
            self.admin("SELECT embed.drop_model(%s)", (self.model,))
            if self.multi and r.random() < 0.5:
                # Dropped for the next 1-4 steps: the writers meet the row trigger's error.
                self.model_dropped = r.randint(1, 4)
                self.note("fault model_dropped_for_steps")
                return
            time.sleep(r.random() * 0.3)
            self.admin("SELECT embed.register_model(%s, %s)", (self.model, self.model_source))
            self.note("fault model_dropped_and_registered")
        elif choice == "rename_table":
            new = f"vr_{self.seed}_r{r.randint(0, 9999)}"
            self.admin(sql.SQL("ALTER TABLE {} RENAME TO {}").format(self.qualified(), sql.Identifier(new)))
            self.table_parts_rename(new)
            self.note("ddl rename_table")
        elif choice == "rename_column":
            new = "text_body" if self.source == "body" else "body"
            rename = sql.SQL("ALTER TABLE {} RENAME COLUMN {} TO {}").format(
                self.qualified(), sql.Identifier(self.source), sql.Identifier(new))
            if self.multi:
                # The row trigger names its source column: made again with the new name in
                # the rename's transaction (left naming the old one, it refuses every write,
                # 42703). A detached partition has no clone of it; ATTACH clones the new one.
                old, self.source = self.source, new
                self.admin_transaction([rename, sql.SQL("DROP TRIGGER vr_emb_t ON {}").format(self.qualified()),
                                        self.create_trigger()])
                self.source = old
            else:
                self.admin(rename)
            if self.detached:
                # (A detached partition keeps its names; it must match again to be attached.)
                self.admin(sql.SQL("ALTER TABLE {} RENAME COLUMN {} TO {}").format(
                    self.qualified(f"{self.table}_{self.detached[0]}"), sql.Identifier(self.source), sql.Identifier(new)))
            self.source = new
            self.note("ddl rename_column")
        elif choice == "alter_type" and self.kind == "int" and not self.partitioned:
            self.admin(sql.SQL("ALTER TABLE {} ALTER COLUMN k TYPE bigint").format(self.qualified()))
            self.kind = "bigint_from_int"
            self.note("ddl alter_key_type")
        elif choice == "partition" and self.partitioned:
            if self.detached is None:
                part = r.choice(["p0", "p1"])
                name = f"{self.table}_{part}"
                rows = self.admin(sql.SQL("SELECT k::text FROM {}").format(self.qualified(name)))
                texts = {r[0] for r in rows or []}
                moved = {i: b for i, b in self.rows.items() if self.key_text(i) in texts}
                self.admin(sql.SQL("ALTER TABLE {} DETACH PARTITION {}").format(self.qualified(), self.qualified(name)))
                for i in moved:
                    del self.rows[i]
                self.detached = (part, moved)
                self.note("ddl detach")
            else:
                part, moved = self.detached
                self.admin(sql.SQL("ALTER TABLE {} ATTACH PARTITION {} FOR VALUES WITH (MODULUS 2, REMAINDER {})").format(
                    self.qualified(), self.qualified(f"{self.table}_{part}"), sql.Literal(int(part[1]))))
                self.rows.update(moved)
                self.detached = None
                self.note("ddl attach")
        elif choice == "add_drop_column":
            self.admin(sql.SQL("ALTER TABLE {} ADD COLUMN extra int").format(self.qualified()))
            self.admin(sql.SQL("ALTER TABLE {} DROP COLUMN extra").format(self.qualified()))
            self.note("ddl add_drop_column")
        elif choice == "refused_drop":
            # Dropping the key, source or target column is refused (2BP01); nothing changes.
            # (A partitioned table's key is its partition key: PostgreSQL refuses that itself.)
            column = r.choice(([] if self.partitioned else ["k"]) + [self.source, "emb"])
            try:
                self.admin(sql.SQL("ALTER TABLE {} DROP COLUMN {}").format(self.qualified(), sql.Identifier(column)))
                self.problems.append(f"DROP COLUMN {column} of the vectorized table was not refused")
            except psycopg.errors.DependentObjectsStillExist:
                self.note("ddl refused_drop_column")
        elif choice == "drop_table" and r.random() < 0.3:
            # DROP TABLE takes its vectorizer, queue and errors along; then the run goes on
            # with a new table of the same kind, vectorized again.
            vid = self.admin("SELECT id FROM embed.vectorizers WHERE tbl = %s::regclass",
                             (f"public.{self.table}",))[0][0]
            if self.detached:
                self.admin(sql.SQL("DROP TABLE {}").format(self.qualified(f"{self.table}_{self.detached[0]}")))
            self.admin(sql.SQL("DROP TABLE {}").format(self.qualified()))
            left = self.admin("SELECT (SELECT count(*) FROM embed.vectorizers WHERE id = %(v)s), "
                              "(SELECT count(*) FROM embed.vectorize_queue WHERE vectorizer = %(v)s), "
                              "(SELECT count(*) FROM embed.vectorize_errors WHERE vectorizer = %(v)s)", {"v": vid})[0]
            if tuple(left) != (0, 0, 0):
                self.problems.append(f"DROP TABLE left vectorizer {vid}: rows, queued, errors {tuple(left)}")
            self.table, self.source, self.rows, self.detached = f"vr_{self.seed}", "body", {}, None
            if self.kind == "bigint_from_int":
                self.kind = "int"
            self.setup()
            self.note("ddl drop_table")

    def table_parts_rename(self, new):
        if self.partitioned:
            for p in ("p0", "p1"):
                self.admin(sql.SQL("ALTER TABLE {} RENAME TO {}").format(
                    self.qualified(f"{self.table}_{p}"), sql.Identifier(f"{new}_{p}")))
        self.table = new

    def key_text(self, i):
        """The key as the admin session (default settings) prints it."""
        return self.admin(sql.SQL("SELECT (%s::{})::text").format(sql.SQL(self.sql_type())), (self.key(i),))[0][0]

    # ---- the run ----------------------------------------------------------------------
    def run(self):
        self.setup()
        writers = [self.connect(self.writer_settings()) for _ in range(self.args.sessions)]
        for step in range(self.args.steps):
            if self.model_dropped is not None:
                self.model_dropped -= 1
                if self.model_dropped < 0:
                    self.register_again()
            if self.rng.random() < self.args.fault_rate:
                self.fault()
                continue
            w = self.rng.randrange(len(writers))
            ops = [getattr(self, self.rng.choice(self.OPS)) for _ in range(self.rng.randint(1, 3))]
            try:
                self.transaction(writers[w], ops, commit=self.rng.random() > 0.2)
            except psycopg.OperationalError:
                # The server restarted (SIGKILL of a worker): reconnect; the transaction was
                # not committed.
                self.note("reconnect")
                time.sleep(0.5)
                self.admin("SELECT 1")
                writers[w] = self.connect(self.writer_settings())
            if self.rng.random() < 0.1:
                writers[w].close()
                writers[w] = self.connect(self.writer_settings())
        for w in writers:
            w.close()
        self.register_again()
        if self.detached:
            self.fault_attach()
        return self.check()

    def fault_attach(self):
        part, moved = self.detached
        self.admin(sql.SQL("ALTER TABLE {} ATTACH PARTITION {} FOR VALUES WITH (MODULUS 2, REMAINDER {})").format(
            self.qualified(), self.qualified(f"{self.table}_{part}"), sql.Literal(int(part[1]))))
        self.rows.update(moved)
        self.detached = None

    def check(self):
        # The model may have been dropped by the last fault's timing: it is registered again
        # by then (the fault re-registers before returning).
        done = self.admin("SELECT embed.vectorize_wait(%s, 'emb', %s)",
                          (f"public.{self.table}", f"{self.args.wait} seconds"))[0][0]
        problems = list(self.problems)
        if not done:
            problems.append("vectorize_wait returned false")
        tbl = self.qualified()
        got = self.admin(sql.SQL("SELECT k::text, {} FROM {}").format(sql.Identifier(self.source), tbl))
        got = {k: b for k, b in got}
        want = {self.key_text(i): b for i, b in self.rows.items()}
        if got != want:
            missing = sorted(set(want) - set(got))[:5]
            extra = sorted(set(got) - set(want))[:5]
            differ = [k for k in set(got) & set(want) if got[k] != want[k]][:5]
            problems.append(f"the table differs from the oracle: missing {missing}, extra {extra}, other source {differ}")
        errors = self.admin("SELECT e.key, e.sqlstate, e.message FROM embed.vectorize_errors e "
                            "JOIN embed.vectorizers v ON v.id = e.vectorizer WHERE v.tbl = %s::regclass",
                            (f"public.{self.table}",)) or []
        error_keys = {e[0] for e in errors}
        for e in errors:
            problems.append(f"error row: key {e[0]!r}: {e[1]} {e[2]}")
        if self.multi:
            bad = self.check_multi(tbl)
        else:
            bad = self.admin(sql.SQL(
                "SELECT t.k::text, t.{src} IS NULL, t.emb IS NULL, "
                "       CASE WHEN t.{src} IS NOT NULL AND t.emb IS NOT NULL THEN "
                "            (SELECT max(abs(a - b)) FROM unnest(t.emb::real[], embed(%s, t.{src}::text)) AS u(a, b)) END "
                "  FROM {tbl} t").format(src=sql.Identifier(self.source), tbl=tbl), (self.model,))
        wrong = []
        for key, src_null, emb_null, diff in bad:
            if key in error_keys:
                continue
            if src_null and not emb_null:
                wrong.append(f"{key}: a vector for a NULL source")
            elif not src_null and emb_null:
                wrong.append(f"{key}: no vector")
            elif isinstance(diff, str):
                wrong.append(f"{key}: {diff}")
            elif diff is not None and diff > 1e-5:
                wrong.append(f"{key}: a stale vector (max difference {diff:.3g})")
        if wrong:
            problems.append(f"{len(wrong)} of {len(bad)} rows wrong: {wrong[:6]}")
        if self.multi:
            # The row trigger's column: no excuse (it is written in the writer's statement).
            wrong_t = []
            for key, src_null, emb_null, diff in self.trigger_rows:
                if src_null and not emb_null:
                    wrong_t.append(f"{key}: emb_t for a NULL source")
                elif not src_null and emb_null:
                    wrong_t.append(f"{key}: no emb_t")
                elif isinstance(diff, str):
                    wrong_t.append(f"{key}: emb_t {diff}")
                elif diff is not None and diff > 1e-5:
                    wrong_t.append(f"{key}: emb_t differs from embed_multi (max difference {diff:.3g})")
            if wrong_t:
                problems.append(f"row trigger: {len(wrong_t)} of {len(bad)} rows wrong: {wrong_t[:6]}")
        return problems, len(bad)

    def check_multi(self, tbl):
        """Per row: (key, source NULL, emb NULL, difference) for emb, and the same for emb_t
        into self.trigger_rows; a difference is the max abs difference of the elements, or a
        text when the arrays' dims differ."""
        rows = self.admin(sql.SQL(
            "SELECT t.k::text, t.{src} IS NULL, t.emb IS NULL, t.emb_t IS NULL, "
            "       array_dims(t.emb), array_dims(t.emb_t), array_dims(m.v), "
            "       (SELECT max(abs(a - b)) FROM unnest(t.emb, m.v) AS u(a, b) "
            "         WHERE array_dims(t.emb) = array_dims(m.v)), "
            "       (SELECT max(abs(a - b)) FROM unnest(t.emb_t, m.v) AS u(a, b) "
            "         WHERE array_dims(t.emb_t) = array_dims(m.v)) "
            "  FROM {tbl} t LEFT JOIN LATERAL (SELECT embed_multi(%s, t.{src}::text) AS v "
            "                                   WHERE t.{src} IS NOT NULL) m ON true").format(
            src=sql.Identifier(self.source), tbl=tbl), (self.model,)) or []
        out, self.trigger_rows = [], []
        for key, src_null, emb_null, emb_t_null, dims, dims_t, want, diff, diff_t in rows:
            for into, null, got, d in ((out, emb_null, dims, diff), (self.trigger_rows, emb_t_null, dims_t, diff_t)):
                if not src_null and not null and got != want:
                    d = f"dims {got}, embed_multi's {want}"
                into.append((key, src_null, null, d))
        return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, action="append", help="a seed to run (repeatable)")
    p.add_argument("--seeds", type=int, default=0, help="run seeds FIRST .. FIRST+N-1")
    p.add_argument("--first", type=int, default=1)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--keys", type=int, default=24, help="size of the key space")
    p.add_argument("--sessions", type=int, default=3)
    p.add_argument("--fault-rate", type=float, default=0.12)
    p.add_argument("--kill-rate", type=float, default=0.3, help="share of 'kill' faults that send SIGKILL")
    p.add_argument("--key-type", choices=KEY_TYPES)
    p.add_argument("--target", choices=["dense", "multi"],
                   help="force the target (default: even seeds multi, odd seeds dense)")
    p.add_argument("--wait", type=int, default=120)
    p.add_argument("--keep", action="store_true", help="keep the tables")
    args = p.parse_args()
    args.model = os.environ.get("MODEL", "minilm")
    args.source = os.environ.get("SOURCE", "all-MiniLM-L6-v2")
    args.dim = int(os.environ.get("DIM", "384"))
    args.multi_model = os.environ.get("MULTI_MODEL", "colbert")
    args.multi_source = os.environ.get("MULTI_SOURCE", "late-colbert")
    args.dsn = (f"host=127.0.0.1 port={os.environ['PG_EMBED_PORT']} user={os.environ.get('PG_SUPERUSER', 'postgres')} "
                f"dbname={os.environ.get('PG_EMBED_DB', 'postgres')}")
    seeds = list(args.seed or []) + list(range(args.first, args.first + args.seeds))
    if not seeds:
        seeds = [args.first]
    failed = []
    started = time.time()
    # The multi seeds register MULTI_MODEL where it is not; a run that passes drops it again
    # (the later tests of tests/ops/run.sh see the database's registrations as they were).
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        multi_before = conn.execute("SELECT count(*) FROM embed.models WHERE name = %s",
                                    (args.multi_model,)).fetchone()[0] > 0
    any_multi = False
    for seed in seeds:
        run = Run(args, seed)
        any_multi = any_multi or run.multi
        t0 = time.time()
        try:
            problems, rows = run.run()
        except Exception as e:  # a crash of the test itself is a failure of the seed too
            problems, rows = [f"{type(e).__name__}: {e}"], 0
        ops = ", ".join(f"{k} {v}" for k, v in sorted(run.counts.items()))
        status = "ok" if not problems else "FAILED"
        target = (f"multi {run.model} real[] + row trigger" if run.multi
                  else f"dense {run.model} vector({args.dim})")
        print(f"    seed {seed}: {status} ({target}, {run.kind} key, {'partitioned' if run.partitioned else 'plain'}, "
              f"{rows} rows at the end, {time.time() - t0:.1f} s; {ops})", flush=True)
        if problems:
            failed.append(seed)
            for line in problems[:20]:
                print(f"      {line}", flush=True)
            print(f"      replay: tests/ops/vectorize_random.py --seed {seed} --steps {args.steps}"
                  f"{'' if args.target is None else ' --target ' + args.target}", flush=True)
        elif not args.keep:
            run.drop_tables()
    if any_multi and not failed and not args.keep and not multi_before:
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            conn.execute("SELECT embed.drop_model(name) FROM embed.models WHERE name = %s", (args.multi_model,))
    print(f"    {len(seeds)} seeds, {len(failed)} failed, {time.time() - started:.1f} s", flush=True)
    if failed:
        print(f"FAIL: seeds {failed}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
