#!/usr/bin/env python3
"""Checks the documentation (run by make test):  python3 scripts/check_docs.py

1. Links. Every relative link in README.md and docs/*.md resolves: the file or folder it
   names exists in the repository, and for `page.md#anchor` and `#anchor` the target page has
   a heading whose GitHub slug is `anchor` (lower case, punctuation but `-` and `_` dropped,
   spaces made `-`, a repeated heading's slug suffixed -1, -2, ...). Links in code blocks and
   code spans are text, not links; links with a scheme (https:, mailto:) are not followed.
2. The reference. Every user-facing SQL function, procedure and view of the extension, and
   every setting, appears in docs/sql-reference.md: the functions from the extension's
   sources as a fresh install runs them (every `#[pg_extern]` in src/, with its `name = ...`
   and its schema: `schema = ...`, or the `#[pg_schema] mod` it sits in; and the
   `CREATE FUNCTION / PROCEDURE / VIEW` statements of the SQL files src/ names with
   `extension_sql_file!`), the settings from the `"pg_embed.*"` names in src/guc.rs. Names
   that start with `_` (`embed._vectorize_step`, `_panic_for_test`, ...) are internal and
   skipped. A function of schema embed must appear as `embed.name`, one of the extension's
   schema as `name(`, a view as `embed.name`, a setting as `` `pg_embed.name` ``.

Standard library only (CI installs nothing for it). Exit status 1 when anything fails, each
failure on its own line. scripts/check_docs_test.py is its self-test.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from urllib.parse import unquote

REPO = Path(__file__).resolve().parent.parent
REFERENCE = "docs/sql-reference.md"
# Fewer objects than this means the sources moved and the parser no longer finds them.
MIN_FUNCTIONS = 30
MIN_SETTINGS = 10

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
LINK_TARGET = re.compile(r"\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


# ---- markdown ----------------------------------------------------------------------------
def without_code(text: str) -> str:
    """The text with fenced code blocks and code spans blanked (line numbers kept)."""
    out, fence = [], False
    for line in text.split("\n"):
        if FENCE.match(line):
            fence = not fence
            out.append("")
        else:
            out.append("" if fence else line)
    return CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), "\n".join(out))


def slugify(heading: str) -> str:
    """GitHub's anchor of a heading's text (github-slugger on the rendered text)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "")
    text = re.sub(r"(\*\*|__|\*|~~)", "", text)
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def heading_lines(text: str) -> list[tuple[int, str, str]]:
    """(level, text, slug) of every ATX heading outside code blocks, in order."""
    seen: dict[str, int] = {}
    out, fence = [], False
    for line in text.split("\n"):
        if FENCE.match(line):
            fence = not fence
            continue
        m = None if fence else HEADING.match(line)
        if not m:
            continue
        base = slugify(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.append((len(m.group(1)), m.group(2), base if n == 0 else f"{base}-{n}"))
    return out


def anchors(path: Path) -> set[str]:
    return {slug for _, _, slug in heading_lines(path.read_text(encoding="utf-8"))}


def links(text: str) -> list[tuple[int, str]]:
    """(line, target) of every markdown link and image outside code."""
    plain = without_code(text)
    return [(plain.count("\n", 0, m.start()) + 1, m.group(1)) for m in LINK_TARGET.finditer(plain)]


def doc_files(repo: Path) -> list[Path]:
    files = [repo / "README.md"] + sorted((repo / "docs").glob("**/*.md"))
    return [f for f in files if f.is_file()]


def is_under(path: Path, root: Path) -> bool:
    return os.path.commonpath([path, root]) == str(root)


def check_links(repo: Path) -> tuple[list[str], int]:
    repo = Path(os.path.normpath(repo.absolute()))
    errors, count, cache = [], 0, {}
    for page in doc_files(repo):
        rel_page = page.relative_to(repo).as_posix()
        for line, target in links(page.read_text(encoding="utf-8")):
            if not target or SCHEME.match(target) or target.startswith("//"):
                continue
            count += 1
            path_part, _, anchor = target.partition("#")
            where = f"{rel_page}:{line}: link {target!r}"
            if path_part:
                if path_part.startswith("/"):
                    errors.append(f"{where}: an absolute path (write it relative to {rel_page})")
                    continue
                # Lexically (links are resolved as GitHub resolves them, not through symlinks).
                dest = Path(os.path.normpath(page.parent / unquote(path_part)))
                if not is_under(dest, repo):
                    errors.append(f"{where}: points outside the repository")
                    continue
                if not dest.exists():
                    errors.append(f"{where}: no such file")
                    continue
            else:
                dest = page
            if anchor:
                if dest.suffix != ".md" or not dest.is_file():
                    errors.append(f"{where}: an anchor into something that is not a markdown page")
                    continue
                if dest not in cache:
                    cache[dest] = anchors(dest)
                if unquote(anchor) not in cache[dest]:
                    errors.append(f"{where}: {dest.relative_to(repo).as_posix()} has no heading "
                                  f"with the anchor #{anchor}")
    return errors, count


# ---- the extension's SQL surface ---------------------------------------------------------
SQL_CREATE = re.compile(
    r'^CREATE\s+(?:OR\s+REPLACE\s+)?(FUNCTION|PROCEDURE|VIEW)\s+(?:"?(\w+)"?\.)?"?(\w+)"?', re.I | re.M)
PG_EXTERN = re.compile(r"#\[pg_extern\b(?:\(([^\]]*)\))?\]")
FN = re.compile(r"\bfn\s+(\w+)")
SCHEMA_MOD = re.compile(r"#\[pg_schema\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*\{")
SQL_FILE = re.compile(r'extension_sql_file!\(\s*"([^"]+)"')
GUC = re.compile(r'"pg_embed\.(\w+)"')


def rust_files(repo: Path) -> list[Path]:
    return sorted(p for p in (repo / "src").rglob("*.rs") if "sql_tests" not in p.parts)


def pg_externs(path: Path) -> list[tuple[str, str, str]]:
    """(schema, name, kind) of every #[pg_extern] in a Rust file; schema '' = the extension's."""
    text = path.read_text(encoding="utf-8")
    mods = []  # (start, end, schema) of `#[pg_schema] mod x { ... }`, closed by a `}` at its indent
    for m in SCHEMA_MOD.finditer(text):
        line_start = text.rfind("\n", 0, m.start()) + 1
        indent = re.match(r"[ \t]*", text[line_start:]).group(0)
        close = re.compile(r"^" + re.escape(indent) + r"\}", re.M).search(text, m.end())
        mods.append((m.start(), close.start() if close else len(text), m.group(1)))
    out = []
    for m in PG_EXTERN.finditer(text):
        args = m.group(1) or ""
        fn = FN.search(text, m.end())
        if not fn:
            continue
        name = re.search(r'\bname\s*=\s*"(\w+)"', args)
        schema = re.search(r'\bschema\s*=\s*"(\w+)"', args)
        if schema:
            sch = schema.group(1)
        else:
            sch = next((s for a, b, s in mods if a < m.start() < b), "")
        out.append((sch, name.group(1) if name else fn.group(1), "function"))
    return out


def sql_objects(sql: str) -> list[tuple[str, str, str]]:
    """(schema, name, kind) of the CREATE FUNCTION / PROCEDURE / VIEW statements that start a
    line (those inside a function body, as format strings, are indented or quoted)."""
    return [((m.group(2) or "").lower(), m.group(3), m.group(1).lower()) for m in SQL_CREATE.finditer(sql)]


def extension_objects(repo: Path) -> set[tuple[str, str, str]]:
    """Every function, procedure and view a fresh install creates, internal ones included."""
    objs: set[tuple[str, str, str]] = set()
    for rs in rust_files(repo):
        objs.update(pg_externs(rs))
        for m in SQL_FILE.finditer(rs.read_text(encoding="utf-8")):
            sql_path = (rs.parent / m.group(1)).resolve()
            if sql_path.is_file():
                objs.update(sql_objects(sql_path.read_text(encoding="utf-8")))
    return {("" if s in ("", "public") else s, n, "function" if k == "procedure" else k) for s, n, k in objs}


def settings(repo: Path) -> set[str]:
    guc = repo / "src" / "guc.rs"
    return set(GUC.findall(guc.read_text(encoding="utf-8"))) if guc.is_file() else set()


def documented(ref: str, schema: str, name: str, kind: str) -> bool:
    if schema:
        return re.search(rf"(?<![\w.]){re.escape(schema)}\.{re.escape(name)}\b", ref) is not None
    return re.search(rf"(?<![\w.]){re.escape(name)}\(", ref) is not None


def check_reference(repo: Path) -> tuple[list[str], int, int]:
    ref_path = repo / REFERENCE
    if not ref_path.is_file():
        return [f"{REFERENCE}: missing"], 0, 0
    ref = ref_path.read_text(encoding="utf-8")
    objs = sorted(o for o in extension_objects(repo) if not o[1].startswith("_"))
    gucs = sorted(settings(repo))
    errors = []
    if len(objs) < MIN_FUNCTIONS:
        errors.append(f"found only {len(objs)} user-facing functions and views in src/ and the SQL files it "
                      f"names (expected at least {MIN_FUNCTIONS}): has the extension's source moved?")
    if len(gucs) < MIN_SETTINGS:
        errors.append(f"found only {len(gucs)} settings in src/guc.rs (expected at least {MIN_SETTINGS})")
    for schema, name, kind in objs:
        if not documented(ref, schema, name, kind):
            shown = f"{schema}.{name}" if schema else f"{name}(...)"
            errors.append(f"{REFERENCE}: the {kind} {shown} is not documented")
    for g in gucs:
        if f"`pg_embed.{g}`" not in ref:
            errors.append(f"{REFERENCE}: the setting pg_embed.{g} is not documented")
    return errors, len(objs), len(gucs)


def run(repo: Path = REPO) -> tuple[list[str], str]:
    link_errors, n_links = check_links(repo)
    ref_errors, n_objs, n_gucs = check_reference(repo)
    summary = (f"docs: {n_links} relative links in {len(doc_files(repo))} pages resolve; {n_objs} functions "
               f"and views and {n_gucs} settings are in {REFERENCE}")
    return link_errors + ref_errors, summary


def main() -> int:
    errors, summary = run(REPO)
    for e in errors:
        print(f"FAIL: {e}")
    if errors:
        print(f"docs: {len(errors)} failure(s)")
        return 1
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
