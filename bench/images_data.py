#!/usr/bin/env python3
"""The image bench's inputs, generated deterministically (seeded torch and numpy):

- ``model/``: a model of the family's base shape (hidden 768, 12 layers, 12 heads,
  intermediate 3072, 224x224 images, 16x16 patches), random weights from transformers' own
  initialisation, written with ``save_pretrained``, with its image processor beside it:
  ``vit`` (the default): a ViTModel with the pooler and a ViTImageProcessor (224x224,
  bilinear, mean and std 0.5); ``siglip``: a SiglipVisionModel of siglip-base-patch16-224's
  shape (the attention-pooling head, gelu_pytorch_tanh) and a SiglipImageProcessor (224x224,
  bicubic); ``dinov3``: a DINOv3ViTModel of dinov3-vitb16-pretrain-lvd1689m's shape (4 register
  tokens, layer scale, rotary positions) and a DINOv3ViTImageProcessor (224x224, bilinear,
  ImageNet mean and std; torchvision is needed);
- ``images/``: 64 JPEGs (quality 90) of the sizes photos come in (640x480, 800x600, 500x375,
  1024x768, their portrait forms, 1280x720, 375x500), smooth content (gradients, blobs,
  waves) plus pixel noise, so that the decoder sees realistic entropy.

Nothing is rewritten when ``OUT/done`` exists. Prints nothing but errors.

Usage: python bench/images_data.py OUT_DIR [FAMILY]
"""

from __future__ import annotations

import json
import os
import sys

SEED = 20261125
COUNT = 64
SIZES = [(640, 480), (800, 600), (500, 375), (1024, 768), (480, 640), (600, 800), (1280, 720), (375, 500)]


def write_model(d: str, family: str) -> None:
    import torch
    from transformers import ViTConfig, ViTImageProcessorPil, ViTModel

    torch.manual_seed(SEED)
    if family == "siglip":
        from transformers import SiglipImageProcessorPil, SiglipVisionConfig, SiglipVisionModel

        config = SiglipVisionConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                                    intermediate_size=3072, image_size=224, patch_size=16)
        SiglipVisionModel(config).eval().save_pretrained(d, safe_serialization=True)
        SiglipImageProcessorPil(size={"height": 224, "width": 224}, resample=3).save_pretrained(d)
        return
    if family == "dinov3":
        from transformers import DINOv3ViTConfig, DINOv3ViTImageProcessor, DINOv3ViTModel

        config = DINOv3ViTConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                                 intermediate_size=3072, image_size=224, patch_size=16, num_register_tokens=4,
                                 layerscale_value=1.0)
        DINOv3ViTModel(config).eval().save_pretrained(d, safe_serialization=True)
        DINOv3ViTImageProcessor(size={"height": 224, "width": 224}, resample=2).save_pretrained(d)
        return
    if family != "vit":
        raise SystemExit(f"unknown family {family}")
    config = ViTConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                       hidden_act="gelu", image_size=224, patch_size=16, num_channels=3, qkv_bias=True)
    model = ViTModel(config, add_pooling_layer=True).eval()
    model.save_pretrained(d, safe_serialization=True)
    ViTImageProcessorPil(size={"height": 224, "width": 224}, resample=2, do_resize=True, do_rescale=True,
                         do_normalize=True, image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5]).save_pretrained(d)


def write_images(d: str) -> None:
    import numpy as np
    from PIL import Image

    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(SEED)
    for i in range(COUNT):
        w, h = SIZES[i % len(SIZES)]
        y, x = np.mgrid[0:h, 0:w].astype(np.float32)
        y /= h
        x /= w
        img = np.empty((h, w, 3), np.float32)
        for c in range(3):
            a, b, f1, f2, p = rng.uniform(-1, 1, 5)
            plane = 0.5 + 0.25 * (a * x + b * y) + 0.15 * np.sin(2 * np.pi * (3 * f1 * x + 2 * f2 * y) + 3 * p)
            for _ in range(3):  # soft blobs
                cx, cy, r, s = rng.uniform(0, 1), rng.uniform(0, 1), rng.uniform(0.05, 0.3), rng.uniform(-0.4, 0.4)
                plane += s * np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * r * r))
            img[..., c] = plane
        img += rng.normal(0, 0.03, img.shape).astype(np.float32)
        pixels = (np.clip(img, 0, 1) * 255 + 0.5).astype(np.uint8)
        Image.fromarray(pixels, "RGB").save(os.path.join(d, f"{i:03d}_{w}x{h}.jpg"), quality=90)


def main() -> int:
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    out = sys.argv[1]
    family = sys.argv[2] if len(sys.argv) == 3 else "vit"
    if os.path.exists(os.path.join(out, "done")):
        return 0
    os.makedirs(out, exist_ok=True)
    write_model(os.path.join(out, "model"), family)
    write_images(os.path.join(out, "images"))
    with open(os.path.join(out, "done"), "w") as f:
        json.dump({"seed": SEED, "images": COUNT, "sizes": SIZES, "family": family}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
