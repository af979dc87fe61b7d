#!/usr/bin/env python3
"""The shape of the code, checked (run by `make test`'s static stage):

1. No import cycle between files of a Rust crate (the core crate crates/pg_embed_core and the
   SQL edge src/). A file depends on another when it names that file's module through a
   `crate::` or `super::` path (in a `use` or inline); a module naming its own children and a
   child using an ancestor's items are the module tree, not dependencies.
2. No Rust, C, Python or shell file over 800 lines (tests/fixtures and generated or vendored
   files aside).

Prints each cycle with the names that tie it, and each file too long; exits 1 if any.
`--graph` prints every file-to-file dependency instead.
"""
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRATES = [("crates/pg_embed_core/src", "lib.rs"), ("src", "lib.rs")]
MAX_LINES = 800
SOURCE_SUFFIXES = (".rs", ".c", ".h", ".py", ".sh")
NOT_SOURCE = ("tests/fixtures/", "sql/released/")

USE_RE = re.compile(r"\buse\s+((?:crate|super|self)\s*::[^;]*);", re.S)
PATH_RE = re.compile(r"\b((?:crate|super)(?:\s*::\s*\w+)+)")
MOD_RE = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*(;|\{)")


def strip(text):
    """The code without comments and string literals (their contents could look like paths)."""
    text = re.sub(r'r#*"(?:.|\n)*?"#*', '""', text)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    text = re.sub(r"'(?:\\.|[^'\\])'", "' '", text)
    text = re.sub(r"/\*(?:.|\n)*?\*/", "", text)
    return re.sub(r"//[^\n]*", "", text)


def expand(tree):
    """`a::{b, c::{d, e}}` -> [a::b, a::c::d, a::c::e] (as lists of segments)."""
    tree = re.sub(r"\s+as\s+\w+", "", tree)
    tree = re.sub(r"\s+", "", tree)
    if "{" not in tree:
        return [[s for s in tree.split("::") if s and s != "*"]]
    head, rest = tree.split("{", 1)
    body = rest[: rest.rindex("}")]
    parts, depth, cur = [], 0, ""
    for ch in body:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    prefix = [s for s in head.split("::") if s]
    out = []
    for p in parts:
        if p.strip():
            for tail in expand(p):
                out.append(prefix + tail)
    return out


class Crate:
    def __init__(self, root, lib):
        self.root = os.path.join(REPO, root)
        self.files = {}  # module path (tuple) -> file
        self._walk((), os.path.join(self.root, lib))

    def _walk(self, path, file):
        self.files[path] = file
        base = os.path.dirname(file) if os.path.basename(file) in ("lib.rs", "mod.rs") else file[:-3]
        for line in open(file, encoding="utf-8"):
            m = MOD_RE.match(line)
            if m and m.group(2) == ";":
                name = m.group(1)
                for cand in (os.path.join(base, name + ".rs"), os.path.join(base, name, "mod.rs")):
                    if os.path.exists(cand):
                        self._walk(path + (name,), cand)
                        break

    def resolve(self, module, segments):
        """The module path a `crate::`/`super::` path names: its longest prefix that is a file."""
        if segments[0] == "crate":
            target, rest = (), segments[1:]
        else:
            target, rest = module, segments
            while rest and rest[0] == "super":
                target, rest = target[:-1], rest[1:]
            if rest and rest[0] == "self":
                rest = rest[1:]
        for s in rest:
            if target + (s,) in self.files:
                target = target + (s,)
            else:
                break
        return target

    def edges(self):
        """(from module, to module) -> the names the first takes from the second."""
        out = {}
        for module, file in self.files.items():
            code = strip(open(file, encoding="utf-8").read())
            # Inline `mod x { ... }` blocks shift what `super::` means inside them.
            inline_at = []
            for m in re.finditer(r"\bmod\s+\w+\s*\{", code):
                depth, i = 0, m.end() - 1
                for i in range(m.end() - 1, len(code)):
                    depth += code[i] == "{"
                    depth -= code[i] == "}"
                    if depth == 0:
                        break
                inline_at.append((m.start(), i))

            def scope(pos):
                return module + ("<inline>",) * sum(1 for a, b in inline_at if a < pos < b)

            found, use_spans = [], []
            for m in USE_RE.finditer(code):
                use_spans.append(m.span())
                for segs in expand(m.group(1)):
                    found.append((m.start(), segs))
            for m in PATH_RE.finditer(code):
                # A path inside a `use` statement is read above, as its whole tree.
                if any(a <= m.start() < b for a, b in use_spans):
                    continue
                found.append((m.start(), re.sub(r"\s+", "", m.group(1)).split("::")))
            for pos, segs in found:
                if not segs or segs[0] not in ("crate", "super"):
                    continue
                here = scope(pos)
                segs_here = segs
                if segs[0] == "super":
                    # From inside an inline module, `super` first climbs out of it.
                    inner = len(here) - len(module)
                    ups = 0
                    while ups < len(segs) and segs[ups] == "super":
                        ups += 1
                    if ups <= inner:
                        continue  # names this file's own module
                    segs_here = ["super"] * (ups - inner) + segs[ups:]
                target = self.resolve(module, segs_here)
                if target == module or target[: len(module)] == module or module[: len(target)] == target:
                    continue  # itself, a child, or an ancestor: the module tree
                name = segs_here[-1] if segs_here[-1] != target[-1] else ""
                out.setdefault((module, target), set()).add(name)
        return out


def cycles(nodes, edges):
    """Strongly connected components with more than one node (Tarjan)."""
    graph = {n: [] for n in nodes}
    for a, b in edges:
        graph[a].append(b)
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for n in nodes:
        if n not in index:
            visit(n)
    return comps


def tracked_files():
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [f for f in out.splitlines() if os.path.isfile(os.path.join(REPO, f))]


def main():
    failed = False
    graph = "--graph" in sys.argv
    for root, lib in CRATES:
        crate = Crate(root, lib)
        rel = lambda m: os.path.relpath(crate.files[m], REPO)
        edges = crate.edges()
        if graph:
            for (a, b), names in sorted(edges.items()):
                print(f"{rel(a)} -> {rel(b)}: {', '.join(sorted(n for n in names if n)) or '(module)'}")
            continue
        for comp in cycles(list(crate.files), edges):
            failed = True
            print(f"import cycle in {root}: {', '.join(rel(m) for m in comp)}")
            for (a, b), names in sorted(edges.items()):
                if a in comp and b in comp:
                    print(f"    {rel(a)} -> {rel(b)}: {', '.join(sorted(n for n in names if n)) or '(module)'}")
    if graph:
        return 0
    for f in tracked_files():
        if not f.endswith(SOURCE_SUFFIXES) or f.startswith(NOT_SOURCE):
            continue
        n = sum(1 for _ in open(os.path.join(REPO, f), encoding="utf-8", errors="replace"))
        if n > MAX_LINES:
            failed = True
            print(f"{f}: {n} lines (at most {MAX_LINES})")
    if not failed:
        print("structure: no import cycle between files; no source file over 800 lines")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
