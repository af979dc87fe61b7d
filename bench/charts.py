#!/usr/bin/env python3
"""Draws the performance charts of docs/performance.md (and the README's headline one) from
the committed result files:  bench/.venv/bin/python bench/charts.py [--results DIR] [--out DIR]

Each chart takes the newest result file of its kind, by the UTC time stamp in the file's name
(`<commit>-<YYYYmmddTHHMMSSZ>.json`), so a new run shows after a redraw:

  throughput.svg  bench/run.sh's `<commit>-<time>.json`: all-MiniLM-L6-v2, sentences/s in
                  batches and the single-sentence p50 of pg_embed, sentence-transformers
                  (PyTorch), ONNX Runtime and OpenVINO, grouped by precision (float32,
                  bfloat16, int8). Files with or without the int8 and OpenVINO rows, and the
                  older ones without the side-by-side table, all draw.
  threads.svg     bench/device.sh's `device-<commit>-<time>.json`: pg_embed's pipeline by
                  thread count in float32 and bfloat16, the baselines at theirs.
  real_size.svg   bench/real_size.sh's `real_size-...json` (the newest with PyTorch rows):
                  sentences/s of each model shape and precision, pg_embed against PyTorch.
  memory.svg      the same file: the shared weights file, one backend, the PSS of N backends
                  together, one PyTorch process.
  images.svg      bench/images.sh's `images-[family-]<commit>-<time>.json`, the newest of each
                  family (ViT, SigLIP, DINOv3): images/s at each precision against PyTorch.
  decoder.svg     bench/decoder.sh's `decoder-<commit>-<time>.json`: sentences/s at each
                  precision against PyTorch.

Every chart's title names the CPU of its result file (model, the AVX-512 / AMX / VNNI flags
it had, cores), the thread count and the file. A kind without a result file is skipped with
a message. The SVGs are reproducible: the same results give the same bytes.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from pathlib import Path

try:
    import matplotlib
except ImportError:  # a bench venv made before charts.py: bench/lib.sh's bench_venv installs it now
    sys.exit("bench/charts.py needs matplotlib: bench/.venv/bin/pip install matplotlib==3.11.2")

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
STAMP = re.compile(r"(\d{8}T\d{6})Z?")
HEX = re.compile(r"[0-9a-f]{7,40}(\+[\w.]+)?")
THROUGHPUT = re.compile(r"^[0-9a-f]{7,40}(\+[\w.]+)?-\d{8}T\d{6}Z\.json$")

PRECISIONS = ("float32", "bfloat16", "int8")
SYSTEMS = ("pg_embed", "PyTorch", "ONNX Runtime", "OpenVINO")
COLOURS = {"pg_embed": "#336791", "PyTorch": "#ee4c2c", "ONNX Runtime": "#7a7a7a", "OpenVINO": "#7b3fa0"}
FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_bf16", "amx_tile", "amx_int8")

plt.rcParams.update({
    "svg.fonttype": "none",  # text stays text: smaller files, searchable
    "svg.hashsalt": "pg_embed",  # fixed ids: the same results give the same bytes
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "axes.grid.axis": "y",
    "grid.alpha": 0.3,
    "axes.axisbelow": True,
})


# ---- result files ----------------------------------------------------------------------------
def stamp(path: Path) -> str:
    m = STAMP.search(path.name)
    return m.group(1) if m else ""


def newest(paths):
    paths = sorted(paths, key=lambda p: (stamp(p), p.name))
    return paths[-1] if paths else None


def load_json(path: Path):
    """A JSON document, or JSON lines (device-*.json) as a list."""
    text = path.read_text(encoding="utf-8")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip().startswith("{")]


def cpu_text(model, flags, cores=None) -> str:
    """'<model> (<the flags that choose pg_embed's kernels>; <n> cores)'."""
    if isinstance(flags, dict):  # bench/run.sh: {"avx512f": "yes", ...}
        have = {k for k, v in flags.items() if str(v).lower() in ("yes", "true", "1")}
    elif isinstance(flags, str):
        have = set(flags.split())
    else:
        have = set(flags or ())
    shown = [f for f in FLAGS if f in have]
    if "avx512f" in shown and "avx2" in shown:
        shown.remove("avx2")
    if not have:
        shown = []
    inner = ", ".join(shown) if shown else ("no AVX-512 or AMX" if have else "")
    if cores:
        inner = f"{inner}; {cores} cores" if inner else f"{cores} cores"
    model = model or "CPU not recorded"
    return f"{model} ({inner})" if inner else model


def title(fig, what: str, cpu: str, threads, path: Path) -> None:
    t = f", {threads} threads" if threads else ""
    fig.suptitle(f"{what}\n{cpu}{t}; bench/results/{path.name}", fontsize=9.5)


def bar_labels(ax, bars, fmt="{:.0f}", vertical=False) -> None:
    for b in bars:
        h = b.get_height()
        if h and h == h:
            ax.annotate(fmt.format(h), (b.get_x() + b.get_width() / 2, h), xytext=(0, 2), textcoords="offset points",
                        ha="center", va="bottom", fontsize=7, rotation=90 if vertical else 0)


def grouped(ax, groups, series, values, fmt="{:.0f}", colours=None, legend=True, vertical=False):
    """Bars of each series within each group; a missing value leaves no bar (the group's bars
    close up). values[(group, series)] -> number."""
    width = 0.8 / max(1, max(sum((g, s) in values for s in series) for g in groups))
    handles = {}
    for gi, g in enumerate(groups):
        present = [s for s in series if (g, s) in values]
        for si, s in enumerate(present):
            x = gi - 0.4 + width * (si + 0.5) + (0.8 - width * len(present)) / 2
            colour = (colours or COLOURS).get(s, "#555555")
            b = ax.bar([x], [values[(g, s)]], width * 0.92, color=colour, label=s)
            handles.setdefault(s, b)
            bar_labels(ax, b, fmt, vertical)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups)
    if legend and handles:
        ax.legend([handles[s] for s in series if s in handles], [s for s in series if s in handles], fontsize=7.5,
                  frameon=False)


def save(fig, out: Path, name: str, source: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / name, format="svg", metadata={"Date": None, "Creator": None}, bbox_inches="tight")
    plt.close(fig)
    shown = out / name
    try:
        shown = shown.resolve().relative_to(REPO)
    except ValueError:
        pass
    print(f"{shown}: from bench/results/{source.name}")


# ---- throughput.svg: bench/run.sh ----------------------------------------------------------
def family(name: str):
    n = name.lower()
    if "pipeline" in n:
        return None  # the Rust pipeline: pg_embed without SQL, not a system users run
    if n.startswith("pg_embed"):
        return "pg_embed"
    if "onnx" in n:
        return "ONNX Runtime"
    if "openvino" in n:
        return "OpenVINO"
    if "sentence-transformers" in n or "pytorch" in n or "transformers" in n:
        return "PyTorch"
    return None


def precision_of(name: str) -> str:
    n = name.lower().split("(ran ")[0]
    if "int8" in n:
        return "int8"
    if "bf16" in n or "bfloat16" in n:
        return "bfloat16"
    return "float32"


def throughput_rows(d: dict):
    """{(precision, family): {"batch": sentences/s, "p50": ms, "note": str}} of one run."""
    rows = {}
    for t in d.get("side_by_side") or []:
        fam = family(t.get("system", ""))
        if fam is None or t.get("batch") is None:
            continue
        note = "ran " + t["system"].split("(ran ")[1].rstrip(")") if "(ran " in t["system"] else ""
        rows[(precision_of(t["system"]), fam)] = {"batch": t["batch"], "p50": t.get("p50"), "note": note}
    if rows:
        return rows
    # Older files: the systems list (pg_embed's array form for batches, its per-row form for p50).
    for s in d.get("systems") or []:
        name = s.get("system", "")
        fam = family(name)
        if fam is None:
            continue
        key = (s.get("precision") or precision_of(name), fam)
        if key[0] not in PRECISIONS:
            key = (precision_of(name), fam)
        r = rows.setdefault(key, {"batch": None, "p50": None, "note": ""})
        if fam == "pg_embed" and "one call per row" in name:
            r["p50"] = s.get("single_p50_ms")
        elif fam == "pg_embed":
            r["batch"] = s.get("sentences_per_s")
        else:
            r["batch"], r["p50"] = s.get("sentences_per_s"), s.get("single_p50_ms")
    return rows


def chart_throughput(results: Path, out: Path) -> None:
    path = newest(p for p in results.glob("*.json") if THROUGHPUT.match(p.name))
    if path is None:
        print("throughput.svg: no bench/run.sh result file, skipped")
        return
    d = load_json(path)
    rows = throughput_rows(d)
    cpu = d.get("cpu") or {}
    cpu_s = cpu_text(cpu.get("model"), cpu.get("flags"), cpu.get("cores")) if isinstance(cpu, dict) else str(cpu)
    if not cpu:
        vec = (d.get("machine") or {}).get("fma_peak_vector")
        cpu_s = f"CPU not recorded in this file ({vec} FMA)" if vec else "CPU not recorded in this file"
    groups = [p for p in PRECISIONS if any(k[0] == p for k in rows)]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4.2))
    batch = {(p, f): r["batch"] for (p, f), r in rows.items() if r.get("batch")}
    p50 = {(p, f): r["p50"] for (p, f), r in rows.items() if r.get("p50")}
    grouped(a1, groups, SYSTEMS, batch)
    a1.set_title("batch throughput (sentences/s, higher is better)", fontsize=9)
    a1.set_ylabel("sentences/s")
    grouped(a2, groups, SYSTEMS, p50, fmt="{:.1f}", legend=False)
    a2.set_title("one sentence per call, p50 (ms, lower is better)", fontsize=9)
    a2.set_ylabel("ms")
    notes = [f"{f} {p}: {r['note']}" for (p, f), r in sorted(rows.items()) if r.get("note")]
    if notes:
        fig.text(0.01, -0.02, "; ".join(notes), fontsize=7)
    title(fig, "all-MiniLM-L6-v2 (bench/run.sh): pg_embed against PyTorch, ONNX Runtime and OpenVINO", cpu_s,
          d.get("threads"), path)
    fig.tight_layout()
    save(fig, out, "throughput.svg", path)


# ---- threads.svg: bench/device.sh ----------------------------------------------------------
def device_cpu(path: Path) -> str:
    txt = path.with_suffix(".txt")
    model, flags, cores = None, "", None
    if txt.is_file():
        for line in txt.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("CPU(s):"):
                cores = line.split(":", 1)[1].strip()
            elif line.startswith("Flags"):
                flags = line.split(":", 1)[1]
            elif line.startswith("# ") and " on: " in line and not model:
                model = line.split(" on: ", 1)[1].strip()
    return cpu_text(model or "CPU: see the .txt beside the file", flags, cores)


def chart_threads(results: Path, out: Path) -> None:
    path = newest(results.glob("device-*.json"))
    if path is None:
        print("threads.svg: no bench/device.sh result file, skipped")
        return
    rows = [r for r in load_json(path) if isinstance(r, dict) and r.get("part", "minilm") == "minilm"]
    pg = {}
    base = {}
    for r in rows:
        name = r.get("system", "")
        if name.startswith("pg_embed") and r.get("sentences_per_s"):
            pg.setdefault(r.get("precision", "float32"), []).append((r.get("threads") or r.get("bench_threads"),
                                                                    r["sentences_per_s"]))
        elif family(name) in ("PyTorch", "ONNX Runtime", "OpenVINO") and r.get("sentences_per_s"):
            label = f"{family(name)} {precision_of(name)}"
            base.setdefault(label, []).append((r.get("threads") or r.get("bench_threads"), r["sentences_per_s"]))
    if not pg:
        print(f"threads.svg: no pg_embed rows in {path.name}, skipped")
        return
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    styles = {"bfloat16": "-", "float32": "--", "int8": ":"}
    ticks = set()
    for prec in PRECISIONS:
        pts = sorted(pg.get(prec, []))
        if not pts:
            continue
        xs, ys = zip(*pts)
        ticks.update(xs)
        ax.plot(xs, ys, styles[prec], marker="o", color=COLOURS["pg_embed"], label=f"pg_embed {prec}")
        for x, y in pts:
            ax.annotate(f"{y:,.0f}", (x, y), xytext=(4, 4), textcoords="offset points", fontsize=7)
    markers = {"bfloat16": "s", "float32": "^", "int8": "D"}
    placed = {}  # threads -> label heights already used there (points), to keep labels apart
    for label, pts in sorted(base.items(), key=lambda kv: -max(y for _, y in kv[1])):
        fam, prec = label.rsplit(" ", 1)
        xs, ys = zip(*sorted(pts))
        ticks.update(xs)
        ax.plot(xs, ys, linestyle="none", marker=markers.get(prec, "o"), color=COLOURS.get(fam, "#555"), label=label)
        for x, y in zip(xs, ys):
            n = placed.setdefault(x, 0)
            placed[x] += 1
            ax.annotate(f"{label} {y:,.0f}", (x, y), xytext=(8, -3 - 9 * n), textcoords="offset points", fontsize=7,
                        color=COLOURS.get(fam, "#555"))
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(ticks))
    ax.set_xticklabels([str(t) for t in sorted(ticks)])
    ax.set_xlabel("threads")
    ax.set_ylabel("sentences/s (batch)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7.5, frameon=False)
    threads = max(ticks) if ticks else None
    title(fig, "all-MiniLM-L6-v2 (bench/device.sh): scaling with threads", device_cpu(path),
          f"1-{threads}" if threads and threads > 1 else threads, path)
    fig.tight_layout()
    save(fig, out, "threads.svg", path)


# ---- real_size.svg and memory.svg: bench/real_size.sh -----------------------------------------
def real_size_file(results: Path, need):
    files = sorted(results.glob("real_size-*.json"), key=lambda p: (stamp(p), p.name), reverse=True)
    for p in files:
        rows = load_json(p)
        if isinstance(rows, list) and need(rows):
            return p, rows
    return None, None


def real_size_cpu(rows) -> tuple[str, int | None]:
    m = next((r for r in rows if r.get("kind") == "machine"), {})
    return cpu_text(m.get("cpu"), m.get("flags"), m.get("cores")), m.get("threads")


def torch_precision(r) -> str:
    return "bfloat16" if "bfloat16" in r.get("system", "") or "bf16" in r.get("system", "") else "float32"


SHAPES = {"bert-large": "0.34 B (bert-large)", "qwen2-1.5b": "1.5 B (qwen2)", "mistral-7b": "7 B (mistral)"}


def chart_real_size(results: Path, out: Path) -> None:
    path, rows = real_size_file(results, lambda rs: any(r.get("kind") == "torch" for r in rs)
                                and any(r.get("kind") == "pg" for r in rs))
    if path is None:
        print("real_size.svg: no bench/real_size.sh result file with PyTorch rows, skipped")
        return
    values, groups = {}, []
    for r in rows:
        if r.get("kind") == "pg" and (r.get("summary") or {}).get("sentences_per_s"):
            g = f"{SHAPES.get(r['shape'], r['shape'])}\n{r['precision']}"
            values[(g, "pg_embed")] = r["summary"]["sentences_per_s"]
        elif r.get("kind") == "torch" and r.get("sentences_per_s"):
            g = f"{SHAPES.get(r['shape'], r['shape'])}\n{torch_precision(r)}"
            values[(g, "PyTorch")] = r["sentences_per_s"]
        else:
            continue
        if g not in groups:
            groups.append(g)
    fig, ax = plt.subplots(figsize=(8, 4.2))
    grouped(ax, groups, ("pg_embed", "PyTorch"), values, fmt="{:.2f}")
    for gi, g in enumerate(groups):
        if (g, "pg_embed") in values and (g, "PyTorch") in values:
            ratio = values[(g, "pg_embed")] / values[(g, "PyTorch")]
            ax.annotate(f"{ratio:.2f}x", (gi, max(values[(g, "pg_embed")], values[(g, "PyTorch")])), xytext=(0, 12),
                        textcoords="offset points", ha="center", fontsize=8, fontweight="bold")
    ax.set_ylabel("sentences/s (batch)")
    ax.set_yscale("log")
    cpu, threads = real_size_cpu(rows)
    title(fig, "Real model shapes (bench/real_size.sh): pg_embed against sentence-transformers on PyTorch", cpu,
          threads, path)
    fig.tight_layout()
    save(fig, out, "real_size.svg", path)


def chart_memory(results: Path, out: Path) -> None:
    path, rows = real_size_file(results, lambda rs: any(r.get("kind") == "torch" for r in rs)
                                and any(r.get("kind") == "pg" and r.get("memory") for r in rs))
    if path is None:
        path, rows = real_size_file(results, lambda rs: any(r.get("kind") == "pg" and r.get("memory") for r in rs))
    if path is None:
        print("memory.svg: no bench/real_size.sh result file with memory figures, skipped")
        return
    torch = {(r["shape"], torch_precision(r)): r for r in rows if r.get("kind") == "torch"}
    values, groups, n = {}, [], None
    for r in rows:
        mem = r.get("memory") if r.get("kind") == "pg" else None
        if not mem:
            continue
        g = f"{SHAPES.get(r['shape'], r['shape'])}\n{r['precision']}"
        groups.append(g)
        n = mem.get("backends") or n
        if mem.get("file_mb"):
            values[(g, "shared weights file")] = mem["file_mb"]
        one = (mem.get("fresh_after_run") or {}).get("rss_mb")
        if one:
            values[(g, "one backend (RSS)")] = one
        if mem.get("backends_pss_mb"):
            values[(g, f"{mem.get('backends')} backends together (PSS)")] = mem["backends_pss_mb"]
        t = torch.get((r["shape"], r["precision"]))
        rss = ((t or {}).get("memory_after_run") or {}).get("rss_mb")
        if rss:
            values[(g, "one PyTorch process (RSS)")] = rss
    series = ("shared weights file", "one backend (RSS)", f"{n} backends together (PSS)", "one PyTorch process (RSS)")
    colours = {series[0]: "#9cb6cf", series[1]: "#5a84ad", series[2]: COLOURS["pg_embed"], series[3]: COLOURS["PyTorch"]}
    fig, ax = plt.subplots(figsize=(9, 4.4))
    grouped(ax, groups, series, values, fmt="{:,.0f}", colours=colours, vertical=True)
    ax.set_ylabel("MB")
    ax.set_yscale("log")
    ax.set_ylim(top=max(values.values()) * 2.5)
    cpu, threads = real_size_cpu(rows)
    title(fig, "Memory (bench/real_size.sh): the shared file counts once, however many backends map it", cpu, threads,
          path)
    fig.tight_layout()
    save(fig, out, "memory.svg", path)


# ---- images.svg and decoder.svg --------------------------------------------------------------
IMAGE_FAMILIES = {"vit": "ViT-B/16", "siglip": "SigLIP", "dinov3": "DINOv3"}


def image_family(path: Path) -> str:
    middle = re.sub(r"^images-|-\d{8}T\d{6}Z\.json$", "", path.name)
    first = middle.split("-")[0]
    return "vit" if HEX.fullmatch(first) else first


def chart_images(results: Path, out: Path) -> None:
    by_family = {}
    for p in results.glob("images-*.json"):
        by_family.setdefault(image_family(p), []).append(p)
    latest = [(f, newest(ps)) for f, ps in sorted(by_family.items(), key=lambda kv: list(IMAGE_FAMILIES).index(kv[0])
                                                    if kv[0] in IMAGE_FAMILIES else 99)]
    if not latest:
        print("images.svg: no bench/images.sh result file, skipped")
        return
    fig, axes = plt.subplots(1, len(latest), figsize=(4.4 * len(latest), 4.8), squeeze=False)
    for ax, (fam, path) in zip(axes[0], latest):
        d = load_json(path)
        values = {}
        for s in d.get("systems") or []:
            f = "pg_embed" if s.get("system", "").startswith("pg_embed") else family(s.get("system", ""))
            if f and s.get("images_per_s"):
                values[(precision_of(s["system"]), f)] = s["images_per_s"]
        groups = [p for p in PRECISIONS if any(k[0] == p for k in values)]
        grouped(ax, groups, ("pg_embed", "PyTorch"), values, fmt="{:.1f}", legend=ax is axes[0][0])
        cpu = "\n".join(textwrap.wrap(f"{cpu_text(d.get('cpu'), d.get('flags'))}, {d.get('threads')} threads", 52))
        ax.set_title(f"{IMAGE_FAMILIES.get(fam, fam)}\n{cpu}\nbench/results/{path.name}", fontsize=7.5)
        ax.set_ylabel("images/s (64 images, end to end)")
    fig.suptitle("Images (bench/images.sh): pg_embed against transformers on PyTorch", fontsize=9.5)
    fig.tight_layout()
    save(fig, out, "images.svg", latest[-1][1])


def chart_decoder(results: Path, out: Path) -> None:
    path = newest(results.glob("decoder-*.json"))
    if path is None:
        print("decoder.svg: no bench/decoder.sh result file, skipped")
        return
    d = load_json(path)
    values = {}
    after_baseline = []  # pg_embed rows after the first baseline: bfloat16, then int8
    seen_baseline = False
    for s in d.get("systems") or []:
        name = s.get("system", "")
        rate = s.get("sentences_per_s")
        if not rate:
            continue
        if name.startswith("pg_embed"):
            if s.get("precision") in PRECISIONS:
                prec = s["precision"]
            elif precision_of(name) != "float32":
                prec = precision_of(name)
            elif not seen_baseline:
                prec = "float32"
            else:
                prec = ("bfloat16", "int8", "int8")[min(len(after_baseline), 2)]
                after_baseline.append(s)
            values[(prec, "pg_embed")] = max(rate, values.get((prec, "pg_embed"), 0))
        elif family(name):
            seen_baseline = True
            values[(precision_of(name), family(name))] = rate
    groups = [p for p in PRECISIONS if any(k[0] == p for k in values)]
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    grouped(ax, groups, ("pg_embed", "PyTorch"), values, fmt="{:.1f}")
    ax.set_ylabel("sentences/s (batch)")
    title(fig, "Qwen3-Embedding-0.6B's shape (bench/decoder.sh): pg_embed against sentence-transformers",
          cpu_text(d.get("cpu"), d.get("flags")), d.get("threads"), path)
    fig.tight_layout()
    save(fig, out, "decoder.svg", path)


CHARTS = (chart_throughput, chart_threads, chart_real_size, chart_memory, chart_images, chart_decoder)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", type=Path, default=HERE / "results")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "charts")
    args = ap.parse_args(argv)
    for chart in CHARTS:
        chart(args.results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
