#!/usr/bin/env python3
"""Model folders saved by several sentence-transformers and model2vec versions, and their outputs.

Usage (scripts/gen_compat.sh makes the environments and runs both steps):

    <venv of one version>/bin/python scripts/gen_compat_fixtures.py save --lib st6.2.0 --work W --out tests/fixtures/compat
    python3 scripts/gen_compat_fixtures.py merge --work W --out tests/fixtures/compat
    python3 scripts/gen_compat_fixtures.py table --log <output of cargo test --release --test compat>

Users save model folders with whatever library version they have; pg_embed has to read all of
them.  `save` runs inside the virtual environment of one library version (`--lib`: st3.4.1,
st4.1.0, st5.7.0, st6.2.0, m2v0.4.1 or m2v0.10.0).  It

1. builds, with that version's own transformers / tokenizers, the shared seeded weights: the
   WordPiece tokenizer and the tiny BERT backbone of scripts/gen_fixtures.py (imported from
   there), the BERT masked-LM of scripts/gen_sparse_fixtures.py, a BERT sequence classifier
   (that backbone plus a seeded one-label head), seeded Dense heads and static embedding
   tables; the tiny CLIP of tests/fixtures/images/clip is copied;
2. saves one folder per model kind that version can save, as that version saves it, into
   `<out>/<kind>__<lib>/` (a kind it cannot save becomes a row saying why);
3. reloads every folder from disk, in the same version, and records what it computes for a
   fixed list of inputs in `<work>/<lib>.json`.

`merge` (any Python 3 with numpy) checks that every version drew the same weights, then writes
`<out>/golden.json`: one row per kind and version, and per kind what the versions write
differently (files, JSON keys and values, modules.json class paths).  Each row also says what
pg_embed is expected to do with the folder: give the same numbers (`"expect": "match"`) or refuse
it with SQLSTATE 0A000 naming the module (`"expect": "refuse"`), which
crates/pg_embed_core/tests/compat.rs checks.

Deterministic: running twice gives byte-identical files.  Floats are float32 values written as
repr(float(x)), which round-trips to the same float32.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import shutil
import sys
import tempfile

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

LIBS = ["st3.4.1", "st4.1.0", "st5.7.0", "st6.2.0", "m2v0.4.1", "m2v0.10.0"]
LIB_NAMES = {"st": "sentence-transformers", "m2v": "model2vec"}

# --------------------------------------------------------------------------
# Inputs.  The same list for every kind; order is the order in golden.json.
# --------------------------------------------------------------------------

MAX_SEQ_LENGTH = 24     # sentence-transformers models (as scripts/gen_fixtures.py)
M2V_MAX_LENGTH = 512    # model2vec's default token limit
# model2vec cuts the text to max_length * median_token_length characters before tokenizing; the
# median token length of the shared vocabulary is 4 (checked), so the cut is at 2048 characters.
M2V_CHAR_CUT = 512 * 4
_PAD_HEAD = "Search engines rank each document"
_PAD_TAIL = "database keeps growing"
# The tail starts 4 characters before the cut: model2vec keeps "data" of "database" and drops the
# rest; every other tokenizer sees the whole tail (whitespace makes no tokens).
PADDED = _PAD_HEAD + " " * (M2V_CHAR_CUT - 4 - len(_PAD_HEAD)) + _PAD_TAIL
# 700 one-character tokens (1399 characters, under the 2048-character cut: only model2vec's
# 512-token limit cuts it), about one in seven an unknown character.  model2vec 0.4.1 drops
# [UNK] ids and then keeps 512; 0.10 truncates to 512 tokens in the tokenizer (unknown ones
# counted) and then drops [UNK].
_CYCLE = ["a", "1", "b", "2", "c", "\u2615", "d", "3", "e", "?", "f", "4", "g", "\u00df"]


def _many() -> str:
    x, out = 12345, []
    for _ in range(700):  # a fixed linear congruential sequence picks the characters
        x = (1103515245 * x + 12345) % 2 ** 31
        out.append(_CYCLE[(x >> 16) % len(_CYCLE)])
    return " ".join(out)


MANY = _many()

CASES: list[tuple[str, str]] = [
    ("short", "Hello world"),
    ("sentence", "The quick brown fox jumps over the lazy dog."),
    ("empty", ""),
    # Emoji, CJK and other characters that are not in the vocabulary: only [UNK] ids.
    ("unknown_only", "\U0001f600\U0001f355 \u65e5\u672c\u8a9e \u2615 \u00df\u00df"),
    # 45 tokens: truncated to MAX_SEQ_LENGTH by the transformer models.
    ("long_truncated",
     "Search engines rank each document by its similarity to the query, and the database keeps "
     "growing every day, so the extension computes embeddings for every new row inside Postgres."),
    ("space_padded_2000", PADDED),
    ("many_tokens", MANY),
]
QUERY = "how do search engines rank documents?"     # the cross-encoder's first text
PROMPTS = {"query": "query: ", "passage": "passage: "}
CLIP_TEXTS = ["a photo of a cat", "", "a dog on the grass"]
CLIP_IMAGES = ["exact_32x32.png", "rgb_40x30.png", "large_300x200.png"]

SEEDS = {"dense": 301, "dense_query": 302, "dense_document": 303, "cross_head": 304,
         "static": 21, "model2vec": 23, "query_weights": 25}
MLM = ("bert", True, 11, -3.0)       # architecture, tied, seed, decoder bias shift (gen_sparse_fixtures)
STATIC_DIM = 16

# --------------------------------------------------------------------------
# Kinds: name, library, description.  What pg_embed does with a folder is decided per row in
# `expectation` below.
# --------------------------------------------------------------------------

KINDS: list[tuple[str, str, str]] = [
    ("dense", "st", "Transformer, Pooling mean, Dense 32->16 Tanh, Normalize"),
    ("pool_cls", "st", "Transformer, Pooling cls"),
    ("pool_max", "st", "Transformer, Pooling max"),
    ("pool_flags", "st", "Transformer, Pooling cls+max+mean made with the pooling_mode_* flags (legacy order)"),
    ("pool_list", "st", "Transformer, Pooling [mean, cls, max] given as a list (concatenated as listed)"),
    ("prompts", "st", "Transformer, Pooling mean, Normalize; prompts query/passage, default_prompt_name query"),
    ("prompts_exclude", "st", "as prompts with include_prompt false and no default prompt"),
    ("router", "st", "Transformer, Pooling mean, a query/document Router (Asym before 5.0) of Dense 32->16 Tanh, Normalize"),
    ("cross_encoder", "st", "CrossEncoder over BertForSequenceClassification, one label"),
    ("splade_mlm", "st", "SparseEncoder: MLMTransformer, SpladePooling max"),
    ("splade_fillmask", "st", "SparseEncoder: Transformer with transformer_task fill-mask, SpladePooling max"),
    ("inference_free", "st", "SparseEncoder: Router(query: SparseStaticEmbedding; document: Transformer fill-mask, SpladePooling)"),
    ("static", "st", "StaticEmbedding (dim 16), Normalize"),
    ("clip", "st", "the tiny CLIP of tests/fixtures/images/clip, texts and images"),
    ("model2vec", "m2v", "StaticModel(vectors, tokenizer, normalize=True).save_pretrained"),
    ("model2vec_distill", "m2v", "model2vec.distill() of the tiny BERT backbone (pca_dims 16), save_pretrained"),
]


class NotSaved(Exception):
    """This version cannot save this kind; the message says why."""


def lib_split(lib: str) -> tuple[str, str]:
    for p in LIB_NAMES:
        if lib.startswith(p) and lib[len(p):][:1].isdigit():
            return p, lib[len(p):]
    raise SystemExit(f"unknown --lib {lib}")


def version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


# --------------------------------------------------------------------------
# Shared weights, built by the running version
# --------------------------------------------------------------------------

def floats(v) -> list[float]:
    import numpy as np
    return [float(x) for x in np.asarray(v, dtype=np.float32).reshape(-1).tolist()]


def seeded_linear(linear, seed: int) -> None:
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(linear.weight.shape, generator=g) * 0.5)
        if linear.bias is not None:
            linear.bias.copy_(torch.randn(linear.bias.shape, generator=g) * 0.5)


def tensor_digest(state: dict) -> str:
    """sha256 over the sorted names, shapes and float32 bytes of a state dict."""
    h = hashlib.sha256()
    for k in sorted(state):
        t = state[k].detach().to("cpu").contiguous()
        h.update(k.encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.float().numpy().tobytes())
    return h.hexdigest()


class Shared:
    """The seeded inputs every kind is built from, in folders named relative to the current
    directory (a temporary one): libraries that record where a model came from
    (config.json's `_name_or_path`, model2vec's `tokenizer_name`) then record these names, not
    the temporary folder's."""

    def __init__(self):
        import gen_fixtures
        import gen_sparse_fixtures

        self.backbone = "tiny-bert"
        self.tok = "tokenizer"
        os.makedirs(self.backbone)
        os.makedirs(self.tok)
        self.vocab_size = gen_fixtures.build_tokenizer(self.tok)
        gen_fixtures.build_tokenizer(self.backbone)
        gen_fixtures.build_backbone(self.backbone, self.vocab_size)
        self.mlm = "tiny-bert-mlm"
        arch, tied, seed, shift = MLM
        gen_sparse_fixtures.build_mlm(arch, tied, seed, shift, self.vocab_size, self.tok, self.mlm)
        self.digests: dict = {}
        from transformers import BertForMaskedLM, BertModel
        self.digests["backbone"] = tensor_digest(BertModel.from_pretrained(self.backbone).state_dict())
        self.digests["mlm"] = tensor_digest(BertForMaskedLM.from_pretrained(self.mlm).state_dict())
        with open(os.path.join(self.tok, "vocab.txt"), encoding="utf-8") as fh:
            self.digests["vocab"] = hashlib.sha256(fh.read().encode()).hexdigest()

    def cross_encoder_dir(self) -> str:
        """The backbone with a seeded one-label sequence-classification head, as this
        transformers version saves it."""
        from transformers import BertForSequenceClassification
        out = "tiny-bert-seqcls"
        if not os.path.exists(out):
            m = BertForSequenceClassification.from_pretrained(self.backbone, num_labels=1)
            seeded_linear(m.classifier, SEEDS["cross_head"])
            m.eval()
            self.digests["cross_encoder"] = tensor_digest(m.state_dict())
            m.save_pretrained(out, safe_serialization=True)
            # As released cross-encoders do, the tokenizer carries the length limit
            # (sentence-transformers < 4 does not save CrossEncoder(max_length=...)).
            from transformers import AutoTokenizer
            AutoTokenizer.from_pretrained(self.tok, model_max_length=MAX_SEQ_LENGTH).save_pretrained(out)
            for fn in ("vocab.txt", "special_tokens_map.json"):
                if not os.path.exists(os.path.join(out, fn)):
                    shutil.copyfile(os.path.join(self.tok, fn), os.path.join(out, fn))
        return out

    def clip_dir(self) -> str:
        """tests/fixtures/images/clip (written by transformers 5) as this transformers version
        saves it: the same weights, tokenizer.json and image processor settings."""
        src = os.path.join(ROOT, "tests/fixtures/images/clip")
        import transformers
        out = "tiny-clip"
        if version_tuple(transformers.__version__)[0] >= 5:
            if not os.path.exists(out):
                shutil.copytree(src, out)
            return out
        if not os.path.exists(out):
            from tokenizers import Tokenizer
            from transformers import CLIPImageProcessor, CLIPModel, CLIPProcessor, CLIPTokenizerFast
            with open(os.path.join(src, "tokenizer_config.json"), encoding="utf-8") as fh:
                tc = json.load(fh)
            from tokenizers import pre_tokenizers
            backend = Tokenizer.from_file(os.path.join(src, "tokenizer.json"))
            # transformers 4's CLIPTokenizerFast insists on a Sequence pre-tokenizer (real CLIP
            # checkpoints have Split + ByteLevel); a Sequence of the fixture's one ByteLevel splits
            # the same way.
            pt = json.loads(backend.to_str())["pre_tokenizer"]
            if pt["type"] != "ByteLevel":
                raise SystemExit(f"unexpected CLIP pre-tokenizer {pt}")
            backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.ByteLevel(
                add_prefix_space=pt["add_prefix_space"], trim_offsets=pt["trim_offsets"], use_regex=pt["use_regex"])])
            tok = CLIPTokenizerFast(tokenizer_object=backend,
                                    bos_token=tc["bos_token"], eos_token=tc["eos_token"],
                                    pad_token=tc["pad_token"], unk_token=tc["unk_token"],
                                    model_max_length=tc["model_max_length"])
            CLIPProcessor(image_processor=CLIPImageProcessor.from_pretrained(src), tokenizer=tok).save_pretrained(out)
            m = CLIPModel.from_pretrained(src)
            self.digests["clip"] = tensor_digest(m.state_dict())
            m.save_pretrained(out, safe_serialization=True)
        return out

    def static_table(self, seed: int):
        import gen_sparse_fixtures
        t = gen_sparse_fixtures.static_table(self.vocab_size, STATIC_DIM, seed)
        self.digests[f"static_{seed}"] = tensor_digest({"t": t})
        return t

    def query_weights(self):
        import torch
        import gen_fixtures
        g = torch.Generator().manual_seed(SEEDS["query_weights"])
        keep = torch.rand(self.vocab_size, generator=g) < 0.5
        keep[:len(gen_fixtures.SPECIALS)] = False
        w = ((0.1 + 3.0 * torch.rand(self.vocab_size, generator=g)) * keep).to(torch.float32)
        self.digests["query_weights"] = tensor_digest({"w": w})
        return w


# --------------------------------------------------------------------------
# sentence-transformers: saving
# --------------------------------------------------------------------------

def st_version() -> tuple[int, ...]:
    import sentence_transformers
    return version_tuple(sentence_transformers.__version__)


def st_save(model, out: str) -> None:
    params = inspect.signature(model.save).parameters
    kw = {"safe_serialization": True}
    if "create_model_card" in params:
        kw["create_model_card"] = False
    model.save(out, **kw)


def transformer(sh: Shared, **kw):
    from sentence_transformers import models
    return models.Transformer(sh.backbone, max_seq_length=MAX_SEQ_LENGTH, **kw)


def dense(d_in: int, d_out: int, seed: int):
    from torch import nn
    from sentence_transformers import models
    d = models.Dense(d_in, d_out, bias=True, activation_function=nn.Tanh())
    seeded_linear(d.linear, seed)
    return d


def pooling(mode=None, include_prompt: bool = True, **flags):
    from sentence_transformers import models
    if mode is None:
        return models.Pooling(32, include_prompt=include_prompt, **flags)
    return models.Pooling(32, pooling_mode=mode, include_prompt=include_prompt)


def save_st_dense(kind: str, sh: Shared, out: str) -> None:
    from sentence_transformers import SentenceTransformer, models

    extra = {}
    if kind == "dense":
        mods = [transformer(sh), pooling("mean"), dense(32, 16, SEEDS["dense"]), models.Normalize()]
    elif kind == "pool_cls":
        mods = [transformer(sh), pooling("cls")]
    elif kind == "pool_max":
        mods = [transformer(sh), pooling("max")]
    elif kind == "pool_flags":
        mods = [transformer(sh), pooling(None, pooling_mode_cls_token=True, pooling_mode_max_tokens=True,
                                         pooling_mode_mean_tokens=True)]
    elif kind == "pool_list":
        if st_version() < (5, 0):
            raise NotSaved("Pooling(pooling_mode=...) takes one mode name; several modes only as the "
                           "pooling_mode_* flags, concatenated in the fixed legacy order (see pool_flags)")
        mods = [transformer(sh), pooling(["mean", "cls", "max"])]
    elif kind in ("prompts", "prompts_exclude"):
        mods = [transformer(sh), pooling("mean", include_prompt=(kind == "prompts")), models.Normalize()]
        extra = {"prompts": dict(PROMPTS), "default_prompt_name": "query" if kind == "prompts" else None}
    elif kind == "router":
        if st_version() >= (5, 0):
            from sentence_transformers.models import Router
            router = Router.for_query_document(query_modules=[dense(32, 16, SEEDS["dense_query"])],
                                               document_modules=[dense(32, 16, SEEDS["dense_document"])])
        else:
            router = models.Asym({"query": [dense(32, 16, SEEDS["dense_query"])],
                                  "document": [dense(32, 16, SEEDS["dense_document"])]})
        mods = [transformer(sh), pooling("mean"), router, models.Normalize()]
    elif kind == "static":
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(os.path.join(sh.tok, "tokenizer.json"))
        emb = models.StaticEmbedding(tok, embedding_weights=sh.static_table(SEEDS["static"]))
        mods = [emb, models.Normalize()]
    else:
        raise ValueError(kind)
    model = SentenceTransformer(modules=mods, device="cpu", **extra)
    if kind == "router" and st_version() < (5, 0):
        # Asym names its module folders "<id(module)>_<Class>": memory addresses, different on
        # every run.  While saving, id() in Asym's module numbers the modules 1, 2, ... instead.
        asym_module = sys.modules[type(mods[2]).__module__]
        numbers: dict = {}
        asym_module.id = lambda o: numbers.setdefault(id(o), len(numbers) + 1)
        try:
            st_save(model, out)
        finally:
            del asym_module.id
        return
    st_save(model, out)


def save_cross_encoder(sh: Shared, out: str) -> None:
    from sentence_transformers import CrossEncoder
    src = sh.cross_encoder_dir()
    params = inspect.signature(CrossEncoder.__init__).parameters
    kw = {"max_length": MAX_SEQ_LENGTH, "device": "cpu"}
    if "num_labels" in params:
        kw["num_labels"] = 1
    ce = CrossEncoder(src, **kw)
    st_save(ce, out)


def mlm_module(sh: Shared, task_transformer: bool):
    if task_transformer:
        from sentence_transformers.models import Transformer
        if "transformer_task" not in inspect.signature(Transformer.__init__).parameters:
            raise NotSaved("Transformer has no transformer_task: the MLM is an MLMTransformer (see splade_mlm)")
        return Transformer(sh.mlm, max_seq_length=MAX_SEQ_LENGTH, transformer_task="fill-mask")
    from sentence_transformers.sparse_encoder.models import MLMTransformer
    return MLMTransformer(sh.mlm, max_seq_length=MAX_SEQ_LENGTH)


def save_sparse(kind: str, sh: Shared, out: str) -> None:
    try:
        from sentence_transformers import SparseEncoder
        from sentence_transformers.sparse_encoder.models import SpladePooling
    except ImportError:
        raise NotSaved("no SparseEncoder (added in sentence-transformers 5.0)") from None
    if kind == "splade_mlm":
        mods = [mlm_module(sh, False), SpladePooling(pooling_strategy="max")]
        model = SparseEncoder(modules=mods, device="cpu")
    elif kind == "splade_fillmask":
        mods = [mlm_module(sh, True), SpladePooling(pooling_strategy="max")]
        model = SparseEncoder(modules=mods, device="cpu")
    else:
        from sentence_transformers.sparse_encoder.models import Router, SparseStaticEmbedding
        doc = mlm_module(sh, True)
        query = SparseStaticEmbedding(tokenizer=doc.tokenizer, weight=sh.query_weights(), frozen=True)
        router = Router.for_query_document(query_modules=[query],
                                           document_modules=[doc, SpladePooling(pooling_strategy="max")])
        model = SparseEncoder(modules=[router], similarity_fn_name="dot", device="cpu")
    st_save(model, out)


def save_clip(sh: Shared, out: str) -> None:
    from sentence_transformers import SentenceTransformer, models
    src = sh.clip_dir()
    if st_version() >= (5, 4):
        # 5.4 and later: a multimodal Transformer (what SentenceTransformer(<CLIP folder>) builds);
        # the CLIPModel module is deprecated there.
        model = SentenceTransformer(src, device="cpu")
    else:
        model = SentenceTransformer(modules=[models.CLIPModel(src)], device="cpu")
    st_save(model, out)


# --------------------------------------------------------------------------
# sentence-transformers: goldens
# --------------------------------------------------------------------------

def st_ids(model, text: str, **kw) -> list[int]:
    fn = getattr(model, "preprocess", None) or model.tokenize
    feats = fn([text], **kw)
    return [int(i) for i in feats["input_ids"][0].tolist()]


def finite_int(x):
    import math
    return int(x) if x is not None and math.isfinite(x) else None


def st_encode(model, inputs, **kw):
    import numpy as np
    e = model.encode(inputs, batch_size=1, convert_to_numpy=True, show_progress_bar=False, **kw)
    e = np.asarray(e)
    if e.dtype != np.float32:
        raise SystemExit(f"non-float32 output {e.dtype}")
    return e


def golden_st_dense(kind: str, out: str) -> tuple[dict, list[dict]]:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(out, device="cpu")
    model.eval()
    dim_fn = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    desc = {"modules": [type(m).__name__ for m in model], "dim": int(dim_fn()),
            "max_seq_length": finite_int(model.max_seq_length),
            "prompts": dict(sorted((getattr(model, "prompts", None) or {}).items())),
            "default_prompt_name": getattr(model, "default_prompt_name", None)}
    cases = []
    for name, text in CASES:
        c = {"name": name}
        if kind == "router":
            if st_version() >= (5, 0):
                c["embedding_query"] = floats(st_encode(model, [text], task="query")[0])
                c["embedding_document"] = floats(st_encode(model, [text], task="document")[0])
            else:  # Asym: inputs are {route: text}
                c["embedding_query"] = floats(st_encode(model, [{"query": text}])[0])
                c["embedding_document"] = floats(st_encode(model, [{"document": text}])[0])
            cases.append(c)
            continue
        if kind != "static":
            c["input_ids"] = st_ids(model, text)
        else:
            c["input_ids"] = [int(i) for i in model.tokenize([text])["input_ids"].tolist()]
        c["embedding"] = floats(st_encode(model, [text])[0])
        if kind.startswith("prompts"):
            for p in sorted(PROMPTS):
                c[f"input_ids_prompt_{p}"] = st_ids(model, PROMPTS[p] + text)
                c[f"embedding_prompt_{p}"] = floats(st_encode(model, [text], prompt_name=p)[0])
            # Without a default prompt, encode() embeds the bare text; with one, "" does.
            if desc["default_prompt_name"]:
                c["embedding_prompt_"] = floats(st_encode(model, [text], prompt="")[0])
        cases.append(c)
    return desc, cases


def golden_cross_encoder(out: str) -> tuple[dict, list[dict]]:
    import numpy as np
    import torch
    from sentence_transformers import CrossEncoder

    ce = CrossEncoder(out, device="cpu")
    # predict(activation_fn=...) keeps the activation on the instance in some versions (4.x):
    # the raw logits come from a second instance.
    raw = CrossEncoder(out, device="cpu")
    act = getattr(ce, "activation_fn", None) or getattr(ce, "default_activation_function", None)
    desc = {"num_labels": int(getattr(ce, "num_labels", 1) or 1), "activation": type(act).__name__,
            "max_length": int(ce.max_length) if getattr(ce, "max_length", None) else None}
    cases = []
    for name, text in CASES:
        scores = ce.predict([(QUERY, text)], batch_size=1, convert_to_numpy=True, show_progress_bar=False)
        logits = raw.predict([(QUERY, text)], batch_size=1, convert_to_numpy=True, show_progress_bar=False,
                             activation_fn=torch.nn.Identity()) if "activation_fn" in \
            inspect.signature(raw.predict).parameters else None
        if logits is None:  # 3.x: the head's raw output through the HF model
            feats = ce.tokenizer([QUERY], [text], padding=True, truncation="longest_first",
                                 return_tensors="pt", max_length=ce.max_length)
            with torch.inference_mode():
                logits = ce.model(**feats).logits[0].numpy()
        enc = ce.tokenizer([QUERY], [text], truncation="longest_first", max_length=ce.max_length)
        cases.append({"name": name,
                      "input_ids": [int(i) for i in enc["input_ids"][0]],
                      "logits": floats(np.asarray(logits).reshape(-1)),
                      "score": floats(np.asarray(scores).reshape(-1))})
    return desc, cases


def golden_sparse(kind: str, out: str) -> tuple[dict, list[dict]]:
    from sentence_transformers import SparseEncoder
    from gen_sparse_fixtures import encode_sparse, sparse_row

    model = SparseEncoder(out, device="cpu")
    model.eval()
    vocab_size = len(model.tokenizer.get_vocab())
    desc = {"modules": [type(m).__name__ for m in model], "vocab_size": vocab_size,
            "max_seq_length": finite_int(model.max_seq_length)}
    routes = ["query", "document"] if kind == "inference_free" else [None]
    cases = []
    for name, text in CASES:
        c = {"name": name}
        for route in routes:
            sfx = "" if route is None else "_" + route
            e = encode_sparse(model, text, route)
            c[f"indices{sfx}"], c[f"values{sfx}"] = sparse_row(e, vocab_size)
        cases.append(c)
    return desc, cases


def golden_clip(out: str) -> tuple[dict, list[dict]]:
    from PIL import Image
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(out, device="cpu")
    model.eval()
    desc = {"modules": [type(m).__name__ for m in model]}
    cases = []
    for text in CLIP_TEXTS:
        cases.append({"name": f"text:{text}", "text": text, "input_ids": st_ids(model, text),
                      "embedding": floats(st_encode(model, [text])[0])})
    for fn in CLIP_IMAGES:
        img = Image.open(os.path.join(ROOT, "tests/fixtures/images/inputs", fn))
        img.load()
        cases.append({"name": f"image:{fn}", "image": fn, "embedding": floats(st_encode(model, [img])[0])})
    return desc, cases


# --------------------------------------------------------------------------
# model2vec
# --------------------------------------------------------------------------

def save_model2vec(kind: str, sh: Shared, out: str) -> dict:
    from tokenizers import Tokenizer
    from model2vec import StaticModel

    notes = {}
    if kind == "model2vec":
        tok = Tokenizer.from_file(os.path.join(sh.tok, "tokenizer.json"))
        m = StaticModel(vectors=sh.static_table(SEEDS["model2vec"]).numpy(), tokenizer=tok, normalize=True)
    else:
        import torch
        from model2vec.distill import distill
        torch.manual_seed(0)
        m = distill(model_name=sh.backbone, pca_dims=16, device="cpu")
        notes["distill"] = (f"model2vec.distill(model_name={sh.backbone!r}, pca_dims=16, "
                            "device='cpu') on the tiny BERT backbone folder, offline")
    m.save_pretrained(out)
    return notes


def golden_model2vec(out: str) -> tuple[dict, list[dict]]:
    import numpy as np
    from model2vec import StaticModel

    m = StaticModel.from_pretrained(out)
    desc = {"dim": int(m.dim), "vocab_size": len(m.tokens), "normalize": bool(m.normalize),
            "median_token_length": int(m.median_token_length),
            "max_length": getattr(m, "max_length", None),
            "embedding_dtype": str(np.asarray(m.embedding).dtype),
            "config": json.loads(json.dumps(dict(sorted(m.config.items())), default=str))}
    cases = []
    for name, text in CASES:
        e = np.asarray(m.encode([text], show_progress_bar=False, use_multiprocessing=False))
        # model2vec computes in the table's dtype: a float16 table gives float16 vectors (0.4.1
        # returns float64 zeros for an input without known tokens).
        if e.dtype not in (np.float64, np.float32, np.float16):
            raise SystemExit(f"model2vec output dtype {e.dtype}")
        desc["output_dtypes"] = sorted(set(desc.get("output_dtypes", [])) | {str(e.dtype)})
        e = e.astype(np.float32)[0]
        cases.append({"name": name, "embedding": floats(e)})
        if name == "space_padded_2000":
            # The character cut must show: without it the dropped tail would change the vector.
            if len(text) <= M2V_MAX_LENGTH * m.median_token_length:
                raise SystemExit(f"{name} is not longer than model2vec's character cut")
            whole = np.asarray(m.encode([text], show_progress_bar=False, use_multiprocessing=False,
                                        max_length=None), dtype=np.float32)[0]
            d = float(np.max(np.abs(whole - e)))
            if d < 1e-3:
                raise SystemExit(f"{name}: model2vec's character cut changes nothing ({d})")
            desc["character_cut"] = {"case": name, "kept_characters": M2V_MAX_LENGTH * m.median_token_length,
                                     "text_characters": len(text), "max_abs_diff_without_the_cut": d}
    return desc, cases


# --------------------------------------------------------------------------
# save step
# --------------------------------------------------------------------------

def versions_of_env() -> dict:
    import importlib.metadata as md
    out = {"python": sys.version.split()[0]}
    for p in ["sentence-transformers", "model2vec", "transformers", "tokenizers", "huggingface_hub",
              "safetensors", "torch", "numpy", "scikit-learn", "skeletoken", "pillow"]:
        try:
            out[p] = md.version(p)
        except md.PackageNotFoundError:
            pass
    return out


def folder_facts(out: str) -> dict:
    files = []
    for root, _, fns in os.walk(out):
        for fn in fns:
            files.append(os.path.relpath(os.path.join(root, fn), out))
    files.sort()
    modules = None
    mj = os.path.join(out, "modules.json")
    if os.path.exists(mj):
        with open(mj, encoding="utf-8") as fh:
            modules = [m.get("type") for m in json.load(fh)]
    return {"files": files, "modules": modules}


def normalise_tree(out: str) -> None:
    """File modes 0644/0755 (safetensors writes 0600; the test server runs as another user)."""
    import gen_image_fixtures
    gen_image_fixtures.chmod_tree(out)


def cmd_save(args) -> int:
    import logging
    import warnings

    import numpy as np
    import torch
    import transformers

    prefix, version = lib_split(args.lib)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    logging.getLogger("sentence_transformers").setLevel(logging.ERROR)
    logging.getLogger("model2vec").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)
    np.random.seed(0)

    if prefix == "st":
        import sentence_transformers
        got = sentence_transformers.__version__
    else:
        import model2vec
        got = model2vec.__version__
    if got != version:
        raise SystemExit(f"--lib {args.lib} but {LIB_NAMES[prefix]} {got} is installed")

    out_root = os.path.abspath(args.out)
    os.makedirs(out_root, exist_ok=True)
    rows = {}
    tmp = tempfile.mkdtemp(prefix="pg_embed_compat_")
    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        sh = Shared()
        for kind, owner, what in KINDS:
            if owner != prefix:
                continue
            name = f"{kind}__{args.lib}"
            out = os.path.join(out_root, name)
            shutil.rmtree(out, ignore_errors=True)
            row = {"kind": kind, "library": LIB_NAMES[prefix], "version": version, "what": what}
            torch.manual_seed(0)
            try:
                notes = {}
                if kind in ("cross_encoder",):
                    save_cross_encoder(sh, out)
                elif kind in ("splade_mlm", "splade_fillmask", "inference_free"):
                    save_sparse(kind, sh, out)
                elif kind == "clip":
                    save_clip(sh, out)
                elif prefix == "m2v":
                    notes = save_model2vec(kind, sh, out)
                else:
                    save_st_dense(kind, sh, out)
            except NotSaved as e:
                shutil.rmtree(out, ignore_errors=True)
                row.update({"saved": False, "reason": str(e)})
                rows[name] = row
                print(f"  {name}: not saved: {e}", file=sys.stderr)
                continue
            # Model cards are documentation: not kept (they carry dates and library banners).
            written = folder_facts(out)
            for card in ("README.md",):
                if os.path.exists(os.path.join(out, card)):
                    os.remove(os.path.join(out, card))
            normalise_tree(out)
            row.update({"saved": True, "files_written": written["files"], "modules": written["modules"], **notes})
            torch.manual_seed(0)
            if kind == "cross_encoder":
                desc, cases = golden_cross_encoder(out)
            elif kind in ("splade_mlm", "splade_fillmask", "inference_free"):
                desc, cases = golden_sparse(kind, out)
            elif kind == "clip":
                desc, cases = golden_clip(out)
            elif prefix == "m2v":
                desc, cases = golden_model2vec(out)
            else:
                desc, cases = golden_st_dense(kind, out)
            row["description"] = desc
            row["cases"] = cases
            rows[name] = row
            size = sum(os.path.getsize(os.path.join(out, f)) for f in folder_facts(out)["files"])
            print(f"  {name}: {size} bytes", file=sys.stderr)
        digests = sh.digests
    finally:
        os.chdir(cwd)
        shutil.rmtree(tmp, ignore_errors=True)
    result = {"lib": args.lib, "versions": versions_of_env(), "weights_sha256": digests, "rows": rows}
    with open(os.path.join(args.work, f"{args.lib}.json"), "w", encoding="utf-8") as fh:
        json.dump(result, fh, ensure_ascii=False, indent=1)
    return 0


# --------------------------------------------------------------------------
# merge step (no ML libraries needed)
# --------------------------------------------------------------------------

def expectation(kind: str, row: dict) -> dict:
    """What pg_embed is meant to do with the folder: the same numbers, or a refusal (0A000) that
    names the module it does not support.  Only layouts pg_embed has no stage for are refused.
    Every kind here is computed: the router kind (a Router / Asym of Dense heads after pooling)
    through its query and document routes (embed(m, t, 'query') / 'document')."""
    return {"expect": "match"}


def short(v):
    s = json.dumps(v, sort_keys=True, ensure_ascii=False)
    if len(s) <= 120:
        return v
    return "<%d chars, sha256 %s>" % (len(s), hashlib.sha256(s.encode()).hexdigest()[:12])


MISSING = "<missing>"


def value_diff(docs: dict, path: str, out: dict) -> None:
    """Where the versions' values differ: objects present in every version are compared key by
    key; anything else is one entry (`<missing>` where a version lacks it)."""
    vals = list(docs.values())
    # Objects are compared key by key, except large ones (a vocabulary): those are one value.
    if all(isinstance(v, dict) and len(v) <= 40 for v in vals):
        keys = []
        for v in vals:
            keys += [k for k in v if k not in keys]
        for k in keys:
            value_diff({lib: v.get(k, MISSING) for lib, v in docs.items()}, f"{path}.{k}" if path else k, out)
        return
    if len({json.dumps(v, sort_keys=True) for v in vals}) > 1:
        out[path or "(whole file)"] = {lib: (v if v == MISSING else short(v)) for lib, v in docs.items()}


def kind_diff(out_root: str, names: dict) -> dict:
    """What the versions that saved this kind write differently: files, modules.json class paths,
    and per JSON file the (dotted) keys whose values differ, a missing key included."""
    libs = list(names)
    files = {lib: set(names[lib]["files_written"]) for lib in libs}
    all_files = sorted(set().union(*files.values()))
    res: dict = {"versions": libs}
    res["files_not_everywhere"] = {f: [l for l in libs if f in files[l]] for f in all_files
                                   if not all(f in files[l] for l in libs)}
    mods = {lib: names[lib]["modules"] for lib in libs}
    if len({json.dumps(m) for m in mods.values()}) > 1:
        res["modules"] = mods
    values: dict = {}
    for f in all_files:
        if not f.endswith(".json") or f == "modules.json":
            continue
        docs = {}
        for lib in libs:
            p = os.path.join(out_root, f"{names[lib]['kind']}__{lib}", f)
            if os.path.exists(p):
                with open(p, encoding="utf-8") as fh:
                    docs[lib] = json.load(fh)
        if len(docs) < 2:
            continue
        diffs: dict = {}
        value_diff(docs, "", diffs)
        if diffs:
            values[f] = diffs
    res["json_values"] = values
    res["outputs_between_versions"] = output_diff(names)
    return res


def output_diff(names: dict) -> dict:
    """How far apart the versions' own outputs for the same kind and the same weights are: per
    output key the largest absolute difference from the first version, and the cases where it
    exceeds 1e-5 (sparse outputs: compared as dense vectors)."""
    import numpy as np

    libs = list(names)
    first = names[libs[0]]["cases"]
    res = {}
    for key in first[0]:
        if key == "name" or key.startswith("input_ids") or key.startswith("indices") \
                or not isinstance(first[0][key], list):
            continue
        worst, cases = 0.0, {}
        for lib in libs[1:]:
            for a, b in zip(first, names[lib]["cases"]):
                if key.startswith("values"):
                    sfx = key[len("values"):]
                    da, db = {}, {}
                    da.update(zip(a[f"indices{sfx}"], a[key]))
                    db.update(zip(b[f"indices{sfx}"], b[key]))
                    d = max([abs(da.get(i, 0.0) - db.get(i, 0.0)) for i in set(da) | set(db)] or [0.0])
                elif isinstance(a.get(key), list) and isinstance(b.get(key), list) and len(a[key]) == len(b[key]):
                    d = float(np.max(np.abs(np.array(a[key], dtype=np.float64) - np.array(b[key])))) if a[key] else 0.0
                else:
                    d = float("inf")
                worst = max(worst, d)
                if d > 1e-5:
                    cases.setdefault(a["name"], {})[lib] = d if d != float("inf") else "shape differs"
        res[key] = {"max_abs_diff_from_" + libs[0]: worst if worst != float("inf") else "shape differs",
                    "cases_over_1e-5": cases}
    return res


def cmd_merge(args) -> int:
    out_root = os.path.abspath(args.out)
    per_lib = {}
    for lib in LIBS:
        with open(os.path.join(args.work, f"{lib}.json"), encoding="utf-8") as fh:
            per_lib[lib] = json.load(fh)
    # Every version drew the same weights and vocabulary.
    ref = per_lib[LIBS[0]]["weights_sha256"]
    for lib in LIBS[1:]:
        for k, v in per_lib[lib]["weights_sha256"].items():
            if k in ref and ref[k] != v:
                raise SystemExit(f"{lib}: {k} weights differ from {LIBS[0]}'s ({v} vs {ref[k]})")
    weights = {}
    for lib in LIBS:
        weights.update(per_lib[lib]["weights_sha256"])
    rows = {}
    diffs = {}
    for kind, owner, what in KINDS:
        saved = {}
        for lib in LIBS:
            if not lib.startswith(owner):
                continue
            row = dict(per_lib[lib]["rows"][f"{kind}__{lib}"])
            name = f"{kind}__{lib}"
            if row["saved"]:
                row = {**{k: row[k] for k in ("kind", "library", "version", "what", "saved")},
                       **expectation(kind, row),
                       **{k: v for k, v in row.items() if k not in ("kind", "library", "version", "what", "saved")}}
                saved[lib] = row
            rows[name] = row
        if len(saved) >= 2:
            diffs[kind] = kind_diff(out_root, saved)
    # Folders of rows that no longer exist (a kind renamed or dropped) go.
    for entry in sorted(os.listdir(out_root)):
        if "__" in entry and os.path.isdir(os.path.join(out_root, entry)) and \
                not rows.get(entry, {}).get("saved"):
            shutil.rmtree(os.path.join(out_root, entry))
            print(f"  removed stale {entry}", file=sys.stderr)
    pins = {}
    for part in (args.pins or "").split(";"):
        if "=" in part:
            lib, spec = part.split("=", 1)
            pins[lib] = spec.split()
    header = {
        "generator": {
            "script": "scripts/gen_compat_fixtures.py (driver: scripts/gen_compat.sh)",
            "environments": {lib: {"installed": per_lib[lib]["versions"], "pins": pins.get(lib, [])} for lib in LIBS},
            "device": "cpu", "dtype": "float32", "torch_threads": 1,
        },
        "weights_sha256": dict(sorted(weights.items())),
        "inputs": {"cases": dict(CASES), "cross_encoder_query": QUERY, "prompts": PROMPTS,
                   "clip_texts": CLIP_TEXTS, "clip_images": CLIP_IMAGES},
        "fields": {
            "row": "one per <kind>__<lib><version>: the writing library and version, whether it could save the "
                   "kind (else `reason`), `expect` (match: pg_embed gives the same numbers; refuse: SQLSTATE "
                   "`sqlstate` with a message naming `names`), `files_written` (README.md model cards are then "
                   "removed), `modules` (modules.json class paths, null without modules.json), `description` "
                   "(read back from the reloaded model) and `cases`",
            "embedding": "model.encode([text], batch_size=1)[0] by the writing version, reloaded from the folder",
            "embedding_prompt_P": "prompts kinds: encode([text], prompt_name=P); embedding_prompt_ (default prompt "
                                  "set): encode([text], prompt='')",
            "embedding_query/embedding_document": "router: encode(..., task=route) (Asym: encode([{route: text}]))",
            "logits/score": "cross_encoder: the raw one-label logit for (cross_encoder_query, pair) and what "
                            "CrossEncoder.predict returns by default (its activation: description.activation)",
            "indices/values": "sparse: non-zero entries of encode([text], convert_to_sparse_tensor=True), ids "
                              "ascending; _query/_document: encode_query / encode_document",
            "model2vec": "StaticModel.from_pretrained(folder).encode([text])[0] (model2vec's own max_length: 512 "
                         "tokens, after cutting the text to 512 * median_token_length characters); computed and "
                         "returned in the table's dtype (description.output_dtypes: float16 for distill() in 0.10), "
                         "written here as float32",
            "diff": "per kind, what the versions that saved it write differently: files not written by all, "
                    "modules.json class paths when they differ, and per JSON file the (dotted) keys whose values "
                    "differ; long values are shown as their length and sha256 prefix",
        },
        "diff": diffs,
    }
    import gen_fixtures
    text = gen_fixtures.render(header, rows, group="rows")
    if json.loads(text) != json.loads(json.dumps({**header, "rows": rows})):
        raise SystemExit("JSON round-trip mismatch")
    golden = os.path.join(out_root, "golden.json")
    with open(golden, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)
    os.chmod(golden, 0o644)
    total = 0
    for root, _, fns in os.walk(out_root):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in fns)
    print(f"wrote {golden}: {len(text.encode())} bytes; tree {total} bytes", file=sys.stderr)
    return 0


def cmd_table(args) -> int:
    """The README's matrix: golden.json's rows and the outcome lines of
    crates/pg_embed_core/tests/compat.rs (`<row> ok|FAILED <summary>`), read from --log."""
    import re

    with open(os.path.join(args.out, "golden.json"), encoding="utf-8") as fh:
        g = json.load(fh)
    outcome = {}
    with open(args.log, encoding="utf-8") as fh:
        for line in fh:
            m = re.match(r"^(\S+__\S+)\s+(ok|FAILED)\s+(.*?)(?: \(\d+ ms\))?$", line.rstrip("\n"))
            if m:
                outcome[m.group(1)] = (m.group(2), m.group(3))
    notes: list[str] = []

    def note(text: str) -> str:
        if text not in notes:
            notes.append(text)
        return f"[{notes.index(text) + 1}]"

    def cell(name: str) -> str:
        row = g["rows"][name]
        if not row["saved"]:
            return "not saved " + note(row["reason"])
        status, summary = outcome.get(name, ("?", "not run"))
        if status == "ok" and summary.startswith("same numbers"):
            return "same, " + summary.rsplit(" ", 1)[-1]
        if status == "ok" and summary.startswith("refused"):
            return "refused 0A000 " + note(f"{row['names']}: {row['reason']}")
        return "**fails** " + note(summary)

    out = []
    for prefix, title in (("st", "sentence-transformers"), ("m2v", "model2vec")):
        libs = [l for l in LIBS if l.startswith(prefix)]
        out.append(f"| layout ({title}) | " + " | ".join(lib_split(l)[1] for l in libs) + " |")
        out.append("|---|" + "---|" * len(libs))
        for kind, owner, what in KINDS:
            if owner == prefix:
                out.append(f"| `{kind}`: {what} | " + " | ".join(cell(f"{kind}__{l}") for l in libs) + " |")
        out.append("")
    for i, n in enumerate(notes):
        out.append(f"[{i + 1}] {n}  ")
    print("\n".join(out))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("save")
    s.add_argument("--lib", required=True, choices=LIBS)
    s.add_argument("--work", required=True)
    s.add_argument("--out", default=os.path.join(ROOT, "tests/fixtures/compat"))
    m = sub.add_parser("merge")
    m.add_argument("--work", required=True)
    m.add_argument("--out", default=os.path.join(ROOT, "tests/fixtures/compat"))
    m.add_argument("--pins", default="")
    t = sub.add_parser("table", help="print the README's matrix from golden.json and the test's output")
    t.add_argument("--log", required=True, help="output of cargo test --release --test compat")
    t.add_argument("--out", default=os.path.join(ROOT, "tests/fixtures/compat"))
    args = ap.parse_args()
    return {"save": cmd_save, "merge": cmd_merge, "table": cmd_table}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
