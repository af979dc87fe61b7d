#!/usr/bin/env bash
# `make package`: a tarball of pg_embed for one PostgreSQL installation (18 by default,
# PG_EMBED_PG=15 for Debian's 15), built with `cargo pgrx package`:
#   target/package/pg_embed-<version>-pg<major>-linux-<arch>.tar.gz
# holding lib/pg_embed.so, extension/ (control file, install script, every upgrade script),
# install.sh and INSTALL.md. install.sh copies them into the installation its pg_config names.
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

"$REPO/scripts/bootstrap.sh" >/dev/null
pg_embed_resolve_paths
cd "$REPO"
version="$(pg_embed_version)"
name="$(pg_embed_package_name)"
step "make package: $name.tar.gz"

t0=$EPOCHREALTIME
cargo pgrx package --pg-config "$PG_CONFIG" --out-dir "$REPO/target/package/pgrx-pg$PG_MAJOR"
# cargo pgrx package mirrors the installation's absolute paths; the tarball does not.
pkgroot="$REPO/target/package/pgrx-pg$PG_MAJOR"
so="$pkgroot$("$PG_CONFIG" --pkglibdir)/pg_embed.so"
extdir="$pkgroot$("$PG_CONFIG" --sharedir)/extension"
[ -f "$so" ] || die "cargo pgrx package made no $so"
[ -f "$extdir/pg_embed--$version.sql" ] || die "cargo pgrx package made no $extdir/pg_embed--$version.sql"

stage="$REPO/target/package/$name"
rm -rf "$stage"
mkdir -p "$stage/lib" "$stage/extension"
cp "$so" "$stage/lib/"
cp "$extdir"/pg_embed.control "$extdir"/pg_embed--*.sql "$stage/extension/"

cat >"$stage/install.sh" <<'EOF'
#!/bin/sh
# Installs pg_embed into the PostgreSQL installation of pg_config (PG_CONFIG, or the first
# pg_config on PATH): the library into its pkglibdir, the extension files into
# sharedir/extension. Run it as the owner of that installation (often root).
set -eu
here="$(cd "$(dirname "$0")" && pwd)"
PG_CONFIG="${PG_CONFIG:-pg_config}"
command -v "$PG_CONFIG" >/dev/null 2>&1 || { echo "pg_config not found: set PG_CONFIG=/path/to/pg_config" >&2; exit 1; }
want="$(cat "$here/PG_MAJOR")"
have="$("$PG_CONFIG" --version | sed -n 's/^PostgreSQL \([0-9][0-9]*\).*/\1/p')"
if [ "$have" != "$want" ]; then
    echo "this package is for PostgreSQL $want; $PG_CONFIG is PostgreSQL $have" >&2
    exit 1
fi
libdir="$("$PG_CONFIG" --pkglibdir)"
extdir="$("$PG_CONFIG" --sharedir)/extension"
install -m 755 "$here/lib/pg_embed.so" "$libdir/pg_embed.so"
install -m 644 "$here"/extension/* "$extdir/"
echo "pg_embed installed: $libdir/pg_embed.so, $extdir/pg_embed.control"
echo "next: set pg_embed.model_dir in postgresql.conf, then CREATE EXTENSION pg_embed; (see INSTALL.md)"
EOF
chmod 755 "$stage/install.sh"
echo "$PG_MAJOR" >"$stage/PG_MAJOR"

cat >"$stage/INSTALL.md" <<EOF
# pg_embed $version for PostgreSQL $PG_MAJOR (Linux $(uname -m))

Built from commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown) with \`cargo pgrx package\`
against $("$PG_CONFIG" --version). The library needs glibc and nothing else.

## Install

    tar xzf $name.tar.gz
    cd $name
    sudo PG_CONFIG=/path/to/pg_config ./install.sh     # or with pg_config on PATH

This copies \`lib/pg_embed.so\` into \`pg_config --pkglibdir\` and \`extension/*\` into
\`pg_config --sharedir\`/extension. Then, in postgresql.conf (a reload is enough):

    pg_embed.model_dir = '/srv/models'      # the directory that holds your models

and in each database:

    CREATE EXTENSION IF NOT EXISTS vector;  -- optional: pgvector, for vector columns and search
    CREATE EXTENSION pg_embed;
    SELECT embed.register_model('minilm', 'all-MiniLM-L6-v2');   -- a folder in model_dir
    SELECT embed('minilm', 'hello world');

## Upgrade

Install the new package the same way (the library and every upgrade script), then in each
database that has pg_embed:

    ALTER EXTENSION pg_embed UPDATE;

The package holds the upgrade scripts from every earlier release
($(cd "$stage/extension" && ls pg_embed--*--*.sql 2>/dev/null | tr '\n' ' ')).
EOF

tarball="$REPO/target/package/$name.tar.gz"
tar -C "$REPO/target/package" -czf "$tarball" "$name"
info "$tarball: $(( $(stat -c %s "$tarball") / 1024 / 1024 )) MB ($(elapsed_since "$t0"))"
tar -tzf "$tarball" | sed 's/^/    /'
