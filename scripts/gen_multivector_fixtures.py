#!/usr/bin/env python3
"""Generate tiny seeded multi-vector fixtures for sentence-transformers' MultiVectorEncoder
(6.2): its own saves and the Stanford ColBERT (colbert-ir) layout, with golden outputs.

Usage (the exact command; nothing is downloaded):

    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 bench/.venv/bin/python scripts/gen_multivector_fixtures.py \\
        --out tests/fixtures/multivector

Every model starts from the shared WordPiece BERT of ``scripts/gen_fixtures.py``
(``build_tokenizer`` + ``build_backbone``, seed 0; vocabulary 401, hidden 32, 2 layers, 4 heads).

- ``mve``: ``MultiVectorEncoder(modules=[Transformer(document_length=20, query_expansion={"strategy":
  "fixed", "attend": False, "length": 12}), Dense(32, 16, no bias, Identity), MultiVectorMask(
  skiplist_words=list(string.punctuation)), Normalize(token_embeddings)], prompts={"query": "[Q] ",
  "document": "[D] "})``, with ``[Q]`` and ``[D]`` added to the tokenizer as special tokens (not
  normalized) and their embedding rows drawn from a seeded generator.
- ``mve_min``: plain-text prompts (``"query: "``, no document prompt), ``query_length`` 16,
  ``query_expansion={"strategy": "min", "attend": True, "token": "[SEP]", "length": 8}``, two Dense
  modules (32 -> 24 with bias and Tanh, 24 -> 8), ``MultiVectorMask(skiplist_words=[".", ",", "the",
  "zzzz"], skiplist_tasks=["query", "document"])``, ``HierarchicalTokenPooling(pool_factor=1,
  normalize_embeddings=True)`` (documents only) and no Normalize, ``similarity_fn_name="meanmaxsim"``.
- ``stanford``: the layout colbert-ir saves (``HF_ColBERT``): config.json naming ``HF_ColBERT``,
  model.safetensors with the BERT weights under ``bert.`` (no pooler) and ``linear.weight`` [16, 32],
  the tokenizer with ``[unused0]`` and ``[unused1]`` in its vocabulary (ids 401, 402; the embedding
  rows drawn seeded), and an artifact.metadata with every ColBERTConfig key (query_maxlen 12,
  doc_maxlen 20, attend_to_mask_tokens false, mask_punctuation true, dim 16, similarity cosine).
- ``stanford_attend``: the same backbone files, linear.weight [8, 32] and a short artifact.metadata
  (query_maxlen 10, doc_maxlen 16, attend_to_mask_tokens true, mask_punctuation false, dim 8).

Each model is saved, reloaded from disk with ``MultiVectorEncoder(folder)`` and its
``encode_query`` / ``encode_document`` outputs (and ``similarity``) recorded in ``golden.json``.
The PyLate folders of tests/fixtures/late are also read with MultiVectorEncoder and compared with
their PyLate golden (``pylate_under_mve``: how differently MultiVectorEncoder reads them).
Deterministic: two runs give byte-identical trees. CPU, float32, 1 torch thread.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import string
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixturelib.common import chmod_tree, offline, write_golden  # noqa: E402

offline()
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import gen_fixtures as gf  # noqa: E402
from fixturelib.late_build import DOCUMENTS, QUERIES  # noqa: E402

MODELS = ["mve", "mve_min", "stanford", "stanford_attend"]
SCORE_QUERIES = 3
STANFORD_META = {
    # colbert-ir's ColBERTConfig, as Checkpoint.save writes it (every key, at the values a run of
    # colbert-ir would store), with the settings of this tiny model.
    "query_token_id": "[unused0]", "doc_token_id": "[unused1]", "query_token": "[Q]", "doc_token": "[D]",
    "ncells": None, "centroid_score_threshold": None, "ndocs": None, "load_index_with_mmap": False,
    "index_path": None, "index_bsize": 64, "nbits": 1, "kmeans_niters": 4, "resume": False,
    "pool_factor": 1, "clustering_mode": "hierarchical", "protected_tokens": 0,
    "similarity": "cosine", "bsize": 32, "accumsteps": 1, "lr": 1e-05, "maxsteps": 400000,
    "save_every": None, "warmup": 20000, "warmup_bert": None, "relu": False, "nway": 64,
    "use_ib_negatives": True, "reranker": False, "distillation_alpha": 1.0, "ignore_scores": False,
    "model_name": None, "query_maxlen": 12, "attend_to_mask_tokens": False, "interaction": "colbert",
    "dim": 16, "doc_maxlen": 20, "mask_punctuation": True, "checkpoint": "bert-base-uncased",
    "triples": None, "collection": None, "queries": None, "index_name": None, "overwrite": False,
    "root": "experiments", "experiment": "tiny", "index_root": None, "name": "tiny", "rank": 0,
    "nranks": 1, "amp": True, "gpus": 0, "avoid_fork_if_possible": False,
    "meta": {"hostname": "fixture", "git_branch": "main", "git_hash": "0" * 40,
             "git_commit_datetime": "2026-01-01 00:00:00+00:00", "current_datetime": "Jan 01, 2026 ; 00:00AM UTC",
             "cmd": "gen_multivector_fixtures.py", "version": "colbert-v0.4"},
}
STANFORD_ATTEND_META = {"query_maxlen": 10, "doc_maxlen": 16, "attend_to_mask_tokens": True,
                        "mask_punctuation": False, "dim": 8}


def seeded(shape, seed):
    import torch

    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g) * gf.INIT_STD


def backbone(work: str) -> str:
    d = os.path.join(work, "backbone")
    os.makedirs(d)
    gf.build_backbone(d, gf.build_tokenizer(d))
    return d


def build_native(name: str, bb: str, out: str) -> None:
    import torch
    from transformers import AddedToken
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.base.modules.dense import Dense
    from sentence_transformers.multi_vector_encoder.modules import HierarchicalTokenPooling, MultiVectorMask

    torch.manual_seed(0)
    if name == "mve":
        t = Transformer(bb, document_length=20,
                        query_expansion={"strategy": "fixed", "attend": False, "length": 12})
        tok = t.tokenizer
        tok.add_special_tokens({"additional_special_tokens": [AddedToken(p, normalized=False, special=True)
                                                              for p in ("[Q]", "[D]")]})
        emb = t.auto_model.resize_token_embeddings(len(tok))
        with torch.no_grad():
            emb.weight[401:] = seeded((len(tok) - 401, gf.HIDDEN), 81)
        dense = [Dense(gf.HIDDEN, 16, bias=False, activation_function=torch.nn.Identity(),
                       module_input_name="token_embeddings")]
        tail = [MultiVectorMask(skiplist_words=list(string.punctuation)), Normalize(module_input_name="token_embeddings")]
        kwargs = dict(prompts={"query": "[Q] ", "document": "[D] "})
        seed = 82
    else:
        t = Transformer(bb, query_length=16,
                        query_expansion={"strategy": "min", "attend": True, "token": "[SEP]", "length": 8})
        dense = [Dense(gf.HIDDEN, 24, bias=True, activation_function=torch.nn.Tanh(), module_input_name="token_embeddings"),
                 Dense(24, 8, bias=False, activation_function=torch.nn.Identity(), module_input_name="token_embeddings")]
        tail = [MultiVectorMask(skiplist_words=[".", ",", "the", "zzzz"], skiplist_tasks=["query", "document"]),
                HierarchicalTokenPooling(pool_factor=1, normalize_embeddings=True)]
        kwargs = dict(prompts={"query": "query: ", "document": ""}, similarity_fn_name="meanmaxsim")
        seed = 83
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for d in dense:
            for _, p in sorted(d.named_parameters(), key=lambda kv: kv[0]):
                p.copy_(torch.randn(p.shape, generator=g) * gf.INIT_STD)
    model = MultiVectorEncoder(modules=[t, *dense, *tail], device="cpu", **kwargs)
    model.save(out, create_model_card=False)
    os.remove(os.path.join(out, "README.md")) if os.path.exists(os.path.join(out, "README.md")) else None


def build_stanford(name: str, bb: str, out: str) -> None:
    """colbert-ir's layout: HF_ColBERT(BertPreTrainedModel) with bert (no pooler) and linear."""
    import torch
    from safetensors.torch import save_file
    from transformers import BertModel

    os.makedirs(out)
    tj = json.load(open(os.path.join(bb, "tokenizer.json"), encoding="utf-8"))
    vocab = tj["model"]["vocab"]
    for tokn in ("[unused0]", "[unused1]"):
        vocab[tokn] = len(vocab)
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, indent=2)
    with open(os.path.join(out, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])))
    for fn in ("tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(os.path.join(bb, fn), os.path.join(out, fn))
    model = BertModel.from_pretrained(bb, add_pooling_layer=False)
    model.resize_token_embeddings(len(vocab))
    dim = STANFORD_META["dim"] if name == "stanford" else STANFORD_ATTEND_META["dim"]
    with torch.no_grad():
        model.get_input_embeddings().weight[401:] = seeded((len(vocab) - 401, gf.HIDDEN), 84)
    sd = {f"bert.{k}": v.contiguous() for k, v in model.state_dict().items()}
    sd["linear.weight"] = seeded((dim, gf.HIDDEN), 85 if name == "stanford" else 86).contiguous()
    save_file(dict(sorted(sd.items())), os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    cfg = model.config.to_dict()
    cfg.update(architectures=["HF_ColBERT"], vocab_size=len(vocab))
    for k in ("_name_or_path", "transformers_version", "dtype", "torch_dtype"):
        cfg.pop(k, None)
    with open(os.path.join(out, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    meta = STANFORD_META if name == "stanford" else STANFORD_ATTEND_META
    with open(os.path.join(out, "artifact.metadata"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=4)


def arrays(xs):
    import numpy as np

    return [np.asarray(x.cpu().numpy() if hasattr(x, "cpu") else x, dtype=np.float32) for x in xs]


def rows(m) -> list[list[float]]:
    return [gf.floats(r) for r in m]


def run(folder: str, stats: dict, name: str) -> dict:
    import numpy as np
    import torch
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask

    model = MultiVectorEncoder(folder, device="cpu")
    model.eval()
    t = next(m for m in model if isinstance(m, Transformer))
    mask = next((m for m in model if isinstance(m, MultiVectorMask)), None)
    tok = model.tokenizer
    settings = {
        "modules": [f"{type(m).__module__}.{type(m).__name__}" for m in model],
        "prompts": dict(model.prompts), "query_length": t.query_length, "document_length": t.document_length,
        "query_expansion": t.query_expansion, "max_seq_length": t.max_seq_length,
        "skiplist_words": mask.skiplist_words if mask else None,
        "skiplist_tasks": mask.skiplist_tasks if mask else None,
        "skiplist_ids": sorted(int(i) for i in mask._skiplist_ids.tolist()) if mask is not None and mask._skiplist_ids is not None else [],
        "mask_token_id": tok.mask_token_id, "vocab_size": len(tok),
        "similarity_fn_name": model.similarity_fn_name, "dim": model.get_embedding_dimension(),
    }
    out: dict = {"settings": settings}
    for side, texts in (("query", QUERIES), ("document", DOCUMENTS)):
        enc = model.encode_query if side == "query" else model.encode_document
        vecs = arrays(enc(texts, convert_to_numpy=True))
        raw = enc(texts, output_value=None)
        ids, kept = [], []
        for text, v, r in zip(texts, vecs, raw):
            m = r["attention_mask"].bool()
            i = r["input_ids"]
            n = int(m.nonzero().max()) + 1 if m.any() else 0
            # The unpadded ids: every real or expansion position of the input (the tail of a
            # shorter input in its batch is padding).
            real = r.get("query_expansion_positions")
            width = max(n, int(real.nonzero().max()) + 1 if real is not None and real.any() else 0)
            one = model.preprocess([text], prompt=model.prompts.get(side), task=side)
            width = one["input_ids"].shape[1]
            ids.append([int(x) for x in one["input_ids"][0].tolist()])
            kept.append([int(x) for x in m[:width].tolist()])
            if v.shape[0] != int(m.sum()):
                raise SystemExit(f"{name}/{side} {text!r}: {v.shape} vs {int(m.sum())} kept")
            if int(m[width:].sum()) != 0:
                raise SystemExit(f"{name}/{side} {text!r}: kept beyond the input")
        worst = 0.0
        for text, v in zip(texts, vecs):
            single = arrays([enc(text, convert_to_numpy=True)])[0]
            worst = max(worst, float(np.max(np.abs(single - v))) if v.size else 0.0)
        stats[f"{name}_{side}_batched_vs_single_max_abs_diff"] = worst
        if worst > 1e-5:
            raise SystemExit(f"{name}/{side}: batched vs single {worst}")
        out[f"{side}_ids"] = ids
        out[f"{side}_kept_mask"] = kept
        out[f"{side}_vectors"] = [rows(v) for v in vecs]
        out[f"_{side}"] = vecs
    q = [torch.from_numpy(v) for v in out["_query"][:SCORE_QUERIES]]
    d = [torch.from_numpy(v) for v in out["_document"]]
    scores = model.similarity(q, d).numpy().astype(np.float32)
    ref = np.array([[(np.max(a.astype(np.float64) @ b.astype(np.float64).T, axis=1).sum() if b.size else 0.0)
                     / (len(a) if model.similarity_fn_name == "meanmaxsim" else 1)
                     for b in out["_document"]] for a in out["_query"][:SCORE_QUERIES]])
    stats[f"{name}_similarity_vs_numpy_max_abs_diff"] = float(np.max(np.abs(ref - scores)))
    out["scores"] = {"queries": list(range(SCORE_QUERIES)), "similarity_fn_name": model.similarity_fn_name,
                     "values": rows(scores)}
    for k in [k for k in out if k.startswith("_")]:
        del out[k]
    return out


def pylate_under_mve(late_dir: str) -> dict:
    """tests/fixtures/late's PyLate folders read by MultiVectorEncoder, against PyLate's golden."""
    import numpy as np
    from sentence_transformers import MultiVectorEncoder

    golden = json.load(open(os.path.join(late_dir, "golden.json"), encoding="utf-8"))
    report = {}
    for name in ("colbert", "colbert_attend", "colbert_modern", "colbert_plain"):
        model = MultiVectorEncoder(os.path.join(late_dir, name), device="cpu")
        entry = {}
        for side, texts in (("query", QUERIES), ("document", DOCUMENTS)):
            enc = model.encode_query if side == "query" else model.encode_document
            vecs = arrays(enc(texts, convert_to_numpy=True))
            want = [np.asarray(v, dtype=np.float32) for v in golden["models"][name][f"{side}_vectors"]]
            same_rows = [i for i, (a, b) in enumerate(zip(vecs, want)) if a.shape == b.shape]
            diffs = [float(np.max(np.abs(vecs[i] - want[i]))) if want[i].size else 0.0 for i in same_rows]
            entry[side] = {"row_counts_differ": [i for i in range(len(texts)) if i not in same_rows],
                           "max_abs_diff_where_rows_agree": max(diffs) if diffs else None}
        report[name] = entry
    return report


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(gf.ROOT if hasattr(gf, "ROOT") else ".", "tests/fixtures/multivector"))
    args = ap.parse_args()
    out = args.out
    import numpy as np
    import sentence_transformers
    import tokenizers
    import torch
    import transformers

    torch.set_num_threads(1)
    os.makedirs(out, exist_ok=True)
    for n in MODELS:
        shutil.rmtree(os.path.join(out, n), ignore_errors=True)
    with tempfile.TemporaryDirectory() as work:
        bb = backbone(work)
        for n in MODELS:
            (build_native if n.startswith("mve") else build_stanford)(n, bb, os.path.join(out, n))
            chmod_tree(os.path.join(out, n))
    stats: dict = {}
    models = {n: run(os.path.join(out, n), stats, n) for n in MODELS}
    late = os.path.join(os.path.dirname(os.path.abspath(out)), "late")
    golden = {
        "generator": {
            "script": "scripts/gen_multivector_fixtures.py",
            "command": "HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 bench/.venv/bin/python "
                       "scripts/gen_multivector_fixtures.py --out tests/fixtures/multivector",
            "python": sys.version.split()[0], "sentence_transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
            "torch": torch.__version__, "numpy": np.__version__, "device": "cpu", "dtype": "float32",
        },
        "queries": QUERIES,
        "documents": DOCUMENTS,
        "fields": {
            "query_vectors / document_vectors": "MultiVectorEncoder(folder).encode_query / encode_document(texts, "
                                                "convert_to_numpy=True): per text [kept token][dim]",
            "query_ids / document_ids": "model.preprocess([text], prompt=prompts[side], task=side)['input_ids'][0]",
            "query_kept_mask / document_kept_mask": "encode(..., output_value=None)'s attention_mask (the scoring "
                                                    "mask after MultiVectorMask) over those ids",
            "scores": "model.similarity(first 3 queries, every document) (maxsim or meanmaxsim)",
            "pylate_under_mve": "tests/fixtures/late's PyLate folders read by MultiVectorEncoder: inputs whose "
                                "row counts differ from PyLate's golden, and the largest difference elsewhere",
        },
        "stats": dict(sorted(stats.items())),
        "pylate_under_mve": pylate_under_mve(late) if os.path.isdir(late) else None,
        "models": models,
    }
    text = json.dumps(golden, indent=1, ensure_ascii=False) + "\n"
    write_golden(os.path.join(out, "golden.json"), text)
    print(f"wrote {out}/golden.json: {len(text)} bytes", file=sys.stderr)
    for k, v in sorted(stats.items()):
        print(f"  {k}: {v}", file=sys.stderr)
    print(json.dumps(golden["pylate_under_mve"], indent=1), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
