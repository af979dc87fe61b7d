#!/usr/bin/env bash
# `make soak-vectorize`: the randomized test of the asynchronous path (tests/ops/
# vectorize_random.py) on many seeds, against the test server of make test (port
# ${PG_EMBED_TEST_PORT:-28819}, .pg/test-data; started if it is not running), with this
# checkout's build installed. SEEDS (default 500), FIRST (1) and STEPS (80) choose the run;
# a failing seed prints the command that replays it.
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

"$REPO/scripts/bootstrap.sh"
pg_embed_resolve_paths
"$REPO/scripts/fetch_model.sh"
step "cargo pgrx install --release"
(cd "$REPO" && cargo pgrx install --release --pg-config "$PG_CONFIG")
export PG_EMBED_PORT="${PG_EMBED_TEST_PORT:-28819}"
export PGDATA="$REPO/.pg/test-data"
export PG_LOG="$REPO/.pg/log/$(basename "$PGDATA").log"
"$REPO/scripts/server.sh" status >/dev/null 2>&1 || "$REPO/scripts/server.sh" start
# A server started before this install still has the old library: restart it.
"$REPO/scripts/server.sh" stop >/dev/null && "$REPO/scripts/server.sh" start >/dev/null
"$PGBIN/psql" -X -q -h 127.0.0.1 -p "$PG_EMBED_PORT" -U "$PG_SUPERUSER" -d "$PG_EMBED_DB" -v ON_ERROR_STOP=1 \
    -c "SET client_min_messages = warning" -c "CREATE EXTENSION IF NOT EXISTS vector" \
    -c "CREATE EXTENSION IF NOT EXISTS pg_embed" -c "ALTER EXTENSION pg_embed UPDATE" \
    -c "SELECT embed.register_model('minilm', 'all-MiniLM-L6-v2')" >/dev/null
t0=$EPOCHREALTIME
"$REPO/tests/ops/vectorize_random.sh" "${FIRST:-1}" "${SEEDS:-500}" "${STEPS:-80}"
step "soak-vectorize: ${SEEDS:-500} seeds passed in $(elapsed_since "$t0")"
