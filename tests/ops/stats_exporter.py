"""The postgres_exporter custom-queries file (docker/postgres_exporter/pg_embed.yaml) against
a running server: tests/ops/stats.sh runs it once it knows what embed.stat_models holds.

1. The file is read as postgres_exporter reads it: one top-level metric prefix, a query, and
   a list of columns, each LABEL, COUNTER or GAUGE. Its query is run (psycopg): every
   column it names must be in the result, and every result column must be named.
2. The expected metrics (--expect NAME=VALUE, for the row of --datname and --model) must be
   what the query gives.
3. When Debian's prometheus-postgres-exporter is installed, it is started with the file
   against the server and scraped: every pg_embed_* sample of that row must be there with
   the query's value.

    stats_exporter.py --yaml FILE --port P --user U --dbname D --datname D2 --model M
        [--expect calls_total=48 ...]
"""

import argparse
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import psycopg
import yaml

USAGES = {"LABEL", "COUNTER", "GAUGE"}


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def ok(message):
    print(f"    ok: {message}")


def read_queries(path):
    with open(path) as f:
        doc = yaml.safe_load(f)
    if not isinstance(doc, dict) or len(doc) != 1:
        fail(f"{path}: expected one metric prefix, got {list(doc or {})}")
    prefix, spec = next(iter(doc.items()))
    columns = {}
    for entry in spec["metrics"]:
        (name, meta), = entry.items()
        if meta.get("usage") not in USAGES:
            fail(f"{path}: column {name}: usage {meta.get('usage')!r} is not one of {sorted(USAGES)}")
        if not meta.get("description"):
            fail(f"{path}: column {name} has no description")
        columns[name] = meta["usage"]
    return prefix, spec["query"], columns


def samples(prefix, columns, rows, names):
    """The samples postgres_exporter makes of the query's rows: {(metric, labels): value}."""
    labels = [c for c, u in columns.items() if u == "LABEL"]
    out = {}
    for row in rows:
        values = dict(zip(names, row))
        key = tuple((label, str(values[label])) for label in labels)
        for column, usage in columns.items():
            if usage != "LABEL":
                out[(f"{prefix}_{column}", key)] = float(values[column])
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_labels(text):
    labels = []
    for part in text.split('",'):
        part = part.rstrip('"')
        if not part:
            continue
        name, value = part.split('="', 1)
        labels.append((name, value))
    return tuple(sorted(labels))


def scrape(args, prefix):
    """pg_embed_* samples as the real postgres_exporter serves them."""
    exporter = shutil.which("prometheus-postgres-exporter") or shutil.which("postgres_exporter")
    if exporter is None:
        return None
    port = free_port()
    env = dict(os.environ)
    env["DATA_SOURCE_NAME"] = f"postgresql://{args.user}@127.0.0.1:{args.port}/{args.dbname}?sslmode=disable"
    cmd = [exporter, f"--extend.query-path={args.yaml}", f"--web.listen-address=127.0.0.1:{port}",
           "--disable-default-metrics", "--disable-settings-metrics"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        body = None
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    body = r.read().decode()
                if f"{prefix}_calls_total" in body:
                    break
            except OSError:
                pass
            if proc.poll() is not None:
                fail(f"postgres_exporter exited: {proc.stdout.read()}")
            time.sleep(0.1)
        if body is None:
            fail("postgres_exporter served no /metrics")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
    out = {}
    for line in body.splitlines():
        if not line.startswith(prefix + "_") or "{" not in line:
            continue
        head, value = line.rsplit(" ", 1)
        name, labels = head.split("{", 1)
        # postgres_exporter adds a "server" label of its own (host:port) to every sample.
        labels = tuple(kv for kv in parse_labels(labels.rstrip("}")) if kv[0] != "server")
        out[(name, labels)] = float(value)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--yaml", required=True)
    ap.add_argument("--port", required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("--dbname", required=True)
    ap.add_argument("--datname", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--expect", nargs="*", default=[])
    args = ap.parse_args()

    prefix, query, columns = read_queries(args.yaml)
    with psycopg.connect(host="127.0.0.1", port=args.port, user=args.user, dbname=args.dbname,
                         autocommit=True) as conn:
        conn.execute("SET stats_fetch_consistency = none")
        cur = conn.execute(query)
        names = [d.name for d in cur.description]
        rows = cur.fetchall()
    if set(names) != set(columns):
        fail(f"the query's columns {sorted(names)} are not the file's metrics {sorted(columns)}")
    ok(f"{args.yaml}: {len(columns)} columns, each LABEL, COUNTER or GAUGE, all returned by its query")
    got = samples(prefix, columns, rows, names)
    mine = {k: v for k, v in got.items() if dict(k[1]).get("datname") == args.datname
            and dict(k[1]).get("model") == args.model}
    if not mine:
        fail(f"no row for datname={args.datname} model={args.model} in {rows}")
    for item in args.expect:
        metric, want = item.split("=", 1)
        values = [v for (m, _), v in mine.items() if m == f"{prefix}_{metric}"]
        if values != [float(want)]:
            fail(f"{prefix}_{metric}: expected {want}, got {values}")
        ok(f"{prefix}_{metric}{{datname=\"{args.datname}\",model=\"{args.model}\"}} = {want}")

    served = scrape(args, prefix)
    if served is None:
        print("    SKIPPED: the scrape of a real postgres_exporter (prometheus-postgres-exporter is not installed)")
        return
    served_mine = {(m, k): v for (m, k), v in served.items() if dict(k).get("datname") == args.datname
                   and dict(k).get("model") == args.model}
    want = {(m, tuple(sorted(k))): v for (m, k), v in mine.items()}
    if set(served_mine) != set(want):
        fail(f"postgres_exporter served {sorted(served_mine)}, expected {sorted(want)}")
    for key, value in want.items():
        if not math.isclose(served_mine[key], value, rel_tol=1e-9, abs_tol=1e-9):
            fail(f"postgres_exporter: {key[0]} = {served_mine[key]}, the query gives {value}")
    ok(f"postgres_exporter {exporter_version()} served the {len(want)} pg_embed_* samples of the row, "
       "each equal to the query's value")


def exporter_version():
    exporter = shutil.which("prometheus-postgres-exporter") or shutil.which("postgres_exporter")
    out = subprocess.run([exporter, "--version"], capture_output=True, text=True)
    found = re.search(r"version (\S+)", out.stdout + out.stderr)
    return found.group(1) if found else "(version unknown)"


if __name__ == "__main__":
    main()
