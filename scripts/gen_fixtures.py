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
import hashlib
import json
import os
import shutil
import sys
import tempfile

# Must be set before importing huggingface_hub / transformers.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

# --------------------------------------------------------------------------
# Tokenizer corpus.  Plain English, hard-coded.  Changing it changes every fixture.
# --------------------------------------------------------------------------

CORPUS = """\
The quick brown fox jumps over the lazy dog near the river bank.
A small model can still produce useful sentence embeddings for testing.
Postgres stores the vectors, and the extension computes them inside the database.
Hello world! How are you today? I am fine, thank you very much.
The weather is nice and the sun is shining over the quiet village.
Tokenizers split text into words, and then into smaller word pieces.
Numbers like 1, 2, 3, 10, 42 and 2024 appear in many documents.
She reads a book in the library every Sunday morning before lunch.
Machine learning models learn patterns from large amounts of data.
Search engines rank each document by its similarity to the query.
The passage describes how a query is matched against stored passages.
A query asks a question; a passage answers it with some useful text.
Data, data and more data: the database keeps growing every day.
We tested the new search feature with short and long sentences.
The cat is sleeping on the warm windowsill while it is raining outside.
Please turn off the lights when you leave the room tonight.
Coffee and tea are popular drinks in the morning and in the afternoon.
Students learn to write clear sentences, short paragraphs and long essays.
Every table has rows and columns, and every row has a primary key.
The server answered the request quickly, and the user was happy.
Reading, writing and counting are the first things children learn at school.
Scientists measure the temperature of the ocean at different depths.
The train leaves the station at seven o'clock and arrives at nine.
Good tests compare the output of the new code with trusted reference values.
An index makes searching faster, but it also uses more memory and disk space.
Small changes in the input should give small changes in the output.
The museum opens at ten (except on Mondays) and closes at six.
Write the result to a file, then read it back and check that nothing changed.
My friend's dog doesn't like the rain, but it loves the snow.
Music, art and history are taught together in the new program.
"Hello," she said. "Is anyone there?" Nobody answered her question.
The price went up by 5% last year - from $20 to $21.
Use the command line: run the script, wait, and look at the logs.
Green trees, blue sky, white clouds and a bright yellow sun.
Embedding models turn every sentence into a vector of numbers.
The longest river in the country flows slowly towards the sea.
Running, jumping and swimming are good ways to stay healthy.
They were walking home when they noticed the lights were still on.
This sentence is repeated, repeated, and repeated again for counting.
Nothing is impossible when you work carefully, step by step.
Call 555-0199 between 6 and 8, or write to room 7 on floor 9.
"""

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
N_WHOLE_WORDS = 200  # most frequent corpus words (length >= 2) kept whole
N_PREFIXES = 50      # word-initial pieces (length 2..5) of words not kept whole
N_SUFFIXES = 50      # "##" continuation pieces (length 2..4)

# --------------------------------------------------------------------------
# Backbone.
# --------------------------------------------------------------------------

HIDDEN = 32
MAX_SEQ_LENGTH = 24
INIT_STD = 0.5          # Linear/Embedding weights and biases ~ N(0, INIT_STD)
LAYERNORM_STD = 0.2     # LayerNorm weight ~ 1 + N(0, s), bias ~ N(0, s)
BACKBONE_SEED = 0

# --------------------------------------------------------------------------
# Inputs.  Hard-coded; order is the order in golden.json.
# --------------------------------------------------------------------------

CASES: list[tuple[str, str]] = [
    ("short", "Hello world"),
    ("sentence", "The quick brown fox jumps over the lazy dog."),
    ("question", "How are you today?"),
    ("mixed_case", "PostgreSQL Stores VECTORS in the DataBase"),
    ("subwords", "Unbelievably, tokenizers were retokenizing it."),
    ("digits_punct", "Version 2.0 (2024-05-01), 99% done!"),
    ("accents", "Caf\u00e9 d\u00e9j\u00e0 vu, na\u00efve \u00fcber Stra\u00dfe"),
    ("emoji_unknown", "I love pizza \U0001f355 and coffee \u2615 \u2014 \u00a9 \u2122"),
    ("cjk", "\u65e5\u672c\u8a9e \u4e2d\u6587 mixed with English"),
    ("repeated_word", "data data data data data data"),
    ("repeated_chars", "a" * 12),
    ("empty", ""),
    ("single_char", "a"),
    ("single_punct", "."),
    ("whitespace_only", " \t\n  "),
    ("leading_trailing_ws", "   the sun is shining   "),
    ("control_chars", "tab\there\u0007bell\u200bzero width"),
    # 22 word tokens + [CLS] + [SEP] = exactly MAX_SEQ_LENGTH: fits, no truncation.
    ("at_limit_22_words", " ".join(["data"] * 22)),
    # 23 word tokens + 2 = 25: truncated by exactly one token.
    ("over_limit_23_words", " ".join(["data"] * 23)),
    ("long_truncated",
     "Search engines rank each document by its similarity to the query, and the database keeps "
     "growing every day, so the extension computes embeddings for every new row inside Postgres."),
]
MUST_TRUNCATE = {"over_limit_23_words", "long_truncated"}
MUST_FIT_EXACTLY = {"at_limit_22_words"}

PROMPTS = {"query": "query: ", "passage": "passage: "}
TRUNCATE_DIM = 8

# name -> spec.  Dense entries: (in, out, bias, activation class name in torch.nn, seed).
POOL_ORDER = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
FIXTURES: list[tuple[str, dict]] = [
    ("pool_cls", {"pooling": "cls"}),
    ("pool_mean", {"pooling": "mean", "token_embeddings": True}),
    ("pool_max", {"pooling": "max"}),
    ("pool_mean_sqrt_len_tokens", {"pooling": "mean_sqrt_len_tokens"}),
    ("pool_weightedmean", {"pooling": "weightedmean"}),
    ("pool_lasttoken", {"pooling": "lasttoken"}),
    ("pool_concat", {"pooling": POOL_ORDER, "batched": True}),
    ("dense_tanh", {"pooling": "mean", "dense": [(32, 16, True, "Tanh", 101)], "normalize": True,
                    "truncate_dim": TRUNCATE_DIM}),
    ("dense_chain", {"pooling": "cls", "dense": [(32, 24, False, "Identity", 102), (24, 8, True, "ReLU", 103)]}),
    ("dense_gelu", {"pooling": "mean", "dense": [(32, 16, True, "GELU", 104)]}),
    ("dense_sigmoid", {"pooling": "mean", "dense": [(32, 16, True, "Sigmoid", 105)]}),
    ("dense_leakyrelu", {"pooling": "mean", "dense": [(32, 16, True, "LeakyReLU", 106)]}),
    ("dense_silu", {"pooling": "mean", "dense": [(32, 16, True, "SiLU", 107)]}),
    ("dense_softplus", {"pooling": "mean", "dense": [(32, 16, True, "Softplus", 108)]}),
    ("prompts", {"pooling": "mean", "normalize": True, "prompts": PROMPTS, "include_prompt": True}),
    ("prompts_exclude", {"pooling": "mean", "normalize": True, "prompts": PROMPTS, "include_prompt": False}),
    # Every pooling mode with the prompt excluded (cls then picks the first token after the
    # prompt, weightedmean keeps the original position weights, ...).  Only the "query" prompt
    # is recorded here; "passage" behaves the same way and is covered by the two fixtures above.
    ("prompts_exclude_concat", {"pooling": POOL_ORDER, "prompts": PROMPTS, "include_prompt": False,
                                "prompt_names": ["query"]}),
    # Three modes in a non-legacy order: sentence-transformers 6.x concatenates as listed.
    ("pool_concat3", {"pooling": ("mean", "cls", "max")}),
    # A plain Hugging Face directory (no sentence-transformers files): sentence-transformers
    # wraps it with mean pooling; the backbone's pooler_output is recorded too.
    ("hf_plain", {"plain": True, "pooler_output": True}),
    # Mean pooling with no heads of its own, plus heads.safetensors holding two linear heads
    # that pg_embed applies from options; the golden values come from sentence-transformers
    # with the same weights as Dense modules (tanh with bias, then identity without), then
    # Normalize.
    ("user_head", {"pooling": "mean", "user_heads": [("proj", 32, 20, True, "Tanh", 201),
                                                      ("out", 20, 12, False, "Identity", 202)]}),
    # Dense with use_residual (sentence-transformers 6.x): x + f(Wx + b) when the widths
    # agree, else a bias-free residual projection of x is added.
    ("dense_residual", {"pooling": "mean", "dense": [(32, 32, True, "Tanh", 109, True),
                                                     (32, 16, True, "ReLU", 110, True)]}),
]

OWNED_FILES = {"golden.json"}  # plus every fixture directory; README.md is hand-written


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


def user_head_weights(d_in: int, d_out: int, bias: bool, seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    w = (torch.randn((d_out, d_in), generator=g) * INIT_STD).contiguous()
    b = (torch.randn((d_out,), generator=g) * INIT_STD).contiguous() if bias else None
    return w, b


def with_user_heads(fixture_dir: str, spec: dict):
    """The fixture as sentence-transformers runs it with its heads.safetensors as Dense modules."""
    import torch
    from torch import nn
    from safetensors.torch import load_file
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense, Normalize

    saved = load_file(os.path.join(fixture_dir, "heads.safetensors"))
    base = SentenceTransformer(fixture_dir, device="cpu")
    modules = list(base)
    for (prefix, d_in, d_out, bias, act, _seed) in spec["user_heads"]:
        dense = Dense(d_in, d_out, bias=bias, activation_function=getattr(nn, act)())
        with torch.no_grad():
            dense.linear.weight.copy_(saved[f"{prefix}.weight"])
            if bias:
                dense.linear.bias.copy_(saved[f"{prefix}.bias"])
        modules.append(dense)
    modules.append(Normalize())
    return SentenceTransformer(modules=modules, device="cpu")


def floats(v) -> list[float]:
    # v is a float32 numpy array; float(np.float32) is exact, and repr() of that
    # double round-trips to the same float32.
    return [float(x) for x in v.reshape(-1).tolist()]


def describe(model) -> dict:
    from sentence_transformers.sentence_transformer.modules import Dense, Normalize, Pooling, Transformer

    mods = list(model)
    desc: dict = {"modules": [type(m).__name__ for m in mods], "max_seq_length": int(model.max_seq_length)}
    dense = []
    desc["normalize"] = False
    for m in mods:
        if isinstance(m, Transformer):
            desc["hidden_size"] = int(m.auto_model.config.hidden_size)
        elif isinstance(m, Pooling):
            pm = m.pooling_mode
            desc["pooling_modes"] = [pm] if isinstance(pm, str) else list(pm)
            desc["include_prompt"] = bool(m.include_prompt)
            desc["pooling_output_dim"] = int(m.get_embedding_dimension())
        elif isinstance(m, Dense):
            dense.append({
                "in_features": int(m.in_features),
                "out_features": int(m.out_features),
                "bias": bool(m.bias),
                "activation_function": m.get_config_dict()["activation_function"],
                "use_residual": bool(getattr(m, "use_residual", False)),
            })
        elif isinstance(m, Normalize):
            desc["normalize"] = True
    desc["dense"] = dense
    dim_fn = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    desc["dim"] = int(dim_fn())
    desc["prompts"] = {k: v for k, v in sorted(model.prompts.items())}
    desc["similarity_fn_name"] = model.similarity_fn_name
    desc["default_prompt_name"] = model.default_prompt_name
    return desc


# --------------------------------------------------------------------------
# Independent reference (float64 NumPy) of the module pipeline, used only as a
# self-check that the semantics written in tests/fixtures/README.md are right.
# --------------------------------------------------------------------------

def reference_embedding(te, modes, prompt_length, dense, normalize):
    """te: (T, H) token embeddings of the (prompt +) text.  Returns float64 vector."""
    import math

    import numpy as np

    te = te.astype(np.float64)
    T = te.shape[0]
    keep = np.ones(T, dtype=bool)
    if prompt_length:
        keep[:prompt_length] = False          # [CLS] and the prompt's tokens
    idx = np.nonzero(keep)[0]
    parts = []
    for mode in modes:
        if mode == "cls":                     # first token that is not excluded
            parts.append(te[idx[0]] if len(idx) else te[0])
        elif mode == "max":
            parts.append(te[idx].max(axis=0))
        elif mode == "mean":
            parts.append(te[idx].sum(axis=0) / max(len(idx), 1e-9))
        elif mode == "mean_sqrt_len_tokens":
            parts.append(te[idx].sum(axis=0) / math.sqrt(max(len(idx), 1e-9)))
        elif mode == "weightedmean":          # weight = original position + 1
            w = (idx + 1).astype(np.float64)[:, None]
            parts.append((te[idx] * w).sum(axis=0) / max(w.sum(), 1e-9))
        elif mode == "lasttoken":
            parts.append(te[idx[-1]] if len(idx) else np.zeros(te.shape[1]))
        else:
            raise ValueError(mode)
    x = np.concatenate(parts)
    acts = {
        "Identity": lambda v: v,
        "Tanh": np.tanh,
        "ReLU": lambda v: np.maximum(v, 0.0),
        "GELU": lambda v: 0.5 * v * (1.0 + np.vectorize(math.erf)(v / math.sqrt(2.0))),  # exact (erf) GELU
        "Sigmoid": lambda v: 1.0 / (1.0 + np.exp(-v)),
        "LeakyReLU": lambda v: np.where(v >= 0, v, 0.01 * v),                              # slope 0.01
        "SiLU": lambda v: v / (1.0 + np.exp(-v)),
        "Softplus": lambda v: np.where(v > 20.0, v, np.log1p(np.exp(np.minimum(v, 20.0)))),  # beta 1, threshold 20
    }
    for (w, b, act, residual) in dense:
        y = w.astype(np.float64) @ x
        if b is not None:
            y = y + b.astype(np.float64)
        y = acts[act](y)
        if residual is not None:              # use_residual: identity or projection of the input
            y = y + (x if isinstance(residual, str) else residual.astype(np.float64) @ x)
        x = y
    if normalize:
        x = x / max(np.linalg.norm(x), 1e-12)
    return x


def run_fixture(name: str, spec: dict, fixture_dir: str, stats: dict) -> dict:
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    model = with_user_heads(fixture_dir, spec) if spec.get("user_heads") else \
        SentenceTransformer(fixture_dir, device="cpu")
    model.eval()
    model.float()
    desc = describe(model)
    stats["attn_implementation"] = model[0].auto_model.config._attn_implementation
    if desc["max_seq_length"] != (128 if spec.get("plain") else MAX_SEQ_LENGTH):
        raise SystemExit(f"{name}: max_seq_length {desc['max_seq_length']}")
    texts = [t for _, t in CASES]
    dim = desc["dim"]

    from sentence_transformers.sentence_transformer.modules import Dense
    def residual_of(m):
        if not getattr(m, "use_residual", False):
            return None
        return m.residual.weight.detach().numpy() if hasattr(m, "residual") else "identity"

    ref_dense = [(m.linear.weight.detach().numpy(),
                  m.linear.bias.detach().numpy() if m.bias else None,
                  type(m.activation_function).__name__, residual_of(m)) for m in model if isinstance(m, Dense)]

    def check_reference(text, got, prompt=None):
        feats = model.preprocess([text], prompt=prompt)
        with torch.inference_mode():
            te = model[0].auto_model(input_ids=feats["input_ids"], attention_mask=feats["attention_mask"],
                                     token_type_ids=feats.get("token_type_ids")).last_hidden_state[0].numpy()
        pl = feats.get("prompt_length") if not desc["include_prompt"] else None
        want = reference_embedding(te, desc["pooling_modes"], pl, ref_dense, desc["normalize"])
        rel = float(np.max(np.abs(want - got.astype(np.float64)) / np.maximum(1.0, np.abs(want))))
        stats["reference_max_rel_diff"] = max(stats.get("reference_max_rel_diff", 0.0), rel)
        if rel > 1e-5:
            raise SystemExit(f"{name}: NumPy reference differs from sentence-transformers by {rel} for {text!r}")

    def enc(batch, **kw):
        out = model.encode(batch, convert_to_numpy=True, show_progress_bar=False, **kw)
        if out.dtype != np.float32:
            raise SystemExit(f"{name}: non-float32 output {out.dtype}")
        return out

    def ids_of(text, prompt=None):
        feats = model.preprocess([text], prompt=prompt)
        if not all(int(m) == 1 for m in feats["attention_mask"][0].tolist()):
            raise SystemExit(f"{name}: unexpected padding for single input")
        return feats["input_ids"][0].tolist(), feats.get("prompt_length")

    cases = []
    for cname, text in CASES:
        input_ids, _ = ids_of(text)
        untrunc = len(model.tokenizer(text, add_special_tokens=True, truncation=False)["input_ids"])
        emb = enc([text], batch_size=1)[0]
        if emb.shape != (dim,):
            raise SystemExit(f"{name}/{cname}: bad shape {emb.shape}")
        if not spec.get("plain") and cname in MUST_TRUNCATE and not (untrunc > MAX_SEQ_LENGTH and len(input_ids) == MAX_SEQ_LENGTH):
            raise SystemExit(f"{cname}: expected truncation, got {untrunc} -> {len(input_ids)}")
        if not spec.get("plain") and cname in MUST_FIT_EXACTLY and not (untrunc == MAX_SEQ_LENGTH == len(input_ids)):
            raise SystemExit(f"{cname}: expected exactly {MAX_SEQ_LENGTH} tokens, got {untrunc}")
        c = {"name": cname, "text": text, "num_tokens": len(input_ids), "num_tokens_untruncated": untrunc,
             "input_ids": input_ids}
        if spec.get("token_embeddings"):
            te = model.encode([text], output_value="token_embeddings", batch_size=1,
                              convert_to_numpy=True, show_progress_bar=False)[0]
            te = te.detach().cpu().numpy() if torch.is_tensor(te) else np.asarray(te)
            if te.dtype != np.float32 or te.shape != (len(input_ids), desc["hidden_size"]):
                raise SystemExit(f"{name}/{cname}: token_embeddings {te.dtype} {te.shape}")
            # Same thing straight from the backbone (last_hidden_state).
            with torch.inference_mode():
                feats = model.preprocess([text])
                lhs = model[0].auto_model(input_ids=feats["input_ids"], attention_mask=feats["attention_mask"],
                                          token_type_ids=feats.get("token_type_ids")).last_hidden_state[0]
            d = float(np.max(np.abs(lhs.numpy() - te)))
            stats["token_embeddings_vs_last_hidden_state"] = max(stats.get("token_embeddings_vs_last_hidden_state", 0.0), d)
            c["token_embeddings"] = [floats(row) for row in te]
        c["embedding"] = floats(emb)
        check_reference(text, emb)
        if spec.get("pooler_output"):
            with torch.inference_mode():
                feats = model.preprocess([text])
                po = model[0].auto_model(input_ids=feats["input_ids"], attention_mask=feats["attention_mask"],
                                         token_type_ids=feats.get("token_type_ids")).pooler_output[0].numpy()
            # BertPooler: tanh(W h[CLS] + b), checked in float64.
            sd = model[0].auto_model.state_dict()
            w, b = sd["pooler.dense.weight"].numpy(), sd["pooler.dense.bias"].numpy()
            with torch.inference_mode():
                cls = model[0].auto_model(input_ids=feats["input_ids"], attention_mask=feats["attention_mask"],
                                          token_type_ids=feats.get("token_type_ids")).last_hidden_state[0, 0].numpy()
            want = np.tanh(w.astype(np.float64) @ cls.astype(np.float64) + b)
            stats["pooler_reference_max_abs_diff"] = max(stats.get("pooler_reference_max_abs_diff", 0.0),
                                                         float(np.max(np.abs(want - po))))
            c["pooler_output"] = floats(po)
        if spec.get("truncate_dim"):
            k = spec["truncate_dim"]
            t = enc([text], batch_size=1, truncate_dim=k)[0]
            tn = enc([text], batch_size=1, truncate_dim=k, normalize_embeddings=True)[0]
            if t.shape != (k,) or not np.array_equal(t, emb[:k]):
                raise SystemExit(f"{name}/{cname}: truncate_dim is not a plain slice")
            stats["truncate_dim_norm_range"] = (
                min(stats.get("truncate_dim_norm_range", (9.0, 0.0))[0], float(np.linalg.norm(t))),
                max(stats.get("truncate_dim_norm_range", (9.0, 0.0))[1], float(np.linalg.norm(t))))
            c[f"embedding_truncate_dim_{k}"] = floats(t)
            c[f"embedding_truncate_dim_{k}_normalized"] = floats(tn)
        if spec.get("prompts"):
            for pname in spec.get("prompt_names", sorted(spec["prompts"])):
                p_ids, p_len = ids_of(text, prompt=spec["prompts"][pname])
                pe = enc([text], batch_size=1, prompt_name=pname)[0]
                check_reference(text, pe, prompt=spec["prompts"][pname])
                # Prompt tokens == tokens of the prompt prepended to the text.
                if p_ids != ids_of(spec["prompts"][pname] + text)[0]:
                    raise SystemExit(f"{name}/{cname}: prompt ids != ids of prompt + text")
                lone = model.preprocess([spec["prompts"][pname]])["input_ids"][0].tolist()
                if p_len != len(lone) - 1 or p_ids[:p_len] != lone[:p_len]:
                    raise SystemExit(f"{name}/{cname}: prompt_length {p_len} does not match the lone prompt {lone}")
                pe2 = enc([spec["prompts"][pname] + text], batch_size=1)[0]
                key = f"{name}_prompt_vs_prepended_text_maxdiff"
                stats[key] = max(stats.get(key, 0.0), float(np.max(np.abs(pe - pe2))))
                c[f"input_ids_prompt_{pname}"] = p_ids
                c[f"prompt_length_{pname}"] = int(p_len)
                c[f"embedding_prompt_{pname}"] = floats(pe)
        cases.append(c)

    out = {"description": desc, "cases": cases}
    if spec.get("prompts"):
        plen = {}
        for pname in spec.get("prompt_names", sorted(spec["prompts"])):
            p = spec["prompts"][pname]
            plen[pname] = {"prompt": p,
                           "prompt_input_ids": model.preprocess([p])["input_ids"][0].tolist(),
                           "prompt_length": int(model[0]._get_prompt_length(p))}
        out["prompt_lengths"] = plen
    # Padded batch vs one input at a time, for every fixture (and every recorded prompt).
    variants = [("embedding", {})]
    if spec.get("prompts"):
        variants += [(f"embedding_prompt_{p}", {"prompt_name": p})
                     for p in spec.get("prompt_names", sorted(spec["prompts"]))]
    for key, kw in variants:
        single = np.stack([np.array(c[key], dtype=np.float32) for c in cases])
        batched = enc(texts, batch_size=len(texts), **kw)
        diff = float(np.max(np.abs(batched - single)))
        # Relative to max(1, |value|): un-normalized Dense outputs reach magnitudes of ~10.
        rel = float(np.max(np.abs(batched - single) / np.maximum(1.0, np.abs(single))))
        stats["batched_vs_single_max_abs_diff"] = max(stats.get("batched_vs_single_max_abs_diff", 0.0), diff)
        stats["batched_vs_single_max_rel_diff"] = max(stats.get("batched_vs_single_max_rel_diff", 0.0), rel)
        if rel > 1e-5 or (spec.get("batched") and diff > 1e-5):
            raise SystemExit(f"{name}/{key}: batched vs batch_size=1 differ by {diff} (rel {rel})")
        if spec.get("batched") and key == "embedding":
            out["batched_embeddings"] = [floats(row) for row in batched]
            out["batched_vs_single_max_abs_diff"] = diff
            stats[f"{name}_batched_vs_single_maxdiff"] = diff
    return out


# --------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------

def dump(o) -> str:
    return json.dumps(o, ensure_ascii=False, separators=(", ", ": "))


def render(header: dict, fixtures: dict, group: str = "fixtures") -> str:
    """The golden file: the header's keys, then `group` (one entry per fixture), one case
    per line block; scripts/gen_sparse_fixtures.py writes its "models" with it too."""
    lines = ["{"]
    for k, v in header.items():
        lines.append(f"  {json.dumps(k)}: {dump(v)},")
    lines.append(f"  {json.dumps(group)}: {{")
    names = list(fixtures)
    for fi, fname in enumerate(names):
        fx = fixtures[fname]
        lines.append(f"   {json.dumps(fname)}: {{")
        keys = list(fx)
        for ki, k in enumerate(keys):
            sep = "," if ki + 1 < len(keys) else ""
            if k == "cases":
                lines.append('    "cases": [')
                for ci, c in enumerate(fx["cases"]):
                    parts = [f"      {json.dumps(ck)}: {dump(cv)}" for ck, cv in c.items()]
                    lines.append("     {\n" + ",\n".join(parts) + "\n     }" + ("," if ci + 1 < len(fx["cases"]) else ""))
                lines.append("    ]" + sep)
            elif k == "batched_embeddings":
                lines.append('    "batched_embeddings": [')
                rows = fx[k]
                for ri, row in enumerate(rows):
                    lines.append("      " + dump(row) + ("," if ri + 1 < len(rows) else ""))
                lines.append("    ]" + sep)
            else:
                lines.append(f"    {json.dumps(k)}: {dump(fx[k])}{sep}")
        lines.append("   }" + ("," if fi + 1 < len(names) else ""))
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def dir_size(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for fn in files:
            total += os.path.getsize(os.path.join(root, fn))
    return total


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        h.update(fh.read())
    return h.hexdigest()


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
    with open(golden, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)
    os.chmod(golden, 0o644)

    print(f"wrote {golden}: {len(text.encode('utf-8'))} bytes; vocab_size={vocab_size}", file=sys.stderr)
    print(f"fixtures total: {dir_size(out)} bytes", file=sys.stderr)
    for k, v in sorted(stats.items()):
        print(f"  {k}: {v}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
