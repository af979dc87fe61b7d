"""What the fixture generators (scripts/gen_*.py) share: the offline Hugging Face set-up, loading
one generator from another, the JSON and golden-file writers, exact float lists, file hashes,
sizes and modes. Standard library only (numpy where an array is given)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os

SCRIPTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(SCRIPTS)  # the repository


def offline() -> None:
    """Nothing is downloaded and tokenizers run single-threaded; before transformers is imported."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ["TOKENIZERS_PARALLELISM"] = "false"


def load(name):
    """scripts/<name>.py as a module of its own (a generator another one reuses)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(SCRIPTS, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_json(path):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def write_json(path, obj):
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def write_golden(path: str, text: str) -> None:
    """A golden file as rendered: LF line ends, readable by the test server's OS user."""
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)
    os.chmod(path, 0o644)


def floats(v) -> list[float]:
    # v is a float32 numpy array; float(np.float32) is exact, and repr() of that
    # double round-trips to the same float32.
    return [float(x) for x in v.reshape(-1).tolist()]


def dump(o) -> str:
    return json.dumps(o, ensure_ascii=False, separators=(", ", ": "))


def render(header: dict, fixtures: dict, group: str = "fixtures") -> str:
    """The golden file: the header's keys, then `group` (one entry per fixture), one case
    per line block; scripts/gen_sparse_fixtures.py writes its "models" with it too."""
    lines = ["{"]
    for k, v in header.items():
        lines.append(f"  {json.dumps(k)}: {dump(v)},")
    lines.append(f"  {json.dumps(group)}: {{")
    names = list(fixtures)
    for fi, fname in enumerate(names):
        fx = fixtures[fname]
        lines.append(f"   {json.dumps(fname)}: {{")
        keys = list(fx)
        for ki, k in enumerate(keys):
            sep = "," if ki + 1 < len(keys) else ""
            if k == "cases":
                lines.append('    "cases": [')
                for ci, c in enumerate(fx["cases"]):
                    parts = [f"      {json.dumps(ck)}: {dump(cv)}" for ck, cv in c.items()]
                    lines.append("     {\n" + ",\n".join(parts) + "\n     }" + ("," if ci + 1 < len(fx["cases"]) else ""))
                lines.append("    ]" + sep)
            elif k == "batched_embeddings":
                lines.append('    "batched_embeddings": [')
                rows = fx[k]
                for ri, row in enumerate(rows):
                    lines.append("      " + dump(row) + ("," if ri + 1 < len(rows) else ""))
                lines.append("    ]" + sep)
            else:
                lines.append(f"    {json.dumps(k)}: {dump(fx[k])}{sep}")
        lines.append("   }" + ("," if fi + 1 < len(names) else ""))
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def dir_size(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for fn in files:
            total += os.path.getsize(os.path.join(root, fn))
    return total


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        h.update(fh.read())
    return h.hexdigest()


def chmod_tree(path: str) -> None:
    """safetensors / torch write 0600 files; the test server runs as another OS user."""
    if os.path.isfile(path):
        os.chmod(path, 0o644)
        return
    os.chmod(path, 0o755)
    for root, dirs, files in os.walk(path):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o755)
        for fn in files:
            os.chmod(os.path.join(root, fn), 0o644)


def randomize(model, seed: int, init_std: float, norm_std: float, one_plus_norms: tuple = ()) -> None:
    """Seeded weights for a tiny model: Linear and Embedding ~ N(0, init_std); LayerNorm and
    RMSNorm weight 1 + N(0, norm_std), bias N(0, norm_std); a norm class named in
    ``one_plus_norms`` (Gemma's, which scale by 1 + weight) N(0, norm_std). Parameters in
    sorted name order; any other parameter kind stops the generator."""
    import torch
    from torch import nn

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for pname, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            owner = model.get_submodule(pname.rsplit(".", 1)[0]) if "." in pname else model
            kind = type(owner).__name__
            if isinstance(owner, (nn.Linear, nn.Embedding)):
                p.copy_(torch.randn(p.shape, generator=g) * init_std)
            elif kind in one_plus_norms:
                p.copy_(torch.randn(p.shape, generator=g) * norm_std)
            elif isinstance(owner, nn.LayerNorm) or kind.endswith(("LayerNorm", "RMSNorm")):
                base = 1.0 if pname.endswith(".weight") else 0.0
                p.copy_(base + torch.randn(p.shape, generator=g) * norm_std)
            else:
                raise SystemExit(f"unexpected parameter {pname} in {kind}")
