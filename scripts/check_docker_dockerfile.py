"""scripts/check_docker.py's reading of docker/Dockerfile and .dockerignore: the instructions and
stages (ARG/ENV substituted), shell commands split into words, COPY sources and destinations,
and .dockerignore's patterns. Python standard library only.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath


# ---- Dockerfile ---------------------------------------------------------------------------


@dataclass
class Instr:
    cmd: str  # upper case
    args: str  # variables substituted (ARG/ENV known at that point)
    raw: str  # as written
    line: int
    workdir: str = "/"  # WORKDIR in effect


@dataclass
class Stage:
    index: int
    base: str
    name: str | None
    line: int
    instrs: list[Instr] = field(default_factory=list)
    vars: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"

    def label(self) -> str:
        return f"stage {self.index} ({self.name or 'unnamed'}, FROM {self.base})"


class DockerfileError(Exception):
    pass


_VAR_RE = re.compile(r"\$(?:\{(\w+)(?::?([-+])([^}$]*))?\}|(\w+))")


def substitute(text: str, env: dict[str, str]) -> str:
    """Docker's ${VAR}, $VAR, ${VAR:-default}, ${VAR:+alt}; unknown variables stay as written."""

    def repl(m: re.Match) -> str:
        name = m.group(1) or m.group(4)
        op, word = m.group(2), m.group(3)
        if name not in env:
            if op == "-":
                return word
            return "" if op == "+" else m.group(0).replace("$", "\0")
        value = env[name].replace("$", "\0")  # not substituted again
        if op == "-":
            return value if value else word
        if op == "+":
            return word if value else ""
        return value

    # Innermost first: ${A:+=${A}} substitutes ${A}, then the outer expression.
    for _ in range(8):
        new = _VAR_RE.sub(repl, text)
        if new == text:
            break
        text = new
    return text.replace("\0", "$")


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Instructions with line continuations joined and comment lines dropped."""
    out: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 0
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not buf:
            if not stripped or stripped.startswith("#"):
                continue
            start = n
        elif stripped.startswith("#") or not stripped:
            continue  # comments (and blank lines) inside a continuation
        if line.rstrip().endswith("\\"):
            buf.append(line.rstrip()[:-1])
            continue
        buf.append(line)
        out.append((start, " ".join(part.strip() for part in buf)))
        buf = []
    if buf:
        raise DockerfileError(f"line {start}: continuation at end of file")
    return out


def _parse_kv(args: str) -> list[tuple[str, str | None]]:
    """ARG/ENV/LABEL arguments: k=v pairs (shell-quoted) or the legacy `ENV k v`."""
    tokens = shlex.split(args)
    if tokens and "=" not in tokens[0]:
        return [(tokens[0], " ".join(tokens[1:]) if len(tokens) > 1 else None)]
    out = []
    for t in tokens:
        k, sep, v = t.partition("=")
        out.append((k, v if sep else None))
    return out


def parse_dockerfile(text: str) -> tuple[dict[str, str], list[Stage]]:
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line, instr in _logical_lines(text):
        cmd, _, args = instr.strip().partition(" ")
        cmd = cmd.upper()
        args = args.strip()
        if cmd == "FROM":
            tokens = [t for t in args.split() if not t.startswith("--platform")]
            if not tokens:
                raise DockerfileError(f"line {line}: FROM without an image")
            name = tokens[2] if len(tokens) >= 3 and tokens[1].upper() == "AS" else None
            stages.append(Stage(len(stages), substitute(tokens[0], global_args), name, line))
            continue
        if not stages:
            if cmd == "ARG":
                for k, v in _parse_kv(args):
                    global_args[k] = substitute(v, global_args) if v is not None else ""
                continue
            raise DockerfileError(f"line {line}: {cmd} before the first FROM")
        st = stages[-1]
        if cmd == "WORKDIR":
            st.workdir = str(PurePosixPath(st.workdir) / substitute(args, st.vars))
        if cmd == "ARG":
            for k, v in _parse_kv(args):
                st.vars[k] = substitute(v, st.vars) if v is not None else global_args.get(k, "")
        elif cmd == "ENV":
            for k, v in _parse_kv(args):
                st.vars[k] = substitute(v or "", st.vars)
        st.instrs.append(Instr(cmd, substitute(args, st.vars), args, line, st.workdir))
    return global_args, stages


def shell_tokens(command: str) -> list[str]:
    lex = shlex.shlex(command, posix=True, punctuation_chars=";&|()<>")
    lex.whitespace_split = True
    lex.commenters = ""
    return list(lex)


def simple_commands(command: str) -> list[list[str]]:
    """A RUN's simple commands: its tokens split at ; && || | ( )."""
    cmds: list[list[str]] = [[]]
    for tok in shell_tokens(command):
        if tok and all(c in ";&|()<>" for c in tok):
            cmds.append([])
        else:
            cmds[-1].append(tok)
    return [c for c in cmds if c]


def option_value(tokens: list[str], name: str) -> list[str]:
    """Values of `--name V` / `--name=V` in tokens."""
    vals = []
    for i, t in enumerate(tokens):
        if t == name and i + 1 < len(tokens):
            vals.append(tokens[i + 1])
        elif t.startswith(name + "="):
            vals.append(t[len(name) + 1 :])
    return vals


@dataclass
class Copy:
    instr: Instr
    flags: dict[str, str]
    sources: list[str]
    dest: str
    workdir: str


def stage_copies(stage: Stage) -> list[Copy]:
    out = []
    for ins in stage.instrs:
        if ins.cmd not in ("COPY", "ADD"):
            continue
        args = ins.args.strip()
        flags: dict[str, str] = {}
        while args.startswith("--"):
            flag, _, args = args.partition(" ")
            k, _, v = flag[2:].partition("=")
            flags[k] = v
            args = args.strip()
        parts = json.loads(args) if args.startswith("[") else shlex.split(args)
        if len(parts) < 2:
            raise DockerfileError(f"line {ins.line}: {ins.cmd} needs a source and a destination")
        out.append(Copy(ins, flags, parts[:-1], parts[-1], ins.workdir))
    return out


def find_build_stage(stages: list[Stage]) -> Stage | None:
    for st in stages:
        for ins in st.instrs:
            if ins.cmd == "RUN" and any(c[:3] == ["cargo", "pgrx", "package"] for c in simple_commands(ins.args)):
                return st
    return None


def pg_major_of(image: str) -> str | None:
    m = re.search(r"postgres:(\d+)", image)
    return m.group(1) if m else None


# ---- .dockerignore ------------------------------------------------------------------------


def _glob_regex(pattern: str) -> re.Pattern:
    out, i = "", 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
            continue
        if pattern.startswith("**", i):
            out += ".*"
            i += 2
            continue
        if c == "*":
            out += "[^/]*"
        elif c == "?":
            out += "[^/]"
        elif c == "[":
            j = pattern.find("]", i)
            if j < 0:
                out += re.escape(c)
            else:
                out += pattern[i : j + 1].replace("[!", "[^")
                i = j
        else:
            out += re.escape(c)
        i += 1
    return re.compile(out + r"\Z")


def read_dockerignore(path: Path) -> list[tuple[bool, re.Pattern, str]]:
    if not path.exists():
        return []
    rules = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        neg = line.startswith("!")
        pat = os.path.normpath(line[1:] if neg else line).lstrip("/")
        rules.append((neg, _glob_regex(pat), line))
    return rules


def dockerignore_rule(rel: str, rules) -> str | None:
    """The rule that excludes repo path `rel` (Docker: a match of the path or a parent), or None."""
    parts = PurePosixPath(rel).parts
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    hit = None
    for neg, rx, text in rules:
        if any(rx.match(c) for c in candidates):
            hit = None if neg else text
    return hit
