#!/usr/bin/env bash
# The throughput bench: the fixed corpus (bench/corpus.txt, 2,000 sentences of 5-60 words)
# through pg_embed in SQL (one call per row; the array form) in float32 ('minilm'), in
# bfloat16 ('minilm_bf16': the same source registered with {"precision": "bfloat16"}) and in
# int8 ('minilm_int8', {"precision": "int8"}),
# pg_embed's pipeline called from Rust (bench/pipeline.rs, float32), sentence-transformers
# (PyTorch CPU) in float32 and under torch.autocast("cpu", dtype=torch.bfloat16), ONNX Runtime
# float32 and ONNX Runtime int8 (dynamic quantization), and OpenVINO float32, bf16 and int8
# (static quantization) when bench/.venv-openvino exists (bash bench/openvino_env.sh), all with
# the same thread count, in one run, with the machine's FMA peak measured in the same run.
# Prints the CPU and its AVX-512 / AMX flags, sentences/s, single-sentence p50/p99, useful
# GFLOP/s and % of peak per system, the accuracy of every system's corpus vectors (min and mean
# cosine against float32 sentence-transformers' vectors of the same corpus, and the top-10
# agreement of 100 queries' nearest neighbours), the ratios, backend RSS after load and after
# 10,000 calls for the pg_embed models, and the load time;
# writes bench/results/<commit>-<time>.json. Not part of the tests; asserts nothing.
#
#   bench/run.sh [threads]        (default: the machine's cores)
#
# Needs a running server with the model registered as 'minilm' (`make demo`; another port
# with PG_EMBED_PORT=...). 'minilm_bf16' and 'minilm_int8' are (re-)registered from minilm's
# source and options plus their precision; the run stops if a registration fails. The Python
# baselines install into bench/.venv (ignored) on first use; the OpenVINO ones run only when
# bench/.venv-openvino exists (built by bench/openvino_env.sh, never here: the run says so and
# goes on without their rows, as it does if they fail).
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
# shellcheck source=bench/lib.sh
source "$REPO/bench/lib.sh"
pg_embed_resolve_paths

THREADS="${1:-$(nproc)}"
MODEL_NAME=minilm
BF16_MODEL_NAME=minilm_bf16
INT8_MODEL_NAME=minilm_int8
BENCH="$REPO/bench"
CORPUS="$BENCH/corpus.txt"
VENV="$BENCH/.venv"
OUT="$BENCH/results"
mkdir -p "$OUT"
# The systems' outputs (the vectors are too long for arguments).
RUNS="$(mktemp -d)"
trap 'rm -rf "$RUNS"' EXIT

bench_header "$THREADS threads"
cpu_flags=""
for f in avx512f avx512_bf16 amx_bf16 amx_tile; do
    if grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -qx "$f"; then yn=yes; else yn=no; fi
    cpu_flags+="$f=$yn "
done
cpu_flags="${cpu_flags% }"
info "$cpu_flags"
info "$(nproc) cores; $THREADS threads used by every system (pg_embed.threads, torch.set_num_threads, ORT intra_op_num_threads)"

bench_venv "$VENV"

psql_b() { "$PGBIN/psql" -X -q -A -t -h 127.0.0.1 -p "$PG_EMBED_PORT" -U "$PG_SUPERUSER" -d "$PG_EMBED_DB" -v ON_ERROR_STOP=1 "$@"; }

step "models: $MODEL_NAME (float32), $BF16_MODEL_NAME (bfloat16) and $INT8_MODEL_NAME (int8), the same source"
# minilm as `make demo` registered it; minilm_bf16 and minilm_int8 from its source with its
# options plus their precision. A failed registration (e.g. a pg_embed without the precision
# option) stops the run.
ref="$(psql_b -F ' ' -v model="$MODEL_NAME" <<'SQL'
SELECT coalesce(options->>'precision', 'float32'), source FROM embed.models WHERE name = :'model'
SQL
)" || die "cannot read embed.models (is the server running on port $PG_EMBED_PORT with pg_embed installed?)"
[ -n "$ref" ] || die "no model '$MODEL_NAME' in embed.models: run 'make demo' first"
[ "${ref%% *}" = float32 ] || die "'$MODEL_NAME' is registered with precision ${ref%% *}: the bench needs it float32"
# register_variant NAME PRECISION: NAME from minilm's source and options plus {"precision":
# PRECISION}, registered again unless embed.models already holds exactly that.
register_variant() {
    psql_b -v model="$MODEL_NAME" -v variant="$1" -v precision="$2" >>"$RUNS/register.txt" <<'SQL'
SET client_min_messages = warning;
SELECT source AS src, coalesce(options, '{}') || jsonb_build_object('precision', :'precision') AS opts
    FROM embed.models WHERE name = :'model' \gset
SELECT NOT EXISTS (SELECT 1 FROM embed.models WHERE name = :'variant' AND source = :'src' AND options = :'opts'::jsonb)
    AS need_register \gset
\if :need_register
\echo registering :variant :'src' :'opts'
SELECT embed.register_model(:'variant', :'src', :'opts'::jsonb) IS NOT NULL AS registered \gset
\else
\echo :variant already registered: :'src' :'opts'
\endif
SELECT name || ': source ' || source || ', options ' || coalesce(options, '{}')::text || ', dim ' || dim
    FROM embed.models WHERE name = :'variant';
SQL
}
for variant in "$BF16_MODEL_NAME bfloat16" "$INT8_MODEL_NAME int8"; do
    # shellcheck disable=SC2086 # a name and a precision
    register_variant $variant \
        || die "registering '${variant% *}' (${ref#* }, {\"precision\": \"${variant#* }\"}) failed (the error is above; does the installed pg_embed take that precision?)"
done
sed 's/^/    /' "$RUNS/register.txt"

for model in "$MODEL_NAME" "$BF16_MODEL_NAME" "$INT8_MODEL_NAME"; do
    step "pg_embed in SQL, $model ($THREADS threads)"
    # One session (backend) per model: corpus into a table, then: single-sentence latency over
    # the first 200 sentences, one call per row over all, and the array form over all (one
    # warm-up call first), RSS after 10,000 more calls; then, untimed, the vectors of the whole
    # corpus, one call per row and from the array form, into files for the cosines.
    # (\copy takes no psql variables: its lines are written by the shell.)
    { printf 'CREATE TEMP TABLE corpus (i serial, s text);\n\\copy corpus (s) FROM %s\n' "'$CORPUS'"; cat <<'SQL'
SET pg_embed.threads = :threads;
CREATE FUNCTION pg_temp.rss_mb() RETURNS float8 LANGUAGE sql AS $$
    SELECT (regexp_match(pg_read_file('/proc/self/status'), 'VmRSS:\s+(\d+) kB'))[1]::float8 / 1024
$$;
CREATE FUNCTION pg_temp.run(model text) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz; v real[]; n bigint; lat float8[] := '{}'; t text; rows_s float8; array_s float8; total int;
    load_ms float8; rss_load float8; rss_warm float8; rss_calls float8; rss_before float8 := pg_temp.rss_mb();
BEGIN
    t0 := clock_timestamp();
    v := embed(model, 'warm up');
    load_ms := extract(epoch FROM clock_timestamp() - t0) * 1000;
    rss_load := pg_temp.rss_mb();
    total := (SELECT count(*) FROM corpus);
    FOR t IN SELECT s FROM corpus ORDER BY i LIMIT 200 LOOP
        t0 := clock_timestamp();
        v := embed(model, t);
        lat := lat || extract(epoch FROM clock_timestamp() - t0) * 1000;
    END LOOP;
    t0 := clock_timestamp();
    SELECT sum(array_length(embed(model, s), 1)) INTO n FROM corpus;
    rows_s := total / extract(epoch FROM clock_timestamp() - t0);
    t0 := clock_timestamp();
    SELECT sum(array_length(e, 1)) INTO n FROM embed(model, (SELECT array_agg(s ORDER BY i) FROM corpus)) AS e;
    array_s := total / extract(epoch FROM clock_timestamp() - t0);
    -- Warm: 2,201 single calls and a batched run so far (the batch buffers, bounded by
    -- pg_embed.max_batch_tokens, stay with the allocator once used). Then 10,000 more calls.
    rss_warm := pg_temp.rss_mb();
    FOR k IN 1..10000 LOOP
        v := embed(model, (SELECT s FROM corpus WHERE i = 1 + k % total));
    END LOOP;
    rss_calls := pg_temp.rss_mb();
    RETURN jsonb_build_object(
        'model', model, 'model_info', embed.model_info(model),
        'loaded', (SELECT to_jsonb(l) FROM embed.loaded_models() l WHERE l.name = model),
        'memory', jsonb_build_object('rss_before_load_mb', rss_before, 'rss_after_load_mb', rss_load,
            'rss_warm_mb', rss_warm, 'rss_after_10000_calls_mb', rss_calls, 'first_call_ms', load_ms),
        'per_row', jsonb_build_object('system', 'pg_embed SQL, one call per row', 'sentences_per_s', rows_s,
            'single_p50_ms', (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY x) FROM unnest(lat) x),
            'single_p99_ms', (SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY x) FROM unnest(lat) x)),
        'array', jsonb_build_object('system', 'pg_embed SQL, embed(model, text[])', 'sentences_per_s', array_s));
END $$;
SELECT pg_temp.run(:'model');
SQL
    printf '\\copy (SELECT i, embed(%s, s) FROM corpus ORDER BY i) TO %s\n' "'$model'" "'$RUNS/$model.rows.tsv'"
    printf '\\copy (SELECT k, e FROM embed(%s, (SELECT array_agg(s ORDER BY i) FROM corpus)) WITH ORDINALITY AS t (e, k) ORDER BY k) TO %s\n' \
        "'$model'" "'$RUNS/$model.array.tsv'"
    } | psql_b -v model="$model" -v threads="$THREADS" >"$RUNS/$model.json"
done

step "pg_embed pipeline from Rust ($THREADS threads, float32) and the FMA peak"
(cd "$REPO" && cargo run -q --release -p pg_embed_core --example bench_pipeline -- \
    "$REPO/models/all-MiniLM-L6-v2" "$CORPUS" "$THREADS") >"$RUNS/rust.json"

step "baselines ($THREADS threads): sentence-transformers float32 and bf16 autocast, ONNX Runtime float32 and int8"
"$VENV/bin/python" "$BENCH/baselines.py" --model "$REPO/models/all-MiniLM-L6-v2" --corpus "$CORPUS" \
    --threads "$THREADS" --systems st,st_bf16,ort,ort_int8 --save-reference "$RUNS/reference.npy" \
    2>/dev/null >"$RUNS/baselines.json"
OV_VENV="$BENCH/.venv-openvino"
if [ -x "$OV_VENV/bin/python" ]; then
    step "OpenVINO baselines ($THREADS threads, $OV_VENV): float32, bf16 hint, int8 static"
    "$OV_VENV/bin/python" "$BENCH/baselines.py" --model "$REPO/models/all-MiniLM-L6-v2" --corpus "$CORPUS" \
        --threads "$THREADS" --systems ov,ov_bf16,ov_int8 --reference "$RUNS/reference.npy" \
        2>"$RUNS/openvino.err" >>"$RUNS/baselines.json" \
        || { tail -n 5 "$RUNS/openvino.err" | sed 's/^/    /'; info "the OpenVINO baselines failed: no OpenVINO rows"; }
else
    info "no $OV_VENV (bash bench/openvino_env.sh builds it): no OpenVINO rows"
fi

commit="$(git -C "$REPO" rev-parse --short HEAD)"
result="$OUT/$commit-$(date -u +%Y%m%dT%H%M%SZ).json"
"$VENV/bin/python" - "$result" "$commit" "$THREADS" "$cpu" "$cpu_flags" "$RUNS" "$MODEL_NAME" "$BF16_MODEL_NAME" \
    "$INT8_MODEL_NAME" "$BENCH" <<'PY'
import json, os, sys
import numpy as np
path, commit, threads, cpu, cpu_flags, runs, fp32_name, bf16_name, int8_name, bench = sys.argv[1:11]
sys.path.insert(0, bench)
from baselines import cosine_stats

def lines(name):
    return [json.loads(l) for l in open(os.path.join(runs, name)) if l.strip().startswith("{")]

def vectors(name):
    rows = [l.rstrip("\n").split("\t") for l in open(os.path.join(runs, name)) if l.strip()]
    assert [int(k) for k, _ in rows] == list(range(1, len(rows) + 1)), f"{name}: not rows 1..n in order"
    return np.array([[float(x) for x in v.strip("{}").split(",")] for _, v in rows])

reference = np.load(os.path.join(runs, "reference.npy"))
rust = lines("rust.json")
machine = next(r for r in rust if r["system"] == "machine")
baselines = {b.pop("key"): b for b in lines("baselines.json")}
pg = {}
for name, label in ((fp32_name, "float32"), (bf16_name, "bfloat16"), (int8_name, "int8")):
    p = lines(f"{name}.json")[-1]
    rows_cos = cosine_stats(vectors(f"{name}.rows.tsv"), reference)
    array_cos = cosine_stats(vectors(f"{name}.array.tsv"), reference)
    for form, cos in (("per_row", rows_cos), ("array", array_cos)):
        p[form]["system"] = p[form]["system"].replace("pg_embed SQL", f"pg_embed SQL {label}")
        p[form].update({"model": name, "precision": label, **cos})
    pg[label] = p
fp, bf, i8 = pg["float32"], pg["bfloat16"], pg["int8"]
systems = [fp["per_row"], fp["array"], bf["per_row"], bf["array"], i8["per_row"], i8["array"]] \
    + [r for r in rust if r["system"] not in ("machine", "stages")] \
    + list(baselines.values())
peak = machine["fma_peak_gflops"]
for s in systems:
    s["useful_gflops"] = machine["corpus_useful_gflop"] * s["sentences_per_s"] / 2000
    s["percent_of_fma_peak"] = 100 * s["useful_gflops"] / peak
ort, ort8 = baselines["ort"], baselines["ort_int8"]
st, st16 = baselines["st"], baselines["st_bf16"]
rs = next(s for s in systems if s["system"].startswith("pg_embed pipeline"))
print(f"CPU: {cpu}; {cpu_flags}; {os.cpu_count()} cores, {threads} threads used")
print(f"FMA peak ({machine.get('fma_peak_vector', 'AVX2')}), {threads} threads: {peak:.1f} GFLOP/s; corpus: {machine['corpus_tokens']} tokens, "
      f"{machine['corpus_useful_gflop']:.1f} useful GFLOP")
print(f"{'system':52} {'sentences/s':>12} {'p50 ms':>8} {'p99 ms':>8} {'GFLOP/s':>8} {'% peak':>7}")
fmt = lambda v, d=2: "-" if v is None else f"{v:.{d}f}"
for s in systems:
    print(f"{s['system']:52} {s['sentences_per_s']:12.1f} {fmt(s.get('single_p50_ms')):>8} "
          f"{fmt(s.get('single_p99_ms')):>8} {s['useful_gflops']:8.1f} {s['percent_of_fma_peak']:7.1f}")

# Side by side: one row per system. Batch: pg_embed's array form, the Python systems at their
# best batch size. Cosines: against float32 sentence-transformers' vectors of the whole corpus
# (pg_embed: the one-call-per-row vectors; the array form's are printed below the table).
table = []
for label, p in (("pg_embed float32 (minilm)", fp), ("pg_embed bfloat16 (minilm_bf16)", bf),
                 ("pg_embed int8 (minilm_int8)", i8)):
    table.append({"system": label, "batch": p["array"]["sentences_per_s"], "per_row": p["per_row"]["sentences_per_s"],
                  "p50": p["per_row"]["single_p50_ms"], "p99": p["per_row"]["single_p99_ms"],
                  "min_cos": p["per_row"]["min_cos_vs_st_fp32"], "mean_cos": p["per_row"]["mean_cos_vs_st_fp32"],
                  "top10": p["per_row"]["top10_vs_st_fp32"], "kernel": p["loaded"]["kernel"]})
table.append({"system": "pg_embed pipeline from Rust (float32)", "batch": rs["sentences_per_s"], "per_row": None,
              "p50": rs["single_p50_ms"], "p99": rs["single_p99_ms"], "min_cos": None, "mean_cos": None, "top10": None})
for key, label in (("ort", "ONNX Runtime float32"), ("ort_int8", "ONNX Runtime int8 dynamic"),
                   ("st", "sentence-transformers float32"), ("st_bf16", "sentence-transformers bf16 autocast"),
                   ("ov", "OpenVINO float32"), ("ov_bf16", "OpenVINO bf16 hint"), ("ov_int8", "OpenVINO int8 static")):
    if key not in baselines:  # the OpenVINO rows: only with bench/.venv-openvino
        continue
    b = baselines[key]
    if key == "ov_bf16" and b["inference_precision_hint"] != "bf16":
        label += f" (ran {b['inference_precision_hint']})"
    table.append({"system": label, "batch": b["sentences_per_s"], "per_row": None, "batch_size": b["best_batch"],
                  "p50": b["single_p50_ms"], "p99": b["single_p99_ms"],
                  "min_cos": b["min_cos_vs_st_fp32"], "mean_cos": b["mean_cos_vs_st_fp32"],
                  "top10": b.get("top10_vs_st_fp32")})
for t in table:
    t["batch_vs_ort_fp32"] = t["batch"] / ort["sentences_per_s"]
    t["batch_vs_ort_int8"] = t["batch"] / ort8["sentences_per_s"]
    t["p50_vs_ort_fp32_p50"] = t["p50"] / ort["single_p50_ms"]
print()
print(f"{'system':38} {'batch s/s':>9} {'row s/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'min cos':>8} {'mean cos':>8} "
      f"{'top-10':>6} {'/ORT32':>6} {'/ORT8':>6} {'p50/ORT32':>9}")
for t in table:
    print(f"{t['system']:38} {t['batch']:9.1f} {fmt(t['per_row'], 1):>8} {t['p50']:7.2f} {t['p99']:7.2f} "
          f"{fmt(t['min_cos'], 5):>8} {fmt(t['mean_cos'], 5):>8} {fmt(t['top10'], 3):>6} {t['batch_vs_ort_fp32']:6.2f} "
          f"{t['batch_vs_ort_int8']:6.2f} {t['p50_vs_ort_fp32_p50']:9.2f}")
print("batch: pg_embed embed(model, text[]) over the corpus, the Python systems at their best batch size "
      f"({', '.join(k + ' ' + str(b['best_batch']) for k, b in baselines.items())}); row: one embed() call per row in SQL; "
      "p50/p99: one sentence per call (pg_embed: per row in SQL); cos: against float32 sentence-transformers, "
      f"all {len(reference)} corpus vectors (pg_embed: the per-row vectors); top-10: the first 100 corpus sentences "
      "as queries, the overlap of each one's 10 nearest other sentences with float32 sentence-transformers' "
      f"10 nearest, averaged; pg_embed kernels: {', '.join(t['system'].split()[1] + ' ' + t['kernel'] for t in table if t.get('kernel'))}")
for label, p in pg.items():
    a = p["array"]
    print(f"pg_embed {label} array-form vectors: min cos {a['min_cos_vs_st_fp32']:.5f}, mean {a['mean_cos_vs_st_fp32']:.5f}; "
          f"largest | |v| - 1 |: per row {p['per_row']['max_norm_error']:.1e}, array {a['max_norm_error']:.1e}")
q = ort8.get("quantization", {})
print(f"ORT int8: quantize_dynamic, weights {q.get('weight_type')}, per_channel={q.get('per_channel')}, "
      f"reduce_range={q.get('reduce_range')}, op types {q.get('op_types_to_quantize')}, activations {q.get('activations')}")
if "ov_int8" in baselines:
    q = baselines["ov_int8"]["quantization"]
    print(f"OpenVINO int8: {q['function']}, preset {q['preset']}, SmoothQuant alpha {q['smooth_quant_alpha_matmul']}, "
          f"weights: {q['weights']}; activations: {q['activations']}; calibration: {q['calibration']['sentences']} "
          f"generated sentences; {q['file_mb']:.1f} MB")

arr, row = fp["array"]["sentences_per_s"], fp["per_row"]
ratios = {
    "array / ORT (batch throughput)": arr / ort["sentences_per_s"],
    "Rust pipeline / ORT (batch throughput)": rs["sentences_per_s"] / ort["sentences_per_s"],
    "array / sentence-transformers": arr / st["sentences_per_s"],
    "single p50: SQL per row / ORT": row["single_p50_ms"] / ort["single_p50_ms"],
    "single p50: SQL per row / sentence-transformers": row["single_p50_ms"] / st["single_p50_ms"],
    "single p50: SQL per row / Rust pipeline": row["single_p50_ms"] / rs["single_p50_ms"],
    "bf16 array / float32 array": bf["array"]["sentences_per_s"] / arr,
    "bf16 array / ORT int8 (batch throughput)": bf["array"]["sentences_per_s"] / ort8["sentences_per_s"],
    "bf16 per row / float32 per row": bf["per_row"]["sentences_per_s"] / row["sentences_per_s"],
    "single p50: bf16 SQL per row / float32 SQL per row": bf["per_row"]["single_p50_ms"] / row["single_p50_ms"],
    "int8 array / bf16 array": i8["array"]["sentences_per_s"] / bf["array"]["sentences_per_s"],
    "int8 array / float32 array": i8["array"]["sentences_per_s"] / arr,
    "single p50: int8 SQL per row / bf16 SQL per row": i8["per_row"]["single_p50_ms"] / bf["per_row"]["single_p50_ms"],
    "sentence-transformers bf16 autocast / float32 (batch)": st16["sentences_per_s"] / st["sentences_per_s"],
    "ORT int8 / float32 (batch)": ort8["sentences_per_s"] / ort["sentences_per_s"],
}
if "ov" in baselines and "ov_int8" in baselines:
    ratios["OpenVINO float32 / ORT float32 (batch)"] = baselines["ov"]["sentences_per_s"] / ort["sentences_per_s"]
    ratios["OpenVINO int8 / float32 (batch)"] = baselines["ov_int8"]["sentences_per_s"] / baselines["ov"]["sentences_per_s"]
    ratios["int8 array / OpenVINO int8 (batch)"] = i8["array"]["sentences_per_s"] / baselines["ov_int8"]["sentences_per_s"]
print()
for k, v in ratios.items():
    print(f"{k:56} {v:6.2f}")
memory = {}
for label, p in pg.items():
    mem = p["memory"]
    mem["growth_per_call_kb"] = (mem["rss_after_10000_calls_mb"] - mem["rss_warm_mb"]) * 1024 / 10000
    memory[p["model"]] = mem
    print(f"backend RSS, {p['model']} ({label}): {mem['rss_before_load_mb']:.1f} MB before load, "
          f"{mem['rss_after_load_mb']:.1f} MB after load, {mem['rss_warm_mb']:.1f} MB warm (2,201 calls and the array "
          f"run), {mem['rss_after_10000_calls_mb']:.1f} MB after 10,000 more calls ({mem['growth_per_call_kb']:.3f} kB "
          f"per call); first call (load + embed) {mem['first_call_ms']:.0f} ms")
print(f"model load from Rust (float32) {rs['load_ms']:.0f} ms")
for label, p in pg.items():
    li, precision = p.get("loaded") or {}, (p.get("model_info") or {}).get("precision", "?")
    mb = lambda k: "?" if li.get(k) is None else f"{li[k] / 2**20:.1f} MB"
    print(f"{p['model']}: precision {precision} (model_info), kernel {li.get('kernel', '?')}, resident "
          f"{mb('bytes_resident')}, shared {mb('bytes_shared')}, private {mb('bytes_private')} (loaded_models)")
    if precision != label:
        print(f"WARNING: {p['model']} was measured with precision {precision}, not {label}")
json.dump({"commit": commit, "threads": int(threads),
           "cpu": {"model": cpu, "flags": dict(f.split("=") for f in cpu_flags.split()), "cores": os.cpu_count()},
           "machine": machine, "systems": systems, "side_by_side": table, "ratios": ratios,
           "memory": memory[fp["model"]], "memory_by_model": memory,
           "model_info": {p["model"]: p.get("model_info") for p in pg.values()}},
          open(path, "w"), indent=1)
print(f"wrote {path}")
PY
