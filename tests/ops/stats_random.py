#!/usr/bin/env python3
"""Randomized, model-based test of the statistics (embed.stat_models) on a server with
pg_embed preloaded; tests/ops/stats.sh runs it in its own database with its model.

Each seed runs a random sequence of operations from SESSIONS client sessions and an admin
session, against a Python oracle of what the model's row must hold:

    embed(model, text), embed(model, text[]) with NULL elements, classify-free calls only
    (the model is an embedder); inputs made of words that are single tokens of MiniLM's
    vocabulary, so the oracle knows their tokens ([CLS] + words + [SEP], cut at 256);
    faults: an image given to the text model (an ERROR), the same inside a PL/pgSQL block
    that catches it, a call inside a transaction that is rolled back (still counted: the
    work was done), pg_embed.track_stats off for one call (not counted);
    DDL and cache changes: the model dropped (calls then fail before any model runs, and
    count nowhere) and registered again, embed.unload in a session;
    rows written to a vectorized table (the worker's part: worker_inputs, worker_tokens);
    embed.stat_reset from the admin session.

Checks, at random points and at the end: every session has flushed its pending counts
(pg_stat_force_next_flush, then a statement), the worker has caught up, and the row's
calls, inputs, tokens, truncated_inputs, errors, worker_inputs, worker_tokens and the client
part equal the oracle's. A failure prints the seed; run it again with

    stats_random.py --dsn DSN --model M --source S --seed N
"""

import argparse
import random
import sys
import time

import psycopg

WORDS = ["hello", "world", "the", "cat", "sat", "a", "word"]
MAX_TOKENS = 256


class Oracle:
    def __init__(self):
        self.reset()

    def reset(self):
        self.calls = self.inputs = self.tokens = self.truncated = self.errors = 0
        self.worker_inputs = self.worker_tokens = 0

    def expected(self):
        return {
            "calls_minus_worker": self.calls,
            "inputs": self.inputs + self.worker_inputs,
            "tokens": self.tokens + self.worker_tokens,
            "truncated_inputs": self.truncated,
            "errors": self.errors,
            "worker_inputs": self.worker_inputs,
            "worker_tokens": self.worker_tokens,
            "client_inputs": self.inputs,
            "client_tokens": self.tokens,
        }


def text_of(rng):
    n = rng.choice([0, 1, 2, 3, 5, 8, 13, rng.randint(250, 300)])
    return " ".join(rng.choice(WORDS) for _ in range(n))


def tokens_of(text):
    n = len(text.split()) + 2
    return min(n, MAX_TOKENS), n > MAX_TOKENS


class Run:
    def __init__(self, args, seed):
        self.args, self.seed = args, seed
        self.rng = random.Random(seed)
        self.oracle = Oracle()
        self.admin = psycopg.connect(args.dsn, autocommit=True)
        self.sessions = [psycopg.connect(args.dsn, autocommit=True) for _ in range(args.sessions)]
        self.registered = True
        self.rows = 0
        self.checks = 0

    def log(self, what):
        if self.args.verbose:
            print(f"    [{self.seed}] {what}")

    def count(self, text_list):
        """An accepted call of these inputs (None elements skipped)."""
        self.oracle.calls += 1
        for t in text_list:
            if t is None:
                continue
            n, cut = tokens_of(t)
            self.oracle.inputs += 1
            self.oracle.tokens += n
            self.oracle.truncated += int(cut)

    def step(self):
        m = self.args.model
        s = self.rng.choice(self.sessions)
        op = self.rng.choice(["single"] * 5 + ["array"] * 4 + ["error", "caught", "rollback", "untracked",
                                                               "drop", "unload", "rows", "reset", "check"])
        if op in ("single", "array", "error", "caught", "rollback", "untracked", "rows", "drop") and not self.registered:
            # Calls of a dropped model fail before any model runs: nothing is counted.
            with self.assert_error(s, "is not registered"):
                s.execute("SELECT embed(%s, 'hello')", (m,))
            self.log("a call of the dropped model refused")
            if self.rng.random() < 0.5:
                self.admin.execute("SELECT embed.register_model(%s, %s)", (m, self.args.source))
                self.registered = True
                self.log("registered again")
            return
        if op == "single":
            t = text_of(self.rng)
            s.execute("SELECT embed(%s, %s)", (m, t))
            self.count([t])
            self.log(f"embed of {len(t.split())} words")
        elif op == "array":
            texts = [None if self.rng.random() < 0.2 else text_of(self.rng) for _ in range(self.rng.randint(1, 6))]
            s.execute("SELECT count(*) FROM embed(%s, %s::text[])", (m, texts))
            self.count(texts)
            self.log(f"embed of an array of {len(texts)}")
        elif op == "error":
            with self.assert_error(s, "takes text, not images"):
                s.execute("SELECT embed_image(%s, '\\x00'::bytea)", (m,))
            self.oracle.calls += 1
            self.oracle.errors += 1
            self.log("an ERROR")
        elif op == "caught":
            quoted = "'" + m.replace("'", "''") + "'"
            s.execute(f"DO $$ BEGIN PERFORM embed_image({quoted}, '\\x00'::bytea); "
                      "EXCEPTION WHEN OTHERS THEN NULL; END $$")
            self.oracle.calls += 1
            self.oracle.errors += 1
            self.log("an ERROR caught in PL/pgSQL")
        elif op == "rollback":
            t = text_of(self.rng)
            with s.transaction(force_rollback=True):
                s.execute("SELECT embed(%s, %s)", (m, t))
            self.count([t])
            self.log("a call in a rolled-back transaction")
        elif op == "untracked":
            s.execute("SET pg_embed.track_stats = off")
            s.execute("SELECT embed(%s, %s)", (m, text_of(self.rng)))
            s.execute("RESET pg_embed.track_stats")
            self.log("a call with track_stats off")
        elif op == "drop":
            # The worker's queue drained first: rows queued for a dropped model would fail.
            self.settle()
            self.admin.execute("SELECT embed.drop_model(%s)", (m,))
            self.registered = False
            self.log("model dropped")
        elif op == "unload":
            s.execute("SELECT embed.unload()")
            self.log("unload in a session")
        elif op == "rows":
            n = self.rng.randint(1, 12)
            texts = [text_of(self.rng) for _ in range(n)]
            for t in texts:
                self.rows += 1
                self.admin.execute("INSERT INTO stat_docs VALUES (%s, %s)", (self.rows, t))
                k, cut = tokens_of(t)
                self.oracle.worker_inputs += 1
                self.oracle.worker_tokens += k
                self.oracle.truncated += int(cut)
            self.log(f"{n} rows for the worker")
        elif op == "reset":
            self.settle()
            self.admin.execute("SELECT embed.stat_reset(%s)", (m,))
            self.oracle.reset()
            self.log("reset")
        elif op == "check":
            self.check()
            self.checks += 1

    class assert_error:
        def __init__(self, session, words):
            self.session, self.words = session, words

        def __enter__(self):
            return self

        def __exit__(self, kind, value, tb):
            if kind is None:
                raise AssertionError(f"expected an ERROR with {self.words!r}")
            if not isinstance(value, psycopg.Error) or self.words not in str(value):
                return False
            return True

    def settle(self):
        """Every session's pending counts flushed and the worker caught up."""
        if self.registered:
            self.admin.execute("SELECT embed.vectorize_wait('stat_docs', 'emb', '120 seconds')")
        for s in self.sessions + [self.admin]:
            s.execute("SELECT pg_stat_force_next_flush()")
            s.execute("SELECT 1")
        want = self.oracle.worker_inputs
        deadline = time.time() + 30
        while time.time() < deadline:
            got = self.row().get("worker_inputs", 0)
            if got >= want:
                break
            time.sleep(0.05)

    def row(self):
        with self.admin.cursor() as c:
            c.execute("SET stats_fetch_consistency = none")
            c.execute("""SELECT calls - worker_calls AS calls_minus_worker, inputs, tokens, truncated_inputs, errors,
                                worker_inputs, worker_tokens, client_inputs, client_tokens
                           FROM embed.stat_models WHERE datname = current_database() AND model = %s""",
                      (self.args.model,))
            r = c.fetchone()
            if r is None:
                return {}
            return dict(zip([d.name for d in c.description], r))

    def check(self):
        if not self.registered:
            # The worker cannot embed while the model is dropped: register it first.
            self.admin.execute("SELECT embed.register_model(%s, %s)", (self.args.model, self.args.source))
            self.registered = True
        self.settle()
        got, want = self.row(), self.oracle.expected()
        if not got and not any(want.values()):
            return
        if got != want:
            raise AssertionError(f"embed.stat_models: {got}, the oracle: {want}")
        self.log(f"check: {got}")

    def close(self):
        for s in self.sessions:
            s.close()
        self.admin.close()


def run_seed(args, seed):
    run = Run(args, seed)
    try:
        run.admin.execute("SET client_min_messages = warning")
        run.admin.execute("SELECT embed.register_model(%s, %s) WHERE NOT EXISTS "
                          "(SELECT FROM embed.models WHERE name = %s)", (args.model, args.source, args.model))
        run.admin.execute("DROP TABLE IF EXISTS stat_docs")
        run.admin.execute("CREATE TABLE stat_docs (id int PRIMARY KEY, body text, emb real[])")
        run.admin.execute("SELECT embed.vectorize('stat_docs', 'body', 'emb', %s, 8)", (args.model,))
        run.settle()
        run.admin.execute("SELECT embed.stat_reset(%s)", (args.model,))
        for _ in range(args.steps):
            run.step()
        run.check()
        run.checks += 1
        checks = run.checks
        run.admin.execute("SELECT embed.unvectorize('stat_docs', 'emb')")
        run.admin.execute("DROP TABLE stat_docs")
    finally:
        run.close()
    return checks


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dsn", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--seed", type=int, action="append")
    p.add_argument("--seeds", type=int, default=0)
    p.add_argument("--first", type=int, default=1)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--sessions", type=int, default=3)
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args()
    seeds = args.seed or list(range(args.first, args.first + args.seeds))
    for seed in seeds:
        print(f"    seed {seed}: {args.steps} steps, {args.sessions} sessions")
        try:
            checks = run_seed(args, seed)
        except Exception as e:
            print(f"FAIL: seed {seed}: {e}", file=sys.stderr)
            print(f"replay: {sys.argv[0]} --dsn '{args.dsn}' --model {args.model} --source '{args.source}' "
                  f"--steps {args.steps} --sessions {args.sessions} --seed {seed} --verbose", file=sys.stderr)
            sys.exit(1)
        print(f"    ok: seed {seed}: embed.stat_models equals the oracle at each of {checks} checks")


if __name__ == "__main__":
    main()
