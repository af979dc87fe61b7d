#!/usr/bin/env python3
"""The rerank bench's model and pairs, generated deterministically (seeded torch).

- A CrossEncoder in Qwen3-Reranker-0.6B's layout and shape with random weights: a
  ``Qwen3ForCausalLM`` of hidden 1024, 28 layers, 16 query heads, 8 key/value heads, head_dim
  128, intermediate 3072, vocabulary 151,669, tied embeddings (transformers' own
  initialisation, std 0.02), saved by sentence-transformers' ``CrossEncoder`` as a
  Transformer(text-generation) then LogitScore("yes", "no"), with Qwen3-Reranker's chat
  template and its web-search instruction as the default prompt.
- The tokenizer: the real one cannot be downloaded here, so the reranker fixtures' tokenizer
  (``scripts/gen_reranker_fixtures.py``: Qwen2Tokenizer, byte-level BPE with "yes" and "no",
  the chat-template tokens) with model_max_length 1024. Both systems read the same files.
- ``pairs.json``: 100 (query, document) pairs from the bench corpus: 10 queries (sentences
  1, 11, ..., 91) each with 10 documents (the next 10 sentences after 100 + 10 q).

``SHAPE`` can be scaled down for a smoke run with PG_EMBED_BENCH_LAYERS. Nothing is rewritten
when ``OUT/done`` exists. Usage: python bench/rerank_data.py OUT_DIR CORPUS
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile

SEED = 20261128
SHAPE = dict(vocab_size=151669, hidden_size=1024, num_hidden_layers=int(os.environ.get("PG_EMBED_BENCH_LAYERS", "28")),
             num_attention_heads=16, num_key_value_heads=8, head_dim=128, intermediate_size=3072,
             max_position_embeddings=40960)


def fixtures():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "gen_reranker_fixtures.py")
    spec = importlib.util.spec_from_file_location("gen_reranker_fixtures", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    out, corpus = sys.argv[1], sys.argv[2]
    if os.path.exists(os.path.join(out, "done")):
        return 0
    import torch
    from sentence_transformers import CrossEncoder
    from transformers import Qwen3Config, Qwen3ForCausalLM

    fx = fixtures()
    fx.MAX_LENGTH = 1024
    with tempfile.TemporaryDirectory() as base:
        fx.tokenizer(base)
        torch.manual_seed(SEED)
        config = Qwen3Config(**SHAPE, hidden_act="silu", rms_norm_eps=1e-6, tie_word_embeddings=True,
                             rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                             architectures=["Qwen3ForCausalLM"], pad_token_id=0)
        Qwen3ForCausalLM(config).eval().save_pretrained(base)
        ce = CrossEncoder(base, prompts={"web": fx.PROMPTS["web"]}, default_prompt_name="web", device="cpu")
        ce.save(out, safe_serialization=True)
    with open(corpus, encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    pairs = [(lines[q * 10], lines[100 + q * 10 + d]) for q in range(10) for d in range(10)]
    with open(os.path.join(out, "pairs.json"), "w", encoding="utf-8") as f:
        json.dump(pairs, f, ensure_ascii=False)
    open(os.path.join(out, "done"), "w").close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
