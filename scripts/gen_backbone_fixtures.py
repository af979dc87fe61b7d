#!/usr/bin/env python3
"""Generate a tiny seeded random checkpoint per backbone architecture, with transformers' outputs.

Usage:
    HF_HUB_OFFLINE=1 python scripts/gen_backbone_fixtures.py --out tests/fixtures/backbones

Each fixture is what `<Architecture>Model.save_pretrained` writes for a small random model,
with a tiny tokenizer of the kind the architecture's published models use (WordPiece,
byte-level BPE or Unigram/SentencePiece-style, trained on the corpus of
scripts/gen_fixtures.py). golden.json records, per input: the token ids, transformers'
last_hidden_state (one input at a time) and the pooled embedding: sentence-transformers'
Transformer + Pooling("mean") encode, or for the CLIP text tower transformers'
`text_embeds` (EOS token, then text_projection). Nothing is downloaded; the output is
deterministic.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixturelib.common import load, offline, write_golden  # noqa: E402

offline()


gf = load("gen_fixtures")

MAX_LENGTH = 32
HIDDEN = gf.HIDDEN

# name -> (model_type, tokenizer kind, seed)
FIXTURES = [
    ("bert", "bert", "wordpiece", 31),
    ("roberta", "roberta", "bpe", 32),
    ("xlm_roberta", "xlm-roberta", "unigram_xlmr", 33),
    ("distilbert", "distilbert", "wordpiece", 34),
    ("electra", "electra", "wordpiece", 35),
    ("deberta_v2", "deberta-v2", "unigram_xlmr", 36),
    ("modernbert", "modernbert", "wordpiece", 37),
    ("mpnet", "mpnet", "wordpiece_mpnet", 38),
    ("t5", "t5", "unigram_t5", 39),
    ("clip", "clip_text_model", "bpe_clip", 40),
    ("nomic_bert", "nomic_bert", "wordpiece", 41),
]
# Derived fixtures: another directory layout of a fixture's weights, checked against the
# same transformers outputs. nomic_bert_hub: the layout and config keys of the checkpoints
# nomic-ai publishes, made by inverting transformers' own nomic_bert conversion mapping.
DERIVED = {"nomic_bert_hub": "nomic_bert"}
# sentence-transformers models around a fixture's backbone, with their own pooled outputs:
# t5_sentence is sentence-t5's layout (T5 encoder, mean pooling, a bias-free Identity Dense
# projection, Normalize).
SENTENCE_MODELS = {"t5_sentence": "t5"}

TEXTS = [text for _, text in gf.CASES] + [
    "A much longer input that runs past the local attention window of the tiny ModernBERT and past "
    "the relative position buckets of the tiny DeBERTa and T5 models, so that every mechanism is used.",
]


# --------------------------------------------------------------------------
# Tokenizers
# --------------------------------------------------------------------------

def save_tokenizer(tok, out_dir, specials: dict, input_names):
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(tokenizer_object=tok, model_input_names=input_names, **specials)
    hf.model_max_length = MAX_LENGTH
    hf.save_pretrained(out_dir)
    return tok.get_vocab_size()


def wordpiece(out_dir, specials, single, pair, names, input_names):
    """The WordPiece vocabulary of scripts/gen_fixtures.py with `specials` as ids 0..4."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    vocab = list(specials) + gf.build_vocab()[len(gf.SPECIALS):]
    ids = {t: i for i, t in enumerate(vocab)}
    tok = Tokenizer(models.WordPiece(vocab=ids, unk_token=names["unk_token"], continuing_subword_prefix="##",
                                     max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                                lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single=single, pair=pair, special_tokens=[(t, ids[t]) for t in specials if t in single + pair])
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.add_special_tokens(list(specials))
    return save_tokenizer(tok, out_dir, names, input_names)


def bpe(out_dir, specials, single, pair, names, input_names, lowercase=False, corpus=None, vocab_size=420):
    """Byte-level BPE of `vocab_size` tokens trained on `corpus` (lines; default the corpus of
    scripts/gen_fixtures.py) with `specials` as ids 0.."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    if lowercase:
        tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(specials), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(gf.CORPUS.splitlines() if corpus is None else corpus, trainer=trainer)
    ids = {t: tok.token_to_id(t) for t in specials}
    assert [ids[t] for t in specials] == list(range(len(specials))), ids
    tok.post_processor = processors.TemplateProcessing(
        single=single, pair=pair, special_tokens=[(t, ids[t]) for t in specials if t in single + pair])
    return save_tokenizer(tok, out_dir, names, input_names)


def unigram(out_dir, specials, single, pair, names, input_names):
    """A SentencePiece-style Unigram tokenizer over the WordPiece vocabulary's pieces: "\u2581"
    marks a word start; whole words score above word pieces, which score above single
    characters. Built, not trained: the Unigram trainer is not deterministic across runs."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    pieces = [(t, 0.0) for t in specials]
    seen = set(specials)

    def add(piece, score):
        if piece not in seen:
            seen.add(piece)
            pieces.append((piece, score))

    vocab = gf.build_vocab()[len(gf.SPECIALS):]
    for t in vocab:
        if t.startswith("##"):
            add(t[2:], -4.0 - 0.01 * len(pieces))
        elif len(t) > 1:
            add("\u2581" + t, -2.0 - 0.01 * len(pieces))
    for t in vocab:
        if len(t) == 1:
            add("\u2581" + t, -8.0)
            add(t, -9.0)
    add("\u2581", -10.0)
    unk = names["unk_token"]
    tok = Tokenizer(models.Unigram(pieces, unk_id=specials.index(unk), byte_fallback=False))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    ids = {t: tok.token_to_id(t) for t in specials}
    tok.post_processor = processors.TemplateProcessing(
        single=single, pair=pair, special_tokens=[(t, ids[t]) for t in specials if t in single + pair])
    tok.add_special_tokens(list(specials))
    return save_tokenizer(tok, out_dir, names, input_names)


BERT_NAMES = dict(unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]", cls_token="[CLS]", mask_token="[MASK]")
ROBERTA_NAMES = dict(bos_token="<s>", eos_token="</s>", sep_token="</s>", cls_token="<s>", unk_token="<unk>",
                     pad_token="<pad>", mask_token="<mask>")
ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
WITH_TYPES = ["input_ids", "token_type_ids", "attention_mask"]
NO_TYPES = ["input_ids", "attention_mask"]


def build_tokenizer(kind, out_dir):
    if kind == "wordpiece":
        return wordpiece(out_dir, gf.SPECIALS, "[CLS] $A [SEP]", "[CLS] $A [SEP] $B:1 [SEP]:1", BERT_NAMES, WITH_TYPES)
    if kind == "wordpiece_mpnet":
        return wordpiece(out_dir, ROBERTA_SPECIALS, "<s> $A </s>", "<s> $A </s> </s> $B </s>", ROBERTA_NAMES, NO_TYPES)
    if kind == "bpe":
        return bpe(out_dir, ROBERTA_SPECIALS, "<s> $A </s>", "<s> $A </s> </s> $B </s>", ROBERTA_NAMES, NO_TYPES)
    if kind == "bpe_clip":
        names = dict(bos_token="<|startoftext|>", eos_token="<|endoftext|>", unk_token="<|endoftext|>",
                     pad_token="<|endoftext|>")
        return bpe(out_dir, ["<|startoftext|>", "<|endoftext|>"], "<|startoftext|> $A <|endoftext|>",
                   "<|startoftext|> $A <|endoftext|> $B <|endoftext|>", names, NO_TYPES, lowercase=True)
    if kind == "unigram_xlmr":
        return unigram(out_dir, ROBERTA_SPECIALS, "<s> $A </s>", "<s> $A </s> </s> $B </s>", ROBERTA_NAMES, NO_TYPES)
    if kind == "unigram_t5":
        names = dict(eos_token="</s>", unk_token="<unk>", pad_token="<pad>")
        return unigram(out_dir, ["<pad>", "</s>", "<unk>"], "$A </s>", "$A </s> $B </s>", names, NO_TYPES)
    raise SystemExit(f"unknown tokenizer kind {kind}")


# --------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------

def architecture(model_type, vocab_size):
    """A small config of `model_type` and its base model class."""
    import transformers as tf

    bert_like = dict(vocab_size=vocab_size, hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, hidden_act="gelu")
    if model_type == "bert":
        return tf.BertModel, tf.BertConfig(max_position_embeddings=128, pad_token_id=0, **bert_like)
    if model_type == "roberta":
        return tf.RobertaModel, tf.RobertaConfig(max_position_embeddings=130, type_vocab_size=1, pad_token_id=1,
                                                 bos_token_id=0, eos_token_id=2, **bert_like)
    if model_type == "xlm-roberta":
        return tf.XLMRobertaModel, tf.XLMRobertaConfig(max_position_embeddings=130, type_vocab_size=1, pad_token_id=1,
                                                       bos_token_id=0, eos_token_id=2, **bert_like)
    if model_type == "distilbert":
        return tf.DistilBertModel, tf.DistilBertConfig(vocab_size=vocab_size, dim=HIDDEN, n_layers=2, n_heads=4,
                                                       hidden_dim=64, max_position_embeddings=128, activation="gelu",
                                                       pad_token_id=0)
    if model_type == "electra":
        return tf.ElectraModel, tf.ElectraConfig(embedding_size=16, max_position_embeddings=128, pad_token_id=0,
                                                 **bert_like)
    if model_type == "deberta-v2":
        return tf.DebertaV2Model, tf.DebertaV2Config(
            max_position_embeddings=128, relative_attention=True, position_buckets=16, max_relative_positions=-1,
            pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm", share_att_key=True, position_biased_input=False,
            type_vocab_size=0, pad_token_id=1, layer_norm_eps=1e-7, **bert_like)
    if model_type == "modernbert":
        return tf.ModernBertModel, tf.ModernBertConfig(
            vocab_size=vocab_size, hidden_size=HIDDEN, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
            max_position_embeddings=128, global_attn_every_n_layers=3, local_attention=8, pad_token_id=0,
            cls_token_id=2, sep_token_id=3, bos_token_id=2, eos_token_id=3, hidden_activation="gelu")
    if model_type == "mpnet":
        return tf.MPNetModel, tf.MPNetConfig(max_position_embeddings=130, relative_attention_num_buckets=32,
                                             pad_token_id=1, bos_token_id=0, eos_token_id=2, **bert_like)
    if model_type == "t5":
        # T5 v1.1 / GTR style: gated GELU feed-forward, relative position buckets.
        return tf.T5EncoderModel, tf.T5Config(vocab_size=vocab_size, d_model=HIDDEN, d_kv=8, d_ff=64, num_layers=2,
                                              num_heads=4, relative_attention_num_buckets=8,
                                              relative_attention_max_distance=20, feed_forward_proj="gated-gelu",
                                              pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
                                              is_encoder_decoder=False, use_cache=False)
    if model_type == "nomic_bert":
        return tf.NomicBertModel, tf.NomicBertConfig(
            vocab_size=vocab_size, hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=48, hidden_act="silu", max_position_embeddings=128, type_vocab_size=2, pad_token_id=0)
    if model_type == "clip_text_model":
        return tf.CLIPTextModelWithProjection, tf.CLIPTextConfig(
            vocab_size=vocab_size, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, max_position_embeddings=MAX_LENGTH, hidden_act="quick_gelu", projection_dim=16,
            pad_token_id=1, bos_token_id=0, eos_token_id=1)
    raise SystemExit(f"unknown model_type {model_type}")


def randomize(model, seed):
    import torch
    from torch import nn

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for pname, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            module = model.get_submodule(pname.rsplit(".", 1)[0])
            if isinstance(module, (nn.Linear, nn.Embedding)):
                p.copy_(torch.randn(p.shape, generator=g) * gf.INIT_STD)
            elif isinstance(module, nn.LayerNorm) or type(module).__name__.endswith(("LayerNorm", "RMSNorm")):
                base = 1.0 if pname.endswith(".weight") else 0.0
                p.copy_(base + torch.randn(p.shape, generator=g) * gf.LAYERNORM_STD)
            else:
                raise SystemExit(f"unexpected parameter {pname} in {type(module).__name__}")


def build(name, model_type, kind, seed, out_dir):
    import torch

    os.makedirs(out_dir)
    vocab_size = build_tokenizer(kind, out_dir)
    cls, config = architecture(model_type, vocab_size)
    torch.manual_seed(seed)
    model = cls(config).eval()
    randomize(model, seed)
    model.save_pretrained(out_dir, safe_serialization=True)


def nomic_hub_layout(src, out_dir):
    """nomic_bert as nomic-ai saves it: fused Wqkv, fc11 (up) / fc12 (gate) / fc2, norm1 / norm2,
    emb_ln, encoder.layers.*, and nomic's config keys."""
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, out_dir)
    w = load_file(os.path.join(src, "model.safetensors"))
    cfg = json.load(open(os.path.join(src, "config.json")))
    out = {}
    for k, v in w.items():
        if ".self_attn.k_proj." in k or ".self_attn.v_proj." in k:
            continue
        if ".self_attn.q_proj." in k:
            layer = k.split(".")[1]
            parts = [w[f"layers.{layer}.self_attn.{p}_proj.weight"] for p in "qkv"]
            out[f"encoder.layers.{layer}.attn.Wqkv.weight"] = torch.cat(parts, 0).contiguous()
            continue
        n = k.replace("embeddings.LayerNorm", "emb_ln").replace("self_attn.o_proj", "attn.out_proj")
        n = n.replace("mlp.up_proj", "mlp.fc11").replace("mlp.gate_proj", "mlp.fc12").replace("mlp.down_proj", "mlp.fc2")
        n = n.replace("post_attention_layernorm", "norm1").replace("post_mlp_layernorm", "norm2")
        if n.startswith("layers."):
            n = "encoder." + n
        out[n] = v.contiguous()
    save_file(out, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    hub = {"model_type": "nomic_bert", "architectures": ["NomicBertModel"], "vocab_size": cfg["vocab_size"],
           "n_embd": cfg["hidden_size"], "n_layer": cfg["num_hidden_layers"], "n_head": cfg["num_attention_heads"],
           "n_inner": cfg["intermediate_size"], "activation_function": "swiglu", "n_positions":
           cfg["max_position_embeddings"], "type_vocab_size": cfg["type_vocab_size"], "layer_norm_epsilon":
           cfg["layer_norm_eps"], "rotary_emb_base": cfg["rope_parameters"]["rope_theta"], "rotary_emb_fraction": 1.0,
           "rotary_emb_interleaved": False, "prenorm": False, "qkv_proj_bias": False, "mlp_fc1_bias": False,
           "mlp_fc2_bias": False, "pad_token_id": cfg["pad_token_id"]}
    with open(os.path.join(out_dir, "config.json"), "w", encoding="utf-8", newline="\n") as fh:
        fh.write(json.dumps(hub, indent=2, sort_keys=True) + "\n")


def sentence_t5(src, out_dir):
    """A sentence-transformers model directory: Transformer(src) -> mean -> Dense -> Normalize;
    returns its encode() outputs for TEXTS."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense, Normalize, Pooling, Transformer

    te = Transformer(src, max_seq_length=MAX_LENGTH)
    dim = te.get_embedding_dimension()
    dense = Dense(dim, 16, bias=False, activation_function=torch.nn.Identity())
    g = torch.Generator().manual_seed(42)
    with torch.no_grad():
        dense.linear.weight.copy_(torch.randn(dense.linear.weight.shape, generator=g) * gf.INIT_STD)
    st = SentenceTransformer(modules=[te, Pooling(dim, "mean"), dense, Normalize()], device="cpu")
    st.save(out_dir, create_model_card=False, safe_serialization=True)
    for root, dirs, files in os.walk(out_dir):
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)
    reloaded = SentenceTransformer(out_dir, device="cpu")
    return reloaded.encode(TEXTS, batch_size=len(TEXTS), convert_to_numpy=True)


def run(name, model_type, out_dir):
    import numpy as np
    import torch
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out_dir)
    cls, _ = architecture(model_type, 1)
    model = cls.from_pretrained(out_dir).eval()
    if tok.model_max_length != MAX_LENGTH:
        raise SystemExit(f"{name}: model_max_length {tok.model_max_length}")

    cases = []
    for text in TEXTS:
        enc = tok(text, truncation=True, return_tensors="pt")
        with torch.inference_mode():
            out = model(**enc)
        hidden = out.last_hidden_state[0].numpy()
        case = {"text": text, "input_ids": enc["input_ids"][0].tolist(), "hidden": gf.floats(hidden)}
        if model_type == "clip_text_model":
            case["pooled"] = gf.floats(out.text_embeds[0].numpy())
        cases.append(case)

    # One padded batch: every row's unpadded hidden states equal the one-by-one ones.
    enc = tok(TEXTS, truncation=True, padding=True, return_tensors="pt")
    with torch.inference_mode():
        batched = model(**enc).last_hidden_state.numpy()
    worst = 0.0
    for row, case in enumerate(cases):
        n = len(case["input_ids"])
        single = np.array(case["hidden"], dtype=np.float32).reshape(n, -1)
        worst = max(worst, float(np.max(np.abs(batched[row, :n] - single))))
    if worst > 1e-4:
        raise SystemExit(f"{name}: batched vs single hidden states {worst}")

    if model_type != "clip_text_model":
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

        te = Transformer(out_dir, max_seq_length=MAX_LENGTH)
        st = SentenceTransformer(modules=[te, Pooling(te.get_embedding_dimension(), "mean")], device="cpu")
        pooled = st.encode(TEXTS, batch_size=len(TEXTS), convert_to_numpy=True)
        for case, vec in zip(cases, pooled):
            case["pooled"] = gf.floats(vec)
    return {"model_type": model_type, "architecture": type(model).__name__,
            "pooled_by": "text_embeds" if model_type == "clip_text_model" else "mean",
            "hidden_size": int(model.config.hidden_size), "batched_vs_single": worst, "cases": cases}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/backbones")
    ap.add_argument("--only", nargs="*", help="fixture names (default: all)")
    args = ap.parse_args()

    import torch
    import transformers
    import sentence_transformers

    transformers.logging.set_verbosity_error()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    results = {}
    for (name, model_type, kind, seed) in FIXTURES:
        if args.only and name not in args.only:
            continue
        d = os.path.join(out, name)
        shutil.rmtree(d, ignore_errors=True)
        build(name, model_type, kind, seed, d)
        for root, dirs, files in os.walk(d):
            for f in files:
                os.chmod(os.path.join(root, f), 0o644)
        results[name] = run(name, model_type, d)
        print(f"{name}: batched vs single {results[name]['batched_vs_single']:.2e}", file=sys.stderr)
    for derived, base in DERIVED.items():
        if base not in results:
            continue
        d = os.path.join(out, derived)
        shutil.rmtree(d, ignore_errors=True)
        nomic_hub_layout(os.path.join(out, base), d)
        for f in os.listdir(d):
            os.chmod(os.path.join(d, f), 0o644)
        results[derived] = {k: v for k, v in results[base].items() if k != "cases"} | {"derived_from": base}
    for derived, base in SENTENCE_MODELS.items():
        if base not in results:
            continue
        d = os.path.join(out, derived)
        shutil.rmtree(d, ignore_errors=True)
        pooled = sentence_t5(os.path.join(out, base), d)
        results[derived] = {k: v for k, v in results[base].items() if k != "cases"} | {
            "derived_from": base, "pooled_by": "sentence_transformers", "pooled": [gf.floats(v) for v in pooled]}
    header = {"generator": {"script": "scripts/gen_backbone_fixtures.py", "transformers": transformers.__version__,
                            "sentence_transformers": sentence_transformers.__version__, "torch": torch.__version__,
                            "hidden": "Model(**tokenizer(text, truncation=True)).last_hidden_state[0], row-major",
                            "pooled": "SentenceTransformer([Transformer, Pooling(mean)]).encode, or CLIP text_embeds"},
              "max_length": MAX_LENGTH}
    text = json.dumps({**header, "fixtures": results}, ensure_ascii=False, indent=1) + "\n"
    write_golden(os.path.join(out, "golden.json"), text)
    print(f"wrote {out}/golden.json ({len(text)} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
