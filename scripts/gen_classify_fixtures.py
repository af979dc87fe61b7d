#!/usr/bin/env python3
"""Generate tiny seeded sequence-classification checkpoints and transformers' outputs.

Usage:
    HF_HUB_OFFLINE=1 python scripts/gen_classify_fixtures.py --out tests/fixtures/classify

Each fixture is what `*ForSequenceClassification.save_pretrained` writes for a small random
model of one architecture (BERT, RoBERTa, XLM-RoBERTa, DistilBERT, ELECTRA, DeBERTa-v2,
ModernBERT with cls and mean pooling), with the tiny WordPiece tokenizer of
scripts/gen_fixtures.py or, for the RoBERTa family, a tiny byte-level BPE tokenizer with
RoBERTa's pair template. golden.json records, for single inputs and sentence pairs, the
token ids, token type ids and logits transformers returns, and for the one-label models the
scores sentence-transformers' CrossEncoder.predict returns (the rerank reference). Nothing
is downloaded; the output is deterministic.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixturelib.common import load, offline, write_golden  # noqa: E402

offline()

gf = load("gen_fixtures")

# name -> (architecture, num_labels, problem_type, id2label or None, seed, extra config)
FIXTURES = [
    ("bert_single_label", "bert", 3, "single_label_classification", {0: "negative", 1: "neutral", 2: "positive"}, 11, {}),
    ("bert_multi_label", "bert", 4, "multi_label_classification", {0: "sports", 1: "politics", 2: "science", 3: "art"}, 12, {}),
    # No id2label in the config: transformers names the labels LABEL_0, LABEL_1.
    ("bert_default_labels", "bert", 2, None, None, 13, {}),
    # One label: a regression head / cross-encoder.
    ("bert_cross_encoder", "bert", 1, None, None, 14, {}),
    # One per architecture; each head differs (see the Rust classifier).
    ("roberta_single_label", "roberta", 3, None, {0: "negative", 1: "neutral", 2: "positive"}, 21, {}),
    ("xlm_roberta_cross_encoder", "xlm-roberta", 1, None, None, 22, {}),
    ("distilbert_single_label", "distilbert", 2, None, {0: "NEGATIVE", 1: "POSITIVE"}, 23, {}),
    ("electra_multi_label", "electra", 3, "multi_label_classification", {0: "joy", 1: "anger", 2: "fear"}, 24, {}),
    ("deberta_v2_single_label", "deberta-v2", 3, None, {0: "entailment", 1: "neutral", 2: "contradiction"}, 25, {}),
    ("modernbert_cls", "modernbert", 2, None, {0: "no", 1: "yes"}, 26, {"classifier_pooling": "cls"}),
    ("modernbert_mean_regression", "modernbert", 1, "regression", None, 27, {"classifier_pooling": "mean"}),
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


# Tokenizer kinds: WordPiece with a [CLS] A [SEP] B [SEP] template and token type ids (BERT,
# DistilBERT, ELECTRA, DeBERTa-v2, ModernBERT here), and byte-level BPE with RoBERTa's
# <s> A </s></s> B </s> template (RoBERTa, XLM-RoBERTa here).
BPE_ARCHS = {"roberta", "xlm-roberta"}
BPE_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
BPE_VOCAB_SIZE = 420


def build_bpe_tokenizer(out_dir: str) -> int:
    """A byte-level BPE tokenizer trained on the fixture corpus, saved as RoBERTa saves one."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=BPE_VOCAB_SIZE, special_tokens=BPE_SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(gf.CORPUS.splitlines(), trainer=trainer)
    ids = {t: tok.token_to_id(t) for t in BPE_SPECIALS}
    assert [ids[t] for t in BPE_SPECIALS] == list(range(len(BPE_SPECIALS))), ids
    tok.post_processor = processors.RobertaProcessing(("</s>", ids["</s>"]), ("<s>", ids["<s>"]),
                                                      trim_offsets=True, add_prefix_space=False)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", sep_token="</s>",
                                 cls_token="<s>", unk_token="<unk>", pad_token="<pad>", mask_token="<mask>",
                                 model_input_names=["input_ids", "attention_mask"])
    hf.save_pretrained(out_dir)
    return tok.get_vocab_size()


def architecture_config(arch, vocab_size, num_labels, extra, kw):
    """A small config of `arch` and its *ForSequenceClassification class."""
    import transformers as tf

    common = dict(vocab_size=vocab_size, num_labels=num_labels, **kw)
    bert_like = dict(hidden_size=gf.HIDDEN, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                     hidden_act="gelu", **common)
    if arch == "bert":
        return tf.BertForSequenceClassification, tf.BertConfig(max_position_embeddings=128, pad_token_id=0, **bert_like)
    if arch == "roberta":
        # RoBERTa counts positions from padding_idx + 1: 2 + 128 positions.
        return tf.RobertaForSequenceClassification, tf.RobertaConfig(
            max_position_embeddings=130, type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2, **bert_like)
    if arch == "xlm-roberta":
        return tf.XLMRobertaForSequenceClassification, tf.XLMRobertaConfig(
            max_position_embeddings=130, type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2, **bert_like)
    if arch == "distilbert":
        return tf.DistilBertForSequenceClassification, tf.DistilBertConfig(
            dim=gf.HIDDEN, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=128, activation="gelu",
            pad_token_id=0, **common)
    if arch == "electra":
        # embedding_size < hidden_size: the embeddings are projected (embeddings_project).
        return tf.ElectraForSequenceClassification, tf.ElectraConfig(
            embedding_size=16, max_position_embeddings=128, pad_token_id=0, **bert_like)
    if arch == "deberta-v2":
        # DeBERTa-v3's settings: relative attention with log buckets, shared attention keys,
        # no absolute positions, no token types.
        return tf.DebertaV2ForSequenceClassification, tf.DebertaV2Config(
            max_position_embeddings=128, relative_attention=True, position_buckets=16, max_relative_positions=-1,
            pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm", share_att_key=True, position_biased_input=False,
            type_vocab_size=0, pad_token_id=0, pooler_hidden_size=gf.HIDDEN, pooler_hidden_act="gelu",
            layer_norm_eps=1e-7, **bert_like)
    if arch == "modernbert":
        # Three layers: layer 0 global, layers 1-2 local with an 8-token window, so inputs
        # longer than the window exercise the sliding mask.
        return tf.ModernBertForSequenceClassification, tf.ModernBertConfig(
            hidden_size=gf.HIDDEN, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
            max_position_embeddings=128, global_attn_every_n_layers=3, local_attention=8, pad_token_id=0,
            cls_token_id=2, sep_token_id=3, bos_token_id=2, eos_token_id=3, hidden_activation="gelu",
            classifier_activation="gelu", **extra, **common)
    raise SystemExit(f"unknown architecture {arch}")


def build(name, arch, num_labels, problem_type, id2label, seed, extra, tokenizer_dir, out_dir):
    import torch
    from torch import nn

    kw = {}
    if id2label is not None:
        kw["id2label"] = {i: l for i, l in id2label.items()}
        kw["label2id"] = {l: i for i, l in id2label.items()}
    if problem_type is not None:
        kw["problem_type"] = problem_type
    vocab_size = json.load(open(os.path.join(tokenizer_dir, "config.json")))["vocab_size"]
    cls, config = architecture_config(arch, vocab_size, num_labels, extra, kw)
    torch.manual_seed(seed)
    model = cls(config).eval()
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
    for fn in os.listdir(tokenizer_dir):
        if fn not in ("config.json", "tokenizer_config.json"):
            shutil.copyfile(os.path.join(tokenizer_dir, fn), os.path.join(out_dir, fn))
    tc = json.load(open(os.path.join(tokenizer_dir, "tokenizer_config.json")))
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

    accepted = set(inspect.signature(model.forward).parameters)

    def inputs(enc):
        return {k: v for k, v in enc.items() if k in accepted}

    def one(text, pair=None):
        enc = tok(text, pair, truncation=True, return_tensors="pt", return_token_type_ids=True)
        with torch.inference_mode():
            logits = model(**inputs(enc)).logits[0].numpy()
        return {"text": text, **({"pair": pair} if pair is not None else {}),
                "input_ids": enc["input_ids"][0].tolist(), "token_type_ids": enc["token_type_ids"][0].tolist(),
                "logits": gf.floats(logits)}

    cases = [one(t) for t in SINGLES] + [one(a, b) for a, b in PAIRS]
    # Batched (padded) logits equal one-by-one within float32 noise.
    enc = tok(SINGLES, truncation=True, padding=True, return_tensors="pt")
    with torch.inference_mode():
        batched = model(**inputs(enc)).logits.numpy()
    single = np.stack([np.array(c["logits"], dtype=np.float32) for c in cases[:len(SINGLES)]])
    diff = float(np.max(np.abs(batched - single)))
    if diff > 1e-4:
        raise SystemExit(f"{name}: batched vs single {diff}")
    out = {"architecture": model.config.architectures[0],
           "config": {"num_labels": num_labels, "problem_type": model.config.problem_type,
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
        wordpiece = os.path.join(work, "wordpiece")
        os.makedirs(wordpiece)
        gf.build_tokenizer(wordpiece)
        with open(os.path.join(wordpiece, "config.json"), "w") as fh:
            json.dump({"vocab_size": len(gf.build_vocab())}, fh)
        bpe = os.path.join(work, "bpe")
        os.makedirs(bpe)
        with open(os.path.join(bpe, "config.json"), "w") as fh:
            json.dump({"vocab_size": build_bpe_tokenizer(bpe)}, fh)
        results = {}
        for (name, arch, n, pt, labels, seed, extra) in FIXTURES:
            d = os.path.join(out, name)
            shutil.rmtree(d, ignore_errors=True)
            build(name, arch, n, pt, labels, seed, extra, bpe if arch in BPE_ARCHS else wordpiece, d)
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
    write_golden(os.path.join(out, "golden.json"), text)
    print(f"wrote {out}/golden.json ({len(text)} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
