#!/usr/bin/env bash
# The randomized, model-based test of the asynchronous path (tests/ops/vectorize_random.py:
# random DML in transactions from sessions with random settings, on every key type, plain
# and partitioned, with worker kills, the model dropped and registered again, and DDL;
# checked against an oracle after the queue drains). make test runs VECTORIZE_SEEDS seeds
# (default 14: each key type twice); `make soak-vectorize` runs many more.
#   tests/ops/vectorize_random.sh [first seed] [seeds] [steps]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

FIRST="${1:-${VECTORIZE_FIRST_SEED:-1}}"
SEEDS="${2:-${VECTORIZE_SEEDS:-14}}"
STEPS="${3:-${VECTORIZE_STEPS:-50}}"
step "vectorize, randomized: seeds $FIRST..$((FIRST + SEEDS - 1)), $STEPS steps each, against an oracle"
PG_EMBED_PORT="$PG_EMBED_PORT" PG_EMBED_DB="$PG_EMBED_DB" PG_SUPERUSER="$PG_SUPERUSER" MODEL="$MODEL" DIM="$DIM" \
    "$VENV/bin/python" "$(dirname "${BASH_SOURCE[0]}")/vectorize_random.py" \
    --first "$FIRST" --seeds "$SEEDS" --steps "$STEPS" || fail "vectorize_random: a seed failed (its replay command is above)"
pass "vectorize, randomized: $SEEDS seeds"
