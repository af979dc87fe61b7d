#!/usr/bin/env bash
# The OpenVINO baselines' virtualenv, bench/.venv-openvino (ignored), apart from bench/.venv:
# optimum-intel 2.2 needs transformers < 5.6 and bench/.venv has 5.2x. Everything from PyPI,
# pinned to the versions this was last built and measured with; torch is PyPI's wheel (it
# brings its CUDA libraries along, unused: the baselines run on the CPU).
#
#   bash bench/openvino_env.sh           (builds the venv unless it is there with these pins)
#   bash bench/openvino_env.sh --force   (removes it and builds it again)
#
# Then: bench/.venv-openvino/bin/python bench/baselines.py --model models/all-MiniLM-L6-v2 \
#           --corpus bench/corpus.txt --threads 2 --systems ov,ov_bf16,ov_int8
# (bench/run.sh does that itself when the venv exists.)
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"

OV_VENV="$REPO/bench/.venv-openvino"
PACKAGES=(
    "openvino==2026.4.1"
    "openvino-tokenizers==2026.4.1.0"
    "optimum-intel==2.2.0"
    "optimum==2.3.0"
    "nncf==3.4.0"
    "transformers==5.5.4"
    "tokenizers==0.22.2"
    "sentence-transformers==6.2.0"
    "huggingface-hub==1.21.0"
    "torch==2.15.0"
    "torchvision==0.29.2"
    "numpy==2.4.6"
)

# The venv's stamp: the package list it was built with, written last (a half-built venv, or
# one of other pins, is built again).
STAMP="$OV_VENV/.packages"
if [ "${1:-}" != --force ] && [ "$(cat "$STAMP" 2>/dev/null)" = "${PACKAGES[*]}" ]; then
    info "$OV_VENV is up to date (--force builds it again)"
    exit 0
fi
rm -rf "$OV_VENV"
step "OpenVINO venv $OV_VENV: ${PACKAGES[*]}"
python3 -m venv "$OV_VENV"
"$OV_VENV/bin/pip" install -q --disable-pip-version-check "${PACKAGES[@]}"
# OpenVINO's and NNCF's usage telemetry off (it would try to send; this machine's consent file).
"$OV_VENV/bin/opt_in_out" --opt_out >/dev/null
HF_HUB_OFFLINE=1 "$OV_VENV/bin/python" - <<'PY'
import importlib.metadata as md
import openvino
print("    " + ", ".join(f"{p} {md.version(p)}" for p in (
    "openvino", "optimum-intel", "nncf", "transformers", "sentence-transformers", "torch")))
print("    OpenVINO CPU:", openvino.Core().get_property("CPU", "FULL_DEVICE_NAME"))
PY
echo "${PACKAGES[*]}" >"$STAMP"
