#!/usr/bin/env python3
"""Generate tiny seeded checkpoints of the rotary families with rotary scaling (every type
transformers 5.24's `modeling_rope_utils` computes, and GTE's `ntk`) and transformers' last hidden
states for them.

Usage:
    HF_HUB_OFFLINE=1 bench/.venv/bin/python scripts/gen_rope_fixtures.py --out tests/fixtures/rope

Each fixture is what `save_pretrained` writes for a small random bare model (`Qwen3Model`,
`LlamaModel`, `Gemma3TextModel`, `GteModel`, `ModernBertModel`): config.json and model.safetensors,
no tokenizer (the inputs are token ids). golden.json holds, per fixture, the inputs and the last
hidden state transformers gives for each input run alone, through a fresh copy of the model: the
length-dependent types (dynamic, longrope) keep state in transformers' rotary module between
calls, and a padded batch takes the frequencies of its longest row, so only a lone input is the
reference. GTE's `ntk` is not in transformers: this script registers the published formula
(Alibaba-NLP's `NTKScalingRotaryEmbedding`) in `ROPE_INIT_FUNCTIONS` and runs `GteModel` with it.
See tests/fixtures/rope/README.md. Nothing is downloaded; the output is deterministic. Golden
values come from transformers only.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import sys

sys.dont_write_bytecode = True  # the generators are imported from scripts/: no __pycache__ there
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixturelib.common import chmod_tree, dir_size, offline, render, write_golden  # noqa: E402
from fixturelib.common import randomize as common_randomize  # noqa: E402

offline()
os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"

VOCAB = 64
INIT_STD = 0.2      # Linear / Embedding ~ N(0, 0.2): smaller than the other generators' 0.5, so float32 rounding in the rotary tables moves little
NORM_STD = 0.2      # norm weight ~ 1 + N(0, 0.2), bias ~ N(0, 0.2); Gemma's (1 + weight) norms N(0, 0.2)
# Input lengths: around 16, the original length of the scaled fixtures (16 stays short, 17 is
# long), and up to 36, beyond it.
LENGTHS = [4, 16, 17, 26, 36]
HEAD_DIM = 16
# LongRoPE's factors, one per frequency (HEAD_DIM / 2).
SHORT = [1.0, 1.1, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0]
LONG = [1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0]

# name, family, seed, rotary settings (what config.json says), max_position_embeddings, notes
FIXTURES = [
    ("qwen3_linear", "qwen3", 201, {"rope_parameters": {"rope_type": "linear", "factor": 2.5, "rope_theta": 10000.0}},
     64, "linear: frequencies / 2.5"),
    ("qwen3_dynamic", "qwen3", 202,
     {"rope_parameters": {"rope_type": "dynamic", "factor": 3.0, "rope_theta": 10000.0}}, 16,
     "dynamic NTK: an input longer than max_position_embeddings 16 takes base 10000 (3 len / 16 - 2)^(16/14)"),
    ("qwen3_yarn", "qwen3", 203,
     {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                          "beta_fast": 4.0, "beta_slow": 0.25, "rope_theta": 10000.0}}, 64,
     "YaRN, truncated correction range, attention factor 0.1 ln 4 + 1"),
    ("llama_yarn_mscale", "llama", 204,
     {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                          "mscale": 0.707, "mscale_all_dim": 1.0, "beta_fast": 8.0, "beta_slow": 0.5,
                          "truncate": False, "rope_theta": 50000.0}}, 64,
     "YaRN, untruncated correction range, attention factor from mscale / mscale_all_dim"),
    ("qwen3_longrope", "qwen3", 205,
     {"rope_parameters": {"rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG,
                          "original_max_position_embeddings": 16, "rope_theta": 10000.0}}, 64,
     "LongRoPE: short factors up to 16 tokens, long ones beyond; no factor: 64 / 16, attention factor "
     "sqrt(1 + ln 4 / ln 16)"),
    ("llama_llama3", "llama", 206,
     {"rope_parameters": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 0.5, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 16, "rope_theta": 10000.0}}, 64,
     "Llama 3.1: wavelengths above 32 / 8, below 4 kept, smoothed between"),
    ("qwen3_proportional", "qwen3", 207,
     {"rope_parameters": {"rope_type": "proportional", "factor": 2.0, "rope_theta": 10000.0}}, 64,
     "proportional over the whole head: frequencies / 2"),
    ("gemma3_linear", "gemma3", 208,
     {"rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                          "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}}, 64,
     "Gemma 3: linear on the global layer only (as gemma-3-4b), the sliding layer unscaled"),
    ("gte_ntk", "gte", 209, {"rope_scaling": {"type": "ntk", "factor": 2.0}, "rope_theta": 10000.0}, 64,
     "GTE's ntk (gte-base-en-v1.5's rope_scaling): (theta factor)^(-2i/d) / factor^(2/d)"),
    ("gte_ntk_mixed_b", "gte", 210,
     {"rope_scaling": {"type": "ntk", "factor": 4.0, "mixed_b": 0.75}, "rope_theta": 10000.0}, 64,
     "GTE's ntk with mixed_b: theta^(-2i/d) / exp(ln(factor) / (d/2)^b (i+1)^b)"),
    ("modernbert_yarn", "modernbert", 211,
     {"rope_scaling": {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 16,
                       "beta_fast": 4.0, "beta_slow": 0.5}}, 64,
     "ModernBERT: rope_scaling applies to both layer types (global theta 160000, local 10000)"),
    ("modernbert_dynamic", "modernbert", 212,
     {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, 16,
     "ModernBERT, dynamic NTK on both layer types"),
]
LENGTH_DEPENDENT = ("dynamic", "longrope")
NOISE = 8e-5        # the most a 1e-6 relative change of the weights may move a fixture's outputs


def floats(v):
    """A float32 array as the shortest decimals that read back as the same float32 values."""
    import numpy as np

    return [float(str(np.float32(x))) for x in v.reshape(-1).tolist()]


def ntk_rope_parameters(config, device=None, seq_len=None, layer_type=None):
    """Alibaba-NLP's NTKScalingRotaryEmbedding (GTE's `rope_scaling` {"type": "ntk"}): its cache is
    built for max_position_embeddings * factor positions at init, beyond max_position_embeddings, so
    its scaled frequencies are the ones used; float32 as that class computes them."""
    import torch

    p = config.rope_parameters
    base, factor, mixed_b = p["rope_theta"], p["factor"], p.get("mixed_b")
    dim = config.hidden_size // config.num_attention_heads
    base = base * (factor if mixed_b is None else 1)
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float().to(device) / dim))
    if mixed_b is None:
        inv_freq = inv_freq / factor ** (2 / dim)
    else:
        a = torch.tensor(factor).log() / (dim / 2) ** mixed_b
        lambda_1_m = (a * torch.arange(1, dim // 2 + 1).float().to(device) ** mixed_b).exp()
        inv_freq = inv_freq / lambda_1_m
    return inv_freq, 1.0


def make_config(family, rope, max_positions):
    import transformers as tf

    common = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=32, num_hidden_layers=2,
                  num_attention_heads=2, max_position_embeddings=max_positions, **rope)
    if family == "qwen3":
        return tf.Qwen3Config(num_key_value_heads=1, head_dim=HEAD_DIM, rms_norm_eps=1e-6, tie_word_embeddings=False,
                              **common)
    if family == "llama":
        return tf.LlamaConfig(num_key_value_heads=1, head_dim=HEAD_DIM, rms_norm_eps=1e-5, tie_word_embeddings=False,
                              bos_token_id=1, eos_token_id=2, **common)
    if family == "gemma3":
        return tf.Gemma3TextConfig(num_key_value_heads=1, head_dim=HEAD_DIM, query_pre_attn_scalar=16,
                                   hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6, sliding_window=8,
                                   layer_types=["sliding_attention", "full_attention"],
                                   use_bidirectional_attention=True, final_logit_softcapping=None,
                                   attn_logit_softcapping=None, tie_word_embeddings=True, pad_token_id=0,
                                   eos_token_id=1, bos_token_id=2, **common)
    if family == "gte":
        return tf.GteConfig(hidden_act="gelu", layer_norm_eps=1e-12, pad_token_id=1, type_vocab_size=1, **common)
    if family == "modernbert":
        return tf.ModernBertConfig(hidden_activation="gelu", global_attn_every_n_layers=2, local_attention=8,
                                   norm_eps=1e-5, pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1,
                                   sep_token_id=2, global_rope_theta=160000.0, local_rope_theta=10000.0, **common)
    raise SystemExit(f"unknown family {family}")


MODEL_CLASSES = {"qwen3": "Qwen3Model", "llama": "LlamaModel", "gemma3": "Gemma3TextModel", "gte": "GteModel",
                 "modernbert": "ModernBertModel"}


def randomize(model, seed):
    """Linear and Embedding ~ N(0, 0.2); LayerNorm and RMSNorm weight 1 + N(0, 0.2), bias N(0, 0.2);
    Gemma 3's RMSNorm, which scales by (1 + weight), weight N(0, 0.2)."""
    common_randomize(model, seed, INIT_STD, NORM_STD, one_plus_norms=("Gemma3RMSNorm",))


def build(family, seed, rope, max_positions):
    import torch
    import transformers as tf

    torch.manual_seed(seed)
    model = getattr(tf, MODEL_CLASSES[family])(make_config(family, rope, max_positions)).eval()
    randomize(model, seed)
    return model


def inputs(seed):
    import torch

    g = torch.Generator().manual_seed(seed)
    # Ids 3.. (no special token of any of the configs).
    return [torch.randint(3, VOCAB, (n,), generator=g).tolist() for n in LENGTHS]


def hidden(model, ids):
    """The last hidden state of `ids` alone, through a fresh copy of `model` (no rotary state
    left by an earlier call)."""
    import torch

    with torch.no_grad():
        out = copy.deepcopy(model)(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long))
    return out.last_hidden_state[0].float().numpy()


def padded_batch(model, cases):
    """Max abs difference of one right-padded batch from the lone inputs (transformers' own)."""
    import torch

    longest = max(len(c) for c in cases)
    ids = torch.tensor([c + [0] * (longest - len(c)) for c in cases])
    mask = torch.tensor([[1] * len(c) + [0] * (longest - len(c)) for c in cases])
    with torch.no_grad():
        out = copy.deepcopy(model)(input_ids=ids, attention_mask=mask).last_hidden_state
    return max(float(abs(out[i, :len(c)].numpy() - hidden(model, c)).max()) for i, c in enumerate(cases))


def noise(model, cases):
    """How far the outputs move when every parameter is multiplied by 1 + N(0, 1e-6) (about 8
    float32 ulps): a fixture that float32 rounding moves by more than a fraction of the
    tests' 1e-4 is no use as a reference."""
    import torch

    g = torch.Generator().manual_seed(1)
    other = copy.deepcopy(model)
    with torch.no_grad():
        for p in other.parameters():
            p.mul_(1 + 1e-6 * torch.randn(p.shape, generator=g))
    return max(float(abs(hidden(model, c) - hidden(other, c)).max()) for c in cases)


def unscaled(rope):
    """The same settings without scaling: the default type, the same bases."""
    rope = copy.deepcopy(rope)
    rope.pop("rope_scaling", None)
    p = rope.get("rope_parameters")
    if p is not None:
        for entry in (p.values() if "full_attention" in p else [p]):
            for key in list(entry):
                if key != "rope_theta":
                    del entry[key]
            entry["rope_type"] = "default"
    return rope


def run(name, family, seed, rope, max_positions, notes, out_dir):
    import transformers as tf

    model = build(family, seed, rope, max_positions)
    model.save_pretrained(out_dir)
    chmod_tree(out_dir)
    config = json.load(open(os.path.join(out_dir, "config.json"), encoding="utf-8"))
    # The saved files read back as the model that made them.
    again = getattr(tf, MODEL_CLASSES[family]).from_pretrained(out_dir).eval()
    cases = inputs(seed)
    outs = [hidden(model, ids) for ids in cases]
    for ids, want in zip(cases, outs):
        if abs(hidden(again, ids) - want).max() != 0.0:
            raise SystemExit(f"{name}: the saved model gives other numbers")
    rounding = noise(model, cases)
    if rounding > NOISE:
        raise SystemExit(f"{name}: a 1e-6 relative change of the weights moves the outputs by {rounding}")
    # The scaling moves the outputs; where it depends on the length, only beyond it.
    plain = build(family, seed, unscaled(rope), max_positions)
    moved = [float(abs(hidden(plain, ids) - want).max()) for ids, want in zip(cases, outs)]
    kind = json.dumps(rope)
    if moved[-1] < 1e-3:
        raise SystemExit(f"{name}: the scaling moves the longest input by {moved[-1]}")
    if "dynamic" in kind and max(moved[:2]) != 0.0:
        raise SystemExit(f"{name}: dynamic NTK moves inputs of at most 16 tokens by {max(moved[:2])}")
    return {
        "model_type": config["model_type"],
        "architecture": MODEL_CLASSES[family],
        "hidden_size": config["hidden_size"],
        "notes": notes,
        "rope": {k: config[k] for k in ("rope_parameters", "rope_scaling", "rope_theta") if k in config},
        "length_dependent": any(t in kind for t in LENGTH_DEPENDENT),
        "moved_by_scaling": moved,
        "moved_by_weight_noise": rounding,
        "transformers_padded_batch_vs_single": padded_batch(model, cases),
        "cases": [{"input_ids": ids, "hidden": floats(h)} for ids, h in zip(cases, outs)],
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/rope")
    args = ap.parse_args()

    import logging
    import warnings

    import torch
    import transformers
    from transformers import modeling_rope_utils

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    logging.getLogger("transformers").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    modeling_rope_utils.ROPE_INIT_FUNCTIONS["ntk"] = ntk_rope_parameters
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    results = {}
    for name, family, seed, rope, max_positions, notes in FIXTURES:
        d = os.path.join(out, name)
        shutil.rmtree(d, ignore_errors=True)
        results[name] = run(name, family, seed, rope, max_positions, notes, d)
        r = results[name]
        print(f"{name}: moved {r['moved_by_scaling'][-1]:.2e}, transformers' padded batch vs single "
              f"{r['transformers_padded_batch_vs_single']:.2e}", file=sys.stderr)
    head = {"generator": {"script": "scripts/gen_rope_fixtures.py", "transformers": transformers.__version__,
                          "torch": torch.__version__, "python": sys.version.split()[0]},
            "fields": {
                "cases": "input_ids (token ids given to the model, no tokenizer) and hidden: the last hidden state "
                         "[tokens, hidden_size] row-major of that input alone, through a fresh copy of the model",
                "rope": "the rotary keys of the saved config.json",
                "length_dependent": "dynamic / longrope: each input's own length decides its frequencies",
                "moved_by_scaling": "per case, max abs difference from the same model with rope_type default",
                "moved_by_weight_noise": "max abs difference over the cases when every parameter is multiplied by "
                                         "1 + N(0, 1e-6): how much float32 rounding can move this fixture",
                "transformers_padded_batch_vs_single": "max abs difference of transformers' right-padded batch from "
                                                       "the lone inputs (length-dependent types: the batch takes the "
                                                       "frequencies of its padded length)"}}
    text = render(head, results)
    if json.loads(text) != json.loads(json.dumps({**head, "fixtures": results})):
        raise SystemExit("render() changed the data")
    write_golden(os.path.join(out, "golden.json"), text)
    print(f"wrote {out}/golden.json ({len(text)} bytes); folder {dir_size(out)} bytes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
