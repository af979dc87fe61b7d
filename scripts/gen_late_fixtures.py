#!/usr/bin/env python3
"""Generate tiny seeded late-interaction (ColBERT, bge-m3) fixture models and their golden outputs.

Usage (the exact command; nothing is downloaded):

    HF_HUB_OFFLINE=1 PYTHONPATH=.cache/pylate-site bench/.venv/bin/python scripts/gen_late_fixtures.py \\
        --out tests/fixtures/late

Why: pg_embed's Rust parity tests for late-interaction models (PyLate ColBERT checkpoints and
BAAI/bge-m3's three heads) compare against what the reference libraries return for the very same
files: PyLate's ColBERT.encode (query prefix insertion, query expansion with the mask token,
attention to the expansion tokens or not, the document skiplist, L2 normalisation), PyLate's
colbert_scores (MaxSim), and FlagEmbedding's BGEM3FlagModel.encode (dense CLS vector, sparse
lexical weights relu(Linear(hidden, 1)), and colbert_vecs Linear(hidden, hidden) over every token
but the first).  Also PyTorch ``.pt`` head files that a safe loader must refuse.

The reference libraries pin versions of their own (sentence-transformers 5.3.0, transformers
5.3.0) that differ from the ones in bench/.venv (sentence-transformers 6.x, transformers 5.23),
so they live in a separate site directory, put first on PYTHONPATH.  It was made with:

    bench/.venv/bin/pip install --no-deps --target .cache/pylate-site pylate==1.6.0 \\
        sentence-transformers==5.3.0 transformers==5.3.0 tokenizers==0.22.2 \\
        'huggingface_hub>=1.3,<2' ujson==5.12.0 datasets FlagEmbedding==1.4.2 peft accelerate \\
        httpx httpcore certifi multiprocess pandas python-dateutil pytz tzdata h11 anyio sniffio \\
        idna xxhash dill pyarrow fsspec

and holds (its ``*.dist-info`` names; golden.json's header lists them too):

    accelerate-1.15.0  anyio-4.16.0  certifi-2026.10.19.post1  datasets-5.2.0  dill-0.4.1
    flagembedding-1.4.2  fsspec-2026.9.0  h11-0.16.0  httpcore-1.0.9  httpx-0.28.1
    huggingface_hub-1.33.0  idna-3.20  multiprocess-0.70.19  pandas-3.1.1  peft-0.21.2
    pyarrow-26.0.1  pylate-1.6.0  python_dateutil-4.0.0  pytz-2026.6
    sentence_transformers-5.3.0  sniffio-1.3.1  tokenizers-0.22.2  transformers-5.3.0
    tzdata-2026.6  ujson-5.12.0  xxhash-4.1.0

torch (2.15), numpy, scipy and safetensors come from bench/.venv.  Check the setup with
``PYTHONPATH=.cache/pylate-site bench/.venv/bin/python -c "import pylate, FlagEmbedding"``.

The script

1. builds the tiny backbones of the other fixture sets: the WordPiece BERT of
   ``scripts/gen_fixtures.py`` (``build_tokenizer`` + ``build_backbone``) and the XLM-R of
   ``scripts/gen_backbone_fixtures.py`` with its SentencePiece-style Unigram tokenizer
   (``build(..., "xlm-roberta", "unigram_xlmr", seed, ...)``), hidden 32, 2 layers, 4 heads;
2. wraps them as ``pylate.models.ColBERT(backbone_dir, ...)``: colbert (PyLate's defaults, "[Q] "
   / "[D] " prefixes, query expansion, no attention to the expansion tokens, the punctuation
   skiplist), colbert_attend (XLM-R, attend_to_expansion_tokens, a Dense with bias) and
   colbert_plain (no prefixes, no expansion, a custom skiplist).  torch is seeded before the
   constructor (PyLate adds the prefix tokens and resizes the embeddings), and then the prefix
   tokens' new embedding rows and the Dense weights are redrawn from seeded generators, so
   nothing depends on PyLate's or transformers' own initialisation.  Saved with ``model.save``;
3. builds bge_m3 (and bge_m3_metadata) the way BAAI/bge-m3 ships: a sentence-transformers
   folder (Transformer + Pooling(cls) + Normalize) plus ``colbert_linear.pt`` (Linear(32, 32)) and
   ``sparse_linear.pt`` (Linear(32, 1)) written as FlagEmbedding writes them (a fresh OrderedDict
   of cloned tensors: no ``_metadata``), or with plain ``torch.save(state_dict)`` (which keeps
   ``_metadata``) for bge_m3_metadata;
4. writes bad_pt/: hostile or unsupported head files (a pickle global call, a non-tensor value,
   the legacy pre-1.6 format, a wrong shape), each alone in its folder: a test copies bge_m3/
   and swaps the file in;
5. reloads every model from disk with the reference library and records its outputs in
   ``<out>/golden.json``, plus a ``maxsim`` section of seeded random matrices and their
   ``sum_i max_j q_i . d_j`` computed with numpy (float64 accumulation).

The output is deterministic: running the script twice gives byte-identical files.  Floats are
float32 values written as repr(float(x)), which round-trips exactly to the same float32.  It runs
on the CPU, float32, 1 torch thread.  It deletes and rewrites only the model folders it makes and
golden.json; README.md (written by hand) is left alone.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixturelib.common import chmod_tree, offline, write_golden  # noqa: E402

# Must be set before importing huggingface_hub / transformers.
offline()
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
# PyLate's scoring backend: the plain torch path (the others need CUDA anyway).
os.environ["PYLATE_SCORES_BACKEND"] = "torch"

import gen_fixtures as gf  # noqa: E402  (WordPiece tokenizer, BERT backbone, floats(), dir_size())
from fixturelib.late_build import (BGE_MAX_LENGTH, BGE_MODELS, COLBERT_MODELS, DOCUMENTS,
    HIDDEN, MAXSIM_CASES, QUERIES, SCORE_QUERIES, ZERO_SHARE_RANGE, build_bad_pt, build_bge,
    build_bge_backbone, build_colbert, check_bad_pt)  # noqa: E402


# --------------------------------------------------------------------------
# Golden outputs
# --------------------------------------------------------------------------

def floats(v) -> list[float]:
    import numpy as np

    a = np.asarray(v)
    if a.dtype != np.float32:
        raise SystemExit(f"expected float32, got {a.dtype}")
    return gf.floats(a)


def rows(m) -> list[list[float]]:
    import numpy as np

    m = np.asarray(m)
    if m.ndim != 2:
        raise SystemExit(f"expected a matrix, got {m.shape}")
    return [floats(r) for r in m]


def ints(t) -> list[int]:
    return [int(x) for x in t.reshape(-1).tolist()]


def run_colbert(name: str, folder: str, stats: dict) -> dict:
    import numpy as np
    import torch
    from pylate import models

    model = models.ColBERT(folder, device="cpu")
    model.eval()
    tok = model.tokenizer
    tcfg = json.load(open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8"))
    stcfg = json.load(open(os.path.join(folder, "config_sentence_transformers.json"), encoding="utf-8"))
    modules = json.load(open(os.path.join(folder, "modules.json"), encoding="utf-8"))
    denses = []
    for m in list(model)[1:]:
        denses.append({"type": f"{type(m).__module__}.{type(m).__name__}", "in_features": int(m.in_features),
                       "out_features": int(m.out_features), "bias": m.linear.bias is not None,
                       "activation_function": f"{type(m.activation_function).__module__}."
                                              f"{type(m.activation_function).__name__}",
                       "use_residual": bool(getattr(m, "use_residual", False))})
    settings = {
        "query_prefix": model.query_prefix, "document_prefix": model.document_prefix,
        "query_prefix_id": model.query_prefix_id, "document_prefix_id": model.document_prefix_id,
        "query_length": model.query_length, "document_length": model.document_length,
        "do_query_expansion": model.do_query_expansion,
        "attend_to_expansion_tokens": model.attend_to_expansion_tokens,
        "skiplist_words": model.skiplist_words, "skiplist_ids": [int(i) for i in model.skiplist],
        "mask_token": tok.mask_token, "mask_token_id": tok.mask_token_id,
        "pad_token": tok.pad_token, "pad_token_id": tok.pad_token_id,
        "unk_token_id": tok.unk_token_id, "cls_token_id": tok.cls_token_id, "sep_token_id": tok.sep_token_id,
        "tokenizer_config_pad_token": tcfg.get("pad_token"),
        "vocab_size": len(tok), "dim": denses[-1]["out_features"],
        "config_sentence_transformers": {k: stcfg[k] for k in sorted(stcfg) if k != "__version__"},
        "modules_json": [m["type"] for m in modules],
        "dense": denses,
    }
    out: dict = {"settings": settings}
    for side, texts, is_query in (("query", QUERIES, True), ("document", DOCUMENTS, False)):
        vecs = model.encode(texts, is_query=is_query, show_progress_bar=False)
        ids, att, kept = [], [], []
        for text, v in zip(texts, vecs):
            f = model.tokenize([text], is_query=is_query)
            i, a = f["input_ids"][0], f["attention_mask"][0]
            if is_query:
                k = torch.ones_like(i, dtype=torch.bool) if model.do_query_expansion else a.bool()
            else:
                k = torch.logical_and(models.ColBERT.skiplist_mask(f["input_ids"], model.skiplist)[0], a.bool())
            if v.dtype != np.float32 or v.shape != (int(k.sum()), settings["dim"]):
                raise SystemExit(f"{name}/{side} {text!r}: {v.dtype} {v.shape} vs {int(k.sum())} kept tokens")
            ids.append(ints(i))
            att.append(ints(a))
            kept.append([int(x) for x in k.tolist()])
        # One text at a time gives the same vectors (the batch pads documents to its longest).
        worst = 0.0
        for text, v in zip(texts, vecs):
            one = model.encode([text], is_query=is_query, show_progress_bar=False)[0]
            worst = max(worst, float(np.max(np.abs(one - v))) if v.size else 0.0)
        stats[f"{name}_{side}_batched_vs_single_max_abs_diff"] = worst
        if worst > 1e-5:
            raise SystemExit(f"{name}/{side}: batched vs single {worst}")
        norms = [float(np.max(np.abs(np.linalg.norm(v.astype(np.float64), axis=1) - 1))) for v in vecs if v.size]
        stats[f"{name}_{side}_max_abs_norm_minus_1"] = max(norms)
        out[f"{side}_ids"] = ids
        out[f"{side}_attention_mask"] = att
        out[f"{side}_kept_mask"] = kept
        out[f"{side}_vectors"] = [rows(v) for v in vecs]
        out[f"_{side}_arrays"] = vecs
    return out


def colbert_scores(entry: dict) -> dict:
    """pylate.scores.colbert_scores for the first SCORE_QUERIES queries against every document, one
    document per call (no padding: zero-padded documents would let a 0 beat negative similarities)."""
    import numpy as np
    import torch
    from pylate.scores import colbert_scores as pylate_colbert_scores

    q = torch.from_numpy(np.stack(entry["_query_arrays"][:SCORE_QUERIES]))
    cols = []
    for d in entry["_document_arrays"]:
        s = pylate_colbert_scores(queries_embeddings=q, documents_embeddings=torch.from_numpy(d)[None])
        if tuple(s.shape) != (SCORE_QUERIES, 1) or s.dtype != torch.float32:
            raise SystemExit(f"colbert_scores: {tuple(s.shape)} {s.dtype}")
        cols.append(s[:, 0].numpy())
    m = np.stack(cols, axis=1).astype(np.float32)
    # Cross-check against numpy MaxSim (float64).
    ref = np.array([[np.max(qq.astype(np.float64) @ d.astype(np.float64).T, axis=1).sum() if d.size else 0.0
                     for d in entry["_document_arrays"]] for qq in entry["_query_arrays"][:SCORE_QUERIES]])
    worst = float(np.max(np.abs(ref - m)))
    if worst > 1e-4:
        raise SystemExit(f"colbert_scores vs numpy maxsim: {worst}")
    return {"queries": list(range(SCORE_QUERIES)), "values": rows(m), "vs_numpy_float64_max_abs_diff": worst}


def run_bge(name: str, folder: str, stats: dict) -> dict:
    import numpy as np
    import torch
    from FlagEmbedding import BGEM3FlagModel
    from sentence_transformers import SentenceTransformer

    kwargs = dict(use_fp16=False, devices="cpu")
    m3 = BGEM3FlagModel(folder, **kwargs)
    st = SentenceTransformer(folder, device="cpu")
    tok = m3.tokenizer
    unused = sorted({tok.convert_tokens_to_ids(tok.special_tokens_map[t])
                     for t in ("cls_token", "eos_token", "pad_token", "unk_token") if t in tok.special_tokens_map})
    heads = {}
    for fn in ("colbert_linear.pt", "sparse_linear.pt"):
        sd = torch.load(os.path.join(folder, fn), map_location="cpu", weights_only=True)
        heads[fn] = {"keys": list(sd), "shapes": {k: list(v.shape) for k, v in sd.items()},
                     "has_metadata": hasattr(sd, "_metadata")}
    settings = {
        "BGEM3FlagModel_kwargs": kwargs, "max_length": BGE_MAX_LENGTH,
        "pooling_method": m3.pooling_method, "normalize_embeddings": m3.normalize_embeddings,
        "encode_kwargs": {"max_length": BGE_MAX_LENGTH, "return_dense": True, "return_sparse": True,
                          "return_colbert_vecs": True},
        "st_modules": [f"{type(x).__module__}.{type(x).__name__}" for x in st],
        "st_max_seq_length": st.max_seq_length,
        "lexical_unused_token_ids": unused,
        "cls_token_id": tok.cls_token_id, "eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id,
        "unk_token_id": tok.unk_token_id, "vocab_size": len(tok), "heads": heads,
    }
    out: dict = {"settings": settings}
    zero, positive = 0, 0
    for side, texts in (("queries", QUERIES), ("documents", DOCUMENTS)):
        r = m3.encode(texts, max_length=BGE_MAX_LENGTH, return_dense=True, return_sparse=True,
                      return_colbert_vecs=True)
        dense = r["dense_vecs"]
        st_dense = st.encode(texts, convert_to_numpy=True, show_progress_bar=False)
        worst = float(np.max(np.abs(st_dense - dense)))
        stats[f"{name}_{side}_st_vs_dense_vecs_max_abs_diff"] = worst
        if dense.dtype != np.float32 or st_dense.dtype != np.float32 or worst > 1e-5:
            raise SystemExit(f"{name}/{side}: SentenceTransformer vs dense_vecs {worst} {dense.dtype}")
        ids = [tok(t, truncation=True, max_length=BGE_MAX_LENGTH)["input_ids"] for t in texts]
        lex = []
        for i, (t_ids, lw, cv) in enumerate(zip(ids, r["lexical_weights"], r["colbert_vecs"])):
            if cv.dtype != np.float32 or cv.shape != (len(t_ids) - 1, HIDDEN):
                raise SystemExit(f"{name}/{side}[{i}]: colbert_vecs {cv.dtype} {cv.shape} for {len(t_ids)} ids")
            for k, w in lw.items():
                if not isinstance(w, np.float32):
                    raise SystemExit(f"{name}/{side}[{i}]: lexical weight {type(w)}")
            candidates = {x for x in t_ids if x not in unused}
            zero += len(candidates - {int(k) for k in lw})
            positive += len(lw)
            lex.append({k: float(lw[k]) for k in sorted(lw, key=int)})
        out[side] = {"input_ids": ids, "dense_vecs": rows(dense), "lexical_weights": lex,
                     "colbert_vecs": [rows(cv) for cv in r["colbert_vecs"]], "st_dense": rows(st_dense)}
    share = zero / (zero + positive)
    stats[f"{name}_lexical_zero_share"] = share
    if not ZERO_SHARE_RANGE[0] <= share <= ZERO_SHARE_RANGE[1]:
        raise SystemExit(f"{name}: {share:.2f} of the distinct tokens have weight 0 (want {ZERO_SHARE_RANGE})")
    return out


def run_maxsim() -> list[dict]:
    import numpy as np

    cases = []
    for name, seed, nq, drows, dim, sign in MAXSIM_CASES:
        rng = np.random.default_rng(seed)
        q = rng.standard_normal((nq, dim), dtype=np.float32)
        docs = [rng.standard_normal((n, dim), dtype=np.float32) for n in drows]
        if sign == "neg":
            q = np.abs(q)
            docs = [-np.abs(d) for d in docs]
        expected = []
        for d in docs:
            sims = q.astype(np.float64) @ d.astype(np.float64).T
            if sign == "neg" and not (sims < 0).all():
                raise SystemExit(f"maxsim/{name}: a non-negative similarity")
            expected.append(np.float32(sims.max(axis=1).sum()))
        cases.append({"name": name, "seed": seed, "dim": dim, "query": rows(q), "documents": [rows(d) for d in docs],
                      "expected": floats(np.array(expected, dtype=np.float32))})
    return cases


# --------------------------------------------------------------------------
# Output: dicts and lists of lists expanded, one line per scalar list.
# --------------------------------------------------------------------------

def _scalar(x) -> bool:
    return not isinstance(x, (list, dict))


def render(o, indent: int = 0) -> str:
    pad = " " * indent
    inner = " " * (indent + 1)
    if isinstance(o, dict):
        if all(_scalar(v) for v in o.values()) and (len(gf.dump(o)) <= 160 or all(
                isinstance(v, float) for v in o.values())):
            return gf.dump(o)
        if not o:
            return "{}"
        parts = [f"{inner}{json.dumps(k, ensure_ascii=False)}: {render(v, indent + 1)}" for k, v in o.items()]
        return "{\n" + ",\n".join(parts) + "\n" + pad + "}"
    if isinstance(o, list):
        if all(_scalar(v) for v in o):
            return gf.dump(o)
        if all(isinstance(v, dict) and all(isinstance(x, float) for x in v.values()) for v in o):
            return "[\n" + ",\n".join(inner + gf.dump(v) for v in o) + "\n" + pad + "]"
        return "[\n" + ",\n".join(inner + render(v, indent + 1) for v in o) + "\n" + pad + "]"
    return gf.dump(o)


def site_packages_list() -> list[str]:
    import pylate

    site = os.path.dirname(os.path.dirname(os.path.abspath(pylate.__file__)))
    return sorted(d[: -len(".dist-info")] for d in os.listdir(site) if d.endswith(".dist-info"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="tests/fixtures/late", help="output directory (default tests/fixtures/late)")
    args = ap.parse_args()

    import logging
    import warnings

    import numpy as np
    import safetensors
    import tokenizers
    import torch
    import transformers
    import sentence_transformers
    import pylate
    import FlagEmbedding  # noqa: F401
    from importlib.metadata import version

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    for lg in ("sentence_transformers", "pylate", "FlagEmbedding"):
        logging.getLogger(lg).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)
    if not sentence_transformers.__version__.startswith("5.3.") or not pylate.__version__.startswith("1.6."):
        raise SystemExit(f"run with PYTHONPATH=.cache/pylate-site (got sentence-transformers "
                         f"{sentence_transformers.__version__}, pylate {pylate.__version__})")

    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    owned = list(COLBERT_MODELS) + list(BGE_MODELS) + ["bad_pt"]
    for n in owned:
        shutil.rmtree(os.path.join(out, n), ignore_errors=True)
    if os.path.exists(os.path.join(out, "golden.json")):
        os.remove(os.path.join(out, "golden.json"))

    facts: dict = {}
    work = tempfile.mkdtemp(prefix="pg_embed_late_fixtures_")
    try:
        for name, spec in COLBERT_MODELS.items():
            facts[name] = build_colbert(name, spec, work, os.path.join(out, name))
        bge_backbone = os.path.join(work, "bge_m3_st")
        build_bge_backbone(work, bge_backbone)
        for name, (seed, style, bias) in BGE_MODELS.items():
            facts[name] = build_bge(name, seed, style, bias, bge_backbone, os.path.join(out, name))
        bad = build_bad_pt(os.path.join(out, "bad_pt"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for n in owned:
        chmod_tree(os.path.join(out, n))
    check_bad_pt(os.path.join(out, "bad_pt"), bad)

    stats: dict = {}
    models_out: dict = {}
    for name, spec in COLBERT_MODELS.items():
        torch.manual_seed(0)
        entry = run_colbert(name, os.path.join(out, name), stats)
        entry["settings"] = {"kind": "pylate_colbert", "backbone": spec["backbone"], "seed": spec["seed"],
                             "constructor_kwargs": spec["kwargs"], **facts[name], **entry["settings"]}
        if name == "colbert":
            entry["scores"] = colbert_scores(entry)
        for k in [k for k in entry if k.startswith("_")]:
            del entry[k]
        models_out[name] = entry
    for name in BGE_MODELS:
        torch.manual_seed(0)
        entry = run_bge(name, os.path.join(out, name), stats)
        entry["settings"] = {"kind": "bge_m3", **facts[name], **entry["settings"]}
        models_out[name] = entry

    header = {
        "generator": {
            "script": "scripts/gen_late_fixtures.py",
            # The command that made tests/fixtures/late (the site was then outside the repository).
            "command": "HF_HUB_OFFLINE=1 PYTHONPATH=/work/pylate-site bench/.venv/bin/python "
                       "scripts/gen_late_fixtures.py --out tests/fixtures/late",
            "python": sys.version.split()[0],
            "pylate": pylate.__version__,
            "FlagEmbedding": version("FlagEmbedding"),
            "sentence_transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
            "torch": torch.__version__,
            "safetensors": safetensors.__version__,
            "numpy": np.__version__,
            "reference_site_packages": site_packages_list(),
            "device": "cpu", "dtype": "float32", "torch_threads": 1,
        },
        "backbones": {
            "bert": "the WordPiece BERT of scripts/gen_fixtures.py (build_tokenizer, build_backbone seed 0): "
                    "vocabulary 401 ([PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4), hidden 32, 2 layers, 4 heads",
            "xlm-roberta": "the XLM-R of scripts/gen_backbone_fixtures.py build(..., 'xlm-roberta', 'unigram_xlmr', "
                           "seed): Unigram vocabulary (<s> 0, <pad> 1, </s> 2, <unk> 3, <mask> 4), hidden 32, "
                           "2 layers, 4 heads; colbert_attend seed 62, bge_m3 seed 65",
        },
        "queries": QUERIES,
        "documents": DOCUMENTS,
        "fields": {
            "models.<colbert*>.settings": "what pylate.models.ColBERT(folder) resolved on reload (prefixes and their "
                                          "ids, lengths, expansion, skiplist words and ids, mask/pad ids after PyLate "
                                          "set pad := mask), the saved config_sentence_transformers.json and modules",
            "query_vectors / document_vectors": "model.encode(texts, is_query=True/False) (one batch, PyLate's "
                                                "defaults: normalize_embeddings=True): per text [kept token][dim]",
            "query_ids / document_ids": "model.tokenize([text], is_query=...)['input_ids'][0]: the ids fed to the "
                                        "backbone, prefix inserted after the first token, queries padded with the "
                                        "mask id when expanding",
            "query_attention_mask / document_attention_mask": "model.tokenize([text], is_query=...)"
                                                              "['attention_mask'][0] (all 1 when "
                                                              "attend_to_expansion_tokens)",
            "query_kept_mask / document_kept_mask": "the rows encode() returns: queries: all (expansion) or the "
                                                    "attention mask; documents: ColBERT.skiplist_mask(ids, skiplist) "
                                                    "AND attention mask. len(vectors[i]) == sum(kept_mask[i])",
            "models.colbert.scores": "pylate.scores.colbert_scores(first 3 queries stacked, [document]) per "
                                     "document: values[q][d]",
            "models.<bge_m3*>.<queries|documents>": "BGEM3FlagModel(folder, use_fp16=False, devices='cpu')"
                                                    ".encode(texts, max_length=24, return_dense=True, "
                                                    "return_sparse=True, return_colbert_vecs=True)",
            "input_ids": "bge: tokenizer(text, truncation=True, max_length=24)['input_ids'] (what encode feeds)",
            "dense_vecs": "per text [32]: CLS hidden state, L2-normalised",
            "lexical_weights": "per text {token id (decimal string): weight}: max over the text's occurrences of "
                               "relu(sparse_linear(h)), only weights > 0, cls/eos/pad/unk ids left out; keys in "
                               "ascending id order",
            "colbert_vecs": "per text [len(input_ids) - 1][32]: colbert_linear(h) for every token after the first "
                            "(the final </s> included), each L2-normalised",
            "st_dense": "SentenceTransformer(folder).encode(texts): equals dense_vecs (checked, see stats)",
            "maxsim": "numpy only: q, documents float32 (numpy default_rng(seed).standard_normal; all_negative: "
                      "q = |.|, d = -|.|); expected[d] = float32(sum_i max_j q_i . d_j) accumulated in float64",
            "bad_pt": "files alone in their folders under bad_pt/; a test copies bge_m3/ and swaps the file in",
        },
        "stats": dict(sorted(stats.items())),
    }
    golden_obj = {**header, "models": models_out, "bad_pt": bad, "maxsim": run_maxsim()}
    text = render(golden_obj) + "\n"
    if json.loads(text) != json.loads(json.dumps(golden_obj)):
        raise SystemExit("JSON round-trip mismatch")
    golden = os.path.join(out, "golden.json")
    write_golden(golden, text)
    print(f"wrote {golden}: {len(text.encode('utf-8'))} bytes", file=sys.stderr)
    for n in owned:
        print(f"  {n}: {gf.dir_size(os.path.join(out, n))} bytes", file=sys.stderr)
    print(f"total: {gf.dir_size(out)} bytes", file=sys.stderr)
    for k, v in sorted(stats.items()):
        print(f"  {k}: {v}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
