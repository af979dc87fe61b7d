#!/usr/bin/env python3
"""The long-input bench's models and inputs, generated deterministically (seeded torch), and its
PyTorch baseline.

Models (plain transformers folders: pg_embed mean-pools them, as sentence-transformers does a
folder without modules.json), each of a long-context shape with hidden 64, 2 layers, 4 heads:
- ``long-qwen3``: ``Qwen3Model``, 4 query and 2 key/value heads of 16, 32,768 positions, causal;
- ``long-modernbert``: ``ModernBertModel``, 4 heads of 16, 8,192 positions, a 128-token
  sliding window in layer 0 of every 3 but the first (transformers' default layout), global
  attention in the others.
Their tokenizers are the decoder / backbone fixtures' (tests/fixtures: small vocabularies, so a
text gives many tokens). An input of N tokens is the bench corpus repeated, cut to N tokens.

Usage:
  python bench/long_data.py make OUT_DIR CORPUS            (writes OUT_DIR/long-*, once)
  python bench/long_data.py input MODEL_DIR CORPUS TOKENS  (prints the text of TOKENS tokens)
  python bench/long_data.py torch MODEL_DIR TEXT_FILE THREADS
      (one forward pass of the text through PyTorch, SDPA attention, after a warm-up on a short
      text; prints JSON: seconds, tokens, peak RSS growth in MiB over the call)
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time

SEED = 20261126
REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FIXTURES = os.path.join(REPO, "tests", "fixtures")


def make(out: str) -> None:
    import torch
    from transformers import ModernBertConfig, ModernBertModel, Qwen3Config, Qwen3Model

    shapes = {
        "long-qwen3": (
            os.path.join(FIXTURES, "decoders", "qwen3_embed"),
            lambda: Qwen3Model(Qwen3Config(
                vocab_size=420, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, intermediate_size=128,
                max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=True,
                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
        ),
        "long-modernbert": (
            os.path.join(FIXTURES, "backbones", "modernbert"),
            lambda: ModernBertModel(ModernBertConfig(
                vocab_size=401, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=128, max_position_embeddings=8192, local_attention=128,
                global_attn_every_n_layers=2, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                cls_token_id=1, sep_token_id=2)),
        ),
    }
    for name, (tokenizer_from, build) in shapes.items():
        d = os.path.join(out, name)
        if os.path.exists(os.path.join(d, "done")):
            continue
        os.makedirs(d, exist_ok=True)
        torch.manual_seed(SEED)
        model = build().eval()
        model.save_pretrained(d, safe_serialization=True)
        for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            src = os.path.join(tokenizer_from, f)
            if os.path.exists(src):
                shutil.copy(src, d)
        with open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8") as f:
            tc = json.load(f)
        tc["model_max_length"] = model.config.max_position_embeddings
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(tc, f, indent=2)
        for root, dirs, files in os.walk(d):
            os.chmod(root, 0o755)
            for f in files:
                os.chmod(os.path.join(root, f), 0o644)
        open(os.path.join(d, "done"), "w").close()


def text_of(model_dir: str, corpus: str, tokens: int) -> str:
    """The corpus repeated, cut to the longest prefix of whole lines and words that gives at
    most `tokens` tokens with the model's special tokens."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    tok.no_truncation()
    with open(corpus, encoding="utf-8") as f:
        words = f.read().split()
    count = lambda n: len(tok.encode(" ".join((words * (n // len(words) + 1))[:n])).ids)
    hi = 64
    while count(hi) <= tokens:
        hi *= 2
    pool = (words * (hi // len(words) + 1))[:hi]
    lo = 0
    while lo < hi:  # the most words whose tokens fit
        mid = (lo + hi + 1) // 2
        if len(tok.encode(" ".join(pool[:mid])).ids) <= tokens:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(pool[:lo])


def rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def torch_run(model_dir: str, text_file: str, threads: int) -> None:
    import torch
    from transformers import AutoModel, AutoTokenizer

    torch.set_num_threads(threads)
    model = AutoModel.from_pretrained(model_dir, attn_implementation="sdpa").eval()
    tok = AutoTokenizer.from_pretrained(model_dir)
    text = open(text_file, encoding="utf-8").read()

    def once(t: str) -> int:
        enc = tok(t, return_tensors="pt", truncation=False)
        with torch.inference_mode():
            h = model(**enc).last_hidden_state
            m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
            (h * m).sum(1) / m.sum(1)
        return enc["input_ids"].shape[1]

    once("warm up")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = rss_kib("VmRSS")
    t0 = time.perf_counter()
    n = once(text)
    secs = time.perf_counter() - t0
    growth = (rss_kib("VmHWM") - before) / 1024
    print(json.dumps({"system": "PyTorch (SDPA)", "tokens": n, "seconds": secs, "peak_growth_mib": growth}))


def main() -> None:
    if sys.argv[1] == "make":
        make(sys.argv[2])
    elif sys.argv[1] == "input":
        sys.stdout.write(text_of(sys.argv[2], sys.argv[3], int(sys.argv[4])))
    elif sys.argv[1] == "torch":
        torch_run(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
