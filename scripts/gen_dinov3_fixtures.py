#!/usr/bin/env python3
"""Generate tiny seeded random DINOv3 models (DINOv3ViTModel) with transformers' outputs.

Usage:
    HF_HUB_OFFLINE=1 PYTHONPATH=<torchvision> bench/.venv/bin/python scripts/gen_dinov3_fixtures.py \
        --out tests/fixtures/dinov3

DINOv3's image processor (DINOv3ViTImageProcessor) is torchvision-only: torchvision must be
importable (the PYTHONPATH above, if the venv has none). The inputs are those of
``gen_image_fixtures.py`` (``tests/fixtures/images/inputs/``), read, never rewritten.

Writes:

- one directory per model, as transformers' ``save_pretrained`` writes it, with the image
  processor's ``preprocessor_config.json``: ``dinov3`` (plain MLP, key without bias, a fixed
  48x40 resize) and ``dinov3_gated`` (``use_gated_mlp``, silu, other bias flags, a resize to a
  shortest edge of 20: every image its own grid, with a remainder that the patch convolution
  drops);
- ``pixels.safetensors``: the processor's ``pixel_values`` ([3, H, W] float32), named
  ``<model>/<file>``;
- ``golden.json``: per model and input the pixel shape, ``pooler_output``, the mean of the patch
  tokens (``last_hidden_state[:, 1 + num_register_tokens:].mean``) and the token count; for one
  input the full ``last_hidden_state``.

Nothing is downloaded; the output is deterministic (run it twice and compare sha256 sums).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixturelib.common import load, offline, write_golden  # noqa: E402

offline()
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

HERE = os.path.dirname(os.path.abspath(__file__))


gif = load("gen_image_fixtures")

INPUTS = os.path.join(HERE, "..", "tests", "fixtures", "images", "inputs")
FULL_HIDDEN_IMAGE = gif.FULL_HIDDEN_IMAGE
MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]

# dir -> (seed, config kwargs, processor kwargs, inputs whose pixels are stored (None: all))
MODELS = [
    ("dinov3", 61,
     dict(use_gated_mlp=False, hidden_act="gelu", query_bias=True, key_bias=False, value_bias=True,
          proj_bias=True, mlp_bias=True),
     dict(size={"height": 48, "width": 40}, resample=2, do_resize=True, do_rescale=True, do_normalize=True,
          do_convert_rgb=True, image_mean=MEAN, image_std=STD),
     None),
    ("dinov3_gated", 62,
     dict(use_gated_mlp=True, hidden_act="silu", query_bias=True, key_bias=True, value_bias=False,
          proj_bias=False, mlp_bias=False),
     dict(size={"shortest_edge": 20}, resample=2, do_resize=True, do_rescale=True, do_normalize=True,
          do_convert_rgb=True, image_mean=MEAN, image_std=STD),
     ["rgb_40x30.png", "rgba_36x36.png", "gray_17x31.png", "palette_24x18.gif", "photo_48x36.jpg",
      "large_300x200.png", "one_1x1.png"]),
]


def config(kwargs):
    from transformers import DINOv3ViTConfig

    return DINOv3ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=gif.HIDDEN, intermediate_size=64,
                           num_hidden_layers=2, num_attention_heads=4, num_register_tokens=4, layerscale_value=1.0,
                           layer_norm_eps=1e-5, rope_theta=100.0, **kwargs)


def outputs(model, pv, registers, full):
    import torch

    with torch.inference_mode():
        o = model(pixel_values=pv.unsqueeze(0))
    res = {"pooler": gif.f32(o.pooler_output[0]),
           "mean": gif.f32(o.last_hidden_state[0, 1 + registers:].mean(0)),
           "tokens": int(o.last_hidden_state.shape[1])}
    if full:
        res["last_hidden_state"] = gif.f32(o.last_hidden_state[0])
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="tests/fixtures/dinov3")
    args = ap.parse_args()

    import warnings

    import numpy as np
    import PIL
    import safetensors
    import torch
    import torchvision
    import transformers
    from PIL import Image
    from safetensors.torch import save_file
    from transformers import AutoImageProcessor, DINOv3ViTImageProcessor, DINOv3ViTModel

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    warnings.filterwarnings("ignore")
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)

    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    owned = ["golden.json", "pixels.safetensors"] + [m[0] for m in MODELS]
    for n in owned:
        p = os.path.join(out, n)
        if os.path.isdir(p):
            shutil.rmtree(p)
        elif os.path.exists(p):
            os.remove(p)

    inputs = os.path.abspath(INPUTS)
    names = [n for n, *_ in gif.IMAGES]
    pixels = {}
    models = {}
    for name, seed, cfg_kwargs, proc_kwargs, stored in MODELS:
        d = os.path.join(out, name)
        os.makedirs(d)
        torch.manual_seed(seed)
        model = DINOv3ViTModel(config(cfg_kwargs)).eval()
        gif.randomize(model, seed)
        model.save_pretrained(d, safe_serialization=True)
        DINOv3ViTImageProcessor(**proc_kwargs).save_pretrained(d)
        gif.chmod_tree(d)

        reloaded = DINOv3ViTModel.from_pretrained(d).eval()
        proc = AutoImageProcessor.from_pretrained(d)
        if type(proc).__name__ != "DINOv3ViTImageProcessor":
            raise SystemExit(f"{name}: processor {type(proc).__name__}")
        registers = reloaded.config.num_register_tokens
        images = {}
        for fname in names:
            with Image.open(os.path.join(inputs, fname)) as im:
                pv = proc(im, return_tensors="pt")["pixel_values"]
            if pv.dtype != torch.float32 or pv.ndim != 4 or pv.shape[0] != 1:
                raise SystemExit(f"{name}/{fname}: pixel_values {pv.dtype} {tuple(pv.shape)}")
            pv = pv[0].contiguous()
            if stored is None or fname in stored:
                pixels[f"{name}/{fname}"] = pv
            images[fname] = {"pixel_shape": list(pv.shape),
                             "outputs": outputs(reloaded, pv, registers, fname == FULL_HIDDEN_IMAGE)}
        models[name] = {"class": type(reloaded).__name__, "processor": type(proc).__name__,
                        "num_register_tokens": registers, "use_gated_mlp": reloaded.config.use_gated_mlp,
                        "pixels_files": "all" if stored is None else stored, "images": images}

    st_path = os.path.join(out, "pixels.safetensors")
    save_file({k: pixels[k] for k in sorted(pixels)}, st_path, metadata={"format": "pt"})
    os.chmod(st_path, 0o644)
    doc = {
        "versions": {
            "script": "scripts/gen_dinov3_fixtures.py",
            "python": sys.version.split()[0],
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "torchvision": torchvision.__version__,
            "safetensors": safetensors.__version__,
            "numpy": np.__version__,
            "pillow": PIL.__version__,
        },
        "notes": {
            "inputs": "tests/fixtures/images/inputs/ (gen_image_fixtures.py); the bad inputs are left out",
            "processor": "AutoImageProcessor.from_pretrained(dir) (DINOv3ViTImageProcessor, torchvision: rescale, "
                         "antialiased bilinear resize on float32, normalize); pixel_values of Image.open(path), one "
                         "image at a time",
            "outputs": "DINOv3ViTModel on the recorded pixel_values, one image at a time; pooler: pooler_output (the "
                       "normed [CLS]); mean: last_hidden_state[0, 1 + num_register_tokens:].mean(0); float32",
            "last_hidden_state": f"only for {FULL_HIDDEN_IMAGE}: [tokens, hidden]",
            "init": f"every parameter ~ N(0, {gif.INIT_STD}); LayerNorm weight ~ 1 + N(0, {gif.LAYERNORM_STD}), bias "
                    f"~ N(0, {gif.LAYERNORM_STD}); layer scale ~ 1 + N(0, {gif.LAYERSCALE_STD})",
        },
        "models": models,
    }
    text = gif.render(doc) + "\n"
    if json.loads(text) != json.loads(json.dumps(doc)):
        raise SystemExit("JSON round-trip mismatch")
    write_golden(os.path.join(out, "golden.json"), text)
    print(f"total {gif.dir_size(out)} bytes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
