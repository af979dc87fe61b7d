#!/usr/bin/env bash
# The rerank bench: a Qwen3-Reranker-0.6B-shaped causal-LM reranker (28 layers, hidden 1024,
# vocabulary 151,669, random weights of the real shape; CrossEncoder's Transformer
# (text-generation) + LogitScore(yes, no), Qwen3-Reranker's chat template; bench/rerank_data.py)
# over 100 query-document pairs of the bench corpus, in bfloat16: pg_embed's pipeline called
# from Rust with {"precision": "bfloat16"} (bench/rerank.rs) and sentence-transformers'
# CrossEncoder.predict under bfloat16 autocast on PyTorch CPU, with the same thread count.
# Prints the CPU, pairs/s of each, their ratio, and the largest difference of the raw scores
# (logit(yes) - logit(no)) between the two. Writes bench/results/rerank-<commit>-<time>.json.
# Not part of the tests; asserts nothing.
#
#   bench/rerank.sh [threads]        (default 2)
#
# RERANK_REPEATS (default 2): pg_embed's runs, the best kept; RERANK_BATCHES (default "8 16"):
# the CrossEncoder batch sizes tried, the best kept. At the real depth on 2 AVX2 cores one
# PyTorch pass takes about half an hour: RERANK_REPEATS=1 RERANK_BATCHES=8 keeps it to one each.
#
# The model (2.4 GB of float32) is generated once (seeded) into $MODEL_DIR/bench-qwen3-reranker-shape;
# PG_EMBED_BENCH_LAYERS=2 makes a 2-layer model instead (a smoke run, in its own folder).
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
# shellcheck source=bench/lib.sh
source "$REPO/bench/lib.sh"

THREADS="${1:-2}"
BENCH="$REPO/bench"
BENCH_VENV="${PG_EMBED_BENCH_VENV:-$BENCH/.venv}"
LAYERS="${PG_EMBED_BENCH_LAYERS:-28}"
DATA="$MODEL_DIR/bench-qwen3-reranker-shape$([ "$LAYERS" = 28 ] || echo "-$LAYERS-layers")"
OUT="$BENCH/results"
mkdir -p "$OUT"
RUNS="$(mktemp -d)"
trap 'rm -rf "$RUNS"' EXIT

bench_header "$THREADS threads; 100 query-document pairs; bfloat16"
bench_venv "$BENCH_VENV"
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false

[ -e "$DATA/done" ] || step "generating the Qwen3-Reranker-0.6B-shaped model ($LAYERS layers; first run only)"
PG_EMBED_BENCH_LAYERS="$LAYERS" "$BENCH_VENV/bin/python" "$BENCH/rerank_data.py" "$DATA" "$BENCH/corpus.txt"

step "pg_embed pipeline from Rust, bfloat16 ($THREADS threads)"
(cd "$REPO" && BENCH_OPTIONS='{"precision": "bfloat16"}' cargo run -q --release -p pg_embed_core --example bench_rerank -- \
    "$DATA" "$THREADS" 8192 "${RERANK_REPEATS:-2}") >"$RUNS/rust.json"

step "sentence-transformers CrossEncoder.predict under bfloat16 autocast ($THREADS threads)"
"$BENCH_VENV/bin/python" - "$DATA" "$THREADS" "${RERANK_BATCHES:-8 16}" >"$RUNS/torch.json" <<'PY'
import json, sys, time
import torch
from sentence_transformers import CrossEncoder

data, threads, batches = sys.argv[1], int(sys.argv[2]), [int(b) for b in sys.argv[3].split()]
torch.set_num_threads(threads)
pairs = [tuple(p) for p in json.load(open(f"{data}/pairs.json"))]
t0 = time.perf_counter()
ce = CrossEncoder(data, device="cpu")
load_ms = (time.perf_counter() - t0) * 1000
best, scores = float("inf"), None
for batch_size in batches:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        t = time.perf_counter()
        s = ce.predict(pairs, batch_size=batch_size, activation_fn=torch.nn.Identity(), convert_to_numpy=True)
        elapsed = time.perf_counter() - t
    if elapsed < best:
        best, scores, best_batch = elapsed, s, batch_size
print(json.dumps({"system": "sentence-transformers CrossEncoder (PyTorch bf16 autocast)", "torch": torch.__version__,
                  "threads": threads, "best_batch": best_batch, "pairs": len(pairs), "pairs_per_s": len(pairs) / best,
                  "load_ms": load_ms, "scores": [float(x) for x in scores]}))
PY

commit="$(git -C "$REPO" rev-parse --short HEAD)"
result="$OUT/rerank-$commit-$(date -u +%Y%m%dT%H%M%SZ).json"
"$BENCH_VENV/bin/python" - "$result" "$commit" "$cpu" "$load_before" "$RUNS/rust.json" "$RUNS/torch.json" "$LAYERS" <<'PY'
import json, sys
path, commit, cpu, load_before, rust, torch_run, layers = sys.argv[1:8]
rs = json.loads([l for l in open(rust) if l.startswith("{")][-1])
pt = json.loads([l for l in open(torch_run) if l.startswith("{")][-1])
diff = max(abs(a - b) for a, b in zip(rs["scores"], pt["scores"]))
print(f"CPU: {cpu}; {layers} layers; {rs['pairs']} pairs, {rs['tokens']} tokens")
print(f"{'system':58} {'pairs/s':>8}")
print(f"{rs['system'] + ', bfloat16 (' + rs['kernel'] + ')':58} {rs['pairs_per_s']:8.2f}")
print(f"{pt['system'] + ', batch ' + str(pt['best_batch']):58} {pt['pairs_per_s']:8.2f}")
print(f"ratio pg_embed / PyTorch: {rs['pairs_per_s'] / pt['pairs_per_s']:.2f}; "
      f"largest |raw score difference|: {diff:.3e}")
json.dump({"commit": commit, "cpu": cpu, "layers": int(layers), "load_average_before": load_before,
           "systems": [rs, pt], "max_abs_score_difference": diff}, open(path, "w"), indent=1)
print(f"wrote {path}")
PY
