#!/usr/bin/env python3
"""Generate tiny seeded decoder-family and XLNet checkpoints with transformers' and
sentence-transformers' outputs (issue 19).

Usage:
    HF_HUB_OFFLINE=1 bench/.venv/bin/python scripts/gen_decoder_fixtures.py --out tests/fixtures/decoders

Each fixture is what `save_pretrained` (or, for the sentence-transformers layouts,
`SentenceTransformer.save`) writes for a small random model: GPT-2 (backbone and sequence
classification with and without a pad token), XLNet (backbone and sequence classification,
without and with token type ids), Qwen3 / Qwen2 embedding models in Qwen3-Embedding's
layout (last-token pooling, Normalize, an appended <|endoftext|>, left padding), a Qwen3
reranker (Qwen3ForSequenceClassification, one label, as CrossEncoder loads it) and an
EmbeddingGemma-layout model (bidirectional Gemma3TextModel with sliding and full layers,
mean pooling, two Dense projections, Normalize). The tokenizers are the tiny byte-level BPE
and Unigram builders of scripts/gen_backbone_fixtures.py. golden.json records the token ids
and the reference outputs; see tests/fixtures/decoders/README.md. Nothing is downloaded; the
output is deterministic.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixturelib.common import load, offline, read_json, write_golden, write_json  # noqa: E402

offline()
os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"


gb = load("gen_backbone_fixtures")
gf = gb.gf

INIT_STD = gf.INIT_STD            # Linear / Conv1D / Embedding / raw attention parameters ~ N(0, 0.5)
NORM_STD = gf.LAYERNORM_STD       # LayerNorm / RMSNorm weight ~ 1 + N(0, 0.2), bias ~ N(0, 0.2)
BATCH_TOLERANCE = 1e-4            # batched vs one-by-one, max abs

EOT = "<|endoftext|>"
LONG_TEXT = ("The small database extension reads this long input one token after another, and the sliding "
             "window of each layer is shorter.")
TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "How are you today?",
    "PostgreSQL Stores VECTORS in the DataBase",
    "Version 2.0 (2024-05-01), 99% done!",
    "Caf\u00e9 d\u00e9j\u00e0 vu, na\u00efve \u00fcber Stra\u00dfe",
    "data data data data data data",
    LONG_TEXT,
    "",
]
# Ends in the pad token's text: GPT-2 / Qwen3 classifiers pool the rightmost token that is not
# the pad id, so this one is read at "world", not at <|endoftext|>.
PAD_ENDING = "hello world" + EOT
XLNET_PAIRS = [
    ("How are you today?", "I am fine, thank you very much."),
    ("What is in the database?", "Postgres stores the vectors, and the extension computes them."),
    ("", "An empty first sequence."),
    ("An empty second sequence.", ""),
]
RERANK_QUERY = "Which drinks are popular in the morning?"
RERANK_DOCS = [
    "Coffee and tea are popular drinks in the morning and in the afternoon.",
    "The cat is sleeping on the warm windowsill while it is raining outside.",
    "Music, art and history are taught together in the new program.",
    "",
    "Coffee",
]
QWEN_PROMPTS = {"query": "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:",
                "document": ""}
GEMMA_PROMPTS = {
    "query": "task: search result | query: ",
    "document": "title: none | text: ",
    "Clustering": "task: clustering | query: ",
    "Classification": "task: classification | query: ",
    "STS": "task: sentence similarity | query: ",
    "Retrieval-query": "task: search result | query: ",
    "Retrieval-document": "title: none | text: ",
}

GPT2_SPECIALS = [EOT]
QWEN_SPECIALS = [EOT, "<|im_start|>", "<|im_end|>"]
XLNET_SPECIALS = ["<unk>", "<s>", "</s>", "<cls>", "<sep>", "<pad>", "<mask>", "<eod>", "<eop>"]
GEMMA_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]

# name, kind, seed
FIXTURES = [
    ("gpt2", "backbone", 51),
    ("gpt2_classify", "classify", 52),
    ("gpt2_classify_nopad", "classify", 53),
    ("xlnet", "backbone", 54),
    ("xlnet_classify", "classify", 55),
    ("xlnet_classify_types", "classify", 55),  # xlnet_classify's weights
    ("qwen3_embed", "embed", 56),
    ("qwen2_embed", "embed", 57),
    ("qwen3_classify", "classify", 58),
    ("embeddinggemma", "embed", 59),
    ("qwen2_classify", "classify", 60),
]


# What each fixture pins down, written into golden.json (checked by the generator where marked).
NOTES = {
    "gpt2": "GPT2Model: learned absolute positions 0..n-1, pre-LayerNorm blocks and ln_f, gelu_new. "
            "'' is 0 tokens (GPT-2's tokenizer adds nothing) and transformers raises: see skipped.",
    "gpt2_classify": "score = Linear(32, 3, no bias) at every position; the logits are those of the rightmost "
                     "position whose id != pad_token_id (0, <|endoftext|>): 'hello world<|endoftext|>' is read "
                     "at 'world'. Right padding.",
    "gpt2_classify_nopad": "pad_token_id null: the logits are those of the last position (-1), so "
                           "'hello world<|endoftext|>' is read at <|endoftext|>; transformers refuses batches of "
                           "more than one input, so there is no batched run.",
    "xlnet": "XLNetModel, attn_type bi: relative sinusoidal positions only; template A <sep> <cls>, left padding. "
             "The tokenizer returns no token_type_ids (XLNetTokenizer's default model_input_names), so "
             "seg_mat is None and the segment term is absent.",
    "xlnet_classify": "sequence_summary: hidden[:, -1] (<cls>, last also under left padding) -> Linear(32, 32) "
                      "(5.23's XLNetConfig has no summary_proj_to_labels, so the projection keeps d_model) -> "
                      "tanh -> logits_proj Linear(32, 3). No token_type_ids are passed. A pair whose second text "
                      "is '' is tokenized as a single text by a single tokenizer call.",
    "xlnet_classify_types": "xlnet_classify's weights; token_type_ids are passed: A 0, B 1, <cls> 2, padding 0 "
                            "(5.23's XLNetTokenizer pads type ids with 0); seg_mat = one_hot(type_i != type_j) "
                            "adds the segment term, so the logits differ from xlnet_classify's.",
    "qwen3_embed": "Qwen3Model: per-head q_norm/k_norm, GQA 4 query / 2 kv heads, head_dim 32 != 64 / 4; "
                   "position_ids = arange(padded length) also under left padding (RoPE is relative, so batched "
                   "rows still match). Pooling lasttoken = the appended <|endoftext|>, then Normalize.",
    "qwen2_embed": "Qwen2Model: q/k/v biases, no q/k norm, head_dim 16; otherwise as qwen3_embed.",
    "qwen3_classify": "Qwen3ForSequenceClassification (hidden 32, head_dim 16 != 32 / 4), score = Linear(32, 1, "
                      "no bias). pad_token_id 0 = the appended <|endoftext|>, so the logits are read at the "
                      "rightmost token that is not <|endoftext|>: the last text token. '' is [<|endoftext|>] only: "
                      "alone it is read at position 0 (that token), in the left-padded batch at position 0, a "
                      "padding position (batched_all_pad_rows). CrossEncoder tokenizes (query, '') as a pair "
                      "(rerank.input_ids), a single tokenizer call drops the empty pair; both read the same token.",
    "qwen2_classify": "Qwen2ForSequenceClassification, 3 labels, score = Linear(64, 3, no bias) read at the "
                      "rightmost token whose id != pad_token_id (0 = the appended <|endoftext|>): the last text "
                      "token. Right padding (Qwen2Tokenizer's default).",
    "embeddinggemma": "Gemma3TextModel, use_bidirectional_attention: config.json's sliding_window 8 is held as "
                      "8 // 2 + 1 = 5 and a sliding layer lets token i see token j iff |i - j| < 5 (distance <= 4, "
                      "both sides) and j is not padding; the full layer sees every non-padding token. Embeddings "
                      "x sqrt(32); RMSNorm scales by (1 + weight); attention scale 12 ** -0.5; RoPE theta 1e4 "
                      "(sliding) and 1e6 (full). Pooling mean, Dense 32->128->32 (no bias, Identity), Normalize.",
}


# --------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------


def edit_tokenizer_config(d, **changes):
    """Set (or, for None, remove) keys of d/tokenizer_config.json."""
    path = os.path.join(d, "tokenizer_config.json")
    tc = read_json(path)
    for k, v in changes.items():
        if v is None:
            tc.pop(k, None)
        else:
            tc[k] = v
    write_json(path, tc)


def render(o, indent=0):
    """JSON with one key per line and every list of numbers or strings on one line."""
    pad = " " * (indent + 1)
    if isinstance(o, dict) and o:
        items = [f"{pad}{json.dumps(k, ensure_ascii=False)}: {render(v, indent + 1)}" for k, v in o.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    if isinstance(o, list) and o and not all(isinstance(x, (int, float, str)) for x in o):
        return "[\n" + ",\n".join(pad + render(x, indent + 1) for x in o) + "\n" + " " * indent + "]"
    return json.dumps(o, ensure_ascii=False, separators=(", ", ": "))


def fix_modes(d):
    for root, dirs, files in os.walk(d):
        os.chmod(root, 0o755)
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)


# --------------------------------------------------------------------------
# Tokenizers (gen_backbone_fixtures' builders)
# --------------------------------------------------------------------------

def tok_gpt2(d, max_length):
    """Byte-level BPE, GPT-2 style: nothing added around the text, <|endoftext|> (id 0) is
    bos, eos and unk; no pad token."""
    gb.MAX_LENGTH = max_length
    names = dict(bos_token=EOT, eos_token=EOT, unk_token=EOT)
    return gb.bpe(d, GPT2_SPECIALS, "$A", "$A $B:1", names, gb.NO_TYPES)


def tok_qwen(d, max_length, corpus=None, vocab_size=420):
    """Qwen2Tokenizer (tokenizer_class "Qwen2Tokenizer", as Qwen3-Embedding ships it) over the
    byte-level BPE vocabulary and merges of gen_backbone_fixtures, with a post-processor that
    APPENDS <|endoftext|> (id 0) to every sequence, as Qwen3-Embedding's tokenizer.json does;
    pad <|endoftext|>, eos <|im_end|>, left padding. transformers 5.23 loads a qwen2 / qwen3
    directory's tokenizer as Qwen2Tokenizer whatever tokenizer_class says (qwen2 is in
    MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS) and the class rebuilds NFC and Qwen's split regex
    itself, so the class makes the tokenizer and tokenizer.json is what it saves. `corpus` and
    `vocab_size` are the BPE training's (gen_backbone_fixtures.bpe)."""
    from tokenizers import processors
    from transformers import Qwen2Tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        gb.MAX_LENGTH = max_length
        gb.bpe(tmp, QWEN_SPECIALS, "$A", "$A $B:1", dict(eos_token=EOT), gb.NO_TYPES, corpus=corpus,
               vocab_size=vocab_size)
        model = read_json(os.path.join(tmp, "tokenizer.json"))["model"]
    vocab, merges = model["vocab"], [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    assert [vocab[t] for t in QWEN_SPECIALS] == [0, 1, 2]
    tok = Qwen2Tokenizer(vocab=vocab, merges=merges, unk_token=None, bos_token=None, eos_token="<|im_end|>",
                         pad_token=EOT, padding_side="left")
    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A:0 {EOT}:0", pair=f"$A:0 {EOT}:0 $B:1 {EOT}:1", special_tokens=[(EOT, 0)])
    tok.model_max_length = max_length
    tok.save_pretrained(d)
    return len(vocab)


def tok_gemma(d, max_length):
    """Unigram (SentencePiece-style) that adds <bos> in front and <eos> at the end, Gemma's
    special ids (<pad> 0, <eos> 1, <bos> 2, <unk> 3, <mask> 4), right padding as
    EmbeddingGemma's tokenizer."""
    gb.MAX_LENGTH = max_length
    names = dict(bos_token="<bos>", eos_token="<eos>", unk_token="<unk>", pad_token="<pad>", mask_token="<mask>")
    n = gb.unigram(d, GEMMA_SPECIALS, "<bos> $A <eos>", "<bos> $A <eos> <bos>:1 $B:1 <eos>:1", names, gb.NO_TYPES)
    edit_tokenizer_config(d, padding_side="right")
    return n


def tok_xlnet(d, max_length):
    """XLNetTokenizer itself (tokenizer_class "XLNetTokenizer"), over the Unigram pieces of
    gen_backbone_fixtures: transformers 5 rebuilds XLNet's normalizer, pre-tokenizer and
    `A <sep> <cls>` / `A <sep> B <sep> <cls>` template (type ids 0 / 1 / <cls> 2) in the
    class, so the tokenizer is made by the class and tokenizer.json is what it saves."""
    from transformers import XLNetTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        gb.MAX_LENGTH = max_length
        gb.unigram(tmp, XLNET_SPECIALS, "$A <sep> <cls>:2", "$A <sep> $B:1 <sep>:1 <cls>:2",
                   dict(unk_token="<unk>"), gb.NO_TYPES)
        vocab = [tuple(p) for p in read_json(os.path.join(tmp, "tokenizer.json"))["model"]["vocab"]]
    assert [p for p, _ in vocab[:len(XLNET_SPECIALS)]] == XLNET_SPECIALS
    tok = XLNetTokenizer(vocab=vocab, unk_id=0, do_lower_case=True)
    tok.model_max_length = max_length
    tok.save_pretrained(d)
    return len(vocab)


# --------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------

def gpt2_config(vocab_size, **kw):
    import transformers as tf

    return tf.GPT2Config(vocab_size=vocab_size, n_positions=64, n_embd=32, n_layer=2, n_head=4,
                         activation_function="gelu_new", layer_norm_epsilon=1e-5, bos_token_id=0, eos_token_id=0,
                         **kw)


def xlnet_config(vocab_size, **kw):
    import transformers as tf

    return tf.XLNetConfig(vocab_size=vocab_size, d_model=32, n_head=2, d_inner=64, n_layer=2, ff_activation="gelu",
                          mem_len=None, attn_type="bi", pad_token_id=5, bos_token_id=1, eos_token_id=2, **kw)


def qwen3_config(vocab_size, hidden=64, **kw):
    import transformers as tf

    # head_dim != hidden / heads (32 vs 16; the reranker 16 vs 8), as in the real Qwen3 models.
    return tf.Qwen3Config(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, head_dim=hidden // 2, intermediate_size=2 * hidden, hidden_act="silu",
                          max_position_embeddings=128, rms_norm_eps=1e-6,
                          rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                          tie_word_embeddings=True, use_sliding_window=False, attention_bias=False,
                          bos_token_id=0, eos_token_id=0, **kw)


def qwen2_config(vocab_size, **kw):
    import transformers as tf

    return tf.Qwen2Config(vocab_size=vocab_size, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, intermediate_size=128, hidden_act="silu",
                          max_position_embeddings=128, rms_norm_eps=1e-6,
                          rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                          tie_word_embeddings=False, use_sliding_window=False,
                          bos_token_id=0, eos_token_id=0, **kw)


def gemma3_config(vocab_size):
    import transformers as tf

    # EmbeddingGemma's settings, scaled down: bidirectional attention, query_pre_attn_scalar
    # != head_dim, Gemma 3's 5 sliding : 1 full layer pattern, no soft-capping.
    return tf.Gemma3TextConfig(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=6, num_attention_heads=4,
        num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=12, hidden_activation="gelu_pytorch_tanh",
        max_position_embeddings=128, rms_norm_eps=1e-6, sliding_window=8,
        layer_types=["sliding_attention"] * 5 + ["full_attention"],
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
        use_bidirectional_attention=True, final_logit_softcapping=None, attn_logit_softcapping=None,
        attention_bias=False, tie_word_embeddings=True, pad_token_id=0, eos_token_id=1, bos_token_id=2)


def randomize(model, seed):
    """gen_backbone_fixtures' randomize, extended to the decoders' parameter kinds: Linear,
    GPT-2's Conv1D, Embedding and XLNet's raw attention parameters (q, k, v, o, r, the r_*
    biases, seg_embed, mask_emb) ~ N(0, 0.5); LayerNorm and RMSNorm weight 1 + N(0, 0.2),
    bias N(0, 0.2); Gemma's RMSNorm scales by (1 + weight), so its weight is N(0, 0.2)."""
    import torch
    from torch import nn

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for pname, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            owner = model.get_submodule(pname.rsplit(".", 1)[0]) if "." in pname else model
            kind = type(owner).__name__
            if isinstance(owner, (nn.Linear, nn.Embedding)) or kind in ("Conv1D",):
                p.copy_(torch.randn(p.shape, generator=g) * INIT_STD)
            elif kind == "Gemma3RMSNorm":
                p.copy_(torch.randn(p.shape, generator=g) * NORM_STD)
            elif isinstance(owner, nn.LayerNorm) or kind.endswith(("LayerNorm", "RMSNorm")):
                base = 1.0 if pname.endswith(".weight") else 0.0
                p.copy_(base + torch.randn(p.shape, generator=g) * NORM_STD)
            elif kind in ("XLNetRelativeAttention", "XLNetModel"):
                p.copy_(torch.randn(p.shape, generator=g) * INIT_STD)
            else:
                raise SystemExit(f"unexpected parameter {pname} in {kind}")


def new_model(cls, config, seed):
    import torch

    torch.manual_seed(seed)
    model = cls(config).eval()
    randomize(model, seed)
    return model


def seeded_dense(d_in, d_out, seed):
    import torch
    from sentence_transformers.sentence_transformer.modules import Dense

    dense = Dense(d_in, d_out, bias=False, activation_function=torch.nn.Identity())
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        dense.linear.weight.copy_(torch.randn(dense.linear.weight.shape, generator=g) * INIT_STD)
    return dense


def sentence_model(base, out_dir, pooling, prompts, dense_seeds=(), dense_dims=()):
    """A sentence-transformers directory: Transformer(base) -> Pooling -> [Dense...] -> Normalize."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    te = Transformer(base)
    dim = te.get_embedding_dimension()
    modules = [te, Pooling(dim, pooling)]
    for seed, (d_in, d_out) in zip(dense_seeds, dense_dims):
        modules.append(seeded_dense(d_in, d_out, seed))
    modules.append(Normalize())
    st = SentenceTransformer(modules=modules, prompts=prompts, default_prompt_name=None, device="cpu")
    st.save(out_dir, create_model_card=False, safe_serialization=True)


def build(name, seed, out_dir, work):
    """Write fixture `name` to out_dir."""
    import transformers as tf

    os.makedirs(out_dir)
    if name == "gpt2":
        v = tok_gpt2(out_dir, 64)
        new_model(tf.GPT2Model, gpt2_config(v), seed).save_pretrained(out_dir)
    elif name == "gpt2_classify":
        v = tok_gpt2(out_dir, 64)
        edit_tokenizer_config(out_dir, pad_token=EOT, padding_side="right")
        cfg = gpt2_config(v, num_labels=3, id2label={0: "negative", 1: "neutral", 2: "positive"},
                          label2id={"negative": 0, "neutral": 1, "positive": 2}, pad_token_id=0)
        new_model(tf.GPT2ForSequenceClassification, cfg, seed).save_pretrained(out_dir)
    elif name == "gpt2_classify_nopad":
        v = tok_gpt2(out_dir, 64)
        cfg = gpt2_config(v, num_labels=3, id2label={0: "negative", 1: "neutral", 2: "positive"},
                          label2id={"negative": 0, "neutral": 1, "positive": 2})
        assert cfg.pad_token_id is None
        new_model(tf.GPT2ForSequenceClassification, cfg, seed).save_pretrained(out_dir)
    elif name == "xlnet":
        v = tok_xlnet(out_dir, 64)
        new_model(tf.XLNetModel, xlnet_config(v), seed).save_pretrained(out_dir)
    elif name == "xlnet_classify":
        v = tok_xlnet(out_dir, 64)
        cfg = xlnet_config(v, num_labels=3, id2label={0: "entailment", 1: "neutral", 2: "contradiction"},
                           label2id={"entailment": 0, "neutral": 1, "contradiction": 2}, summary_type="last",
                           summary_use_proj=True, summary_activation="tanh")
        new_model(tf.XLNetForSequenceClassification, cfg, seed).save_pretrained(out_dir)
    elif name == "xlnet_classify_types":
        shutil.rmtree(out_dir)
        shutil.copytree(os.path.join(os.path.dirname(out_dir), "xlnet_classify"), out_dir)
        edit_tokenizer_config(out_dir, model_input_names=["input_ids", "token_type_ids", "attention_mask"])
    elif name in ("qwen3_embed", "qwen2_embed"):
        base = os.path.join(work, name)
        os.makedirs(base)
        v = tok_qwen(base, 128)
        if name == "qwen3_embed":
            model = new_model(tf.Qwen3Model, qwen3_config(v), seed)
        else:
            model = new_model(tf.Qwen2Model, qwen2_config(v), seed)
        model.save_pretrained(base)
        os.rmdir(out_dir)
        sentence_model(base, out_dir, "lasttoken", QWEN_PROMPTS)
    elif name == "qwen3_classify":
        v = tok_qwen(out_dir, 128)
        # Hidden 32 (head_dim 16, intermediate 64) to keep the fixtures small.
        cfg = qwen3_config(v, hidden=32, num_labels=1, pad_token_id=0)
        new_model(tf.Qwen3ForSequenceClassification, cfg, seed).save_pretrained(out_dir)
    elif name == "qwen2_classify":
        v = tok_qwen(out_dir, 128)
        edit_tokenizer_config(out_dir, padding_side="right")
        cfg = qwen2_config(v, num_labels=3, id2label={0: "negative", 1: "neutral", 2: "positive"}, pad_token_id=0)
        new_model(tf.Qwen2ForSequenceClassification, cfg, seed).save_pretrained(out_dir)
    elif name == "embeddinggemma":
        base = os.path.join(work, name)
        os.makedirs(base)
        v = tok_gemma(base, 128)
        new_model(tf.Gemma3TextModel, gemma3_config(v), seed).save_pretrained(base)
        os.rmdir(out_dir)
        sentence_model(base, out_dir, "mean", GEMMA_PROMPTS, dense_seeds=(seed * 10 + 1, seed * 10 + 2),
                       dense_dims=((32, 128), (128, 32)))
    else:
        raise SystemExit(f"unknown fixture {name}")
    fix_modes(out_dir)


# --------------------------------------------------------------------------
# Golden values
# --------------------------------------------------------------------------

def check_tokenizer_json(name, out_dir, tok, inputs):
    """The `tokenizers` library reading tokenizer.json alone gives the ids AutoTokenizer gives.
    transformers 5.23 drops an empty pair in a single call (`[(text, text_pair)] if text_pair else
    [text]`): tokenizer("A", "") is tokenizer("A"); in a batch call, ("A", "") stays a pair."""
    from tokenizers import Tokenizer

    raw = Tokenizer.from_file(os.path.join(out_dir, "tokenizer.json"))
    for text, pair in inputs:
        want = tok(text, pair)["input_ids"]
        got = raw.encode(text, pair).ids if pair else raw.encode(text).ids
        if pair is not None and tok([text], [pair])["input_ids"][0] != raw.encode(text, pair).ids:
            raise SystemExit(f"{name}: batch call differs from tokenizer.json for {text!r}/{pair!r}")
        if got != want:
            raise SystemExit(f"{name}: tokenizer.json gives {got} for {text!r}/{pair!r}, AutoTokenizer {want}")


def cls_inputs(name):
    if name.startswith("gpt2_classify"):
        return [(t, None) for t in TEXTS + [PAD_ENDING]]
    if name.startswith("xlnet_classify"):
        return [(t, None) for t in TEXTS] + XLNET_PAIRS
    if name == "qwen2_classify":
        return [(t, None) for t in TEXTS if t] + [(PAD_ENDING, None)]
    if name == "qwen3_classify":
        return [(RERANK_QUERY, d) for d in RERANK_DOCS] + [(PAD_ENDING, None), ("", None)]
    raise SystemExit(name)


def ids_list(t):
    return t[0].tolist()


def no_tokens(text, pair, enc, error):
    """A case transformers cannot run: GPT-2's tokenizer adds nothing, so "" is 0 tokens and
    the model raises. Only that case is expected here."""
    if enc["input_ids"].shape[1] != 0:
        raise error
    return {"text": text, "pair": pair, "input_ids": [],
            "reason": f"0 tokens; transformers raises {type(error).__name__}: {str(error).splitlines()[0]}"}


def run_backbone(name, out_dir):
    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out_dir)
    model = AutoModel.from_pretrained(out_dir).eval()
    check_tokenizer_json(name, out_dir, tok, [(t, None) for t in TEXTS])
    cases, skipped = [], []
    for text in TEXTS:
        enc = tok(text, return_tensors="pt")
        assert enc["input_ids"].shape[1] <= tok.model_max_length
        try:
            with torch.inference_mode():
                hidden = model(**enc).last_hidden_state[0].numpy()
        except RuntimeError as e:
            skipped.append(no_tokens(text, None, enc, e))
            continue
        cases.append({"text": text, "pair": None, "prompt_name": None, "input_ids": ids_list(enc["input_ids"]),
                      "token_type_ids": ids_list(enc["token_type_ids"]) if "token_type_ids" in enc else None,
                      "hidden": gf.floats(hidden)})
    # Batched (not recorded): every row's real positions equal the one-by-one hidden states.
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    enc = tok.pad([tok(c["text"]) for c in cases], return_tensors="pt")
    with torch.inference_mode():
        batched = model(**enc).last_hidden_state.numpy()
    worst = 0.0
    for row, c in enumerate(cases):
        keep = enc["attention_mask"][row].numpy().astype(bool)
        single = np.array(c["hidden"], dtype=np.float32).reshape(len(c["input_ids"]), -1)
        assert enc["input_ids"][row][keep].tolist() == c["input_ids"]
        worst = max(worst, float(np.max(np.abs(batched[row][keep] - single))))
    out = {"cases": cases, "batched_vs_single": worst, "batch_padding_side": tok.padding_side}
    if skipped:
        out["skipped"] = skipped
    return model, out


def run_classify(name, out_dir):
    import numpy as np
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out_dir)
    model = AutoModelForSequenceClassification.from_pretrained(out_dir).eval()
    inputs = cls_inputs(name)
    check_tokenizer_json(name, out_dir, tok, inputs)
    cases, skipped, encs = [], [], []
    for text, pair in inputs:
        enc = tok(text, pair, return_tensors="pt")
        assert enc["input_ids"].shape[1] <= tok.model_max_length
        try:
            with torch.inference_mode():
                logits = model(**enc).logits[0].numpy()
        except RuntimeError as e:
            skipped.append(no_tokens(text, pair, enc, e))
            continue
        cases.append({"text": text, "pair": pair, "prompt_name": None, "input_ids": ids_list(enc["input_ids"]),
                      "token_type_ids": ids_list(enc["token_type_ids"]) if "token_type_ids" in enc else None,
                      "output": gf.floats(logits)})
        encs.append(tok(text, pair))
    out = {"cases": cases}
    if skipped:
        out["skipped"] = skipped
    if model.config.pad_token_id is not None:
        # One padded batch of every case, the tokenizer's own padding.
        enc = tok.pad(encs, return_tensors="pt")
        with torch.inference_mode():
            batched = model(**enc).logits.numpy()
        single = np.stack([np.array(c["output"], dtype=np.float32) for c in cases])
        out["batched"] = [gf.floats(row) for row in batched]
        # A case made only of pad ids (qwen3_classify's "" is [<|endoftext|>]) has no non-pad
        # token: the rightmost-non-pad argmax is 0, which one by one is the token itself but in
        # a left-padded batch is a padding position. transformers' batched logits for such rows
        # are recorded as they are and left out of the comparison.
        pad = model.config.pad_token_id
        all_pad = [i for i, c in enumerate(cases) if all(t == pad for t in c["input_ids"])]
        real = [i for i in range(len(cases)) if i not in all_pad]
        out["batched_vs_single"] = float(np.max(np.abs(batched[real] - single[real])))
        if all_pad:
            out["batched_all_pad_rows"] = all_pad
            out["batched_vs_single_all_pad_rows"] = float(np.max(np.abs(batched[all_pad] - single[all_pad])))
        out["batch_padding_side"] = tok.padding_side
        out["batch_passed"] = sorted(enc.keys())
        if "token_type_ids" in enc:
            out["batch_pad_token_type_id"] = int(tok.pad_token_type_id)
        if out["batched_vs_single"] > BATCH_TOLERANCE:
            raise SystemExit(f"{name}: batched vs single {out['batched_vs_single']}")
    if name == "qwen3_classify":
        from sentence_transformers import CrossEncoder

        ce = CrossEncoder(out_dir, device="cpu")
        scores = ce.predict([(RERANK_QUERY, d) for d in RERANK_DOCS], convert_to_numpy=True)
        logits = np.array([c["output"][0] for c in cases[:len(RERANK_DOCS)]], dtype=np.float32)
        diff = float(np.max(np.abs(scores - 1.0 / (1.0 + np.exp(-logits)))))
        if diff > BATCH_TOLERANCE:
            raise SystemExit(f"{name}: CrossEncoder vs sigmoid(single logits) {diff}")
        feats = ce.preprocess([(RERANK_QUERY, d) for d in RERANK_DOCS])
        rerank_ids = [row[mask.bool()].tolist() for row, mask in zip(feats["input_ids"], feats["attention_mask"])]
        out["rerank"] = {"query": RERANK_QUERY, "documents": RERANK_DOCS, "input_ids": rerank_ids,
                         "activation": type(ce.activation_fn).__name__, "scores": gf.floats(np.asarray(scores)),
                         "vs_sigmoid_single_logits": diff}
    return model, out


def run_embed(name, out_dir):
    import numpy as np
    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer

    st = SentenceTransformer(out_dir, device="cpu")
    tok = AutoTokenizer.from_pretrained(out_dir)
    prompt_names = [None, "query"] + (["document"] if name == "embeddinggemma" else [])
    check_tokenizer_json(name, out_dir, tok, [((st.prompts.get(p, "") if p else "") + t, None)
                                              for p in prompt_names for t in TEXTS])
    cases, batched = [], []
    worst = 0.0
    for pname in prompt_names:
        prompt = st.prompts[pname] if pname else None
        rows = st.encode(TEXTS, prompt_name=pname, batch_size=len(TEXTS), convert_to_numpy=True)
        for text, row in zip(TEXTS, rows):
            feats = st.preprocess([text], prompt=prompt)
            ids = feats["input_ids"][0].tolist()
            if ids != tok((prompt or "") + text)["input_ids"]:
                raise SystemExit(f"{name}: preprocess ids differ from the tokenizer's for {text!r}")
            if len(ids) >= st.max_seq_length:
                raise SystemExit(f"{name}: {text!r} with prompt {pname} reaches max_seq_length")
            one = st.encode([text], prompt_name=pname, batch_size=1, convert_to_numpy=True)[0]
            worst = max(worst, float(np.max(np.abs(one - row))))
            cases.append({"text": text, "pair": None, "prompt_name": pname, "input_ids": ids,
                          "token_type_ids": feats["token_type_ids"][0].tolist() if "token_type_ids" in feats else None,
                          "output": gf.floats(one)})
            batched.append(gf.floats(row))
    if worst > BATCH_TOLERANCE:
        raise SystemExit(f"{name}: batched vs single {worst}")
    return st, {"cases": cases, "batched": batched, "batched_vs_single": worst,
                "batch_padding_side": st.tokenizer.padding_side if hasattr(st, "tokenizer") else tok.padding_side,
                "max_seq_length": st.max_seq_length, "prompts": st.prompts,
                "default_prompt_name": st.default_prompt_name}


CONFIG_KEYS = ["model_type", "architectures", "vocab_size", "hidden_size", "n_embd", "d_model", "num_hidden_layers",
               "n_layer", "num_attention_heads", "n_head", "num_key_value_heads", "head_dim", "d_head",
               "intermediate_size", "d_inner", "n_positions", "max_position_embeddings", "hidden_act",
               "hidden_activation", "activation_function", "ff_activation", "layer_norm_epsilon", "layer_norm_eps",
               "rms_norm_eps", "rope_parameters", "rope_theta", "attention_bias", "tie_word_embeddings",
               "use_sliding_window", "sliding_window", "layer_types", "query_pre_attn_scalar",
               "use_bidirectional_attention", "attn_logit_softcapping", "final_logit_softcapping", "attn_type",
               "mem_len", "bi_data", "clamp_len", "same_length", "summary_type", "summary_use_proj",
               "summary_activation", "num_labels", "id2label", "pad_token_id", "bos_token_id", "eos_token_id"]


def saved_config(d):
    cfg = read_json(os.path.join(d, "config.json"))
    out = {k: cfg[k] for k in CONFIG_KEYS if k in cfg}
    if "id2label" in out:
        out["num_labels"] = len(out["id2label"])
    return out


def run(name, kind, out_dir):
    if kind == "backbone":
        model, out = run_backbone(name, out_dir)
    elif kind == "classify":
        model, out = run_classify(name, out_dir)
    else:
        model, out = run_embed(name, out_dir)
        model = model[0].model
    cfg = model.config
    hidden = getattr(cfg, "hidden_size", None) or getattr(cfg, "d_model")
    tc = read_json(os.path.join(out_dir, "tokenizer_config.json"))
    head = {"model_type": cfg.model_type, "kind": kind, "architecture": type(model).__name__,
            "hidden_size": int(hidden), "notes": NOTES[name], "config": saved_config(out_dir),
            "tokenizer": {k: tc.get(k) for k in ("tokenizer_class", "padding_side", "pad_token", "eos_token",
                                                  "bos_token", "model_input_names", "model_max_length")}}
    if os.path.exists(os.path.join(out_dir, "modules.json")):
        head["modules"] = [m["type"].rsplit(".", 1)[-1] for m in read_json(os.path.join(out_dir, "modules.json"))]
    return {**head, **out}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/decoders")
    args = ap.parse_args()

    import torch
    import transformers
    import sentence_transformers
    import tokenizers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="pg_embed_decoders_")
    results = {}
    try:
        for name, kind, seed in FIXTURES:
            d = os.path.join(out, name)
            shutil.rmtree(d, ignore_errors=True)
            build(name, seed, d, work)
            results[name] = run(name, kind, d)
            print(f"{name}: batched vs single {results[name].get('batched_vs_single', 0.0):.2e}", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    header = {"generator": {"script": "scripts/gen_decoder_fixtures.py", "transformers": transformers.__version__,
                            "sentence_transformers": sentence_transformers.__version__, "torch": torch.__version__,
                            "tokenizers": tokenizers.__version__, "python": sys.version.split()[0]},
              "fields": {
                  "hidden": "backbone: AutoModel(**tokenizer(text, return_tensors='pt')).last_hidden_state[0], row-major",
                  "output": "embed: SentenceTransformer(dir).encode([text], prompt_name=P, batch_size=1)[0]; classify: "
                            "AutoModelForSequenceClassification(**tokenizer(text, pair, return_tensors='pt')).logits[0]",
                  "input_ids": "what the tokenizer gives for (prompt + text) or (text, pair), unpadded",
                  "token_type_ids": "what was passed to the model, or null when the tokenizer returns none",
                  "batched": "classify: one batch of every case, tokenizer.pad(...) with the tokenizer's padding side; "
                             "embed: encode(all texts of the case's prompt_name, batch_size=len), in case order",
                  "batched_vs_single": "max abs difference of the batched outputs (backbones: hidden states at the "
                                       "real positions) vs the one-by-one ones",
                  "rerank": "qwen3_classify: CrossEncoder(dir).predict([(query, d) for d in documents])"}}
    text = render({**header, "fixtures": results}) + "\n"
    if json.loads(text) != json.loads(json.dumps({**header, "fixtures": results})):
        raise SystemExit("render() changed the data")
    write_golden(os.path.join(out, "golden.json"), text)
    print(f"wrote {out}/golden.json ({len(text)} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
