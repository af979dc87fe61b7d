#!/usr/bin/env python3
"""Generate tiny seeded sequence-classification checkpoints and transformers' outputs.

Usage:
    HF_HUB_OFFLINE=1 python scripts/gen_classify_fixtures.py --out tests/fixtures/classify

Each fixture is what `AutoModelForSequenceClassification.save_pretrained` writes for a
small random model (plus the tiny WordPiece tokenizer of scripts/gen_fixtures.py);
golden.json records, for single inputs and sentence pairs, the token ids, token type ids
and logits transformers returns, and for the one-label model the scores
sentence-transformers' CrossEncoder.predict returns (the rerank reference). Nothing is
downloaded; the output is deterministic.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("gen_fixtures", os.path.join(HERE, "gen_fixtures.py"))
gf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gf)

# name -> (architecture config, num_labels, problem_type, id2label or None, seed)
FIXTURES = [
    ("bert_single_label", 3, "single_label_classification", {0: "negative", 1: "neutral", 2: "positive"}, 11),
    ("bert_multi_label", 4, "multi_label_classification", {0: "sports", 1: "politics", 2: "science", 3: "art"}, 12),
    # No id2label in the config: transformers names the labels LABEL_0, LABEL_1.
    ("bert_default_labels", 2, None, None, 13),
    # One label: a regression head / cross-encoder.
    ("bert_cross_encoder", 1, None, None, 14),
]

SINGLES = [text for _, text in gf.CASES]
PAIRS = [
    ("How are you today?", "I am fine, thank you very much."),
    ("Where does the train go?", "The train leaves the station at seven o'clock and arrives at nine."),
    ("What is in the database?", "Postgres stores the vectors, and the extension computes them."),
    ("", "An empty first sequence."),
    ("An empty second sequence.", ""),
    ("Caf\u00e9 d\u00e9j\u00e0 vu", "na\u00efve \u00fcber Stra\u00dfe"),
    ("data " * 20, "data " * 20),  # longer than max length together: truncated longest-first
]
RERANK_QUERY = "Which drinks are popular in the morning?"
RERANK_DOCS = [
    "Coffee and tea are popular drinks in the morning and in the afternoon.",
    "The cat is sleeping on the warm windowsill while it is raining outside.",
    "Music, art and history are taught together in the new program.",
    "",
    "Coffee",
]
MAX_LENGTH = 32


def build(name, num_labels, problem_type, id2label, seed, backbone_dir, out_dir):
    import torch
    from torch import nn
    from transformers import BertConfig, BertForSequenceClassification

    kw = {}
    if id2label is not None:
        kw["id2label"] = {i: l for i, l in id2label.items()}
        kw["label2id"] = {l: i for i, l in id2label.items()}
    if problem_type is not None:
        kw["problem_type"] = problem_type
    config = BertConfig(vocab_size=json.load(open(os.path.join(backbone_dir, "config.json")))["vocab_size"],
                        hidden_size=gf.HIDDEN, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                        max_position_embeddings=128, hidden_act="gelu", pad_token_id=0, num_labels=num_labels,
                        **kw)
    torch.manual_seed(seed)
    model = BertForSequenceClassification(config).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for pname, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            module = model.get_submodule(pname.rsplit(".", 1)[0])
            if isinstance(module, (nn.Linear, nn.Embedding)):
                p.copy_(torch.randn(p.shape, generator=g) * gf.INIT_STD)
            elif isinstance(module, nn.LayerNorm):
                base = 1.0 if pname.endswith(".weight") else 0.0
                p.copy_(base + torch.randn(p.shape, generator=g) * gf.LAYERNORM_STD)
            else:
                raise SystemExit(f"unexpected parameter {pname}")
    model.save_pretrained(out_dir, safe_serialization=True)
    for fn in ("tokenizer.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copyfile(os.path.join(backbone_dir, fn), os.path.join(out_dir, fn))
    tc = json.load(open(os.path.join(backbone_dir, "tokenizer_config.json")))
    tc["model_max_length"] = MAX_LENGTH
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8", newline="\n") as fh:
        fh.write(json.dumps(tc, indent=2, sort_keys=True) + "\n")


def run(name, num_labels, out_dir):
    import numpy as np
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out_dir)
    model = AutoModelForSequenceClassification.from_pretrained(out_dir).eval()
    if tok.model_max_length != MAX_LENGTH:
        raise SystemExit(f"{name}: model_max_length {tok.model_max_length}")

    def one(text, pair=None):
        enc = tok(text, pair, truncation=True, return_tensors="pt")
        with torch.inference_mode():
            logits = model(**enc).logits[0].numpy()
        return {"text": text, **({"pair": pair} if pair is not None else {}),
                "input_ids": enc["input_ids"][0].tolist(), "token_type_ids": enc["token_type_ids"][0].tolist(),
                "logits": gf.floats(logits)}

    cases = [one(t) for t in SINGLES] + [one(a, b) for a, b in PAIRS]
    # Batched (padded) logits equal one-by-one within float32 noise.
    enc = tok(SINGLES, truncation=True, padding=True, return_tensors="pt")
    with torch.inference_mode():
        batched = model(**enc).logits.numpy()
    single = np.stack([np.array(c["logits"], dtype=np.float32) for c in cases[:len(SINGLES)]])
    diff = float(np.max(np.abs(batched - single)))
    if diff > 1e-4:
        raise SystemExit(f"{name}: batched vs single {diff}")
    out = {"config": {"num_labels": num_labels, "problem_type": model.config.problem_type,
                      "id2label": {str(k): v for k, v in sorted(model.config.id2label.items())}},
           "cases": cases}
    if num_labels == 1:
        from sentence_transformers import CrossEncoder

        ce = CrossEncoder(out_dir, device="cpu", max_length=MAX_LENGTH)
        scores = ce.predict([(RERANK_QUERY, d) for d in RERANK_DOCS], convert_to_numpy=True)
        out["rerank"] = {"query": RERANK_QUERY, "documents": RERANK_DOCS,
                         "activation": type(ce.activation_fn).__name__, "scores": gf.floats(np.asarray(scores))}
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/classify")
    args = ap.parse_args()
    import tempfile

    import torch
    import transformers
    import sentence_transformers

    transformers.logging.set_verbosity_error()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="pg_embed_classify_")
    try:
        backbone = os.path.join(work, "backbone")
        os.makedirs(backbone)
        gf.build_tokenizer(backbone)
        with open(os.path.join(backbone, "config.json"), "w") as fh:
            json.dump({"vocab_size": len(gf.build_vocab())}, fh)
        results = {}
        for (name, n, pt, labels, seed) in FIXTURES:
            d = os.path.join(out, name)
            shutil.rmtree(d, ignore_errors=True)
            build(name, n, pt, labels, seed, backbone, d)
            for root, dirs, files in os.walk(d):
                for f in files:
                    os.chmod(os.path.join(root, f), 0o644)
            results[name] = run(name, n, d)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    header = {"generator": {"script": "scripts/gen_classify_fixtures.py", "transformers": transformers.__version__,
                            "sentence_transformers": sentence_transformers.__version__, "torch": torch.__version__,
                            "call": "AutoModelForSequenceClassification(**tokenizer(text, pair, truncation=True)).logits[0]"},
              "max_length": MAX_LENGTH}
    text = json.dumps({**header, "fixtures": results}, ensure_ascii=False, indent=1) + "\n"
    with open(os.path.join(out, "golden.json"), "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)
    os.chmod(os.path.join(out, "golden.json"), 0o644)
    print(f"wrote {out}/golden.json ({len(text)} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
