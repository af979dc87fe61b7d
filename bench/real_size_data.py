#!/usr/bin/env python3
"""The real-size bench's helpers (bench/real_size.sh): models of real embedding models' shapes
with seeded random weights, the PyTorch baseline, a memory and disk sampler, and the report.

gen OUT SHAPE DTYPE CORPUS
    A sentence-transformers directory of SHAPE with random weights stored as DTYPE
    (float32 or bfloat16) safetensors:
    - qwen2-1.5b: gte-Qwen2-1.5B-instruct's config.json as the Hub has it (qwen2, hidden 1536,
      28 layers, 12 query and 2 key/value heads, intermediate 8960, vocabulary 151,646, q/k/v
      biases, untied embeddings, rope_theta 1e6, 131,072 positions); 1.54 B parameters.
    - mistral-7b: e5-mistral-7b-instruct's (mistral, hidden 4096, 32 layers, 32 query and
      8 key/value heads, intermediate 14,336, vocabulary 32,000, sliding_window 4096,
      rope_theta 1e4, 32,768 positions); 7.11 B parameters.
    - bert-large: e5-large-v2's / bge-large-en-v1.5's (bert, hidden 1024, 24 layers, 16 heads,
      intermediate 4096, vocabulary 30,522, 512 positions, the pooler); 0.34 B parameters,
      mean pooling, the tokenizer padding on the right.
    Last-token pooling (mean for bert-large) and Normalize, as the models' modules.json say. The tokenizer is
    made up (the real ones cannot be downloaded here): decoder_data.py's Qwen byte-level BPE
    trained on the bench corpus to 4,000 tokens, appending <|endoftext|> and padding on the
    left, so the corpus's words are whole tokens as common English words are in the real
    vocabularies and the sentences have realistic lengths (about 35 tokens).
    The weights: tensor names and shapes from transformers' own model class built on the meta
    device (nothing allocated); values N(0, 0.02) for matrices and biases, 1 for RMSNorm
    and LayerNorm weights, each tensor from its own seeded generator. Each safetensors file is
    written tensor by tensor (the header first, from the shapes), so the generator never holds
    more than one tensor (a slice of 64 M values of it). The decoder models are sharded as
    save_pretrained shards them (files of at most 5 GB and model.safetensors.index.json, as
    their Hub checkpoints are); bert-large is one model.safetensors.
    Nothing is rewritten when OUT/done exists.

torch MODEL_DIR CORPUS --threads N --sentences N --batch N [--bf16] [--dtype float32|bfloat16] [--vectors N]
    sentence-transformers on PyTorch CPU: load time, first call, sentences/s, RSS / PSS.
    One JSON line.

sample OUT_CSV --postmaster PID --disk DIR [--interval S]
    Until killed (SIGTERM): every interval, each backend's (the postmaster's children) RSS,
    private (RssAnon) and file-mapped (RssFile) memory, the machine's MemAvailable, Cached,
    Dirty, Writeback, the bytes of the files under DIR (the prepared-file directory) and the
    used bytes of DIR's filesystem. Prints one JSON line of peaks when stopped.

procmem PID ...
    RSS, private (RssAnon), file-mapped (RssFile) memory and PSS of each process, MB. One JSON line.

evict FILE ...
    Drops the files' clean pages from the page cache (posix_fadvise DONTNEED), so that a load
    reads them from disk.

report RESULTS_JSONL OUT_JSON
    Prints the tables from the run's records (see bench/real_size.sh) and writes them all
    into OUT_JSON.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import sys
import tempfile
import time

SEED = 20261203
HERE = os.path.dirname(os.path.abspath(__file__))

# The Hub's config.json of each model, as its repository has it (ids of the made-up tokenizer:
# <|endoftext|> 0, <|im_start|> 1, <|im_end|> 2).
CONFIGS = {
    "qwen2-1.5b": {
        "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 0,
        "hidden_act": "silu", "hidden_size": 1536, "initializer_range": 0.02, "intermediate_size": 8960,
        "max_position_embeddings": 131072, "max_window_layers": 21, "model_type": "qwen2",
        "num_attention_heads": 12, "num_hidden_layers": 28, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": False,
        "torch_dtype": "float32", "use_cache": True, "use_sliding_window": False, "vocab_size": 151646,
    },
    "mistral-7b": {
        "architectures": ["MistralModel"], "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 0,
        "pad_token_id": 0, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
        "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "use_cache": False, "vocab_size": 32000,
    },
}
CONFIGS["bert-large"] = {
    "architectures": ["BertModel"], "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1, "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 4096,
    "layer_norm_eps": 1e-12, "max_position_embeddings": 512, "model_type": "bert", "num_attention_heads": 16,
    "num_hidden_layers": 24, "pad_token_id": 0, "position_embedding_type": "absolute", "type_vocab_size": 2,
    "torch_dtype": "float32", "vocab_size": 30522,
}
# The sentence-transformers model's max_seq_length (gte-Qwen2: 32768; e5-mistral: 4096;
# e5-large-v2: 512) and pooling (e5-large-v2: mean).
MAX_SEQ = {"qwen2-1.5b": 32768, "mistral-7b": 4096, "bert-large": 512}
POOLING = {"qwen2-1.5b": "lasttoken", "mistral-7b": "lasttoken", "bert-large": "mean"}
# Tiny copies of each shape, saved by sentence-transformers for the files other than the
# weights and config.json.
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=512)


def model_class(model_type):
    import transformers

    return {"qwen2": (transformers.Qwen2Config, transformers.Qwen2Model),
            "mistral": (transformers.MistralConfig, transformers.MistralModel),
            "bert": (transformers.BertConfig, transformers.BertModel)}[model_type]


def write_tokenizer(d, corpus):
    import importlib.util

    spec = importlib.util.spec_from_file_location("decoder_data", os.path.join(HERE, "decoder_data.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.write_tokenizer(d, corpus)


def write_st_files(out, shape, corpus):
    """Every file of the sentence-transformers directory but the weights and config.json,
    saved by sentence-transformers for a tiny model of the same class."""
    import shutil

    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    cfg_class, cls = model_class(CONFIGS[shape]["model_type"])
    with tempfile.TemporaryDirectory() as base, tempfile.TemporaryDirectory() as st_dir:
        write_tokenizer(base, corpus)
        if POOLING[shape] == "mean":
            # Absolute positions: padding on the right, as BERT tokenizers do (PyTorch's batch
            # would otherwise shift every padded input's positions).
            with open(os.path.join(base, "tokenizer_config.json")) as f:
                conf = json.load(f)
            conf["padding_side"] = "right"
            with open(os.path.join(base, "tokenizer_config.json"), "w") as f:
                json.dump(conf, f, indent=2)
        tiny = {k: v for k, v in CONFIGS[shape].items() if k not in ("architectures", "torch_dtype")}
        tiny.update({k: v for k, v in TINY.items() if k != "num_key_value_heads" or "num_key_value_heads" in tiny},
                    vocab_size=4096)
        cls(cfg_class(**tiny)).eval().save_pretrained(base, safe_serialization=True)
        te = Transformer(base, max_seq_length=MAX_SEQ[shape], model_kwargs={"dtype": torch.float32})
        st = SentenceTransformer(modules=[te, Pooling(te.get_embedding_dimension(), POOLING[shape]), Normalize()],
                                 device="cpu")
        st.save(st_dir, create_model_card=False, safe_serialization=True)
        for root, _, files in os.walk(st_dir):
            for f in files:
                rel = os.path.relpath(os.path.join(root, f), st_dir)
                if rel in ("model.safetensors", "config.json"):
                    continue
                os.makedirs(os.path.dirname(os.path.join(out, rel)) or out, exist_ok=True)
                shutil.copyfile(os.path.join(root, f), os.path.join(out, rel))
    # 1_Pooling's dimension: the real hidden size.
    pooling = os.path.join(out, "1_Pooling", "config.json")
    with open(pooling) as f:
        conf = json.load(f)
    key = "embedding_dimension" if "embedding_dimension" in conf else "word_embedding_dimension"
    conf[key] = CONFIGS[shape]["hidden_size"]
    with open(pooling, "w") as f:
        json.dump(conf, f, indent=2)


def tensor_shapes(shape):
    """(name, shape) of every tensor save_pretrained writes, from the class on the meta device."""
    import torch

    cfg_class, cls = model_class(CONFIGS[shape]["model_type"])
    config = cfg_class(**{k: v for k, v in CONFIGS[shape].items() if k not in ("architectures", "torch_dtype")})
    with torch.device("meta"):
        model = cls(config)
    return [(name, tuple(t.shape)) for name, t in model.state_dict().items()]


# Shards as transformers' save_pretrained writes them (max_shard_size "5GB"): the decoder
# models' checkpoints are sharded on the Hub (gte-Qwen2-1.5B-instruct: 2 files,
# e5-mistral-7b-instruct: 2); e5-large-v2 / bge-large-en-v1.5 ship one model.safetensors.
SHARD_BYTES = {"qwen2-1.5b": 5 * 10**9, "mistral-7b": 5 * 10**9, "bert-large": None}


def write_safetensors(out, shape, dtype):
    """The weights, one tensor at a time (see the module docstring): model.safetensors, or
    shards model-0000k-of-0000n.safetensors and model.safetensors.index.json."""
    tdtype, size = {"float32": ("F32", 4), "bfloat16": ("BF16", 2)}[dtype]
    tensors = tensor_shapes(shape)
    limit = SHARD_BYTES[shape]
    shards, current, current_bytes = [], [], 0
    for index, (name, dims) in enumerate(tensors):
        n = 1
        for d in dims:
            n *= d
        if limit and current and current_bytes + n * size > limit:
            shards.append(current)
            current, current_bytes = [], 0
        current.append((index, name, dims, n))
        current_bytes += n * size
    shards.append(current)
    names = (["model.safetensors"] if len(shards) == 1 else
             [f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors" for k in range(len(shards))])
    total, weight_map = 0, {}
    for file, shard in zip(names, shards):
        total += write_shard(os.path.join(out, file), shard, tdtype, size)
        weight_map.update({name: file for _, name, _, _ in shard})
    if len(shards) > 1:
        with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    return len(tensors), total, names


def write_shard(path, shard, st_dtype, size):
    """One safetensors file of `shard` [(index, name, shape, elements)]: the header from the
    shapes, then each tensor from its own seeded generator, 64 M values at a time."""
    import torch

    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for _, name, dims, n in shard:
        header[name] = {"dtype": st_dtype, "shape": list(dims), "data_offsets": [offset, offset + n * size]}
        offset += n * size
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for index, name, dims, n in shard:
            gen = torch.Generator().manual_seed(SEED * 1000 + index)
            per_row = n // dims[0]
            step = max(1, (1 << 26) // per_row)
            for r in range(0, dims[0], step):
                count = min(step, dims[0] - r)
                if len(dims) == 1 and "norm" in name.lower() and name.endswith("weight"):
                    t = torch.ones(count)
                else:
                    t = torch.empty(count * per_row).normal_(0.0, 0.02, generator=gen)
                t = t if st_dtype == "F32" else t.to(torch.bfloat16).view(torch.int16)
                f.write(t.numpy().tobytes())
    os.replace(tmp, path)
    return offset


def cmd_gen(out, shape, dtype, corpus):
    if os.path.exists(os.path.join(out, "done")):
        return 0
    os.makedirs(out, exist_ok=True)
    t0 = time.perf_counter()
    write_st_files(out, shape, corpus)
    config = dict(CONFIGS[shape], torch_dtype=dtype)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    count, nbytes, files = write_safetensors(out, shape, dtype)
    with open(os.path.join(out, "done"), "w") as f:
        json.dump({"seed": SEED, "shape": shape, "dtype": dtype, "tensors": count, "bytes": nbytes, "files": files,
                   "generate_s": time.perf_counter() - t0}, f)
    return 0


# ---------------------------------------------------------------------------------------
# Memory of a process


def memory_mb(pid="self"):
    """RSS, RssAnon, RssFile (from status) and PSS (smaps_rollup), MB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key = line.split(":")[0]
            if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM"):
                out[key] = int(line.split()[1]) / 1024
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    out["Pss"] = int(line.split()[1]) / 1024
    except OSError:
        pass
    return {"rss_mb": out.get("VmRSS", 0), "anon_mb": out.get("RssAnon", 0), "file_mb": out.get("RssFile", 0),
            "pss_mb": out.get("Pss", 0), "hwm_mb": out.get("VmHWM", 0)}


# ---------------------------------------------------------------------------------------
# PyTorch


def cmd_torch(args):
    import argparse

    ap = argparse.ArgumentParser(prog="torch")
    ap.add_argument("model")
    ap.add_argument("corpus")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sentences", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--bf16", action="store_true", help="matmuls under torch.autocast(bfloat16)")
    ap.add_argument("--dtype", default="float32", help="the dtype the weights are loaded in")
    ap.add_argument("--vectors", type=int, default=8)
    a = ap.parse_args(args)
    import contextlib

    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(a.threads)
    texts = [line.rstrip("\n") for line in open(a.corpus, encoding="utf-8") if line.strip()][:a.sentences]
    before = memory_mb()
    t0 = time.perf_counter()
    model = SentenceTransformer(a.model, device="cpu", model_kwargs={"dtype": getattr(torch, a.dtype)})
    load_s = time.perf_counter() - t0
    after_load = memory_mb()
    ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if a.bf16 else contextlib.nullcontext

    def encode(batch, bs):
        with torch.no_grad(), ctx():
            return np.asarray(model.encode(batch, batch_size=bs, convert_to_numpy=True), dtype=np.float32)

    t0 = time.perf_counter()
    encode([texts[0]], 1)
    first_ms = (time.perf_counter() - t0) * 1000
    t0 = time.perf_counter()
    vectors = encode(texts, a.batch)
    secs = time.perf_counter() - t0
    tokens = sum(len(model.tokenizer(t)["input_ids"]) for t in texts)
    name = "PyTorch " + ("bfloat16 autocast" if a.bf16 else a.dtype)
    print(json.dumps({"system": name, "torch": torch.__version__, "threads": a.threads, "sentences": len(texts),
                      "tokens": tokens, "batch": a.batch, "load_s": load_s, "first_call_ms": first_ms,
                      "sentences_per_s": len(texts) / secs, "memory_before_load": before,
                      "memory_after_load": after_load, "memory_after_run": memory_mb(),
                      "vectors": vectors[:a.vectors].tolist()}), flush=True)
    return 0


# ---------------------------------------------------------------------------------------
# Sampler


def meminfo():
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":")
            out[k] = int(v.split()[0]) / 1024
    return out


def children(ppid):
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == ppid:
            pids.append(int(d))
    return pids


def dir_bytes(d):
    total = 0
    for root, _, files in os.walk(d):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_blocks * 512
            except OSError:
                pass
    return total


def cmd_sample(args):
    import argparse

    ap = argparse.ArgumentParser(prog="sample")
    ap.add_argument("out")
    ap.add_argument("--postmaster", type=int, required=True)
    ap.add_argument("--disk", required=True)
    ap.add_argument("--interval", type=float, default=0.25)
    ap.add_argument("--kill-below-mb", type=float, default=0,
                    help="SIGKILL the largest backend when MemAvailable falls below this (0: never)")
    a = ap.parse_args(args)
    killed = None
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    t0 = time.time()
    base = meminfo()
    st = os.statvfs(a.disk)
    fs_base = (st.f_blocks - st.f_bfree) * st.f_frsize
    dir_base = dir_bytes(a.disk)
    peak = {"backend_rss_mb": 0, "backend_anon_mb": 0, "backend_file_mb": 0, "used_growth_mb": 0,
            "min_available_mb": base["MemAvailable"], "dirty_mb": 0, "writeback_mb": 0,
            "cached_growth_mb": 0, "dir_growth_mb": 0, "fs_growth_mb": 0}
    with open(a.out, "w") as out:
        out.write("t_s,pid,rss_mb,anon_mb,file_mb,available_mb,cached_mb,dirty_mb,writeback_mb,dir_mb,fs_used_growth_mb\n")
        while not stop:
            m = meminfo()
            st = os.statvfs(a.disk)
            fs = ((st.f_blocks - st.f_bfree) * st.f_frsize - fs_base) / 2**20
            dmb = (dir_bytes(a.disk) - dir_base) / 2**20
            top = (0, {"rss_mb": 0, "anon_mb": 0, "file_mb": 0})
            most_private = 0
            for pid in children(a.postmaster):
                try:
                    mem = _status_mb(pid)
                    # The kernel's OOM killer, if it must act, picks a backend first, not
                    # another process of the machine.
                    with open(f"/proc/{pid}/oom_score_adj", "w") as f:
                        f.write("1000")
                except OSError:
                    continue
                if mem["rss_mb"] > top[1]["rss_mb"]:
                    top = (pid, mem)
                most_private = max(most_private, mem["anon_mb"])
            pid, mem = top
            peak["any_backend_anon_mb"] = max(peak.get("any_backend_anon_mb", 0), most_private)
            if a.kill_below_mb and killed is None and pid and m["MemAvailable"] < a.kill_below_mb:
                os.kill(pid, signal.SIGKILL)
                killed = {"pid": pid, "at_s": time.time() - t0, "available_mb": m["MemAvailable"], **mem}
                print(f"sampler: MemAvailable {m['MemAvailable']:.0f} MB < {a.kill_below_mb:.0f} MB: killed backend "
                      f"{pid} (RSS {mem['rss_mb']:.0f} MB, private {mem['anon_mb']:.0f} MB)", file=sys.stderr, flush=True)
            for k in ("rss_mb", "anon_mb", "file_mb"):
                peak["backend_" + k] = max(peak["backend_" + k], mem[k])
            peak["min_available_mb"] = min(peak["min_available_mb"], m["MemAvailable"])
            peak["used_growth_mb"] = max(peak["used_growth_mb"], base["MemAvailable"] - m["MemAvailable"])
            peak["dirty_mb"] = max(peak["dirty_mb"], m["Dirty"])
            peak["writeback_mb"] = max(peak["writeback_mb"], m["Writeback"])
            peak["cached_growth_mb"] = max(peak["cached_growth_mb"], m["Cached"] - base["Cached"])
            peak["dir_growth_mb"] = max(peak["dir_growth_mb"], dmb)
            peak["fs_growth_mb"] = max(peak["fs_growth_mb"], fs)
            out.write(f"{time.time() - t0:.2f},{pid},{mem['rss_mb']:.0f},{mem['anon_mb']:.0f},{mem['file_mb']:.0f},"
                      f"{m['MemAvailable']:.0f},{m['Cached']:.0f},{m['Dirty']:.0f},{m['Writeback']:.0f},"
                      f"{dmb:.0f},{fs:.0f}\n")
            out.flush()
            time.sleep(a.interval)
    peak.update(seconds=time.time() - t0, mem_total_mb=base["MemTotal"], available_before_mb=base["MemAvailable"],
                cached_before_mb=base["Cached"], watchdog_killed=killed)
    print(json.dumps(peak), flush=True)
    return 0


def _status_mb(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key = line.split(":")[0]
            if key in ("VmRSS", "RssAnon", "RssFile"):
                out[key] = int(line.split()[1]) / 1024
    return {"rss_mb": out.get("VmRSS", 0), "anon_mb": out.get("RssAnon", 0), "file_mb": out.get("RssFile", 0)}


# ---------------------------------------------------------------------------------------
# Report


def _cos(a, b):
    import math

    dot = sum(x * y for x, y in zip(a, b))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def cmd_report(args):
    path, out = args
    records = [json.loads(line) for line in open(path) if line.strip()]
    machine = next(r for r in records if r["kind"] == "machine")
    pgs = [r for r in records if r["kind"] == "pg"]
    failed = [r for r in records if r["kind"] == "pg_failed"]
    torches = [r for r in records if r["kind"] == "torch"]
    flags = [f for f in machine["flags"].split() if f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")]
    print(f"CPU: {machine['cpu']}, {machine['cores']} cores, {machine['mem_total_mb'] / 1024:.1f} GiB; "
          f"flags: {' '.join(flags)}; {machine['threads']} threads; commit {machine['commit']}")

    def torch_of(shape, precision):
        want = {"float32": "PyTorch float32", "bfloat16": "PyTorch bfloat16 autocast"}[precision]
        if shape == "mistral-7b":
            want = "PyTorch bfloat16"
        return next((t for t in torches if t["shape"] == shape and t["system"] == want), None)

    def torch_f32(shape):
        return next((t for t in torches if t["shape"] == shape and t["system"] == "PyTorch float32"), None)

    print("\nspeed (first call: a fresh process or backend, the weights read or mapped; sentences/s: the first N"
          " corpus sentences in one call, after the first call)")
    print(f"{'model':11} {'system':28} {'load s':>7} {'first ms':>9} {'sent/s':>7} {'ratio':>6} {'tok/sent':>8} "
          f"{'min cos':>8}  load average before")
    for r in pgs:
        t = torch_of(r["shape"], r["precision"])
        f = r["fresh"]
        rate = f["sentences"] / (f["batch_ms"] / 1000)
        ratio = rate / t["sentences_per_s"] if t else float("nan")
        ref = torch_f32(r["shape"]) or t
        cos = min(_cos(a, b) for a, b in zip(f["vectors"], ref["vectors"])) if ref else float("nan")
        tokens = (f.get("tokens") or 0) / max(1, f["sentences"] + 1)
        r["summary"] = {"register_s": r["register"]["register_ms"] / 1000, "first_call_ms": f["first_call_ms"],
                        "sentences_per_s": rate, "ratio_to_torch": ratio, "min_cos_to_reference": cos,
                        "reference": ref["system"] if ref else None}
        print(f"{r['shape']:11} {'pg_embed ' + r['precision']:28} {r['register']['register_ms'] / 1000:7.1f} "
              f"{f['first_call_ms']:9.0f} {rate:7.2f} {ratio:6.2f} {tokens:8.1f} {cos:8.5f}  {r['load_register']} / {r['load_run']}")
        if t:
            tcos = "" if t is ref else f"{min(_cos(a, b) for a, b in zip(t['vectors'], ref['vectors'])):8.5f}"
            print(f"{r['shape']:11} {t['system']:28} {t['load_s']:7.1f} {t['first_call_ms']:9.0f} "
                  f"{t['sentences_per_s']:7.2f} {1:6.2f} {t['tokens'] / t['sentences']:8.1f} {tcos:>8}  {t['load']}")
    shown = {id(torch_of(r["shape"], r["precision"])) for r in pgs}
    for t in torches:
        if id(t) not in shown:
            print(f"{t['shape']:11} {t['system']:28} {t['load_s']:7.1f} {t['first_call_ms']:9.0f} "
                  f"{t['sentences_per_s']:7.2f} {'':6} {t['tokens'] / t['sentences']:8.1f} {'':>8}  {t['load']}")
    print("(load s: pg_embed's embed.register_model (read, prepare, write the shared file); PyTorch's"
          " SentenceTransformer(), which maps the safetensors file lazily: its reading is in its first call."
          " ratio: sentences/s over PyTorch's in the same precision. min cos: the first vectors against PyTorch float32's"
          " (bfloat16 against PyTorch bfloat16 for 7 B))")

    print("\nmemory, MB (RSS / PSS / private = RssAnon; the shared file is counted once in PSS)")
    print(f"{'model':11} {'precision':9} {'file':>6} {'limit':>6} {'reg. private':>12} {'then':>6} "
          f"{'fresh RSS':>9} {'PSS':>6} {'private':>7} {'peak':>5} {'N backends PSS':>14} {'private':>8}  per backend PSS")
    for r in pgs:
        file_mb = (r["register"].get("file_bytes") or 0) / 2**20
        a = r["fresh"]["after_run"]
        backends = list((r.get("backends") or {}).values())
        pss = sum(b["pss_mb"] for b in backends)
        anon = sum(b["anon_mb"] for b in backends)
        working = (r.get("run_sample") or {}).get("any_backend_anon_mb", float("nan"))
        r["memory"] = {"peak_private_while_computing_mb": working, "file_mb": file_mb, "predicted_mb": r["predicted_mb"],
                       "registering_private_mb": r["register"]["after_register"]["anon_mb"],
                       "registering_private_after_next_call_mb": r["register"]["after_next_call"]["anon_mb"],
                       "fresh_after_run": a, "backends": len(backends), "backends_pss_mb": pss, "backends_private_mb": anon}
        print(f"{r['shape']:11} {r['precision']:9} {file_mb:6.0f} {r['predicted_mb']:6.0f} "
              f"{r['register']['after_register']['anon_mb']:12.0f} {r['register']['after_next_call']['anon_mb']:6.0f} "
              f"{a['rss_mb']:9.0f} {a['pss_mb']:6.0f} {a['anon_mb']:7.0f} {working:5.0f} {f'{len(backends)}: {pss:.0f}':>14} {anon:8.0f}  "
              + ", ".join(f"{b['pss_mb']:.0f}" for b in backends))
    for t in torches:
        a = t["memory_after_run"]
        print(f"{t['shape']:11} {t['system']:28} RSS {a['rss_mb']:.0f}, PSS {a['pss_mb']:.0f}, private {a['anon_mb']:.0f},"
              f" file-mapped {a['file_mb']:.0f} after the run (peak RSS {a['hwm_mb']:.0f})")
    print("(file: the prepared file's size; limit: what pg_embed.max_model_size compares, from the headers;"
          " reg. private: the registering backend's private memory after register_model, then after its next"
          " call, which maps the file; fresh: a new backend after its first call and the sentences/s run; peak: the"
          " largest private memory of a backend while they computed, sampled as the run's sampler interval says)")

    print("\nregistration, peaks sampled every sampler interval (PG_EMBED_REALSIZE_INTERVAL, default 0.25 s), MB")
    print(f"{'model':11} {'precision':9} {'seconds':>7} {'RSS':>7} {'private':>7} {'machine':>8} {'min avail':>9} "
          f"{'dirty':>6} {'cache dir':>9} {'disk':>7}")
    for r in pgs + failed:
        s = r["sample"] or {}
        print(f"{r['shape']:11} {r['precision']:9} {s.get('seconds', 0):7.1f} {s.get('backend_rss_mb', 0):7.0f} "
              f"{s.get('backend_anon_mb', 0):7.0f} {s.get('used_growth_mb', 0):8.0f} {s.get('min_available_mb', 0):9.0f} "
              f"{s.get('dirty_mb', 0):6.0f} {s.get('dir_growth_mb', 0):9.0f} {s.get('fs_growth_mb', 0):7.0f}"
              + ("   FAILED" if r["kind"] == "pg_failed" else ""))
    print("(RSS, private: the largest backend's; machine: growth of MemTotal - MemAvailable; min avail: lowest"
          " MemAvailable; dirty: page cache not yet written; cache dir: bytes under pg_embed.cache_dir; disk: the"
          " filesystem's used bytes)")
    for r in failed:
        s = r["sample"] or {}
        print(f"\nFAILED: {r['shape']} {r['precision']} (limit {r['predicted_mb']} MB): {r['error'].strip()}")
        if s.get("watchdog_killed"):
            k = s["watchdog_killed"]
            print(f"  the sampler killed backend {k['pid']} at {k['at_s']:.1f} s: MemAvailable {k['available_mb']:.0f} MB,"
                  f" its RSS {k['rss_mb']:.0f} MB, private {k['anon_mb']:.0f} MB")
    with open(out, "w") as f:
        json.dump(records, f, indent=1)
    print(f"\nwrote {out}")
    return 0


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, rest = sys.argv[1], sys.argv[2:]
    if cmd == "gen" and len(rest) == 4:
        return cmd_gen(*rest)
    if cmd == "torch":
        return cmd_torch(rest)
    if cmd == "sample":
        return cmd_sample(rest)
    if cmd == "procmem":
        print(json.dumps({pid: memory_mb(pid) for pid in rest}))
        return 0
    if cmd == "evict":
        for path in rest:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        return 0
    if cmd == "report":
        return cmd_report(rest)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
