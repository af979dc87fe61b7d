#!/usr/bin/env python3
"""Generate tiny seeded sparse (SPLADE) and static-embedding fixture models and their golden outputs.

Usage:
    HF_HUB_OFFLINE=1 bench/.venv/bin/python scripts/gen_sparse_fixtures.py --out tests/fixtures/sparse

Nothing is downloaded.  Requires the ``model2vec`` package (generated with model2vec 0.10.0:
``bench/.venv/bin/pip install model2vec==0.10.0``).

Why: pg_embed's Rust parity tests for sparse encoders (SPLADE, inference-free SPLADE) and static
embedding models (sentence-transformers ``StaticEmbedding``, model2vec) compare against what the
reference Python libraries return for the very same files.  The script

1. builds the tiny WordPiece tokenizer of ``scripts/gen_fixtures.py`` (imported from there, so
   both fixture sets share one vocabulary), and for the RoBERTa-family models the byte-level BPE
   and the SentencePiece-style Unigram tokenizers of ``scripts/gen_backbone_fixtures.py`` (the
   ones of tests/fixtures/backbones/roberta and xlm_roberta, built by the same code);
2. builds tiny seeded random masked-LM backbones (``BertForMaskedLM`` tied and untied,
   ``DistilBertForMaskedLM``, ``ModernBertForMaskedLM``, ``RobertaForMaskedLM`` tied,
   ``XLMRobertaForMaskedLM`` untied; hidden 32, 2 layers, 4 heads, intermediate 64) whose
   weights are re-initialised with a large standard deviation.  The MLM decoder bias (the one
   the forward adds) is shifted by a fixed negative constant so that, after relu + log1p +
   pooling, a document activates a clearly partial share of the vocabulary (checked: between 5%
   and 60% for every input, the empty one included).  An untied head's other bias (BERT's
   ``cls.predictions.bias``, RoBERTa's ``lm_head.bias``, which the forward does not add) is drawn
   like any bias and not shifted, so reading the wrong one shows;
3. wraps them into ``SparseEncoder`` directories (``MLMTransformer`` + ``SpladePooling``; a
   ``Router`` with a ``SparseStaticEmbedding`` query route for the inference-free layout), and
   builds ``SentenceTransformer`` ``StaticEmbedding`` models and a model2vec-layout folder, each
   saved with the owning library's own ``save()``/``save_pretrained()``;
4. reloads every saved directory from disk and records what the libraries return for it in
   ``<out>/golden.json``.

The output is deterministic: running the script twice gives byte-identical files.  Floats are
float32 values written as repr(float(x)), which round-trips exactly to the same float32.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

# Must be set before importing huggingface_hub / transformers.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixturelib.common import offline, write_golden  # noqa: E402

offline()
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import gen_fixtures  # noqa: E402  (tokenizer builder, dump(), dir_size())
import gen_backbone_fixtures  # noqa: E402  (the RoBERTa-family tokenizers)

# --------------------------------------------------------------------------
# Models.
# --------------------------------------------------------------------------

HIDDEN = 32
LAYERS = 2
HEADS = 4
INTERMEDIATE = 64
MAX_POSITIONS = 128
MAX_SEQ_LENGTH = 32       # sparse models (MLM document encoders)
INIT_STD = 0.5            # Linear/Embedding weights and biases ~ N(0, INIT_STD)
LAYERNORM_STD = 0.2       # LayerNorm weight ~ 1 + N(0, s), bias ~ N(0, s)
# MLM decoder bias ~ N(0, INIT_STD) + a per-model negative shift (last field of the model specs
# below): makes most logits negative, so relu keeps a minority of the vocabulary per token and
# SPLADE outputs are sparse, not all-active.  Chosen by hand so that every input activates
# MIN_ACTIVE..MAX_ACTIVE of the vocabulary (checked).
MIN_ACTIVE, MAX_ACTIVE = 0.05, 0.60
STATIC_DIM = 16
DENSE_OUT = 8
QUERY_WEIGHT_FRACTION = 0.5   # share of non-special vocabulary ids with a non-zero query weight

SPLADE_MODELS = [
    # name, architecture, tie_word_embeddings, pooling_strategy, activation_function, seed, bias shift,
    # extras ({} = the shared WordPiece tokenizer and hidden_act "gelu"; recorded when not empty)
    ("splade_bert", "bert", True, "max", "relu", 11, -3.0, {}),
    ("splade_bert_sum_untied", "bert", False, "sum", "relu", 12, -4.0, {}),
    ("splade_distilbert", "distilbert", True, "max", "relu", 13, -4.0, {}),
    ("splade_modernbert", "modernbert", True, "max", "relu", 14, -5.0, {}),
    # RoBERTa family: byte-level BPE (no [UNK]: unknown characters become bytes) and Unigram.
    # The untied XLM-R backbone uses hidden_act "gelu_new": RobertaLMHead's activation is the
    # exact gelu whatever hidden_act says, which the golden then shows.
    ("splade_roberta", "roberta", True, "max", "relu", 16, -4.0, {"tokenizer": "bpe"}),
    ("splade_xlm_roberta_untied", "xlm-roberta", False, "sum", "relu", 17, -4.0,
     {"tokenizer": "unigram_xlmr", "hidden_act": "gelu_new"}),
]
# The inference-free document route: its own BERT MLM, log1p_relu activation (as the
# opensearch inference-free models use), max pooling.
INFERENCE_FREE = ("inference_free", "bert", True, "max", "log1p_relu", 15, -4.0, {})
# Tokenizers of scripts/gen_backbone_fixtures.py by kind (their max length is MAX_SEQ_LENGTH too).
BACKBONE_TOKENIZERS = ("bpe", "unigram_xlmr")
BYTE_LEVEL_TOKENIZERS = {"bpe"}
STATIC_SEEDS = {"static_st": 21, "static_st_dense": 22, "model2vec_layout": 23, "static_dense_head": 24,
                "query_weights": 25}

# --------------------------------------------------------------------------
# Inputs.  Hard-coded; order is the order in golden.json.
# --------------------------------------------------------------------------

CASES: list[tuple[str, str]] = [
    ("short", "Hello world"),
    ("sentence", "The quick brown fox jumps over the lazy dog."),
    ("question", "How are you today?"),
    ("query_like", "search engines rank each document"),
    ("mixed_case", "Postgres Stores VECTORS in the Database"),
    ("repeated_word", "data data data data"),
    ("subwords", "Tokenizers were retokenizing the sentences."),
    ("punct_digits", "The price went up by 5% - from $20 to $21!"),
    ("empty", ""),
    # Accents are stripped by the BERT normalizer ("na\u00efve" -> "naive", pieces), but "\u00df" is no
    # corpus character and is kept, so "stra\u00dfe" is one [UNK].
    ("oov_word", "The na\u00efve fox visited Stra\u00dfe"),
    ("long_truncated",
     "Search engines rank each document by its similarity to the query, and the database keeps "
     "growing every day, so the extension computes embeddings for every new row inside Postgres "
     "while students learn to write clear sentences, short paragraphs and long essays."),
]
MUST_TRUNCATE = {"long_truncated"}
MUST_HAVE_UNK = {"oov_word"}
DECODE_CASES = ("sentence", "query_like")
DECODE_TOP_K = 5

OWNED_FILES = {"golden.json"}


# --------------------------------------------------------------------------
# Builders
# --------------------------------------------------------------------------

def reinit(model, seed: int, decoder_bias_names: tuple[str, ...] = (), shift: float = 0.0) -> None:
    """Redraw every parameter with a fixed generator, in sorted name order.

    Tied parameters appear once in named_parameters() and are overwritten in place, so ties
    survive."""
    import torch
    from torch import nn

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            module_name, _, leaf = name.rpartition(".")
            module = model.get_submodule(module_name) if module_name else model
            if isinstance(module, nn.LayerNorm) or type(module).__name__.endswith("LayerNorm"):
                base = 1.0 if leaf == "weight" else 0.0
                p.copy_(base + torch.randn(p.shape, generator=g) * LAYERNORM_STD)
            elif isinstance(module, (nn.Linear, nn.Embedding)) or leaf == "bias":
                p.copy_(torch.randn(p.shape, generator=g) * INIT_STD)
            else:
                raise SystemExit(f"unexpected parameter {name} in {type(module).__name__}")
            if name in decoder_bias_names:
                p.add_(shift)


def build_mlm(arch: str, tied: bool, seed: int, shift: float, vocab_size: int, tok_dir: str, out_dir: str,
              hidden_act: str = "gelu") -> dict:
    """Save a seeded random *ForMaskedLM plus the tokenizer of tok_dir into out_dir; return facts."""
    import torch

    if arch == "bert":
        from transformers import BertConfig, BertForMaskedLM
        config = BertConfig(vocab_size=vocab_size, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                            num_attention_heads=HEADS, intermediate_size=INTERMEDIATE,
                            max_position_embeddings=MAX_POSITIONS, hidden_act="gelu", pad_token_id=0,
                            tie_word_embeddings=tied)
        cls = BertForMaskedLM
    elif arch == "distilbert":
        from transformers import DistilBertConfig, DistilBertForMaskedLM
        config = DistilBertConfig(vocab_size=vocab_size, dim=HIDDEN, n_layers=LAYERS, n_heads=HEADS,
                                  hidden_dim=INTERMEDIATE, max_position_embeddings=MAX_POSITIONS,
                                  activation="gelu", pad_token_id=0, tie_word_embeddings=tied)
        cls = DistilBertForMaskedLM
    elif arch == "modernbert":
        from transformers import ModernBertConfig, ModernBertForMaskedLM
        config = ModernBertConfig(vocab_size=vocab_size, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                                  num_attention_heads=HEADS, intermediate_size=INTERMEDIATE,
                                  max_position_embeddings=MAX_POSITIONS, local_attention=16,
                                  global_attn_every_n_layers=2, pad_token_id=0, bos_token_id=2,
                                  eos_token_id=3, cls_token_id=2, sep_token_id=3,
                                  tie_word_embeddings=tied, attn_implementation="eager")
        cls = ModernBertForMaskedLM
    elif arch in ("roberta", "xlm-roberta"):
        from transformers import RobertaConfig, RobertaForMaskedLM, XLMRobertaConfig, XLMRobertaForMaskedLM
        config_cls, cls = ((RobertaConfig, RobertaForMaskedLM) if arch == "roberta"
                           else (XLMRobertaConfig, XLMRobertaForMaskedLM))
        # Positions start after the padding id (1), hence 2 more; one token type.
        config = config_cls(vocab_size=vocab_size, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                            num_attention_heads=HEADS, intermediate_size=INTERMEDIATE,
                            max_position_embeddings=MAX_POSITIONS + 2, type_vocab_size=1, hidden_act=hidden_act,
                            pad_token_id=1, bos_token_id=0, eos_token_id=2, tie_word_embeddings=tied)
    else:
        raise ValueError(arch)
    if hidden_act != "gelu" and arch not in ("roberta", "xlm-roberta"):
        raise ValueError(f"{arch}: hidden_act {hidden_act}")
    torch.manual_seed(seed)
    model = cls(config)
    model.eval()
    out_emb = model.get_output_embeddings()
    in_emb = model.get_input_embeddings()
    bias_names = tuple(n for n, p in model.named_parameters() if out_emb.bias is not None and p is out_emb.bias)
    if not bias_names:
        raise SystemExit(f"{arch}: no decoder bias found")
    reinit(model, seed, bias_names, shift)
    is_tied = out_emb.weight.data_ptr() == in_emb.weight.data_ptr()
    if is_tied != tied:
        raise SystemExit(f"{arch}: tie_word_embeddings={tied} but tied={is_tied}")
    model = model.to(torch.float32)
    model.save_pretrained(out_dir, safe_serialization=True)
    for fn in os.listdir(tok_dir):
        shutil.copyfile(os.path.join(tok_dir, fn), os.path.join(out_dir, fn))
    facts = {"architecture": type(model).__name__, "tie_word_embeddings": tied,
             "decoder_bias_parameter": bias_names[0]}
    if arch in ("roberta", "xlm-roberta"):
        # What the checkpoint holds: a tied head stores lm_head.bias alone (decoder.bias is tied
        # to it); an untied one both, the forward adding decoder.bias only.
        from safetensors import safe_open
        with safe_open(os.path.join(out_dir, "model.safetensors"), "pt") as f:
            facts["head_tensors"] = sorted(k for k in f.keys() if k.startswith("lm_head."))
        if not tied:
            gap = float((model.lm_head.bias - model.lm_head.decoder.bias).abs().max())
            if gap < 1.0:
                raise SystemExit(f"{arch}: the untied biases differ by only {gap}")
        facts["hidden_act"] = hidden_act
        facts["max_position_embeddings"] = config.max_position_embeddings
    return facts


def build_splade(name: str, arch: str, tied: bool, pooling: str, act: str, seed: int, shift: float,
                 vocab_size: int, tok_dir: str, work: str, out_dir: str, hidden_act: str = "gelu") -> dict:
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling

    hf_dir = os.path.join(work, name + "_hf")
    facts = build_mlm(arch, tied, seed, shift, vocab_size, tok_dir, hf_dir, hidden_act)
    mlm = MLMTransformer(hf_dir, max_seq_length=MAX_SEQ_LENGTH)
    model = SparseEncoder(modules=[mlm, SpladePooling(pooling_strategy=pooling, activation_function=act)],
                          device="cpu")
    model.save(out_dir, create_model_card=False, safe_serialization=True)
    return facts


def build_inference_free(vocab_size: int, tok_dir: str, work: str, out_dir: str) -> dict:
    import torch
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, Router, SparseStaticEmbedding, SpladePooling

    name, arch, tied, pooling, act, seed, shift, _ = INFERENCE_FREE
    hf_dir = os.path.join(work, name + "_hf")
    facts = build_mlm(arch, tied, seed, shift, vocab_size, tok_dir, hf_dir)
    doc = MLMTransformer(hf_dir, max_seq_length=MAX_SEQ_LENGTH)
    # Seeded positive weights for a random subset of the non-special ids, zeros elsewhere.
    g = torch.Generator().manual_seed(STATIC_SEEDS["query_weights"])
    n_special = len(gen_fixtures.SPECIALS)
    keep = torch.rand(vocab_size, generator=g) < QUERY_WEIGHT_FRACTION
    keep[:n_special] = False
    w = (0.1 + 3.0 * torch.rand(vocab_size, generator=g)) * keep
    query = SparseStaticEmbedding(tokenizer=doc.tokenizer, weight=w.to(torch.float32), frozen=True)
    router = Router.for_query_document(query_modules=[query],
                                       document_modules=[doc, SpladePooling(pooling_strategy=pooling,
                                                                            activation_function=act)])
    model = SparseEncoder(modules=[router], similarity_fn_name="dot", device="cpu")
    model.save(out_dir, create_model_card=False, safe_serialization=True)
    facts["query_weight_nonzero"] = int(keep.sum())
    return facts


def static_table(vocab_size: int, dim: int, seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    return (torch.randn((vocab_size, dim), generator=g) * INIT_STD).to(torch.float32)


def build_static_st(name: str, vocab_size: int, tok_dir: str, out_dir: str) -> None:
    import torch
    from torch import nn
    from tokenizers import Tokenizer
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense, Normalize, StaticEmbedding

    tok = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    emb = StaticEmbedding(tok, embedding_weights=static_table(vocab_size, STATIC_DIM, STATIC_SEEDS[name]))
    modules = [emb]
    if name == "static_st":
        modules.append(Normalize())
    else:
        torch.manual_seed(STATIC_SEEDS["static_dense_head"])
        dense = Dense(STATIC_DIM, DENSE_OUT, bias=True, activation_function=nn.Tanh())
        g = torch.Generator().manual_seed(STATIC_SEEDS["static_dense_head"])
        with torch.no_grad():
            dense.linear.weight.copy_(torch.randn(dense.linear.weight.shape, generator=g) * INIT_STD)
            dense.linear.bias.copy_(torch.randn(dense.linear.bias.shape, generator=g) * INIT_STD)
        modules.append(dense)
    model = SentenceTransformer(modules=modules, device="cpu")
    model.save(out_dir, create_model_card=False, safe_serialization=True)


def build_model2vec(vocab_size: int, tok_dir: str, out_dir: str) -> None:
    from tokenizers import Tokenizer
    from model2vec import StaticModel

    tok = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    table = static_table(vocab_size, STATIC_DIM, STATIC_SEEDS["model2vec_layout"]).numpy()
    # normalize=True, as the published potion-* models are configured.
    m = StaticModel(vectors=table, tokenizer=tok, normalize=True)
    m.save_pretrained(out_dir)


# --------------------------------------------------------------------------
# Goldens
# --------------------------------------------------------------------------

def floats(v) -> list[float]:
    return gen_fixtures.floats(v)


def sparse_row(t, vocab_size: int):
    """(indices, values) of a 1 x V (or V) sparse COO tensor; indices ascending."""
    import numpy as np
    import torch

    if not t.is_sparse:
        raise SystemExit(f"expected a sparse tensor, got {t.layout}")
    t = t.coalesce()
    if t.dtype != torch.float32:
        raise SystemExit(f"non-float32 sparse output {t.dtype}")
    if t.shape[-1] != vocab_size:
        raise SystemExit(f"bad sparse shape {tuple(t.shape)}")
    idx = t.indices()[-1].numpy()
    val = t.values().numpy()
    keep = val != 0
    idx, val = idx[keep], val[keep]
    order = np.argsort(idx, kind="stable")
    return [int(i) for i in idx[order]], floats(val[order])


def encode_sparse(model, text: str, route: str | None):
    """One input's sparse tensor as SparseEncoder gives it: `encode` (no route),
    `encode_query` or `encode_document`."""
    encode = {None: model.encode, "query": model.encode_query}.get(route, model.encode_document)
    return encode([text], batch_size=1, convert_to_sparse_tensor=True, show_progress_bar=False)


def check_dense_equivalent(model, text, indices, values, **kw) -> None:
    import numpy as np

    d = model.encode([text], batch_size=1, convert_to_tensor=True, convert_to_sparse_tensor=False,
                     show_progress_bar=False, **kw)
    if d.is_sparse:
        raise SystemExit("convert_to_sparse_tensor=False returned a sparse tensor")
    d = d[0].numpy()
    nz = np.nonzero(d)[0]
    if [int(i) for i in nz] != indices or floats(d[nz]) != values:
        raise SystemExit(f"dense and sparse encode disagree for {text!r}")
    if np.any(d < 0):
        raise SystemExit("negative SPLADE activation")


def run_splade(name: str, folder: str, stats: dict, kind: str, byte_level: bool = False) -> dict:
    import numpy as np
    import torch
    from sentence_transformers import SparseEncoder

    model = SparseEncoder(folder, device="cpu")
    model.eval()
    vocab_size = len(model.tokenizer.get_vocab())
    # SpladePooling is saved with "embedding_dimension": null and only learns the vocabulary size
    # in its first forward(); until then get_embedding_dimension() falls through to the MLM's
    # hidden size.  Recorded, not relied upon.
    dim_before = model.get_embedding_dimension()
    desc = {"kind": kind, "modules": [type(m).__name__ for m in model], "vocab_size": vocab_size,
            "max_seq_length": int(model.max_seq_length), "similarity_fn_name": model.similarity_fn_name,
            "get_embedding_dimension_before_encode": dim_before}
    mlm = model[0].sub_modules["document"][0] if kind == "inference_free" else model[0]
    desc["attn_implementation"] = mlm.auto_model.config._attn_implementation
    if int(model.max_seq_length) != MAX_SEQ_LENGTH:
        raise SystemExit(f"{name}: max_seq_length {model.max_seq_length}")

    routes = ["query", "document"] if kind == "inference_free" else [None]
    cases = []
    nnz: dict = {}
    for cname, text in CASES:
        c = {"name": cname, "text": text}
        for route in routes:
            kw = {} if route is None else {"task": route}
            suffix = "" if route is None else "_" + route
            feats = model.preprocess([text], **kw)
            ids = feats["input_ids"][0].tolist()
            untrunc = len(model.tokenizer(text, add_special_tokens=(route != "query"), truncation=False)["input_ids"])
            if route != "query":
                if cname in MUST_TRUNCATE and not (untrunc > MAX_SEQ_LENGTH and len(ids) == MAX_SEQ_LENGTH):
                    raise SystemExit(f"{name}/{cname}: expected truncation, got {untrunc} -> {len(ids)}")
            if cname in MUST_HAVE_UNK and byte_level:
                # Byte-level BPE has no unknown token: the text comes back whole.
                if model.tokenizer.unk_token_id in ids or model.tokenizer.decode(ids, skip_special_tokens=True) != text:
                    raise SystemExit(f"{name}/{cname}: byte-level ids {ids} do not round-trip")
            elif cname in MUST_HAVE_UNK and model.tokenizer.unk_token_id not in ids:
                raise SystemExit(f"{name}/{cname}: no [UNK] in {ids}")
            e = encode_sparse(model, text, route)
            indices, values = sparse_row(e, vocab_size)
            check_dense_equivalent(model, text, indices, values, **kw)
            c[f"input_ids{suffix}"] = ids
            c[f"num_tokens_untruncated{suffix}"] = untrunc
            c[f"nnz{suffix}"] = len(indices)
            c[f"indices{suffix}"] = indices
            c[f"values{suffix}"] = values
            nnz.setdefault(route or "document", []).append(len(indices))
            frac = len(indices) / vocab_size
            if route != "query" and not (MIN_ACTIVE <= frac <= MAX_ACTIVE):
                raise SystemExit(f"{name}/{cname}: {len(indices)} of {vocab_size} active ({frac:.2%})")
        cases.append(c)

    if model.get_embedding_dimension() != vocab_size:
        raise SystemExit(f"{name}: embedding dimension {model.get_embedding_dimension()} != vocab size {vocab_size}")

    # Padded batch vs one input at a time (attention-masked padding must not change anything).
    for route in routes:
        kw = {} if route is None else {"task": route}
        suffix = "" if route is None else "_" + route
        b = model.encode([t for _, t in CASES], batch_size=len(CASES), convert_to_sparse_tensor=False,
                         convert_to_tensor=True, show_progress_bar=False, **kw)
        b = b.to_dense().numpy() if b.is_sparse else b.numpy()
        worst = 0.0
        for row, c in zip(b, cases):
            s = np.zeros(vocab_size, dtype=np.float32)
            s[c[f"indices{suffix}"]] = c[f"values{suffix}"]
            worst = max(worst, float(np.max(np.abs(row - s) / np.maximum(1.0, np.abs(s)))))
        stats[f"{name}{suffix}_batched_vs_single_max_rel_diff"] = worst
        if worst > 1e-4:
            raise SystemExit(f"{name}{suffix}: batched differs from single by {worst}")

    out = {**desc, "nnz_min_max": {k: [min(v), max(v)] for k, v in nnz.items()}}
    return out, cases, model


def run_decode(model, cases: list[dict]) -> list[dict]:
    import torch

    vocab_size = len(model.tokenizer.get_vocab())
    res = []
    for c in cases:
        if c["name"] not in DECODE_CASES:
            continue
        emb = torch.sparse_coo_tensor(torch.tensor([c["indices"]]), torch.tensor(c["values"], dtype=torch.float32),
                                      (vocab_size,))
        dec = model.decode(emb, top_k=DECODE_TOP_K)
        # The same from encode()'s own output.
        e = model.encode([c["text"]], batch_size=1, convert_to_sparse_tensor=True, show_progress_bar=False)
        if model.decode(e[0], top_k=DECODE_TOP_K) != dec:
            raise SystemExit("decode of encode() output differs from decode of the recorded entries")
        res.append({"case": c["name"], "top_k": DECODE_TOP_K,
                    "tokens": [t for t, _ in dec], "weights": [float(w) for _, w in dec],
                    "token_ids": model.tokenizer.convert_tokens_to_ids([t for t, _ in dec])})
    return res


def run_static(name: str, folder: str, stats: dict) -> tuple[dict, list[dict]]:
    import numpy as np
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(folder, device="cpu")
    model.eval()
    dim = int(model.get_embedding_dimension())
    desc = {"kind": "static", "modules": [type(m).__name__ for m in model], "dim": dim,
            "vocab_size": int(model[0].num_embeddings), "similarity_fn_name": model.similarity_fn_name}
    cases = []
    for cname, text in CASES:
        feats = model.preprocess([text])
        ids = feats["input_ids"].tolist()
        if cname in MUST_HAVE_UNK and 1 not in ids:
            raise SystemExit(f"{name}/{cname}: no [UNK] in {ids}")
        e = model.encode([text], batch_size=1, convert_to_numpy=True, show_progress_bar=False)[0]
        if e.dtype != np.float32 or e.shape != (dim,):
            raise SystemExit(f"{name}/{cname}: {e.dtype} {e.shape}")
        cases.append({"name": cname, "text": text, "input_ids": ids, "embedding": floats(e)})
    b = model.encode([t for _, t in CASES], batch_size=len(CASES), convert_to_numpy=True, show_progress_bar=False)
    worst = max(float(np.max(np.abs(row - np.array(c["embedding"], dtype=np.float32)))) for row, c in zip(b, cases))
    stats[f"{name}_batched_vs_single_max_abs_diff"] = worst
    if worst > 1e-5:
        raise SystemExit(f"{name}: batched differs by {worst}")
    return desc, cases


def run_model2vec(folder: str, stats: dict) -> tuple[dict, list[dict]]:
    import numpy as np
    from model2vec import StaticModel
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding

    m = StaticModel.from_pretrained(folder)
    st_m2v = SentenceTransformer(modules=[StaticEmbedding.from_model2vec(folder)], device="cpu")
    st_dir = SentenceTransformer(folder, device="cpu")  # model2vec also writes a modules.json
    desc = {"kind": "static", "dim": int(m.dim), "vocab_size": int(len(m.tokens)),
            "model2vec_config": dict(sorted(m.config.items())),
            "model2vec_unk_token_id": m.unk_token_id,
            "st_from_model2vec_modules": [type(x).__name__ for x in st_m2v],
            "st_folder_modules": [type(x).__name__ for x in st_dir]}
    cases = []
    for cname, text in CASES:
        ids = m.tokenize([text])[0]
        e = m.encode([text], show_progress_bar=False, use_multiprocessing=False)[0]
        e_raw = m.encode([text], show_progress_bar=False, use_multiprocessing=False, normalize=False)[0]
        s = st_m2v.encode([text], batch_size=1, convert_to_numpy=True, show_progress_bar=False)[0]
        d = st_dir.encode([text], batch_size=1, convert_to_numpy=True, show_progress_bar=False)[0]
        for arr in (e, e_raw, s, d):
            if arr.dtype != np.float32 or arr.shape != (m.dim,):
                raise SystemExit(f"model2vec/{cname}: {arr.dtype} {arr.shape}")
        cases.append({"name": cname, "text": text,
                      "input_ids_model2vec": ids,
                      "input_ids_st": st_m2v.preprocess([text])["input_ids"].tolist(),
                      "embedding": floats(e),
                      "embedding_unnormalized": floats(e_raw),
                      "embedding_st_from_model2vec": floats(s),
                      "embedding_st_folder": floats(d)})
    return desc, cases


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="tests/fixtures/sparse", help="output directory (default tests/fixtures/sparse)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads (default 1, for bit-reproducibility)")
    ap.add_argument("--skip-modernbert", action="store_true", help="leave out splade_modernbert")
    args = ap.parse_args()

    import logging
    import warnings

    import numpy as np
    import safetensors
    import tokenizers
    import torch
    import transformers
    import sentence_transformers
    import model2vec

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    logging.getLogger("sentence_transformers").setLevel(logging.ERROR)
    logging.getLogger("model2vec").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(args.threads)
    torch.set_default_dtype(torch.float32)

    splade = [s for s in SPLADE_MODELS if not (args.skip_modernbert and s[1] == "modernbert")]
    model_names = [s[0] for s in splade] + [INFERENCE_FREE[0], "static_st", "static_st_dense", "model2vec_layout"]

    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    for n in model_names:
        shutil.rmtree(os.path.join(out, n), ignore_errors=True)
    for fn in OWNED_FILES:
        if os.path.exists(os.path.join(out, fn)):
            os.remove(os.path.join(out, fn))

    facts: dict = {}
    work = tempfile.mkdtemp(prefix="pg_embed_sparse_fixtures_")
    try:
        tok_dir = os.path.join(work, "tokenizer")
        os.makedirs(tok_dir)
        vocab_size = gen_fixtures.build_tokenizer(tok_dir)
        tokenizers_by_kind = {"wordpiece": (tok_dir, vocab_size)}
        for kind in BACKBONE_TOKENIZERS:
            kind_dir = os.path.join(work, "tokenizer_" + kind)
            os.makedirs(kind_dir)
            tokenizers_by_kind[kind] = (kind_dir, gen_backbone_fixtures.build_tokenizer(kind, kind_dir))
        for (name, arch, tied, pooling, act, seed, shift, extras) in splade:
            kind_dir, kind_vocab = tokenizers_by_kind[extras.get("tokenizer", "wordpiece")]
            facts[name] = build_splade(name, arch, tied, pooling, act, seed, shift, kind_vocab, kind_dir, work,
                                       os.path.join(out, name), extras.get("hidden_act", "gelu"))
            if "tokenizer" in extras:
                facts[name]["tokenizer"] = extras["tokenizer"]
        facts[INFERENCE_FREE[0]] = build_inference_free(vocab_size, tok_dir, work, os.path.join(out, INFERENCE_FREE[0]))
        for name in ("static_st", "static_st_dense"):
            build_static_st(name, vocab_size, tok_dir, os.path.join(out, name))
        build_model2vec(vocab_size, tok_dir, os.path.join(out, "model2vec_layout"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    # safetensors writes 0600 files; make everything readable (the test server runs as another user).
    for n in model_names:
        for root, dirs, files in os.walk(os.path.join(out, n)):
            for d in dirs:
                os.chmod(os.path.join(root, d), 0o755)
            for fn in files:
                os.chmod(os.path.join(root, fn), 0o644)
        os.chmod(os.path.join(out, n), 0o755)

    stats: dict = {}
    models_out: dict = {}
    decode_ref = None
    for (name, arch, tied, pooling, act, seed, shift, extras) in splade + [INFERENCE_FREE]:
        torch.manual_seed(0)
        kind = "inference_free" if name == INFERENCE_FREE[0] else "splade"
        desc, cases, model = run_splade(name, os.path.join(out, name), stats, kind,
                                        extras.get("tokenizer") in BYTE_LEVEL_TOKENIZERS)
        desc.update({"pooling_strategy": pooling, "activation_function": act, "seed": seed,
                     "decoder_bias_shift": shift, **facts[name]})
        if name == "splade_bert":
            decode_ref = run_decode(model, cases)
            desc["decode"] = decode_ref
        models_out[name] = {**desc, "cases": cases}
    for name in ("static_st", "static_st_dense"):
        desc, cases = run_static(name, os.path.join(out, name), stats)
        desc["seed"] = STATIC_SEEDS[name]
        models_out[name] = {**desc, "cases": cases}
    desc, cases = run_model2vec(os.path.join(out, "model2vec_layout"), stats)
    desc["seed"] = STATIC_SEEDS["model2vec_layout"]
    models_out["model2vec_layout"] = {**desc, "cases": cases}

    for name in model_names:
        print(f"  {name}: {gen_fixtures.dir_size(os.path.join(out, name))} bytes "
              f"{models_out[name].get('nnz_min_max', '')}", file=sys.stderr)

    header = {
        "generator": {
            "script": "scripts/gen_sparse_fixtures.py",
            "python": sys.version.split()[0],
            "sentence_transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
            "torch": torch.__version__,
            "safetensors": safetensors.__version__,
            "numpy": np.__version__,
            "model2vec": model2vec.__version__,
            "device": "cpu",
            "dtype": "float32",
            "torch_threads": args.threads,
        },
        "backbone": {
            "tokenizer": "the WordPiece tokenizer of scripts/gen_fixtures.py (build_tokenizer), shared by every model "
                         "without a tokenizer field of its own",
            "vocab_size": vocab_size,
            "hidden_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
            "intermediate_size": INTERMEDIATE, "max_position_embeddings": MAX_POSITIONS,
            "init": f"Linear/Embedding weights and biases ~ N(0, {INIT_STD}); LayerNorm weight ~ 1 + N(0, "
                    f"{LAYERNORM_STD}), bias ~ N(0, {LAYERNORM_STD}); MLM decoder bias additionally "
                    f"shifted by the model's decoder_bias_shift",
            "static_dim": STATIC_DIM,
        },
        "max_seq_length": MAX_SEQ_LENGTH,
        "fields": {
            "kind": "splade: SparseEncoder [MLMTransformer, SpladePooling]; inference_free: SparseEncoder [Router(query: SparseStaticEmbedding; document: MLMTransformer, SpladePooling)]; static: StaticEmbedding-based SentenceTransformer or model2vec folder",
            "vocab_size": "sparse output dimension == tokenizer vocabulary size",
            "nnz_min_max": "min and max number of non-zero entries over the cases (per route for inference_free)",
            "input_ids": "splade: model.preprocess([text])['input_ids'][0] ([CLS] ... [SEP], truncated to max_seq_length); static: model.preprocess([text])['input_ids'] (no special tokens, never truncated)",
            "input_ids_query": "inference_free: model.preprocess([text], task='query')['input_ids'][0]: SparseStaticEmbedding tokenizes WITHOUT special tokens; only the set of ids matters (token presence, not count)",
            "input_ids_document": "inference_free: model.preprocess([text], task='document')['input_ids'][0]",
            "num_tokens_untruncated": "token count before truncation (with special tokens, except for the query route)",
            "indices/values": "non-zero entries of model.encode([text], batch_size=1, convert_to_sparse_tensor=True) (coalesced COO, 1 x vocab_size): 0-based vocabulary ids ascending, float32 values; checked equal to the non-zeros of the convert_to_sparse_tensor=False output",
            "indices_query/values_query": "inference_free: the same for model.encode_query([text], convert_to_sparse_tensor=True): weight[id] for every distinct id present",
            "indices_document/values_document": "inference_free: the same for model.encode_document([text], convert_to_sparse_tensor=True)",
            "nnz": "len(indices)",
            "decode": "splade_bert only: model.decode(sparse embedding, top_k=5) for the listed cases: tokens (convert_ids_to_tokens) and weights, in descending weight order",
            "embedding": "static_st/static_st_dense: model.encode([text], batch_size=1)[0] (StaticEmbedding = mean of the token rows via EmbeddingBag; zeros for an empty input; [UNK] rows included); model2vec_layout: model2vec.StaticModel.from_pretrained(folder).encode([text])[0] (drops [UNK] ids, then mean, then L2-normalize because config normalize=true)",
            "input_ids_model2vec": "model2vec_layout: StaticModel.tokenize([text])[0] (no special tokens, [UNK] removed)",
            "input_ids_st": "model2vec_layout: the ids sentence-transformers' StaticEmbedding.from_model2vec uses ([UNK] kept)",
            "embedding_unnormalized": "model2vec_layout: StaticModel.encode([text], normalize=False)[0]",
            "embedding_st_from_model2vec": "model2vec_layout: SentenceTransformer(modules=[StaticEmbedding.from_model2vec(folder)]).encode([text])[0]: no Normalize, [UNK] kept",
            "embedding_st_folder": "model2vec_layout: SentenceTransformer(folder).encode([text])[0], via the modules.json model2vec writes (StaticEmbedding + Normalize when normalize=true)",
            "tokenizer": "RoBERTa-family splade models: the tokenizer kind of scripts/gen_backbone_fixtures.py (build_tokenizer) they use instead of the WordPiece one: bpe = byte-level BPE (vocabulary 420, no unknown token: the oov_word case is bytes, not [UNK]), unigram_xlmr = SentencePiece-style Unigram (vocabulary 402)",
            "hidden_act": "RoBERTa-family splade models: the backbone's hidden_act (the MLM head's activation is the exact gelu whatever it says)",
            "max_position_embeddings": "RoBERTa-family splade models: the backbone's (positions start after the padding id)",
            "head_tensors": "RoBERTa-family splade models: the lm_head.* tensors model.safetensors holds (tied: lm_head.bias only, to which decoder.bias is tied; untied: both biases, the forward adding lm_head.decoder.bias; they differ by more than 1)",
        },
        "stats": dict(sorted(stats.items())),
    }
    text = gen_fixtures.render(header, models_out, group="models")
    if json.loads(text) != json.loads(json.dumps({**header, "models": models_out})):
        raise SystemExit("JSON round-trip mismatch")
    golden = os.path.join(out, "golden.json")
    write_golden(golden, text)
    print(f"wrote {golden}: {len(text.encode('utf-8'))} bytes; vocab_size={vocab_size}", file=sys.stderr)
    print(f"total: {gen_fixtures.dir_size(out)} bytes", file=sys.stderr)
    for k, v in sorted(stats.items()):
        print(f"  {k}: {v}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
