# shellcheck shell=bash
# Shared by the bench scripts; source it after scripts/env.sh.

# Prints the CPU, its AVX-512 / AMX flags and the load average before the run (the bench's
# own threads add to it: more than its thread count means something else was running), and
# keeps them in `cpu`, `flags` and `load_before`. $1: what the run is (threads, inputs).
bench_header() {
    cpu="$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)"
    flags="$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx512|amx)' | sort | tr '\n' ' ' || true)"
    step "CPU: $cpu, $(nproc) cores; $1"
    info "avx512/amx flags: ${flags:-none}"
    load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
    info "load average before: $load_before"
}

# The Python baselines' virtualenv at $1, made on first use: PyTorch, sentence-transformers,
# transformers, ONNX Runtime, Pillow (large: PyTorch).
bench_venv() {
    [ -x "$1/bin/python" ] && return 0
    step "bench venv $1: torch, sentence-transformers, transformers, onnxruntime, Pillow, matplotlib (first run only)"
    python3 -m venv "$1"
    # matplotlib: bench/charts.py draws docs/charts/*.svg from bench/results with it.
    "$1/bin/pip" install -q torch "sentence-transformers==6.2.0" "transformers==5.23.0" onnxruntime onnx onnxscript pillow \
        "matplotlib==3.11.2"
}
