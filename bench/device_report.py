#!/usr/bin/env python3
"""bench/device_run.sh's report: the CPU, then per part the systems' figures side by side,
the ratios the AMX issue sets goals for (each with the goal and whether it is met), the
thread scaling and pg_embed's stage breakdown. Asserts nothing.

Usage: python bench/device_report.py MACHINE_TXT DEVICE_JSON
"""

import json
import math
import sys


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.startswith("{")]


def cosine_min(a, b):
    """The smallest cosine of row i of a with row i of b (the rows both have)."""
    worst = math.inf
    for x, y in zip(a, b):
        dot = sum(p * q for p, q in zip(x, y))
        nx, ny = math.sqrt(sum(p * p for p in x)), math.sqrt(sum(q * q for q in y))
        worst = min(worst, dot / (nx * ny) if nx and ny else math.nan)
    return worst


def fmt(v, digits=1):
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:,.{digits}f}"


def ratio(a, b):
    return a / b if a and b else None


def goal(line, value, want, at_least=True):
    if value is None:
        return f"  {line}: not measured"
    met = value >= want if at_least else value <= want
    return f"  {line}: {value:.2f}x (goal {'>=' if at_least else '<='} {want}x) {'met' if met else 'NOT met'}"


def main():
    machine, rows = sys.argv[1], load(sys.argv[2])
    out = []
    with open(machine) as f:
        text = f.read()
    pick = ("Model name", "CPU(s):", "Thread(s) per core", "Flags", "torch", "pg_embed", "amx", "avx512")
    out.append("# pg_embed side by side (bench/device_run.sh) on: " + next((l.split(":", 1)[1].strip() for l in text.splitlines()
                                                      if l.startswith("Model name")), "unknown CPU"))
    out += [l if not l.startswith("Flags") else "Flags (AVX-512 / AMX): " + " ".join(
        w for w in l.split() if w.startswith(("avx512", "amx"))) for l in text.splitlines() if l.strip().startswith(pick)]
    for r in rows:
        if r.get("system") == "note":
            out.append(f"note ({r['part']}): {r['note']}")

    def get(part, threads, precision, system_prefix=None, key=None):
        for r in rows:
            if (r.get("part") == part and r.get("bench_threads") == threads and r.get("precision") == precision
                    and (system_prefix is None or r.get("system", "").startswith(system_prefix))
                    and (key is None or r.get("key") == key)):
                return r
        return None

    # MiniLM
    threads = sorted({r["bench_threads"] for r in rows if r.get("part") == "minilm" and "bench_threads" in r})
    if threads:
        real = any(r.get("system") == "note" and "real weights" in r.get("note", "") for r in rows)
        out.append(f"\n## all-MiniLM-L6-v2{'' if real else chr(39) + 's shape (random weights)'}, bench corpus, 2,000 sentences")
        out.append(f"{'threads':>7} {'pg bf16/s':>10} {'pg f32/s':>9} {'PT bf16/s':>10} {'ORT f32/s':>10} {'PT f32/s':>9}"
                   f" {'p50 bf16':>9} {'p50 f32':>8} {'p50 ORT':>8} {'p50 PTbf16':>10}")
        for t in threads:
            pb, pf = get("minilm", t, "bfloat16", "pg_embed"), get("minilm", t, "float32", "pg_embed")
            sb, ort, st = (get("minilm", t, "baseline", key=k) for k in ("st_bf16", "ort", "st"))
            val = lambda r, k="sentences_per_s": r.get(k) if r else None
            out.append(f"{t:>7} {fmt(val(pb)):>10} {fmt(val(pf)):>9} {fmt(val(sb)):>10} {fmt(val(ort)):>10}"
                       f" {fmt(val(st)):>9} {fmt(val(pb, 'single_p50_ms'), 2):>9} {fmt(val(pf, 'single_p50_ms'), 2):>8}"
                       f" {fmt(val(ort, 'single_p50_ms'), 2):>8} {fmt(val(sb, 'single_p50_ms'), 2):>10}")
        out.append("ratios and goals:")
        for t in threads:
            pb, pf = get("minilm", t, "bfloat16", "pg_embed"), get("minilm", t, "float32", "pg_embed")
            sb, ort, st = (get("minilm", t, "baseline", key=k) for k in ("st_bf16", "ort", "st"))
            if not (sb or ort or st):
                continue
            s = lambda r: r.get("sentences_per_s") if r else None
            p50 = lambda r: r.get("single_p50_ms") if r else None
            out.append(f" {t} threads:")
            out.append(goal("bfloat16 / PyTorch bfloat16", ratio(s(pb), s(sb)), 1.5 if t <= 2 else 2.0))
            if t <= 2:
                out.append(goal("bfloat16 / ONNX Runtime float32", ratio(s(pb), s(ort)), 3.5))
                out.append(goal("single p50 bfloat16 / ONNX Runtime", ratio(p50(pb), p50(ort)), 0.35, at_least=False))
                out.append(goal("float32 / PyTorch float32", ratio(s(pf), s(st)), 1.3))
                out.append(goal("float32 / ONNX Runtime float32", ratio(s(pf), s(ort)), 1.3))
            else:
                out.append(f"  bfloat16 / ONNX Runtime float32: {fmt(ratio(s(pb), s(ort)), 2)}x")
            if st and st.get("vectors") and pb and pb.get("vectors"):
                out.append(f"  min cosine, pg_embed bfloat16 vs PyTorch float32 (first {len(st['vectors'])}): "
                           f"{cosine_min(pb['vectors'], st['vectors']):.6f} (goal >= 0.9999;"
                           f" PyTorch bfloat16's {fmt(sb.get('min_cos_vs_st_fp32') if sb else None, 6)})")
        lo, hi = threads[0], threads[-1]
        out.append(f"scaling, sentences/s relative to {lo} thread{'s' if lo > 1 else ''}:")
        for p in ("bfloat16", "float32"):
            base = get("minilm", lo, p, "pg_embed")
            line = " ".join(f"{t}: {fmt(ratio(get('minilm', t, p, 'pg_embed')['sentences_per_s'], base['sentences_per_s']), 2)}x"
                            for t in threads if base and get("minilm", t, p, "pg_embed"))
            out.append(f"  {p}: {line}")
            if 2 in threads and 16 in threads:
                two, sixteen = get("minilm", 2, p, "pg_embed"), get("minilm", 16, p, "pg_embed")
                if two and sixteen:
                    out.append(goal(f"{p} 2 -> 16 threads", ratio(sixteen["sentences_per_s"], two["sentences_per_s"]), 6.0))
        out.append("stage breakdown (share of threads x wall time of one batch of the corpus / of the single calls,"
                   " timers on):")
        for t in threads:
            for p in ("bfloat16", "float32"):
                for run in ("batch", "singles"):
                    r = next((x for x in rows if x.get("part") == "minilm" and x.get("bench_threads") == t
                              and x.get("precision") == p and x.get("system") == "stages" and x.get("run") == run), None)
                    if r:
                        shares = " ".join(f"{k} {v * 100:.1f}%" for k, v in sorted(r["shares"].items(), key=lambda kv: -kv[1]))
                        out.append(f"  {t} threads {p} {run}: {shares}")
        peak = next((r for r in rows if r.get("part") == "minilm" and r.get("system") == "machine"), None)
        if peak:
            out.append(f"FMA peak (AVX-512 FMA chains, {peak['threads']} threads): {peak['fma_peak_gflops']:.0f} GFLOP/s;"
                       f" corpus {peak['corpus_useful_gflop']:.0f} GFLOP")
            for t in threads:
                m = next((r for r in rows if r.get("part") == "minilm" and r.get("system") == "machine"
                          and r.get("bench_threads") == t and r.get("precision") == "float32"), None)
                pf = get("minilm", t, "float32", "pg_embed")
                if m and pf:
                    achieved = m["corpus_useful_gflop"] * pf["sentences_per_s"] / pf["sentences"]
                    out.append(f"  float32 at {t} threads: {achieved:.0f} GFLOP/s useful, {achieved / m['fma_peak_gflops'] * 100:.0f}%"
                               f" of that thread count's FMA peak ({m['fma_peak_gflops']:.0f})")

    # Decoder
    for t in sorted({r["bench_threads"] for r in rows if r.get("part") == "decoder" and "bench_threads" in r}):
        pb, pf = get("decoder", t, "bfloat16", "pg_embed"), get("decoder", t, "float32", "pg_embed")
        sb, st = get("decoder", t, "baseline", key="st_bf16"), get("decoder", t, "baseline", key="st")
        s = lambda r: r.get("sentences_per_s") if r else None
        out.append(f"\n## Qwen3-Embedding-0.6B's shape (random weights), 100 sentences, {t} threads")
        out.append(f"  sentences/s: pg_embed bfloat16 {fmt(s(pb), 2)}, float32 {fmt(s(pf), 2)};"
                   f" PyTorch bfloat16 {fmt(s(sb), 2)}, float32 {fmt(s(st), 2)}")
        out.append(goal("bfloat16 / PyTorch bfloat16", ratio(s(pb), s(sb)), 1.5))
        out.append(goal("float32 / PyTorch float32", ratio(s(pf), s(st)), 1.3))

    # Images
    for t in sorted({r["bench_threads"] for r in rows if r.get("part") == "images" and "bench_threads" in r}):
        pb, pf = get("images", t, "bfloat16", "pg_embed"), get("images", t, "float32", "pg_embed")
        tb, tf = get("images", t, "baseline bf16"), get("images", t, "baseline")
        s = lambda r: r.get("images_per_s") if r else None
        out.append(f"\n## ViT-B/16 (random weights), 64 JPEGs end to end, {t} threads")
        out.append(f"  images/s: pg_embed bfloat16 {fmt(s(pb), 2)}, float32 {fmt(s(pf), 2)};"
                   f" PyTorch bfloat16 {fmt(s(tb), 2)}, float32 {fmt(s(tf), 2)}")
        out.append(goal("bfloat16 / PyTorch bfloat16", ratio(s(pb), s(tb)), 1.5))
        out.append(f"  float32 / PyTorch float32: {fmt(ratio(s(pf), s(tf)), 2)}x")
    print("\n".join(out))


if __name__ == "__main__":
    main()
