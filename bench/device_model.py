#!/usr/bin/env python3
"""A folder of all-MiniLM-L6-v2's shape with seeded random weights, for machines the real
weights cannot be copied to (bench/device_run.sh on the AMX host): copies the model's small
files (config, tokenizer, sentence-transformers' modules and pooling) from SRC and writes
model.safetensors of a BertModel built from SRC's config (with its pooler, as the real file
has), weights from transformers' own initialisation under torch.manual_seed(0). Same shapes,
so the same FLOPs as the real model; the vectors mean nothing.

Usage: python bench/device_model.py SRC_DIR OUT_DIR
"""

import json
import os
import shutil
import sys


def main() -> int:
    import torch
    from transformers import BertConfig, BertModel

    src, dst = sys.argv[1], sys.argv[2]
    shutil.copytree(src, dst, dirs_exist_ok=True)
    with open(os.path.join(src, "config.json")) as f:
        config = {k: v for k, v in json.load(f).items() if k not in ("architectures", "transformers_version")}
    torch.manual_seed(0)
    model = BertModel(BertConfig(**config), add_pooling_layer=True).eval()
    model.save_pretrained(dst, safe_serialization=True)
    print(f"{dst}: {sum(p.numel() for p in model.parameters())} parameters", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
