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
import json
import os
import shutil
import sys
import tempfile

sys.dont_write_bytecode = True  # the generators are imported from scripts/: no __pycache__ there
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixturelib.common import offline, write_golden  # noqa: E402

offline()
os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"

from fixturelib.family_spec import FIXTURES, KINDS, gd  # noqa: E402,F401  (KINDS: gen_bf16_reference.py)
from fixturelib.family_build import build, gte_new_layout, jina_hub_layout  # noqa: E402
from fixturelib.family_run import run, run_derived  # noqa: E402


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
    write_golden(os.path.join(out, "golden.json"), text)
    print(f"wrote {out}/golden.json ({len(text)} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
