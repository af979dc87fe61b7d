#!/usr/bin/env bash
# The upgrade path, as a DBA takes it: a database that runs pg_embed 0.1.0 with a registered
# model, trigger-kept and backfilled tables, a vectorized table and their vectors is upgraded
# with ALTER EXTENSION pg_embed UPDATE (the scripts sql/pg_embed--A--B.sql, in turn), then
#   - keeps every vector, registration and backfill run;
#   - still works: triggers, a new backfill, the workers, HNSW search;
#   - has exactly the objects of a fresh install of the current version (every function's
#     definition, every table's columns, constraints, indexes and privileges, the
#     configuration tables pg_dump keeps: tests/ops/describe_extension.sql), so no script
#     forgot a change and none changed something twice.
# The released install scripts (sql/released/) are copied into the installation for the test
# and removed afterwards.
set -euo pipefail
here="$(dirname "${BASH_SOURCE[0]}")"
source "$here/lib.sh"
source "$here/scenario.sh"

step "upgrade: each released pg_embed with data, ALTER EXTENSION pg_embed UPDATE, compared with a fresh install"
extdir="$("$PG_CONFIG" --sharedir)/extension"
current="$(sed -n 's/^default_version = .\(.*\).$/\1/p' "$extdir/pg_embed.control")"
[ -n "$current" ] || fail "no default_version in $extdir/pg_embed.control"
installed=()
cleanup() {
    local f
    for f in "${installed[@]}"; do rm -f "$f"; done
    q -c "DROP DATABASE IF EXISTS pg_embed_upgraded WITH (FORCE)" -c "DROP DATABASE IF EXISTS pg_embed_fresh WITH (FORCE)" >/dev/null 2>&1 || true
}
trap cleanup EXIT
for f in "$REPO"/sql/released/pg_embed--*.sql; do
    dest="$extdir/$(basename "$f")"
    if [ ! -e "$dest" ]; then
        cp "$f" "$dest"
        installed+=("$dest")
    fi
done

describe() { PG_EMBED_DB="$1" q -At -f "$here/describe_extension.sql"; }

# A folder 0.7.0 computes differently from 0.6.0 (bge-m3 as FlagEmbedding's trainer saves it:
# the late fixture without its sentence-transformers modules), where the server resolves
# sources; the upgrade from 0.6.0 must name its registration (a WARNING) and make its calls fail until it
# is registered again.
M3_SOURCE="ops-bge-m3-trainer"
rm -rf "${MODEL_DIR:?}/$M3_SOURCE"
cp -r "$REPO/tests/fixtures/late/bge_m3" "$MODEL_DIR/$M3_SOURCE"
rm -rf "$MODEL_DIR/$M3_SOURCE/1_Pooling" "$MODEL_DIR/$M3_SOURCE/modules.json" \
    "$MODEL_DIR/$M3_SOURCE/sentence_bert_config.json" "$MODEL_DIR/$M3_SOURCE/config_sentence_transformers.json"
ensure_pg_user_access "$MODEL_DIR/$M3_SOURCE/model.safetensors" "$MODEL_DIR/$M3_SOURCE"
trap 'cleanup; rm -rf "${MODEL_DIR:?}/$M3_SOURCE"' EXIT
out="$(ops_workdir)"

for released in "$REPO"/sql/released/pg_embed--*.sql; do
    from="$(basename "$released" .sql)"; from="${from#pg_embed--}"
    q -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS pg_embed_upgraded WITH (FORCE)" \
      -c "CREATE DATABASE pg_embed_upgraded" >/dev/null
    PG_EMBED_DB=pg_embed_upgraded q -c "SET client_min_messages = warning" -c "CREATE EXTENSION vector" \
        -c "CREATE EXTENSION pg_embed VERSION '$from'" >/dev/null
    expect_eq "installed version" "$from" "$(PG_EMBED_DB=pg_embed_upgraded q1 "SELECT extversion FROM pg_extension WHERE extname = 'pg_embed'")"
    scenario_setup pg_embed_upgraded
    scenario_check pg_embed_upgraded "$from, before the upgrade"
    vectors_before="$(scenario_vectors pg_embed_upgraded)"
    models_before="$(PG_EMBED_DB=pg_embed_upgraded q1 "SELECT string_agg(name || ' ' || source || ' ' || revision, ',') FROM embed.models")"
    runs_before="$(PG_EMBED_DB=pg_embed_upgraded q1 "SELECT string_agg(id || ' ' || relation || ' ' || rows_done, ',' ORDER BY id) FROM embed.backfill_runs")"

    if [ "$from" = 0.6.0 ]; then
        PG_EMBED_DB=pg_embed_upgraded q -c "SET client_min_messages = warning" \
            -c "SELECT embed.register_model('m3_trainer', '$M3_SOURCE') IS NOT NULL" >/dev/null
    fi

    t0=$EPOCHREALTIME
    if ! notices="$(PG_EMBED_DB=pg_embed_upgraded q -c "ALTER EXTENSION pg_embed UPDATE" 2>&1 >/dev/null)"; then
        fail "ALTER EXTENSION pg_embed UPDATE from $from failed: $notices"
    fi
    pass "ALTER EXTENSION pg_embed UPDATE from $from took $(ms_between "$t0" "$EPOCHREALTIME") ms"
    if [ "$from" = 0.6.0 ]; then
        case "$notices" in
            *'model "m3_trainer" must be registered again'*) pass "the upgrade names the bge-m3 trainer folder's registration: ${notices%%;*}" ;;
            *) fail "the upgrade from 0.6.0 did not name m3_trainer in a WARNING; it said: $notices" ;;
        esac
        case "$notices" in
            *'"'"$MODEL"'"'*) fail "the upgrade named $MODEL, which computes as before: $notices" ;;
        esac
        if marked_call="$(PG_EMBED_DB=pg_embed_upgraded q -v VERBOSITY=verbose -c "SELECT embed('m3_trainer', 'data')" 2>&1)"; then
            fail "a call of the marked registration succeeded: $marked_call"
        fi
        case "$marked_call" in
            *'ERROR:  55000: model "m3_trainer" must be registered again'*) pass "its calls fail with 55000 until it is registered again" ;;
            *) fail "a call of the marked registration: want 55000 naming it, got: $marked_call" ;;
        esac
        PG_EMBED_DB=pg_embed_upgraded q -c "SET client_min_messages = warning" \
            -c "SELECT embed.register_model('m3_trainer', '$M3_SOURCE') IS NOT NULL" >/dev/null
        expect_eq "the registration made again is current" "32 true" "$(PG_EMBED_DB=pg_embed_upgraded q1 \
            "SELECT array_length(v, 1) || ' ' || (abs(sqrt((SELECT sum(x * x) FROM unnest(v) x)) - 1) < 1e-5) FROM (SELECT embed('m3_trainer', 'data') AS v) s")"
        PG_EMBED_DB=pg_embed_upgraded q -c "SELECT embed.drop_model('m3_trainer')" >/dev/null
    fi
    expect_eq "version after the upgrade" "$current" \
        "$(PG_EMBED_DB=pg_embed_upgraded q1 "SELECT extversion FROM pg_extension WHERE extname = 'pg_embed'")"
    expect_eq "vectors kept by the upgrade (digest)" "$vectors_before" "$(scenario_vectors pg_embed_upgraded)"
    expect_eq "registrations kept" "$models_before" \
        "$(PG_EMBED_DB=pg_embed_upgraded q1 "SELECT string_agg(name || ' ' || source || ' ' || revision, ',') FROM embed.models")"
    expect_eq "backfill runs kept" "$runs_before" \
        "$(PG_EMBED_DB=pg_embed_upgraded q1 "SELECT string_agg(id || ' ' || relation || ' ' || rows_done, ',' ORDER BY id) FROM embed.backfill_runs")"
    scenario_check pg_embed_upgraded "$from upgraded to $current"

    q -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS pg_embed_fresh WITH (FORCE)" \
      -c "CREATE DATABASE pg_embed_fresh" >/dev/null
    PG_EMBED_DB=pg_embed_fresh q -c "SET client_min_messages = warning" -c "CREATE EXTENSION vector" \
        -c "CREATE EXTENSION pg_embed" >/dev/null
    describe pg_embed_upgraded >"$out/upgraded-from-$from.txt"
    describe pg_embed_fresh >"$out/fresh-$current.txt"
    if ! diff -u "$out/fresh-$current.txt" "$out/upgraded-from-$from.txt" >"$out/diff-$from.txt"; then
        cat "$out/diff-$from.txt" >&2
        fail "the extension's objects after upgrading from $from differ from a fresh $current install (above: - fresh, + upgraded)"
    fi
    pass "$from upgraded equals a fresh $current install: $(wc -l <"$out/fresh-$current.txt") lines of catalog description, no difference"
done
