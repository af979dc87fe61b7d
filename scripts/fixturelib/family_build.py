"""scripts/gen_family_fixtures.py's checkpoints: the tiny tokenizers, the seeded models of each family and
the published-layout copies (gte_new, jina_v3_hub).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from fixturelib import common
from fixturelib.common import read_json, write_json

from fixturelib.family_spec import (BGE_GEMMA2_PROMPTS, CAMEMBERT_SPECIALS, E5_MISTRAL_PROMPTS,
    EUROBERT_SPECIALS, INIT_STD, JINA_PROMPTS, LABELS3, LLAMA_SPECIALS, MAX_LENGTH, NLI3, NORM_STD,
    PROMPTED_MAX_LENGTH, PROMPT_CASES, gb, gd)


# --------------------------------------------------------------------------
# Tokenizers
# --------------------------------------------------------------------------

fix_modes = gd.fix_modes
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
    (1 + weight), weight N(0, 0.2)."""
    common.randomize(model, seed, INIT_STD, NORM_STD, one_plus_norms=("Gemma2RMSNorm",))


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
