#!/usr/bin/env bash
# The throughput bench: the fixed corpus (bench/corpus.txt, 2,000 sentences of 5-60 words)
# through pg_embed in SQL (one call per row; the array form) and through
# sentence-transformers (PyTorch CPU) and ONNX Runtime fp32, all with the same thread
# count, in one run. Prints a table and writes bench/results/<commit>-<time>.json.
# Not part of the tests; asserts nothing.
#
#   bench/run.sh [threads]        (default: the machine's cores)
#
# Needs a running server with the model registered as 'minilm' (`make demo`; another port
# with PG_EMBED_PORT=...). The Python baselines install into bench/.venv (ignored) on
# first use.
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
pg_embed_resolve_paths

THREADS="${1:-$(nproc)}"
MODEL_NAME=minilm
BENCH="$REPO/bench"
CORPUS="$BENCH/corpus.txt"
VENV="$BENCH/.venv"
OUT="$BENCH/results"
mkdir -p "$OUT"

if [ ! -x "$VENV/bin/python" ]; then
    step "bench venv: sentence-transformers, onnxruntime (first run only)"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q torch "sentence-transformers==6.2.0" "transformers==5.23.0" onnxruntime onnx onnxscript
fi

psql_b() { "$PGBIN/psql" -X -q -A -t -h 127.0.0.1 -p "$PG_EMBED_PORT" -U "$PG_SUPERUSER" -d "$PG_EMBED_DB" -v ON_ERROR_STOP=1 "$@"; }

step "pg_embed in SQL ($THREADS threads)"
# Corpus into a table, then: single-sentence latency over the first 200 sentences, one call
# per row over all, and the array form over all (one warm-up call first).
# (\copy takes no psql variables: its line is written by the shell.)
pg_json="$( { printf 'CREATE TEMP TABLE corpus (i serial, s text);\n\\copy corpus (s) FROM %s\n' "'$CORPUS'"; cat <<'SQL'
SET pg_embed.threads = :threads;
CREATE FUNCTION pg_temp.run(model text) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz; v real[]; n bigint; lat float8[] := '{}'; t text; rows_s float8; array_s float8; total int;
BEGIN
    v := embed(model, 'warm up');
    total := (SELECT count(*) FROM corpus);
    FOR t IN SELECT s FROM corpus ORDER BY i LIMIT 200 LOOP
        t0 := clock_timestamp();
        v := embed(model, t);
        lat := lat || extract(epoch FROM clock_timestamp() - t0) * 1000;
    END LOOP;
    t0 := clock_timestamp();
    SELECT sum(array_length(embed(model, s), 1)) INTO n FROM corpus;
    rows_s := total / extract(epoch FROM clock_timestamp() - t0);
    t0 := clock_timestamp();
    SELECT sum(array_length(e, 1)) INTO n FROM embed(model, (SELECT array_agg(s ORDER BY i) FROM corpus)) AS e;
    array_s := total / extract(epoch FROM clock_timestamp() - t0);
    RETURN jsonb_build_object(
        'per_row', jsonb_build_object('system', 'pg_embed SQL, one call per row', 'sentences_per_s', rows_s,
            'single_p50_ms', (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY x) FROM unnest(lat) x),
            'single_p99_ms', (SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY x) FROM unnest(lat) x)),
        'array', jsonb_build_object('system', 'pg_embed SQL, embed(model, text[])', 'sentences_per_s', array_s));
END $$;
SELECT pg_temp.run(:'model');
SQL
} | psql_b -v model="$MODEL_NAME" -v threads="$THREADS")"

step "baselines ($THREADS threads)"
baselines="$("$VENV/bin/python" "$BENCH/baselines.py" --model "$REPO/models/all-MiniLM-L6-v2" --corpus "$CORPUS" \
    --threads "$THREADS" 2>/dev/null)"

commit="$(git -C "$REPO" rev-parse --short HEAD)"
result="$OUT/$commit-$(date -u +%Y%m%dT%H%M%SZ).json"
"$VENV/bin/python" - "$result" "$commit" "$THREADS" "$pg_json" "$baselines" <<'PY'
import json, sys
path, commit, threads, pg, baselines = sys.argv[1:6]
pg = json.loads(pg)
systems = [pg["per_row"], pg["array"]] + [json.loads(l) for l in baselines.splitlines() if l.strip()]
by = {s["system"]: s for s in systems}
ort = next(s for s in systems if s["system"].startswith("ONNX"))
st = next(s for s in systems if s["system"].startswith("sentence"))
print(f"{'system':42} {'sentences/s':>12} {'single p50 ms':>14} {'single p99 ms':>14}")
for s in systems:
    p50 = s.get("single_p50_ms"); p99 = s.get("single_p99_ms")
    print(f"{s['system']:42} {s['sentences_per_s']:12.1f} {p50 if p50 is None else round(p50, 2)!s:>14} {p99 if p99 is None else round(p99, 2)!s:>14}")
arr = pg["array"]["sentences_per_s"]
ratios = {"array / ORT": arr / ort["sentences_per_s"], "array / sentence-transformers": arr / st["sentences_per_s"],
          "single p50 pg_embed / ORT": pg["per_row"]["single_p50_ms"] / ort["single_p50_ms"]}
for k, v in ratios.items():
    print(f"{k:42} {v:12.2f}")
json.dump({"commit": commit, "threads": int(threads), "systems": systems, "ratios": ratios}, open(path, "w"), indent=1)
print(f"wrote {path}")
PY
