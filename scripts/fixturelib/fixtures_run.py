"""scripts/gen_fixtures.py's golden values: each saved fixture reloaded with sentence-transformers and
run on the cases, checked against a reference computed from the transformer's token embeddings.
"""

from __future__ import annotations

import os
from fixturelib.common import floats
from fixturelib.fixtures_spec import CASES, INIT_STD, MAX_SEQ_LENGTH, MUST_FIT_EXACTLY, MUST_TRUNCATE


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
