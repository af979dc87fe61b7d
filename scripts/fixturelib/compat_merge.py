"""scripts/gen_compat_fixtures.py's "merge" and "table" steps: golden.json from every version's
results, with the per-kind differences between versions, and the README's table from a log.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from fixturelib.common import write_golden

from fixturelib.compat_spec import CASES, CLIP_IMAGES, CLIP_TEXTS, KINDS, LIBS, PROMPTS, QUERY, lib_split


# --------------------------------------------------------------------------
# merge step (no ML libraries needed)
# --------------------------------------------------------------------------

def expectation(kind: str, row: dict) -> dict:
    """What pg_embed is meant to do with the folder: the same numbers, or a refusal (0A000) that
    names the module it does not support.  Only layouts pg_embed has no stage for are refused.
    Every kind here is computed: the router kind (a Router / Asym of Dense heads after pooling)
    through its query and document routes (embed(m, t, 'query') / 'document')."""
    return {"expect": "match"}


def short(v):
    s = json.dumps(v, sort_keys=True, ensure_ascii=False)
    if len(s) <= 120:
        return v
    return "<%d chars, sha256 %s>" % (len(s), hashlib.sha256(s.encode()).hexdigest()[:12])


MISSING = "<missing>"


def value_diff(docs: dict, path: str, out: dict) -> None:
    """Where the versions' values differ: objects present in every version are compared key by
    key; anything else is one entry (`<missing>` where a version lacks it)."""
    vals = list(docs.values())
    # Objects are compared key by key, except large ones (a vocabulary): those are one value.
    if all(isinstance(v, dict) and len(v) <= 40 for v in vals):
        keys = []
        for v in vals:
            keys += [k for k in v if k not in keys]
        for k in keys:
            value_diff({lib: v.get(k, MISSING) for lib, v in docs.items()}, f"{path}.{k}" if path else k, out)
        return
    if len({json.dumps(v, sort_keys=True) for v in vals}) > 1:
        out[path or "(whole file)"] = {lib: (v if v == MISSING else short(v)) for lib, v in docs.items()}


def kind_diff(out_root: str, names: dict) -> dict:
    """What the versions that saved this kind write differently: files, modules.json class paths,
    and per JSON file the (dotted) keys whose values differ, a missing key included."""
    libs = list(names)
    files = {lib: set(names[lib]["files_written"]) for lib in libs}
    all_files = sorted(set().union(*files.values()))
    res: dict = {"versions": libs}
    res["files_not_everywhere"] = {f: [l for l in libs if f in files[l]] for f in all_files
                                   if not all(f in files[l] for l in libs)}
    mods = {lib: names[lib]["modules"] for lib in libs}
    if len({json.dumps(m) for m in mods.values()}) > 1:
        res["modules"] = mods
    values: dict = {}
    for f in all_files:
        if not f.endswith(".json") or f == "modules.json":
            continue
        docs = {}
        for lib in libs:
            p = os.path.join(out_root, f"{names[lib]['kind']}__{lib}", f)
            if os.path.exists(p):
                with open(p, encoding="utf-8") as fh:
                    docs[lib] = json.load(fh)
        if len(docs) < 2:
            continue
        diffs: dict = {}
        value_diff(docs, "", diffs)
        if diffs:
            values[f] = diffs
    res["json_values"] = values
    res["outputs_between_versions"] = output_diff(names)
    return res


def output_diff(names: dict) -> dict:
    """How far apart the versions' own outputs for the same kind and the same weights are: per
    output key the largest absolute difference from the first version, and the cases where it
    exceeds 1e-5 (sparse outputs: compared as dense vectors)."""
    import numpy as np

    libs = list(names)
    first = names[libs[0]]["cases"]
    res = {}
    for key in first[0]:
        if key == "name" or key.startswith("input_ids") or key.startswith("indices") \
                or not isinstance(first[0][key], list):
            continue
        worst, cases = 0.0, {}
        for lib in libs[1:]:
            for a, b in zip(first, names[lib]["cases"]):
                if key.startswith("values"):
                    sfx = key[len("values"):]
                    da, db = {}, {}
                    da.update(zip(a[f"indices{sfx}"], a[key]))
                    db.update(zip(b[f"indices{sfx}"], b[key]))
                    d = max([abs(da.get(i, 0.0) - db.get(i, 0.0)) for i in set(da) | set(db)] or [0.0])
                elif isinstance(a.get(key), list) and isinstance(b.get(key), list) and len(a[key]) == len(b[key]):
                    d = float(np.max(np.abs(np.array(a[key], dtype=np.float64) - np.array(b[key])))) if a[key] else 0.0
                else:
                    d = float("inf")
                worst = max(worst, d)
                if d > 1e-5:
                    cases.setdefault(a["name"], {})[lib] = d if d != float("inf") else "shape differs"
        res[key] = {"max_abs_diff_from_" + libs[0]: worst if worst != float("inf") else "shape differs",
                    "cases_over_1e-5": cases}
    return res


def cmd_merge(args) -> int:
    out_root = os.path.abspath(args.out)
    per_lib = {}
    for lib in LIBS:
        with open(os.path.join(args.work, f"{lib}.json"), encoding="utf-8") as fh:
            per_lib[lib] = json.load(fh)
    # Every version drew the same weights and vocabulary.
    ref = per_lib[LIBS[0]]["weights_sha256"]
    for lib in LIBS[1:]:
        for k, v in per_lib[lib]["weights_sha256"].items():
            if k in ref and ref[k] != v:
                raise SystemExit(f"{lib}: {k} weights differ from {LIBS[0]}'s ({v} vs {ref[k]})")
    weights = {}
    for lib in LIBS:
        weights.update(per_lib[lib]["weights_sha256"])
    rows = {}
    diffs = {}
    for kind, owner, what in KINDS:
        saved = {}
        for lib in LIBS:
            if not lib.startswith(owner):
                continue
            row = dict(per_lib[lib]["rows"][f"{kind}__{lib}"])
            name = f"{kind}__{lib}"
            if row["saved"]:
                row = {**{k: row[k] for k in ("kind", "library", "version", "what", "saved")},
                       **expectation(kind, row),
                       **{k: v for k, v in row.items() if k not in ("kind", "library", "version", "what", "saved")}}
                saved[lib] = row
            rows[name] = row
        if len(saved) >= 2:
            diffs[kind] = kind_diff(out_root, saved)
    # Folders of rows that no longer exist (a kind renamed or dropped) go.
    for entry in sorted(os.listdir(out_root)):
        if "__" in entry and os.path.isdir(os.path.join(out_root, entry)) and \
                not rows.get(entry, {}).get("saved"):
            shutil.rmtree(os.path.join(out_root, entry))
            print(f"  removed stale {entry}", file=sys.stderr)
    pins = {}
    for part in (args.pins or "").split(";"):
        if "=" in part:
            lib, spec = part.split("=", 1)
            pins[lib] = spec.split()
    header = {
        "generator": {
            "script": "scripts/gen_compat_fixtures.py (driver: scripts/gen_compat.sh)",
            "environments": {lib: {"installed": per_lib[lib]["versions"], "pins": pins.get(lib, [])} for lib in LIBS},
            "device": "cpu", "dtype": "float32", "torch_threads": 1,
        },
        "weights_sha256": dict(sorted(weights.items())),
        "inputs": {"cases": dict(CASES), "cross_encoder_query": QUERY, "prompts": PROMPTS,
                   "clip_texts": CLIP_TEXTS, "clip_images": CLIP_IMAGES},
        "fields": {
            "row": "one per <kind>__<lib><version>: the writing library and version, whether it could save the "
                   "kind (else `reason`), `expect` (match: pg_embed gives the same numbers; refuse: SQLSTATE "
                   "`sqlstate` with a message naming `names`), `files_written` (README.md model cards are then "
                   "removed), `modules` (modules.json class paths, null without modules.json), `description` "
                   "(read back from the reloaded model) and `cases`",
            "embedding": "model.encode([text], batch_size=1)[0] by the writing version, reloaded from the folder",
            "embedding_prompt_P": "prompts kinds: encode([text], prompt_name=P); embedding_prompt_ (default prompt "
                                  "set): encode([text], prompt='')",
            "embedding_query/embedding_document": "router: encode(..., task=route) (Asym: encode([{route: text}]))",
            "logits/score": "cross_encoder: the raw one-label logit for (cross_encoder_query, pair) and what "
                            "CrossEncoder.predict returns by default (its activation: description.activation)",
            "indices/values": "sparse: non-zero entries of encode([text], convert_to_sparse_tensor=True), ids "
                              "ascending; _query/_document: encode_query / encode_document",
            "model2vec": "StaticModel.from_pretrained(folder).encode([text])[0] (model2vec's own max_length: 512 "
                         "tokens, after cutting the text to 512 * median_token_length characters); computed and "
                         "returned in the table's dtype (description.output_dtypes: float16 for distill() in 0.10), "
                         "written here as float32",
            "diff": "per kind, what the versions that saved it write differently: files not written by all, "
                    "modules.json class paths when they differ, and per JSON file the (dotted) keys whose values "
                    "differ; long values are shown as their length and sha256 prefix",
        },
        "diff": diffs,
    }
    import gen_fixtures
    text = gen_fixtures.render(header, rows, group="rows")
    if json.loads(text) != json.loads(json.dumps({**header, "rows": rows})):
        raise SystemExit("JSON round-trip mismatch")
    golden = os.path.join(out_root, "golden.json")
    write_golden(golden, text)
    total = 0
    for root, _, fns in os.walk(out_root):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in fns)
    print(f"wrote {golden}: {len(text.encode())} bytes; tree {total} bytes", file=sys.stderr)
    return 0


def cmd_table(args) -> int:
    """The README's matrix: golden.json's rows and the outcome lines of
    crates/pg_embed_core/tests/compat.rs (`<row> ok|FAILED <summary>`), read from --log."""
    import re

    with open(os.path.join(args.out, "golden.json"), encoding="utf-8") as fh:
        g = json.load(fh)
    outcome = {}
    with open(args.log, encoding="utf-8") as fh:
        for line in fh:
            m = re.match(r"^(\S+__\S+)\s+(ok|FAILED)\s+(.*?)(?: \(\d+ ms\))?$", line.rstrip("\n"))
            if m:
                outcome[m.group(1)] = (m.group(2), m.group(3))
    notes: list[str] = []

    def note(text: str) -> str:
        if text not in notes:
            notes.append(text)
        return f"[{notes.index(text) + 1}]"

    def cell(name: str) -> str:
        row = g["rows"][name]
        if not row["saved"]:
            return "not saved " + note(row["reason"])
        status, summary = outcome.get(name, ("?", "not run"))
        if status == "ok" and summary.startswith("same numbers"):
            return "same, " + summary.rsplit(" ", 1)[-1]
        if status == "ok" and summary.startswith("refused"):
            return "refused 0A000 " + note(f"{row['names']}: {row['reason']}")
        return "**fails** " + note(summary)

    out = []
    for prefix, title in (("st", "sentence-transformers"), ("m2v", "model2vec")):
        libs = [l for l in LIBS if l.startswith(prefix)]
        out.append(f"| layout ({title}) | " + " | ".join(lib_split(l)[1] for l in libs) + " |")
        out.append("|---|" + "---|" * len(libs))
        for kind, owner, what in KINDS:
            if owner == prefix:
                out.append(f"| `{kind}`: {what} | " + " | ".join(cell(f"{kind}__{l}") for l in libs) + " |")
        out.append("")
    for i, n in enumerate(notes):
        out.append(f"[{i + 1}] {n}  ")
    print("\n".join(out))
    return 0
