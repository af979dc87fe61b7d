#!/usr/bin/env bash
# The static-embedding bench (issue 24): a sentence-transformers StaticEmbedding model of real
# shape (all-MiniLM-L6-v2's 30,522-token tokenizer, a random 30,522 x 256 float32 table, mean of
# the token rows, Normalize; bench/static_data.py, seeded) in a running server, against
# all-MiniLM-L6-v2 in the same server and against sentence-transformers' StaticEmbedding on
# PyTorch with the same thread count, in one run, on the bench corpus (bench/corpus.txt, 2,000
# sentences of 5-60 words):
#   - the array form, SELECT sum(array_length(e, 1)) FROM embed(model, <the corpus as text[]>) e:
#     sentences/s, best of 3 after a warm-up run; one call per row over the corpus, best of 3;
#   - single calls in plpgsql (v := embed(model, s), timed with clock_timestamp() as
#     bench/latency.sh does, bench/latency.sh's sentence): p50/p99 over 500 calls, against
#     the same loop around `n := length(s)` (a C function call, the path embed() takes),
#     `SELECT length(s) INTO n` (a whole SQL statement) and a trivial plpgsql function; and the
#     client's view: pgbench, one connection, `SELECT embed(model, '<sentence>')` against
#     `SELECT length('<sentence>')`, one statement per transaction;
#   - single-row INSERTs (id serial, body text, embedding real[]): a plpgsql loop of one INSERT
#     statement per corpus sentence (2,000 for the static model, 500 for minilm) into a table
#     with embed.embed_trigger(model, 'body', 'embedding') BEFORE INSERT OR UPDATE FOR EACH
#     ROW, each followed by the same row into the same kind of table without a trigger: us per
#     INSERT (mean, p50, p99) and the difference (no commit per row: one transaction);
#   - sentence-transformers StaticEmbedding (bench/static_data.py baseline): sentences/s of
#     model.encode(corpus, batch_size=B) at the best B, best of 3, and single-call p50/p99;
#   - accuracy: pg_embed's vectors of the corpus (array form and one call per row) against
#     sentence-transformers' (largest |difference|, smallest cosine);
#   - the ratios (pg_embed static / sentence-transformers static, pg_embed static / minilm).
# Prints the CPU first; writes bench/results/static-<commit>-<time>.txt. Not part of the
# tests; asserts nothing.
#
#   bench/static.sh [threads]        (default: the machine's cores)
#
# Needs a running server (`make demo`; another port with PG_EMBED_PORT=...) with
# all-MiniLM-L6-v2 registered as 'minilm'. The model is generated once into the server's
# pg_embed.model_dir (<model_dir>/bench-static-256; all-MiniLM-L6-v2's tokenizer from
# $MODEL_DIR/all-MiniLM-L6-v2, where scripts/fetch_model.sh puts it) and registered as
# 'static_bench' on every run (replacing an earlier registration). Environment:
#   STATIC_MODEL (static_bench), MINILM_MODEL (minilm): the names measured;
#   STATIC_SOURCE (bench-static-256): the static model's directory in pg_embed.model_dir;
#   STATIC_REGISTER (1): 0 measures STATIC_MODEL as registered (e.g. STATIC_MODEL=minilm_b
#     STATIC_REGISTER=0, minilm_b being all-MiniLM-L6-v2 registered again under that name,
#     runs the SQL side against a transformer: for testing the script; no accuracy figures);
#   STATIC_SINGLES (500), STATIC_REPEATS (3), STATIC_INSERTS (2000), MINILM_INSERTS (500);
#   PG_EMBED_BENCH_VENV: another environment with torch and sentence-transformers 6.2.
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
# shellcheck source=bench/lib.sh
source "$REPO/bench/lib.sh"
pg_embed_resolve_paths

THREADS="${1:-$(nproc)}"
STATIC_MODEL="${STATIC_MODEL:-static_bench}"
MINILM_MODEL="${MINILM_MODEL:-minilm}"
STATIC_SOURCE="${STATIC_SOURCE:-bench-static-256}"
STATIC_REGISTER="${STATIC_REGISTER:-1}"
SINGLES="${STATIC_SINGLES:-500}"
REPEATS="${STATIC_REPEATS:-3}"
STATIC_INSERTS="${STATIC_INSERTS:-2000}"
MINILM_INSERTS="${MINILM_INSERTS:-500}"
BENCH="$REPO/bench"
CORPUS="$BENCH/corpus.txt"
BENCH_VENV="${PG_EMBED_BENCH_VENV:-$BENCH/.venv}"
MINILM_DIR="$MODEL_DIR/all-MiniLM-L6-v2"
# bench/latency.sh's sentence (bench/static_data.py times sentence-transformers with it too).
SENTENCE="The quick brown fox jumps over the lazy dog near the river bank"
for name in "$STATIC_MODEL" "$MINILM_MODEL"; do
    [[ "$name" =~ ^[A-Za-z0-9_]+$ ]] || die "model name '$name': letters, digits and _ only"
done
[ "$STATIC_MODEL" != "$MINILM_MODEL" ] || die "STATIC_MODEL and MINILM_MODEL are both '$MINILM_MODEL'"
mkdir -p "$BENCH/results"
OUT="$BENCH/results/static-$(git -C "$REPO" rev-parse --short HEAD)-$(date -u +%Y%m%dT%H%M%SZ).txt"
RUNS="$(mktemp -d)"
trap 'rm -rf "$RUNS"' EXIT
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error

psql_b() { "$PGBIN/psql" -X -q -A -t -h 127.0.0.1 -p "$PG_EMBED_PORT" -U "$PG_SUPERUSER" -d "$PG_EMBED_DB" -v ON_ERROR_STOP=1 "$@"; }
pgb() { "$PGBIN/pgbench" -n -h 127.0.0.1 -p "$PG_EMBED_PORT" -U "$PG_SUPERUSER" -d "$PG_EMBED_DB" "$@"; }

{
bench_header "$THREADS threads"
cpu_flags=""
for f in avx2 avx512f avx512_bf16 amx_tile amx_bf16; do
    if grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -qx "$f"; then yn=yes; else yn=no; fi
    cpu_flags+="$f=$yn "
done
cpu_flags="${cpu_flags% }"
info "$cpu_flags"
info "$(nproc) cores; $THREADS threads used by every system (pg_embed.threads; torch.set_num_threads and the tokenizer's pool)"
bench_venv "$BENCH_VENV"

# ---- the server, the model directory, the static model ------------------------------------
model_dir="$(psql_b -c "LOAD 'pg_embed'" -c "SHOW pg_embed.model_dir")" \
    || die "cannot reach the server on port $PG_EMBED_PORT (start one with 'make demo')"
[ -n "$model_dir" ] || die "pg_embed.model_dir is not set in the server on port $PG_EMBED_PORT"
[ -n "$(psql_b -v m="$MINILM_MODEL" <<<"SELECT 1 FROM embed.models WHERE name = :'m'")" ] \
    || die "no model '$MINILM_MODEL' in embed.models: run 'make demo' first"
static_dir="$model_dir/$STATIC_SOURCE"
[ -f "$MINILM_DIR/tokenizer.json" ] || die "no $MINILM_DIR/tokenizer.json (scripts/fetch_model.sh fetches it)"
step "static model: $static_dir"
"$BENCH_VENV/bin/python" "$BENCH/static_data.py" build "$static_dir" "$MINILM_DIR"
chmod -R a+rX "$static_dir"   # the server runs as another OS user; safetensors writes 0600
if [ "$STATIC_REGISTER" = 1 ]; then
    psql_b -v model="$STATIC_MODEL" -v src="$STATIC_SOURCE" >"$RUNS/register.txt" 2>&1 <<'SQL' ||
SET client_min_messages = warning;
SELECT embed.register_model(:'model', :'src') IS NOT NULL AS registered \gset
SQL
        { sed 's/^/    /' "$RUNS/register.txt"; die "registering '$STATIC_MODEL' from '$STATIC_SOURCE' failed (does the installed pg_embed load StaticEmbedding folders?)"; }
fi
psql_b -F ' ' -v s="$STATIC_MODEL" -v m="$MINILM_MODEL" <<'SQL' | sed 's/^/    /'
SELECT format('%s: source %s, options %s, dim %s', name, source, coalesce(options, '{}'), dim)
    FROM embed.models WHERE name IN (:'s', :'m') ORDER BY name = :'m', name;
SQL
[ -n "$(psql_b -v m="$STATIC_MODEL" <<<"SELECT 1 FROM embed.models WHERE name = :'m'")" ] \
    || die "no model '$STATIC_MODEL' in embed.models"

# ---- pg_embed in SQL ----------------------------------------------------------------------
# One session (backend) per model: the corpus into a temporary table, two tables for the
# INSERTs, then pg_temp.run (all timings, one JSON line); for the static model, untimed, its
# vectors of the corpus (array form, one call per row) into files for the accuracy check.
# (\copy takes no psql variables: its lines are written by the shell.)
for model in "$STATIC_MODEL" "$MINILM_MODEL"; do
    if [ "$model" = "$STATIC_MODEL" ]; then inserts="$STATIC_INSERTS"; else inserts="$MINILM_INSERTS"; fi
    step "pg_embed in SQL, $model ($THREADS threads): array form, per row, single calls, $inserts INSERTs"
    { printf 'CREATE TEMP TABLE corpus (i serial, s text);\n\\copy corpus (s) FROM %s\n' "'$CORPUS'"; cat <<'SQL'
SET pg_embed.threads = :threads;
SET client_min_messages = warning;
DROP TABLE IF EXISTS bench_static_plain, bench_static_trigger;
CREATE TABLE bench_static_plain (id serial PRIMARY KEY, body text, embedding real[]);
CREATE TABLE bench_static_trigger (id serial PRIMARY KEY, body text, embedding real[]);
CREATE TRIGGER embed_body BEFORE INSERT OR UPDATE ON bench_static_trigger
    FOR EACH ROW EXECUTE FUNCTION embed.embed_trigger(:'model', 'body', 'embedding');
CREATE FUNCTION pg_temp.rss_mb() RETURNS float8 LANGUAGE sql AS $$
    SELECT (regexp_match(pg_read_file('/proc/self/status'), 'VmRSS:\s+(\d+) kB'))[1]::float8 / 1024
$$;
CREATE FUNCTION pg_temp.us(t0 timestamptz) RETURNS float8 LANGUAGE sql AS $$
    SELECT extract(epoch FROM clock_timestamp() - t0)::float8 * 1e6
$$;
CREATE FUNCTION pg_temp.pcts(x float8[]) RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_object('p50_us', percentile_cont(0.5) WITHIN GROUP (ORDER BY v),
        'p99_us', percentile_cont(0.99) WITHIN GROUP (ORDER BY v), 'mean_us', avg(v), 'n', count(*))
    FROM unnest(x) v
$$;
-- A trivial plpgsql function: the cost of calling a user function.
CREATE FUNCTION pg_temp.trivial(s text) RETURNS int LANGUAGE plpgsql AS $$ BEGIN RETURN length(s); END $$;
CREATE FUNCTION pg_temp.run(model text, sentence text, singles int, repeats int, inserts int) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz; t1 timestamptz; v real[]; n bigint; k int; s text;
    arr text[] := ARRAY(SELECT c.s FROM corpus c ORDER BY c.i);
    total int := cardinality(arr);
    rss_before float8 := pg_temp.rss_mb(); rss_load float8; first_ms float8;
    array_runs float8[] := '{}'; row_runs float8[] := '{}';
    l_embed float8[] := '{}'; l_length float8[] := '{}'; l_select float8[] := '{}'; l_trivial float8[] := '{}';
    l_plain float8[] := '{}'; l_trigger float8[] := '{}';
BEGIN
    t0 := clock_timestamp();
    v := embed(model, 'warm up');
    first_ms := pg_temp.us(t0) / 1000;
    rss_load := pg_temp.rss_mb();
    -- The array form: a warm-up run, then the timed runs.
    SELECT sum(array_length(e, 1)) INTO n FROM embed(model, arr) AS e;
    FOR r IN 1..repeats LOOP
        t0 := clock_timestamp();
        SELECT sum(array_length(e, 1)) INTO n FROM embed(model, arr) AS e;
        array_runs := array_runs || total / (pg_temp.us(t0) / 1e6);
    END LOOP;
    -- One call per row.
    FOR r IN 1..repeats LOOP
        t0 := clock_timestamp();
        SELECT sum(array_length(embed(model, c.s), 1)) INTO n FROM corpus c;
        row_runs := row_runs || total / (pg_temp.us(t0) / 1e6);
    END LOOP;
    -- Single calls, interleaved with the empty calls they are compared with (20 warm-up rounds).
    FOR r IN 1..singles + 20 LOOP
        t0 := clock_timestamp();
        v := embed(model, sentence);           -- arguments are variables: evaluated every call
        t1 := clock_timestamp();
        IF r > 20 THEN l_embed := l_embed || extract(epoch FROM t1 - t0)::float8 * 1e6; END IF;
        t0 := clock_timestamp();
        k := length(sentence);
        t1 := clock_timestamp();
        IF r > 20 THEN l_length := l_length || extract(epoch FROM t1 - t0)::float8 * 1e6; END IF;
        t0 := clock_timestamp();
        SELECT length(sentence) INTO k;
        t1 := clock_timestamp();
        IF r > 20 THEN l_select := l_select || extract(epoch FROM t1 - t0)::float8 * 1e6; END IF;
        t0 := clock_timestamp();
        k := pg_temp.trivial(sentence);
        t1 := clock_timestamp();
        IF r > 20 THEN l_trivial := l_trivial || extract(epoch FROM t1 - t0)::float8 * 1e6; END IF;
    END LOOP;
    -- Single-row INSERTs, one statement each: with the row trigger, then the same row without (20 warm-up rows).
    FOR r IN 1..20 LOOP
        INSERT INTO bench_static_trigger (body) VALUES ('warm up');
        INSERT INTO bench_static_plain (body) VALUES ('warm up');
    END LOOP;
    FOR s IN SELECT c.s FROM corpus c ORDER BY c.i LIMIT inserts LOOP
        t0 := clock_timestamp();
        INSERT INTO bench_static_trigger (body) VALUES (s);
        t1 := clock_timestamp();
        l_trigger := l_trigger || extract(epoch FROM t1 - t0)::float8 * 1e6;
        t0 := clock_timestamp();
        INSERT INTO bench_static_plain (body) VALUES (s);
        t1 := clock_timestamp();
        l_plain := l_plain || extract(epoch FROM t1 - t0)::float8 * 1e6;
    END LOOP;
    RETURN jsonb_build_object(
        'model', model, 'model_info', embed.model_info(model), 'dim', array_length(v, 1),
        'loaded', (SELECT to_jsonb(l) FROM embed.loaded_models() l WHERE l.name = model),
        'threads', current_setting('pg_embed.threads'),
        'first_call_ms', first_ms, 'rss_before_load_mb', rss_before, 'rss_after_load_mb', rss_load,
        'rss_end_mb', pg_temp.rss_mb(), 'sentences', total,
        'array_sentences_per_s', (SELECT max(x) FROM unnest(array_runs) x), 'array_runs', to_jsonb(array_runs),
        'row_sentences_per_s', (SELECT max(x) FROM unnest(row_runs) x), 'row_runs', to_jsonb(row_runs),
        'single_embed', pg_temp.pcts(l_embed), 'single_length', pg_temp.pcts(l_length),
        'single_select', pg_temp.pcts(l_select), 'single_trivial', pg_temp.pcts(l_trivial),
        'insert_plain', pg_temp.pcts(l_plain), 'insert_trigger', pg_temp.pcts(l_trigger),
        'insert_rows', cardinality(l_plain),
        'trigger_rows_filled', (SELECT count(*) FROM bench_static_trigger
                                WHERE array_length(embedding, 1) = array_length(v, 1)),
        'trigger_rows', (SELECT count(*) FROM bench_static_trigger));
END $$;
SELECT pg_temp.run(:'model', :'sentence', :singles, :repeats, :inserts);
SQL
    if [ "$model" = "$STATIC_MODEL" ]; then
        printf '\\copy (SELECT k, e FROM embed(%s, ARRAY(SELECT s FROM corpus ORDER BY i)) WITH ORDINALITY AS t (e, k) ORDER BY k) TO %s\n' \
            "'$model'" "'$RUNS/static.array.tsv'"
        printf '\\copy (SELECT i, embed(%s, s) FROM corpus ORDER BY i) TO %s\n' "'$model'" "'$RUNS/static.rows.tsv'"
    fi
    echo 'DROP TABLE bench_static_plain, bench_static_trigger;'
    } | psql_b -v model="$model" -v threads="$THREADS" -v sentence="$SENTENCE" -v singles="$SINGLES" \
        -v repeats="$REPEATS" -v inserts="$inserts" >"$RUNS/$model.json"
done

# ---- pgbench: the client's view of one statement ------------------------------------------
step "pgbench, one connection, one statement per transaction: $SINGLES statements (+20 warm-up) each"
printf "SELECT length('%s');\n" "$SENTENCE" >"$RUNS/length.sql"
for model in "$STATIC_MODEL" "$MINILM_MODEL"; do
    printf "SELECT embed('%s', '%s');\n" "$model" "$SENTENCE" >"$RUNS/embed_$model.sql"
done
for script in length "embed_$STATIC_MODEL" "embed_$MINILM_MODEL"; do
    (cd "$RUNS" && PGOPTIONS="-c pg_embed.threads=$THREADS" pgb -c 1 -t "$((SINGLES + 20))" -f "$RUNS/$script.sql" \
        -l --log-prefix="$RUNS/pgbench_$script" >/dev/null)
done

# ---- sentence-transformers ----------------------------------------------------------------
step "sentence-transformers StaticEmbedding ($THREADS threads)"
"$BENCH_VENV/bin/python" "$BENCH/static_data.py" baseline --model "$static_dir" --corpus "$CORPUS" \
    --threads "$THREADS" --repeats "$REPEATS" --singles "$SINGLES" --save-vectors "$RUNS/st.npy" \
    2>"$RUNS/st.err" >"$RUNS/st.json" || { cat "$RUNS/st.err" >&2; die "the sentence-transformers baseline failed"; }

load_after="$(cut -d' ' -f1-3 /proc/loadavg)"
info "load average after: $load_after (1, 5, 15 minutes; the bench itself adds about $THREADS)"

step "results"
"$BENCH_VENV/bin/python" - "$RUNS" "$STATIC_MODEL" "$MINILM_MODEL" "$THREADS" <<'PY'
import glob, json, os, sys
import numpy as np
runs, static_name, minilm_name, threads = sys.argv[1:5]

def last_json(name):
    return [json.loads(l) for l in open(os.path.join(runs, name)) if l.strip().startswith("{")][-1]

def vectors(name):
    rows = [l.rstrip("\n").split("\t") for l in open(os.path.join(runs, name)) if l.strip()]
    assert [int(k) for k, _ in rows] == list(range(1, len(rows) + 1)), f"{name}: not rows 1..n in order"
    return np.array([[float(x) for x in v.strip("{}").split(",")] for _, v in rows])

def pgbench(script):
    # pgbench -l: one line per transaction, the 3rd field its latency in us; the first 20 are warm-up.
    lat = sorted(float(l.split()[2]) for f in glob.glob(os.path.join(runs, f"pgbench_{script}.*"))
                 for l in list(open(f))[20:])
    return {"p50_us": lat[int(round(0.5 * (len(lat) - 1)))], "p99_us": lat[int(round(0.99 * (len(lat) - 1)))],
            "n": len(lat)}

sq, mn, st = last_json(f"{static_name}.json"), last_json(f"{minilm_name}.json"), last_json("st.json")
pgb = {"length": pgbench("length"), static_name: pgbench(f"embed_{static_name}"),
       minilm_name: pgbench(f"embed_{minilm_name}")}
st_p50, st_p99 = st["single_p50_ms"] * 1000, st["single_p99_ms"] * 1000

print(f"{'system':58} {'array s/s':>10} {'row s/s':>9} {'p50 us':>9} {'p99 us':>9}")
for p in (sq, mn):
    print(f"{'pg_embed SQL, ' + p['model'] + ' (dim ' + str(p['dim']) + ')':58} {p['array_sentences_per_s']:10.0f} "
          f"{p['row_sentences_per_s']:9.0f} {p['single_embed']['p50_us']:9.1f} {p['single_embed']['p99_us']:9.1f}")
print(f"{'sentence-transformers StaticEmbedding (batch ' + str(st['best_batch']) + ')':58} "
      f"{st['sentences_per_s']:10.0f} {'-':>9} {st_p50:9.1f} {st_p99:9.1f}")
print(f"{'  the same, tokenizer on 1 thread':58} {st['sentences_per_s_tokenizer_1_thread']:10.0f}")
print(f"array: embed(model, text[]) over the {sq['sentences']} corpus sentences ({st['corpus_tokens']} tokens), best of "
      f"{len(sq['array_runs'])} after a warm-up; row: one embed() per row, best of {len(sq['row_runs'])}; "
      f"sentence-transformers: model.encode(corpus, batch_size=B), best B of "
      f"{', '.join(str(r['batch_size']) for r in st['runs'])}, best of {st['repeats']} after a warm-up; "
      f"p50/p99: one {st['single_sentence_tokens']}-token sentence per call, {st['singles']} calls")

print(f"\nsingle calls in plpgsql, us (p50 / p99), {sq['single_embed']['n']} calls each, interleaved:")
rows = [(f"v := embed('{sq['model']}', s)", sq["single_embed"]), (f"v := embed('{mn['model']}', s)", mn["single_embed"]),
        ("n := length(s)  (a C function, embed()'s path)", sq["single_length"]),
        ("SELECT length(s) INTO n  (one SQL statement)", sq["single_select"]),
        ("n := trivial(s)  (a plpgsql function)", sq["single_trivial"])]
for label, x in rows:
    print(f"  {label:52} {x['p50_us']:9.1f} {x['p99_us']:9.1f}")
print(f"one statement from the client (pgbench, 1 connection, autocommit), us (p50 / p99), {pgb['length']['n']} each:")
for label, key in ((f"SELECT embed('{sq['model']}', '<sentence>')", sq["model"]),
                   (f"SELECT embed('{mn['model']}', '<sentence>')", mn["model"]), ("SELECT length('<sentence>')", "length")):
    print(f"  {label:52} {pgb[key]['p50_us']:9.1f} {pgb[key]['p99_us']:9.1f}")

print("\nsingle-row INSERT (id serial, body text, embedding real[]), one statement each in a plpgsql loop, us per INSERT:")
print(f"  {'':30} {'rows':>5} {'mean':>9} {'p50':>9} {'p99':>9}")
for p in (sq, mn):
    for label, key in (("no trigger", "insert_plain"), (f"embed_trigger('{p['model']}')", "insert_trigger")):
        x = p[key]
        print(f"  {label:30} {x['n']:5d} {x['mean_us']:9.1f} {x['p50_us']:9.1f} {x['p99_us']:9.1f}")
    d_mean = p["insert_trigger"]["mean_us"] - p["insert_plain"]["mean_us"]
    d_p50 = p["insert_trigger"]["p50_us"] - p["insert_plain"]["p50_us"]
    print(f"  {'  difference (the trigger)':30} {'':5} {d_mean:9.1f} {d_p50:9.1f}   "
          f"({p['trigger_rows_filled']} of {p['trigger_rows']} rows got a vector of {p['dim']})")

print()
ref = np.load(os.path.join(runs, "st.npy")).astype(np.float64)
accuracy = {}
for form in ("array", "rows"):
    path = os.path.join(runs, f"static.{form}.tsv")
    if not os.path.exists(path):
        continue
    v = vectors(f"static.{form}.tsv")
    if v.shape != ref.shape:
        print(f"accuracy, {form}: n/a: pg_embed's {sq['model']} gives {v.shape}, sentence-transformers {ref.shape}")
        continue
    cos = (v * ref).sum(1) / (np.linalg.norm(v, axis=1) * np.linalg.norm(ref, axis=1))
    accuracy[form] = (np.abs(v - ref).max(), cos.min(), int(cos.argmin()))
    print(f"accuracy, {sq['model']} {'array form' if form == 'array' else 'one call per row'} vs sentence-transformers, "
          f"{len(v)} corpus vectors: max |diff| {accuracy[form][0]:.2e}, min cosine {accuracy[form][1]:.7f} "
          f"(sentence {accuracy[form][2] + 1})")

ratios = {
    f"array s/s: pg_embed {sq['model']} / sentence-transformers static": sq["array_sentences_per_s"] / st["sentences_per_s"],
    f"row s/s: pg_embed {sq['model']} / sentence-transformers static (batch)": sq["row_sentences_per_s"] / st["sentences_per_s"],
    f"single p50: pg_embed {sq['model']} / sentence-transformers static": sq["single_embed"]["p50_us"] / st_p50,
    f"array s/s: pg_embed {sq['model']} / pg_embed {mn['model']}": sq["array_sentences_per_s"] / mn["array_sentences_per_s"],
    f"row s/s: pg_embed {sq['model']} / pg_embed {mn['model']}": sq["row_sentences_per_s"] / mn["row_sentences_per_s"],
    f"single p50: pg_embed {mn['model']} / pg_embed {sq['model']}": mn["single_embed"]["p50_us"] / sq["single_embed"]["p50_us"],
    f"INSERT p50: {sq['model']} trigger / no trigger": sq["insert_trigger"]["p50_us"] / sq["insert_plain"]["p50_us"],
    f"INSERT p50: {mn['model']} trigger / no trigger": mn["insert_trigger"]["p50_us"] / mn["insert_plain"]["p50_us"],
}
print()
for k, v in ratios.items():
    print(f"{k:70} {v:8.2f}")
print()
for p in (sq, mn):
    li = p.get("loaded") or {}
    mb = lambda k: "?" if li.get(k) is None else f"{li[k] / 2**20:.1f} MB"
    print(f"{p['model']}: first call (load + embed) {p['first_call_ms']:.0f} ms; backend RSS {p['rss_before_load_mb']:.0f} MB "
          f"before load, {p['rss_after_load_mb']:.0f} MB after, {p['rss_end_mb']:.0f} MB at the end; resident "
          f"{mb('bytes_resident')}, shared {mb('bytes_shared')}, private {mb('bytes_private')} (loaded_models); "
          f"pg_embed.threads {p['threads']}")
print(f"embed.model_info('{sq['model']}'): {json.dumps(sq['model_info'], sort_keys=True)}")
print(f"sentence-transformers: load {st['load_ms']:.0f} ms; torch {st['torch']}, sentence-transformers "
      f"{st['sentence_transformers']}, torch threads {st['torch_threads']}, tokenizer threads {st['tokenizer_threads']}")
PY
} 2>&1 | tee "$OUT" || { rm -f "$OUT"; die "the run failed (above); nothing written to bench/results"; }
info "written: ${OUT#"$REPO"/}"
