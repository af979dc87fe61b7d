#!/usr/bin/env python3
"""Generate jina-embeddings-v3-shaped fixtures with per-task LoRA adapters and their golden outputs.

Usage:
    HF_HUB_OFFLINE=1 bench/.venv/bin/python scripts/gen_lora_fixtures.py --out tests/fixtures/lora

Nothing is downloaded.  The script

1. copies tests/fixtures/families/jina_v3_embed (a tiny JinaEmbeddingsV3Model saved by
   sentence-transformers 6.2: Transformer, Pooling mean, Normalize, jina-embeddings-v3's task
   prompts) to ``<out>/jina_v3_peft`` and adds one PEFT LoRA adapter per task in a subfolder
   named after the task (``retrieval_query``, ``retrieval_passage``, ``separation``,
   ``classification``, ``text_matching``): ``adapter_config.json`` and
   ``adapter_model.safetensors`` as peft 0.21 saves them, targets q/k/v/o_proj, fc1, fc2 and
   both embeddings, rank 4, lora_alpha 8, every lora_A / lora_B value drawn from a seeded
   generator (so every adapter moves the outputs);
2. writes ``<out>/jina_v3_original``: the same base weights and the same adapters in the layout
   of the original jinaai/jina-embeddings-v3 checkpoint (config model_type ``xlm-roberta`` with
   ``position_embedding_type: rotary``, ``lora_adaptations``, ``lora_rank``, ``lora_alpha``; the
   weights under ``roberta.`` with jinaai's names (``emb_ln``, ``mixer.Wqkv``, ``norm1``, ...)
   and torch parametrizations: ``<module>.parametrizations.weight.original`` plus
   ``<module>.parametrizations.weight.0.lora_A`` / ``lora_B`` stacked over the tasks; modules.json
   names jinaai's ``custom_st.Transformer`` as its first module, as the Hub repository does). The
   separate q/k/v adapters become one rank-12 adapter of the fused Wqkv (A stacked, B block
   diagonal), the others are padded with zeros to rank 12, and lora_alpha is 24, so each task's
   delta is the PEFT one: the golden values are shared (checked in numpy here);
3. records what sentence-transformers 6.2 with peft computes: for each task the Transformer
   module's model wrapped by ``PeftModel.from_pretrained(model, <adapter folder>)`` (what
   ``SentenceTransformer.load_adapter`` does through transformers, which asks for peft >= 0.22),
   then ``encode(texts, prompt_name=<jina's task name>)``; and the base model without an
   adapter; in ``<out>/golden.json``. It also checks that PEFT's merged
   weights (``merge_and_unload``) give the unmerged outputs within 1e-5.

The output is deterministic: running the script twice gives byte-identical files.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixturelib.common import ROOT, chmod_tree, floats, offline, read_json, render, write_golden, write_json  # noqa: E402

offline()
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402

BASE = os.path.join(ROOT, "tests", "fixtures", "families", "jina_v3_embed")
# jina-embeddings-v3's tasks, in its lora_adaptations order, and the adapter folder of each.
TASKS = ["retrieval.query", "retrieval.passage", "separation", "classification", "text-matching"]
FOLDERS = {t: t.replace(".", "_").replace("-", "_") for t in TASKS}
RANK, ALPHA = 4, 8.0
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "fc1", "fc2", "word_embeddings", "token_type_embeddings"]
LORA_STD = 0.15
SEED = 5501
TEXTS = [
    "a quiet river under the mountain",
    "Represent nothing: the storm, the paper and the glass",
    "orange",
    "the engine of the garden in winter and in summer, with a signal of copper and marble",
]


def adapters(base_dir: str, out_dir: str):
    """One seeded PEFT LoRA adapter per task, saved in out_dir/<folder>/; returns each task's
    lora tensors by module path ({module: (A, B)}: A [r, in], B [out, r] for a Linear; for an
    Embedding A [r, rows], B [width, r])."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModel

    got = {}
    for i, task in enumerate(TASKS):
        model = AutoModel.from_pretrained(base_dir)
        config = LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=TARGETS, bias="none",
                            init_lora_weights=False)
        peft_model = get_peft_model(model, config)
        g = torch.Generator().manual_seed(SEED + i)
        lora = {}
        with torch.no_grad():
            for name, p in sorted(peft_model.named_parameters()):
                if "lora_" not in name:
                    continue
                p.copy_(torch.randn(p.shape, generator=g) * LORA_STD)
        for name, p in peft_model.named_parameters():
            if "lora_" not in name:
                continue
            # base_model.model.<module>.lora_A.default.weight / <module>.lora_embedding_A.default
            stem = name.replace("base_model.model.", "")
            module, kind = stem.split(".lora_")[0], stem.split(".lora_")[1].split(".")[0]
            lora.setdefault(module, {})[kind] = p.detach().numpy().copy()
        target = os.path.join(out_dir, FOLDERS[task])
        peft_model.save_pretrained(target)
        # What peft writes for a local base: no machine path in the fixture.
        cfg = read_json(os.path.join(target, "adapter_config.json"))
        cfg["base_model_name_or_path"] = "jina_v3_embed"
        cfg["target_modules"] = sorted(cfg["target_modules"])  # a set in peft: its order varies by run
        write_json(os.path.join(target, "adapter_config.json"), cfg)
        readme = os.path.join(target, "README.md")
        if os.path.exists(readme):
            os.remove(readme)
        got[task] = {m: ((k["A"], k["B"]) if "A" in k else (k["embedding_A"], k["embedding_B"])) for m, k in lora.items()}
    return got


def delta(module: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The merged delta of a module in the base weight's own orientation."""
    s = ALPHA / RANK
    d = (b.astype(np.float64) @ a.astype(np.float64)) * s  # Linear: [out, in]; Embedding: [width, rows]
    return d.T if module.endswith("embeddings") else d


def original_layout(peft_dir: str, out_dir: str, lora):
    """The same model in jinaai's original layout (see the module's text)."""
    top = set(FOLDERS.values()) | {"model.safetensors", "config.json"}
    shutil.copytree(peft_dir, out_dir, ignore=lambda d, names: [n for n in names if d == peft_dir and n in top])
    base = load_file(os.path.join(peft_dir, "model.safetensors"))
    cfg = read_json(os.path.join(peft_dir, "config.json"))
    layers = cfg["num_hidden_layers"]
    big = 3 * RANK
    alpha_original = (ALPHA / RANK) * big
    n = len(TASKS)

    def stacked_linear(parts):
        """[(A [r, in], B [out, r]) per part] of every task -> lora_A [n, R, in], lora_B [n, out, R]."""
        fan_in = parts[0][0][0].shape[1]
        fan_out = sum(p[0][1].shape[0] for p in parts)
        la = np.zeros((n, big, fan_in), np.float32)
        lb = np.zeros((n, fan_out, big), np.float32)
        for t in range(n):
            row, col = 0, 0
            for per_task in parts:
                a, b = per_task[t]
                la[t, col:col + a.shape[0]] = a
                lb[t, row:row + b.shape[0], col:col + a.shape[0]] = b
                row += b.shape[0]
                col += a.shape[0]
        return la, lb

    def of(module):
        return [lora[task][module] for task in TASKS]

    out = {}

    def param(prefix, weight, la, lb, bias=None):
        out[f"{prefix}.parametrizations.weight.original"] = weight
        out[f"{prefix}.parametrizations.weight.0.lora_A"] = la
        out[f"{prefix}.parametrizations.weight.0.lora_B"] = lb
        if bias is not None:
            out[f"{prefix}.bias"] = bias

    for emb in ["word_embeddings", "token_type_embeddings"]:
        per_task = of(f"embeddings.{emb}")
        rows, width = base[f"embeddings.{emb}.weight"].shape
        la = np.zeros((n, rows, big), np.float32)   # original: A [rows, R], B [R, width]
        lb = np.zeros((n, big, width), np.float32)
        for t, (a, b) in enumerate(per_task):      # peft: A [r, rows], B [width, r]
            la[t, :, :RANK] = a.T
            lb[t, :RANK, :] = b.T
        param(f"roberta.embeddings.{emb}", base[f"embeddings.{emb}.weight"], la, lb)
    out["roberta.emb_ln.weight"] = base["embeddings.LayerNorm.weight"]
    out["roberta.emb_ln.bias"] = base["embeddings.LayerNorm.bias"]
    for i in range(layers):
        p, q = f"layers.{i}", f"roberta.encoder.layers.{i}"
        qkv = [of(f"{p}.self_attn.{x}_proj") for x in "qkv"]
        la, lb = stacked_linear(qkv)
        w = np.concatenate([base[f"{p}.self_attn.{x}_proj.weight"] for x in "qkv"])
        bias = np.concatenate([base[f"{p}.self_attn.{x}_proj.bias"] for x in "qkv"])
        param(f"{q}.mixer.Wqkv", w, la, lb, bias)
        for src, dst in [("self_attn.o_proj", "mixer.out_proj"), ("mlp.fc1", "mlp.fc1"), ("mlp.fc2", "mlp.fc2")]:
            la, lb = stacked_linear([of(f"{p}.{src}")])
            param(f"{q}.{dst}", base[f"{p}.{src}.weight"], la, lb, base[f"{p}.{src}.bias"])
        for src, dst in [("post_attention_layernorm", "norm1"), ("post_mlp_layernorm", "norm2")]:
            out[f"{q}.{dst}.weight"] = base[f"{p}.{src}.weight"]
            out[f"{q}.{dst}.bias"] = base[f"{p}.{src}.bias"]
    out["roberta.pooler.dense.weight"] = base["pooler.dense.weight"]
    out["roberta.pooler.dense.bias"] = base["pooler.dense.bias"]
    save_file({k: np.ascontiguousarray(v) for k, v in sorted(out.items())}, os.path.join(out_dir, "model.safetensors"),
              metadata={"format": "pt"})

    # The deltas the original layout gives equal the PEFT ones.
    scale = alpha_original / big
    for t, task in enumerate(TASKS):
        for i in range(layers):
            la = out[f"roberta.encoder.layers.{i}.mixer.Wqkv.parametrizations.weight.0.lora_A"][t]
            lb = out[f"roberta.encoder.layers.{i}.mixer.Wqkv.parametrizations.weight.0.lora_B"][t]
            want = np.concatenate([delta("q", *lora[task][f"layers.{i}.self_attn.{x}_proj"]) for x in "qkv"])
            assert np.abs(lb.astype(np.float64) @ la * scale - want).max() < 1e-5
        la = out["roberta.embeddings.word_embeddings.parametrizations.weight.0.lora_A"][t]
        lb = out["roberta.embeddings.word_embeddings.parametrizations.weight.0.lora_B"][t]
        want = delta("embeddings.word_embeddings", *lora[task]["embeddings.word_embeddings"])
        assert np.abs(la.astype(np.float64) @ lb * scale - want).max() < 1e-5

    config = {
        "architectures": ["XLMRobertaLoRA"],
        "attention_probs_dropout_prob": 0.1,
        "auto_map": {
            "AutoConfig": "jinaai/xlm-roberta-flash-implementation--configuration_xlm_roberta.XLMRobertaFlashConfig",
            "AutoModel": "jinaai/xlm-roberta-flash-implementation--modeling_lora.XLMRobertaLoRA",
        },
        "bos_token_id": cfg["bos_token_id"],
        "classifier_dropout": None,
        "emb_pooler": None,
        "eos_token_id": cfg["eos_token_id"],
        "hidden_act": cfg["hidden_act"],
        "hidden_dropout_prob": 0.1,
        "hidden_size": cfg["hidden_size"],
        "initializer_range": 0.02,
        "intermediate_size": cfg["intermediate_size"],
        "layer_norm_eps": cfg["layer_norm_eps"],
        "load_trained_adapters": True,
        "lora_adaptations": TASKS,
        "lora_alpha": alpha_original,
        "lora_dropout_p": 0.0,
        "lora_main_params_trainable": False,
        "lora_rank": big,
        "matryoshka_dimensions": [8, 16, 32],
        "max_position_embeddings": cfg["max_position_embeddings"],
        "model_type": "xlm-roberta",
        "num_attention_heads": cfg["num_attention_heads"],
        "num_hidden_layers": layers,
        "pad_token_id": cfg["pad_token_id"],
        "position_embedding_type": "rotary",
        "rotary_emb_base": cfg["rope_parameters"]["rope_theta"],
        "task_instructions": {t: p for t, p in read_json(os.path.join(peft_dir, "config_sentence_transformers.json"))["prompts"].items()
                              if t in TASKS},
        "torch_dtype": "float32",
        "truncate_dim": None,
        "type_vocab_size": cfg["type_vocab_size"],
        "use_cache": False,
        "use_flash_attn": False,
        "vocab_size": cfg["vocab_size"],
    }
    write_json(os.path.join(out_dir, "config.json"), config)
    # jinaai's modules.json names its own Transformer module (Hub code choosing the task).
    modules = read_json(os.path.join(out_dir, "modules.json"))
    modules[0] = {"idx": 0, "name": "transformer", "path": "", "type": "custom_st.Transformer", "kwargs": ["task"]}
    write_json(os.path.join(out_dir, "modules.json"), modules)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "lora"))
    args = ap.parse_args()
    torch.manual_seed(0)
    out = os.path.abspath(args.out)
    # Everything is rewritten but the README.
    os.makedirs(out, exist_ok=True)
    for entry in os.listdir(out):
        path = os.path.join(out, entry)
        if entry != "README.md":
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    peft_dir = os.path.join(out, "jina_v3_peft")
    shutil.copytree(BASE, peft_dir)
    lora = adapters(peft_dir, peft_dir)
    original_layout(peft_dir, os.path.join(out, "jina_v3_original"), lora)

    from sentence_transformers import SentenceTransformer
    from peft import PeftModel
    from transformers import AutoModel

    st = SentenceTransformer(peft_dir, device="cpu")
    base_model = st[0].model
    cases = []

    def encode(prompt_name=None):
        return st.encode(TEXTS, convert_to_numpy=True, prompt_name=prompt_name, batch_size=len(TEXTS))

    for text, v in zip(TEXTS, encode()):
        cases.append({"task": None, "text": text, "embedding": floats(v.astype(np.float32))})
    worst_merge = 0.0
    bf16 = {}
    for task in TASKS:
        adapter = os.path.join(peft_dir, FOLDERS[task])
        # The adapter on the Transformer module's model (sentence-transformers' own load_adapter
        # needs peft >= 0.22 through transformers; PeftModel computes the same).
        st[0].model = PeftModel.from_pretrained(AutoModel.from_pretrained(peft_dir), adapter).eval()
        vectors = encode(task)
        assert np.abs(vectors - encode(task)).max() == 0.0, "encode is deterministic"
        for text, v in zip(TEXTS, vectors):
            cases.append({"task": task, "text": text, "embedding": floats(v.astype(np.float32))})
        # The adapter moves the vectors (against the base model with the same prompt).
        st[0].model = base_model
        plain = encode(task)
        cos = float((vectors * plain).sum(1).max())
        assert cos < 0.99, f"{task}: the adapter barely moves the vectors (cos {cos})"
        # Merging (as pg_embed does once) gives the unmerged outputs.
        st[0].model = PeftModel.from_pretrained(AutoModel.from_pretrained(peft_dir), adapter).merge_and_unload().eval()
        worst_merge = max(worst_merge, float(np.abs(encode(task) - vectors).max()))
        # PyTorch's own bfloat16 (autocast) run of the task: how far it moves the vectors,
        # the bound tests/lora.rs derives pg_embed's bfloat16 one from (as tests/bf16.rs does).
        st[0].model = PeftModel.from_pretrained(AutoModel.from_pretrained(peft_dir), adapter).eval()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            half = encode(task)
        d = np.abs(half.astype(np.float64) - vectors).max()
        cos = float(min((a @ b) / (np.linalg.norm(a) * np.linalg.norm(b)) for a, b in zip(half.astype(np.float64), vectors)))
        assert d > 0.0, f"{task}: autocast did not apply"
        bf16[task] = {"torch_bf16_max_abs": float(d), "torch_bf16_min_cosine": cos}
        st[0].model = base_model
    assert worst_merge < 1e-5, worst_merge
    import peft
    import sentence_transformers
    import transformers
    header = {
        "generator": "scripts/gen_lora_fixtures.py",
        "versions": {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__,
                     "sentence_transformers": sentence_transformers.__version__, "peft": peft.__version__},
        "tasks": TASKS,
        "folders": FOLDERS,
        "merged_against_unmerged": worst_merge,
        "bfloat16": bf16,
        "notes": "cases with task null: the base model (no adapter, no prompt); others: the Transformer "
                 "module's model wrapped by PeftModel.from_pretrained(model, <folder>), then encode(prompt_name=<task>). "
                 "jina_v3_original holds the same weights and deltas in jinaai's original layout: its outputs "
                 "are these.",
    }
    fixtures = {"jina_v3_peft": {"cases": cases}}
    write_golden(os.path.join(out, "golden.json"), render(header, fixtures))
    chmod_tree(out)


if __name__ == "__main__":
    main()
