#!/usr/bin/env python3
"""The static-embedding bench's model and its baseline (bench/static.sh; issue 24).

``build OUT_DIR MINILM_DIR``: a sentence-transformers StaticEmbedding model of a real model's
shape, generated deterministically: all-MiniLM-L6-v2's tokenizer (``MINILM_DIR/tokenizer.json``,
the 30,522-token uncased WordPiece vocabulary, loaded with ``tokenizers.Tokenizer.from_file``;
its truncation to 128 and fixed padding are switched off, as in the published static models,
whose tokenizer.json has neither: StaticEmbedding never truncates) and a float32 embedding table
of 30,522 x 256, ``torch.randn`` with a generator seeded 0, times 0.1, saved with

    SentenceTransformer(modules=[StaticEmbedding(tokenizer, embedding_weights=table), Normalize()]).save(OUT_DIR)

(modules.json, 0_StaticEmbedding/{model.safetensors, tokenizer.json}, 1_Normalize/, ...). A vector
is the mean of the rows of the sentence's token ids (no [CLS]/[SEP]; nn.EmbeddingBag, mode mean),
L2-normalized. Nothing is rewritten when ``OUT_DIR/done`` exists; a non-empty OUT_DIR without it
is refused. Prints nothing but errors.

``baseline --model DIR --corpus FILE --threads T [--batch-sizes 32,256,2048] [--repeats 3]
[--singles 500] [--save-vectors FILE.npy]``: the model loaded with sentence-transformers on the
CPU, ``torch.set_num_threads(T)``, the tokenizer's own thread pool (Rust, rayon) also held to T
threads (RAYON_NUM_THREADS, TOKENIZERS_PARALLELISM=true, set before tokenizers is imported).
Measures on the corpus (one sentence per line):
  - sentences/s of ``model.encode(all_sentences, batch_size=B)``, best of ``--repeats`` runs
    after one warm-up run, for each B; the best B is the figure. The same again with the
    tokenizer on one thread (TOKENIZERS_PARALLELISM=false), for reference;
  - single-call p50/p99 of ``model.encode([sentence])`` over ``--singles`` calls (after 20
    warm-up calls), the sentence being bench/latency.sh's (13 words, 13 tokens here);
and prints one JSON object. ``--save-vectors`` writes the corpus vectors of the best run
(float32, corpus order, [sentences, 256]) for bench/static.sh's accuracy check. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

SEED = 0
SCALE = 0.1
DIM = 256
# bench/latency.sh's sentence (bench/static.sh times pg_embed's single calls with it too).
SENTENCE = "The quick brown fox jumps over the lazy dog near the river bank"


def build(out: str, minilm: str) -> int:
    if os.path.exists(os.path.join(out, "done")):
        return 0
    if os.path.isdir(out) and os.listdir(out):
        sys.exit(f"{out} exists, is not empty and has no 'done' file: not writing the bench model over it")
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, StaticEmbedding
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(os.path.join(minilm, "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    vocab = tokenizer.get_vocab_size()
    g = torch.Generator().manual_seed(SEED)
    table = (torch.randn((vocab, DIM), generator=g, dtype=torch.float32) * SCALE).contiguous()
    model = SentenceTransformer(modules=[StaticEmbedding(tokenizer, embedding_weights=table), Normalize()],
                                device="cpu")
    os.makedirs(out, exist_ok=True)
    model.save(out, create_model_card=False, safe_serialization=True)
    with open(os.path.join(out, "done"), "w") as f:
        json.dump({"tokenizer": os.path.join(os.path.abspath(minilm), "tokenizer.json"), "vocab": vocab, "dim": DIM,
                   "table": f"torch.randn(({vocab}, {DIM}), generator seeded {SEED}) * {SCALE}, float32",
                   "modules": ["StaticEmbedding", "Normalize"]}, f)
    return 0


def percentiles(samples):
    s = sorted(samples)
    return s[int(round(0.5 * (len(s) - 1)))], s[min(len(s) - 1, int(round(0.99 * (len(s) - 1))))]


def baseline(args) -> int:
    # Before tokenizers (imported by sentence-transformers) starts its thread pool.
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    import numpy as np
    import sentence_transformers
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(args.threads)
    texts = [line.rstrip("\n") for line in open(args.corpus, encoding="utf-8") if line.strip()]
    t0 = time.perf_counter()
    model = SentenceTransformer(args.model, device="cpu")
    load_ms = (time.perf_counter() - t0) * 1000
    static = model[0]
    tokens = sum(len(ids) for ids in (e.ids for e in static.tokenizer.encode_batch(texts, add_special_tokens=False)))

    def encode(batch, bs):
        with torch.inference_mode():
            return model.encode(batch, batch_size=bs, convert_to_numpy=True, show_progress_bar=False)

    def throughput(sizes):
        runs, best = [], None
        for bs in sizes:
            encode(texts, bs)  # warm-up
            secs = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                out = encode(texts, bs)
                secs.append(time.perf_counter() - t0)
            rate = len(texts) / min(secs)
            runs.append({"batch_size": bs, "sentences_per_s": rate, "seconds": secs})
            if best is None or rate > best[1]:
                best = (bs, rate, out)
        return runs, best

    sizes = [int(b) for b in args.batch_sizes.split(",")]
    runs, best = throughput(sizes)
    # The tokenizer on one thread (encode_batch serial), the same batch size.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    serial_runs, serial_best = throughput([best[0]])
    os.environ["TOKENIZERS_PARALLELISM"] = "true"

    for _ in range(20):
        encode([SENTENCE], 32)
    lat = []
    for _ in range(args.singles):
        t0 = time.perf_counter()
        encode([SENTENCE], 32)
        lat.append((time.perf_counter() - t0) * 1000)
    p50, p99 = percentiles(lat)

    vectors = np.asarray(best[2], dtype=np.float32)
    if args.save_vectors:
        np.save(args.save_vectors, vectors)
    print(json.dumps({
        "system": "sentence-transformers StaticEmbedding (PyTorch CPU)",
        "sentences_per_s": best[1], "best_batch": best[0], "runs": runs,
        "sentences_per_s_tokenizer_1_thread": serial_best[1], "runs_tokenizer_1_thread": serial_runs,
        "single_p50_ms": p50, "single_p99_ms": p99, "singles": args.singles,
        "single_sentence": SENTENCE,
        "single_sentence_tokens": len(static.tokenizer.encode(SENTENCE, add_special_tokens=False).ids),
        "sentences": len(texts), "corpus_tokens": tokens, "dim": int(vectors.shape[1]),
        "max_norm_error": float(np.abs(np.linalg.norm(vectors.astype(np.float64), axis=1) - 1).max()),
        "load_ms": load_ms, "threads": args.threads, "torch_threads": torch.get_num_threads(),
        "tokenizer_threads": args.threads, "repeats": args.repeats,
        "torch": torch.__version__, "sentence_transformers": sentence_transformers.__version__,
    }), flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("out")
    b.add_argument("minilm")
    r = sub.add_parser("baseline")
    r.add_argument("--model", required=True)
    r.add_argument("--corpus", required=True)
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--batch-sizes", default="32,256,2048")
    r.add_argument("--repeats", type=int, default=3)
    r.add_argument("--singles", type=int, default=500)
    r.add_argument("--save-vectors", default=None)
    args = ap.parse_args()
    if args.cmd == "build":
        return build(args.out, args.minilm)
    return baseline(args)


if __name__ == "__main__":
    sys.exit(main())
