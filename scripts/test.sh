#!/usr/bin/env bash
# `make test`: every test of pg_embed, on one release build (the dependencies are compiled
# once and shared by every stage: the build the tests run is the build that is installed).
#   0. scripts/check_docker_test.py: docker/ checked statically (and the check itself tested);
#      scripts/check_structure.py: no import cycle between files, no source file over 800 lines
#   c. cargo test --release -p pg_embed_core: the pgrx-free core crate alone (kernels, models,
#      pooling, pipeline; golden parity and property tests), no PostgreSQL needed; then again
#      with PG_EMBED_CPU set to each CPU kind below this one (the paths those machines take)
#   1. cargo pgrx test --release pg18 (#[pg_test] of the SQL layer in a throw-away cluster)
#   2. cargo pgrx install --release
#   3. a fresh, separate test server (port ${PG_EMBED_TEST_PORT:-28819}, .pg/test-data)
#   4. SQL-level regression suite tests/regress with the server's pg_regress (a suite marked
#      "-- requires: vector" is skipped, with a printed reason, where pgvector is missing)
#   5. the test server's log must not show a backend "terminated by signal"
#   6. operational tests tests/ops against the same server: pg_cancel_backend of a long
#      batch, a backend's memory over 10,000 calls, pgbench load through the trigger
#      (OPS_LOAD_SECONDS, default 20), shared weights, the vectorize workers, the upgrade
#      from every released version, dump and restore, a hot standby, kill -9 during trigger
#      INSERTs and a backfill
# At the end: the time of each stage and the slowest test suites.
# TEST_ONLY=core runs only c; TEST_ONLY=pgrx runs 0, c and 1; TEST_ONLY=regress runs only 2-5;
# TEST_ONLY=ops 2, 3 and 6.
# REGRESS_TESTS="00_setup 73_late" limits the regression suites to those named.
# PG_EMBED_SKIP_INSTALL=1 skips 2 (test the extension as already installed).
# PG_EMBED_PG=15 (make test-pg15): stages 1-5 against Debian's PostgreSQL 15 (port 28829,
# .pg/test-data-15); the core crate does not depend on the PostgreSQL version.
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

TEST_ONLY="${TEST_ONLY:-}"
case "$TEST_ONLY" in ""|core|pgrx|regress|ops) ;; *) die "TEST_ONLY must be core, pgrx, regress or ops, not '$TEST_ONLY'" ;; esac
if [ "$PG_MAJOR" != 18 ]; then
    case "$TEST_ONLY" in ""|pgrx|regress) ;; *) die "PG_EMBED_PG=$PG_MAJOR runs the pgrx and regress stages, not TEST_ONLY=$TEST_ONLY" ;; esac
fi
# Run the core tests, the #[pg_test]s, the regression suite and the ops tests?
want() {
    case "$1" in
        core) [ "$PG_MAJOR" = 18 ] && { [ -z "$TEST_ONLY" ] || [ "$TEST_ONLY" = pgrx ] || [ "$TEST_ONLY" = core ]; } ;;
        pgrx) [ -z "$TEST_ONLY" ] || [ "$TEST_ONLY" = pgrx ] ;;
        server) [ -z "$TEST_ONLY" ] || [ "$TEST_ONLY" = regress ] || [ "$TEST_ONLY" = ops ] ;;
        regress) [ -z "$TEST_ONLY" ] || [ "$TEST_ONLY" = regress ] ;;
        ops) [ "$PG_MAJOR" = 18 ] && { [ -z "$TEST_ONLY" ] || [ "$TEST_ONLY" = ops ]; } ;;
    esac
}
# Suites and their times, for the list of the slowest at the end.
declare -a suite_times=()
# cargo test output on stdin: each test binary's "finished in" time, as "seconds name".
collect_cargo_times() {
    awk -v stage="$1" '
        /^ *Running / { name = ($2 == "unittests") ? $3 : $2 } /^ *Doc-tests / { name = "doc-tests:" $2 }
        /^test result:/ { for (i = 1; i <= NF; i++) if ($i == "in") { t = $(i + 1); sub(/s$/, "", t); printf "%s %s %s\n", t, stage, name } }'
}

t_all=$EPOCHREALTIME
declare -a summary=()
# The CPU first: which kernels ran depends on it (a failure is read against it).
step "CPU kind"
while IFS= read -r line; do info "$line"; done < <(cpu_kind)
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
mkdir -p target

# ---- 0. static checks: docker/ (no Docker engine here: the image is not built), the
# code's structure (no import cycle between files, no source file over 800 lines), and the
# docs (every relative link of README.md and docs/ resolves; every SQL function, view and
# setting is in docs/sql-reference.md) ------------------------------------------------------
if [ "$PG_MAJOR" = 18 ] && want pgrx; then
    section "static checks (docker/, structure, docs)"
    python3 scripts/check_docker_test.py
    python3 scripts/check_structure.py
    python3 scripts/check_docs_test.py
    python3 scripts/check_docs.py
    section_done
fi

# ---- c. the core crate ------------------------------------------------------------------
if want core; then
    section "cargo test --release -p pg_embed_core"
    cargo test --release -p pg_embed_core 2>&1 | tee "$REPO/target/test-core.log"
    mapfile -t -O "${#suite_times[@]}" suite_times < <(collect_cargo_times core <"$REPO/target/test-core.log")
    section_done
    # The same tests on the paths slower CPU kinds take (crates/pg_embed_core/src/cpu.rs),
    # forced with PG_EMBED_CPU: every kind below this CPU's, so that a machine of any kind
    # runs every path a user's machine could take (AMX itself only where the CPU has it).
    for cap in $(cpu_caps_below); do
        section "cargo test --release -p pg_embed_core, PG_EMBED_CPU=$cap"
        PG_EMBED_CPU="$cap" cargo test --release -p pg_embed_core 2>&1 | tee "$REPO/target/test-core-$cap.log"
        mapfile -t -O "${#suite_times[@]}" suite_times < <(collect_cargo_times "core-$cap" <"$REPO/target/test-core-$cap.log")
        section_done
    done
    if [ "$TEST_ONLY" = core ]; then
        step "core tests passed ($(elapsed_since "$t_all"))"
        exit 0
    fi
fi

# ---- 1. pgrx tests ---------------------------------------------------------------------
if want pgrx; then
    section "cargo pgrx test --release pg$PG_MAJOR"
    # The test binary installs the extension with $CARGO_PGRX: in a clean environment, so
    # that install shares the build of the dependencies (see the script).
    export CARGO_PGRX="$REPO/scripts/cargo-pgrx-clean-env"
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
            cargo pgrx test --release "pg$PG_MAJOR" --runas "$PG_USER" --pgdata "$pgrx_data" 2>&1 \
            | tee "$REPO/target/test-pgrx.log"
    else
        cargo pgrx test --release "pg$PG_MAJOR" 2>&1 | tee "$REPO/target/test-pgrx.log"
    fi
    mapfile -t -O "${#suite_times[@]}" suite_times < <(collect_cargo_times "pg_test" <"$REPO/target/test-pgrx.log")
    section_done
fi

# ---- 2-5. SQL-level regression suite against the release build ----------------------------
if want server; then
    # `cargo pgrx test` installed its build with the #[pg_test]s into the same PostgreSQL;
    # put the plain release build in its place before testing at the SQL level.
    section "cargo pgrx install --release (PostgreSQL $PG_MAJOR)"
    if [ -n "${PG_EMBED_SKIP_INSTALL:-}" ]; then
        info "skipped (PG_EMBED_SKIP_INSTALL is set)"
    else
        cargo pgrx install --release --pg-config "$PG_CONFIG"
    fi
    section_done

    section "test server (PostgreSQL $PG_MAJOR)"
    if [ "$PG_MAJOR" = 18 ]; then
        export PG_EMBED_PORT="${PG_EMBED_TEST_PORT:-28819}"
        export PGDATA="$REPO/.pg/test-data"
    else
        export PG_EMBED_PORT="${PG_EMBED_TEST_PORT:-28829}"
        export PGDATA="$REPO/.pg/test-data-$PG_MAJOR"
    fi
    export PG_LOG="$REPO/.pg/log/$(basename "$PGDATA").log"
    stop_test_server() { "$REPO/scripts/server.sh" stop >/dev/null 2>&1 || true; }
    "$REPO/scripts/server.sh" stop
    rm -rf "$PGDATA"
    rm -f "$PG_LOG"
    trap stop_test_server EXIT
    "$REPO/scripts/server.sh" start
    section_done

    if want regress; then
        section "pg_regress tests/regress (PostgreSQL $PG_MAJOR)"
        outdir="$REPO/target/regress"
        rm -rf "$outdir"
        mkdir -p "$outdir"
        have_vector="$(psql_cmd -d postgres -At -c "SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'")"
        tests=()
        skipped=()
        for f in tests/regress/sql/*.sql; do
            [ -e "$f" ] || continue
            name="${f##*/}"; name="${name%.sql}"
            # REGRESS_TESTS="00_setup 73_late": only these suites (while working on one).
            if [ -n "${REGRESS_TESTS:-}" ] && [[ " $REGRESS_TESTS " != *" $name "* ]]; then
                continue
            fi
            if [ "$have_vector" = 0 ] && grep -qx -- '-- requires: vector' "$f"; then
                skipped+=("$name")
            else
                tests+=("$name")
            fi
        done
        [ ${#tests[@]} -gt 0 ] || die "no tests in tests/regress/sql"
        info "tests: ${tests[*]}"
        if [ ${#skipped[@]} -gt 0 ]; then
            info "SKIPPED, because pgvector is not available in PostgreSQL $PG_MAJOR here (no 'vector' in pg_available_extensions; Debian has no postgresql-$PG_MAJOR-pgvector): ${skipped[*]}"
        fi
        # pg_regress (installcheck mode: no --temp-instance) drops and re-creates the database.
        if ! "$PG_REGRESS" --bindir="$PGBIN" --host=127.0.0.1 --port="$PG_EMBED_PORT" \
            --user="$PG_SUPERUSER" --dbname=pg_embed_regress \
            --inputdir=tests/regress --outputdir="$outdir" "${tests[@]}" | tee "$outdir/pg_regress.log"; then
            if [ -s "$outdir/regression.diffs" ]; then
                echo "---- $outdir/regression.diffs ----"
                cat "$outdir/regression.diffs"
            fi
            die "regression tests failed (results in $outdir)"
        fi
        # "ok 3  - 20_pipeline  2310 ms" (PostgreSQL 16 on), "test 20_pipeline ... ok  2310 ms" (15)
        mapfile -t -O "${#suite_times[@]}" suite_times < <(awk '$NF == "ms" && (/^ok / || /^test /) {
            printf "%.1f regress %s\n", $(NF - 1) / 1000, ($1 == "test") ? $2 : $4 }' "$outdir/pg_regress.log")
        section_done

        section "test server log"
        if grep -n "terminated by signal" "$PG_LOG"; then
            die "a server process crashed during the tests (see $PG_LOG)"
        fi
        info "no server process terminated by a signal ($PG_LOG)"
        section_done

        # PostgreSQL 18 runs it last among the operational tests; 15 runs no other.
        if [ "$PG_MAJOR" != 18 ]; then
            section "server-wide statistics tests/ops/stats.sh (PostgreSQL $PG_MAJOR)"
            PG_EMBED_DB=postgres "$REPO/tests/ops/stats.sh"
            section_done
        fi
    fi

    # Last: its crash test kills backends (and checks the log for exactly those itself).
    if want ops; then
        section "operational tests tests/ops"
        PG_EMBED_DB=postgres OPS_TIMES="$REPO/target/test-ops-times.txt" "$REPO/tests/ops/run.sh"
        mapfile -t -O "${#suite_times[@]}" suite_times < "$REPO/target/test-ops-times.txt"
        section_done
    fi
    "$REPO/scripts/server.sh" stop
    trap - EXIT
fi

echo
step "all tests passed on PostgreSQL $PG_MAJOR ($(elapsed_since "$t_all"))"
for line in "${summary[@]}"; do info "$line"; done
if [ ${#suite_times[@]} -gt 0 ]; then
    step "slowest test suites"
    printf '%s\n' "${suite_times[@]}" | sort -rn | head -n 10 | awk '{ printf "    %7.1fs  %-8s %s\n", $1, $2, $3 }'
fi
