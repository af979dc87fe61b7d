#!/usr/bin/env bash
# The late-interaction bench (issue 46), in a running server, against PyLate and
# FlagEmbedding on PyTorch with the same thread count, in one run, on the bench corpus
# (bench/corpus.txt: LATE_DOCS sentences of 5-60 words as documents, the first LATE_QUERIES
# as queries). Two models of real shape from all-MiniLM-L6-v2 (bench/late_data.py, seeded):
# a PyLate ColBERT (Dense 384 -> 128) and a bge-m3 layout (the MiniLM folder with
# colbert_linear.pt 384 -> 384 and sparse_linear.pt). Figures, best of LATE_REPEATS after a
# warm-up:
#   - bge-m3 layout: embed(model, text[]) against embed_multi(model, text[]) and
#     embed_sparse(model, text[]) (the same pass plus a head), sentences/s and the ratio;
#     one call per row of embed.encode_all (three outputs) against one of embed;
#   - ColBERT: embed_multi(model, text[]) of the documents and one call per query
#     (embed_multi(model, q, 'query')), sentences/s, against PyLate's ColBERT.encode
#     (is_query False / True, batch 32) and FlagEmbedding's BGEM3FlagModel.encode (dense
#     only; all three) against sentence-transformers' encode of the same MiniLM;
#   - embed.maxsim: a 32 x 128 query against 100 documents of 180 x 128 (random, stored in
#     a table), ms per query, and what reading those arrays costs alone; against the
#     ColBERT documents of the corpus; the kernel alone (bench/maxsim.rs);
#   - storage per row: the documents' token vectors as real[] (pg_column_size, rows), the
#     table's size per row, against one vector(128).
# Prints the CPU first; writes bench/results/late-<commit>-<time>.txt. Not part of the
# tests; asserts nothing.
#
#   bench/late.sh [threads]        (default: the machine's cores)
#
# Needs a running server (`make demo`; another port with PG_EMBED_PORT=...) with pgvector,
# and PyLate 1.6 + FlagEmbedding 1.4 for the baselines (PYLATE_SITE, default
# .cache/pylate-site in the repository: tests/fixtures/late/README.md says how to make it). The models are
# built once into the server's pg_embed.model_dir (bench-colbert, bench-m3) from
# $MODEL_DIR/all-MiniLM-L6-v2 (scripts/fetch_model.sh).
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
# shellcheck source=bench/lib.sh
source "$REPO/bench/lib.sh"
pg_embed_resolve_paths

THREADS="${1:-$(nproc)}"
DOCS="${LATE_DOCS:-500}"
QUERIES="${LATE_QUERIES:-200}"
REPEATS="${LATE_REPEATS:-3}"
BENCH="$REPO/bench"
CORPUS="$BENCH/corpus.txt"
BENCH_VENV="${PG_EMBED_BENCH_VENV:-$BENCH/.venv}"
PYLATE_SITE="${PYLATE_SITE:-$REPO/.cache/pylate-site}"
MINILM_DIR="$MODEL_DIR/all-MiniLM-L6-v2"
mkdir -p "$BENCH/results"
OUT="$BENCH/results/late-$(git -C "$REPO" rev-parse --short HEAD)-$(date -u +%Y%m%dT%H%M%SZ).txt"
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error

psql_b() { "$PGBIN/psql" -X -q -A -t -h 127.0.0.1 -p "$PG_EMBED_PORT" -U "$PG_SUPERUSER" -d "$PG_EMBED_DB" -v ON_ERROR_STOP=1 "$@"; }

{
bench_header "$THREADS threads, $DOCS documents, $QUERIES queries"
PYTHONPATH="$PYLATE_SITE" "$BENCH_VENV/bin/python" "$BENCH/late_data.py" build --out "$MODEL_DIR" --minilm "$MINILM_DIR" >/dev/null
# The server runs as its own OS user: the folders must be readable by it.
chmod -R a+rX "$MODEL_DIR/bench-colbert" "$MODEL_DIR/bench-m3"

sql="$(mktemp)"
trap 'rm -f "$sql"' EXIT
cat >"$sql" <<SQL
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vector;
CREATE EXTENSION IF NOT EXISTS pg_embed;
SET pg_embed.threads = $THREADS;
SELECT embed.register_model('colbert_bench', 'bench-colbert') IS NOT NULL;
SELECT embed.register_model('m3_bench', 'bench-m3') IS NOT NULL;
CREATE TEMP TABLE corpus (i serial, s text);
\copy corpus (s) FROM '$CORPUS'
DELETE FROM corpus WHERE i > $DOCS;
-- The best of $REPEATS runs of a query (after a warm-up run), in seconds.
CREATE FUNCTION pg_temp.best(q text) RETURNS float8 LANGUAGE plpgsql AS \$\$
DECLARE t0 timestamptz; best float8; r float8;
BEGIN
    EXECUTE q;
    FOR k IN 1..$REPEATS LOOP
        t0 := clock_timestamp();
        EXECUTE q;
        r := extract(epoch FROM clock_timestamp() - t0);
        best := least(coalesce(best, r), r);
    END LOOP;
    RETURN best;
END \$\$;
CREATE TEMP TABLE arr AS SELECT array_agg(s ORDER BY i) AS a FROM corpus;
CREATE TEMP TABLE q AS SELECT s FROM corpus WHERE i <= $QUERIES;
SELECT 'm3_embed_array', pg_temp.best('SELECT sum(array_length(v, 1)) FROM arr, embed(''m3_bench'', arr.a) v');
SELECT 'm3_multi_array', pg_temp.best('SELECT sum(array_length(v, 1)) FROM arr, embed_multi(''m3_bench'', arr.a) v');
SELECT 'm3_sparse_array', pg_temp.best('SELECT sum(length(v)) FROM arr, embed_sparse(''m3_bench'', arr.a) v');
SELECT 'm3_embed_rows', pg_temp.best('SELECT sum(array_length(embed(''m3_bench'', s), 1)) FROM corpus');
SELECT 'm3_encode_all_rows', pg_temp.best('SELECT sum(array_length(a.dense, 1) + array_length(a.multi, 1) + length(a.sparse)) FROM corpus, embed.encode_all(''m3_bench'', s) a');
SELECT 'colbert_documents_array', pg_temp.best('SELECT sum(array_length(v, 1)) FROM arr, embed_multi(''colbert_bench'', arr.a) v');
SELECT 'colbert_queries_rows', pg_temp.best('SELECT sum(array_length(embed_multi(''colbert_bench'', s, ''query''), 1)) FROM q');
-- MaxSim: 100 random documents of 180 x 128, a 32 x 128 query.
SELECT setseed(0.46);
CREATE TEMP TABLE md AS
SELECT d, (SELECT array_agg(r ORDER BY t) FROM (SELECT t, (SELECT array_agg((random() - 0.5)::real) FROM generate_series(1, 128) WHERE t > 0) AS r
                                                  FROM generate_series(1, 180) AS t) x) AS toks
  FROM generate_series(1, 100) AS d;
CREATE TEMP TABLE mq AS
SELECT (SELECT array_agg(r ORDER BY t) FROM (SELECT t, (SELECT array_agg((random() - 0.5)::real) FROM generate_series(1, 128) WHERE t > 0) AS r
                                               FROM generate_series(1, 32) AS t) x) AS m;
SELECT 'maxsim_100x180', pg_temp.best('SELECT sum(embed.maxsim(mq.m, md.toks)) FROM mq, md');
SELECT 'read_100x180', pg_temp.best('SELECT sum(array_length(md.toks, 1)) FROM md');
SELECT 'maxsim_100x180_shape', (SELECT array_dims(m) FROM mq) || ' ' || (SELECT array_dims(toks) FROM md LIMIT 1);
CREATE TEMP TABLE cd AS SELECT i, embed_multi('colbert_bench', s) AS toks FROM corpus;
CREATE TEMP TABLE cq AS SELECT embed_multi('colbert_bench', (SELECT s FROM corpus WHERE i = 1), 'query') AS m;
SELECT 'maxsim_corpus', pg_temp.best('SELECT sum(embed.maxsim(cq.m, cd.toks)) FROM cq, cd');
SELECT 'corpus_doc_rows', avg(array_length(toks, 1)) FROM cd;
SELECT 'corpus_doc_bytes', avg(pg_column_size(toks)) FROM cd;
CREATE TEMP TABLE cs AS SELECT i, toks FROM cd;
SELECT 'corpus_table_bytes_per_row', pg_total_relation_size('cs') / count(*) FROM cs;
SELECT 'vector128_bytes', pg_column_size(array_fill(0.5::real, ARRAY[128])::vector);
SELECT 'minilm_dense_bytes', pg_column_size(embed('m3_bench', 'hello')::vector);
SQL
sqlout="$(psql_b -F ' ' -f "$sql")"
step "pg_embed (PostgreSQL, $THREADS threads)"
echo "$sqlout" | sed 's/^/    /'

step "PyLate 1.6 / FlagEmbedding 1.4 / sentence-transformers on PyTorch ($THREADS threads)"
base="$(PYTHONPATH="$PYLATE_SITE" "$BENCH_VENV/bin/python" "$BENCH/late_data.py" baseline --models "$MODEL_DIR" \
    --minilm "$MINILM_DIR" --corpus "$CORPUS" --threads "$THREADS" --n "$DOCS" --queries "$QUERIES" \
    --repeats "$REPEATS" 2>/dev/null | tail -1)"
echo "    $base"

step "figures"
SQLOUT="$sqlout" BASE="$base" DOCS="$DOCS" QUERIES="$QUERIES" python3 - <<'PY'
import json, os
v = {}
for line in os.environ["SQLOUT"].splitlines():
    parts = line.split(" ", 1)
    if len(parts) == 2:
        v[parts[0]] = parts[1]
b = json.loads(os.environ["BASE"])
docs, queries = int(os.environ["DOCS"]), int(os.environ["QUERIES"])
rate = lambda k, n: n / float(v[k])
rows = [
    ("bge-m3 layout: embed(text[])", rate("m3_embed_array", docs), None),
    ("bge-m3 layout: embed_multi(text[])", rate("m3_multi_array", docs), None),
    ("bge-m3 layout: embed_sparse(text[])", rate("m3_sparse_array", docs), None),
    ("bge-m3 layout: embed per row", rate("m3_embed_rows", docs), None),
    ("bge-m3 layout: encode_all per row (3 outputs)", rate("m3_encode_all_rows", docs), None),
    ("ColBERT: embed_multi(text[]) documents", rate("colbert_documents_array", docs), b["pylate_documents_per_s"]),
    ("ColBERT: embed_multi(q, 'query') per query", rate("colbert_queries_rows", queries), b["pylate_queries_per_s"]),
]
print(f"    {'what':50} {'pg_embed /s':>12} {'PyTorch /s':>11} {'ratio':>6}")
for name, ours, theirs in rows:
    ratio = f"{ours / theirs:6.2f}" if theirs else ""
    theirs = f"{theirs:11.1f}" if theirs else ""
    print(f"    {name:50} {ours:12.1f} {theirs:>11} {ratio}")
print(f"    embed_multi / embed (same model, array form): {rate('m3_multi_array', docs) / rate('m3_embed_array', docs):.3f} "
      f"(time ratio {float(v['m3_multi_array']) / float(v['m3_embed_array']):.3f})")
print(f"    encode_all / embed (per row): time ratio {float(v['m3_encode_all_rows']) / float(v['m3_embed_rows']):.3f}")
print(f"    FlagEmbedding BGEM3FlagModel.encode: dense {b['flag_dense_per_s']:.1f}/s, all three {b['flag_all_per_s']:.1f}/s; "
      f"sentence-transformers encode {b['st_dense_per_s']:.1f}/s")
print(f"    pg_embed embed_multi(text[]) vs FlagEmbedding all three: {rate('m3_multi_array', docs) / b['flag_all_per_s']:.2f}x; "
      f"embed(text[]) vs sentence-transformers: {rate('m3_embed_array', docs) / b['st_dense_per_s']:.2f}x")
print(f"    embed.maxsim, 32x128 query vs 100 documents of 180x128 ({v['maxsim_100x180_shape']}): "
      f"{1000 * float(v['maxsim_100x180']):.2f} ms per query (100 calls in one statement over a table)")
print(f"    of which PostgreSQL reading the 100 arrays (TOAST, {100 * 180 * 128 * 4 / 1e6:.1f} MB): {1000 * float(v['read_100x180']):.2f} ms "
      f"(SELECT sum(array_length(toks, 1)) over the same rows)")
print(f"    embed.maxsim, a ColBERT query vs the {docs} corpus documents: {1000 * float(v['maxsim_corpus']):.2f} ms")
print(f"    storage: {float(v['corpus_doc_rows']):.1f} token rows per document at 128 dimensions, "
      f"{float(v['corpus_doc_bytes']):.0f} bytes per real[] value, {v['corpus_table_bytes_per_row']} bytes per table row "
      f"(heap + TOAST); one vector(128): {v['vector128_bytes']} bytes; MiniLM's vector(384): {v['minilm_dense_bytes']} bytes")
PY
step "the MaxSim kernel alone (crates/pg_embed_core, bench/maxsim.rs: one thread, no PostgreSQL)"
cargo run -q --release -p pg_embed_core --example bench_maxsim 2>/dev/null | sed 's/^/    /'
info "load average after: $(cut -d' ' -f1-3 /proc/loadavg) (before: $load_before)"
} 2>&1 | tee "$OUT"
echo "written: $OUT"
