#!/usr/bin/env python3
"""Self-tests of scripts/check_docker.py:  python3 scripts/check_docker_test.py

The real files must pass; then each test copies the files the checker reads into a
temporary directory, breaks one thing and checks that exactly the expected checks fail.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.dont_write_bytecode = True  # no scripts/__pycache__

import check_docker as cd  # noqa: E402

# What the checker reads (and the Dockerfile copies).
COPY_FILES = [
    "Cargo.toml", "Cargo.lock", "pg_embed.control", "build.rs", ".dockerignore", "bench/pipeline.rs", "bench/matmul.rs",
    "bench/images.rs", "bench/peak.rs", "bench/long.rs", "bench/maxsim.rs", "bench/rerank.rs", "bench/multivector.rs",
    "crates/pg_embed_core/Cargo.toml",
]
COPY_DIRS = ["src", "sql", "docker", "crates/pg_embed_core/src"]


def failed(rep: cd.Report) -> set[str]:
    return {r.check for r in rep.failed}


class RealFiles(unittest.TestCase):
    def test_real_files_pass(self):
        rep = cd.run_checks(REPO)
        self.assertEqual([r.line() for r in rep.failed], [], "check_docker.py fails on the repo's own files")
        names = {r.check for r in rep.results}
        for check in cd.CHECKS.split("\n"):
            if check and not check.startswith(" "):
                self.assertIn(check.split()[0], names)

    def test_cli_exit_code(self):
        p = subprocess.run([sys.executable, str(HERE / "check_docker.py")], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertRegex(p.stdout, r"(?m)^ok: dockerfile\.pgrx-version: ")
        self.assertRegex(p.stdout, r"(?m)^(ok|skipped): hadolint: ")

    def test_yaml_subset_matches_pyyaml(self):
        try:
            import yaml
        except ImportError:
            self.skipTest("PyYAML not importable")
        text = (REPO / cd.COMPOSE).read_text()
        self.assertEqual(cd.parse_yaml_subset(text), yaml.safe_load(text))


class Mutations(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="check_docker_test.")
        self.root = Path(self.tmp.name)
        for f in COPY_FILES:
            (self.root / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, self.root / f)
        for d in COPY_DIRS:
            shutil.copytree(REPO / d, self.root / d, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))

    def tearDown(self):
        self.tmp.cleanup()

    def edit(self, rel: str, old: str, new: str) -> None:
        p = self.root / rel
        text = p.read_text()
        self.assertEqual(text.count(old), 1, f"{old!r} should occur once in {rel}")
        p.write_text(text.replace(old, new))

    def run_checks(self, **kw) -> cd.Report:
        kw.setdefault("find_hadolint", False)
        return cd.run_checks(self.root, **kw)

    def assertFails(self, expected: set[str], contains: str | None = None, **kw) -> cd.Report:
        rep = self.run_checks(**kw)
        self.assertEqual(failed(rep), expected, "\n".join(r.line() for r in rep.failed))
        if contains:
            self.assertIn(contains, "\n".join(r.line() for r in rep.failed))
        return rep

    # -- baseline ----------------------------------------------------------------------------
    def test_copy_passes(self):
        self.assertFails(set())

    # -- Dockerfile ----------------------------------------------------------------------------
    def test_pgrx_version_in_dockerfile(self):
        self.edit(cd.DOCKERFILE, "ARG PGRX_VERSION=0.18.1", "ARG PGRX_VERSION=0.18.0")
        self.assertFails({"dockerfile.pgrx-version"}, "installs cargo-pgrx 0.18.0, Cargo.toml has pgrx =0.18.1")

    def test_pgrx_version_in_cargo_toml(self):
        self.edit("Cargo.toml", 'pgrx = "=0.18.1"', 'pgrx = "=0.18.2"')
        self.assertFails({"dockerfile.pgrx-version"}, "Cargo.toml has pgrx =0.18.2")

    def test_pgrx_unpinned_install(self):
        self.edit(cd.DOCKERFILE, 'cargo install cargo-pgrx --version "${PGRX_VERSION}" --locked', "cargo install cargo-pgrx --locked")
        self.assertFails({"dockerfile.pgrx-version"}, "(unpinned)")

    def test_rust_version_differs(self):
        self.edit(cd.DOCKERFILE, "ARG RUST_VERSION=1.95.0", "ARG RUST_VERSION=1.94.1")
        self.assertFails({"dockerfile.rust-version"}, "'1.94.1' does not match Cargo.toml rust-version 1.95")

    def test_rust_version_unpinned(self):
        self.edit(cd.DOCKERFILE, "ARG RUST_VERSION=1.95.0", "ARG RUST_VERSION=stable")
        self.assertFails({"dockerfile.rust-version"}, "'stable'")

    def test_rust_version_in_cargo_toml(self):
        self.edit("Cargo.toml", 'rust-version = "1.95"', 'rust-version = "1.96"')
        self.assertFails({"dockerfile.rust-version"}, "want 1.96.x")

    def test_copy_source_missing(self):
        self.edit(cd.DOCKERFILE, "COPY sql ./sql\n", "COPY sql ./sql\nCOPY LICENSE ./\n")
        self.assertFails({"dockerfile.copy-sources"}, "COPY source 'LICENSE' does not exist")

    def test_example_file_deleted(self):
        (self.root / "bench/matmul.rs").unlink()
        self.assertFails({"dockerfile.copy-sources", "dockerfile.crate-paths"}, "bench/matmul.rs ([[example]] bench_matmul of crates/pg_embed_core) does not exist")

    def test_workspace_member_not_copied(self):
        self.edit(cd.DOCKERFILE, "COPY crates ./crates\n", "")
        self.assertFails({"dockerfile.crate-paths"}, "crates/pg_embed_core/Cargo.toml (the manifest of crates/pg_embed_core) is not copied")

    def test_examples_not_copied(self):
        self.edit(cd.DOCKERFILE, "COPY bench/pipeline.rs bench/matmul.rs bench/images.rs bench/peak.rs bench/long.rs bench/maxsim.rs bench/rerank.rs bench/multivector.rs ./bench/\n", "")
        self.assertFails({"dockerfile.crate-paths"}, "bench/pipeline.rs ([[example]] bench_pipeline of crates/pg_embed_core) is not copied")

    def test_sql_not_copied(self):
        self.edit(cd.DOCKERFILE, "COPY sql ./sql\n", "")
        self.assertFails({"dockerfile.crate-paths"}, "sql/catalog.sql (extension_sql_file! in src/lib.rs) is not copied")

    def test_sql_copied_to_wrong_place(self):
        self.edit(cd.DOCKERFILE, "COPY sql ./sql\n", "COPY sql ./\n")
        self.assertFails({"dockerfile.crate-paths"}, "sql/catalog.sql (extension_sql_file! in src/lib.rs) is copied to /src/catalog.sql, cargo expects it at /src/sql/catalog.sql")

    def test_new_extension_sql_file_not_in_repo(self):
        lib = self.root / "src/lib.rs"
        lib.write_text(lib.read_text() + '\npgrx::extension_sql_file!("../sql/not_there.sql", name = "x");\n')
        self.assertFails({"dockerfile.crate-paths"}, "sql/not_there.sql (extension_sql_file! in src/lib.rs) does not exist")

    def test_new_example_not_copied(self):
        (self.root / "bench/extra.rs").write_text("fn main() {}\n")
        with open(self.root / "Cargo.toml", "a") as f:
            f.write('\n[[example]]\nname = "extra"\npath = "bench/extra.rs"\n')
        self.assertFails({"dockerfile.crate-paths"}, "bench/extra.rs ([[example]] extra) is not copied")

    def test_dockerignore_excludes_sql(self):
        with open(self.root / ".dockerignore", "a") as f:
            f.write("sql\n")
        self.assertFails({"dockerfile.dockerignore"}, "sql/catalog.sql is excluded from the build context by .dockerignore rule 'sql'")

    def test_dockerignore_negation(self):
        with open(self.root / ".dockerignore", "a") as f:
            f.write("bench/*\n!bench/*.rs\n")
        self.assertFails(set())

    def test_final_from_not_postgres_18(self):
        self.edit(cd.DOCKERFILE, "# ---- final: postgres + pgvector + the packaged extension -------------------------------------\nFROM postgres:${PG_MAJOR}-bookworm\n",
                  "FROM debian:bookworm-slim\n")
        self.assertFails({"dockerfile.from", "dockerfile.package", "dockerfile.pgvector"}, "final stage is FROM 'debian:bookworm-slim', expected postgres:18*")

    def test_pg_major_17(self):
        self.edit(cd.DOCKERFILE, "ARG PG_MAJOR=18", "ARG PG_MAJOR=17")
        self.assertFails({"dockerfile.from"}, "expected postgres:18*")

    def test_build_from_differs(self):
        self.edit(cd.DOCKERFILE, "FROM postgres:${PG_MAJOR}-bookworm AS build", "FROM postgres:${PG_MAJOR}-trixie AS build")
        self.assertFails({"dockerfile.from"}, "build stage FROM 'postgres:18-trixie' differs")

    def test_toolchain_copied_into_final(self):
        self.edit(cd.DOCKERFILE, "COPY --from=build /out/usr/ /usr/\n", "COPY --from=build /out/usr/ /usr/\nCOPY --from=build /usr/local/cargo /usr/local/cargo\n")
        self.assertFails({"dockerfile.no-toolchain", "dockerfile.package"}, "outside the package dir /out")

    def test_rustup_in_final(self):
        self.edit(cd.DOCKERFILE, 'CMD ["postgres"', 'RUN curl -sSf https://sh.rustup.rs | sh -s -- -y\nCMD ["postgres"')
        self.assertFails({"dockerfile.no-toolchain"}, "mentions 'rustup'")

    def test_single_stage(self):
        text = (self.root / cd.DOCKERFILE).read_text()
        start = text.index("# ---- final:")
        end = text.index("COPY --from=build")
        (self.root / cd.DOCKERFILE).write_text(text[:start] + text[end:].replace("COPY --from=build /out/usr/ /usr/\n", ""))
        self.assertFails({"dockerfile.parse"}, "no separate build stage")

    def test_package_without_features(self):
        self.edit(cd.DOCKERFILE, '--no-default-features --features "pg${PG_MAJOR}" ', "")
        self.assertFails({"dockerfile.package"}, "without --no-default-features")

    def test_package_unknown_feature(self):
        self.edit(cd.DOCKERFILE, '--features "pg${PG_MAJOR}"', '--features "pg${PG_MAJOR},onnx"')
        self.assertFails({"dockerfile.package"}, "feature 'onnx' is not defined in Cargo.toml")

    def test_package_without_out_dir(self):
        self.edit(cd.DOCKERFILE, " --out-dir /out", "")
        self.assertFails({"dockerfile.package"}, "without --out-dir")

    def test_no_pgvector(self):
        self.edit(cd.DOCKERFILE, '"postgresql-${PG_MAJOR}-pgvector${PGVECTOR_VERSION:+=${PGVECTOR_VERSION}}"', "less")
        self.assertFails({"dockerfile.pgvector"}, "apt-get install postgresql-18-pgvector")

    def test_pgvector_pinned_is_fine(self):
        self.edit(cd.DOCKERFILE, "ARG PGVECTOR_VERSION=\n", "ARG PGVECTOR_VERSION=0.8.1-2.pgdg12+1\n")
        self.assertFails(set())

    def test_no_pipefail(self):
        text = (self.root / cd.DOCKERFILE).read_text()
        (self.root / cd.DOCKERFILE).write_text(text.replace('SHELL ["/bin/bash", "-euo", "pipefail", "-c"]\n', ""))
        self.assertFails({"dockerfile.pipefail"}, "RUN with a pipe but no pipefail")

    def test_cmd_without_model_dir(self):
        self.edit(cd.DOCKERFILE, 'CMD ["postgres", "-c", "pg_embed.model_dir=/models"]', 'CMD ["postgres"]')
        self.assertFails({"dockerfile.cmd"}, "does not set -c pg_embed.model_dir=/models")

    def test_cmd_other_model_dir(self):
        self.edit(cd.DOCKERFILE, '"pg_embed.model_dir=/models"', '"pg_embed.model_dir=/data/models"')
        self.assertFails({"dockerfile.cmd"})

    def test_init_sql_not_copied(self):
        self.edit(cd.DOCKERFILE, "COPY docker/init.sql /docker-entrypoint-initdb.d/10-pg_embed.sql\n", "")
        self.assertFails({"dockerfile.init-sql"}, "does not COPY docker/init.sql")

    # -- init.sql --------------------------------------------------------------------------
    def test_init_sql_without_vector(self):
        self.edit(cd.INIT_SQL, "CREATE EXTENSION IF NOT EXISTS vector;\n", "-- CREATE EXTENSION vector;\n")
        self.assertFails({"init-sql.extensions"}, "does not CREATE EXTENSION vector")

    def test_init_sql_without_pg_embed(self):
        self.edit(cd.INIT_SQL, "CREATE EXTENSION IF NOT EXISTS pg_embed;", "SELECT 1;")
        self.assertFails({"init-sql.extensions"}, "does not CREATE EXTENSION pg_embed")

    # -- compose.yaml ----------------------------------------------------------------------
    def test_compose_missing_dockerfile(self):
        self.edit(cd.COMPOSE, "dockerfile: docker/Dockerfile", "dockerfile: docker/Dockerfile.pg18")
        self.assertFails({"compose.build"}, "does not exist")

    def test_compose_wrong_context(self):
        self.edit(cd.COMPOSE, "context: ..", "context: .")
        self.assertFails({"compose.build"}, "is not the repo root")

    def test_compose_no_models_mount(self):
        self.edit(cd.COMPOSE, "      - ../models:/models:ro\n", "")
        self.assertFails({"compose.models"}, "nothing is mounted at /models")

    def test_compose_models_writable(self):
        self.edit(cd.COMPOSE, "../models:/models:ro", "../models:/models")
        self.assertFails({"compose.models"}, "not mounted read-only")

    def test_compose_models_long_syntax(self):
        self.edit(cd.COMPOSE, "      - ../models:/models:ro\n",
                  "      - type: bind\n        source: ../models\n        target: /models\n        read_only: true\n")
        self.assertFails(set())

    def test_compose_old_pgdata_path(self):
        self.edit(cd.COMPOSE, "- pgdata:/var/lib/postgresql\n", "- pgdata:/var/lib/postgresql/data\n")
        self.assertFails({"compose.data-volume"}, "refuses a mount at /var/lib/postgresql/data")

    def test_compose_data_bind_mount(self):
        self.edit(cd.COMPOSE, "- pgdata:/var/lib/postgresql\n", "- ./pgdata:/var/lib/postgresql\n")
        self.assertFails({"compose.data-volume"}, "not a named volume")

    def test_compose_fixed_password(self):
        self.edit(cd.COMPOSE, "POSTGRES_PASSWORD: ${POSTGRES_PASSWORD:-pg_embed}", "POSTGRES_PASSWORD: secret")
        self.assertFails({"compose.password"}, "from the environment, with a default")

    def test_compose_no_port(self):
        self.edit(cd.COMPOSE, '"127.0.0.1:5432:5432"', '"127.0.0.1:5433:5433"')
        self.assertFails({"compose.port"})

    def test_compose_no_pg_isready(self):
        self.edit(cd.COMPOSE, "pg_isready -h 127.0.0.1", "psql -h 127.0.0.1")
        self.assertFails({"compose.healthcheck"}, "does not run pg_isready")

    def test_compose_outside_subset(self):
        self.edit(cd.COMPOSE, "    image: pg_embed:latest\n", "    image: pg_embed:latest\n    labels: {a: b}\n")
        self.assertFails({"compose.parse"}, "not JSON-compatible")

    def test_compose_anchor_refused(self):
        self.edit(cd.COMPOSE, "      interval: 5s\n", "      interval: &i 5s\n")
        self.assertFails({"compose.parse"}, "unsupported YAML")

    # -- hadolint --------------------------------------------------------------------------
    def fake_hadolint(self, rc: int) -> str:
        p = self.root / "hadolint"
        p.write_text(f"#!/bin/sh\necho 'DL9999 fake finding'\nexit {rc}\n")
        p.chmod(p.stat().st_mode | stat.S_IXUSR)
        return str(p)

    def test_hadolint_skipped(self):
        rep = self.run_checks(hadolint=None, find_hadolint=False)
        self.assertIn("skipped: hadolint: skipped (hadolint not on PATH)", [r.line() for r in rep.results])

    def test_hadolint_fails(self):
        self.assertFails({"hadolint"}, "DL9999 fake finding", hadolint=self.fake_hadolint(1))

    def test_hadolint_passes(self):
        rep = self.assertFails(set(), hadolint=self.fake_hadolint(0))
        self.assertIn("ok", [r.status for r in rep.results if r.check == "hadolint"])

    # -- CLI -------------------------------------------------------------------------------
    def test_cli_fails_with_message(self):
        self.edit(cd.DOCKERFILE, "ARG PGRX_VERSION=0.18.1", "ARG PGRX_VERSION=0.17.0")
        env = dict(os.environ, PATH=os.defpath)  # no hadolint
        p = subprocess.run([sys.executable, str(HERE / "check_docker.py"), "--root", str(self.root)], capture_output=True, text=True, env=env)
        self.assertEqual(p.returncode, 1)
        self.assertIn("FAIL: dockerfile.pgrx-version: Dockerfile installs cargo-pgrx 0.17.0, Cargo.toml has pgrx =0.18.1", p.stdout)
        self.assertIn("check_docker: FAILED: 1 of", p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
