#!/usr/bin/env python3
"""Generate tiny seeded sentence-transformers fixture models and their golden outputs.

Usage:
    HF_HUB_OFFLINE=1 python scripts/gen_fixtures.py --out tests/fixtures

Nothing is downloaded.  The script

1. builds a tiny BERT WordPiece tokenizer (``tokenizers`` library: BertNormalizer
   with lowercasing, BertPreTokenizer, WordPiece model, [CLS]/[SEP] template
   post-processor) from the fixed English corpus below;
2. builds a tiny seeded random ``BertModel`` backbone (hidden 32, 2 layers, 4 heads)
   whose weights are re-initialised with a large standard deviation, so that token
   embeddings differ clearly from token to token;
3. wraps that backbone into one standalone sentence-transformers directory per
   fixture (every pooling mode, pooling concatenation, Dense heads with every common
   activation, prompts with and without ``include_prompt``), saved with
   ``SentenceTransformer.save``;
4. reloads every saved directory from disk and records what sentence-transformers
   returns for it in ``<out>/golden.json``.

The output is deterministic: running the script twice gives byte-identical files.
Floats are float32 values written as repr(float(x)), which round-trips exactly to
the same float32.

Why the vocabulary is not produced by ``tokenizers.trainers.WordPieceTrainer``:
that trainer breaks ties between equally frequent symbols/merges in hash-map order,
which is randomised per process, so two runs on the same corpus give different
vocabularies (different token sets, not just different ids).  The vocabulary is
therefore selected here with explicit, sorted tie-breaks, using the ``tokenizers``
library's own BertNormalizer and BertPreTokenizer to split the corpus; the resulting
``tokenizers.Tokenizer`` (WordPiece model) is what every fixture ships.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# dump, floats: gf.dump, gf.floats for the other generators
from fixturelib.common import dir_size, dump, floats, offline, render, sha256, write_golden  # noqa: E402,F401

# Must be set before importing huggingface_hub / transformers.
offline()
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

from fixturelib.fixtures_spec import (BACKBONE_SEED, CASES, CORPUS, FIXTURES, HIDDEN, INIT_STD,
    LAYERNORM_STD, MAX_SEQ_LENGTH, N_PREFIXES, N_SUFFIXES, N_WHOLE_WORDS, OWNED_FILES, SPECIALS)  # noqa: E402
from fixturelib.fixtures_run import run_fixture, user_head_weights  # noqa: E402


# --------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------

def build_vocab() -> list[str]:
    from tokenizers import normalizers, pre_tokenizers

    norm = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                      strip_accents=None, lowercase=True)
    pre = pre_tokenizers.BertPreTokenizer()
    words: list[str] = []
    for line in CORPUS.splitlines():
        words.extend(w for w, _ in pre.pre_tokenize_str(norm.normalize_str(line)))
    counts = collections.Counter(words)

    vocab: list[str] = list(SPECIALS)
    seen = set(vocab)

    def add(tok: str) -> None:
        if tok not in seen:
            seen.add(tok)
            vocab.append(tok)

    chars = sorted({c for w in words for c in w})
    for c in chars:
        add(c)
    for c in chars:
        add("##" + c)

    whole = [w for w in sorted(counts, key=lambda w: (-counts[w], w)) if len(w) >= 2][:N_WHOLE_WORDS]
    for w in whole:
        add(w)
    whole_set = set(whole)

    prefixes: collections.Counter = collections.Counter()
    suffixes: collections.Counter = collections.Counter()
    for w, n in counts.items():
        if not w.isalpha():
            continue
        for k in range(2, 5):
            if len(w) > k:
                suffixes["##" + w[-k:]] += n
        if w in whole_set:
            continue
        for k in range(2, 6):
            if len(w) > k:
                prefixes[w[:k]] += n
    for p in sorted(prefixes, key=lambda p: (-prefixes[p], -len(p), p))[:N_PREFIXES]:
        add(p)
    for s in sorted(suffixes, key=lambda s: (-suffixes[s], -len(s), s))[:N_SUFFIXES]:
        add(s)
    return vocab


def build_tokenizer(out_dir: str) -> int:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import BertTokenizerFast

    vocab = build_vocab()
    ids = {t: i for i, t in enumerate(vocab)}
    tok = Tokenizer(models.WordPiece(vocab=ids, unk_token="[UNK]", continuing_subword_prefix="##",
                                     max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=None, lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])],
    )
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.add_special_tokens(SPECIALS)  # already in the vocab: marks them special, ids unchanged
    assert tok.get_vocab_size() == len(vocab)

    hf = BertTokenizerFast(tokenizer_object=tok, do_lower_case=True, unk_token="[UNK]", sep_token="[SEP]",
                           pad_token="[PAD]", cls_token="[CLS]", mask_token="[MASK]")
    hf.save_pretrained(out_dir)
    # transformers 5 writes only tokenizer.json + tokenizer_config.json for a tokenizer built from a
    # tokenizer object.  Write the classic BERT side files too, so the directories look like real
    # models (vocab.txt: one token per line, line number == id).
    with open(os.path.join(out_dir, "vocab.txt"), "w", encoding="utf-8", newline="\n") as fh:
        fh.write("".join(t + "\n" for t in vocab))
    if not os.path.exists(os.path.join(out_dir, "special_tokens_map.json")):
        stm = {"cls_token": "[CLS]", "mask_token": "[MASK]", "pad_token": "[PAD]",
               "sep_token": "[SEP]", "unk_token": "[UNK]"}
        with open(os.path.join(out_dir, "special_tokens_map.json"), "w", encoding="utf-8", newline="\n") as fh:
            fh.write(json.dumps(stm, indent=2, sort_keys=True) + "\n")
    return len(vocab)


# --------------------------------------------------------------------------
# Backbone
# --------------------------------------------------------------------------

def build_backbone(out_dir: str, vocab_size: int) -> None:
    import torch
    from torch import nn
    from transformers import BertConfig, BertModel

    config = BertConfig(
        vocab_size=vocab_size,
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=128,
        hidden_act="gelu",
        pad_token_id=0,
    )
    torch.manual_seed(BACKBONE_SEED)
    model = BertModel(config)
    model.eval()
    g = torch.Generator().manual_seed(BACKBONE_SEED)
    with torch.no_grad():
        # Named, sorted iteration: the draw order does not depend on module registration details.
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            module_name = name.rsplit(".", 1)[0]
            module = model.get_submodule(module_name)
            if isinstance(module, (nn.Linear, nn.Embedding)):
                p.copy_(torch.randn(p.shape, generator=g) * INIT_STD)
            elif isinstance(module, nn.LayerNorm):
                base = 1.0 if name.endswith(".weight") else 0.0
                p.copy_(base + torch.randn(p.shape, generator=g) * LAYERNORM_STD)
            else:
                raise SystemExit(f"unexpected parameter {name} in {type(module).__name__}")
    model = model.to(torch.float32)
    model.save_pretrained(out_dir, safe_serialization=True)


# --------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------

def build_fixture(name: str, spec: dict, backbone_dir: str, out_dir: str) -> None:
    import torch
    from torch import nn
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense, Normalize, Pooling, Transformer

    if spec.get("plain"):
        shutil.copytree(backbone_dir, out_dir)
        return
    transformer = Transformer(backbone_dir, max_seq_length=MAX_SEQ_LENGTH)
    modules = [transformer,
               Pooling(HIDDEN, pooling_mode=spec["pooling"], include_prompt=spec.get("include_prompt", True))]
    for (d_in, d_out, bias, act, seed, *residual) in spec.get("dense", []):
        torch.manual_seed(seed)
        dense = Dense(d_in, d_out, bias=bias, activation_function=getattr(nn, act)(),
                      use_residual=bool(residual and residual[0]))
        with torch.no_grad():
            g = torch.Generator().manual_seed(seed)
            dense.linear.weight.copy_(torch.randn(dense.linear.weight.shape, generator=g) * INIT_STD)
            if bias:
                dense.linear.bias.copy_(torch.randn(dense.linear.bias.shape, generator=g) * INIT_STD)
            if hasattr(dense, "residual"):
                dense.residual.weight.copy_(torch.randn(dense.residual.weight.shape, generator=g) * INIT_STD)
        modules.append(dense)
    if spec.get("normalize"):
        modules.append(Normalize())
    model = SentenceTransformer(modules=modules, device="cpu", prompts=spec.get("prompts"),
                                default_prompt_name=None)
    model.save(out_dir, create_model_card=False, safe_serialization=True)
    if spec.get("user_heads"):
        from safetensors.torch import save_file

        tensors = {}
        for (prefix, d_in, d_out, bias, _act, seed) in spec["user_heads"]:
            w, b = user_head_weights(d_in, d_out, bias, seed)
            tensors[f"{prefix}.weight"] = w
            if b is not None:
                tensors[f"{prefix}.bias"] = b
        save_file(tensors, os.path.join(out_dir, "heads.safetensors"))
    # Side files transformers 5 does not copy on save (see build_tokenizer).
    for fn in ("vocab.txt", "special_tokens_map.json"):
        if not os.path.exists(os.path.join(out_dir, fn)):
            shutil.copyfile(os.path.join(backbone_dir, fn), os.path.join(out_dir, fn))


# --------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="tests/fixtures", help="output directory (default tests/fixtures)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads (default 1, for bit-reproducibility)")
    args = ap.parse_args()

    names = [n for n, _ in CASES]
    if len(names) != len(set(names)):
        raise SystemExit("duplicate case names")

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
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(args.threads)
    torch.set_default_dtype(torch.float32)

    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    fixture_names = [n for n, _ in FIXTURES]
    for n in fixture_names:
        shutil.rmtree(os.path.join(out, n), ignore_errors=True)
    for fn in OWNED_FILES:
        if os.path.exists(os.path.join(out, fn)):
            os.remove(os.path.join(out, fn))

    work = tempfile.mkdtemp(prefix="pg_embed_fixtures_")
    try:
        backbone = os.path.join(work, "backbone")
        os.makedirs(backbone)
        vocab_size = build_tokenizer(backbone)
        build_backbone(backbone, vocab_size)

        for fname, spec in FIXTURES:
            build_fixture(fname, spec, backbone, os.path.join(out, fname))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    # safetensors writes 0600 files; make everything readable (the test server runs as another user).
    for n in fixture_names:
        for root, dirs, files in os.walk(os.path.join(out, n)):
            for d in dirs:
                os.chmod(os.path.join(root, d), 0o755)
            for fn in files:
                os.chmod(os.path.join(root, fn), 0o644)
        os.chmod(os.path.join(out, n), 0o755)

    # Every fixture carries a byte-identical copy of the backbone and tokenizer.
    shared = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
              "vocab.txt", "special_tokens_map.json"]
    ref = {fn: sha256(os.path.join(out, fixture_names[0], fn)) for fn in shared}
    plain = {n for n, spec in FIXTURES if spec.get("plain")}
    for n in fixture_names[1:]:
        for fn in shared:
            # A plain directory keeps transformers' own config.json (use_cache) and
            # tokenizer_config.json (no model_max_length limit).
            if n in plain and fn in ("config.json", "tokenizer_config.json"):
                continue
            if sha256(os.path.join(out, n, fn)) != ref[fn]:
                raise SystemExit(f"{n}/{fn} differs from {fixture_names[0]}/{fn}")

    stats: dict = {}
    fixtures_out = {}
    for fname, spec in FIXTURES:
        torch.manual_seed(0)
        fixtures_out[fname] = run_fixture(fname, spec, os.path.join(out, fname), stats)
        print(f"  {fname}: dim={fixtures_out[fname]['description']['dim']} "
              f"{dir_size(os.path.join(out, fname))} bytes", file=sys.stderr)

    # The shared tokenizer must give the same ids in every fixture.
    first = fixtures_out[fixture_names[0]]["cases"]
    for n in fixture_names[1:]:
        for a, b in zip(first, fixtures_out[n]["cases"]):
            if n in plain:  # max length 128, not 24: the same ids up to the truncation
                if a["input_ids"][:-1] != b["input_ids"][:len(a["input_ids"]) - 1]:
                    raise SystemExit(f"{n}/{a['name']}: input_ids differ between fixtures")
            elif a["input_ids"] != b["input_ids"]:
                raise SystemExit(f"{n}/{a['name']}: input_ids differ between fixtures")

    header = {
        "generator": {
            "script": "scripts/gen_fixtures.py",
            "python": sys.version.split()[0],
            "sentence_transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
            "torch": torch.__version__,
            "safetensors": safetensors.__version__,
            "numpy": np.__version__,
            "device": "cpu",
            "dtype": "float32",
            "torch_threads": args.threads,
            "encode_call": "model.encode([text], convert_to_numpy=True, batch_size=1)",
            "attn_implementation": stats.pop("attn_implementation"),
        },
        "backbone": {
            "architecture": "BertModel",
            "vocab_size": vocab_size,
            "hidden_size": HIDDEN,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "intermediate_size": 64,
            "max_position_embeddings": 128,
            "hidden_act": "gelu",
            "seed": BACKBONE_SEED,
            "init": f"Linear/Embedding weights and biases ~ N(0, {INIT_STD}); "
                    f"LayerNorm weight ~ 1 + N(0, {LAYERNORM_STD}), bias ~ N(0, {LAYERNORM_STD})",
            "model_safetensors_sha256": ref["model.safetensors"],
            "tokenizer_json_sha256": ref["tokenizer.json"],
        },
        "max_seq_length": MAX_SEQ_LENGTH,
        "fields": {
            "input_ids": "model.preprocess([text])['input_ids'][0]: with [CLS]=2/[SEP]=3, truncated to max_seq_length, unpadded",
            "num_tokens_untruncated": "token count incl. special tokens before truncation",
            "embedding": "model.encode([text], convert_to_numpy=True, batch_size=1)[0] (the full module pipeline), float32",
            "token_embeddings": "pool_mean only: model.encode([text], output_value='token_embeddings')[0], i.e. the backbone's last_hidden_state, one row per input id",
            "embedding_truncate_dim_K": "dense_tanh only: model.encode([text], truncate_dim=K): a plain slice embedding[:K] of the normalized output, NOT renormalized",
            "embedding_truncate_dim_K_normalized": "dense_tanh only: model.encode([text], truncate_dim=K, normalize_embeddings=True): slice, then L2-normalize",
            "input_ids_prompt_P": "prompts fixtures: model.preprocess([text], prompt=prompts[P])['input_ids'][0], i.e. tokenization of prompt + text",
            "prompt_length_P": "prompts fixtures: number of leading tokens sentence-transformers treats as the prompt ([CLS] included, trailing [SEP] of the lone prompt excluded); with include_prompt=False these positions are dropped from pooling",
            "embedding_prompt_P": "prompts fixtures: model.encode([text], prompt_name=P, batch_size=1)[0]",
            "batched_embeddings": "pool_concat only: model.encode(all texts, batch_size=len(texts)), rows in case order",
            "pooler_output": "hf_plain only: the backbone's pooler_output (BertPooler: tanh(dense(last_hidden_state[:, 0])))",
            "user_head embedding": "user_head: sentence-transformers with heads.safetensors' tensors as Dense modules (proj: 32->20 with bias, Tanh; out: 20->12 no bias, Identity) then Normalize, appended to the saved mean-pooling model",
        },
        "stats": {k: (list(v) if isinstance(v, tuple) else v) for k, v in sorted(stats.items())},
    }
    text = render(header, fixtures_out)
    if json.loads(text) != json.loads(json.dumps({**header, "fixtures": fixtures_out})):
        raise SystemExit("JSON round-trip mismatch")
    golden = os.path.join(out, "golden.json")
    write_golden(golden, text)

    print(f"wrote {golden}: {len(text.encode('utf-8'))} bytes; vocab_size={vocab_size}", file=sys.stderr)
    print(f"fixtures total: {dir_size(out)} bytes", file=sys.stderr)
    for k, v in sorted(stats.items()):
        print(f"  {k}: {v}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
