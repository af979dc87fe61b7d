#!/usr/bin/env python3
"""Static checks of docker/ against the repo: no Docker engine needed.

    python3 scripts/check_docker.py [--root REPO]

Reads docker/Dockerfile, docker/compose.yaml, docker/init.sql, .dockerignore, Cargo.toml
and src/**/*.rs, and checks that the image would build what `cargo pgrx package` needs and
run it as documented (see CHECKS below for the list). Prints one line per check
("ok: ...", "FAIL: ...", "skipped: ...") and exits 1 if any check failed.

Python 3.11+ standard library only. compose.yaml is read with a small parser for the
block-style YAML subset it uses; when PyYAML happens to be importable, its reading of the
file must be identical (otherwise the file has outgrown the subset parser). hadolint is
run when it is on PATH. The Dockerfile and .dockerignore reader is check_docker_dockerfile.py,
the YAML subset parser check_docker_yaml.py (both beside this file).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

try:
    import tomllib
except ImportError:  # pragma: no cover - Python < 3.11
    sys.exit("check_docker.py: Python 3.11+ is needed (tomllib)")

sys.dont_write_bytecode = True  # its parts are imported from scripts/: no __pycache__ there
from check_docker_dockerfile import (Copy, DockerfileError, dockerignore_rule,
    find_build_stage, option_value, parse_dockerfile, pg_major_of, read_dockerignore,
    shell_tokens, simple_commands, stage_copies)  # noqa: E402
from check_docker_yaml import YamlSubsetError, parse_yaml_subset  # noqa: E402

DOCKERFILE = "docker/Dockerfile"
COMPOSE = "docker/compose.yaml"
INIT_SQL = "docker/init.sql"
MODELS_MOUNT = "/models"
# postgres:18 moved PGDATA to /var/lib/postgresql/18/docker and its VOLUME to
# /var/lib/postgresql; its entrypoint refuses data in a mount at the old .../data path.
PG18_VOLUME = "/var/lib/postgresql"
PG_OLD_DATA = "/var/lib/postgresql/data"
FINAL_BASE_RE = re.compile(r"^(?:(?:docker\.io/)?library/)?postgres:18(?:[-.@:].*)?$")
TOOLCHAIN_RE = re.compile(r"(?<![\w-])(rustup|cargo|rustc)(?![\w-])|\.cargo\b|/rustup\b")
# hadolint: DL3008 (pin apt package versions) is deliberately not followed: the PGDG repo's
# index carries only current versions, so a pin breaks the build at the next minor release.
HADOLINT_ARGS = ["--failure-threshold", "warning", "--ignore", "DL3008"]

CHECKS = """\
dockerfile.parse          the Dockerfile parses and has a build stage and a separate final stage
dockerfile.from           the final stage is FROM postgres:18*; the build stage FROM the same image
dockerfile.copy-sources   every COPY source (not --from) exists in the repo (the build context)
dockerfile.dockerignore   .dockerignore excludes none of the COPY sources and crate paths
dockerfile.crate-paths    what cargo needs (Cargo.toml, Cargo.lock, the .control file, lib, build
                          script, [[example]]/[[bin]]/[[test]]/[[bench]] paths, extension_sql_file!
                          and include_*! paths in src/) is copied into the build stage, at the
                          same place relative to Cargo.toml as in the repo
dockerfile.pgrx-version   `cargo install cargo-pgrx --version X` == Cargo.toml's `pgrx = "=X"`
                          (and pgrx-tests)
dockerfile.rust-version   the Rust toolchain installed == Cargo.toml's rust-version (1.95 -> 1.95.x)
dockerfile.package        `cargo pgrx package` with --pg-config of that major, --no-default-features
                          --features pgN (a feature of Cargo.toml), --out-dir D; the final stage
                          copies from D only
dockerfile.no-toolchain   the final stage has no rustup/cargo/rustc (installs, copies, ENV)
dockerfile.pgvector       the final stage installs postgresql-N-pgvector with apt
dockerfile.pipefail       a RUN with a pipe runs under `pipefail`
dockerfile.cmd            the final CMD runs postgres with -c pg_embed.model_dir=/models
dockerfile.init-sql       docker/init.sql is copied into /docker-entrypoint-initdb.d/
init-sql.extensions       docker/init.sql creates the extensions vector and pg_embed
compose.parse             compose.yaml parses (and PyYAML, if importable, reads it the same)
compose.build             services.db.build context/dockerfile point at the repo root and an
                          existing Dockerfile (the one checked here)
compose.password          POSTGRES_PASSWORD comes from the environment, with a default
compose.port              container port 5432 is published
compose.data-volume       a named volume at /var/lib/postgresql (postgres:18), none at .../data
compose.models            <repo>/models is mounted read-only at /models
compose.healthcheck       the healthcheck runs pg_isready
hadolint                  hadolint passes (skipped when not on PATH)
"""


# ---- results ------------------------------------------------------------------------------


@dataclass
class Result:
    status: str  # "ok" | "FAIL" | "skipped"
    check: str
    message: str

    def line(self) -> str:
        return f"{self.status}: {self.check}: {self.message}"


class Report:
    def __init__(self) -> None:
        self.results: list[Result] = []

    def ok(self, check: str, message: str) -> None:
        self.results.append(Result("ok", check, message))

    def fail(self, check: str, message: str) -> None:
        self.results.append(Result("FAIL", check, message))

    def skip(self, check: str, message: str) -> None:
        self.results.append(Result("skipped", check, message))

    def check(self, check: str, problems: list[str], ok_message: str) -> None:
        """One line for `check`: ok, or FAIL with every problem found."""
        if problems:
            self.fail(check, "; ".join(problems))
        else:
            self.ok(check, ok_message)

    @property
    def failed(self) -> list[Result]:
        return [r for r in self.results if r.status == "FAIL"]


# ---- the checks ---------------------------------------------------------------------------


def _rel(root: Path, p: Path) -> str:
    return p.resolve().relative_to(root.resolve()).as_posix()


def crate_paths(root: Path, cargo: dict) -> tuple[dict[str, str], list[str]]:
    """Repo paths cargo needs to build the package -> why; and problems found on the way."""
    need: dict[str, str] = {
        "Cargo.toml": "the manifest",
        "Cargo.lock": "the lock file (reproducible build)",
    }
    problems: list[str] = []
    name = cargo.get("package", {}).get("name", "")
    need[f"{name}.control"] = "pgrx's control file"
    lib = cargo.get("lib", {})
    need[lib.get("path", "src/lib.rs")] = "[lib]"
    build = cargo.get("package", {}).get("build")
    if isinstance(build, str):
        need[build] = "package.build"
    elif build is None and (root / "build.rs").exists():
        need["build.rs"] = "build script"
    defaults = {"bin": "src/bin/{}.rs", "example": "examples/{}.rs", "test": "tests/{}.rs", "bench": "benches/{}.rs"}
    for kind, default in defaults.items():
        for target in cargo.get(kind, []):
            path = target.get("path") or default.format(target.get("name", "?"))
            need[path] = f"[[{kind}]] {target.get('name', '?')}"
    # Compile-time includes of the library's sources.
    inc_re = re.compile(r'\b(extension_sql_file|include_str|include_bytes|include)!\s*\(\s*"([^"]+)"')
    for rs in sorted((root / "src").rglob("*.rs")):
        for m in inc_re.finditer(rs.read_text(errors="replace")):
            target = (rs.parent / m.group(2)).resolve()
            try:
                rel = _rel(root, target)
            except ValueError:
                problems.append(f"{_rel(root, rs)}: {m.group(1)}!(\"{m.group(2)}\") is outside the repo")
                continue
            need.setdefault(rel, f"{m.group(1)}! in {_rel(root, rs)}")
    # Workspace members and path dependencies: their manifests, libraries and targets,
    # relative to the repo root.
    members = list(cargo.get("workspace", {}).get("members", []))
    for table in ("dependencies", "dev-dependencies", "build-dependencies"):
        for dep in cargo.get(table, {}).values():
            if isinstance(dep, dict) and isinstance(dep.get("path"), str):
                members.append(dep["path"])
    for member in sorted({os.path.normpath(m) for m in members} - {"."}):
        manifest = root / member / "Cargo.toml"
        if not manifest.exists():
            problems.append(f"workspace member or path dependency {member!r} has no Cargo.toml")
            continue
        sub = tomllib.loads(manifest.read_text())
        need[f"{member}/Cargo.toml"] = f"the manifest of {member}"
        need[f"{member}/{sub.get('lib', {}).get('path', 'src/lib.rs')}"] = f"[lib] of {member}"
        need[f"{member}/src"] = f"the sources of {member}"
        for kind, default in defaults.items():
            for target in sub.get(kind, []):
                path = target.get("path") or default.format(target.get("name", "?"))
                need[os.path.normpath(f"{member}/{path}")] = f"[[{kind}]] {target.get('name', '?')} of {member}"
    return {os.path.normpath(k): v for k, v in need.items()}, problems


def container_path(rel: str, copies: list[Copy], root: Path) -> str | None:
    """Where repo path `rel` lands in the stage's filesystem (the last COPY wins)."""
    where = None
    for cp in copies:
        if "from" in cp.flags:
            continue
        srcs: list[str] = []
        for s in cp.sources:
            s = os.path.normpath(s).lstrip("/") or "."
            matched = sorted(_rel(root, p) for p in root.glob(s)) if any(c in s for c in "*?[") else [s]
            srcs.extend(matched)
        dest = PurePosixPath(cp.workdir) / cp.dest
        dest_is_dir = cp.dest.endswith("/") or len(srcs) > 1
        for s in srcs:
            if s == ".":
                where = str(dest / rel)
            elif rel == s or rel.startswith(s + "/"):
                if (root / s).is_dir():
                    where = str(dest / os.path.relpath(rel, s))
                elif dest_is_dir:
                    where = str(dest / PurePosixPath(s).name)
                else:
                    where = str(dest)
    return where


def check_dockerfile(root: Path, rep: Report, cargo: dict) -> None:
    path = root / DOCKERFILE
    try:
        _, stages = parse_dockerfile(path.read_text())
    except (OSError, DockerfileError, ValueError) as e:
        rep.fail("dockerfile.parse", f"{DOCKERFILE}: {e}")
        return
    build = find_build_stage(stages)
    final = stages[-1] if stages else None
    problems = []
    if build is None:
        problems.append("no stage runs `cargo pgrx package`")
    elif build is final:
        problems.append(f"`cargo pgrx package` runs in the final stage ({final.label()}): no separate build stage")
    rep.check("dockerfile.parse", problems, f"{len(stages)} stages; build: {build.label() if build else '-'}; final: {final.label() if final else '-'}")
    if build is None or final is None or build is final:
        return
    major = pg_major_of(final.base) or "?"
    features = cargo.get("features", {})

    # FROM
    problems = []
    if not FINAL_BASE_RE.match(final.base):
        problems.append(f"final stage is FROM {final.base!r}, expected postgres:18*")
    if build.base != final.base:
        problems.append(f"build stage FROM {build.base!r} differs from the final stage's {final.base!r} (headers and server must match)")
    rep.check("dockerfile.from", problems, f"final and build stages FROM {final.base}")

    # COPY sources exist
    all_copies = [(st, cp) for st in stages for cp in stage_copies(st)]
    problems = []
    n_sources = 0
    for st, cp in all_copies:
        if "from" in cp.flags:
            continue
        for s in cp.sources:
            if re.match(r"^[a-z]+://", s):
                continue
            n_sources += 1
            s_clean = os.path.normpath(s).lstrip("/") or "."
            if any(c in s_clean for c in "*?["):
                if not list(root.glob(s_clean)):
                    problems.append(f"line {cp.instr.line}: COPY source {s!r} matches nothing in the repo")
            elif not (root / s_clean).exists():
                problems.append(f"line {cp.instr.line}: COPY source {s!r} does not exist in the repo")
    rep.check("dockerfile.copy-sources", problems, f"all {n_sources} COPY sources exist in the build context")

    # crate paths copied into the build stage, at the right place
    need, problems = crate_paths(root, cargo)
    build_copies = stage_copies(build)
    toml_at = container_path("Cargo.toml", build_copies, root)
    if toml_at is None:
        problems.append("Cargo.toml is not copied into the build stage")
    else:
        crate_root = PurePosixPath(toml_at).parent
        for rel, why in need.items():
            if not (root / rel).exists():
                problems.append(f"{rel} ({why}) does not exist in the repo")
                continue
            at = container_path(rel, build_copies, root)
            want = str(crate_root / rel)
            if at is None:
                problems.append(f"{rel} ({why}) is not copied into the build stage")
            elif at != want:
                problems.append(f"{rel} ({why}) is copied to {at}, cargo expects it at {want}")
    rep.check("dockerfile.crate-paths", problems, f"build stage has {', '.join(sorted(need))}")

    # .dockerignore
    rules = read_dockerignore(root / ".dockerignore")
    problems = []
    for rel in sorted(set(need) | {os.path.normpath(s).lstrip("/") for _, cp in all_copies if "from" not in cp.flags for s in cp.sources}):
        hit = dockerignore_rule(rel, rules)
        if hit:
            problems.append(f"{rel} is excluded from the build context by .dockerignore rule {hit!r}")
    rep.check("dockerfile.dockerignore", problems, f".dockerignore ({len(rules)} rules) keeps every COPY source and crate path")

    build_runs = [(ins, c) for ins in build.instrs if ins.cmd == "RUN" for c in simple_commands(ins.args)]
    build_cmds = [c for _, c in build_runs]

    # pgrx version
    problems = []
    dep = cargo.get("dependencies", {}).get("pgrx")
    dep_v = dep.get("version") if isinstance(dep, dict) else dep
    want = None
    if not isinstance(dep_v, str) or not dep_v.startswith("="):
        problems.append(f"Cargo.toml: pgrx must be pinned exactly (pgrx = \"=X\"), found {dep_v!r}")
    else:
        want = dep_v[1:]
        tdep = cargo.get("dev-dependencies", {}).get("pgrx-tests")
        tdep_v = tdep.get("version") if isinstance(tdep, dict) else tdep
        if tdep_v is not None and tdep_v != dep_v:
            problems.append(f"Cargo.toml: pgrx-tests {tdep_v!r} differs from pgrx {dep_v!r}")
    found = []
    for c in build_cmds:
        if c[:2] == ["cargo", "install"] and any(t == "cargo-pgrx" or t.startswith("cargo-pgrx@") for t in c):
            vs = option_value(c, "--version") + [t.split("@", 1)[1] for t in c if t.startswith("cargo-pgrx@")]
            found.extend([v.lstrip("=") for v in vs] or ["(unpinned)"])
    if not found:
        problems.append("no `cargo install cargo-pgrx --version X` in the build stage")
    for v in found:
        if want and v != want:
            problems.append(f"Dockerfile installs cargo-pgrx {v}, Cargo.toml has pgrx ={want}")
    rep.check("dockerfile.pgrx-version", problems, f"cargo-pgrx {', '.join(found)} == Cargo.toml pgrx ={want}")

    # Rust toolchain
    problems = []
    rv = str(cargo.get("package", {}).get("rust-version", ""))
    toolchains = []
    for c in build_cmds:
        toolchains += option_value(c, "--default-toolchain")
        if c[:1] == ["rustup"]:
            args = [t for t in c[1:] if not t.startswith("-")]
            if args[:2] == ["toolchain", "install"] or args[:1] in (["install"], ["default"]):
                toolchains += args[2:3] if args[0] == "toolchain" else args[1:2]
    if build.vars.get("RUSTUP_TOOLCHAIN"):
        toolchains.append(build.vars["RUSTUP_TOOLCHAIN"])
    m = re.match(r"^(?:docker\.io/)?(?:library/)?rust:(\d+\.\d+(?:\.\d+)?)", build.base)
    if m:
        toolchains.append(m.group(1))
    if not rv:
        problems.append("Cargo.toml has no package.rust-version")
    if not toolchains:
        problems.append("no pinned Rust toolchain in the build stage (rustup --default-toolchain X, rustup toolchain install X or FROM rust:X)")
    for t in toolchains:
        if rv and not (t == rv if rv.count(".") == 2 else re.fullmatch(re.escape(rv) + r"\.\d+", t)):
            problems.append(f"Dockerfile's Rust toolchain {t!r} does not match Cargo.toml rust-version {rv} (want {rv if rv.count('.') == 2 else rv + '.x'})")
    rep.check("dockerfile.rust-version", problems, f"Rust {', '.join(toolchains)} matches Cargo.toml rust-version {rv}")

    # cargo pgrx package
    problems = []
    out_dir = None
    pkg = [(ins, c) for ins, c in build_runs if c[:3] == ["cargo", "pgrx", "package"]]
    for ins, c in pkg:
        pgc = option_value(c, "--pg-config") + option_value(c, "-c")
        if not pgc:
            problems.append("`cargo pgrx package` without --pg-config (it would take the first pg_config on PATH)")
        elif not any(f"/postgresql/{major}/" in p for p in pgc):
            problems.append(f"--pg-config {pgc[0]} is not PostgreSQL {major}'s (the final image's)")
        if "--no-default-features" not in c:
            problems.append("`cargo pgrx package` without --no-default-features (Cargo.toml's default feature picks a PostgreSQL version)")
        feats = [f for v in option_value(c, "--features") + option_value(c, "-F") for f in re.split(r"[ ,]+", v) if f]
        if f"pg{major}" not in feats:
            problems.append(f"`cargo pgrx package` features {feats} lack pg{major}")
        for f in feats:
            if f.split("/")[0] not in features:
                problems.append(f"feature {f!r} is not defined in Cargo.toml")
        outs = option_value(c, "--out-dir")
        if not outs:
            problems.append("`cargo pgrx package` without --out-dir (the final stage needs a known path)")
        else:
            out_dir = PurePosixPath(ins.workdir) / outs[0]
    froms = [cp for cp in stage_copies(final) if "from" in cp.flags]
    for cp in froms:
        src_stage = cp.flags["from"]
        if src_stage not in (build.name, str(build.index)):
            problems.append(f"line {cp.instr.line}: final stage copies from {src_stage!r}, not the build stage")
            continue
        for s in cp.sources:
            if out_dir is not None and not (PurePosixPath(s) == out_dir or PurePosixPath(s).is_relative_to(out_dir)):
                problems.append(f"line {cp.instr.line}: final stage copies {s} from the build stage, outside the package dir {out_dir}")
    if not froms:
        problems.append("the final stage copies nothing from the build stage")
    rep.check("dockerfile.package", problems, f"cargo pgrx package --pg-config (PostgreSQL {major}) --no-default-features --features pg{major} --out-dir {out_dir}; final stage copies from {out_dir} only")

    # no toolchain in the final stage
    problems = []
    for ins in final.instrs:
        if ins.cmd in ("RUN", "COPY", "ADD", "ENV", "ENTRYPOINT", "CMD"):
            m = TOOLCHAIN_RE.search(ins.args)
            if m:
                problems.append(f"line {ins.line}: final stage {ins.cmd} mentions {m.group(0)!r}: {ins.raw[:80]}")
    rep.check("dockerfile.no-toolchain", problems, "final stage has no rustup/cargo/rustc")

    # pgvector
    problems = []
    final_cmds = [c for ins in final.instrs if ins.cmd == "RUN" for c in simple_commands(ins.args)]
    pkgname = f"postgresql-{major}-pgvector"
    if not any(c[:2] == ["apt-get", "install"] and any(t == pkgname or t.startswith(pkgname + "=") for t in c) for c in final_cmds):
        problems.append(f"final stage does not `apt-get install {pkgname}`")
    rep.check("dockerfile.pgvector", problems, f"final stage installs {pkgname} (apt)")

    # pipefail
    problems = []
    for st in stages:
        shell_pipefail = False
        for ins in st.instrs:
            if ins.cmd == "SHELL":
                shell_pipefail = "pipefail" in ins.args
            if ins.cmd == "RUN" and not ins.args.lstrip().startswith("["):
                if "|" in shell_tokens(ins.args) and not shell_pipefail and "pipefail" not in ins.args:
                    problems.append(f"line {ins.line}: RUN with a pipe but no pipefail (SHELL [\"/bin/bash\", \"-o\", \"pipefail\", \"-c\"])")
    rep.check("dockerfile.pipefail", problems, "every RUN with a pipe runs under pipefail")

    # CMD
    problems = []
    cmds = [ins for ins in final.instrs if ins.cmd == "CMD"]
    if not cmds:
        problems.append("final stage has no CMD")
    else:
        raw = cmds[-1].args.strip()
        argv = json.loads(raw) if raw.startswith("[") else shlex.split(raw)
        pairs = {argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-c"} | {a[2:] for a in argv if a.startswith("-c") and len(a) > 2}
        if not argv or argv[0] != "postgres":
            problems.append(f"CMD {argv} does not run postgres (the entrypoint's initdb and init scripts need it)")
        if f"pg_embed.model_dir={MODELS_MOUNT}" not in pairs:
            problems.append(f"CMD {argv} does not set -c pg_embed.model_dir={MODELS_MOUNT}")
    rep.check("dockerfile.cmd", problems, f"CMD {cmds[-1].args.strip() if cmds else ''}")

    # init.sql copied
    problems = []
    copied = [cp for cp in stage_copies(final) if "from" not in cp.flags and os.path.normpath(INIT_SQL) in [os.path.normpath(s) for s in cp.sources]]
    if not copied:
        problems.append(f"final stage does not COPY {INIT_SQL}")
    elif not any(str(PurePosixPath(cp.workdir) / cp.dest).startswith("/docker-entrypoint-initdb.d") for cp in copied):
        problems.append(f"{INIT_SQL} is not copied into /docker-entrypoint-initdb.d/")
    rep.check("dockerfile.init-sql", problems, f"{INIT_SQL} -> /docker-entrypoint-initdb.d/")


def check_init_sql(root: Path, rep: Report) -> None:
    try:
        text = (root / INIT_SQL).read_text()
    except OSError as e:
        rep.fail("init-sql.extensions", str(e))
        return
    text = re.sub(r"--[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    made = [m.group(1).strip('"').lower() for m in re.finditer(r"\bcreate\s+extension\s+(?:if\s+not\s+exists\s+)?(\"[^\"]+\"|\w+)", text, re.I)]
    problems = [f"{INIT_SQL} does not CREATE EXTENSION {e}" for e in ("vector", "pg_embed") if e not in made]
    rep.check("init-sql.extensions", problems, f"{INIT_SQL} creates {', '.join(made)}")


def _mounts(service: dict) -> list[tuple[str | None, str, bool]]:
    """(source, target, read_only) of a service's volumes, short or long syntax."""
    out = []
    for v in service.get("volumes") or []:
        if isinstance(v, dict):
            out.append((v.get("source"), str(v.get("target", "")), bool(v.get("read_only"))))
        else:
            parts = str(v).split(":")
            if len(parts) == 1:
                out.append((None, parts[0], False))
            else:
                mode = parts[2] if len(parts) > 2 else ""
                out.append((parts[0], parts[1], "ro" in mode.split(",")))
    return out


def check_compose(root: Path, rep: Report) -> None:
    path = root / COMPOSE
    try:
        text = path.read_text()
        doc = parse_yaml_subset(text)
    except (OSError, YamlSubsetError) as e:
        rep.fail("compose.parse", f"{COMPOSE}: {e}")
        return
    problems = []
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError:
        how = "stdlib subset parser (PyYAML not importable: no cross-check)"
    else:
        how = "stdlib subset parser, identical to PyYAML's reading"
        try:
            if yaml.safe_load(text) != doc:
                problems.append("PyYAML reads the file differently from the subset parser: keep to block mappings/sequences and JSON-style flow values")
        except yaml.YAMLError as e:
            problems.append(f"PyYAML: {e}")
    services = doc.get("services") if isinstance(doc, dict) else None
    db = services.get("db") if isinstance(services, dict) else None
    if not isinstance(db, dict):
        problems.append("no services.db")
    rep.check("compose.parse", problems, f"{COMPOSE}: {how}; services: {', '.join(services or {})}")
    if not isinstance(db, dict):
        return
    base = path.parent

    # build
    problems = []
    b = db.get("build")
    if isinstance(b, str):
        b = {"context": b}
    if not isinstance(b, dict) or "context" not in b:
        problems.append("services.db.build.context missing")
    else:
        ctx = (base / str(b["context"])).resolve()
        df = (ctx / str(b.get("dockerfile", "Dockerfile"))).resolve()
        if not ctx.is_dir():
            problems.append(f"build context {b['context']!r} ({ctx}) is not a directory")
        elif not (ctx / "Cargo.toml").is_file():
            problems.append(f"build context {b['context']!r} ({ctx}) is not the repo root (no Cargo.toml)")
        elif ctx != root.resolve():
            problems.append(f"build context {ctx} is not the repo root {root.resolve()}")
        if not df.is_file():
            problems.append(f"dockerfile {b.get('dockerfile')!r} ({df}) does not exist")
        elif df != (root / DOCKERFILE).resolve():
            problems.append(f"dockerfile {df} is not {DOCKERFILE} (the one checked here)")
    rep.check("compose.build", problems, f"context {b.get('context') if isinstance(b, dict) else '?'} = repo root, dockerfile {DOCKERFILE}")

    # password
    problems = []
    env = db.get("environment") or {}
    if isinstance(env, list):
        env = dict(str(e).partition("=")[::2] for e in env)
    pw = env.get("POSTGRES_PASSWORD")
    if pw is None:
        problems.append("services.db.environment has no POSTGRES_PASSWORD")
    elif not re.fullmatch(r"\$\{POSTGRES_PASSWORD:?-[^}]+\}", str(pw)):
        problems.append(f"POSTGRES_PASSWORD is {pw!r}: expected ${{POSTGRES_PASSWORD:-default}} (from the environment, with a default)")
    rep.check("compose.password", problems, f"POSTGRES_PASSWORD: {pw}")

    # port
    problems = []
    ports = db.get("ports") or []
    targets = []
    for p in ports:
        if isinstance(p, dict):
            targets.append(str(p.get("target")))
        else:
            targets.append(str(p).split("/")[0].rsplit(":", 1)[-1])
    if "5432" not in targets:
        problems.append(f"container port 5432 is not published (ports: {ports})")
    rep.check("compose.port", problems, f"ports {ports}")

    mounts = _mounts(db)
    named = set((doc.get("volumes") or {}).keys())

    # data volume
    problems = []
    data = [m for m in mounts if m[1].rstrip("/") == PG18_VOLUME]
    if not data:
        problems.append(f"nothing is mounted at {PG18_VOLUME} (postgres:18's VOLUME; PGDATA is {PG18_VOLUME}/18/docker)")
    for src, tgt, _ in data:
        if src not in named:
            problems.append(f"{PG18_VOLUME} is mounted from {src!r}, not a named volume declared under top-level volumes:")
    for src, tgt, _ in mounts:
        if tgt.rstrip("/") == PG_OLD_DATA:
            problems.append(f"{src}:{tgt}: postgres:18's entrypoint refuses a mount at {PG_OLD_DATA}; mount {PG18_VOLUME}")
    rep.check("compose.data-volume", problems, f"named volume {data[0][0] if data else '?'} at {PG18_VOLUME}")

    # models
    problems = []
    models = [m for m in mounts if m[1].rstrip("/") == MODELS_MOUNT]
    if not models:
        problems.append(f"nothing is mounted at {MODELS_MOUNT} (pg_embed.model_dir)")
    for src, tgt, ro in models:
        if src is None or (base / src).resolve() != (root / "models").resolve():
            problems.append(f"{MODELS_MOUNT} is mounted from {src!r}, not the repo's models/ (../models)")
        if not ro:
            problems.append(f"{MODELS_MOUNT} is not mounted read-only (:ro)")
    rep.check("compose.models", problems, f"{models[0][0] if models else '?'}:{MODELS_MOUNT} read-only")

    # healthcheck
    problems = []
    hc = db.get("healthcheck") or {}
    test = hc.get("test") if isinstance(hc, dict) else None
    joined = " ".join(test) if isinstance(test, list) else str(test or "")
    if "pg_isready" not in joined:
        problems.append("services.db.healthcheck.test does not run pg_isready")
    rep.check("compose.healthcheck", problems, f"healthcheck: {joined}")


def check_hadolint(root: Path, rep: Report, hadolint: str | None) -> None:
    if not hadolint:
        rep.skip("hadolint", "skipped (hadolint not on PATH)")
        return
    cmd = [hadolint, *HADOLINT_ARGS, str(root / DOCKERFILE)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        rep.fail("hadolint", f"{' '.join(cmd)}: {e}")
        return
    out = (p.stdout + p.stderr).strip().replace("\n", " | ")
    if p.returncode != 0:
        rep.fail("hadolint", f"{' '.join(cmd)} exited {p.returncode}: {out}")
    else:
        rep.ok("hadolint", f"{' '.join(HADOLINT_ARGS)}: clean")


def run_checks(root: Path, hadolint: str | None = None, find_hadolint: bool = True) -> Report:
    rep = Report()
    root = Path(root)
    try:
        cargo = tomllib.loads((root / "Cargo.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        rep.fail("cargo-toml", f"Cargo.toml: {e}")
        cargo = {}
    check_dockerfile(root, rep, cargo)
    check_init_sql(root, rep)
    check_compose(root, rep)
    if hadolint is None and find_hadolint:
        hadolint = shutil.which("hadolint")
    check_hadolint(root, rep, hadolint)
    return rep


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog="checks:\n" + CHECKS)
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent, help="repo root (default: this script's repo)")
    args = ap.parse_args(argv)
    rep = run_checks(args.root)
    for r in rep.results:
        print(r.line())
    n_ok = sum(r.status == "ok" for r in rep.results)
    n_skip = sum(r.status == "skipped" for r in rep.results)
    if rep.failed:
        print(f"check_docker: FAILED: {len(rep.failed)} of {len(rep.results)} checks failed ({', '.join(r.check for r in rep.failed)})", file=sys.stderr)
        return 1
    print(f"check_docker: {n_ok} ok, {n_skip} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
