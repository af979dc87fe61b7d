#!/usr/bin/env python3
"""The baselines pg_embed is measured against: sentence-transformers on PyTorch (CPU) and
ONNX Runtime fp32, on the bench corpus, with the same thread count. Prints one JSON object
per system: sentences/s at the best batch size (inputs sorted by length, as both pg_embed's
array form and sentence-transformers do), p50 / p99 latency of single-sentence calls, and
the token count. Asserts nothing.

Usage:
    python bench/baselines.py --model models/all-MiniLM-L6-v2 --corpus bench/corpus.txt \
        --threads 2 [--systems st,ort] [--singles 200] [--sentences N] [--vectors N]

--sentences takes the corpus's first N lines; --vectors prints sentence-transformers' first N
vectors of the batch run (for a cosine against pg_embed's).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time


def timed(fn, repeat=1):
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t0) / repeat


def percentiles(samples):
    s = sorted(samples)
    return s[len(s) // 2], s[min(len(s) - 1, int(round(0.99 * (len(s) - 1))))]


def rss_mb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def bench_st(model_dir, texts, threads, batch_sizes, singles, vectors=0):
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    rss_before = rss_mb()
    model = SentenceTransformer(model_dir, device="cpu", model_kwargs={"dtype": torch.float32})
    rss_load = rss_mb()
    model.encode(texts[:64], batch_size=32)  # warm-up
    best, runs = None, []
    for bs in batch_sizes:
        out = []
        secs = timed(lambda: out.append(model.encode(texts, batch_size=bs, convert_to_numpy=True)))
        rate = len(texts) / secs
        runs.append({"batch_size": bs, "sentences_per_s": rate})
        if best is None or rate > best[1]:
            best = (bs, rate, out[0])
    lat = []
    for t in texts[:singles]:
        lat.append(timed(lambda: model.encode([t], convert_to_numpy=True)) * 1000)
    p50, p99 = percentiles(lat)
    return {"system": "sentence-transformers (PyTorch CPU)", "best_batch": best[0], "sentences_per_s": best[1],
            "single_p50_ms": p50, "single_p99_ms": p99, "runs": runs, "torch": torch.__version__,
            "rss_before_load_mb": rss_before, "rss_after_load_mb": rss_load, "rss_after_run_mb": rss_mb(),
            "vectors": best[2][:vectors].tolist()}


def bench_ort(model_dir, texts, threads, batch_sizes, singles):
    import numpy as np
    import onnxruntime as ort
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir).eval()
    onnx_path = os.path.join(tempfile.mkdtemp(prefix="pg_embed_bench_"), "model.onnx")
    example = tok(["an example input", "and another"], padding=True, return_tensors="pt")
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in example]

    class Hidden(torch.nn.Module):
        """The backbone called with keywords, returning last_hidden_state only."""

        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *tensors):
            return self.inner(**dict(zip(names, tensors))).last_hidden_state

    with torch.no_grad():
        torch.onnx.export(Hidden(model), tuple(example[n] for n in names), onnx_path, input_names=names,
                          output_names=["last_hidden_state"], dynamic_axes={n: {0: "b", 1: "s"} for n in names},
                          opset_version=17, dynamo=False)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
    max_len = min(tok.model_max_length, 512)

    def encode(batch):
        enc = tok(batch, padding=True, truncation=True, max_length=max_len, return_tensors="np")
        hidden = sess.run(None, {n: enc[n].astype(np.int64) for n in names})[0]
        mask = enc["attention_mask"][..., None].astype(np.float32)
        pooled = (hidden * mask).sum(1) / np.clip(mask.sum(1), 1e-9, None)
        return pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)

    # The exported graph gives sentence-transformers' vectors (checked, not assumed).
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(model_dir, device="cpu").encode(texts[:16], convert_to_numpy=True)
    check = float(np.max(np.abs(encode(texts[:16]) - reference)))

    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    ordered = [texts[i] for i in order]
    encode(ordered[:32])  # warm-up
    best = None
    for bs in batch_sizes:
        secs = timed(lambda: [encode(ordered[i:i + bs]) for i in range(0, len(ordered), bs)])
        rate = len(texts) / secs
        if best is None or rate > best[1]:
            best = (bs, rate)
    lat = []
    for t in texts[:singles]:
        lat.append(timed(lambda: encode([t])) * 1000)
    p50, p99 = percentiles(lat)
    return {"system": "ONNX Runtime fp32 (CPU)", "best_batch": best[0], "sentences_per_s": best[1],
            "single_p50_ms": p50, "single_p99_ms": p99, "max_abs_diff_vs_sentence_transformers": check}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--systems", default="st,ort")
    ap.add_argument("--batch-sizes", default="16,32,64")
    ap.add_argument("--singles", type=int, default=200)
    ap.add_argument("--sentences", type=int, default=None)
    ap.add_argument("--vectors", type=int, default=0)
    args = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    texts = [line.rstrip("\n") for line in open(args.corpus, encoding="utf-8") if line.strip()][:args.sentences]
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    for system in args.systems.split(","):
        fn = {"st": bench_st, "ort": bench_ort}[system]
        extra = {"vectors": args.vectors} if system == "st" else {}
        result = fn(args.model, texts, args.threads, sizes, min(args.singles, len(texts)), **extra)
        result.update({"threads": args.threads, "sentences": len(texts)})
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
