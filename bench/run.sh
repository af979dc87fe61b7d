#!/usr/bin/env bash
# The throughput bench: the fixed corpus (bench/corpus.txt, 2,000 sentences of 5-60 words)
# through pg_embed in SQL (one call per row; the array form), pg_embed's pipeline called
# from Rust (bench/pipeline.rs), sentence-transformers (PyTorch CPU) and ONNX Runtime fp32,
# all with the same thread count, in one run, with the machine's FMA peak measured in the
# same run. Prints sentences/s, single-sentence p50/p99, useful GFLOP/s and % of peak per
# system, the ratios, backend RSS after load and after 10,000 calls, and the load time;
# writes bench/results/<commit>-<time>.json. Not part of the tests; asserts nothing.
#
#   bench/run.sh [threads]        (default: the machine's cores)
#
# Needs a running server with the model registered as 'minilm' (`make demo`; another port
# with PG_EMBED_PORT=...). The Python baselines install into bench/.venv (ignored) on
# first use.
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
# shellcheck source=bench/lib.sh
source "$REPO/bench/lib.sh"
pg_embed_resolve_paths

THREADS="${1:-$(nproc)}"
MODEL_NAME=minilm
BENCH="$REPO/bench"
CORPUS="$BENCH/corpus.txt"
VENV="$BENCH/.venv"
OUT="$BENCH/results"
mkdir -p "$OUT"

bench_venv "$VENV"

psql_b() { "$PGBIN/psql" -X -q -A -t -h 127.0.0.1 -p "$PG_EMBED_PORT" -U "$PG_SUPERUSER" -d "$PG_EMBED_DB" -v ON_ERROR_STOP=1 "$@"; }

step "pg_embed in SQL ($THREADS threads)"
# Corpus into a table, then: single-sentence latency over the first 200 sentences, one call
# per row over all, and the array form over all (one warm-up call first).
# (\copy takes no psql variables: its line is written by the shell.)
pg_json="$( { printf 'CREATE TEMP TABLE corpus (i serial, s text);\n\\copy corpus (s) FROM %s\n' "'$CORPUS'"; cat <<'SQL'
SET pg_embed.threads = :threads;
CREATE FUNCTION pg_temp.rss_mb() RETURNS float8 LANGUAGE sql AS $$
    SELECT (regexp_match(pg_read_file('/proc/self/status'), 'VmRSS:\s+(\d+) kB'))[1]::float8 / 1024
$$;
CREATE FUNCTION pg_temp.run(model text) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz; v real[]; n bigint; lat float8[] := '{}'; t text; rows_s float8; array_s float8; total int;
    load_ms float8; rss_load float8; rss_warm float8; rss_calls float8; rss_before float8 := pg_temp.rss_mb();
BEGIN
    t0 := clock_timestamp();
    v := embed(model, 'warm up');
    load_ms := extract(epoch FROM clock_timestamp() - t0) * 1000;
    rss_load := pg_temp.rss_mb();
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
    -- Warm: 2,201 single calls and a batched run so far (the batch buffers, bounded by
    -- pg_embed.max_batch_tokens, stay with the allocator once used). Then 10,000 more calls.
    rss_warm := pg_temp.rss_mb();
    FOR k IN 1..10000 LOOP
        v := embed(model, (SELECT s FROM corpus WHERE i = 1 + k % total));
    END LOOP;
    rss_calls := pg_temp.rss_mb();
    RETURN jsonb_build_object(
        'memory', jsonb_build_object('rss_before_load_mb', rss_before, 'rss_after_load_mb', rss_load,
            'rss_warm_mb', rss_warm, 'rss_after_10000_calls_mb', rss_calls, 'first_call_ms', load_ms),
        'per_row', jsonb_build_object('system', 'pg_embed SQL, one call per row', 'sentences_per_s', rows_s,
            'single_p50_ms', (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY x) FROM unnest(lat) x),
            'single_p99_ms', (SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY x) FROM unnest(lat) x)),
        'array', jsonb_build_object('system', 'pg_embed SQL, embed(model, text[])', 'sentences_per_s', array_s));
END $$;
SELECT pg_temp.run(:'model');
SQL
} | psql_b -v model="$MODEL_NAME" -v threads="$THREADS")"

step "pg_embed pipeline from Rust ($THREADS threads) and the FMA peak"
rust_json="$(cd "$REPO" && cargo run -q --release -p pg_embed_core --example bench_pipeline -- \
    "$REPO/models/all-MiniLM-L6-v2" "$CORPUS" "$THREADS")"

step "baselines ($THREADS threads)"
baselines="$("$VENV/bin/python" "$BENCH/baselines.py" --model "$REPO/models/all-MiniLM-L6-v2" --corpus "$CORPUS" \
    --threads "$THREADS" 2>/dev/null)"

commit="$(git -C "$REPO" rev-parse --short HEAD)"
result="$OUT/$commit-$(date -u +%Y%m%dT%H%M%SZ).json"
"$VENV/bin/python" - "$result" "$commit" "$THREADS" "$pg_json" "$rust_json" "$baselines" <<'PY'
import json, sys
path, commit, threads, pg, rust, baselines = sys.argv[1:7]
pg = json.loads(pg)
rust = [json.loads(l) for l in rust.splitlines() if l.strip()]
machine = next(r for r in rust if r["system"] == "machine")
systems = [pg["per_row"], pg["array"]] + [r for r in rust if r["system"] != "machine"] \
    + [json.loads(l) for l in baselines.splitlines() if l.strip()]
peak = machine["fma_peak_gflops"]
for s in systems:
    s["useful_gflops"] = machine["corpus_useful_gflop"] * s["sentences_per_s"] / 2000
    s["percent_of_fma_peak"] = 100 * s["useful_gflops"] / peak
ort = next(s for s in systems if s["system"].startswith("ONNX"))
st = next(s for s in systems if s["system"].startswith("sentence"))
rs = next(s for s in systems if s["system"].startswith("pg_embed pipeline"))
print(f"FMA peak ({machine.get('fma_peak_vector', 'AVX2')}), {threads} threads: {peak:.1f} GFLOP/s; corpus: {machine['corpus_tokens']} tokens, "
      f"{machine['corpus_useful_gflop']:.1f} useful GFLOP")
print(f"{'system':42} {'sentences/s':>12} {'p50 ms':>8} {'p99 ms':>8} {'GFLOP/s':>8} {'% peak':>7}")
fmt = lambda v: "-" if v is None else f"{v:.2f}"
for s in systems:
    print(f"{s['system']:42} {s['sentences_per_s']:12.1f} {fmt(s.get('single_p50_ms')):>8} "
          f"{fmt(s.get('single_p99_ms')):>8} {s['useful_gflops']:8.1f} {s['percent_of_fma_peak']:7.1f}")
arr, row = pg["array"]["sentences_per_s"], pg["per_row"]
ratios = {
    "array / ORT (batch throughput)": arr / ort["sentences_per_s"],
    "Rust pipeline / ORT (batch throughput)": rs["sentences_per_s"] / ort["sentences_per_s"],
    "array / sentence-transformers": arr / st["sentences_per_s"],
    "single p50: SQL per row / ORT": row["single_p50_ms"] / ort["single_p50_ms"],
    "single p50: SQL per row / sentence-transformers": row["single_p50_ms"] / st["single_p50_ms"],
    "single p50: SQL per row / Rust pipeline": row["single_p50_ms"] / rs["single_p50_ms"],
}
for k, v in ratios.items():
    print(f"{k:48} {v:6.2f}")
mem = pg["memory"]
mem["growth_per_call_kb"] = (mem["rss_after_10000_calls_mb"] - mem["rss_warm_mb"]) * 1024 / 10000
print(f"backend RSS: {mem['rss_before_load_mb']:.1f} MB before load, {mem['rss_after_load_mb']:.1f} MB after load, "
      f"{mem['rss_warm_mb']:.1f} MB warm (2,201 calls and the array run), {mem['rss_after_10000_calls_mb']:.1f} MB "
      f"after 10,000 more calls ({mem['growth_per_call_kb']:.3f} kB per call)")
print(f"first call (load + embed) {mem['first_call_ms']:.0f} ms in SQL, load {rs['load_ms']:.0f} ms in Rust")
json.dump({"commit": commit, "threads": int(threads), "machine": machine, "systems": systems,
           "ratios": ratios, "memory": mem}, open(path, "w"), indent=1)
print(f"wrote {path}")
PY
