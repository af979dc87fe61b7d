#!/usr/bin/env bash
# A Citus cluster of the local PostgreSQL 18 for pg_embed's scale-out tests: a coordinator and
# two workers on loopback ports, each with shared_preload_libraries = 'citus, pg_embed'.
#
#   scripts/citus.sh build         Citus into the PostgreSQL of .venv (once; see below)
#   scripts/citus.sh start|stop    the three nodes (ports CITUS_PORT, +1, +2; data .pg/citus-N)
#   scripts/citus.sh add N         one more worker, node N (port CITUS_PORT + N)
#   scripts/citus.sh psql N [...]  psql into node N (0 = the coordinator)
#
# Citus is a test dependency only (pg_embed never links it). `build` uses a Citus already
# installed in the target PostgreSQL ($(pg_config --pkglibdir)/citus.so) as it is; otherwise it
# builds the vendored source, ../shared/vendor/citus-14.0.1.tar.gz next to the repository
# (or CITUS_TARBALL), checked against its sha256, with the recipe of that folder's README.
# The build is cached by the tarball's digest: a stamp next to citus.so names it, and a
# second `build` with the same tarball does nothing.
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

CITUS_VERSION="14.0.1"
CITUS_SHA256="acfa9a77cd84a8e1edab26cca4a71355f39c910c01586da89560e0240d4b05ba"
CITUS_PORT="${CITUS_PORT:-28840}"
CITUS_NODES=3
# The servers inherit this shell's environment: no Rust backtraces in their error messages.
unset RUST_BACKTRACE

usage() { echo "usage: $0 build|start|stop|add N|psql N [psql args...]" >&2; exit 2; }

node_port() { echo $((CITUS_PORT + $1)); }
node_data() { echo "$REPO/.pg/citus-$1"; }
node_env() { # node_env N command...: the command with scripts/env.sh pointed at node N
    local n="$1"; shift
    PG_EMBED_PORT="$(node_port "$n")" PGDATA="$(node_data "$n")" PG_LOG="$REPO/.pg/log/citus-$n.log" "$@"
}

find_tarball() {
    local t
    # CITUS_TARBALL, else the vendored source beside the repository (../shared/vendor, as the
    # design names it); a checkout elsewhere (CI's) finds the workplace's shared folder.
    for t in "${CITUS_TARBALL:-}" "$REPO/../shared/vendor/citus-$CITUS_VERSION.tar.gz" \
             "/work/shared/vendor/citus-$CITUS_VERSION.tar.gz"; do
        [ -n "$t" ] && [ -f "$t" ] && { echo "$t"; return 0; }
    done
    return 1
}

build() {
    require_pginstall
    local libdir stamp tarball sum work
    libdir="$("$PG_CONFIG" --pkglibdir)"
    stamp="$libdir/citus.pg_embed-build"
    if [ -f "$libdir/citus.so" ] && [ ! -f "$stamp" ]; then
        info "Citus already installed in $libdir (not built here): using it"
        return 0
    fi
    tarball="$(find_tarball)" || die "no Citus: neither $libdir/citus.so nor the vendored tarball ($REPO/../shared/vendor/citus-$CITUS_VERSION.tar.gz; set CITUS_TARBALL)"
    sum="$(sha256sum "$tarball" | cut -d' ' -f1)"
    [ "$sum" = "$CITUS_SHA256" ] || die "$tarball: sha256 $sum, expected $CITUS_SHA256"
    if [ -f "$libdir/citus.so" ] && [ "$(cat "$stamp")" = "$sum" ]; then
        info "Citus $CITUS_VERSION already built from $tarball (sha256 ${sum:0:12}...)"
        return 0
    fi
    work="$REPO/target/citus-$sum"
    rm -rf "$work" && mkdir -p "$work"
    info "building Citus $CITUS_VERSION from $tarball (log $work/build.log)"
    tar xzf "$tarball" -C "$work"
    # pg_config --cflags of the wheel's PostgreSQL names a warning flag gcc 12 rejects: the
    # flags are given here instead (the vendored README's recipe).
    ( cd "$work/citus-$CITUS_VERSION" \
        && ./configure PG_CONFIG="$PG_CONFIG" --without-libcurl --without-lz4 --without-zstd \
        && make -j"$(nproc)" CFLAGS='-O2 -fno-strict-aliasing -fwrapv -fexcess-precision=standard -Wall -Wno-format-truncation -Wno-stringop-truncation' \
        && make install ) >"$work/build.log" 2>&1 \
        || { tail -n 30 "$work/build.log" >&2; die "the Citus build failed (log $work/build.log)"; }
    echo "$sum" >"$stamp"
    rm -rf "$work/citus-$CITUS_VERSION"
    info "Citus installed into $libdir"
}

# start_node N: node N's server (initdb the first time), with Citus and pg_embed preloaded
# and the citus extension made in its database.
start_node() {
    local n="$1"
    node_env "$n" "$REPO/scripts/server.sh" start >/dev/null
    # shared_preload_libraries needs a restart the first time. Three nodes share this
    # machine's cores: one compute thread each.
    if [ "$(node_env "$n" psql_cmd -d postgres -At -c "SHOW shared_preload_libraries")" != "citus, pg_embed" ]; then
        node_env "$n" psql_cmd -d postgres -q -c "ALTER SYSTEM SET shared_preload_libraries = citus, pg_embed" \
            -c "ALTER SYSTEM SET pg_embed.threads = 1"
        node_env "$n" pg_ctl_cmd restart -w -t 60 -m fast -l "$REPO/.pg/log/citus-$n.log" >/dev/null
    fi
    node_env "$n" psql_cmd -d postgres -q -c "SET client_min_messages = warning" -c "CREATE EXTENSION IF NOT EXISTS citus"
    info "node $n: 127.0.0.1:$(node_port "$n") ($( [ "$n" = 0 ] && echo coordinator || echo worker ))"
}

# add_node N: starts node N and adds it to the cluster as a worker.
add_node() {
    start_node "$1"
    join_node "$1"
}
join_node() {
    node_env 0 psql_cmd -d postgres -q -At \
        -c "SELECT citus_add_node('127.0.0.1', $(node_port "$1")) WHERE NOT EXISTS
              (SELECT FROM pg_dist_node WHERE nodeport = $(node_port "$1"))" >/dev/null
}

start() {
    require_pginstall
    local n
    # Every node up first: the coordinator's metadata of a cluster started before names them.
    for n in $(seq 0 $((CITUS_NODES - 1))); do start_node "$n"; done
    node_env 0 psql_cmd -d postgres -q -At -c "SELECT citus_set_coordinator_host('127.0.0.1', $CITUS_PORT)" >/dev/null
    for n in $(seq 1 $((CITUS_NODES - 1))); do join_node "$n"; done
}

stop() {
    local d
    for d in "$REPO"/.pg/citus-*; do
        [ -d "$d" ] || continue
        node_env "${d##*-}" "$REPO/scripts/server.sh" stop >/dev/null
    done
}

[ $# -ge 1 ] || usage
cmd="$1"; shift
case "$cmd" in
    build) build ;;
    start) start ;;
    add) [ $# -ge 1 ] || usage; add_node "$1" ;;
    stop) stop ;;
    psql)
        [ $# -ge 1 ] || usage
        n="$1"; shift
        node_env "$n" psql_cmd -d postgres "$@" ;;
    *) usage ;;
esac
