#!/usr/bin/env python3
"""Generate tiny seeded CSR sparse encoders (a dense model, then a top-k SparseAutoEncoder) and their golden outputs.

Usage:
    HF_HUB_OFFLINE=1 bench/.venv/bin/python scripts/gen_csr_fixtures.py --out tests/fixtures/sparse/csr

Nothing is downloaded.  The script

1. builds the shared tiny BERT backbone and WordPiece tokenizer of ``scripts/gen_fixtures.py``
   (its own builders; the backbone's model.safetensors and tokenizer.json are checked against
   the sha256 that tests/fixtures/README.md records);
2. wraps it into ``SparseEncoder`` directories of sentence-transformers 6.2: ``Transformer``,
   ``Pooling``, optionally ``Dense``, then ``SparseAutoEncoder`` whose parameters (``pre_bias``,
   ``encoder.weight``, ``latent_bias``; the decoder is tied to the encoder) are redrawn from a
   seeded generator, saved with ``SparseEncoder.save``;
3. reloads every saved directory and records what ``SparseEncoder.encode`` returns for it
   (the model's own ``max_active_dims`` and explicit ones), the dense input of the
   autoencoder, and what ``SparseEncoder.decode`` makes of the latents, in ``<out>/golden.json``.

The top-k selection is checked to be robust: for every case and every k recorded, the k-th and
(k+1)-th largest pre-activations differ by at least MARGIN, and no kept pre-activation lies
within MARGIN of zero (where relu would decide), so a float32 reimplementation must pick the
same latents.  The output is deterministic: running the script twice gives byte-identical files.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixturelib.common import chmod_tree, dir_size, floats, offline, render, sha256, write_golden  # noqa: E402

offline()
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import gen_fixtures  # noqa: E402  (the shared tokenizer and backbone builders)

# tests/fixtures/README.md: the shared backbone's files.
BACKBONE_SHA256 = "56da146b56b7837423a322ec7356df6a0efa0a51918e6f2d1afbfc34005f969e"
TOKENIZER_SHA256 = "1b17e8d54aff0e028277e1322ec2f87863196f7b9d660ccb087c3eafc03282ee"
HIDDEN = gen_fixtures.HIDDEN
MAX_SEQ_LENGTH = gen_fixtures.MAX_SEQ_LENGTH
ENCODER_STD = 0.5       # encoder.weight ~ N(0, s)
BIAS_STD = 0.2          # pre_bias, latent_bias ~ N(0, s)
DENSE_STD = 0.5
MARGIN = 1e-3
DECODE_TOP_K = 5

# name: pooling, Dense (in, out, seed) or None, SparseAutoEncoder settings, the model's
# max_active_dims (None: SparseEncoder takes the autoencoder's k), explicit max_active_dims
# recorded, seed, and a shift added to latent_bias (negative: some of the top-k latents are
# negative, and relu zeroes them: fewer than k active in at least half the cases, none empty;
# checked).
MODELS = {
    "csr_mean": {
        "pooling": "mean", "dense": None,
        "sae": {"input_dim": HIDDEN, "hidden_dim": 4 * HIDDEN, "k": 8, "k_aux": 32, "normalize": False},
        "max_active_dims": None, "explicit": [3, 16], "seed": 71, "latent_shift": 0.0,
    },
    # A Dense head before the autoencoder, its layer normalisation on, and a model-level
    # max_active_dims (6) other than the autoencoder's k (4): encode's top-k takes 6.
    "csr_dense_normalize": {
        "pooling": "cls", "dense": (HIDDEN, 16, 72),
        "sae": {"input_dim": 16, "hidden_dim": 64, "k": 4, "k_aux": 16, "normalize": True},
        "max_active_dims": 6, "explicit": [2], "seed": 73, "latent_shift": -3.0,
    },
}

CASES: list[tuple[str, str]] = [
    ("short", "Hello world"),
    ("sentence", "The quick brown fox jumps over the lazy dog."),
    ("question", "How are you today?"),
    ("mixed_case", "Postgres Stores VECTORS in the Database"),
    ("repeated_word", "data data data data"),
    ("punct_digits", "The price went up by 5% - from $20 to $21!"),
    ("empty", ""),
    ("oov_word", "The na\u00efve fox visited Stra\u00dfe"),
    ("long_truncated",
     "Search engines rank each document by its similarity to the query, and the database keeps "
     "growing every day, so the extension computes embeddings for every new row inside Postgres."),
]
DECODE_CASES = ("sentence",)


def build(name: str, spec: dict, backbone_dir: str, out_dir: str) -> None:
    import torch
    from torch import nn
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sentence_transformer.modules import Dense, Pooling, Transformer
    from sentence_transformers.sparse_encoder.modules import SparseAutoEncoder

    modules = [Transformer(backbone_dir, max_seq_length=MAX_SEQ_LENGTH), Pooling(HIDDEN, pooling_mode=spec["pooling"])]
    if spec["dense"]:
        d_in, d_out, seed = spec["dense"]
        torch.manual_seed(seed)
        dense = Dense(d_in, d_out, bias=True, activation_function=nn.Tanh())
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            dense.linear.weight.copy_(torch.randn(dense.linear.weight.shape, generator=g) * DENSE_STD)
            dense.linear.bias.copy_(torch.randn(dense.linear.bias.shape, generator=g) * DENSE_STD)
        modules.append(dense)
    torch.manual_seed(spec["seed"])
    sae = SparseAutoEncoder(**spec["sae"])
    g = torch.Generator().manual_seed(spec["seed"])
    with torch.no_grad():
        for pname, p in sorted(sae.named_parameters(), key=lambda kv: kv[0]):
            std = ENCODER_STD if pname == "encoder.weight" else BIAS_STD
            p.copy_(torch.randn(p.shape, generator=g) * std)
        sae.latent_bias.add_(spec["latent_shift"])
    modules.append(sae)
    model = SparseEncoder(modules=modules, device="cpu", max_active_dims=spec["max_active_dims"])
    model.save(out_dir, create_model_card=False, safe_serialization=True)
    for fn in ("vocab.txt", "special_tokens_map.json"):
        if not os.path.exists(os.path.join(out_dir, fn)):
            shutil.copyfile(os.path.join(backbone_dir, fn), os.path.join(out_dir, fn))


def sparse_row(t, dim: int):
    import numpy as np
    import torch

    if not t.is_sparse or t.dtype != torch.float32 or t.shape[-1] != dim:
        raise SystemExit(f"unexpected encode output {t.layout} {t.dtype} {tuple(t.shape)}")
    t = t.coalesce()
    idx, val = t.indices()[-1].numpy(), t.values().numpy()
    keep = val != 0
    idx, val = idx[keep], val[keep]
    order = np.argsort(idx, kind="stable")
    return [int(i) for i in idx[order]], floats(val[order])


def check_margins(name: str, cname: str, pre, k: int) -> None:
    import torch

    top = torch.sort(pre, descending=True).values
    if k < len(top) and float(top[k - 1] - top[k]) < MARGIN:
        raise SystemExit(f"{name}/{cname}: k={k}: the {k}th and {k + 1}th pre-activations are within {MARGIN}")
    if float(top[:k].abs().min()) < MARGIN:
        raise SystemExit(f"{name}/{cname}: k={k}: a kept pre-activation is within {MARGIN} of zero")


def run(name: str, spec: dict, folder: str, stats: dict) -> dict:
    import numpy as np
    import torch
    from sentence_transformers import SparseEncoder

    model = SparseEncoder(folder, device="cpu")
    model.eval()
    sae = model[-1]
    dim = int(model.get_embedding_dimension())
    default_k = model.max_active_dims
    desc = {"kind": "csr", "modules": [type(m).__name__ for m in model], "dim": dim,
            "max_seq_length": int(model.max_seq_length), "similarity_fn_name": model.similarity_fn_name,
            "model_max_active_dims": default_k, "sae_config": sae.get_config_dict(),
            "vocab_size": len(model.tokenizer.get_vocab()), "seed": spec["seed"],
            "dense": list(spec["dense"]) if spec["dense"] else None, "pooling": spec["pooling"]}
    from safetensors import safe_open
    with safe_open(os.path.join(folder, sae_folder(folder), "model.safetensors"), "pt") as f:
        desc["sae_tensors"] = {k: list(f.get_slice(k).get_shape()) for k in sorted(f.keys())}
    cases = []
    for cname, text in CASES:
        c = {"name": cname, "text": text, "input_ids": model.preprocess([text])["input_ids"][0].tolist()}
        with torch.inference_mode():
            feats = model.preprocess([text])
            for module in list(model)[:-1]:
                feats = module(feats)
            x = feats["sentence_embedding"]
            c["sae_input"] = floats(x[0].numpy())
            xp, _ = sae.prepare(x)
            pre = sae.encode_pre_act(xp)[0]
        for k in [default_k] + spec["explicit"]:
            check_margins(name, cname, pre, k)
        e = model.encode([text], batch_size=1, convert_to_sparse_tensor=True, show_progress_bar=False)
        c["indices"], c["values"] = sparse_row(e, dim)
        if len(c["indices"]) > default_k:
            raise SystemExit(f"{name}/{cname}: {len(c['indices'])} active, more than {default_k}")
        for k in spec["explicit"]:
            e = model.encode([text], batch_size=1, convert_to_sparse_tensor=True, show_progress_bar=False,
                             max_active_dims=k)
            c[f"indices_max_active_dims_{k}"], c[f"values_max_active_dims_{k}"] = sparse_row(e, dim)
        c["nnz"] = len(c["indices"])
        cases.append(c)
    # Padded batch vs one at a time.
    b = model.encode([t for _, t in CASES], batch_size=len(CASES), convert_to_tensor=True,
                     convert_to_sparse_tensor=False, show_progress_bar=False).numpy()
    worst = 0.0
    for row, c in zip(b, cases):
        s = np.zeros(dim, dtype=np.float32)
        s[c["indices"]] = c["values"]
        worst = max(worst, float(np.max(np.abs(row - s) / np.maximum(1.0, np.abs(s)))))
    stats[f"{name}_batched_vs_single_max_rel_diff"] = worst
    if worst > 1e-4:
        raise SystemExit(f"{name}: batched differs from single by {worst}")
    desc["nnz_min_max"] = [min(c["nnz"] for c in cases), max(c["nnz"] for c in cases)]
    partial = sum(0 < c["nnz"] < default_k for c in cases)
    if spec["latent_shift"] < 0 and (partial < len(cases) // 2 or desc["nnz_min_max"][0] == 0):
        raise SystemExit(f"{name}: {partial} cases with some but not all of the top {default_k} zeroed by relu, "
                         f"nnz {desc['nnz_min_max']}")
    decode = []
    for c in cases:
        if c["name"] in DECODE_CASES:
            emb = torch.sparse_coo_tensor(torch.tensor([c["indices"]]), torch.tensor(c["values"]), (dim,))
            dec = model.decode(emb, top_k=DECODE_TOP_K)
            decode.append({"case": c["name"], "top_k": DECODE_TOP_K, "tokens": [t for t, _ in dec],
                           "weights": [float(w) for _, w in dec]})
    desc["decode"] = decode
    return {**desc, "cases": cases}


def sae_folder(folder: str) -> str:
    with open(os.path.join(folder, "modules.json"), encoding="utf-8") as fh:
        return json.load(fh)[-1]["path"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="tests/fixtures/sparse/csr")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    import logging
    import warnings

    import numpy as np
    import safetensors
    import tokenizers
    import torch
    import transformers
    import sentence_transformers

    transformers.logging.set_verbosity_error()
    logging.getLogger("sentence_transformers").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(args.threads)
    torch.set_default_dtype(torch.float32)

    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    for n in MODELS:
        shutil.rmtree(os.path.join(out, n), ignore_errors=True)
    work = tempfile.mkdtemp(prefix="pg_embed_csr_fixtures_")
    try:
        backbone = os.path.join(work, "backbone")
        os.makedirs(backbone)
        vocab_size = gen_fixtures.build_tokenizer(backbone)
        gen_fixtures.build_backbone(backbone, vocab_size)
        for fn, want in (("model.safetensors", BACKBONE_SHA256), ("tokenizer.json", TOKENIZER_SHA256)):
            if sha256(os.path.join(backbone, fn)) != want:
                raise SystemExit(f"the shared backbone's {fn} is not the one tests/fixtures/README.md records")
        for name, spec in MODELS.items():
            build(name, spec, backbone, os.path.join(out, name))
            chmod_tree(os.path.join(out, name))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    stats: dict = {}
    models_out = {}
    for name, spec in MODELS.items():
        torch.manual_seed(0)
        models_out[name] = run(name, spec, os.path.join(out, name), stats)
        print(f"  {name}: {dir_size(os.path.join(out, name))} bytes, nnz {models_out[name]['nnz_min_max']}",
              file=sys.stderr)
    header = {
        "generator": {
            "script": "scripts/gen_csr_fixtures.py", "python": sys.version.split()[0],
            "sentence_transformers": sentence_transformers.__version__, "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__, "torch": torch.__version__,
            "safetensors": safetensors.__version__, "numpy": np.__version__,
            "device": "cpu", "dtype": "float32", "torch_threads": args.threads,
        },
        "backbone": "the shared BERT backbone and WordPiece tokenizer of scripts/gen_fixtures.py "
                    f"(model.safetensors sha256 {BACKBONE_SHA256})",
        "init": f"SparseAutoEncoder encoder.weight ~ N(0, {ENCODER_STD}), pre_bias and latent_bias ~ N(0, {BIAS_STD}), "
                f"drawn in sorted name order from a generator seeded with the model's seed; Dense ~ N(0, {DENSE_STD})",
        "margin": MARGIN,
        "fields": {
            "indices/values": "non-zero entries of model.encode([text], batch_size=1, convert_to_sparse_tensor=True): "
                              "0-based latent ids ascending, float32 values (the model's max_active_dims)",
            "indices_max_active_dims_K/values_max_active_dims_K": "the same with encode(max_active_dims=K): the "
                              "autoencoder's top-k takes K instead",
            "model_max_active_dims": "SparseEncoder.max_active_dims after loading: config_sentence_transformers.json's "
                                     "max_active_dims, else the autoencoder's k",
            "sae_input": "the sentence_embedding the SparseAutoEncoder receives (the modules before it)",
            "sae_tensors": "the tensors the SparseAutoEncoder folder's model.safetensors holds, with their shapes",
            "decode": "model.decode(embedding, top_k=5): sentence-transformers maps the latent ids through the "
                      "tokenizer's vocabulary (None past its end); the latents are not tokens",
        },
        "stats": dict(sorted(stats.items())),
    }
    text = render(header, models_out, group="models")
    if json.loads(text) != json.loads(json.dumps({**header, "models": models_out})):
        raise SystemExit("JSON round-trip mismatch")
    write_golden(os.path.join(out, "golden.json"), text)
    print(f"wrote {out}/golden.json: {len(text.encode())} bytes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
