#!/usr/bin/env python3
"""The MultiVectorEncoder bench's model and its baseline (bench/multivector.sh).

``build OUT MINILM``: a MiniLM-shaped MultiVectorEncoder as sentence-transformers 6.2 saves it,
on the real all-MiniLM-L6-v2 weights: ``Transformer(document_length=180, query_expansion fixed
32, not attended)``, ``Dense(384 -> 128, no bias)`` drawn from a seeded generator,
``MultiVectorMask`` (punctuation skiplist), ``Normalize`` of the token embeddings, prompts
``query: `` / ``document: ``. Nothing is rewritten when ``OUT/done`` exists.

``baseline OUT CORPUS N THREADS REPEATS``: ``MultiVectorEncoder(OUT).encode_document`` of the
first N corpus sentences (batch 32) on THREADS torch threads, the best of REPEATS runs after a
warm-up; prints one JSON line (documents/s, token rows, the first document's rows).
"""

from __future__ import annotations

import json
import os
import string
import sys
import time

SEED = 20261128


def build(out: str, minilm: str) -> None:
    if os.path.exists(os.path.join(out, "done")):
        return
    import torch
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.base.modules.dense import Dense
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask

    t = Transformer(minilm, document_length=180, query_expansion={"strategy": "fixed", "attend": False, "length": 32})
    dense = Dense(384, 128, bias=False, activation_function=torch.nn.Identity(), module_input_name="token_embeddings")
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        dense.linear.weight.copy_(torch.randn(dense.linear.weight.shape, generator=g) * 0.05)
    model = MultiVectorEncoder(modules=[t, dense, MultiVectorMask(skiplist_words=list(string.punctuation)),
                                        Normalize(module_input_name="token_embeddings")],
                               prompts={"query": "query: ", "document": "document: "}, device="cpu")
    model.save(out, create_model_card=False)
    open(os.path.join(out, "done"), "w").close()


def baseline(out: str, corpus: str, n: int, threads: int, repeats: int) -> None:
    import torch
    from sentence_transformers import MultiVectorEncoder

    torch.set_num_threads(threads)
    with open(corpus, encoding="utf-8") as f:
        docs = [line.strip() for line in f if line.strip()][:n]
    model = MultiVectorEncoder(out, device="cpu")
    with torch.inference_mode():
        model.encode_document(docs[:32], batch_size=32)
        best, got = float("inf"), None
        for _ in range(repeats):
            t = time.perf_counter()
            got = model.encode_document(docs, batch_size=32)
            best = min(best, time.perf_counter() - t)
    rows = sum(len(x) for x in got)
    print(json.dumps({"system": "sentence-transformers MultiVectorEncoder.encode_document (PyTorch float32)",
                      "torch": torch.__version__, "threads": threads, "documents": len(docs), "rows": rows,
                      "documents_per_s": len(docs) / best,
                      "first": [[float(v) for v in row] for row in got[0]]}))


if __name__ == "__main__":
    if sys.argv[1] == "build":
        build(sys.argv[2], sys.argv[3])
    else:
        baseline(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
