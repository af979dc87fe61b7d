#!/usr/bin/env python3
"""Model folders saved by several sentence-transformers and model2vec versions, and their outputs.

Usage (scripts/gen_compat.sh makes the environments and runs both steps):

    <venv of one version>/bin/python scripts/gen_compat_fixtures.py save --lib st6.2.0 --work W --out tests/fixtures/compat
    python3 scripts/gen_compat_fixtures.py merge --work W --out tests/fixtures/compat
    python3 scripts/gen_compat_fixtures.py table --log <output of cargo test --release --test compat>

Users save model folders with whatever library version they have; pg_embed has to read all of
them.  `save` runs inside the virtual environment of one library version (`--lib`: st3.4.1,
st4.1.0, st5.7.0, st6.2.0, m2v0.4.1 or m2v0.10.0).  It

1. builds, with that version's own transformers / tokenizers, the shared seeded weights: the
   WordPiece tokenizer and the tiny BERT backbone of scripts/gen_fixtures.py (imported from
   there), the BERT masked-LM of scripts/gen_sparse_fixtures.py, a BERT sequence classifier
   (that backbone plus a seeded one-label head), seeded Dense heads and static embedding
   tables; the tiny CLIP of tests/fixtures/images/clip is copied;
2. saves one folder per model kind that version can save, as that version saves it, into
   `<out>/<kind>__<lib>/` (a kind it cannot save becomes a row saying why);
3. reloads every folder from disk, in the same version, and records what it computes for a
   fixed list of inputs in `<work>/<lib>.json`.

`merge` (any Python 3 with numpy) checks that every version drew the same weights, then writes
`<out>/golden.json`: one row per kind and version, and per kind what the versions write
differently (files, JSON keys and values, modules.json class paths).  Each row also says what
pg_embed is expected to do with the folder: give the same numbers (`"expect": "match"`) or refuse
it with SQLSTATE 0A000 naming the module (`"expect": "refuse"`), which
crates/pg_embed_core/tests/compat.rs checks.

Deterministic: running twice gives byte-identical files.  Floats are float32 values written as
repr(float(x)), which round-trips to the same float32.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixturelib.common import ROOT, offline  # noqa: E402

offline()
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

from fixturelib.compat_spec import KINDS, LIBS, LIB_NAMES, NotSaved, Shared, lib_split  # noqa: E402
from fixturelib.compat_models import (golden_clip, golden_cross_encoder, golden_model2vec,
    golden_sparse, golden_st_dense, save_clip, save_cross_encoder, save_model2vec, save_sparse,
    save_st_dense)  # noqa: E402
from fixturelib.compat_merge import cmd_merge, cmd_table  # noqa: E402


# --------------------------------------------------------------------------
# save step
# --------------------------------------------------------------------------

def versions_of_env() -> dict:
    import importlib.metadata as md
    out = {"python": sys.version.split()[0]}
    for p in ["sentence-transformers", "model2vec", "transformers", "tokenizers", "huggingface_hub",
              "safetensors", "torch", "numpy", "scikit-learn", "skeletoken", "pillow"]:
        try:
            out[p] = md.version(p)
        except md.PackageNotFoundError:
            pass
    return out


def folder_facts(out: str) -> dict:
    files = []
    for root, _, fns in os.walk(out):
        for fn in fns:
            files.append(os.path.relpath(os.path.join(root, fn), out))
    files.sort()
    modules = None
    mj = os.path.join(out, "modules.json")
    if os.path.exists(mj):
        with open(mj, encoding="utf-8") as fh:
            modules = [m.get("type") for m in json.load(fh)]
    return {"files": files, "modules": modules}


def normalise_tree(out: str) -> None:
    """File modes 0644/0755 (safetensors writes 0600; the test server runs as another user)."""
    import gen_image_fixtures
    gen_image_fixtures.chmod_tree(out)


def cmd_save(args) -> int:
    import logging
    import warnings

    import numpy as np
    import torch
    import transformers

    prefix, version = lib_split(args.lib)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    logging.getLogger("sentence_transformers").setLevel(logging.ERROR)
    logging.getLogger("model2vec").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)
    np.random.seed(0)

    if prefix == "st":
        import sentence_transformers
        got = sentence_transformers.__version__
    else:
        import model2vec
        got = model2vec.__version__
    if got != version:
        raise SystemExit(f"--lib {args.lib} but {LIB_NAMES[prefix]} {got} is installed")

    out_root = os.path.abspath(args.out)
    os.makedirs(out_root, exist_ok=True)
    rows = {}
    tmp = tempfile.mkdtemp(prefix="pg_embed_compat_")
    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        sh = Shared()
        for kind, owner, what in KINDS:
            if owner != prefix:
                continue
            name = f"{kind}__{args.lib}"
            out = os.path.join(out_root, name)
            shutil.rmtree(out, ignore_errors=True)
            row = {"kind": kind, "library": LIB_NAMES[prefix], "version": version, "what": what}
            torch.manual_seed(0)
            try:
                notes = {}
                if kind in ("cross_encoder",):
                    save_cross_encoder(sh, out)
                elif kind in ("splade_mlm", "splade_fillmask", "inference_free"):
                    save_sparse(kind, sh, out)
                elif kind == "clip":
                    save_clip(sh, out)
                elif prefix == "m2v":
                    notes = save_model2vec(kind, sh, out)
                else:
                    save_st_dense(kind, sh, out)
            except NotSaved as e:
                shutil.rmtree(out, ignore_errors=True)
                row.update({"saved": False, "reason": str(e)})
                rows[name] = row
                print(f"  {name}: not saved: {e}", file=sys.stderr)
                continue
            # Model cards are documentation: not kept (they carry dates and library banners).
            written = folder_facts(out)
            for card in ("README.md",):
                if os.path.exists(os.path.join(out, card)):
                    os.remove(os.path.join(out, card))
            normalise_tree(out)
            row.update({"saved": True, "files_written": written["files"], "modules": written["modules"], **notes})
            torch.manual_seed(0)
            if kind == "cross_encoder":
                desc, cases = golden_cross_encoder(out)
            elif kind in ("splade_mlm", "splade_fillmask", "inference_free"):
                desc, cases = golden_sparse(kind, out)
            elif kind == "clip":
                desc, cases = golden_clip(out)
            elif prefix == "m2v":
                desc, cases = golden_model2vec(out)
            else:
                desc, cases = golden_st_dense(kind, out)
            row["description"] = desc
            row["cases"] = cases
            rows[name] = row
            size = sum(os.path.getsize(os.path.join(out, f)) for f in folder_facts(out)["files"])
            print(f"  {name}: {size} bytes", file=sys.stderr)
        digests = sh.digests
    finally:
        os.chdir(cwd)
        shutil.rmtree(tmp, ignore_errors=True)
    result = {"lib": args.lib, "versions": versions_of_env(), "weights_sha256": digests, "rows": rows}
    with open(os.path.join(args.work, f"{args.lib}.json"), "w", encoding="utf-8") as fh:
        json.dump(result, fh, ensure_ascii=False, indent=1)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("save")
    s.add_argument("--lib", required=True, choices=LIBS)
    s.add_argument("--work", required=True)
    s.add_argument("--out", default=os.path.join(ROOT, "tests/fixtures/compat"))
    m = sub.add_parser("merge")
    m.add_argument("--work", required=True)
    m.add_argument("--out", default=os.path.join(ROOT, "tests/fixtures/compat"))
    m.add_argument("--pins", default="")
    t = sub.add_parser("table", help="print the README's matrix from golden.json and the test's output")
    t.add_argument("--log", required=True, help="output of cargo test --release --test compat")
    t.add_argument("--out", default=os.path.join(ROOT, "tests/fixtures/compat"))
    args = ap.parse_args()
    return {"save": cmd_save, "merge": cmd_merge, "table": cmd_table}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
