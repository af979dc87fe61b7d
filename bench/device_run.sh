#!/usr/bin/env bash
# What runs on the AMX host (bench/device.sh prepares devrun/ and says how to call it; it
# runs on any Linux x86-64 machine with Python, PyTorch, transformers, sentence-transformers
# and ONNX Runtime). From the repository root:
#
#   bash bench/device_run.sh
#
# Parts (PARTS, default all), each measured side by side with the same thread count:
#   tests    the core crate's unit tests that need no model folder (the bfloat16 kernels, the
#            layers, the thread team, the stage timers, CPU dispatch), and bench_matmul
#   minilm   all-MiniLM-L6-v2's shape (random weights, bench/device_model.py; MINILM_DIR, when
#            set, names a folder of the real model to use instead), the bench
#            corpus: pg_embed's pipeline in bfloat16 and float32 at each of THREADS (default
#            "1 2 4 8 16"), with its stage breakdown; PyTorch bfloat16 autocast, ONNX Runtime
#            float32 and PyTorch float32 (bench/baselines.py) at each of BASE_THREADS (default
#            "2 16")
#   decoder  Qwen3-Embedding-0.6B's shape (bench/decoder_data.py), 100 sentences, pg_embed and
#            PyTorch in both precisions at each of DECODER_THREADS (default "2")
#   images   a ViT-B/16 (bench/images_data.py), 64 JPEGs end to end, pg_embed and PyTorch in
#            both precisions at each of IMAGE_THREADS (default "2")
# Writes $OUT (default bench/.cache/device)/device.json (every system's JSON line, tagged with part, threads and
# precision; the vectors dropped at the end) as it goes, then $OUT/device.txt (bench/device_report.py: the CPU, the tables,
# the ratios and the goals of the AMX issue). Asserts nothing; a part that fails is noted
# and the next one runs.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

D=devrun
O="${OUT:-$PWD/bench/.cache/device}"
PY="${PYTHON:-python3}"
THREADS="${THREADS:-1 2 4 8 16}"
BASE_THREADS="${BASE_THREADS:-2 16}"
DECODER_THREADS="${DECODER_THREADS:-2}"
IMAGE_THREADS="${IMAGE_THREADS:-2}"
PARTS="${PARTS:-tests minilm decoder images}"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 \
    TRANSFORMERS_VERBOSITY=error
mkdir -p "$O"
J="$O/device.json"
: >"$J"
W="$(mktemp -d)"
trap 'rm -rf "$W"' EXIT

# (Python's lzma where the machine has no xz.)
unxz_to() { if command -v xz >/dev/null; then xz -dc "$1" >"$2"; else "$PY" -c 'import lzma, shutil, sys
shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"; fi; }
for b in bench_pipeline bench_images bench_matmul core_tests; do
    unxz_to "$D/$b.xz" "$W/$b" && chmod +x "$W/$b" || { echo "missing $D/$b.xz: run bench/device.sh first" >&2; exit 1; }
done

# record PART THREADS PRECISION FILE: FILE's JSON lines into device.json, tagged (vectors dropped
# except the first few, which the report's cosines use).
record() {
    "$PY" - "$1" "$2" "$3" "$4" "$J" <<'PY'
import json, sys
part, threads, precision, path, out = sys.argv[1:]
with open(path) as f, open(out, "a") as o:
    for line in f:
        if line.startswith("{"):
            d = json.loads(line)
            d.update({"part": part, "bench_threads": int(threads), "precision": precision})
            o.write(json.dumps(d) + "\n")
PY
}
note() { echo "{\"part\": \"$1\", \"system\": \"note\", \"note\": \"$2\"}" >>"$J"; echo "$1: $2" >&2; }

{
    lscpu
    grep -o -E 'amx[a-z_0-9]*|avx512_bf16|avx512_fp16|avx512f ' /proc/cpuinfo | sort | uniq -c
    "$PY" -c 'import torch, onnxruntime, transformers; print("torch", torch.__version__, "onnxruntime", onnxruntime.__version__, "transformers", transformers.__version__)'
    echo "pg_embed $(tr -d '\n' <"$D/commit")"
} >"$O/machine.txt" 2>&1
grep -E 'Model name|^CPU\(s\)|torch|pg_embed' "$O/machine.txt" >&2

has() { case " $PARTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

if has tests; then
    echo "== tests" >&2
    (cd "$W" && timeout 300 ./core_tests kernels layers threads stages cpu:: --test-threads 4) >"$O/tests.txt" 2>&1
    rc=$?
    note tests "core unit tests (kernels layers threads stages cpu), exit $rc: $(grep 'test result' "$O/tests.txt" | tail -1)"
    timeout 120 "$W/bench_matmul" 1 >"$O/matmul.txt" 2>&1
    n="$(nproc)"
    timeout 120 "$W/bench_matmul" "$n" >>"$O/matmul.txt" 2>&1
fi

if has minilm; then
    echo "== minilm" >&2
    if [ -n "${MINILM_DIR:-}" ]; then
        ln -s "$(cd "$MINILM_DIR" && pwd -P)" "$W/minilm"
        echo "{\"part\": \"minilm\", \"system\": \"note\", \"note\": \"the real weights ($MINILM_DIR)\"}" >>"$J"
    fi
    if [ -e "$W/minilm" ] || "$PY" bench/device_model.py "$D/minilm" "$W/minilm" 2>"$O/minilm_model.err"; then
        for t in $THREADS; do
            for p in bfloat16 float32; do
                BENCH_OPTIONS="{\"precision\": \"$p\"}" timeout 300 "$W/bench_pipeline" "$W/minilm" bench/corpus.txt \
                    "$t" 4096 2000 200 64 >"$W/pg.json" 2>"$O/minilm_pg_${p}_$t.err" \
                    && record minilm "$t" "$p" "$W/pg.json" || note minilm "pg_embed $p at $t threads failed"
                echo "pg_embed $p $t threads: $(grep -o '"sentences_per_s":[0-9.]*' "$W/pg.json" | head -1)" >&2
            done
            case " $BASE_THREADS " in
                *" $t "*)
                    OMP_NUM_THREADS="$t" timeout 600 "$PY" bench/baselines.py --model "$W/minilm" --corpus bench/corpus.txt \
                        --threads "$t" --systems st_bf16,ort,st --batch-sizes 32,64 --singles 200 --sentences 2000 \
                        --vectors 64 >"$W/base.json" 2>"$O/minilm_base_$t.err" \
                        && record minilm "$t" baseline "$W/base.json" || note minilm "baselines at $t threads failed"
                    ;;
            esac
        done
    else
        note minilm "could not make the model: $(tail -1 "$O/minilm_model.err")"
    fi
fi

if has decoder; then
    echo "== decoder" >&2
    if timeout 300 "$PY" bench/decoder_data.py "$W/decoder" bench/corpus.txt 2>"$O/decoder_model.err"; then
        for t in $DECODER_THREADS; do
            for p in bfloat16 float32; do
                BENCH_OPTIONS="{\"precision\": \"$p\"}" timeout 300 "$W/bench_pipeline" "$W/decoder" bench/corpus.txt \
                    "$t" 4096 100 20 16 >"$W/pg.json" 2>"$O/decoder_pg_${p}_$t.err" \
                    && record decoder "$t" "$p" "$W/pg.json" || note decoder "pg_embed $p at $t threads failed"
            done
            OMP_NUM_THREADS="$t" timeout 600 "$PY" bench/baselines.py --model "$W/decoder" --corpus bench/corpus.txt \
                --threads "$t" --systems st_bf16,st --batch-sizes 8,16,32 --singles 20 --sentences 100 --vectors 16 \
                >"$W/base.json" 2>"$O/decoder_base_$t.err" \
                && record decoder "$t" baseline "$W/base.json" || note decoder "baselines at $t threads failed"
        done
    else
        note decoder "could not make the model: $(tail -1 "$O/decoder_model.err")"
    fi
fi

if has images; then
    echo "== images" >&2
    if timeout 300 "$PY" bench/images_data.py "$W/images" 2>"$O/images_data.err"; then
        for t in $IMAGE_THREADS; do
            for p in bfloat16 float32; do
                BENCH_OPTIONS="{\"precision\": \"$p\"}" timeout 300 "$W/bench_images" "$W/images/model" \
                    "$W/images/images" "$t" >"$W/pg.json" 2>"$O/images_pg_${p}_$t.err" \
                    && record images "$t" "$p" "$W/pg.json" || note images "pg_embed $p at $t threads failed"
            done
            for bf16 in --bf16 ""; do
                # shellcheck disable=SC2086
                OMP_NUM_THREADS="$t" timeout 600 "$PY" bench/images_baseline.py --model "$W/images/model" \
                    --images "$W/images/images" --threads "$t" $bf16 >"$W/base.json" 2>"$O/images_base_$t.err" \
                    && record images "$t" "baseline${bf16:+ bf16}" "$W/base.json" \
                    || note images "PyTorch ${bf16:-float32} at $t threads failed"
            done
        done
    else
        note images "could not make the data: $(tail -1 "$O/images_data.err")"
    fi
fi

"$PY" bench/device_report.py "$O/machine.txt" "$J" >"$O/device.txt" 2>&1
# The vectors were for the report's cosines; the JSON kept is the figures.
"$PY" - "$J" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
with open(sys.argv[1], "w") as f:
    for r in rows:
        r.pop("vectors", None)
        f.write(json.dumps(r) + "\n")
PY
cat "$O/device.txt"
