"""scripts/gen_family_fixtures.py's golden values: transformers' and sentence-transformers' outputs for
each fixture, the pins and the refusals recorded in golden.json.
"""

from __future__ import annotations

import json
import os
from fixturelib.common import read_json

from fixturelib.family_spec import (BATCH_TOLERANCE, NOTES, NO_EFFECT, PAIRS, PINS, PROMPT_CASES,
    PROMPT_TEXTS, RERANK_DOCS, RERANK_QUERY, TEXTS, gd, gf)
from fixturelib.family_build import gte_config, max_length


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
