#!/usr/bin/env bash
# The decoder bench: a Qwen3-Embedding-0.6B-shaped model (28 layers, hidden 1024, 16 query and
# 8 key/value heads of 128, random weights of the real shape, last-token pooling, Normalize;
# bench/decoder_data.py) on the first SENTENCES sentences of the bench corpus, through
# pg_embed's pipeline called from Rust (bench/pipeline.rs) and through sentence-transformers on
# PyTorch CPU (bench/baselines.py), with the same thread count, in one run. Prints the CPU,
# sentences/s at each system's best batch, single-sentence p50/p99, the ratios against the
# issue's goals, useful GFLOP/s against the FMA peak measured in the same run, the smallest
# cosine between the two systems' vectors, the same in bfloat16 (pg_embed with
# {"precision": "bfloat16"} against PyTorch under bfloat16 autocast, and {"precision": "int8"}
# against pg_embed's bfloat16; cosines to PyTorch
# float32's vectors), and memory after load: each bench process's RSS,
# and a PostgreSQL backend's when a server with pg_embed is running on PG_EMBED_PORT
# (`make demo`). Writes bench/results/decoder-<commit>-<time>.json. Not part of the tests;
# asserts nothing.
#
#   bench/decoder.sh [threads] [sentences]      (defaults: the machine's cores; 200)
#
# PG_EMBED_BENCH_SINGLES (default 30) sets how many single-sentence calls each system times.
#
# The model (2.4 GB of float32) is generated once (seeded) into
# $MODEL_DIR/bench-qwen3-0.6b-shape (models/ is ignored; the server's pg_embed.model_dir).
# The Python side installs into bench/.venv as bench/run.sh does; another environment with
# torch, transformers 5.23 and sentence-transformers 6.2: PG_EMBED_BENCH_VENV=/path/to/venv.
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
# shellcheck source=bench/lib.sh
source "$REPO/bench/lib.sh"

THREADS="${1:-$(nproc)}"
SENTENCES="${2:-200}"
SINGLES="${PG_EMBED_BENCH_SINGLES:-30}"
VECTORS=16
BENCH="$REPO/bench"
BENCH_VENV="${PG_EMBED_BENCH_VENV:-$BENCH/.venv}"
CORPUS="$BENCH/corpus.txt"
MODEL_NAME=bench-qwen3-0.6b-shape
DATA="$MODEL_DIR/$MODEL_NAME"
OUT="$BENCH/results"
mkdir -p "$OUT"
# The systems' outputs (they carry vectors: too long for arguments).
RUNS="$(mktemp -d)"
trap 'rm -rf "$RUNS"' EXIT

bench_header "$THREADS threads; the first $SENTENCES corpus sentences"
bench_venv "$BENCH_VENV"
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false

if [ ! -e "$DATA/done" ]; then
    step "generating the Qwen3-Embedding-0.6B-shaped model (first run only, about a minute)"
fi
"$BENCH_VENV/bin/python" "$BENCH/decoder_data.py" "$DATA" "$CORPUS"

for tokens in 1024 4096; do
    step "pg_embed pipeline from Rust ($THREADS threads, max_batch_tokens $tokens)"
    (cd "$REPO" && cargo run -q --release -p pg_embed_core --example bench_pipeline -- \
        "$DATA" "$CORPUS" "$THREADS" "$tokens" "$SENTENCES" "$SINGLES" "$VECTORS") >"$RUNS/rust-$tokens.json"
done

# bfloat16 too: pg_embed with {"precision": "bfloat16"}, PyTorch under bfloat16 autocast.
step "pg_embed pipeline from Rust, bfloat16 ($THREADS threads, max_batch_tokens 4096)"
(cd "$REPO" && BENCH_OPTIONS='{"precision": "bfloat16"}' cargo run -q --release -p pg_embed_core --example bench_pipeline -- \
    "$DATA" "$CORPUS" "$THREADS" 4096 "$SENTENCES" "$SINGLES" "$VECTORS") >"$RUNS/bf16-rust.json"

step "pg_embed pipeline from Rust, int8 ($THREADS threads, max_batch_tokens 4096)"
(cd "$REPO" && BENCH_OPTIONS='{"precision": "int8"}' cargo run -q --release -p pg_embed_core --example bench_pipeline -- \
    "$DATA" "$CORPUS" "$THREADS" 4096 "$SENTENCES" "$SINGLES" "$VECTORS") >"$RUNS/int8-rust.json"

step "sentence-transformers on PyTorch, float32 and bfloat16 autocast ($THREADS threads)"
"$BENCH_VENV/bin/python" "$BENCH/baselines.py" --model "$DATA" --corpus "$CORPUS" --systems st,st_bf16 \
    --threads "$THREADS" --batch-sizes 8,16,32 --sentences "$SENTENCES" --singles "$SINGLES" --vectors "$VECTORS" \
    >"$RUNS/torch.json"

# A backend's memory after load, when a server is there to ask.
backend_json="{}"
if [ -n "$PGBIN" ] && psql_cmd -d "$PG_EMBED_DB" -Atqc "SELECT 1 FROM pg_extension WHERE extname = 'pg_embed'" 2>/dev/null | grep -q 1; then
    step "a PostgreSQL backend (port $PG_EMBED_PORT) loading the model"
    ensure_pg_user_access "$DATA/model.safetensors" "$DATA"
    backend_json="$(psql_cmd -d "$PG_EMBED_DB" -v ON_ERROR_STOP=1 -Atq <<SQL
SET client_min_messages = warning;
SET pg_embed.threads = $THREADS;
SELECT embed.drop_model('$MODEL_NAME') FROM embed.models WHERE name = '$MODEL_NAME';
CREATE FUNCTION pg_temp.rss_mb() RETURNS float8 LANGUAGE sql AS \$\$
    SELECT (regexp_match(pg_read_file('/proc/self/status'), 'VmRSS:\s+(\d+) kB'))[1]::float8 / 1024
\$\$;
-- register_model loads the model into this backend's cache (it checks that it loads).
CREATE TEMP TABLE m AS SELECT pg_temp.rss_mb() AS before, clock_timestamp() AS t0;
SELECT count(*) = 1 AS registered FROM embed.register_model('$MODEL_NAME', '$MODEL_NAME');
CREATE TEMP TABLE v AS SELECT embed('$MODEL_NAME', 'warm up') AS e, clock_timestamp() AS t1;
SELECT jsonb_build_object('rss_before_load_mb', m.before, 'rss_after_load_mb', pg_temp.rss_mb(),
    'first_call_ms', extract(epoch FROM v.t1 - m.t0) * 1000, 'dim', array_length(v.e, 1)) FROM m, v;
SELECT embed.drop_model('$MODEL_NAME');
SQL
)" || { info "the backend could not load the model (above): its memory is not measured"; backend_json="{}"; }
    backend_json="$(printf '%s\n' "$backend_json" | grep '^{' | tail -1 || echo '{}')"
else
    info "no server with pg_embed on port $PG_EMBED_PORT: the backend's memory is not measured (make demo starts one)"
fi

load_after="$(cut -d' ' -f1-3 /proc/loadavg)"
info "load average after: $load_after (1, 5, 15 minutes; the bench itself adds about $THREADS)"

commit="$(git -C "$REPO" rev-parse --short HEAD)"
result="$OUT/decoder-$commit-$(date -u +%Y%m%dT%H%M%SZ).json"
"$BENCH_VENV/bin/python" - "$result" "$commit" "$THREADS" "$cpu" "$flags" "$RUNS/torch.json" "$backend_json" \
    "$load_before" "$load_after" "$RUNS/bf16-rust.json" "$RUNS/int8-rust.json" "$RUNS"/rust-*.json <<'PY'
import json, math, sys
path, commit, threads, cpu, flags, torch, backend, load_before, load_after, rust16, rust8 = sys.argv[1:12]
runs = [[json.loads(line) for line in open(r) if line.startswith("{")] for r in sys.argv[12:]]


def pg_embed_line(lines):
    """bench_pipeline's result line (not its machine or stages lines)."""
    return next(o for o in lines if o["system"].startswith("pg_embed"))


rs16 = pg_embed_line(json.loads(line) for line in open(rust16) if line.startswith("{"))
rs8 = pg_embed_line(json.loads(line) for line in open(rust8) if line.startswith("{"))
baselines = {o["key"]: o for o in (json.loads(line) for line in open(torch) if line.startswith("{"))}
pt16 = baselines["st_bf16"]
pt = baselines["st"]
backend = json.loads(backend)
rs_runs = [pg_embed_line(r) for r in runs]
machine = next(o for o in runs[0] if o["system"] == "machine")
rs = max(rs_runs, key=lambda o: o["sentences_per_s"])
# Single-sentence latency does not depend on max_batch_tokens: the best p50 of the runs.
single = min(rs_runs, key=lambda o: o["single_p50_ms"])


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


cosines = [cosine(a, b) for a, b in zip(rs["vectors"], pt["vectors"])]
ratios = {"sentences/s: pg_embed / PyTorch": rs["sentences_per_s"] / pt["sentences_per_s"],
          "single p50: pg_embed / PyTorch": single["single_p50_ms"] / pt["single_p50_ms"],
          "single p99: pg_embed / PyTorch": single["single_p99_ms"] / pt["single_p99_ms"]}
print(f"{'system':40} {'sent/s':>8} {'ratio':>6} {'p50 ms':>8} {'p99 ms':>8} {'ratio':>6}  best batch")
print(f"{'pg_embed pipeline (Rust)':40} {rs['sentences_per_s']:8.2f} {ratios['sentences/s: pg_embed / PyTorch']:6.2f} "
      f"{single['single_p50_ms']:8.1f} {single['single_p99_ms']:8.1f} {ratios['single p50: pg_embed / PyTorch']:6.2f}  "
      f"max_batch_tokens {rs['max_batch_tokens']}")
print(f"{pt['system']:40} {pt['sentences_per_s']:8.2f} {1:6.2f} {pt['single_p50_ms']:8.1f} {pt['single_p99_ms']:8.1f} "
      f"{1:6.2f}  batch size {pt['best_batch']}")
print("(ratios: to PyTorch; goal of the issue: sentences/s >= 1.2, single p50 <= 0.8)")
print("sentences/s by batch: pg_embed " + ", ".join(f"{o['max_batch_tokens']} tokens {o['sentences_per_s']:.2f}" for o in rs_runs)
      + "; PyTorch " + ", ".join(f"{r['batch_size']} {r['sentences_per_s']:.2f}" for r in pt["runs"]) + f" (torch {pt['torch']})")
sentences = rs["sentences"]
gflop = machine["corpus_useful_gflop"]
peak = machine["fma_peak_gflops"]
print(f"\ncorpus: {sentences} sentences, {machine['corpus_tokens']} tokens ({machine['corpus_tokens'] / sentences:.1f} per sentence), "
      f"{gflop:.0f} useful GFLOP; FMA peak ({machine['fma_peak_vector']}) of {threads} threads measured now: {peak:.0f} GFLOP/s")
for name, s in (("pg_embed pipeline (Rust)", rs), (pt["system"], pt)):
    rate = gflop * s["sentences_per_s"] / sentences
    print(f"  {name:40} {rate:7.0f} GFLOP/s ({100 * rate / peak:.0f} % of peak)")
print(f"\nmin cosine, pg_embed vs PyTorch, first {len(cosines)} vectors of the batch run: {min(cosines):.6f}")

# bfloat16: each against PyTorch's bf16 autocast; its vectors against PyTorch float32's.
print(f"\nbfloat16 {'':31} {'sent/s':>8} {'ratio':>6} {'p50 ms':>8} {'ratio':>6} {'GFLOP/s':>8} {'min cos':>9}")
bf16_rows = {}
for name, s in (("pg_embed pipeline (Rust), bfloat16", rs16), (pt16["system"], pt16)):
    rate = gflop * s["sentences_per_s"] / sentences
    cos = min(cosine(a, b) for a, b in zip(s["vectors"], pt["vectors"]))  # the first VECTORS of the batch run
    bf16_rows[name] = {"sentences_per_s_ratio": s["sentences_per_s"] / pt16["sentences_per_s"],
                       "single_p50_ratio": s["single_p50_ms"] / pt16["single_p50_ms"], "gflops": rate,
                       "min_cosine_to_float32": cos}
    print(f"{name:40} {s['sentences_per_s']:8.2f} {s['sentences_per_s'] / pt16['sentences_per_s']:6.2f} "
          f"{s['single_p50_ms']:8.1f} {s['single_p50_ms'] / pt16['single_p50_ms']:6.2f} {rate:8.0f} {cos:9.6f}")
print("(ratios: to PyTorch bf16 autocast; goal of the issue on AMX: sentences/s >= 1.5; min cos: to PyTorch float32)")
# int8: against pg_embed's bfloat16 (the issue's goal: sentences/s >= 1.5x, on VNNI CPUs).
rate = gflop * rs8["sentences_per_s"] / sentences
cos8 = min(cosine(a, b) for a, b in zip(rs8["vectors"], pt["vectors"]))
int8_row = {"sentences_per_s_vs_pg_embed_bf16": rs8["sentences_per_s"] / rs16["sentences_per_s"],
            "single_p50_vs_pg_embed_bf16": rs8["single_p50_ms"] / rs16["single_p50_ms"],
            "sentences_per_s_vs_pytorch_bf16": rs8["sentences_per_s"] / pt16["sentences_per_s"],
            "gops": rate, "min_cosine_to_float32": cos8}
print(f"\nint8: pg_embed {rs8['sentences_per_s']:.2f} sentences/s ({int8_row['sentences_per_s_vs_pg_embed_bf16']:.2f}x its "
      f"bfloat16, {int8_row['sentences_per_s_vs_pytorch_bf16']:.2f}x PyTorch bf16 autocast), single p50 "
      f"{rs8['single_p50_ms']:.1f} ms ({int8_row['single_p50_vs_pg_embed_bf16']:.2f}x bfloat16's), {rate:.0f} GOP/s, "
      f"min cosine to PyTorch float32 {cos8:.6f}")
print("\nmemory after load (RSS, MB):")
print(f"  pg_embed pipeline process: {rs['rss_before_load_mb']:.0f} before, {rs['rss_after_load_mb']:.0f} after load "
      f"(load {rs['load_ms']:.0f} ms), {rs['rss_after_run_mb']:.0f} after the batch run")
print(f"  PyTorch process:           {pt['rss_before_load_mb']:.0f} before, {pt['rss_after_load_mb']:.0f} after load "
      f"(the weights mapped, read as they are used), {pt['rss_after_run_mb']:.0f} after the runs")
if backend:
    print(f"  PostgreSQL backend:        {backend['rss_before_load_mb']:.0f} before, {backend['rss_after_load_mb']:.0f} after "
          f"register_model and the first embed() ({backend['first_call_ms']:.0f} ms, dim {backend['dim']})")
for s in rs_runs + [pt, rs16, pt16, rs8]:
    s.pop("vectors")
    s.pop("_corpus_vectors", None)
json.dump({"commit": commit, "threads": int(threads), "cpu": cpu, "flags": flags.split(),
           "load_average": {"before": load_before, "after": load_after}, "machine": machine,
           "systems": rs_runs + [pt, rs16, pt16, rs8], "backend": backend, "ratios": ratios, "min_cosine": min(cosines),
           "cosines": cosines, "bfloat16": bf16_rows, "int8": int8_row}, open(path, "w"), indent=1)
print(f"wrote {path}")
PY
