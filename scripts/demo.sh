#!/usr/bin/env bash
# `make demo`: set everything up, build + install pg_embed, start a local PostgreSQL 18,
# embed the demo sentences with all-MiniLM-L6-v2 into a pgvector HNSW index and run the
# demo queries. Re-running is cheap: every step skips what is already done.
#
#   DEMO_SENTENCES=file DEMO_QUERIES=file   other input files (one text per line)
#   PG_EMBED_SKIP_INSTALL=1                 use the extension already installed
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

SENTENCES="${DEMO_SENTENCES:-$REPO/tests/data/demo_sentences.txt}"
QUERIES="${DEMO_QUERIES:-$REPO/tests/data/demo_queries.txt}"
MODEL="minilm"
SOURCE="all-MiniLM-L6-v2"
DIM=384

"$REPO/scripts/bootstrap.sh"
pg_embed_resolve_paths
"$REPO/scripts/fetch_model.sh"
[ -f "$SENTENCES" ] || die "missing $SENTENCES"
[ -f "$QUERIES" ] || die "missing $QUERIES"

step "build + install pg_embed (release)"
if [ -n "${PG_EMBED_SKIP_INSTALL:-}" ]; then
    info "skipped (PG_EMBED_SKIP_INSTALL is set)"
else
    t=$EPOCHREALTIME
    build_log="$REPO/target/pgrx-install-release.log"
    mkdir -p "$REPO/target"
    info "cargo pgrx install --release (the first build takes several minutes; log: ${build_log#"$REPO"/})"
    if ! (cd "$REPO" && cargo pgrx install --release --pg-config "$PG_CONFIG") >"$build_log" 2>&1; then
        tail -n 40 "$build_log" >&2
        die "cargo pgrx install failed (full log: $build_log)"
    fi
    info "installed into $PGINSTALL ($(elapsed_since "$t"))"
fi

step "server"
"$REPO/scripts/server.sh" start

export PGOPTIONS="${PGOPTIONS:-} -c client_min_messages=warning"
demo_psql() { psql_cmd -q -d "$PG_EMBED_DB" -v ON_ERROR_STOP=1 "$@"; }

step "extensions, model, demo table"
t=$EPOCHREALTIME
# The sentences reach \copy ... FROM pstdin in COPY text format: escape backslashes
# and tabs, drop CRs and blank lines.
sed -e 's/\r$//' -e '/^[[:space:]]*$/d' -e 's/\\/\\\\/g' -e 's/\t/\\t/g' "$SENTENCES" |
demo_psql -v model="$MODEL" -v source="$SOURCE" -v dim="$DIM" -f /dev/fd/3 3<<'SQL'
CREATE EXTENSION IF NOT EXISTS vector;
CREATE EXTENSION IF NOT EXISTS pg_embed;
SELECT NOT EXISTS (SELECT 1 FROM embed.models WHERE name = :'model') AS need_register \gset
\if :need_register
\echo '    registering model' :model '->' :source
SELECT embed.register_model(:'model', :'source') \g /dev/null
\else
\echo '    model' :model 'already registered'
\endif
CREATE TABLE IF NOT EXISTS demo_docs (
    id   serial PRIMARY KEY,
    body text NOT NULL,
    emb  vector(:dim)
);
SELECT NOT EXISTS (SELECT 1 FROM demo_docs) AS need_load \gset
\if :need_load
CREATE TEMP TABLE demo_load (ord serial, body text NOT NULL);
\copy demo_load (body) FROM pstdin
SELECT count(*) AS n FROM demo_load \gset
\echo '    embedding' :n 'sentences into demo_docs ...'
INSERT INTO demo_docs (body, emb)
SELECT body, embed(:'model', body)::vector(:dim) FROM demo_load ORDER BY ord;
\else
SELECT count(*) AS n FROM demo_docs \gset
\echo '    demo_docs already holds' :n 'rows'
\endif
CREATE INDEX IF NOT EXISTS demo_docs_emb_hnsw ON demo_docs USING hnsw (emb vector_cosine_ops);
SQL
info "done ($(elapsed_since "$t"))"

step "semantic search: top 3 demo_docs for each query (cosine similarity)"
echo
# One psql session for all queries; each query text is passed with -v and used only
# as :'qN' (a quoted literal), so any text is safe. The query is embedded once (\gset)
# and compared as a constant, which lets the HNSW index serve the ORDER BY.
vars=()
script=$'\\pset footer off\n'
n=0
while IFS= read -r line || [ -n "$line" ]; do
    line="${line%$'\r'}"
    [[ "$line" =~ ^[[:space:]]*$ ]] && continue
    n=$((n + 1))
    vars+=(-v "q$n=$line")
    script+="\\echo 'Query:' :q$n
SELECT embed(:'model', :'q$n')::vector($DIM)::text AS qv \\gset
SELECT body, round((1 - (emb <=> :'qv'::vector($DIM)))::numeric, 3) AS similarity
FROM demo_docs ORDER BY emb <=> :'qv'::vector($DIM) LIMIT 3;
"
done <"$QUERIES"
[ "$n" -gt 0 ] || die "no queries in $QUERIES"
demo_psql -v model="$MODEL" "${vars[@]}" -f /dev/fd/3 3<<<"$script"

step "done: the server keeps running (stop it with 'make stop')"
info "connect:  $PGBIN/psql -h 127.0.0.1 -p $PG_EMBED_PORT -U $PG_SUPERUSER -d $PG_EMBED_DB"
info "          (or: make psql)"
info "try:      SELECT body FROM demo_docs ORDER BY emb <=> embed('$MODEL', 'your text')::vector($DIM) LIMIT 3;"
