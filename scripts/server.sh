#!/usr/bin/env bash
# Local PostgreSQL 18 server (from .venv) for pg_embed.
#
#   scripts/server.sh start|stop|status|psql [psql args...]
#
# Defaults: port 28818, data .pg/data, sockets .pg/run, log .pg/log/postgres.log.
# Overrides (a second, separate server):
#   PG_EMBED_PORT=28819 PGDATA=$PWD/.pg/test-data PG_LOG=$PWD/.pg/log/test.log scripts/server.sh start
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

usage() { echo "usage: $0 start|stop|status|psql [psql args...]" >&2; exit 2; }

CONF_BEGIN="# BEGIN pg_embed settings (written by scripts/server.sh; rewritten on start)"
CONF_END="# END pg_embed settings"

# Directory made (or fixed) to be owned by the Postgres OS user.
pg_owned_dir() {
    mkdir -p "$1"
    if is_root; then chown "$PG_USER:" "$1"; fi
}

write_conf() {
    local conf="$PGDATA/postgresql.conf" tmp
    tmp="$(mktemp)"
    # Drop an earlier block, then append the current one (so port etc. follow the env).
    awk -v b="$CONF_BEGIN" -v e="$CONF_END" '
        $0 == b { skip = 1; next }
        $0 == e { skip = 0; next }
        !skip' "$conf" >"$tmp"
    cat >>"$tmp" <<EOF
$CONF_BEGIN
listen_addresses = '127.0.0.1'
port = $PG_EMBED_PORT
unix_socket_directories = '$PG_SOCKET_DIR'
pg_embed.model_dir = '$MODEL_DIR'
logging_collector = on
log_directory = '$(dirname "$PG_LOG")'
log_filename = '$(basename "$PG_LOG")'
log_rotation_age = 0
log_rotation_size = 0
log_line_prefix = '%m [%p] %q%u@%d '
$CONF_END
EOF
    # Rewrite in place: keeps the file's owner (the Postgres OS user) and mode.
    cat "$tmp" >"$conf"
    rm -f "$tmp"
}

start() {
    require_pginstall
    mkdir -p "$(dirname "$PGDATA")"
    pg_owned_dir "$PG_SOCKET_DIR"
    pg_owned_dir "$(dirname "$PG_LOG")"
    if [ ! -f "$PGDATA/PG_VERSION" ]; then
        info "initdb $PGDATA"
        pg_owned_dir "$PGDATA"
        chmod 700 "$PGDATA"
        as_pg_user "$PGBIN/initdb" -D "$PGDATA" --auth=trust --username="$PG_SUPERUSER" \
            -E UTF8 --locale=C >"$PGDATA.initdb.log" 2>&1 \
            || { cat "$PGDATA.initdb.log" >&2; die "initdb failed"; }
        rm -f "$PGDATA.initdb.log"
    fi
    if server_running; then
        info "server already running (port $PG_EMBED_PORT, data $PGDATA)"
        return 0
    fi
    write_conf
    if is_root; then touch "$PG_LOG" && chown "$PG_USER:" "$PG_LOG"; fi
    info "starting server on 127.0.0.1:$PG_EMBED_PORT (data $PGDATA, log $PG_LOG)"
    if ! pg_ctl_cmd start -w -t 60 -l "$PG_LOG" >/dev/null; then
        echo "---- last lines of $PG_LOG ----" >&2
        tail -n 20 "$PG_LOG" >&2 || true
        die "server did not start"
    fi
}

stop() {
    if [ -n "$PGINSTALL" ] && server_running; then
        info "stopping server (data $PGDATA)"
        pg_ctl_cmd stop -w -m fast >/dev/null
    else
        info "server not running (data $PGDATA)"
    fi
}

status() {
    require_pginstall
    if server_running; then
        echo "running: 127.0.0.1:$PG_EMBED_PORT, data $PGDATA, log $PG_LOG"
    else
        echo "stopped (data $PGDATA)"
        return 3
    fi
}

[ $# -ge 1 ] || usage
cmd="$1"; shift
case "$cmd" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    psql)
        require_pginstall
        exec "$PGBIN/psql" -h 127.0.0.1 -p "$PG_EMBED_PORT" -U "$PG_SUPERUSER" -d "$PG_EMBED_DB" "$@" ;;
    *) usage ;;
esac
