#!/usr/bin/env bash
# Load test in a running server (start one with `make demo`): tests/ops/load.sh for 60 s.
# pgbench with C clients (default 8) for T seconds (default 60); each transaction inserts a
# corpus sentence into a table whose statement-level embed trigger fills its vector(384)
# column (HNSW-indexed), then runs a similarity query with a freshly embedded sentence.
# Prints transactions/s, latency p50/p95/p99, the clients' private memory (RssAnon) after
# warm-up and near the end; fails on a failed transaction, a stored vector that differs
# from a fresh embed(), or a backend terminated by a signal.
#   bench/load.sh [clients] [seconds] [model]
set -euo pipefail
MODEL="${3:-minilm}" exec "$(dirname "${BASH_SOURCE[0]}")/../tests/ops/load.sh" "${1:-8}" "${2:-60}"
