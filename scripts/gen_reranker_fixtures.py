#!/usr/bin/env python3
"""Generate tiny seeded causal-LM rerankers (Qwen3-Reranker's layout) with
sentence-transformers' CrossEncoder scores for them (issue 55).

Usage:
    HF_HUB_OFFLINE=1 bench/.venv/bin/python scripts/gen_reranker_fixtures.py --out tests/fixtures/rerank

Each fixture is what `CrossEncoder.save` writes for a small random Qwen3ForCausalLM: a
Transformer module with transformer_task "text-generation" and a LogitScore module, the pair
rendered by the tokenizer's chat template (roles "query" and "document", the model's prompt as
a "system" message), as Qwen3-Reranker is published for sentence-transformers. golden.json
records the rendered text, the token ids CrossEncoder computes (left padding stripped) and
`CrossEncoder.predict`'s scores, activated (the model's activation_fn) and raw (Identity).
Nothing is downloaded; the output is deterministic. See tests/fixtures/rerank/README.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixturelib.common import chmod_tree, floats, load, offline, read_json, write_golden, write_json  # noqa: E402

offline()
os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"

gd = load("gen_decoder_fixtures")
gb = gd.gb

EOT = "<|endoftext|>"
SPECIALS = [EOT, "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
MAX_LENGTH = 200  # the tokenizer's model_max_length: CrossEncoder truncates there
BATCH_TOLERANCE = 1e-4

# Qwen3-Reranker's template, as its sentence-transformers integration renders pairs: the
# instruction is the "system" message (the model's prompt) or a default, then the query and the
# document, then the assistant turn with an empty thinking block. The file's single final
# newline is dropped by Jinja (keep_trailing_newline false): the render ends in "\n\n".
CHAT_TEMPLATE = (
    "{%- set instruction = messages | selectattr('role', 'eq', 'system') | map(attribute='content') | first"
    " | default('Given a web search query, retrieve relevant passages that answer the query') -%}\n"
    "{%- set query = messages | selectattr('role', 'eq', 'query') | map(attribute='content') | first -%}\n"
    "{%- set document = messages | selectattr('role', 'eq', 'document') | map(attribute='content') | first -%}\n"
    "<|im_start|>system\n"
    "Judge whether the Document meets the requirements based on the Query and the Instruct provided. "
    "Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n"
    "<|im_start|>user\n"
    "<Instruct>: {{ instruction | trim }}\n"
    "<Query>: {{ query }}\n"
    "<Document>: {{ document }}<|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n\n</think>\n\n\n"
)
PROMPTS = {"web": "Given a web search query, retrieve relevant passages that answer the query",
           "code": "  Given a question, retrieve code that answers it  "}

QUERY = "Which drinks are popular in the morning?"
LONG_DOC = ("Coffee and tea are popular drinks in the morning, and the small database extension reads this "
            "long document one token after another until the chat template's closing tokens are cut off.")
PAIRS = [
    (QUERY, "Coffee and tea are popular drinks in the morning."),
    (QUERY, "The cat is sleeping on the warm windowsill."),
    (QUERY, ""),
    ("Caf\u00e9 d\u00e9j\u00e0 vu?", "yes no yes"),
    (QUERY, LONG_DOC),
]

# name, seed, what it is
FIXTURES = [
    ("qwen3_reranker", 71),        # yes/no, tied embeddings, a default prompt
    ("qwen3_reranker_true", 72),   # only a true token, untied lm_head, no prompt
]

NOTES = {
    "qwen3_reranker": "Qwen3ForCausalLM (hidden 32, 2 layers, 4 heads, 2 kv heads, head_dim 16, tied embeddings), "
                      "CrossEncoder's own modules for a *ForCausalLM: Transformer(text-generation) then "
                      "LogitScore(yes, no); score = logit(yes) - logit(no) at the last token, Sigmoid in predict. "
                      "default_prompt_name 'web': the prompt is a system message the template reads as the "
                      "instruction. The long pair is cut at 64 tokens and the template's closing tokens "
                      "(the common token suffix of two skeleton renders) are written over its last tokens.",
    "qwen3_reranker_true": "LogitScore(true_token_id=yes, false_token_id=None): score = logit(yes) alone; "
                           "lm_head untied (tie_word_embeddings false); no prompt (the template's default "
                           "instruction); activation_fn Identity saved in config_sentence_transformers.json.",
}


def tokenizer(d):
    """Qwen2Tokenizer over a byte-level BPE whose vocabulary holds "yes" and "no" as tokens, the
    chat-template tokens <|endoftext|> <|im_start|> <|im_end|> <think> </think> = 0..4 (special),
    nothing added around a text (Qwen3's tokenizer), pad <|endoftext|>, eos <|im_end|>."""
    from transformers import Qwen2Tokenizer

    corpus = gb.gf.CORPUS.splitlines() + ["yes", "no", "yes or no", "Judge the Query and the Document"] * 40
    with tempfile.TemporaryDirectory() as tmp:
        gb.MAX_LENGTH = MAX_LENGTH
        gb.bpe(tmp, SPECIALS, "$A", "$A $B:1", dict(eos_token=EOT), gb.NO_TYPES, corpus=corpus, vocab_size=480)
        model = read_json(os.path.join(tmp, "tokenizer.json"))["model"]
    vocab = model["vocab"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    assert [vocab[t] for t in SPECIALS] == list(range(len(SPECIALS)))
    assert "yes" in vocab and "no" in vocab, "yes / no are not tokens"
    tok = Qwen2Tokenizer(vocab=vocab, merges=merges, unk_token=None, bos_token=None, eos_token="<|im_end|>",
                         pad_token=EOT, padding_side="left")
    tok.add_special_tokens({"additional_special_tokens": SPECIALS[1:]})
    tok.model_max_length = MAX_LENGTH
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(d)
    return len(vocab)


def causal_lm(d, seed, tied):
    import transformers as tf

    v = tokenizer(d)
    cfg = gd.qwen3_config(v, hidden=32, pad_token_id=0)
    cfg.tie_word_embeddings = tied
    cfg.max_position_embeddings = 256
    cfg.architectures = ["Qwen3ForCausalLM"]
    gd.new_model(tf.Qwen3ForCausalLM, cfg, seed).save_pretrained(d)


def build(name, seed, out_dir, work):
    import torch
    from sentence_transformers import CrossEncoder
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.cross_encoder.modules import LogitScore

    base = os.path.join(work, name)
    os.makedirs(base)
    if name == "qwen3_reranker":
        causal_lm(base, seed, tied=True)
        # CrossEncoder's own modules for a *ForCausalLM: Transformer(text-generation), LogitScore(yes, no).
        ce = CrossEncoder(base, prompts=PROMPTS, default_prompt_name="web", device="cpu")
    else:
        causal_lm(base, seed, tied=False)
        te = Transformer(base, transformer_task="text-generation")
        yes = te.tokenizer.convert_tokens_to_ids("yes")
        ce = CrossEncoder(modules=[te, LogitScore(true_token_id=yes)], activation_fn=torch.nn.Identity(),
                          device="cpu")
    ce.save(out_dir, safe_serialization=True)
    for junk in ("README.md",):
        if os.path.exists(os.path.join(out_dir, junk)):
            os.remove(os.path.join(out_dir, junk))
    chmod_tree(out_dir)


def strip_left(ids, mask):
    return [int(i) for i, m in zip(ids, mask) if m]


def run(name, out_dir):
    import torch
    from sentence_transformers import CrossEncoder

    ce = CrossEncoder(out_dir, device="cpu")
    te = ce[0]
    tok = te.tokenizer
    assert te.transformer_task == "text-generation" and tok.padding_side == "left"
    prompt = ce._resolve_prompt(None, None)
    batched = ce.predict(PAIRS, batch_size=len(PAIRS), convert_to_numpy=True)
    raw = ce.predict(PAIRS, batch_size=len(PAIRS), activation_fn=torch.nn.Identity(), convert_to_numpy=True)
    # PyTorch's own bfloat16 run (autocast): how far bfloat16 moves the raw scores.
    with torch.autocast("cpu", dtype=torch.bfloat16):
        raw_bf16 = ce.predict(PAIRS, batch_size=len(PAIRS), activation_fn=torch.nn.Identity(), convert_to_numpy=True)
    bf16_max_abs = float(abs(raw_bf16.astype("float64") - raw.astype("float64")).max())
    cases = []
    for i, pair in enumerate(PAIRS):
        one = ce.predict([pair], batch_size=1, activation_fn=torch.nn.Identity(), convert_to_numpy=True)[0]
        if abs(float(one) - float(raw[i])) > BATCH_TOLERANCE:
            raise SystemExit(f"{name}: batched {raw[i]} vs one-by-one {one} for pair {i}")
        features = ce.preprocess([pair], prompt=prompt)
        ids = strip_left(features["input_ids"][0].tolist(), features["attention_mask"][0].tolist())
        messages = te.input_formatter.pair_to_messages(pair)
        if prompt:
            messages = te.input_formatter.prepend_prompt_to_messages([messages], prompt)[0]
        rendered = tok.apply_chat_template(messages, tokenize=False)
        full = tok(rendered, add_special_tokens=False)["input_ids"]
        cases.append({"query": pair[0], "document": pair[1], "rendered": rendered, "input_ids": ids,
                      "truncated": len(full) > MAX_LENGTH, "score": float(batched[i]), "raw": float(raw[i])})
    assert any(c["truncated"] for c in cases) and not all(c["truncated"] for c in cases)
    ls = ce[1]
    scores = [c["score"] for c in cases]
    return {
        "note": NOTES[name],
        "true_token_id": ls.true_token_id,
        "false_token_id": ls.false_token_id,
        "activation_fn": type(ce.activation_fn).__name__,
        "prompt": prompt,
        "max_length": te.max_seq_length,
        "message_format": te.input_formatter.message_format,
        "torch_bf16_max_abs": bf16_max_abs,
        "cases": cases,
        "rerank": {"query": QUERY, "documents": [p[1] for p in PAIRS if p[0] == QUERY],
                   "scores": [s for p, s in zip(PAIRS, scores) if p[0] == QUERY]},
    }


def main() -> int:
    import sentence_transformers
    import torch
    import transformers

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/rerank")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    fixtures = {}
    with tempfile.TemporaryDirectory() as work:
        for name, seed in FIXTURES:
            d = os.path.join(out, name)
            if os.path.exists(d):
                shutil.rmtree(d)
            build(name, seed, d, work)
            fixtures[name] = run(name, d)
    header = {"generator": "scripts/gen_reranker_fixtures.py",
              "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                           "sentence_transformers": sentence_transformers.__version__},
              "tolerance": "1e-4 x max(1, |value|)"}
    write_golden(os.path.join(out, "golden.json"), gd.render({**header, "fixtures": fixtures}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
