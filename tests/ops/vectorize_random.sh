#!/usr/bin/env bash
# The randomized, model-based test of the asynchronous path (tests/ops/vectorize_random.py:
# random DML in transactions from sessions with random settings, on every key type, plain
# and partitioned, with worker kills, the model dropped and registered again, and DDL;
# checked against an oracle after the queue drains). Odd seeds fill a dense vector(DIM)
# column with MODEL; even seeds a multi-vector real[] column with the ColBERT fixture
# (tests/fixtures/late/colbert, registered as MULTI_MODEL from MULTI_SOURCE in the model
# dir), plus a row trigger's real[] column. make test runs VECTORIZE_SEEDS seeds (default
# 14: each key type twice, once with each target); `make soak-vectorize` runs many more.
#   tests/ops/vectorize_random.sh [first seed] [seeds] [steps]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MULTI_MODEL="${MULTI_MODEL:-colbert}"
MULTI_SOURCE="late-colbert"
# The fixture, where the server (and its background workers) resolve sources: copied again
# only when it differs (a fresh copy, renamed into place: the files a backend has mapped are
# never overwritten).
fixture="$REPO/tests/fixtures/late/colbert"
if ! diff -rq "$fixture" "$MODEL_DIR/$MULTI_SOURCE" >/dev/null 2>&1; then
    rm -rf "$MODEL_DIR/$MULTI_SOURCE.new"
    mkdir -p "$MODEL_DIR"
    cp -r "$fixture" "$MODEL_DIR/$MULTI_SOURCE.new"
    rm -rf "$MODEL_DIR/$MULTI_SOURCE"
    mv "$MODEL_DIR/$MULTI_SOURCE.new" "$MODEL_DIR/$MULTI_SOURCE"
fi
ensure_pg_user_access "$MODEL_DIR/$MULTI_SOURCE/model.safetensors" "$MODEL_DIR/$MULTI_SOURCE"

FIRST="${1:-${VECTORIZE_FIRST_SEED:-1}}"
SEEDS="${2:-${VECTORIZE_SEEDS:-14}}"
STEPS="${3:-${VECTORIZE_STEPS:-50}}"
step "vectorize, randomized: seeds $FIRST..$((FIRST + SEEDS - 1)), $STEPS steps each, against an oracle"
PG_EMBED_PORT="$PG_EMBED_PORT" PG_EMBED_DB="$PG_EMBED_DB" PG_SUPERUSER="$PG_SUPERUSER" MODEL="$MODEL" DIM="$DIM" \
    MULTI_MODEL="$MULTI_MODEL" MULTI_SOURCE="$MULTI_SOURCE" \
    "$VENV/bin/python" "$(dirname "${BASH_SOURCE[0]}")/vectorize_random.py" \
    --first "$FIRST" --seeds "$SEEDS" --steps "$STEPS" || fail "vectorize_random: a seed failed (its replay command is above)"
pass "vectorize, randomized: $SEEDS seeds"
