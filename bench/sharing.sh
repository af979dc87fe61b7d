#!/usr/bin/env bash
# One copy of the weights per server, measured in a running server (`make demo`): for
# all-MiniLM-L6-v2 and a BERT-base-shaped model of random weights (bench/sharing_data.py),
#   - the first load in the server: a fresh backend's first embed() with no prepared file
#     (it builds and writes it), against the same with pg_embed.cache_dir = '' (each backend
#     builds its own private copy, as before the shared file existed);
#   - then tests/ops/sharing.sh with N backends (default 8), private and shared: the sum of
#     their PSS growth against one backend's, each backend's private memory, and a fresh
#     backend's first call minus a steady call.
# Prints the CPU first; writes bench/results/sharing-<commit>-<time>.txt. Asserts nothing
# beyond what tests/ops/sharing.sh checks.
#   bench/sharing.sh [backends]
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
# shellcheck source=bench/lib.sh
source "$REPO/bench/lib.sh"
source "$REPO/tests/ops/lib.sh"

N="${1:-8}"
BENCH_VENV="${PG_EMBED_BENCH_VENV:-$REPO/bench/.venv}"
OUT="$REPO/bench/results/sharing-$(git -C "$REPO" rev-parse --short HEAD)-$(date -u +%Y%m%dT%H%M%SZ).txt"
REPEATS=3

{
bench_header "$N backends"
bench_venv "$BENCH_VENV"
"$BENCH_VENV/bin/python" "$REPO/bench/sharing_data.py" "$MODEL_DIR/bench-bert-base-shape" "$MODEL_DIR/all-MiniLM-L6-v2"
chmod -R a+rX "$MODEL_DIR/bench-bert-base-shape"   # the server runs as another OS user

# first_call MODEL SETTING: ms of a fresh backend's first embed() (load included).
first_call() {
    local wait=""
    [ -n "${3:-}" ] && wait="$(wait_mapped_sql "$1")"
    q -At -c "$2" -c "\\timing on" -c "SELECT array_length(embed('$1', 'first load'), 1)" -c "\\timing off" -c "$wait SELECT 1" |
        sed -n 's/^Time: \([0-9.]*\) ms.*$/\1/p' | head -1
}
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

for pair in "minilm:all-MiniLM-L6-v2" "bert_base:bench-bert-base-shape"; do
    name="${pair%%:*}" source="${pair#*:}"
    step "$name ($source)"
    q -At -c "SET client_min_messages = warning" -c "SELECT embed.register_model('$name', '$source') IS NOT NULL" >/dev/null
    private="" built="" mapped=""
    for _ in $(seq 1 "$REPEATS"); do
        private+="$(first_call "$name" "SET pg_embed.cache_dir = ''") "
        # No prepared file: the next backend builds and writes it (removing it is safe:
        # backends that map it keep their mapping).
        q1 "SELECT file FROM embed.cache_files() WHERE needed" | xargs -r rm -f
        # (The session stays until its backend maps the file it wrote.)
        built+="$(first_call "$name" "SET client_min_messages = warning" wait) "
        mapped+="$(first_call "$name" "SET client_min_messages = warning") "
    done
    info "first load in the server, private copy (cache_dir ''): $private ms (median $(median <<<"$private"))"
    info "first load in the server, building the shared file:   $built ms (median $(median <<<"$built"))"
    info "a fresh backend's first call, the file existing:      $mapped ms (median $(median <<<"$mapped"))"
    MODEL="$name" MODE=private "$REPO/tests/ops/sharing.sh" "$N"
    MODEL="$name" MODE=shared "$REPO/tests/ops/sharing.sh" "$N"
done
} 2>&1 | tee "$OUT"
info "written: ${OUT#"$REPO"/}"
