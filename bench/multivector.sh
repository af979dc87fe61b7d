#!/usr/bin/env bash
# The MultiVectorEncoder bench: a MiniLM-shaped MultiVectorEncoder as sentence-transformers 6.2
# saves it (the real all-MiniLM-L6-v2 weights, Dense 384 -> 128 seeded, MultiVectorMask,
# Normalize; bench/multivector_data.py), the token vectors of the first 500 bench corpus
# sentences as documents: pg_embed's pipeline called from Rust (bench/multivector.rs, what
# embed_multi(model, text[]) computes) against MultiVectorEncoder.encode_document on PyTorch,
# float32, the same thread count, best of 3 runs after a warm-up each. Prints the CPU,
# documents/s of each, their ratio, and the largest difference of the first document's rows.
# Writes bench/results/multivector-<commit>-<time>.json. Not part of the tests; asserts nothing.
#
#   bench/multivector.sh [threads]        (default 2)
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
# shellcheck source=bench/lib.sh
source "$REPO/bench/lib.sh"

THREADS="${1:-2}"
DOCS="${MULTIVECTOR_DOCS:-500}"
BENCH="$REPO/bench"
BENCH_VENV="${PG_EMBED_BENCH_VENV:-$BENCH/.venv}"
DATA="$MODEL_DIR/bench-multivector-minilm"
OUT="$BENCH/results"
mkdir -p "$OUT"
RUNS="$(mktemp -d)"
trap 'rm -rf "$RUNS"' EXIT

bench_header "$THREADS threads; $DOCS documents; float32"
bench_venv "$BENCH_VENV"
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false
"$REPO/scripts/fetch_model.sh" >/dev/null
"$BENCH_VENV/bin/python" "$BENCH/multivector_data.py" build "$DATA" "$MODEL_DIR/all-MiniLM-L6-v2"

step "pg_embed pipeline from Rust, embed_multi documents ($THREADS threads)"
(cd "$REPO" && cargo run -q --release -p pg_embed_core --example bench_multivector -- \
    "$DATA" "$BENCH/corpus.txt" "$DOCS" "$THREADS") >"$RUNS/rust.json"

step "sentence-transformers MultiVectorEncoder.encode_document ($THREADS threads)"
"$BENCH_VENV/bin/python" "$BENCH/multivector_data.py" baseline "$DATA" "$BENCH/corpus.txt" "$DOCS" "$THREADS" 3 >"$RUNS/torch.json"

commit="$(git -C "$REPO" rev-parse --short HEAD)"
result="$OUT/multivector-$commit-$(date -u +%Y%m%dT%H%M%SZ).json"
"$BENCH_VENV/bin/python" - "$result" "$commit" "$cpu" "$load_before" "$RUNS/rust.json" "$RUNS/torch.json" <<'PY'
import json, sys
path, commit, cpu, load_before, rust, torch_run = sys.argv[1:7]
rs = json.loads([l for l in open(rust) if l.startswith("{")][-1])
pt = json.loads([l for l in open(torch_run) if l.startswith("{")][-1])
assert len(rs["first"]) == len(pt["first"]), "the first document's rows differ in number"
diff = max(abs(a - b) for ra, rb in zip(rs["first"], pt["first"]) for a, b in zip(ra, rb))
print(f"CPU: {cpu}; {rs['documents']} documents, {rs['rows']} token rows (PyTorch: {pt['rows']})")
print(f"{'system':70} {'documents/s':>12}")
print(f"{rs['system'] + ' (' + rs['kernel'] + ')':70} {rs['documents_per_s']:12.1f}")
print(f"{pt['system']:70} {pt['documents_per_s']:12.1f}")
print(f"ratio pg_embed / PyTorch: {rs['documents_per_s'] / pt['documents_per_s']:.2f}; "
      f"largest |difference| of the first document's rows: {diff:.2e}")
for s in (rs, pt):
    s.pop("first")
json.dump({"commit": commit, "cpu": cpu, "load_average_before": load_before, "systems": [rs, pt],
           "max_abs_difference_first_document": diff}, open(path, "w"), indent=1)
print(f"wrote {path}")
PY
