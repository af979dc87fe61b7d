#!/usr/bin/env bash
# The operational tests, in order, against a running server with pg_embed installed (make
# test runs them on its test server after the regression suite): cancel, memory, load,
# sharing, sharing across databases, vectorize, vectorize_random (VECTORIZE_SEEDS seeds), upgrade, dump and restore, hot standby, building (bounded memory and admission of builds; its kill -9 ends every session), crash (its kill -9
# ends every session), and stats last (it restarts the server with pg_embed preloaded, and back). all-MiniLM-L6-v2 is registered as "minilm" in the database PG_EMBED_DB. OPS_LOAD_SECONDS sets the load test's length (default 20).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

q -c "SET client_min_messages = warning" \
  -c "CREATE EXTENSION IF NOT EXISTS vector" \
  -c "CREATE EXTENSION IF NOT EXISTS pg_embed" \
  -c "SELECT embed.register_model('$MODEL', 'all-MiniLM-L6-v2')" >/dev/null
here="$(dirname "${BASH_SOURCE[0]}")"
# Each test, timed: "seconds ops name" lines into OPS_TIMES (make test lists the slowest).
times="${OPS_TIMES:-/dev/null}"
: >"$times"
run() {
    local t0=$EPOCHREALTIME
    "$here/$1" "${@:2}"
    awk -v a="$t0" -v b="$EPOCHREALTIME" -v n="$1" 'BEGIN { printf "%.1f ops %s\n", b - a, n }' >>"$times"
}
run cancel.sh
run memory.sh
run load.sh 8 "${OPS_LOAD_SECONDS:-20}"
run sharing.sh 8
run sharing_databases.sh
run vectorize.sh
run vectorize_random.sh
run upgrade.sh
run dump_restore.sh
run standby.sh
run building.sh
run crash.sh
run stats.sh
