#!/usr/bin/env python3
"""The image bench's baseline (bench/images.sh): transformers' model (AutoModel) with its image
processor on the PIL backend (``AutoImageProcessor.from_pretrained(dir, backend="pil")``; DINOv3's
has only the torchvision one),
PyTorch on the CPU with the same thread count, under ``torch.inference_mode()``, end to end
from the files' bytes (``PIL.Image.open``, processor, model) and pooled as pg_embed pools a
ViT by default: ``last_hidden_state[:, 0]``, the layernormed [CLS]; ``pooler_output`` for a
SigLIP vision tower (its attention-pooling head, ``get_image_features``) and for DINOv3 (the
normed [CLS]).

Prints one JSON line: images/s of the whole set at the best batch size, single-image
p50/p99 (one image per call), the time of each stage alone, and the vectors of the first 8
images. Asserts nothing.

With ``--bf16`` the model runs under ``torch.autocast("cpu", dtype=torch.bfloat16)`` (float32
weights; products in bfloat16, oneDNN on CPUs with AVX512-BF16 or AMX; softmax and layer norm
stay float32), what a PyTorch user would pick for bfloat16 on a CPU.

Usage:
    python bench/images_baseline.py --model DIR --images DIR --threads 2 [--batch-sizes 8,16,32] [--bf16]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time

CHECKED = 8


def percentiles(samples):
    s = sorted(samples)
    return s[int(round(0.5 * (len(s) - 1)))], s[min(len(s) - 1, int(round(0.99 * (len(s) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--images", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-sizes", default="8,16,32")
    ap.add_argument("--bf16", action="store_true")
    args = ap.parse_args()

    import contextlib

    import torch
    from PIL import Image
    from transformers import AutoImageProcessor, AutoModel

    torch.set_num_threads(args.threads)
    names = sorted(os.listdir(args.images))
    files = [open(os.path.join(args.images, n), "rb").read() for n in names]
    n = len(files)

    t0 = time.perf_counter()
    config = json.load(open(os.path.join(args.model, "config.json")))
    # DINOv3's processor exists only for torchvision.
    backend = {} if config.get("model_type") == "dinov3_vit" else {"backend": "pil"}
    processor = AutoImageProcessor.from_pretrained(args.model, **backend)
    model = AutoModel.from_pretrained(args.model).eval()
    kind = type(model).__name__

    def features(out):
        # SigLIP: its attention-pooling head; DINOv3: the normed [CLS] (both pooler_output).
        return out.pooler_output if kind in ("SiglipVisionModel", "DINOv3ViTModel") else out.last_hidden_state[:, 0]
    load_ms = (time.perf_counter() - t0) * 1000

    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if args.bf16 else contextlib.nullcontext

    def embed(batch):
        images = [Image.open(io.BytesIO(b)) for b in batch]
        pixel_values = processor(images=images, return_tensors="pt")["pixel_values"]
        with autocast():
            return features(model(pixel_values=pixel_values)).float()

    with torch.inference_mode():
        embed(files[:CHECKED])  # warm-up
        runs, vectors = [], None
        for bs in [int(b) for b in args.batch_sizes.split(",")]:
            t0 = time.perf_counter()
            out = [embed(files[i:i + bs]) for i in range(0, n, bs)]
            secs = time.perf_counter() - t0
            runs.append({"batch_size": bs, "images_per_s": n / secs})
            if vectors is None:
                vectors = torch.cat(out)[:CHECKED].tolist()
        best = max(runs, key=lambda r: r["images_per_s"])

        embed(files[:1])
        lat = []
        for b in files:
            t0 = time.perf_counter()
            embed([b])
            lat.append((time.perf_counter() - t0) * 1000)
        p50, p99 = percentiles(lat)

        # The stages alone, per image: decode (PIL open + load) and preprocess (the processor
        # on the decoded image) one image at a time, the model over the preprocessed images
        # in batches of the best size and one at a time.
        t0 = time.perf_counter()
        decoded = []
        for b in files:
            im = Image.open(io.BytesIO(b))
            im.load()
            decoded.append(im)
        decode_ms = (time.perf_counter() - t0) * 1000 / n
        t0 = time.perf_counter()
        pixels = [processor(images=[im], return_tensors="pt")["pixel_values"] for im in decoded]
        preprocess_ms = (time.perf_counter() - t0) * 1000 / n
        bs = best["batch_size"]
        batches = [torch.cat(pixels[i:i + bs]) for i in range(0, n, bs)]
        with autocast():
            model(pixel_values=batches[0])
            t0 = time.perf_counter()
            for p in batches:
                features(model(pixel_values=p))
            model_batch_ms = (time.perf_counter() - t0) * 1000 / n
            t0 = time.perf_counter()
            for p in pixels:
                features(model(pixel_values=p))
            model_single_ms = (time.perf_counter() - t0) * 1000 / n

    print(json.dumps({
        "system": f"transformers {kind} (PyTorch CPU, PIL processor)" + (", bf16 autocast" if args.bf16 else ""),
        "images_per_s": best["images_per_s"],
        "best_batch_size": best["batch_size"],
        "runs": runs,
        "single_p50_ms": p50,
        "single_p99_ms": p99,
        "stages_ms_per_image": {"decode": decode_ms, "preprocess": preprocess_ms, "model_batch": model_batch_ms,
                                "model_single": model_single_ms},
        "load_ms": load_ms,
        "threads": args.threads,
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "images": n,
        "vectors": vectors,
    }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
