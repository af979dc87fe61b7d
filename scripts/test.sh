#!/usr/bin/env bash
# `make test`: every test of pg_embed.
#   0. scripts/check_docker_test.py: docker/ checked statically (and the check itself tested)
#   c. cargo test -p pg_embed_core: the pgrx-free core crate alone (kernels, models, pooling,
#      pipeline; golden parity and property tests), no PostgreSQL needed
#   1. cargo pgrx test pg18   (#[pg_test] of the SQL layer in a throw-away cluster)
#   2. cargo pgrx install --release
#   3. a fresh, separate test server (port ${PG_EMBED_TEST_PORT:-28819}, .pg/test-data)
#   4. SQL-level regression suite tests/regress with the wheel's pg_regress
#   5. the test server's log must not show a backend "terminated by signal"
#   6. operational tests tests/ops against the same server: pg_cancel_backend of a long
#      batch, a backend's memory over 10,000 calls, pgbench load through the trigger
#      (OPS_LOAD_SECONDS, default 20), kill -9 during trigger INSERTs and a backfill
# TEST_ONLY=core runs only c; TEST_ONLY=pgrx runs 0, c and 1; TEST_ONLY=regress runs only 2-5;
# TEST_ONLY=ops 2, 3 and 6.
# PG_EMBED_SKIP_INSTALL=1 skips 2 (test the extension as already installed).
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

TEST_ONLY="${TEST_ONLY:-}"
case "$TEST_ONLY" in ""|core|pgrx|regress|ops) ;; *) die "TEST_ONLY must be core, pgrx, regress or ops, not '$TEST_ONLY'" ;; esac

t_all=$EPOCHREALTIME
declare -a summary=()
section() { step "$*"; t_section=$EPOCHREALTIME; section_name="$*"; }
section_done() {
    local d; d="$(elapsed_since "$t_section")"
    info "ok ($d)"
    summary+=("$(printf '%-52s %s' "$section_name" "$d")")
}

section "bootstrap + model"
"$REPO/scripts/bootstrap.sh"
pg_embed_resolve_paths
"$REPO/scripts/fetch_model.sh"
# The server (pgrx's test cluster and the regress server) reads the fixtures too.
ensure_pg_user_access "$REPO/tests/fixtures/golden.json" "$REPO/tests/fixtures"
export PG_EMBED_FIXTURES="$REPO/tests/fixtures"
section_done

cd "$REPO"

# ---- 0. static check of docker/ (no Docker engine here: the image is not built) ----------
if [ -z "$TEST_ONLY" ] || [ "$TEST_ONLY" = pgrx ]; then
    section "docker/ static check"
    python3 scripts/check_docker_test.py
    section_done
fi

# ---- c. the core crate ------------------------------------------------------------------
if [ -z "$TEST_ONLY" ] || [ "$TEST_ONLY" = pgrx ] || [ "$TEST_ONLY" = core ]; then
    section "cargo test -p pg_embed_core"
    cargo test -p pg_embed_core
    section_done
    if [ "$TEST_ONLY" = core ]; then
        step "core tests passed ($(elapsed_since "$t_all"))"
        exit 0
    fi
fi

# ---- 1. pgrx tests ---------------------------------------------------------------------
if [ -z "$TEST_ONLY" ] || [ "$TEST_ONLY" = pgrx ]; then
    section "cargo pgrx test pg$PG_MAJOR"
    if is_root; then
        # Postgres cannot run as root: pgrx runs it through `sudo -u $PG_USER`, which
        # scripts/shim/sudo provides with runuser. The data dir must be the user's.
        pgrx_data="$REPO/target/pgrx-test-data"
        mkdir -p "$pgrx_data"
        # Remove clusters left by interrupted runs (their postmaster is gone).
        for d in "$pgrx_data"/*/; do
            [ -d "$d" ] || continue
            pid="$(head -n 1 "$d/postmaster.pid" 2>/dev/null || true)"
            if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then rm -rf "$d"; fi
        done
        chown "$PG_USER:" "$pgrx_data"
        ensure_pg_user_access "$pgrx_data"
        info "as root: the test cluster runs as OS user $PG_USER (sudo -u via scripts/shim/sudo)"
        PATH="$REPO/scripts/shim:$PATH" \
            cargo pgrx test "pg$PG_MAJOR" --runas "$PG_USER" --pgdata "$pgrx_data"
    else
        cargo pgrx test "pg$PG_MAJOR"
    fi
    section_done
fi

# ---- 2-5. SQL-level regression suite against the release build ----------------------------
if [ "$TEST_ONLY" != pgrx ]; then
    # `cargo pgrx test` installed its debug build into the same PostgreSQL; put the
    # release build back before testing at the SQL level.
    section "cargo pgrx install --release"
    if [ -n "${PG_EMBED_SKIP_INSTALL:-}" ]; then
        info "skipped (PG_EMBED_SKIP_INSTALL is set)"
    else
        cargo pgrx install --release --pg-config "$PG_CONFIG"
    fi
    section_done

    section "test server"
    export PG_EMBED_PORT="${PG_EMBED_TEST_PORT:-28819}"
    export PGDATA="$REPO/.pg/test-data"
    export PG_LOG="$REPO/.pg/log/test-data.log"
    stop_test_server() { "$REPO/scripts/server.sh" stop >/dev/null 2>&1 || true; }
    "$REPO/scripts/server.sh" stop
    rm -rf "$PGDATA"
    rm -f "$PG_LOG"
    trap stop_test_server EXIT
    "$REPO/scripts/server.sh" start
    section_done

    if [ "$TEST_ONLY" != ops ]; then
        section "pg_regress tests/regress"
        outdir="$REPO/target/regress"
        rm -rf "$outdir"
        mkdir -p "$outdir"
        if [ -f tests/regress/schedule ]; then
            tests=(--schedule=tests/regress/schedule)
            info "tests: tests/regress/schedule"
        else
            tests=()
            for f in tests/regress/sql/*.sql; do
                [ -e "$f" ] || continue
                f="${f##*/}"
                tests+=("${f%.sql}")
            done
            [ ${#tests[@]} -gt 0 ] || die "no tests in tests/regress/sql"
            info "tests: ${tests[*]}"
        fi
        # pg_regress (installcheck mode: no --temp-instance) drops and re-creates the database.
        if ! "$PG_REGRESS" --bindir="$PGBIN" --host=127.0.0.1 --port="$PG_EMBED_PORT" \
            --user="$PG_SUPERUSER" --dbname=pg_embed_regress \
            --inputdir=tests/regress --outputdir="$outdir" "${tests[@]}"; then
            if [ -s "$outdir/regression.diffs" ]; then
                echo "---- $outdir/regression.diffs ----"
                cat "$outdir/regression.diffs"
            fi
            die "regression tests failed (results in $outdir)"
        fi
        section_done

        section "test server log"
        if grep -n "terminated by signal" "$PG_LOG"; then
            die "a server process crashed during the tests (see $PG_LOG)"
        fi
        info "no server process terminated by a signal ($PG_LOG)"
        section_done
    fi

    # Last: its crash test kills backends (and checks the log for exactly those itself).
    if [ "$TEST_ONLY" != regress ]; then
        section "operational tests tests/ops"
        PG_EMBED_DB=postgres "$REPO/tests/ops/run.sh"
        section_done
    fi
    "$REPO/scripts/server.sh" stop
    trap - EXIT
fi

echo
step "all tests passed ($(elapsed_since "$t_all"))"
for line in "${summary[@]}"; do info "$line"; done
