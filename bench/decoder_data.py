#!/usr/bin/env python3
"""The decoder bench's model, generated deterministically (seeded torch): a sentence-transformers
directory in Qwen3-Embedding-0.6B's layout and shape, with random weights.

- ``Qwen3Model`` of Qwen3-Embedding-0.6B's config: hidden 1024, 28 layers, 16 query heads,
  8 key/value heads, head_dim 128, intermediate 3072, SiLU, rope_theta 1e6, RMSNorm eps 1e-6,
  vocabulary 151,669 (the real table size: memory counts it), tied embeddings; weights from
  transformers' own initialisation (std 0.02), saved as float32 safetensors.
- sentence-transformers' modules: Transformer -> Pooling (lasttoken) -> Normalize, with
  Qwen3-Embedding's ``query`` prompt.
- The tokenizer: the real one cannot be downloaded here, so the Qwen tokenizer of the decoder
  fixtures (``tok_qwen`` of scripts/gen_decoder_fixtures.py: ``Qwen2Tokenizer`` with NFC,
  Qwen's split regex and byte-level BPE, as Qwen3-Embedding's) trained on the bench corpus
  to 4,000 tokens: the corpus's words become whole tokens, as the common English words of
  the corpus are whole tokens in Qwen's 151k vocabulary. It appends ``<|endoftext|>`` to every
  text and pads on the left, as Qwen3-Embedding's tokenizer.json does. Both systems read the
  same tokenizer.json, so they see the same tokens.

Nothing is rewritten when ``OUT/done`` exists. Prints nothing but errors.

Usage: python bench/decoder_data.py OUT_DIR CORPUS
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

SEED = 20261125
QUERY_PROMPT = "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:"
SHAPE = dict(vocab_size=151669, hidden_size=1024, num_hidden_layers=28, num_attention_heads=16,
             num_key_value_heads=8, head_dim=128, intermediate_size=3072, max_position_embeddings=32768)


def write_tokenizer(d: str, corpus: str) -> None:
    """The fixtures' Qwen tokenizer (scripts/gen_decoder_fixtures.py), trained on `corpus`."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "gen_decoder_fixtures.py")
    spec = importlib.util.spec_from_file_location("gen_decoder_fixtures", path)
    fixtures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fixtures)
    with open(corpus, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]
    fixtures.tok_qwen(d, 32768, corpus=lines, vocab_size=4000)


def write_model(d: str, corpus: str) -> None:
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    from transformers import Qwen3Config, Qwen3Model

    with tempfile.TemporaryDirectory() as base:
        write_tokenizer(base, corpus)
        torch.manual_seed(SEED)
        config = Qwen3Config(**SHAPE, hidden_act="silu", rms_norm_eps=1e-6,
                             rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                             tie_word_embeddings=True, use_sliding_window=False, attention_bias=False,
                             bos_token_id=None, eos_token_id=0, pad_token_id=0)
        Qwen3Model(config).eval().save_pretrained(base, safe_serialization=True)
        te = Transformer(base, model_kwargs={"dtype": torch.float32})
        st = SentenceTransformer(modules=[te, Pooling(te.get_embedding_dimension(), "lasttoken"), Normalize()],
                                 prompts={"query": QUERY_PROMPT}, default_prompt_name=None, device="cpu")
        st.save(d, create_model_card=False, safe_serialization=True)


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    out, corpus = sys.argv[1], sys.argv[2]
    if os.path.exists(os.path.join(out, "done")):
        return 0
    os.makedirs(out, exist_ok=True)
    write_model(out, corpus)
    with open(os.path.join(out, "done"), "w") as f:
        json.dump({"seed": SEED, "shape": SHAPE, "pooling": "lasttoken"}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
