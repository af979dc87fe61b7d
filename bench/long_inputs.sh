#!/usr/bin/env bash
# The long-input bench: one input per call, float32, through pg_embed's pipeline from Rust
# (bench/long.rs) and through PyTorch with SDPA attention (bench/long_data.py), with the same
# thread count, on tiny seeded models of long-context shapes (hidden 64, 2 layers, 4 heads:
# Qwen3 with 32,768 positions, ModernBERT with 8,192; bench/long_data.py makes them once into
# $MODEL_DIR/long-*). For each: seconds of the call and the process's peak memory growth over
# it (and, for pg_embed, what it still holds after the call). Then, when a server with
# pg_embed runs on PG_EMBED_PORT (`make demo`), how fast a statement_timeout and a
# pg_cancel_backend end one long call (a single forward pass of the longest input).
# Prints the CPU first; writes bench/results/long-<commit>-<time>.txt. Asserts nothing.
#
#   bench/long_inputs.sh [threads]      (default: the machine's cores)
#
# The Python side installs into bench/.venv as bench/run.sh does; another environment with
# torch, transformers 5.23: PG_EMBED_BENCH_VENV=/path/to/venv.
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
# shellcheck source=bench/lib.sh
source "$REPO/bench/lib.sh"

THREADS="${1:-$(nproc)}"
BENCH="$REPO/bench"
BENCH_VENV="${PG_EMBED_BENCH_VENV:-$BENCH/.venv}"
CORPUS="$BENCH/corpus.txt"
OUT="$BENCH/results"
mkdir -p "$OUT"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
CASES=("long-qwen3 8190" "long-qwen3 16384" "long-qwen3 29995" "long-modernbert 8188")

bench_header "$THREADS threads; one input per call, float32"
bench_venv "$BENCH_VENV"
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false
"$BENCH_VENV/bin/python" "$BENCH/long_data.py" make "$MODEL_DIR" 2>/dev/null
(cd "$REPO" && cargo build -q --release -p pg_embed_core --example bench_long)
BIN="$REPO/target/release/examples/bench_long"

report="$WORK/report.txt"
printf '%-24s %8s | %-28s | %-28s\n' "model, tokens" "" "pg_embed: s / peak growth" "PyTorch (SDPA): s / peak growth" | tee "$report"
for case in "${CASES[@]}"; do
    read -r model tokens <<<"$case"
    text="$WORK/$model-$tokens.txt"
    "$BENCH_VENV/bin/python" "$BENCH/long_data.py" input "$MODEL_DIR/$model" "$CORPUS" "$tokens" >"$text"
    ours="$("$BIN" "$MODEL_DIR/$model" "$text" "$THREADS")"
    theirs="$("$BENCH_VENV/bin/python" "$BENCH/long_data.py" torch "$MODEL_DIR/$model" "$text" "$THREADS" 2>/dev/null | grep '^{')"
    python3 - "$model" "$ours" "$theirs" <<'PY' | tee -a "$report"
import json, sys
model, ours, theirs = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
print(f"{model + ', ' + str(ours['tokens']):24} {'':8} | {ours['seconds']:6.2f} s / {ours['peak_growth_mib']:7.1f} MiB"
      f" (holds {ours['held_after_mib']:.1f}) | {theirs['seconds']:6.2f} s / {theirs['peak_growth_mib']:7.1f} MiB"
      f"   time ratio {ours['seconds'] / theirs['seconds']:.2f}, memory ratio {ours['peak_growth_mib'] / theirs['peak_growth_mib']:.2f}")
PY
done

# Cancel and timeout inside one forward pass, when a server is there.
if [ -n "$PGBIN" ] && psql_cmd -d "$PG_EMBED_DB" -Atqc "SELECT 1 FROM pg_extension WHERE extname = 'pg_embed'" 2>/dev/null | grep -q 1; then
    step "cancel and statement_timeout inside one forward pass (server on port $PG_EMBED_PORT)"
    ensure_pg_user_access "$MODEL_DIR/long-qwen3/model.safetensors" "$MODEL_DIR/long-qwen3"
    text="$WORK/long-qwen3-29995.txt"
    cp "$text" "$WORK/input.txt" && chmod 644 "$WORK/input.txt" && chmod 755 "$WORK"
    psql_cmd -d "$PG_EMBED_DB" -v ON_ERROR_STOP=1 -Atq >/dev/null <<SQL
SET client_min_messages = warning;
SELECT embed.drop_model('long-qwen3') FROM embed.models WHERE name = 'long-qwen3';
SELECT embed.register_model('long-qwen3', 'long-qwen3', '{"long_input": "error"}');
SQL
    run_long() { # $1: SQL before the call; prints the psql output with timing
        psql_cmd -d "$PG_EMBED_DB" -Atq 2>&1 <<SQL || true
SET pg_embed.threads = $THREADS;
SELECT array_length(embed('long-qwen3', 'warm up'), 1) AS warm \gset
$1
\timing on
SELECT array_length(embed('long-qwen3', pg_read_file('$WORK/input.txt')), 1);
SQL
    }
    full="$(run_long "")"
    info "the call uninterrupted: $(grep -o 'Time: [0-9.]* ms' <<<"$full" | tail -1)" | tee -a "$report"
    for timeout_ms in 500 1500; do
        out="$(run_long "SET statement_timeout = $timeout_ms;")"
        took="$(grep -o 'Time: [0-9.]*' <<<"$out" | tail -1 | cut -d' ' -f2)"
        info "statement_timeout $timeout_ms ms: ended after $took ms (overrun $(awk -v t="$took" -v l="$timeout_ms" 'BEGIN { printf "%.0f", t - l }') ms): $(grep -o 'canceling statement[^$]*' <<<"$out" | head -1)" | tee -a "$report"
    done
    log="$WORK/cancel.txt"
    (run_long "SELECT 'pid ' || pg_backend_pid();" >"$log") &
    job=$!
    for _ in $(seq 1 200); do grep -q '^pid ' "$log" 2>/dev/null && break; sleep 0.02; done
    pid="$(sed -n 's/^pid //p' "$log")"
    sleep 1
    t0=$EPOCHREALTIME
    psql_cmd -d "$PG_EMBED_DB" -Atqc "SELECT pg_cancel_backend($pid)" >/dev/null
    while [ "$(psql_cmd -d "$PG_EMBED_DB" -Atqc "SELECT count(*) FROM pg_stat_activity WHERE pid = $pid AND state = 'active'")" = 1 ]; do sleep 0.005; done
    t1=$EPOCHREALTIME
    wait "$job" || true
    info "pg_cancel_backend 1 s into the call: the statement ended $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", (b - a) * 1000 }') ms later (polled every 5 ms): $(grep -o 'canceling statement[^$]*' "$log" | head -1)" | tee -a "$report"
    psql_cmd -d "$PG_EMBED_DB" -Atqc "SELECT embed.drop_model('long-qwen3')" >/dev/null
else
    info "no server with pg_embed on port $PG_EMBED_PORT: cancel and timeout not measured (make demo starts one)"
fi

commit="$(git -C "$REPO" rev-parse --short HEAD)"
result="$OUT/long-$commit-$(date -u +%Y%m%dT%H%M%SZ).txt"
{ echo "CPU: $cpu, $(nproc) cores, $THREADS threads; flags: $flags"; cat "$report"; } >"$result"
info "written $result"
