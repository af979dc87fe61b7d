#!/usr/bin/env bash
# The compatibility matrix's fixtures: model folders saved by several sentence-transformers and
# model2vec versions from the same seeded weights, and what each version itself computes for
# them (tests/fixtures/compat/golden.json; read by crates/pg_embed_core/tests/compat.rs).
#
#   bash scripts/gen_compat.sh            make the virtual environments (once), then regenerate
#   bash scripts/gen_compat.sh --check    regenerate twice and check both runs give the same bytes
#
# One virtual environment per library version, under $COMPAT_VENVS (default .cache/compat-venvs in
# the repository, git-ignored), named compat-<lib><version>. Each is made with --system-site-packages so that
# the base interpreter's torch (and numpy) is reused: PYTHON (default python3) must import torch.
# Every package installed into an environment is pinned below (the whole resolved set, installed
# with --no-deps, then `pip check`); the versions the base interpreter provides are recorded in
# golden.json's header. PyPI is used; no model hub: everything is built from seeded weights.
#
# Steps: scripts/gen_compat_fixtures.py runs once in every environment ("save": the folders that
# version can save, from the shared seeded backbone, and the outputs that version computes when
# it reloads them from disk; one JSON per version under $WORK), then once more with the base
# interpreter ("merge": golden.json, with the per-kind differences between versions).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
VENVS="${COMPAT_VENVS:-$ROOT/.cache/compat-venvs}"
OUT="${COMPAT_OUT:-$ROOT/tests/fixtures/compat}"
CHECK=0
[ "${1:-}" = "--check" ] && CHECK=1

# Pinned sets (pip's resolution of the first two entries, on Python 3.11, frozen).
COMMON_ST4X="huggingface_hub==0.36.2 hf-xet==1.8.0 safetensors==0.8.0 packaging==26.4 tqdm==4.70.1
  scikit-learn==1.9.1 scipy==1.17.1 joblib==1.6.0 threadpoolctl==3.8.0 narwhals==2.29.0 cloudpickle==3.1.3
  pillow==13.0.0 setuptools==84.2.1"
declare -A PINS=(
  [st3.4.1]="sentence-transformers==3.4.1 transformers==4.48.3 tokenizers==0.21.4 $COMMON_ST4X"
  [st4.1.0]="sentence-transformers==4.1.0 transformers==4.51.3 tokenizers==0.21.4 $COMMON_ST4X"
  [st5.7.0]="sentence-transformers==5.7.0 transformers==4.57.6 tokenizers==0.22.2 $COMMON_ST4X"
  [st6.2.0]="sentence-transformers==6.2.0 transformers==5.23.0 tokenizers==0.23.3 huggingface_hub==2.4.0
    hf-xet==1.8.0 safetensors==0.8.0 packaging==26.4 tqdm==4.70.1 scikit-learn==1.9.1 scipy==1.17.1
    joblib==1.6.0 threadpoolctl==3.8.0 narwhals==2.29.0 cloudpickle==3.1.3 pillow==13.0.0 setuptools==84.2.1
    typing_extensions==4.16.0 annotated-doc==0.0.7 anyio==4.16.0 click==8.5.1 h11==0.16.0 httpcore2==2.16.2
    httpx2==2.16.2 idna==3.20 markdown-it-py==4.3.0 mdurl==0.1.2 rich==15.0.0 shellingham==1.5.4
    truststore==0.10.5 typer==0.29.2"
  # model2vec with its "distill" extra (transformers, scikit-learn; skeletoken for 0.10).
  [m2v0.4.1]="model2vec==0.4.1 transformers==4.48.3 tokenizers==0.21.4 huggingface_hub==0.36.2 hf-xet==1.8.0
    safetensors==0.8.0 packaging==26.4 tqdm==4.70.1 scikit-learn==1.9.1 scipy==1.17.1 joblib==1.6.0
    threadpoolctl==3.8.0 narwhals==2.29.0 cloudpickle==3.1.3 rich==15.0.0 markdown-it-py==4.3.0 mdurl==0.1.2
    setuptools==84.2.1"
  [m2v0.10.0]="model2vec==0.10.0 transformers==5.3.0 tokenizers==0.22.2 huggingface_hub==1.33.0 hf-xet==1.8.0
    safetensors==0.8.0 packaging==26.4 tqdm==4.70.1 skeletoken==0.6.1 protobuf==7.36.2 joblib==1.6.0 cloudpickle==3.1.3
    scikit-learn==1.9.1 scipy==1.17.1 threadpoolctl==3.8.0 narwhals==2.29.0
    typing_extensions==4.16.0 annotated-doc==0.0.7 anyio==4.16.0 click==8.5.1 h11==0.16.0 httpcore==1.0.9
    httpx==0.28.1 markdown-it-py==4.3.0 mdurl==0.1.2 rich==15.0.0 shellingham==1.5.4 typer==0.29.2
    setuptools==84.2.1"
)
VERSIONS=(st3.4.1 st4.1.0 st5.7.0 st6.2.0 m2v0.4.1 m2v0.10.0)

"$PYTHON" -c "import torch" || { echo "$PYTHON cannot import torch" >&2; exit 1; }

for v in "${VERSIONS[@]}"; do
  venv="$VENVS/compat-$v"
  stamp="$venv/.pg_embed_pins"
  # shellcheck disable=SC2086
  want="$(printf '%s\n' ${PINS[$v]} | sort)"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    continue
  fi
  echo "== $venv" >&2
  [ -x "$venv/bin/python" ] || "$PYTHON" -m venv --system-site-packages "$venv"
  # shellcheck disable=SC2086
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps ${PINS[$v]}
  "$venv/bin/python" -m pip check --disable-pip-version-check >&2
  printf '%s\n' "$want" > "$stamp"
done

run() {
  local work
  work="$(mktemp -d -t pg_embed_compat.XXXXXX)"
  local t0=$SECONDS
  for v in "${VERSIONS[@]}"; do
    local t=$SECONDS
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$VENVS/compat-$v/bin/python" \
      "$ROOT/scripts/gen_compat_fixtures.py" save --lib "$v" --work "$work" --out "$OUT"
    echo "  $v: $((SECONDS - t)) s" >&2
  done
  "$PYTHON" "$ROOT/scripts/gen_compat_fixtures.py" merge --work "$work" --out "$OUT" \
    --pins "$(for v in "${VERSIONS[@]}"; do printf '%s=%s;' "$v" "$(echo ${PINS[$v]})"; done)"
  rm -rf "$work"
  echo "generated in $((SECONDS - t0)) s" >&2
}

if [ "$CHECK" = 1 ]; then
  run
  sums="$(mktemp)"
  (cd "$OUT" && find . -type f | sort | xargs sha256sum) > "$sums"
  run
  (cd "$OUT" && find . -type f | sort | xargs sha256sum) | diff "$sums" - && echo "identical" >&2
  rm -f "$sums"
else
  run
fi
