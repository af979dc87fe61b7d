#!/usr/bin/env bash
# The AMX benchmarks, the same for anyone: prepares what the accelerator machine's host CPU
# (an AMX Xeon with no cargo, PostgreSQL or model hub; ../shared/device/README.md) needs to
# measure pg_embed against PyTorch and ONNX Runtime there, and prints the one command to run.
#
# It builds, here, the bench binaries (bench_pipeline, bench_images, bench_matmul: generic
# x86-64, the kernel chosen at run time) and the core crate's unit-test binary, strips and
# compresses them into devrun/ (ignored by git; the device call carries it), with
# all-MiniLM-L6-v2's small files (config, tokenizer, pooling; the weights are made there with
# seeded random values by bench/device_model.py: same shapes, same FLOPs), and checks that
# the carry fits the device's limit. The repository's tracked files travel anyway, so
# bench/device_run.sh (what runs there), the corpus and the data scripts are not copied.
#
#   bench/device.sh           prepare devrun/ and print the device command
#   bench/device.sh --here    also run bench/device_run.sh on this machine (THREADS "1 2",
#                             BASE_THREADS "2", the real all-MiniLM-L6-v2 and bench/.venv's
#                             Python by default), writing bench/results/device-<commit>-<time>.txt
#
# The device run writes $OUT/device.txt (every figure, the ratios, the CPU) and device.json
# (the systems' JSON lines); commit device.txt under bench/results/ as
# device-<commit>-<time>.txt with the CPU it names.
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"

DEVRUN="$REPO/devrun"
# The device carries the tracked files (about 40 MB) and the named ignored folders, 64 MiB in
# all; devrun/ gets what is left, with a margin.
CARRY_LIMIT=$((20 * 1024 * 1024))
MINILM="$REPO/models/all-MiniLM-L6-v2"

[ -d "$MINILM" ] || { echo "no $MINILM: run scripts/fetch_model.sh (make bootstrap) first" >&2; exit 1; }
grep -qx '/devrun/' "$REPO/.gitignore" || { echo "/devrun/ is not in .gitignore" >&2; exit 1; }

echo "== building the bench binaries and the core crate's unit tests (release)"
(cd "$REPO" && cargo build -q --release -p pg_embed_core --example bench_pipeline --example bench_images \
    --example bench_matmul)
tests_bin="$(cd "$REPO" && cargo test -q --release -p pg_embed_core --lib --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("profile", {}).get("test") and m.get("executable"):
        print(m["executable"])' | tail -1)"
[ -x "$tests_bin" ] || { echo "could not find the core crate's unit-test binary" >&2; exit 1; }

rm -rf "$DEVRUN"
mkdir -p "$DEVRUN/minilm"
for bin in bench_pipeline bench_images bench_matmul; do
    strip -o "$DEVRUN/$bin" "$REPO/target/release/examples/$bin"
done
strip -o "$DEVRUN/core_tests" "$tests_bin"
xz -T0 -6 "$DEVRUN"/bench_pipeline "$DEVRUN"/bench_images "$DEVRUN"/bench_matmul "$DEVRUN"/core_tests
for f in config.json tokenizer.json tokenizer_config.json special_tokens_map.json vocab.txt modules.json \
         sentence_bert_config.json config_sentence_transformers.json; do
    [ -e "$MINILM/$f" ] && cp "$MINILM/$f" "$DEVRUN/minilm/"
done
cp -r "$MINILM/1_Pooling" "$DEVRUN/minilm/"
git -C "$REPO" rev-parse --short HEAD >"$DEVRUN/commit"
git -C "$REPO" diff --quiet HEAD -- crates bench || echo "+changes" >>"$DEVRUN/commit"

size="$(du -sb "$DEVRUN" | cut -f1)"
echo "== devrun/: $((size / 1024)) kB (limit $((CARRY_LIMIT / 1024)) kB)"
[ "$size" -le "$CARRY_LIMIT" ] || { echo "devrun/ is larger than the device carry allows" >&2; exit 1; }

cat <<EOF
== on the AMX host, one device call (repository root; carry devrun):
   bash bench/device_run.sh
   (THREADS="1 2 4 8 16" and PARTS="tests minilm decoder images" by default; each part writes its
   figures as it goes, so a run cut short still returns what it measured)
EOF

if [ "${1:-}" = "--here" ]; then
    # shellcheck source=bench/lib.sh
    source "$REPO/bench/lib.sh"
    [ -n "${PYTHON:-}" ] || bench_venv "$REPO/bench/.venv"
    out="$(mktemp -d)"
    THREADS="${THREADS:-1 2}" BASE_THREADS="${BASE_THREADS:-2}" MINILM_DIR="${MINILM_DIR:-$MINILM}" \
        PYTHON="${PYTHON:-$REPO/bench/.venv/bin/python}" OUT="$out" bash "$REPO/bench/device_run.sh"
    name="device-$(tr -d '\n' <"$DEVRUN/commit")-$(date -u +%Y%m%dT%H%M%SZ)"
    mkdir -p "$REPO/bench/results"
    cp "$out/device.txt" "$REPO/bench/results/$name.txt"
    cp "$out/device.json" "$REPO/bench/results/$name.json"
    echo "== written bench/results/$name.txt"
fi
