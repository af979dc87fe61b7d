"""scripts/gen_compat_fixtures.py's inputs and the backbone every version saves: the library versions,
the texts, prompts and seeds, small helpers (versions, float lists, tensor digests) and Shared,
the seeded models built once per run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from fixturelib.common import ROOT


LIBS = ["st3.4.1", "st4.1.0", "st5.7.0", "st6.2.0", "m2v0.4.1", "m2v0.10.0"]
LIB_NAMES = {"st": "sentence-transformers", "m2v": "model2vec"}

# --------------------------------------------------------------------------
# Inputs.  The same list for every kind; order is the order in golden.json.
# --------------------------------------------------------------------------

MAX_SEQ_LENGTH = 24     # sentence-transformers models (as scripts/gen_fixtures.py)
M2V_MAX_LENGTH = 512    # model2vec's default token limit
# model2vec cuts the text to max_length * median_token_length characters before tokenizing; the
# median token length of the shared vocabulary is 4 (checked), so the cut is at 2048 characters.
M2V_CHAR_CUT = 512 * 4
_PAD_HEAD = "Search engines rank each document"
_PAD_TAIL = "database keeps growing"
# The tail starts 4 characters before the cut: model2vec keeps "data" of "database" and drops the
# rest; every other tokenizer sees the whole tail (whitespace makes no tokens).
PADDED = _PAD_HEAD + " " * (M2V_CHAR_CUT - 4 - len(_PAD_HEAD)) + _PAD_TAIL
# 700 one-character tokens (1399 characters, under the 2048-character cut: only model2vec's
# 512-token limit cuts it), about one in seven an unknown character.  model2vec 0.4.1 drops
# [UNK] ids and then keeps 512; 0.10 truncates to 512 tokens in the tokenizer (unknown ones
# counted) and then drops [UNK].
_CYCLE = ["a", "1", "b", "2", "c", "\u2615", "d", "3", "e", "?", "f", "4", "g", "\u00df"]


def _many() -> str:
    x, out = 12345, []
    for _ in range(700):  # a fixed linear congruential sequence picks the characters
        x = (1103515245 * x + 12345) % 2 ** 31
        out.append(_CYCLE[(x >> 16) % len(_CYCLE)])
    return " ".join(out)


MANY = _many()

CASES: list[tuple[str, str]] = [
    ("short", "Hello world"),
    ("sentence", "The quick brown fox jumps over the lazy dog."),
    ("empty", ""),
    # Emoji, CJK and other characters that are not in the vocabulary: only [UNK] ids.
    ("unknown_only", "\U0001f600\U0001f355 \u65e5\u672c\u8a9e \u2615 \u00df\u00df"),
    # 45 tokens: truncated to MAX_SEQ_LENGTH by the transformer models.
    ("long_truncated",
     "Search engines rank each document by its similarity to the query, and the database keeps "
     "growing every day, so the extension computes embeddings for every new row inside Postgres."),
    ("space_padded_2000", PADDED),
    ("many_tokens", MANY),
]
QUERY = "how do search engines rank documents?"     # the cross-encoder's first text
PROMPTS = {"query": "query: ", "passage": "passage: "}
CLIP_TEXTS = ["a photo of a cat", "", "a dog on the grass"]
CLIP_IMAGES = ["exact_32x32.png", "rgb_40x30.png", "large_300x200.png"]

SEEDS = {"dense": 301, "dense_query": 302, "dense_document": 303, "cross_head": 304,
         "static": 21, "model2vec": 23, "query_weights": 25}
MLM = ("bert", True, 11, -3.0)       # architecture, tied, seed, decoder bias shift (gen_sparse_fixtures)
STATIC_DIM = 16

# --------------------------------------------------------------------------
# Kinds: name, library, description.  What pg_embed does with a folder is decided per row in
# `expectation` below.
# --------------------------------------------------------------------------

KINDS: list[tuple[str, str, str]] = [
    ("dense", "st", "Transformer, Pooling mean, Dense 32->16 Tanh, Normalize"),
    ("pool_cls", "st", "Transformer, Pooling cls"),
    ("pool_max", "st", "Transformer, Pooling max"),
    ("pool_flags", "st", "Transformer, Pooling cls+max+mean made with the pooling_mode_* flags (legacy order)"),
    ("pool_list", "st", "Transformer, Pooling [mean, cls, max] given as a list (concatenated as listed)"),
    ("prompts", "st", "Transformer, Pooling mean, Normalize; prompts query/passage, default_prompt_name query"),
    ("prompts_exclude", "st", "as prompts with include_prompt false and no default prompt"),
    ("router", "st", "Transformer, Pooling mean, a query/document Router (Asym before 5.0) of Dense 32->16 Tanh, Normalize"),
    ("cross_encoder", "st", "CrossEncoder over BertForSequenceClassification, one label"),
    ("splade_mlm", "st", "SparseEncoder: MLMTransformer, SpladePooling max"),
    ("splade_fillmask", "st", "SparseEncoder: Transformer with transformer_task fill-mask, SpladePooling max"),
    ("inference_free", "st", "SparseEncoder: Router(query: SparseStaticEmbedding; document: Transformer fill-mask, SpladePooling)"),
    ("static", "st", "StaticEmbedding (dim 16), Normalize"),
    ("clip", "st", "the tiny CLIP of tests/fixtures/images/clip, texts and images"),
    ("model2vec", "m2v", "StaticModel(vectors, tokenizer, normalize=True).save_pretrained"),
    ("model2vec_distill", "m2v", "model2vec.distill() of the tiny BERT backbone (pca_dims 16), save_pretrained"),
]


class NotSaved(Exception):
    """This version cannot save this kind; the message says why."""


def lib_split(lib: str) -> tuple[str, str]:
    for p in LIB_NAMES:
        if lib.startswith(p) and lib[len(p):][:1].isdigit():
            return p, lib[len(p):]
    raise SystemExit(f"unknown --lib {lib}")


def version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


# --------------------------------------------------------------------------
# Shared weights, built by the running version
# --------------------------------------------------------------------------

def floats(v) -> list[float]:
    import numpy as np
    return [float(x) for x in np.asarray(v, dtype=np.float32).reshape(-1).tolist()]


def seeded_linear(linear, seed: int) -> None:
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(linear.weight.shape, generator=g) * 0.5)
        if linear.bias is not None:
            linear.bias.copy_(torch.randn(linear.bias.shape, generator=g) * 0.5)


def tensor_digest(state: dict) -> str:
    """sha256 over the sorted names, shapes and float32 bytes of a state dict."""
    h = hashlib.sha256()
    for k in sorted(state):
        t = state[k].detach().to("cpu").contiguous()
        h.update(k.encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.float().numpy().tobytes())
    return h.hexdigest()


class Shared:
    """The seeded inputs every kind is built from, in folders named relative to the current
    directory (a temporary one): libraries that record where a model came from
    (config.json's `_name_or_path`, model2vec's `tokenizer_name`) then record these names, not
    the temporary folder's."""

    def __init__(self):
        import gen_fixtures
        import gen_sparse_fixtures

        self.backbone = "tiny-bert"
        self.tok = "tokenizer"
        os.makedirs(self.backbone)
        os.makedirs(self.tok)
        self.vocab_size = gen_fixtures.build_tokenizer(self.tok)
        gen_fixtures.build_tokenizer(self.backbone)
        gen_fixtures.build_backbone(self.backbone, self.vocab_size)
        self.mlm = "tiny-bert-mlm"
        arch, tied, seed, shift = MLM
        gen_sparse_fixtures.build_mlm(arch, tied, seed, shift, self.vocab_size, self.tok, self.mlm)
        self.digests: dict = {}
        from transformers import BertForMaskedLM, BertModel
        self.digests["backbone"] = tensor_digest(BertModel.from_pretrained(self.backbone).state_dict())
        self.digests["mlm"] = tensor_digest(BertForMaskedLM.from_pretrained(self.mlm).state_dict())
        with open(os.path.join(self.tok, "vocab.txt"), encoding="utf-8") as fh:
            self.digests["vocab"] = hashlib.sha256(fh.read().encode()).hexdigest()

    def cross_encoder_dir(self) -> str:
        """The backbone with a seeded one-label sequence-classification head, as this
        transformers version saves it."""
        from transformers import BertForSequenceClassification
        out = "tiny-bert-seqcls"
        if not os.path.exists(out):
            m = BertForSequenceClassification.from_pretrained(self.backbone, num_labels=1)
            seeded_linear(m.classifier, SEEDS["cross_head"])
            m.eval()
            self.digests["cross_encoder"] = tensor_digest(m.state_dict())
            m.save_pretrained(out, safe_serialization=True)
            # As released cross-encoders do, the tokenizer carries the length limit
            # (sentence-transformers < 4 does not save CrossEncoder(max_length=...)).
            from transformers import AutoTokenizer
            AutoTokenizer.from_pretrained(self.tok, model_max_length=MAX_SEQ_LENGTH).save_pretrained(out)
            for fn in ("vocab.txt", "special_tokens_map.json"):
                if not os.path.exists(os.path.join(out, fn)):
                    shutil.copyfile(os.path.join(self.tok, fn), os.path.join(out, fn))
        return out

    def clip_dir(self) -> str:
        """tests/fixtures/images/clip (written by transformers 5) as this transformers version
        saves it: the same weights, tokenizer.json and image processor settings."""
        src = os.path.join(ROOT, "tests/fixtures/images/clip")
        import transformers
        out = "tiny-clip"
        if version_tuple(transformers.__version__)[0] >= 5:
            if not os.path.exists(out):
                shutil.copytree(src, out)
            return out
        if not os.path.exists(out):
            from tokenizers import Tokenizer
            from transformers import CLIPImageProcessor, CLIPModel, CLIPProcessor, CLIPTokenizerFast
            with open(os.path.join(src, "tokenizer_config.json"), encoding="utf-8") as fh:
                tc = json.load(fh)
            from tokenizers import pre_tokenizers
            backend = Tokenizer.from_file(os.path.join(src, "tokenizer.json"))
            # transformers 4's CLIPTokenizerFast insists on a Sequence pre-tokenizer (real CLIP
            # checkpoints have Split + ByteLevel); a Sequence of the fixture's one ByteLevel splits
            # the same way.
            pt = json.loads(backend.to_str())["pre_tokenizer"]
            if pt["type"] != "ByteLevel":
                raise SystemExit(f"unexpected CLIP pre-tokenizer {pt}")
            backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.ByteLevel(
                add_prefix_space=pt["add_prefix_space"], trim_offsets=pt["trim_offsets"], use_regex=pt["use_regex"])])
            tok = CLIPTokenizerFast(tokenizer_object=backend,
                                    bos_token=tc["bos_token"], eos_token=tc["eos_token"],
                                    pad_token=tc["pad_token"], unk_token=tc["unk_token"],
                                    model_max_length=tc["model_max_length"])
            CLIPProcessor(image_processor=CLIPImageProcessor.from_pretrained(src), tokenizer=tok).save_pretrained(out)
            m = CLIPModel.from_pretrained(src)
            self.digests["clip"] = tensor_digest(m.state_dict())
            m.save_pretrained(out, safe_serialization=True)
        return out

    def static_table(self, seed: int):
        import gen_sparse_fixtures
        t = gen_sparse_fixtures.static_table(self.vocab_size, STATIC_DIM, seed)
        self.digests[f"static_{seed}"] = tensor_digest({"t": t})
        return t

    def query_weights(self):
        import torch
        import gen_fixtures
        g = torch.Generator().manual_seed(SEEDS["query_weights"])
        keep = torch.rand(self.vocab_size, generator=g) < 0.5
        keep[:len(gen_fixtures.SPECIALS)] = False
        w = ((0.1 + 3.0 * torch.rand(self.vocab_size, generator=g)) * keep).to(torch.float32)
        self.digests["query_weights"] = tensor_digest({"w": w})
        return w
