"""scripts/gen_compat_fixtures.py's "save" step for one library version: each kind of folder that
version saves (sentence-transformers dense, cross-encoder, sparse, CLIP; model2vec) and what that
version computes when it loads the folder back.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
from fixturelib.common import ROOT

from fixturelib.compat_spec import (CASES, CLIP_IMAGES, CLIP_TEXTS, M2V_MAX_LENGTH, MAX_SEQ_LENGTH, NotSaved,
    PROMPTS, QUERY, SEEDS, Shared, floats, seeded_linear, version_tuple)


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
