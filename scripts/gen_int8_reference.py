#!/usr/bin/env python3
"""Record how far PyTorch's simulation of pg_embed's int8 method moves every test model from
its float32 run.

Usage:
    HF_HUB_OFFLINE=1 PYTHONPATH=.cache/pillow-site bench/.venv/bin/python scripts/gen_int8_reference.py \\
        [--out tests/fixtures/int8_reference.json] [--only MODEL ...]

The models, inputs, references and the float32 self-check are scripts/gen_bf16_reference.py's
(this script runs its `measure` with another simulation). The simulation is
quantize-dequantize in float32 (transformers' own modules, unchanged otherwise): in every
linear product (torch.nn.functional.linear, transformers' Conv1D, XLNet's projection
einsums, and a convolution whose stride is its kernel, a patch embedding, as the product over
flattened patches it is), the
input rows and the weight's rows are cut into groups of 32 consecutive inputs (the last one
shorter), and each group becomes s * q with s = max|v| / 127 and q = round(v / s) (ties to
even, within -127..127; a group of zeros stays zero), in float32 as pg_embed computes them;
the product then runs in float32 on those values. pg_embed computes the same quantized values
and adds each group's products exactly in int32, so the two differ by float32 summation order
only, on the layers both quantize. The simulation also quantizes the linear layers of heads
(sentence-transformers Dense, classifier heads), which pg_embed keeps in float32.

crates/pg_embed_core/tests/int8.rs bounds pg_embed's int8 deviation by these figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixturelib.common import load, write_golden  # noqa: E402

ref = load("gen_bf16_reference")
GROUP = 32
LABEL = "int8 quantize-dequantize in groups of 32 inputs (scripts/gen_int8_reference.py)"


def quantized(t):
    """`t` with each row's groups of 32 along the last dimension quantized and dequantized."""
    import torch
    import torch.nn.functional as F

    k = t.shape[-1]
    padded = F.pad(t, (0, (-k) % GROUP))
    groups = padded.reshape(*padded.shape[:-1], -1, GROUP)
    s = groups.abs().amax(-1, keepdim=True) / 127
    q = torch.where(s == 0, torch.zeros_like(groups), torch.round(groups / s).clamp(-127, 127))
    return (q * s).reshape(padded.shape)[..., :k]


@contextlib.contextmanager
def int8_simulation():
    import torch.nn.functional as F
    from transformers.pytorch_utils import Conv1D

    import torch

    linear, conv2d, conv1d, einsum = F.linear, F.conv2d, Conv1D.forward, torch.einsum

    def q_linear(x, w, b=None):
        return linear(quantized(x), quantized(w), b)

    def q_conv2d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
        kh, kw = w.shape[-2:]
        st = tuple(stride) if isinstance(stride, (tuple, list)) else (stride, stride)
        if st != (kh, kw) or padding not in (0, (0, 0), "valid") or groups != 1 or dilation not in (1, (1, 1)):
            return conv2d(x, w, b, stride, padding, dilation, groups)
        n, _, h, wd = x.shape
        cols = F.unfold(x, (kh, kw), stride=(kh, kw)).transpose(1, 2)  # [n, patches, c*kh*kw]
        out = q_linear(cols, w.reshape(w.shape[0], -1), b)  # [n, patches, out]
        return out.transpose(1, 2).reshape(n, w.shape[0], h // kh, wd // kw)

    def q_conv1d(self, x):
        shape = x.size()[:-1] + (self.nf,)
        return q_linear(x.view(-1, x.size(-1)), self.weight.t(), self.bias).view(shape)

    def q_einsum(equation, *operands):
        # XLNet's projections are einsums over [d_model, heads, head_dim] weights.
        if equation == "ibh,hnd->ibnd" and len(operands) == 2:
            x, w = operands
            h, n, d = w.shape
            return q_linear(x, w.reshape(h, n * d).t()).reshape(*x.shape[:-1], n, d)
        if equation == "ibnd,hnd->ibh" and len(operands) == 2:
            x, w = operands
            h, n, d = w.shape
            return q_linear(x.reshape(*x.shape[:-2], n * d), w.reshape(h, n * d))
        return einsum(equation, *operands)

    F.linear, F.conv2d, Conv1D.forward, torch.einsum = q_linear, q_conv2d, q_conv1d, q_einsum
    try:
        yield
    finally:
        F.linear, F.conv2d, Conv1D.forward, torch.einsum = linear, conv2d, conv1d, einsum


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(ref.ROOT, "tests/fixtures/int8_reference.json"))
    ap.add_argument("--only", nargs="+", metavar="MODEL")
    args = ap.parse_args()

    import logging
    import warnings

    import numpy as np
    import sentence_transformers
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    logging.getLogger("sentence_transformers").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)

    models = {}
    for rel in args.only or ref.model_dirs():
        torch.manual_seed(0)
        models[rel] = entry = ref.measure(rel, int8_simulation, LABEL, "int8")
        if "skipped" in entry:
            print(f"{rel}: SKIPPED: {entry['skipped']}", file=sys.stderr)
        else:
            print(f"{rel:<52} {entry['output']:<9} max abs {entry['torch_max_abs']:.2e}  "
                  f"min cos {entry['torch_min_cosine']:.6f}", file=sys.stderr, flush=True)
    if args.only:
        with open(args.out, encoding="utf-8") as fh:
            doc = json.load(fh)
        doc["models"].update(models)
    else:
        doc = {
            "generated_with": {
                "script": "scripts/gen_int8_reference.py",
                "python": sys.version.split()[0],
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "sentence_transformers": sentence_transformers.__version__,
                "numpy": np.__version__,
                "torch_threads": 1,
                "seed": 0,
                "int8": LABEL,
            },
            "inputs": {"texts": ref.TEXTS, "images": [f"{ref.IMAGES_DIR}/{f}" for f in ref.IMAGES]},
            "fields": {
                "torch_max_abs": "max |int8 simulation - f32| over every element of every row",
                "torch_min_cosine": "min over rows of cosine(int8 simulation row, f32 row)",
                "others": "as in tests/fixtures/bf16_reference.json",
            },
            "models": models,
        }
    text = json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    write_golden(args.out, text)
    print(f"wrote {args.out}: {len(models)} models", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
