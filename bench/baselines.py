#!/usr/bin/env python3
"""The baselines pg_embed is measured against, on the bench corpus, with the same thread
count: sentence-transformers on PyTorch (CPU) in float32 (`st`) and under
torch.autocast("cpu", dtype=torch.bfloat16) (`st_bf16`), ONNX Runtime float32 (`ort`) and ONNX
Runtime with int8 dynamic quantization (`ort_int8`). Prints one JSON object per system:
sentences/s at the best batch size (inputs sorted by length, as both pg_embed's array form and
sentence-transformers do), p50 / p99 latency of single-sentence calls, the token count, and
the accuracy of the system's corpus vectors: min and mean cosine against float32
sentence-transformers' vectors of the same corpus (the reference). Asserts nothing.

Every system's vectors are the final sentence embeddings (mean pooling over the attention
mask, then L2 normalization, as all-MiniLM-L6-v2's modules.json says): sentence-transformers
produces them itself; the ONNX graphs output last_hidden_state and the pooling and
normalization are done here in numpy (float32).

ort_int8: onnxruntime.quantization.quantize_dynamic of the same exported float32 graph with
its defaults: weight_type=QuantType.QInt8 (signed int8 weights), per_channel=False (one scale
and zero point per weight tensor), reduce_range=False, op_types_to_quantize=None (every
op type of the IntegerOps registry: MatMul, Gather (the embedding tables), Attention, ...);
activations are quantized at run time to uint8, per tensor (DynamicQuantizeLinear +
MatMulInteger). No quant_pre_process, no calibration.

Usage:
    python bench/baselines.py --model models/all-MiniLM-L6-v2 --corpus bench/corpus.txt \
        --threads 2 [--systems st,st_bf16,ort,ort_int8] [--singles 200] [--sentences N] \
        [--vectors N] [--save-reference FILE.npy]

--sentences takes the corpus's first N lines; --vectors prints sentence-transformers' first N
vectors of the batch run (for a cosine against pg_embed's); --save-reference writes the
reference vectors (float32, corpus order, shape [sentences, dim]) as a .npy file, which
bench/run.sh compares pg_embed's vectors with (cosine_stats below).
"""

from __future__ import annotations

import argparse
import contextlib
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


def cosine_stats(vectors, reference):
    """Min and mean cosine of row i of `vectors` with row i of `reference` (float64), and the
    largest | |v| - 1 | of `vectors` (how far from unit length the system's output is)."""
    import numpy as np

    a = np.asarray(vectors, dtype=np.float64)
    b = np.asarray(reference, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"vectors {a.shape} against reference {b.shape}")
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    cos = (a * b).sum(1) / (na * nb)
    return {"min_cos_vs_st_fp32": float(cos.min()), "mean_cos_vs_st_fp32": float(cos.mean()),
            "argmin_cos": int(cos.argmin()), "max_norm_error": float(np.abs(na - 1).max())}


def bench_st(model_dir, texts, threads, batch_sizes, singles, vectors=0, bf16=False):
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    rss_before = rss_mb()
    model = SentenceTransformer(model_dir, device="cpu", model_kwargs={"dtype": torch.float32})
    rss_load = rss_mb()
    # bf16: float32 weights, matmuls (linear, bmm, ...) run in bfloat16 under autocast; the
    # ops autocast keeps in float32 (softmax, layer_norm, ...) stay float32.
    ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext

    def encode(batch, **kw):
        with torch.no_grad(), ctx():
            return np.asarray(model.encode(batch, convert_to_numpy=True, **kw), dtype=np.float32)

    encode(texts[:64], batch_size=32)  # warm-up
    best, runs = None, []
    for bs in batch_sizes:
        out = []
        secs = timed(lambda: out.append(encode(texts, batch_size=bs)))
        rate = len(texts) / secs
        runs.append({"batch_size": bs, "sentences_per_s": rate})
        if best is None or rate > best[1]:
            best = (bs, rate, out[0])
    lat = []
    for t in texts[:singles]:
        lat.append(timed(lambda: encode([t])) * 1000)
    p50, p99 = percentiles(lat)
    name = "sentence-transformers bf16 autocast (PyTorch CPU)" if bf16 else "sentence-transformers (PyTorch CPU)"
    return {"system": name, "best_batch": best[0], "sentences_per_s": best[1],
            "single_p50_ms": p50, "single_p99_ms": p99, "runs": runs, "torch": torch.__version__,
            "rss_before_load_mb": rss_before, "rss_after_load_mb": rss_load, "rss_after_run_mb": rss_mb(),
            "vectors": best[2][:vectors].tolist(), "_corpus_vectors": best[2]}


def export_onnx(model_dir):
    """The backbone exported to ONNX (float32, output last_hidden_state); returns the file,
    the tokenizer and the input names."""
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
    return onnx_path, tok, names


def quantize_int8(onnx_path):
    """quantize_dynamic with its defaults, QInt8 weights (see the module docstring)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out = os.path.join(os.path.dirname(onnx_path), "model.int8.onnx")
    quantize_dynamic(onnx_path, out, weight_type=QuantType.QInt8, per_channel=False, reduce_range=False)
    return out


_exported = {}


def bench_ort(model_dir, texts, threads, batch_sizes, singles, int8=False):
    import numpy as np
    import onnxruntime as ort

    if model_dir not in _exported:
        _exported[model_dir] = export_onnx(model_dir)
    onnx_path, tok, names = _exported[model_dir]
    quant = {}
    if int8:
        t0 = time.perf_counter()
        onnx_path = quantize_int8(onnx_path)
        quant = {"quantization": {"function": "onnxruntime.quantization.quantize_dynamic",
                                  "weight_type": "QInt8", "per_channel": False, "reduce_range": False,
                                  "op_types_to_quantize": "default (all of the IntegerOps registry)",
                                  "activations": "uint8, per tensor, quantized at run time",
                                  "quantize_s": time.perf_counter() - t0,
                                  "file_mb": os.path.getsize(onnx_path) / 2**20}}
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

    check = {}
    if not int8:
        # The exported graph gives sentence-transformers' vectors (checked, not assumed).
        from sentence_transformers import SentenceTransformer

        reference = SentenceTransformer(model_dir, device="cpu").encode(texts[:16], convert_to_numpy=True)
        check = {"max_abs_diff_vs_sentence_transformers": float(np.max(np.abs(encode(texts[:16]) - reference)))}

    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    ordered = [texts[i] for i in order]
    encode(ordered[:32])  # warm-up
    best = None
    for bs in batch_sizes:
        out = []
        secs = timed(lambda: out.append([encode(ordered[i:i + bs]) for i in range(0, len(ordered), bs)]))
        rate = len(texts) / secs
        if best is None or rate > best[1]:
            best = (bs, rate, out[0])
    corpus_vectors = np.empty((len(texts), best[2][0].shape[1]), dtype=np.float32)
    corpus_vectors[order] = np.concatenate(best[2])
    lat = []
    for t in texts[:singles]:
        lat.append(timed(lambda: encode([t])) * 1000)
    p50, p99 = percentiles(lat)
    return {"system": "ONNX Runtime int8 dynamic (CPU)" if int8 else "ONNX Runtime fp32 (CPU)",
            "best_batch": best[0], "sentences_per_s": best[1], "single_p50_ms": p50, "single_p99_ms": p99,
            "onnxruntime": ort.__version__, **check, **quant, "_corpus_vectors": corpus_vectors}


SYSTEMS = {
    "st": lambda *a, vectors=0: bench_st(*a, vectors=vectors),
    "st_bf16": lambda *a, vectors=0: bench_st(*a, vectors=vectors, bf16=True),
    "ort": lambda *a, vectors=0: bench_ort(*a),
    "ort_int8": lambda *a, vectors=0: bench_ort(*a, int8=True),
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--systems", default="st,st_bf16,ort,ort_int8")
    ap.add_argument("--batch-sizes", default="16,32,64")
    ap.add_argument("--singles", type=int, default=200)
    ap.add_argument("--sentences", type=int, default=None)
    ap.add_argument("--vectors", type=int, default=0)
    ap.add_argument("--save-reference", default=None)
    args = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    texts = [line.rstrip("\n") for line in open(args.corpus, encoding="utf-8") if line.strip()][:args.sentences]
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    systems = args.systems.split(",")
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        ap.error(f"unknown systems {unknown}; known: {','.join(SYSTEMS)}")
    results = []
    for system in systems:
        result = SYSTEMS[system](args.model, texts, args.threads, sizes, min(args.singles, len(texts)),
                                 vectors=args.vectors)
        result.update({"key": system, "threads": args.threads, "sentences": len(texts)})
        results.append(result)
    # The reference: float32 sentence-transformers' vectors of the corpus (the `st` run's best
    # batch when it ran, else encoded here, batch 32).
    st = next((r for r in results if r["key"] == "st"), None)
    if st is not None:
        reference = st["_corpus_vectors"]
    else:
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(args.threads)
        reference = SentenceTransformer(args.model, device="cpu").encode(texts, batch_size=32, convert_to_numpy=True)
    if args.save_reference:
        import numpy as np

        np.save(args.save_reference, np.asarray(reference, dtype=np.float32))
    for result in results:
        result.update(cosine_stats(result.pop("_corpus_vectors"), reference))
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
