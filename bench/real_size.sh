#!/usr/bin/env bash
# Real sizes: pg_embed in a running PostgreSQL server on models of three real embedding models'
# shapes, with seeded random weights (bench/real_size_data.py; nothing is downloaded):
#
#   bert-large  e5-large-v2's / bge-large-en-v1.5's shape (0.34 B parameters, float32
#               safetensors, 1.3 GB, mean pooling), like qwen2-1.5b below;
#   qwen2-1.5b  gte-Qwen2-1.5B-instruct's shape (1.54 B parameters, float32 safetensors in
#               2 shards and model.safetensors.index.json, 6.2 GB),
#               pg_embed in float32 and in bfloat16 ({"precision": "bfloat16"}), each followed
#               by sentence-transformers on PyTorch (float32; bfloat16 autocast) with the same
#               thread count, interleaved;
#   mistral-7b  e5-mistral-7b-instruct's shape (7.11 B parameters, bfloat16 safetensors in
#               3 shards, 14.2 GB), pg_embed in bfloat16, then PyTorch with the weights in
#               bfloat16 (a float32 PyTorch reference would need 28 GB).
#
# For each pg_embed run, in a server of its own (port PG_EMBED_REALSIZE_PORT, default 28841,
# data under bench/.cache/real_size):
#   - registration (embed.register_model: read the safetensors, prepare the weights, write
#     the shared prepared file): its time, the registering backend's memory after it (it
#     holds the weights it built) and after its next call (it maps the file instead), and,
#     sampled every 0.25 s while it runs, the peak of the backend's resident and private
#     memory, of the machine's used memory, dirty page cache and disk (the prepared file);
#   - a fresh backend: its first call (maps the file), sentences/s on the first SENTENCES
#     corpus sentences in one embed(model, text[]) call, its RSS / PSS / private memory;
#   - BACKENDS (default 4) backends that have each embedded a sentence: each one's RSS, PSS
#     and private memory, and their sum (the shared file counts once in PSS);
#   - the predicted size pg_embed.max_model_size compares against the file's real size.
# The source weights are dropped from the page cache before each registration and each
# PyTorch load (posix_fadvise on those files only), so both read them from disk.
# The CPU, its flags and the load average before each run are printed; other work on the
# machine shows there (more than the bench's THREADS means contention).
#
#   bench/real_size.sh [threads]            (default: the machine's cores)
#
# PG_EMBED_REALSIZE_MODELS   which, in order (default "bert-large qwen2-1.5b mistral-7b")
# PG_EMBED_REALSIZE_SENTENCES sentences for sentences/s (default 64, 8 for 7 B:
#                            "bert-large=64 qwen2-1.5b=64 mistral-7b=8")
# PG_EMBED_REALSIZE_TORCH    0: skip PyTorch (default 1)
# PG_EMBED_REALSIZE_KEEP     1: keep the generated models and prepared files (default: the
#                            models (1.3 + 6.2 + 14.2 GB) and the server with its prepared
#                            files are deleted at the end; generating them takes ~2.5 minutes)
# PG_EMBED_REALSIZE_SOURCE  disk (default): the checkpoint is dropped from the page cache
#                            before each registration and PyTorch load (both read it from
#                            disk); cache: it is read into the page cache first instead
# PG_EMBED_REALSIZE_INTERVAL the memory sampler's interval in seconds (default 0.25)
# PG_EMBED_REALSIZE_GUARD_MB the sampler kills the largest backend when the machine's
#                            MemAvailable falls below this (default 1024; 0: never) so that an
#                            out-of-memory load ends that backend, not other processes
#
# Needs about 36 GB of disk (the three models, 21.7 GB, and one prepared file at a time) and,
# for the 7 B model, about 24 GB of memory. Takes about 13 minutes on 2 cores, the models'
# generation included.
# Writes bench/results/real_size-<commit>-<time>.{json,txt} and the samplers' timelines
# (-sample-<model>.csv). Asserts nothing.
set -euo pipefail
_here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
CACHE="$_here/.cache/real_size"
export PG_EMBED_PORT="${PG_EMBED_REALSIZE_PORT:-28841}"
export PGDATA="$CACHE/pgdata" PG_SOCKET_DIR="$CACHE/run" PG_LOG="$CACHE/log/server.log" MODEL_DIR="$CACHE/models"
# shellcheck source=scripts/env.sh
source "$_here/../scripts/env.sh"
# shellcheck source=bench/lib.sh
source "$REPO/bench/lib.sh"

THREADS="${1:-$(nproc)}"
MODELS="${PG_EMBED_REALSIZE_MODELS:-bert-large qwen2-1.5b mistral-7b}"
SENTENCES_SPEC="${PG_EMBED_REALSIZE_SENTENCES:-bert-large=64 qwen2-1.5b=64 mistral-7b=8}"
TORCH="${PG_EMBED_REALSIZE_TORCH:-1}"
KEEP="${PG_EMBED_REALSIZE_KEEP:-0}"
GUARD_MB="${PG_EMBED_REALSIZE_GUARD_MB:-1024}"
SOURCE="${PG_EMBED_REALSIZE_SOURCE:-disk}"
INTERVAL="${PG_EMBED_REALSIZE_INTERVAL:-0.25}"
case "$SOURCE" in disk|cache) ;; *) echo "PG_EMBED_REALSIZE_SOURCE must be disk or cache" >&2; exit 2 ;; esac
# source_files DIR: puts the checkpoint on disk only, or in the page cache (PG_EMBED_REALSIZE_SOURCE).
source_files() {
    if [ "$SOURCE" = cache ]; then cat "$1"/model*.safetensors >/dev/null; else "$PY" "$DATA" evict "$1"/model*.safetensors; fi
}
BACKENDS=4
VECTORS=8
BENCH_VENV="${PG_EMBED_BENCH_VENV:-$REPO/bench/.venv}"
PY="$BENCH_VENV/bin/python"
DATA="$REPO/bench/real_size_data.py"
CORPUS="$REPO/bench/corpus.txt"
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false

commit="$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$REPO" diff --quiet HEAD -- crates src 2>/dev/null || echo +changes)"
stamp="$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$REPO/bench/results" "$CACHE"
OUT="$REPO/bench/results/real_size-$commit-$stamp"
RUN="$(mktemp -d)"
RECORDS="$RUN/records.jsonl"
started="$EPOCHREALTIME"
SAMPLER_PID=""

cleanup() {
    [ -n "$SAMPLER_PID" ] && kill "$SAMPLER_PID" 2>/dev/null || true
    jobs -p | xargs -r kill 2>/dev/null || true
    "$REPO/scripts/server.sh" stop >/dev/null 2>&1 || true
    if [ "$KEEP" != 1 ]; then
        rm -rf "$MODEL_DIR" "$PGDATA"
    fi
    rm -rf "$RUN"
}

q() { psql_cmd -d postgres -v ON_ERROR_STOP=1 -Atq "$@"; }
record() { printf '%s\n' "$1" >>"$RECORDS"; }
load_now() { cut -d' ' -f1-3 /proc/loadavg; }
sentences_of() { sed -n "s/.*$1=\([0-9]*\).*/\1/p" <<<"$SENTENCES_SPEC"; }

# The backend's memory, from inside it: RSS, private (RssAnon), file-mapped (RssFile), PSS.
MEM_FN="CREATE FUNCTION pg_temp.mem() RETURNS jsonb LANGUAGE sql AS \$\$
  SELECT jsonb_build_object(
    'rss_mb', (regexp_match(s, 'VmRSS:\\s+(\\d+) kB'))[1]::float8 / 1024,
    'anon_mb', (regexp_match(s, 'RssAnon:\\s+(\\d+) kB'))[1]::float8 / 1024,
    'file_mb', (regexp_match(s, 'RssFile:\\s+(\\d+) kB'))[1]::float8 / 1024,
    'hwm_mb', (regexp_match(s, 'VmHWM:\\s+(\\d+) kB'))[1]::float8 / 1024,
    'pss_mb', (regexp_match(r, 'Pss:\\s+(\\d+) kB'))[1]::float8 / 1024)
  FROM pg_read_file('/proc/self/status') AS s, pg_read_file('/proc/self/smaps_rollup') AS r \$\$;"

# ---- the models ---------------------------------------------------------------------------
{
trap cleanup EXIT
bench_header "$THREADS threads; models: $MODELS"
info "$(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2 | tr ' ' '\n' | grep -E '^(avx2|fma|avx512f|avx512_bf16|amx_bf16|amx_tile)$' | tr '\n' ' ')(the kernels' dispatch flags)"
info "memory: $(awk '/MemTotal|MemAvailable/ { printf "%s %.1f GiB  ", $1, $2 / 1048576 }' /proc/meminfo); swap: $(awk '/SwapTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
bench_venv "$BENCH_VENV"
record "{\"kind\": \"machine\", \"cpu\": \"$cpu\", \"flags\": \"$(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2 | xargs)\", \"cores\": $(nproc), \"threads\": $THREADS, \"mem_total_mb\": $(awk '/MemTotal/ { print int($2 / 1024) }' /proc/meminfo), \"load_before\": \"$load_before\", \"commit\": \"$commit\"}"

declare -A DTYPE=([bert-large]=float32 [qwen2-1.5b]=float32 [mistral-7b]=bfloat16)
declare -A PRECISIONS=([bert-large]="float32 bfloat16" [qwen2-1.5b]="float32 bfloat16" [mistral-7b]="bfloat16")
for shape in $MODELS; do
    dir="$MODEL_DIR/real-$shape"
    if [ ! -e "$dir/done" ]; then
        step "generating the $shape-shaped model (${DTYPE[$shape]} safetensors, seeded; first run only)"
        t0="$EPOCHREALTIME"
        "$PY" "$DATA" gen "$dir" "$shape" "${DTYPE[$shape]}" "$CORPUS"
        info "generated in $(elapsed_since "$t0"): $(du -sh "$dir" | cut -f1)"
    fi
done
chmod -R a+rX "$CACHE/models"
ensure_pg_user_access "$MODEL_DIR" "$MODEL_DIR"

# ---- the server -----------------------------------------------------------------------------
step "a server of its own on port $PG_EMBED_PORT (data $PGDATA)"
"$REPO/scripts/server.sh" start
q -c "SET client_min_messages = warning" -c "CREATE EXTENSION IF NOT EXISTS pg_embed"
info "pg_embed.max_model_size = $(q -c "LOAD 'pg_embed'" -c 'SHOW pg_embed.max_model_size')"
POSTMASTER="$(head -1 "$PGDATA/postmaster.pid")"
CACHE_DIR="$PGDATA/pg_embed_cache"
as_pg_user mkdir -p "$CACHE_DIR"
q -c "SET client_min_messages = warning" -c "CREATE TABLE IF NOT EXISTS corpus (n serial PRIMARY KEY, line text NOT NULL)" -c "TRUNCATE corpus RESTART IDENTITY"
q -c "\\copy corpus(line) FROM '$CORPUS'"

# ---- pg_embed: registration, a fresh backend, BACKENDS backends ------------------------------
# pg_run SHAPE PRECISION SENTENCES
pg_run() {
    local shape="$1" precision="$2" sentences="$3" name="real_${1//[-.]/_}_$2" dir="$MODEL_DIR/real-$1"
    local options="{\"precision\": \"$precision\"}" load out pids=() i
    step "pg_embed, $shape, $precision ($THREADS threads): registration; load average before: $(load_now)"
    q -c "SET client_min_messages = warning" -c "SELECT embed.drop_model('$name') FROM embed.models WHERE name = '$name'" \
        -c "SELECT count(*) FROM embed.cache_cleanup()" >/dev/null
    source_files "$dir"
    # What pg_embed.max_model_size compares (crates/pg_embed_core/src/weights.rs
    # prepared_bytes, computed here the same way from the headers), against the file's size.
    local predicted
    predicted="$("$PY" - "$dir" "$precision" <<'PY'
import glob, json, struct, sys
d, precision = sys.argv[1:3]
keep = ["embed", "wte", "wpe", "shared", "relative_attention_bias", "classifier", "score"]
b = 0
for path in glob.glob(f"{d}/model*.safetensors"):
    f = open(path, "rb"); h = json.loads(f.read(struct.unpack("<Q", f.read(8))[0])); h.pop("__metadata__", None)
    for k, v in h.items():
        n = 1
        for x in v["shape"]:
            n *= x
        b += n * (2 if precision == "bfloat16" and len(v["shape"]) == 2 and not any(p in k for p in keep) else 4)
print(-(-b // 2**20))
PY
)"
    "$PY" "$DATA" sample "$RUN/sample-$name.csv" --postmaster "$POSTMASTER" --disk "$CACHE_DIR" \
        --interval "$INTERVAL" --kill-below-mb "$GUARD_MB" >"$RUN/sample-$name.json" &
    SAMPLER_PID=$!
    sleep 0.5
    load="$(load_now)"
    out="$RUN/register-$name.out"
    if ! q >"$out" 2>&1 <<SQL
SET client_min_messages = warning;
SET pg_embed.threads = $THREADS;
$MEM_FN
SELECT 'json ' || json_build_object('before', pg_temp.mem());
CREATE TEMP TABLE t AS SELECT clock_timestamp() AS t0;
SELECT embed.register_model('$name', 'real-$shape', '$options') IS NOT NULL AS registered \\g /dev/null
SELECT 'json ' || json_build_object('register_ms', extract(epoch FROM clock_timestamp() - t0) * 1000,
    'after_register', pg_temp.mem()) FROM t;
UPDATE t SET t0 = clock_timestamp();
SELECT array_length(embed('$name', 'the registering backend maps the shared file'), 1) \\g /dev/null
SELECT 'json ' || json_build_object('next_call_ms', extract(epoch FROM clock_timestamp() - t0) * 1000,
    'after_next_call', pg_temp.mem(),
    'loaded', (SELECT to_jsonb(l) FROM embed.loaded_models() l WHERE name = '$name'),
    'file_bytes', (SELECT sum(bytes) FROM embed.cache_files() WHERE needed AND file LIKE '%.weights')) FROM t;
SQL
    then
        kill "$SAMPLER_PID" 2>/dev/null || true; wait "$SAMPLER_PID" || true; SAMPLER_PID=""
        info "registration FAILED:"; sed 's/^/      /' "$out" | tail -5
        info "sampler: $(cat "$RUN/sample-$name.json")"
        tail -n 5 "$PG_LOG" | sed 's/^/      log: /'
        cp "$RUN/sample-$name.csv" "$OUT-sample-$name.csv"
        record "{\"kind\": \"pg_failed\", \"shape\": \"$shape\", \"precision\": \"$precision\", \"load\": \"$load\", \"predicted_mb\": $predicted, \"error\": $(tail -3 "$out" | "$PY" -c 'import json,sys; print(json.dumps(sys.stdin.read()))'), \"sample\": $(cat "$RUN/sample-$name.json" 2>/dev/null || echo null)}"
        # A killed backend restarts the server's processes; wait until it accepts connections.
        for _ in $(seq 1 600); do "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$PG_EMBED_PORT" -U "$PG_SUPERUSER" && break; sleep 0.1; done
        return 0
    fi
    kill "$SAMPLER_PID"; wait "$SAMPLER_PID" || true; SAMPLER_PID=""
    cp "$RUN/sample-$name.csv" "$OUT-sample-$name.csv"
    local reg
    reg="$(sed -n 's/^json //p' "$out" | "$PY" -c 'import json,sys; d={}; [d.update(json.loads(l)) for l in sys.stdin]; print(json.dumps(d))')"
    info "registered in $("$PY" -c "import json,sys; print(round(json.loads(sys.argv[1])['register_ms']/1000,1))" "$reg") s"

    step "pg_embed, $shape, $precision: a fresh backend's first call, $sentences sentences, $BACKENDS backends; load average before: $(load_now)"
    local load2
    load2="$(load_now)"
    # Sampled again while the backends compute: each one's working (private) memory.
    "$PY" "$DATA" sample "$RUN/run-$name.csv" --postmaster "$POSTMASTER" --disk "$CACHE_DIR" \
        --kill-below-mb "$GUARD_MB" >"$RUN/run-$name.json" &
    SAMPLER_PID=$!
    sleep 0.5
    out="$RUN/fresh-$name.out"
    q >"$out" 2>&1 <<SQL &
SET client_min_messages = warning;
SET pg_embed.threads = $THREADS;
$MEM_FN
SELECT 'pid ' || pg_backend_pid();
SELECT 'json ' || json_build_object('before', pg_temp.mem());
CREATE TEMP TABLE t AS SELECT clock_timestamp() AS t0;
SELECT array_length(embed('$name', (SELECT line FROM corpus WHERE n = 1)), 1) \\g /dev/null
SELECT 'json ' || json_build_object('first_call_ms', extract(epoch FROM clock_timestamp() - t0) * 1000,
    'after_first_call', pg_temp.mem()) FROM t;
UPDATE t SET t0 = clock_timestamp();
CREATE TEMP TABLE v AS SELECT e, row_number() OVER () AS i FROM embed('$name', (SELECT array_agg(line ORDER BY n) FROM corpus WHERE n <= $sentences)) AS e;
SELECT 'json ' || json_build_object('batch_ms', extract(epoch FROM clock_timestamp() - t0) * 1000,
    'sentences', (SELECT count(*) FROM v), 'dim', (SELECT array_length(e, 1) FROM v LIMIT 1),
    'after_run', pg_temp.mem(),
    'tokens', (SELECT tokens FROM embed.loaded_models() WHERE name = '$name'),
    'vectors', (SELECT jsonb_agg(to_jsonb(e) ORDER BY i) FROM v WHERE i <= $VECTORS)) FROM t;
SELECT 'ready';
SELECT pg_sleep(3600);
SQL
    pids=()
    for i in $(seq 1 "$BACKENDS"); do
        [ "$i" -gt 1 ] && {
            out="$RUN/other-$name-$i.out"
            q >"$out" 2>&1 <<SQL &
SET client_min_messages = warning;
SET pg_embed.threads = $THREADS;
SELECT 'pid ' || pg_backend_pid();
CREATE TEMP TABLE t AS SELECT clock_timestamp() AS t0;
SELECT array_length(embed('$name', (SELECT line FROM corpus WHERE n = $i)), 1) \\g /dev/null
SELECT 'json ' || json_build_object('first_call_ms', extract(epoch FROM clock_timestamp() - t0) * 1000) FROM t;
SELECT 'ready';
SELECT pg_sleep(3600);
SQL
        }
        for _ in $(seq 1 36000); do grep -q '^ready' "$out" && break; grep -q 'ERROR' "$out" && break; sleep 0.1; done
        grep -q '^ready' "$out" || { info "backend $i failed:"; sed 's/^/      /' "$out" | tail -5; break; }
        pids+=("$(sed -n 's/^pid //p' "$out")")
    done
    local procmem=null available
    available="$(awk '/MemAvailable/ { print int($2 / 1024) }' /proc/meminfo)"
    [ "${#pids[@]}" -gt 0 ] && procmem="$("$PY" "$DATA" procmem "${pids[@]}")"
    q -c "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE pid IN ($(IFS=,; echo "${pids[*]:-0}"))" >/dev/null
    kill "$SAMPLER_PID"; wait "$SAMPLER_PID" || true; SAMPLER_PID=""
    wait 2>/dev/null || true
    local fresh others
    fresh="$(sed -n 's/^json //p' "$RUN/fresh-$name.out" | "$PY" -c 'import json,sys; d={}; [d.update(json.loads(l)) for l in sys.stdin]; print(json.dumps(d))')"
    others="$(for i in $(seq 2 "$BACKENDS"); do sed -n 's/^json //p' "$RUN/other-$name-$i.out" 2>/dev/null; done | "$PY" -c 'import json,sys; print(json.dumps([json.loads(l)["first_call_ms"] for l in sys.stdin]))')"
    record "{\"kind\": \"pg\", \"shape\": \"$shape\", \"precision\": \"$precision\", \"threads\": $THREADS, \"load_register\": \"$load\", \"load_run\": \"$load2\", \"predicted_mb\": $predicted, \"register\": $reg, \"sample\": $(cat "$RUN/sample-$name.json"), \"run_sample\": $(cat "$RUN/run-$name.json"), \"fresh\": $fresh, \"other_first_calls_ms\": $others, \"backends\": $procmem, \"available_with_backends_mb\": $available}"
    q -c "SELECT embed.drop_model('$name')" -c "SELECT count(*) FROM embed.cache_cleanup()" >/dev/null
}

# torch_run SHAPE SENTENCES ARGS...
torch_run() {
    local shape="$1" sentences="$2" dir="$MODEL_DIR/real-$1" load
    shift 2
    load="$(load_now)"
    step "PyTorch, $shape, $* ($THREADS threads); load average before: $load"
    source_files "$dir"
    local line
    if line="$("$PY" "$DATA" torch "$dir" "$CORPUS" --threads "$THREADS" --sentences "$sentences" --batch "$sentences" \
        --vectors "$VECTORS" "$@" 2>"$RUN/torch.err" | grep '^{')"; then
        record "$("$PY" -c 'import json,sys; d=json.loads(sys.stdin.read()); d.update(kind="torch", shape=sys.argv[1], load=sys.argv[2]); print(json.dumps(d))' "$shape" "$load" <<<"$line")"
    else
        info "PyTorch FAILED:"; tail -5 "$RUN/torch.err" | sed 's/^/      /'
    fi
}

for shape in $MODELS; do
    n="$(sentences_of "$shape")"
    for precision in ${PRECISIONS[$shape]}; do
        pg_run "$shape" "$precision" "$n"
        if [ "$TORCH" = 1 ]; then
            case "$shape:$precision" in
                mistral-7b:bfloat16) torch_run "$shape" "$n" --dtype bfloat16 ;;
                *:float32) torch_run "$shape" "$n" ;;
                *:bfloat16) torch_run "$shape" "$n" --bf16 ;;
            esac
        fi
    done
done

step "report"
info "load average after: $(load_now) (1, 5, 15 minutes; the bench itself adds about $THREADS)"
"$PY" "$DATA" report "$RECORDS" "$OUT.json"
info "the whole run took $(elapsed_since "$started")"
} 2>&1 | tee "$OUT.txt"
info "written: ${OUT#"$REPO"/}.{json,txt} and the samplers' timelines ${OUT#"$REPO"/}-sample-*.csv"
