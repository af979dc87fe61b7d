#!/usr/bin/env python3
"""Generate tiny seeded checkpoints of the GTE, Jina v3, Mistral, Llama, Gemma 2, CamemBERT and
EuroBERT families with transformers' and sentence-transformers' outputs for them.

Usage:
    HF_HUB_OFFLINE=1 bench/.venv/bin/python scripts/gen_family_fixtures.py --out tests/fixtures/families

Each fixture is what `SentenceTransformer.save` (embedding models) or `save_pretrained`
(`*ForSequenceClassification`) writes for a small random model. transformers 5.24 saves GTE and
Jina v3 weights under the checkpoint names its conversion mapping reads; gte_embed and
jina_v3_embed hold them under transformers' module names instead (`save_original_format=False`),
gte_new holds gte_embed's weights as the published GTE checkpoints ship them (`model_type`
"new", which transformers cannot load) and jina_v3_hub jina_v3_embed's under the checkpoint
names. The tokenizers are the tiny Unigram and byte-level BPE builders of
scripts/gen_backbone_fixtures.py (CamemBERT's is made by `CamembertTokenizer` itself).
golden.json uses the layout of tests/fixtures/decoders/golden.json (see
scripts/gen_decoder_fixtures.py, whose helpers this script reuses) and records the token ids
and the reference outputs; see tests/fixtures/families/README.md. Nothing is downloaded; the
output is deterministic. Golden values come from transformers / sentence-transformers only.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import tempfile

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
sys.dont_write_bytecode = True  # the generators are imported from scripts/: no __pycache__ there

HERE = os.path.dirname(os.path.abspath(__file__))


def _load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gd = _load("gen_decoder_fixtures")   # loads gen_backbone_fixtures, which loads gen_fixtures
gb = gd.gb
gf = gb.gf

INIT_STD = gf.INIT_STD            # Linear / Embedding ~ N(0, 0.5)
NORM_STD = gf.LAYERNORM_STD       # LayerNorm / RMSNorm weight ~ 1 + N(0, 0.2), bias ~ N(0, 0.2)
BATCH_TOLERANCE = 1e-4            # batched vs one-by-one, max abs
MAX_LENGTH = 32                   # tokenizer model_max_length = sentence-transformers' max_seq_length
# Embedders with long prompts (26 to 50 tokens here) get room for the text after the prompt.
PROMPTED_MAX_LENGTH = 64

# gen_decoder_fixtures' texts ("" and a long one among them), then more: whitespace only, CJK,
# emoji, control characters, accents, mixed case, and inputs longer than MAX_LENGTH tokens.
LONG_INPUT = ("Postgres stores the vectors and the extension computes them inside the database, one batch "
              "after another, while the small model reads every token of this long input twice. Then the "
              "quick brown fox jumps over the lazy dog near the river bank, and the text goes on and on.")
TEXTS = gd.TEXTS + [
    "   ",
    "\u65e5\u672c\u8a9e\u306e\u6587\u7ae0\u3067\u3059\u3002\u4f60\u597d",
    "I love pizza \U0001F355 and tacos \U0001F32E!",
    "x",
    "Tabs\tand\nnewlines  between   words",
    "UPPER CASE WORDS and lower case words",
    "It's 3:45 p.m. -- the meeting's over; let's go.",
    "\u00bfD\u00f3nde est\u00e1 la biblioteca?",
    "Stra\u00dfe, \u00c9cole, \u00c5ngstr\u00f6m",
    "  leading and trailing spaces  ",
    "one-two-three four_five six.seven",
    LONG_INPUT,
    "The cat sat on the mat.",
]
# With a prompt: gen_decoder_fixtures' 9 texts ("" and its long one included).
PROMPT_TEXTS = gd.TEXTS
PAIRS = gd.XLNET_PAIRS + [("A short question?", LONG_INPUT)]
RERANK_QUERY, RERANK_DOCS = gd.RERANK_QUERY, gd.RERANK_DOCS

# Published prompts, as the families' embedders ship them in config_sentence_transformers.json.
JINA_PROMPTS = {
    "retrieval.query": "Represent the query for retrieving evidence documents: ",
    "retrieval.passage": "Represent the document for retrieval: ",
    "separation": "",
    "classification": "",
    "text-matching": "",
}
E5_MISTRAL_PROMPTS = {
    "web_search_query": "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery: ",
    "sts_query": "Instruct: Retrieve semantically similar text.\nQuery: ",
}
BGE_GEMMA2_PROMPTS = {
    "web_search_query": ("<instruct>Given a web search query, retrieve relevant passages that answer the "
                         "query.\n<query>"),
}

LABELS3 = {0: "negative", 1: "neutral", 2: "positive"}
NLI3 = {0: "entailment", 1: "neutral", 2: "contradiction"}

LLAMA_SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]
EUROBERT_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|mask|>"]
CAMEMBERT_SPECIALS = ["<s>NOTUSED", "<pad>", "</s>NOTUSED", "<unk>", "<unk>NOTUSED", "<s>", "</s>"]

# name, kind, seed, source: a derived fixture is another layout of `source`'s weights.
FIXTURES = [
    ("gte_embed", "embed", 71, None),
    ("gte_new", "embed", 71, "gte_embed"),
    ("gte_classify", "classify", 72, None),
    ("jina_v3_embed", "embed", 73, None),
    ("jina_v3_hub", "embed", 73, "jina_v3_embed"),
    ("jina_v3_classify", "classify", 74, None),
    ("mistral_embed", "embed", 75, None),
    ("mistral_classify", "classify", 76, None),
    ("llama_embed", "embed", 77, None),
    ("llama_classify", "classify", 78, None),
    ("gemma2_embed", "embed", 79, None),
    ("gemma2_classify", "classify", 80, None),
    ("camembert_embed", "embed", 81, None),
    ("camembert_classify", "classify", 82, None),
    ("eurobert_embed", "embed", 83, None),
    ("eurobert_classify_late", "classify", 84, None),
    ("eurobert_classify_bos", "classify", 85, None),
    ("eurobert_classify_mean", "classify", 86, None),
]
KINDS = {name: kind for name, kind, _, _ in FIXTURES}

# Per embedding fixture: the prompt names with cases (None: every text without a prompt).
PROMPT_CASES = {
    "jina_v3_embed": ["retrieval.query", "retrieval.passage", "text-matching"],
    "jina_v3_hub": ["retrieval.query", "retrieval.passage", "text-matching"],
    "mistral_embed": ["web_search_query", "sts_query"],
    "gemma2_embed": ["web_search_query"],
}

# Config changes whose effect on the longest input is recorded (`pins`): each must move the
# outputs, so the fixture pins the setting down.
PINS = {
    "gte_embed": {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
    "gte_classify": {"rope_parameters": {"rope_type": "default", "rope_theta": 160000.0}},
    "jina_v3_embed": {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
    "mistral_embed": {"sliding_window": None},
    "mistral_classify": {"sliding_window": None},
    "llama_embed": {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
    "gemma2_embed": {"attn_logit_softcapping": None, "sliding_window": 128, "query_pre_attn_scalar": 16},
    "gemma2_classify": {"attn_logit_softcapping": None, "sliding_window": 128},
    "eurobert_embed": {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
}
# Config changes that must NOT move the outputs (recorded with PINS' as 0.0).
NO_EFFECT = {
    "gemma2_classify": {"final_logit_softcapping": None},
}

NOTES = {
    "gte_embed": "GteModel saved with save_original_format=False: transformers' own module names (layers.N.self_attn."
                 "q_proj/k_proj/v_proj/o_proj with biases, layers.N.mlp.gate_proj/up_proj (no bias)/down_proj (bias), "
                 "layers.N.post_attention_layernorm / post_mlp_layernorm, embeddings.word_embeddings / "
                 "token_type_embeddings / LayerNorm, no position embeddings). Post-LayerNorm layers; RoPE with "
                 "GteConfig's default theta 160000 (rope_parameters in config.json); MLP act(gate) * up. Pooling cls "
                 "(as gte-multilingual-base), Normalize. XLM-R ids, right padding.",
    "gte_new": "gte_embed's weights in the layout of the GTE checkpoints on the Hub: config model_type 'new' / "
               "NewModel with rope_theta, rope_scaling null, position_embedding_type rope, pack_qkv, layer_norm_type, "
               "unpad_inputs, use_memory_efficient_attention, logn_attention_scale; keys encoder.layer.N.attention."
               "qkv_proj (q, k, v on dim 0), attention.o_proj, attn_ln, mlp.up_gate_proj (up, then gate, on dim 0), "
               "mlp.down_proj, mlp_ln (what transformers 5.24's save_pretrained itself writes for a gte model). "
               "transformers 5.24 cannot load model_type 'new' (see transformers_load), so the golden values are "
               "gte_embed's: the same weights.",
    "gte_classify": "GteForSequenceClassification (the BERT head: gte.pooler.dense + tanh on the first token, then "
                    "classifier), num_labels 1 (a CrossEncoder reranker, as gte-multilingual-reranker-base), saved as "
                    "transformers 5.24 saves it: hub names under gte. (gte.encoder.layer.N.attention.qkv_proj, "
                    "mlp.up_gate_proj, attn_ln, mlp_ln). type_vocab_size 0 (gte-base-en-v1.5's setting: no token "
                    "type embedding at all), rope theta 10000 set in config.json.",
    "jina_v3_embed": "JinaEmbeddingsV3Model saved with save_original_format=False: embeddings.word_embeddings + "
                     "token_type_embeddings + LayerNorm, no position embeddings, post-LN layers (layers.N.self_attn."
                     "q/k/v/o_proj with biases, post_attention_layernorm, mlp.fc1 -> gelu -> mlp.fc2, "
                     "post_mlp_layernorm), RoPE with the default theta 20000, pooler.dense (unused). Pooling mean, "
                     "Normalize; jina-embeddings-v3's task prompts (three of them empty).",
    "jina_v3_hub": "jina_v3_embed's weights as transformers 5.24's save_pretrained writes them, i.e. under the names "
                   "its conversion mapping reads: emb_ln, encoder.layers.N.mixer.Wqkv (q, k, v on dim 0), "
                   "mixer.out_proj, norm1, mlp.fc1, mlp.fc2, norm2; model_type jina_embeddings_v3. transformers "
                   "loads it: the golden values are its own (equal to jina_v3_embed's, see matches_source).",
    "jina_v3_classify": "JinaEmbeddingsV3ForSequenceClassification: the XLM-R head (classifier.dense, tanh, "
                        "classifier.out_proj on the first token), 3 labels, hidden_act gelu_new, rope theta 50000 "
                        "set in config.json; saved as transformers saves it (roberta.emb_ln, roberta.encoder.layers."
                        "N.mixer.Wqkv, ...).",
    "mistral_embed": "MistralModel: GQA 4 query / 2 kv heads, head_dim 16 != 32 / 4, sliding_window 8 (a token sees "
                     "itself and the 7 before it: kv > q - 8), causal. e5-mistral's layout: bos <s> and eos </s> "
                     "around every input, Pooling lasttoken (the </s>), Normalize, left padding (position_ids "
                     "= arange(padded length), not shifted), prompts web_search_query / sts_query.",
    "mistral_classify": "MistralForSequenceClassification, 3 labels, score = Linear(32, 3, no bias) read at the "
                        "rightmost token whose id != pad_token_id (2 = </s>); the tokenizer adds only <s> (as "
                        "transformers 5 tokenizes Mistral), so 'hello world</s>' is read at 'world'. Right padding, "
                        "sliding_window 8.",
    "llama_embed": "LlamaModel with attention_bias and mlp_bias true, GQA 4 / 2, head_dim 16 != 32 / 4, rope theta "
                   "500000, causal. The tokenizer adds <s> only; Pooling mean over every token (<s> included), "
                   "Normalize, right padding.",
    "llama_classify": "LlamaForSequenceClassification, 3 labels, a dedicated pad token (<pad> = 3): the logits are "
                      "read at the rightmost token that is not <pad>, so 'hello world<pad>' is read at 'world'. "
                      "Left padding. attention_bias and mlp_bias true.",
    "gemma2_embed": "Gemma2Model: embeddings x sqrt(32), RMSNorm scaling by (1 + weight), 4 norms per layer, "
                    "query_pre_attn_scalar 12 (scale 12 ** -0.5), attn_logit_softcapping 5 (tanh(s / 5) * 5 on the "
                    "scores), layers sliding / full / sliding / full with sliding_window 8 (kv > q - 8), causal, "
                    "no q/k norms. <bos> ... <eos>, left padding, Pooling lasttoken, Normalize, a "
                    "bge-multilingual-gemma2-style prompt.",
    "gemma2_classify": "Gemma2ForSequenceClassification, num_labels 1, score at the rightmost token whose id != "
                       "pad_token_id (0, <pad>): the appended <eos>. final_logit_softcapping 30 in config.json does "
                       "not apply to the sequence-classification logits. Right padding.",
    "camembert_embed": "CamembertModel (RoBERTa layers, positions from padding_idx + 1 = 2), CamemBERT's special ids: "
                       "<s>NOTUSED 0, <pad> 1, </s>NOTUSED 2, <unk> 3, <unk>NOTUSED 4, <s> 5, </s> 6, <mask> last; "
                       "no normalizer (CamembertTokenizer's pre-tokenizer: WhitespaceSplit + Metaspace). "
                       "Pooling mean without Normalize (sentence-camembert's layout).",
    "camembert_classify": "CamembertForSequenceClassification: the RoBERTa head (classifier.dense, tanh, "
                          "classifier.out_proj on <s>), 3 labels; pairs <s> A </s></s> B </s>.",
    "eurobert_embed": "EuroBertModel: Llama layers without the causal mask (bidirectional), GQA 4 / 2, final RMSNorm "
                      "(norm), rope theta 250000. <|begin_of_text|> ... <|end_of_text|>, pad = <|end_of_text|>, "
                      "right padding, Pooling mean, Normalize.",
    "eurobert_classify_late": "EuroBertForSequenceClassification, classifier_pooling late (the default): dense -> "
                              "GELU -> classifier at every token, then the mean of those logits over the "
                              "non-padding tokens. 3 labels.",
    "eurobert_classify_bos": "EuroBertForSequenceClassification, classifier_pooling bos: dense -> GELU -> "
                             "classifier on the first token. 3 labels.",
    "eurobert_classify_mean": "EuroBertForSequenceClassification, classifier_pooling mean: the mean of the "
                              "non-padding hidden states -> dense -> GELU -> classifier; num_labels 1.",
}


# --------------------------------------------------------------------------
# Tokenizers
# --------------------------------------------------------------------------

read_json, write_json, fix_modes = gd.read_json, gd.write_json, gd.fix_modes
edit_tokenizer_config = gd.edit_tokenizer_config


def max_length(name):
    return PROMPTED_MAX_LENGTH if name in PROMPT_CASES else MAX_LENGTH


def tok_xlmr(d, max_length=MAX_LENGTH):
    """Unigram with XLM-R's special ids (<s> 0, <pad> 1, </s> 2, <unk> 3, <mask> 4), NFKC +
    lowercase, `<s> A </s>` / `<s> A </s></s> B </s>`, no token type ids, right padding."""
    gb.MAX_LENGTH = max_length
    return gb.unigram(d, gb.ROBERTA_SPECIALS, "<s> $A </s>", "<s> $A </s> </s> $B </s>", gb.ROBERTA_NAMES, gb.NO_TYPES)


def tok_llama(d, single, pair, pad, padding_side, max_length=MAX_LENGTH):
    """Byte-level BPE (gen_backbone_fixtures.bpe) with Llama's special ids: <unk> 0, <s> 1,
    </s> 2, and <pad> 3; `single` / `pair` templates."""
    gb.MAX_LENGTH = max_length
    names = dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token=pad)
    n = gb.bpe(d, LLAMA_SPECIALS, single, pair, names, gb.NO_TYPES)
    edit_tokenizer_config(d, padding_side=padding_side)
    return n


def tok_eurobert(d):
    """Byte-level BPE with EuroBERT's (Llama 3's) special tokens, bos and eos around every
    sequence, pad = eos, right padding."""
    gb.MAX_LENGTH = MAX_LENGTH
    bos, eos = EUROBERT_SPECIALS[:2]
    names = dict(bos_token=bos, eos_token=eos, pad_token=eos, mask_token="<|mask|>")
    n = gb.bpe(d, EUROBERT_SPECIALS, f"{bos} $A {eos}", f"{bos} $A {eos} $B:1 {eos}:1", names, gb.NO_TYPES)
    edit_tokenizer_config(d, padding_side="right")
    return n


def tok_gemma(d, padding_side, max_length=MAX_LENGTH):
    """gen_decoder_fixtures' Gemma Unigram: <pad> 0, <eos> 1, <bos> 2, <unk> 3, <mask> 4,
    `<bos> A <eos>`."""
    n = gd.tok_gemma(d, max_length)
    edit_tokenizer_config(d, padding_side=padding_side)
    return n


def tok_camembert(d):
    """CamembertTokenizer itself over the Unigram pieces of gen_backbone_fixtures, with
    CamemBERT's special ids (<s>NOTUSED 0, <pad> 1, </s>NOTUSED 2, <unk> 3, <unk>NOTUSED 4, <s> 5,
    </s> 6, <mask> last) and upper-case letters (the class has no lowercasing normalizer).
    transformers 5 rebuilds the pre-tokenizer and template in the class, so the class makes the
    tokenizer and tokenizer.json is what it saves."""
    from transformers import CamembertTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        gb.MAX_LENGTH = MAX_LENGTH
        gb.unigram(tmp, CAMEMBERT_SPECIALS, "<s> $A </s>", "<s> $A </s> </s> $B </s>", dict(unk_token="<unk>"),
                   gb.NO_TYPES)
        vocab = [tuple(p) for p in read_json(os.path.join(tmp, "tokenizer.json"))["model"]["vocab"]]
    assert [p for p, _ in vocab[:len(CAMEMBERT_SPECIALS)]] == CAMEMBERT_SPECIALS
    seen = {p for p, _ in vocab}
    letters = sorted({c for p, _ in vocab[len(CAMEMBERT_SPECIALS):] for c in p.lstrip("\u2581")
                      if c.isalpha() and c.lower() == c and len(c.upper()) == 1 and c.upper() != c})
    for c in letters:
        for piece, score in (("\u2581" + c.upper(), -8.0), (c.upper(), -9.0)):
            if piece not in seen:
                seen.add(piece)
                vocab.append((piece, score))
    vocab.append(("<mask>", 0.0))
    tok = CamembertTokenizer(vocab=vocab)
    tok.model_max_length = MAX_LENGTH
    tok.save_pretrained(d)
    assert (tok.bos_token_id, tok.pad_token_id, tok.eos_token_id, tok.unk_token_id) == (5, 1, 6, 3)
    return len(vocab)


# --------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------

def gte_config(v, **kw):
    import transformers as tf

    return tf.GteConfig(vocab_size=v, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                        hidden_act="gelu", max_position_embeddings=128, layer_norm_eps=1e-12, pad_token_id=1,
                        **{"type_vocab_size": 1, **kw})


def jina_config(v, **kw):
    import transformers as tf

    return tf.JinaEmbeddingsV3Config(vocab_size=v, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=128, type_vocab_size=1,
                                     layer_norm_eps=1e-5, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                                     **{"hidden_act": "gelu", **kw})


def mistral_config(v, **kw):
    import transformers as tf

    return tf.MistralConfig(vocab_size=v, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=16, hidden_act="silu",
                            max_position_embeddings=128, rms_norm_eps=1e-5,
                            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, sliding_window=8,
                            tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, **kw)


def llama_config(v, **kw):
    import transformers as tf

    return tf.LlamaConfig(vocab_size=v, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=16, hidden_act="silu",
                          max_position_embeddings=128, rms_norm_eps=1e-5,
                          rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, attention_bias=True,
                          mlp_bias=True, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, **kw)


def gemma2_config(v, **kw):
    import transformers as tf

    return tf.Gemma2Config(vocab_size=v, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                           hidden_activation="gelu_pytorch_tanh", max_position_embeddings=128, rms_norm_eps=1e-6,
                           rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, query_pre_attn_scalar=12,
                           sliding_window=8, attn_logit_softcapping=5.0, final_logit_softcapping=30.0,
                           pad_token_id=0, eos_token_id=1, bos_token_id=2, tie_word_embeddings=True, **kw)


def camembert_config(v, **kw):
    import transformers as tf

    return tf.CamembertConfig(vocab_size=v, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                              intermediate_size=64, hidden_act="gelu", max_position_embeddings=130, type_vocab_size=1,
                              layer_norm_eps=1e-5, pad_token_id=1, bos_token_id=5, eos_token_id=6, **kw)


def eurobert_config(v, **kw):
    import transformers as tf

    return tf.EuroBertConfig(vocab_size=v, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, hidden_act="silu",
                             max_position_embeddings=128, rms_norm_eps=1e-5,
                             rope_parameters={"rope_type": "default", "rope_theta": 250000.0}, pad_token_id=1,
                             bos_token_id=0, eos_token_id=1, mask_token_id=2, tie_word_embeddings=False, **kw)


def randomize(model, seed):
    """gen_decoder_fixtures' randomize for these families: Linear and Embedding ~ N(0, 0.5);
    LayerNorm and RMSNorm weight 1 + N(0, 0.2), bias N(0, 0.2); Gemma 2's RMSNorm, which scales by
    (1 + weight), weight N(0, 0.2). Parameters in sorted name order."""
    import torch
    from torch import nn

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for pname, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            owner = model.get_submodule(pname.rsplit(".", 1)[0]) if "." in pname else model
            kind = type(owner).__name__
            if isinstance(owner, (nn.Linear, nn.Embedding)):
                p.copy_(torch.randn(p.shape, generator=g) * INIT_STD)
            elif kind == "Gemma2RMSNorm":
                p.copy_(torch.randn(p.shape, generator=g) * NORM_STD)
            elif isinstance(owner, nn.LayerNorm) or kind.endswith(("LayerNorm", "RMSNorm")):
                base = 1.0 if pname.endswith(".weight") else 0.0
                p.copy_(base + torch.randn(p.shape, generator=g) * NORM_STD)
            else:
                raise SystemExit(f"unexpected parameter {pname} in {kind}")


def new_model(cls, config, seed):
    import torch

    torch.manual_seed(seed)
    model = cls(config).eval()
    randomize(model, seed)
    return model


def labels(id2label):
    return dict(num_labels=len(id2label), id2label=id2label, label2id={v: k for k, v in id2label.items()})


def sentence_model(base, out_dir, pooling, prompts, normalize=True):
    """A sentence-transformers directory: Transformer(base) -> Pooling -> [Normalize]."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    te = Transformer(base)
    modules = [te, Pooling(te.get_embedding_dimension(), pooling)] + ([Normalize()] if normalize else [])
    st = SentenceTransformer(modules=modules, prompts=prompts, default_prompt_name=None, device="cpu")
    st.save(out_dir, create_model_card=False, safe_serialization=True)
    return st


def save_module_names(st, out_dir):
    """Rewrites the ST directory's model.safetensors with transformers' own module names
    (`save_original_format=False`), instead of the checkpoint names its conversion mapping
    gives back on save."""
    from safetensors import safe_open

    model = st[0].auto_model
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, save_original_format=False)
        shutil.copyfile(os.path.join(tmp, "model.safetensors"), os.path.join(out_dir, "model.safetensors"))
    with safe_open(os.path.join(out_dir, "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    if set(model.state_dict()) != keys:
        raise SystemExit(f"{out_dir}: not the module names: {sorted(keys)}")


def build_embed(name, seed, out_dir, work, tokenizer, cls, config, pooling, prompts=None, normalize=True,
                module_names=False):
    base = os.path.join(work, name)
    os.makedirs(base)
    v = tokenizer(base)
    new_model(cls, config(v), seed).save_pretrained(base)
    st = sentence_model(base, out_dir, pooling, prompts or {}, normalize)
    if module_names:
        save_module_names(st, out_dir)


def build(name, seed, out_dir, work):
    """Write fixture `name` (not a derived one) to out_dir."""
    import transformers as tf

    if name == "gte_embed":
        build_embed(name, seed, out_dir, work, tok_xlmr, tf.GteModel, gte_config, "cls", module_names=True)
    elif name == "gte_classify":
        os.makedirs(out_dir)
        v = tok_xlmr(out_dir)
        cfg = gte_config(v, type_vocab_size=0, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                         num_labels=1)
        new_model(tf.GteForSequenceClassification, cfg, seed).save_pretrained(out_dir)
    elif name == "jina_v3_embed":
        build_embed(name, seed, out_dir, work, lambda d: tok_xlmr(d, PROMPTED_MAX_LENGTH), tf.JinaEmbeddingsV3Model,
                    jina_config, "mean", JINA_PROMPTS, module_names=True)
    elif name == "jina_v3_classify":
        os.makedirs(out_dir)
        v = tok_xlmr(out_dir)
        cfg = jina_config(v, hidden_act="gelu_new", rope_parameters={"rope_type": "default", "rope_theta": 50000.0},
                          **labels(NLI3))
        new_model(tf.JinaEmbeddingsV3ForSequenceClassification, cfg, seed).save_pretrained(out_dir)
    elif name == "mistral_embed":
        tok = lambda d: tok_llama(d, "<s> $A </s>", "<s> $A </s> <s>:1 $B:1 </s>:1", "</s>", "left",  # noqa: E731
                                  PROMPTED_MAX_LENGTH)
        build_embed(name, seed, out_dir, work, tok, tf.MistralModel, mistral_config, "lasttoken", E5_MISTRAL_PROMPTS)
    elif name == "mistral_classify":
        os.makedirs(out_dir)
        v = tok_llama(out_dir, "<s> $A", "<s> $A <s>:1 $B:1", "</s>", "right")
        cfg = mistral_config(v, pad_token_id=2, **labels(LABELS3))
        new_model(tf.MistralForSequenceClassification, cfg, seed).save_pretrained(out_dir)
    elif name == "llama_embed":
        tok = lambda d: tok_llama(d, "<s> $A", "<s> $A <s>:1 $B:1", "</s>", "right")  # noqa: E731
        build_embed(name, seed, out_dir, work, tok, tf.LlamaModel, llama_config, "mean")
    elif name == "llama_classify":
        os.makedirs(out_dir)
        v = tok_llama(out_dir, "<s> $A", "<s> $A <s>:1 $B:1", "<pad>", "left")
        cfg = llama_config(v, pad_token_id=3, **labels(LABELS3))
        new_model(tf.LlamaForSequenceClassification, cfg, seed).save_pretrained(out_dir)
    elif name == "gemma2_embed":
        build_embed(name, seed, out_dir, work, lambda d: tok_gemma(d, "left", PROMPTED_MAX_LENGTH), tf.Gemma2Model,
                    gemma2_config, "lasttoken", BGE_GEMMA2_PROMPTS)
    elif name == "gemma2_classify":
        os.makedirs(out_dir)
        v = tok_gemma(out_dir, "right")
        new_model(tf.Gemma2ForSequenceClassification, gemma2_config(v, num_labels=1), seed).save_pretrained(out_dir)
    elif name == "camembert_embed":
        build_embed(name, seed, out_dir, work, tok_camembert, tf.CamembertModel, camembert_config, "mean",
                    normalize=False)
    elif name == "camembert_classify":
        os.makedirs(out_dir)
        v = tok_camembert(out_dir)
        new_model(tf.CamembertForSequenceClassification, camembert_config(v, **labels(LABELS3)),
                  seed).save_pretrained(out_dir)
    elif name == "eurobert_embed":
        build_embed(name, seed, out_dir, work, tok_eurobert, tf.EuroBertModel, eurobert_config, "mean")
    elif name.startswith("eurobert_classify_"):
        os.makedirs(out_dir)
        v = tok_eurobert(out_dir)
        pooling = name.rsplit("_", 1)[1]
        head = labels({0: "score"}) if pooling == "mean" else labels(LABELS3)
        cfg = eurobert_config(v, classifier_pooling=pooling, **head)
        new_model(tf.EuroBertForSequenceClassification, cfg, seed).save_pretrained(out_dir)
    else:
        raise SystemExit(f"unknown fixture {name}")
    fix_modes(out_dir)


def gte_new_layout(src, out_dir):
    """gte_embed in the published GTE layout: model_type "new", NewModel, the hub key names
    (transformers' conversion mapping for gte, inverted: q/k/v fused into qkv_proj, up and gate
    into up_gate_proj, attn_ln / mlp_ln, encoder.layer.N) and the remote code's config keys."""
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, out_dir)
    w = load_file(os.path.join(src, "model.safetensors"))
    out = {}
    for k, v in w.items():
        if not k.startswith("layers."):
            out[k] = v
            continue
        _, i, rest = k.split(".", 2)
        p = f"encoder.layer.{i}."
        if rest.startswith(("self_attn.k_proj.", "self_attn.v_proj.")) or rest == "mlp.gate_proj.weight":
            continue
        if rest.startswith("self_attn.q_proj."):
            suffix = rest.rsplit(".", 1)[1]
            out[p + "attention.qkv_proj." + suffix] = torch.cat(
                [w[f"layers.{i}.self_attn.{x}_proj.{suffix}"] for x in "qkv"], 0)
        elif rest == "mlp.up_proj.weight":
            out[p + "mlp.up_gate_proj.weight"] = torch.cat([v, w[f"layers.{i}.mlp.gate_proj.weight"]], 0)
        else:
            n = rest.replace("self_attn.o_proj", "attention.o_proj").replace("post_attention_layernorm", "attn_ln")
            n = n.replace("post_mlp_layernorm", "mlp_ln")
            out[p + n] = v
    save_file({k: v.contiguous() for k, v in sorted(out.items())}, os.path.join(out_dir, "model.safetensors"),
              metadata={"format": "pt"})
    cfg = read_json(os.path.join(src, "config.json"))
    rope = cfg.pop("rope_parameters")
    assert rope["rope_type"] == "default", rope
    cfg.update(model_type="new", architectures=["NewModel"], rope_theta=rope["rope_theta"], rope_scaling=None,
               position_embedding_type="rope", pack_qkv=True, layer_norm_type="layer_norm", unpad_inputs=False,
               use_memory_efficient_attention=False, logn_attention_scale=False, logn_attention_clip1=False)
    for k in ("dtype", "transformers_version"):
        cfg.pop(k, None)
    write_json(os.path.join(out_dir, "config.json"), cfg)
    fix_modes(out_dir)


def jina_hub_layout(src, out_dir):
    """jina_v3_embed's weights as transformers' save_pretrained writes them: the names its
    conversion mapping reads (emb_ln, encoder.layers.N.mixer.Wqkv, mixer.out_proj, norm1,
    norm2); the rest of the directory is jina_v3_embed's."""
    from transformers import AutoModel

    from safetensors import safe_open

    shutil.copytree(src, out_dir)
    loaded = AutoModel.from_pretrained(src).eval()
    # save_pretrained inverts the conversions the load applied: a model loaded from module
    # names saves module names again, a model built from its config saves the hub names.
    model = type(loaded)(loaded.config).eval()
    model.load_state_dict(loaded.state_dict())
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        shutil.copyfile(os.path.join(tmp, "model.safetensors"), os.path.join(out_dir, "model.safetensors"))
    with safe_open(os.path.join(out_dir, "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    want = {"emb_ln.weight", "encoder.layers.0.mixer.Wqkv.weight", "encoder.layers.0.mixer.out_proj.bias",
            "encoder.layers.0.norm1.weight", "encoder.layers.0.norm2.bias", "encoder.layers.0.mlp.fc1.weight"}
    if not want <= keys or any(k.startswith("layers.") for k in keys):
        raise SystemExit(f"{out_dir}: not the hub names: {sorted(keys)}")
    fix_modes(out_dir)


# --------------------------------------------------------------------------
# Golden values
# --------------------------------------------------------------------------

def load_report(cls, d):
    """Loads with transformers; fails on any missing, unexpected or mismatched weight."""
    model, info = cls.from_pretrained(d, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v and k != "error_msgs"} | ({"error_msgs": info["error_msgs"]}
                                                                          if info.get("error_msgs") else {})
    if bad:
        raise SystemExit(f"{d}: transformers loads it with {bad}")
    return model.eval()


def cls_inputs(name):
    texts = [(t, None) for t in TEXTS]
    pad_ending = {"mistral_classify": "hello world</s>", "llama_classify": "hello world<pad>",
                  "gemma2_classify": "hello world<pad>"}
    extra = [(pad_ending[name], None)] if name in pad_ending else []
    rerank = [(RERANK_QUERY, d) for d in RERANK_DOCS] if name in RERANKERS else []
    return texts + PAIRS + extra + rerank


RERANKERS = {"gte_classify", "gemma2_classify"}


def run_classify(name, out_dir):
    import numpy as np
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out_dir)
    model = load_report(AutoModelForSequenceClassification, out_dir)
    if tok.model_max_length != max_length(name):
        raise SystemExit(f"{name}: model_max_length {tok.model_max_length}")
    inputs = cls_inputs(name)
    gd.check_tokenizer_json(name, out_dir, tok, inputs)
    cases, encs, cut = [], [], []
    for text, pair in inputs:
        enc = tok(text, pair, truncation=True, return_tensors="pt")
        if len(tok(text, pair)["input_ids"]) > tok.model_max_length:
            cut.append(len(cases))
        with torch.inference_mode():
            logits = model(**enc).logits[0].numpy()
        cases.append({"text": text, "pair": pair, "prompt_name": None, "input_ids": gd.ids_list(enc["input_ids"]),
                      "token_type_ids": gd.ids_list(enc["token_type_ids"]) if "token_type_ids" in enc else None,
                      "output": gf.floats(logits)})
        encs.append(tok(text, pair, truncation=True))
    if not cut:
        raise SystemExit(f"{name}: no input is cut at {tok.model_max_length} tokens")
    out = {"cases": cases, "cut_cases": cut}
    enc = tok.pad(encs, return_tensors="pt")
    with torch.inference_mode():
        batched = model(**enc).logits.numpy()
    single = np.stack([np.array(c["output"], dtype=np.float32) for c in cases])
    out["batched"] = [gf.floats(row) for row in batched]
    pad = model.config.pad_token_id
    needs_pad_rule = type(model).__name__.startswith(("Mistral", "Llama", "Gemma2"))
    all_pad = [i for i, c in enumerate(cases) if needs_pad_rule and all(t == pad for t in c["input_ids"])]
    real = [i for i in range(len(cases)) if i not in all_pad]
    out["batched_vs_single"] = float(np.max(np.abs(batched[real] - single[real])))
    if all_pad:
        out["batched_all_pad_rows"] = all_pad
    out["batch_padding_side"] = tok.padding_side
    out["batch_passed"] = sorted(enc.keys())
    if out["batched_vs_single"] > BATCH_TOLERANCE:
        raise SystemExit(f"{name}: batched vs single {out['batched_vs_single']}")
    if name in RERANKERS:
        from sentence_transformers import CrossEncoder

        ce = CrossEncoder(out_dir, device="cpu")
        pairs = [(RERANK_QUERY, d) for d in RERANK_DOCS]
        scores = ce.predict(pairs, convert_to_numpy=True)
        # A batch call keeps ("query", "") as a pair (a single call drops the empty pair), as
        # CrossEncoder does: the reference logits of each pair alone, tokenized that way.
        with torch.inference_mode():
            logits = np.array([model(**tok([q], [d], truncation=True, return_tensors="pt")).logits[0, 0].item()
                               for q, d in pairs], dtype=np.float32)
        diff = float(np.max(np.abs(scores - 1.0 / (1.0 + np.exp(-logits)))))
        if diff > BATCH_TOLERANCE:
            raise SystemExit(f"{name}: CrossEncoder vs sigmoid(single logits) {diff}")
        feats = ce.preprocess(pairs)
        rerank_ids = [row[mask.bool()].tolist() for row, mask in zip(feats["input_ids"], feats["attention_mask"])]
        out["rerank"] = {"query": RERANK_QUERY, "documents": RERANK_DOCS, "input_ids": rerank_ids,
                         "activation": type(ce.activation_fn).__name__, "scores": gf.floats(np.asarray(scores)),
                         "vs_sigmoid_single_logits": diff}
    return model, out


def run_embed(name, out_dir):
    import numpy as np
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    st = SentenceTransformer(out_dir, device="cpu")
    tok = AutoTokenizer.from_pretrained(out_dir)
    load_report(AutoModel, out_dir)
    if st.max_seq_length != max_length(name):
        raise SystemExit(f"{name}: max_seq_length {st.max_seq_length}")
    sets = [(None, TEXTS)] + [(p, PROMPT_TEXTS) for p in PROMPT_CASES.get(name, [])]
    prompted = [((st.prompts[p] if p else "") + t, None) for p, ts in sets for t in ts]
    gd.check_tokenizer_json(name, out_dir, tok, prompted)
    cases, batched, cut = [], [], []
    worst = 0.0
    for pname, texts in sets:
        prompt = st.prompts[pname] if pname else None
        rows = st.encode(texts, prompt_name=pname, batch_size=len(texts), convert_to_numpy=True)
        for text, row in zip(texts, rows):
            feats = st.preprocess([text], prompt=prompt)
            ids = feats["input_ids"][0].tolist()
            full = (prompt or "") + text
            if ids != tok(full, truncation=True, max_length=st.max_seq_length)["input_ids"]:
                raise SystemExit(f"{name}: preprocess ids differ from the tokenizer's for {text!r}")
            if len(tok(full)["input_ids"]) > st.max_seq_length:
                cut.append(len(cases))
            one = st.encode([text], prompt_name=pname, batch_size=1, convert_to_numpy=True)[0]
            worst = max(worst, float(np.max(np.abs(one - row))))
            cases.append({"text": text, "pair": None, "prompt_name": pname, "input_ids": ids,
                          "token_type_ids": feats["token_type_ids"][0].tolist() if "token_type_ids" in feats else None,
                          "output": gf.floats(one)})
            batched.append(gf.floats(row))
    if worst > BATCH_TOLERANCE:
        raise SystemExit(f"{name}: batched vs single {worst}")
    if not cut:
        raise SystemExit(f"{name}: no input is cut at {st.max_seq_length} tokens")
    return st, {"cases": cases, "cut_cases": cut, "batched": batched, "batched_vs_single": worst,
                "batch_padding_side": tok.padding_side, "max_seq_length": st.max_seq_length, "prompts": st.prompts,
                "default_prompt_name": st.default_prompt_name}


def pins(name, kind, out_dir, cases):
    """How far each config change of PINS moves the outputs of the longest case (the model's
    own outputs: last_hidden_state for an embedding model, logits for a classifier)."""
    import numpy as np
    import torch
    from transformers import AutoModel, AutoModelForSequenceClassification

    cls = AutoModelForSequenceClassification if kind == "classify" else AutoModel
    case = max(cases, key=lambda c: len(c["input_ids"]))
    ids = torch.tensor([case["input_ids"]])

    def run(**kw):
        model = cls.from_pretrained(out_dir, **kw).eval()
        with torch.inference_mode():
            out = model(input_ids=ids)
        return (out.logits if kind == "classify" else out.last_hidden_state).numpy()

    base = run()
    moved = {}
    for changes, must_move in ((PINS.get(name, {}), True), (NO_EFFECT.get(name, {}), False)):
        for key, value in changes.items():
            diff = moved[f"{key}={json.dumps(value)}"] = float(np.max(np.abs(run(**{key: value}) - base)))
            if (diff < 1e-3) if must_move else (diff != 0.0):
                raise SystemExit(f"{name}: {key} = {value} changes the outputs by {diff}")
    return {"text": case["text"], "tokens": len(case["input_ids"]), "max_abs_change": moved}


CONFIG_KEYS = gd.CONFIG_KEYS + ["type_vocab_size", "rope_theta", "rope_scaling", "position_embedding_type", "pack_qkv",
                                "layer_norm_type", "unpad_inputs", "use_memory_efficient_attention",
                                "logn_attention_scale", "mlp_bias", "classifier_pooling", "mask_token_id"]


def saved_config(d):
    cfg = read_json(os.path.join(d, "config.json"))
    out = {k: cfg[k] for k in CONFIG_KEYS if k in cfg}
    if "id2label" in out:
        out["num_labels"] = len(out["id2label"])
    return out


def header(name, kind, out_dir, model_type, architecture, hidden):
    tc = read_json(os.path.join(out_dir, "tokenizer_config.json"))
    head = {"model_type": model_type, "kind": kind, "architecture": architecture, "hidden_size": int(hidden),
            "notes": NOTES[name], "config": saved_config(out_dir),
            "tokenizer": {k: tc.get(k) for k in ("tokenizer_class", "padding_side", "pad_token", "eos_token",
                                                  "bos_token", "model_input_names", "model_max_length")}}
    if os.path.exists(os.path.join(out_dir, "modules.json")):
        head["modules"] = [m["type"].rsplit(".", 1)[-1] for m in read_json(os.path.join(out_dir, "modules.json"))]
    return head


def run(name, kind, out_dir):
    if kind == "classify":
        model, out = run_classify(name, out_dir)
    else:
        st, out = run_embed(name, out_dir)
        model = st[0].auto_model
    if name in PINS or name in NO_EFFECT:
        out["pins"] = pins(name, kind, out_dir, out["cases"])
    cfg = model.config
    return {**header(name, kind, out_dir, cfg.model_type, type(model).__name__, cfg.hidden_size), **out}


def transformers_refusal(d):
    """What transformers 5.24 does with a model_type it does not know: AutoConfig raises."""
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(d)
    except ValueError as e:
        return f"AutoConfig.from_pretrained raises ValueError: {str(e).splitlines()[0]}"
    raise SystemExit(f"{d}: transformers loads model_type new; use its outputs")


def ntk_refusal():
    """What transformers 5.24 does with gte-base-en-v1.5's `"rope_scaling": {"type": "ntk",
    "factor": 2.0}`: the config takes it (rope_type "ntk", with a warning that no validation
    function exists), the model cannot be built (ROPE_INIT_FUNCTIONS has no "ntk")."""
    import transformers as tf

    cfg = gte_config(402, rope_scaling={"type": "ntk", "factor": 2.0}, rope_theta=500000.0)
    try:
        tf.GteModel(cfg)
    except KeyError as e:
        return (f"GteConfig keeps rope_parameters {json.dumps(cfg.rope_parameters, sort_keys=True)}; "
                f"GteModel(config) raises KeyError {e}")
    raise SystemExit("transformers builds a GTE model with ntk rope_scaling: add a fixture for it")


def run_derived(name, kind, source, out_dir, results):
    import numpy as np

    src = results[source]
    if name == "gte_new":
        refusal = transformers_refusal(out_dir)
        head_keys = ("model_type", "kind", "architecture", "hidden_size", "notes", "config", "tokenizer", "modules")
        out = {k: v for k, v in src.items() if k not in head_keys + ("pins",)}
        cfg = read_json(os.path.join(out_dir, "config.json"))
        head = header(name, kind, out_dir, cfg["model_type"], cfg["architectures"][0], cfg["hidden_size"])
        return {**head, **out, "derived_from": source, "transformers_load": refusal, "rope_scaling_ntk": ntk_refusal()}
    st, out = run_embed(name, out_dir)
    same = [(a["text"], a["prompt_name"]) == (b["text"], b["prompt_name"]) for a, b in zip(out["cases"], src["cases"])]
    assert all(same) and len(out["cases"]) == len(src["cases"])
    diff = max(float(np.max(np.abs(np.array(a["output"]) - np.array(b["output"]))))
               for a, b in zip(out["cases"], src["cases"]))
    if diff > BATCH_TOLERANCE:
        raise SystemExit(f"{name}: differs from {source} by {diff}")
    cfg = st[0].auto_model.config
    head = header(name, kind, out_dir, cfg.model_type, type(st[0].auto_model).__name__, cfg.hidden_size)
    return {**head, **out, "derived_from": source, "matches_source": diff}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/families")
    args = ap.parse_args()

    import logging
    import warnings

    import sentence_transformers
    import tokenizers
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    logging.getLogger("sentence_transformers").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="pg_embed_families_")
    results = {}
    try:
        for name, kind, seed, source in FIXTURES:
            d = os.path.join(out, name)
            shutil.rmtree(d, ignore_errors=True)
            if source is None:
                build(name, seed, d, work)
                results[name] = run(name, kind, d)
            else:
                layout = {"gte_new": gte_new_layout, "jina_v3_hub": jina_hub_layout}[name]
                layout(os.path.join(out, source), d)
                results[name] = run_derived(name, kind, source, d, results)
            print(f"{name}: batched vs single {results[name].get('batched_vs_single', 0.0):.2e}", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    head = {"generator": {"script": "scripts/gen_family_fixtures.py", "transformers": transformers.__version__,
                          "sentence_transformers": sentence_transformers.__version__, "torch": torch.__version__,
                          "tokenizers": tokenizers.__version__, "python": sys.version.split()[0]},
            "fields": {
                "output": "embed: SentenceTransformer(dir).encode([text], prompt_name=P, batch_size=1)[0]; classify: "
                          "AutoModelForSequenceClassification(**tokenizer(text, pair, truncation=True, "
                          "return_tensors='pt')).logits[0]",
                "input_ids": "what the model was given for (prompt + text) or (text, pair): truncated to "
                             "max_seq_length / model_max_length (32; 64 for the embedders with prompts), unpadded",
                "token_type_ids": "what was passed to the model, or null when the tokenizer returns none",
                "cut_cases": "indices of the cases whose input was cut at max_seq_length / model_max_length",
                "batched": "classify: one batch of every case, tokenizer.pad(...) with the tokenizer's padding side; "
                           "embed: encode(all texts of the case's prompt_name, batch_size=len), in case order",
                "batched_vs_single": "max abs difference of the batched outputs vs the one-by-one ones",
                "pins": "how far each config change moves the longest case's last_hidden_state (embed) or logits "
                        "(classify): the fixture fails an implementation that ignores that setting",
                "derived_from": "another layout of that fixture's weights",
                "matches_source": "max abs difference of this layout's outputs from derived_from's",
                "transformers_load": "why transformers cannot load this layout (the golden values are then "
                                     "derived_from's)",
                "rope_scaling_ntk": "what transformers does with gte-base-en-v1.5's rope_scaling {type: ntk, factor: "
                                    "2.0} (no fixture: it cannot build the model)",
                "rerank": "CrossEncoder(dir).predict([(query, d) for d in documents])"}}
    text = gd.render({**head, "fixtures": results}) + "\n"
    if json.loads(text) != json.loads(json.dumps({**head, "fixtures": results})):
        raise SystemExit("render() changed the data")
    with open(os.path.join(out, "golden.json"), "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)
    os.chmod(os.path.join(out, "golden.json"), 0o644)
    print(f"wrote {out}/golden.json ({len(text)} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
