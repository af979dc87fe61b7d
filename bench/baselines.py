#!/usr/bin/env python3
"""The baselines pg_embed is measured against, on the bench corpus, with the same thread
count: sentence-transformers on PyTorch (CPU) in float32 (`st`) and under
torch.autocast("cpu", dtype=torch.bfloat16) (`st_bf16`), ONNX Runtime float32 (`ort`) and ONNX
Runtime with int8 dynamic quantization (`ort_int8`), and, in their own venv, OpenVINO float32
(`ov`), bfloat16 (`ov_bf16`) and static int8 (`ov_int8`). Prints one JSON object per system:
sentences/s at the best batch size (inputs sorted by length, as both pg_embed's array form and
sentence-transformers do), p50 / p99 latency of single-sentence calls, the token count, and
the accuracy of the system's corpus vectors: min and mean cosine against float32
sentence-transformers' vectors of the same corpus (the reference). Asserts nothing.

Every system's vectors are the final sentence embeddings (mean pooling over the attention
mask, then L2 normalization, as all-MiniLM-L6-v2's modules.json says): sentence-transformers
produces them itself; the ONNX graphs and the OpenVINO IRs output last_hidden_state and the
pooling and normalization are done here in numpy (float32).

ort_int8: onnxruntime.quantization.quantize_dynamic of the same exported float32 graph with
its defaults: weight_type=QuantType.QInt8 (signed int8 weights), per_channel=False (one scale
and zero point per weight tensor), reduce_range=False, op_types_to_quantize=None (every
op type of the IntegerOps registry: MatMul, Gather (the embedding tables), Attention, ...);
activations are quantized at run time to uint8, per tensor (DynamicQuantizeLinear +
MatMulInteger). No quant_pre_process, no calibration.

The OpenVINO systems need bench/.venv-openvino (bash bench/openvino_env.sh: optimum-intel 2.2
needs transformers < 5.6, bench/.venv has 5.2x), so they run in a second call with that venv's
python; nothing of theirs is imported unless they are asked for, and the others need the first
venv (onnxruntime is only there). The backbone is exported from the local folder by optimum-intel
(OVModelForFeatureExtraction, float32 IR) into a temp dir removed at exit, and compiled for the
CPU with INFERENCE_NUM_THREADS = --threads and NUM_STREAMS = 1:
  ov       INFERENCE_PRECISION_HINT "f32" (on a CPU with bfloat16 OpenVINO's default is bf16).
  ov_bf16  INFERENCE_PRECISION_HINT "bf16"; on a CPU without bfloat16 OpenVINO runs f32: the
           precision read back from the compiled model is in the JSON (inference_precision_hint,
           and the system's name says so), with the runtime graph's matrix-product layers by the
           precision they run in (runtime_layers).
  ov_int8  static post-training quantization: optimum-intel's OVQuantizer with
           OVQuantizationConfig's defaults (nncf.quantize, preset mixed: int8 symmetric weights
           per output channel, int8 asymmetric activations per tensor; model_type transformer,
           so SmoothQuant alpha 0.95 on the matmuls; fast bias correction; the embedding tables
           int8 too, weight only), calibrated on 300 sentences generated here
           (calibration_sentences: their own vocabulary and seed, none a corpus line),
           tokenized one by one; the float parts run with the hint "f32", as ort_int8's do. The
           settings, the calibration's token counts, the int8 IR's layout as read from it
           (int8_layout) and its size are in its JSON.
When `st` is not among --systems the reference is --reference's file (bench/run.sh passes the
first call's --save-reference), else sentence-transformers float32 encoded by this venv.

Usage:
    python bench/baselines.py --model models/all-MiniLM-L6-v2 --corpus bench/corpus.txt \
        --threads 2 [--systems st,st_bf16,ort,ort_int8] [--singles 200] [--sentences N] \
        [--vectors N] [--save-reference FILE.npy] [--reference FILE.npy]
    bench/.venv-openvino/bin/python bench/baselines.py --model models/all-MiniLM-L6-v2 \
        --corpus bench/corpus.txt --threads 2 --systems ov,ov_bf16,ov_int8 [--reference FILE.npy]

--sentences takes the corpus's first N lines; --vectors prints sentence-transformers' first N
vectors of the batch run (for a cosine against pg_embed's); --save-reference writes the
reference vectors (float32, corpus order, shape [sentences, dim]) as a .npy file, which
bench/run.sh compares pg_embed's vectors with (cosine_stats below); --reference reads such a
file as the reference instead of encoding it (with --sentences, the file must be of as many).
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
            "argmin_cos": int(cos.argmin()), "max_norm_error": float(np.abs(na - 1).max()),
            "top10_vs_st_fp32": top10_agreement(a, b)}


def top10_agreement(vectors, reference, queries=100):
    """Retrieval agreement: the first `queries` rows as queries, each one's 10 nearest among the
    other rows by cosine under `vectors` and under `reference`; the overlap of the two sets
    (0 to 1), averaged over the queries."""
    import numpy as np

    def nearest(m):
        m = m / np.linalg.norm(m, axis=1, keepdims=True)
        sims = m[:queries] @ m.T
        sims[np.arange(len(sims)), np.arange(len(sims))] = -np.inf  # not itself
        return np.argsort(-sims, axis=1, kind="stable")[:, :10]

    got, want = nearest(np.asarray(vectors, np.float64)), nearest(np.asarray(reference, np.float64))
    return float(np.mean([len(set(g) & set(w)) / 10 for g, w in zip(got, want)]))


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


def pooled_encoder(tok, names, run):
    """encode(batch) for a graph that outputs last_hidden_state: tokenize (padded, truncated at
    512), run(feed) -> hidden, then mean pooling over the attention mask and L2 normalization in
    numpy (float32). ORT and OpenVINO share it."""
    import numpy as np

    max_len = min(tok.model_max_length, 512)

    def encode(batch):
        enc = tok(batch, padding=True, truncation=True, max_length=max_len, return_tensors="np")
        hidden = run({n: enc[n].astype(np.int64) for n in names})
        mask = enc["attention_mask"][..., None].astype(np.float32)
        pooled = (hidden * mask).sum(1) / np.clip(mask.sum(1), 1e-9, None)
        return pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)

    return encode


def measure(encode, texts, batch_sizes, singles):
    """Throughput at each batch size (inputs sorted by length, one warm-up batch first), the best
    kept with its vectors (in corpus order), then single-sentence latency over texts[:singles]."""
    import numpy as np

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
    return {"best_batch": best[0], "sentences_per_s": best[1], "single_p50_ms": p50, "single_p99_ms": p99,
            "_corpus_vectors": corpus_vectors}


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
    encode = pooled_encoder(tok, names, lambda feed: sess.run(None, feed)[0])

    check = {}
    if not int8:
        # The exported graph gives sentence-transformers' vectors (checked, not assumed).
        from sentence_transformers import SentenceTransformer

        reference = SentenceTransformer(model_dir, device="cpu").encode(texts[:16], convert_to_numpy=True)
        check = {"max_abs_diff_vs_sentence_transformers": float(np.max(np.abs(encode(texts[:16]) - reference)))}

    return {"system": "ONNX Runtime int8 dynamic (CPU)" if int8 else "ONNX Runtime fp32 (CPU)",
            **measure(encode, texts, batch_sizes, singles), "onnxruntime": ort.__version__, **check, **quant}


CALIBRATION_WORDS = """a an the this that my our their some many few every one two three of in on at to from
with by over near under through across garden kitchen harbour village forest station bridge market
farmer painter nurse pilot baker tourist neighbour river storm lamp letter bicycle orchard violin
recipe lantern meadow ferry bakery carries paints repairs visits describes borrows sells follows
notices plants bright quiet ancient wooden crowded narrow careful patient yellow broken distant
gentle morning evening yesterday tomorrow slowly often rarely because although while until""".split()


def calibration_sentences(corpus, n=300):
    """ov_int8's calibration text: n sentences of 5-60 words, generated deterministically (seeded
    Mersenne Twister, as bench/make_corpus.py) from a vocabulary of their own, none of them a line
    of the bench corpus (skipped if one were)."""
    import random

    rng, seen, out = random.Random(20261128), set(corpus), []
    while len(out) < n:
        words = [rng.choice(CALIBRATION_WORDS) for _ in range(rng.randint(5, 60))]
        s = " ".join([words[0].capitalize()] + words[1:]) + rng.choice([".", ".", "?", "!"])
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


def versions(*packages):
    from importlib.metadata import version

    return {p: version(p) for p in packages}


_ov_exported = {}


def export_openvino(model_dir):
    """The backbone exported by optimum-intel (OVModelForFeatureExtraction, export=True, no weight
    compression: float32 IR, output last_hidden_state) into a temp dir, removed at exit; returns
    the dir, the tokenizer and the IR's input names."""
    import atexit
    import shutil

    from optimum.intel import OVModelForFeatureExtraction
    from transformers import AutoTokenizer

    if model_dir not in _ov_exported:
        out = tempfile.mkdtemp(prefix="pg_embed_bench_ov_")
        atexit.register(shutil.rmtree, out, True)
        with contextlib.redirect_stdout(sys.stderr):
            model = OVModelForFeatureExtraction.from_pretrained(model_dir, export=True, compile=False,
                                                                load_in_8bit=False)
            model.save_pretrained(os.path.join(out, "fp32"))
        names = [i.get_any_name() for i in model.model.inputs]
        _ov_exported[model_dir] = (out, AutoTokenizer.from_pretrained(model_dir), names)
    return _ov_exported[model_dir]


def quantize_openvino(export_dir, tok, names, sentences):
    """Static int8 (post-training) quantization of the float32 IR: optimum-intel's OVQuantizer
    with OVQuantizationConfig's defaults (nncf.quantize underneath), calibrated on `sentences`
    tokenized one by one (batch 1, no padding, each its own length): fed as tokenized samples,
    since optimum-intel's own text-dataset path skips texts under its seq_len (128 tokens)."""
    import nncf
    import numpy as np
    from optimum.intel import OVConfig, OVModelForFeatureExtraction, OVQuantizationConfig, OVQuantizer

    model = OVModelForFeatureExtraction.from_pretrained(os.path.join(export_dir, "fp32"), compile=False)
    max_len = min(tok.model_max_length, 512)
    samples = [{n: enc[n].astype(np.int64) for n in names}
               for enc in (tok([s], truncation=True, max_length=max_len, return_tensors="np") for s in sentences)]
    qconfig = OVQuantizationConfig(num_samples=len(samples))
    out = os.path.join(export_dir, "int8")
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):  # NNCF's progress bars: stdout is for the JSON
        OVQuantizer(model).quantize(calibration_dataset=nncf.Dataset(samples),
                                    ov_config=OVConfig(quantization_config=qconfig), save_directory=out)
    nncf_args = qconfig.to_nncf_dict()
    adv = nncf_args["advanced_parameters"]
    lengths = [int(s["input_ids"].shape[1]) for s in samples]
    return out, {
        "function": "optimum.intel.OVQuantizer.quantize (nncf.quantize), OVQuantizationConfig defaults",
        "preset": nncf_args["preset"].value, "model_type": nncf_args["model_type"].value,
        "subset_size": nncf_args["subset_size"], "fast_bias_correction": nncf_args["fast_bias_correction"],
        "overflow_fix": adv.overflow_fix.value, "smooth_quant_alpha_matmul": adv.smooth_quant_alphas.matmul,
        "weights": "int8 symmetric (preset mixed); the embedding tables (Gather) too, weight only",
        "activations": "int8 asymmetric, per tensor, static ranges from the calibration (preset mixed)",
        "calibration": {"sentences": len(samples), "source": "calibration_sentences(): generated, not from the corpus",
                        "batch": 1, "tokens_min": min(lengths), "tokens_mean": statistics.mean(lengths),
                        "tokens_max": max(lengths)},
        "quantize_s": time.perf_counter() - t0}


def int8_layout(xml):
    """What the int8 IR holds, read from it: int8 weight constants by the op using them (each is
    Constant i8 -> Convert -> Multiply by a scale, a Subtract between would be a zero point), the
    scales' granularity, and the activations' FakeQuantize nodes with their range shapes."""
    import collections

    import openvino as ov

    weights, scales, zero_points, fq = collections.Counter(), set(), 0, collections.Counter()
    for op in ov.Core().read_model(xml).get_ordered_ops():
        if op.get_type_name() == "FakeQuantize":
            fq[f"levels {op.get_attributes()['levels']}, range shape {op.input_value(1).get_partial_shape()}"] += 1
        if op.get_type_name() != "Constant" or op.get_element_type().get_type_name() != "i8":
            continue
        prev, node = op, next(iter(op.output(0).get_target_inputs())).get_node()  # Convert
        while node.get_type_name() in ("Convert", "Subtract", "Multiply", "Reshape"):
            if node.get_type_name() == "Subtract":
                zero_points += 1
            if node.get_type_name() == "Multiply":
                scale = next(v for v in node.input_values() if v.get_node() is not prev).get_partial_shape()
                dims = [d.get_length() if d.is_static else -1 for d in scale]
                scales.add("per output channel" if len(dims) == 2 and dims[1] == 1 and dims[0] > 1
                           else "per tensor" if all(d == 1 for d in dims) else f"shape {dims}")
            prev, node = node, next(iter(node.output(0).get_target_inputs())).get_node()
        weights[node.get_type_name()] += 1
    return {"int8_weights_by_op": dict(weights), "weight_scales": sorted(scales), "weight_zero_points": zero_points,
            "activation_fake_quantize": dict(fq)}


def ov_file_mb(ir_dir):
    return sum(os.path.getsize(os.path.join(ir_dir, f)) for f in ("openvino_model.xml", "openvino_model.bin")) / 2**20


def bench_ov(model_dir, texts, threads, batch_sizes, singles, precision="f32"):
    """OpenVINO on the CPU: the float32 IR compiled with INFERENCE_PRECISION_HINT f32 (`ov`) or
    bf16 (`ov_bf16`), or the int8 IR with f32 for what stays in floating point (`ov_int8`); one
    stream, --threads inference threads. What ran is read back from the compiled model (its
    INFERENCE_PRECISION_HINT and the runtime graph's per-layer precisions)."""
    import collections

    import numpy as np
    import openvino as ov

    export_dir, tok, names = export_openvino(os.path.abspath(model_dir))
    ir_dir, quant = os.path.join(export_dir, "fp32"), {}
    if precision == "int8":
        corpus = set(texts)
        if CORPUS_PATH:
            corpus |= {line.rstrip("\n") for line in open(CORPUS_PATH, encoding="utf-8")}
        ir_dir, q = quantize_openvino(export_dir, tok, names, calibration_sentences(corpus))
        quant = {"quantization": {**q, **int8_layout(os.path.join(ir_dir, "openvino_model.xml")),
                                  "file_mb": ov_file_mb(ir_dir)}}
    hint = "f32" if precision == "int8" else precision
    core = ov.Core()
    config = {"INFERENCE_PRECISION_HINT": hint, "INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1}
    compiled = core.compile_model(core.read_model(os.path.join(ir_dir, "openvino_model.xml")), "CPU", config)
    ran = compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()
    request, output = compiled.create_infer_request(), compiled.output("last_hidden_state")
    encode = pooled_encoder(tok, names, lambda feed: request.infer(feed)[output])
    # The heavy layers (matrix products) by the precision the CPU plugin runs them in.
    layers = collections.Counter()
    for op in compiled.get_runtime_model().get_ordered_ops():
        rt = op.get_rt_info()
        kind = rt["layerType"].astype(str)
        if kind in ("FullyConnected", "MatMul", "ScaledDotProductAttention", "Convolution"):
            layers[f"{kind} {rt['runtimePrecision'].astype(str)}"] += 1

    check = {}
    if precision == "f32":
        # The exported IR gives sentence-transformers' vectors (checked, not assumed).
        from sentence_transformers import SentenceTransformer

        reference = SentenceTransformer(model_dir, device="cpu").encode(texts[:16], convert_to_numpy=True)
        check = {"max_abs_diff_vs_sentence_transformers": float(np.max(np.abs(encode(texts[:16]) - reference)))}
    name = {"f32": "OpenVINO fp32 (CPU)", "bf16": "OpenVINO bf16 (CPU)", "int8": "OpenVINO int8 static (CPU)"}[precision]
    if precision == "bf16" and ran != "bf16":
        name = f"OpenVINO bf16 requested, ran {ran} (CPU)"
    props = {p: str(compiled.get_property(p)) for p in ("INFERENCE_NUM_THREADS", "NUM_STREAMS", "PERFORMANCE_HINT")}
    return {"system": name, **measure(encode, texts, batch_sizes, singles),
            **versions("openvino", "optimum-intel", "nncf", "transformers", "torch"),
            "inference_precision_hint_requested": hint, "inference_precision_hint": ran, "compiled": props,
            "runtime_layers": dict(sorted(layers.items())),
            "cpu_capabilities": list(core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")),
            "ir_file_mb": ov_file_mb(ir_dir), **check, **quant}


SYSTEMS = {
    "st": lambda *a, vectors=0: bench_st(*a, vectors=vectors),
    "st_bf16": lambda *a, vectors=0: bench_st(*a, vectors=vectors, bf16=True),
    "ort": lambda *a, vectors=0: bench_ort(*a),
    "ort_int8": lambda *a, vectors=0: bench_ort(*a, int8=True),
    "ov": lambda *a, vectors=0: bench_ov(*a),
    "ov_bf16": lambda *a, vectors=0: bench_ov(*a, precision="bf16"),
    "ov_int8": lambda *a, vectors=0: bench_ov(*a, precision="int8"),
}
CORPUS_PATH = None  # --corpus (ov_int8's calibration sentences must not be among its lines)


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
    ap.add_argument("--reference", default=None)
    args = ap.parse_args()
    global CORPUS_PATH
    CORPUS_PATH = args.corpus
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local folders only: nothing from a model hub
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
    # batch when it ran, else --reference's file, else encoded here, batch 32).
    st = next((r for r in results if r["key"] == "st"), None)
    if st is not None:
        reference = st["_corpus_vectors"]
    elif args.reference:
        import numpy as np

        reference = np.load(args.reference)
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
