#!/usr/bin/env python3
"""Self-tests of scripts/check_docs.py:  python3 scripts/check_docs_test.py

The repository's own pages must pass; then each test copies what the checker reads (README.md,
docs/, src/, sql/) into a temporary directory, breaks one thing (a link, an anchor, the
reference) and checks that exactly that fails.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.dont_write_bytecode = True  # no scripts/__pycache__

import check_docs as cd  # noqa: E402


class Slugs(unittest.TestCase):
    def test_github_slugs(self):
        cases = {
            "The two commands": "the-two-commands",
            "Versions, upgrades, dump and restore": "versions-upgrades-dump-and-restore",
            "`embed.stat_models` (view)": "embedstat_models-view",
            "Real sizes (`bench/real_size.sh`)": "real-sizes-benchreal_sizesh",
            "Performance (2-core x86_64, all-MiniLM-L6-v2)": "performance-2-core-x86_64-all-minilm-l6-v2",
            "`embed.register_model(name text, source text, options jsonb DEFAULT '{}') RETURNS jsonb`":
                "embedregister_modelname-text-source-text-options-jsonb-default--returns-jsonb",
            "**Bold** and [a link](x.md)": "bold-and-a-link",
        }
        for heading, slug in cases.items():
            self.assertEqual(cd.slugify(heading), slug, heading)

    def test_repeated_headings_and_code(self):
        text = "# A\n\n## A\n\n```sh\n# not a heading\n```\n\n### A\n"
        self.assertEqual([s for _, _, s in cd.heading_lines(text)], ["a", "a-1", "a-2"])

    def test_links_outside_code_only(self):
        text = "[x](a.md)\n`[y](b.md)`\n```\n[z](c.md)\n```\n[multi\nline](d.md#e) ![img](f.svg)\n"
        self.assertEqual(cd.links(text), [(1, "a.md"), (7, "d.md#e"), (7, "f.svg")])


class RealFiles(unittest.TestCase):
    def test_repository_passes(self):
        errors, summary = cd.run(REPO)
        self.assertEqual(errors, [], "check_docs.py fails on the repository's own pages")
        self.assertRegex(summary, r"\d+ relative links in \d+ pages resolve")

    def test_cli_exit_code(self):
        p = subprocess.run([sys.executable, str(HERE / "check_docs.py")], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_finds_the_surface(self):
        objs = {(s, n) for s, n, _ in cd.extension_objects(REPO)}
        for o in [("", "embed"), ("", "rerank"), ("", "classify_labels"), ("embed", "register_model"),
                  ("embed", "backfill"), ("embed", "vectorize"), ("embed", "stat_models"), ("embed", "maxsim")]:
            self.assertIn(o, objs)
        self.assertIn(("embed", "_vectorize_step"), objs)  # found, then skipped as internal
        self.assertTrue({"model_dir", "threads", "max_batch_tokens"} <= cd.settings(REPO))

    def test_every_released_function_is_still_found(self):
        """The sources' parser finds at least what the newest released install script creates."""
        released = max((REPO / "sql" / "released").glob("pg_embed--*.sql"),
                       key=lambda p: tuple(int(x) for x in p.stem.split("--")[1].split(".")))
        rel = {("" if s in ("", "public") else s, n) for s, n, _ in cd.sql_objects(released.read_text())}
        now = {(s, n) for s, n, _ in cd.extension_objects(REPO)}
        self.assertEqual(rel - now, set(), f"in {released.name} but not found in src/ and the SQL files it names")


class Mutations(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="check_docs_test.")
        self.root = Path(self.tmp.name)
        shutil.copy2(REPO / "README.md", self.root / "README.md")
        for d in ("docs", "src", "sql"):
            shutil.copytree(REPO / d, self.root / d, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.svg"))
        # The pages link into the rest of the repository (scripts, tests, bench, docker, ...):
        # link those paths, files and folders alike, so that only what a test breaks is missing.
        for entry in REPO.iterdir():
            if not (self.root / entry.name).exists() and entry.name not in (".git", "target"):
                (self.root / entry.name).symlink_to(entry)
        for svg in (REPO / "docs").rglob("*.svg"):
            (self.root / svg.relative_to(REPO)).symlink_to(svg)

    def tearDown(self):
        self.tmp.cleanup()

    def edit(self, rel: str, old: str, new: str, count: int | None = 1) -> None:
        p = self.root / rel
        text = p.read_text()
        if count is not None:
            self.assertEqual(text.count(old), count, f"{old!r} should occur {count} time(s) in {rel}")
        self.assertIn(old, text)
        p.write_text(text.replace(old, new))

    def errors(self) -> list[str]:
        return cd.run(self.root)[0]

    def assertOnly(self, *needles: str) -> None:
        errs = self.errors()
        self.assertEqual(len(errs), len(needles), "\n".join(errs))
        for n in needles:
            self.assertTrue(any(n in e for e in errs), f"no failure mentions {n!r}:\n" + "\n".join(errs))

    def test_copy_passes(self):
        self.assertEqual(self.errors(), [])

    def test_broken_file_link(self):
        self.edit("docs/guide.md", "[SQL reference](sql-reference.md)", "[SQL reference](sql-refrence.md)")
        self.assertOnly("link 'sql-refrence.md': no such file")
        self.assertTrue(self.errors()[0].startswith("docs/guide.md:"))

    def test_broken_anchor_in_another_page(self):
        self.edit("README.md", "(docs/operations.md#scaling-out)", "(docs/operations.md#scaling-up)", count=None)
        errs = self.errors()
        self.assertTrue(errs and all("has no heading with the anchor #scaling-up" in e for e in errs), errs)

    def test_broken_anchor_in_the_same_page(self):
        self.edit("docs/performance.md", "[end of the page](#how-to-rerun)", "[end of the page](#how-to-run)")
        self.assertOnly("docs/performance.md has no heading with the anchor #how-to-run")

    def test_renamed_heading_breaks_its_links(self):
        self.edit("docs/models.md", "### Compatibility matrix", "### Compatibility table")
        errs = self.errors()
        self.assertTrue(errs and all("#compatibility-matrix" in e for e in errs), errs)

    def test_missing_image(self):
        (self.root / "docs" / "charts" / "memory.svg").unlink()
        self.assertOnly("link 'charts/memory.svg': no such file")

    def test_link_out_of_the_repository(self):
        self.edit("docs/guide.md", "[Models](models.md)", "[Models](../../models.md)")
        self.assertOnly("points outside the repository")

    def test_code_is_not_checked(self):
        p = self.root / "docs" / "guide.md"
        p.write_text(p.read_text() + "\n```sql\nSELECT '[x](nowhere.md)';\n```\nand `[y](nowhere.md)`\n")
        self.assertEqual(self.errors(), [])

    def test_undocumented_function(self):
        # embed.cache_cleanup removed from the reference (its heading, the contents and mentions)
        self.edit("docs/sql-reference.md", "embed.cache_cleanup", "embed.cache_cleaner", count=None)
        self.edit("docs/sql-reference.md", "#embedcache_cleanup-", "#embedcache_cleaner-", count=None)
        self.assertOnly("the function embed.cache_cleanup is not documented")

    def test_new_pg_extern_without_documentation(self):
        p = self.root / "src" / "sql.rs"
        p.write_text(p.read_text() + '\n#[pg_extern(immutable, strict, parallel_safe, name = "embed_audio")]\n'
                     'fn embed_audio_x(model: &str, audio: &[u8]) -> Vec<f32> {\n    vec![]\n}\n'
                     '\n#[pg_extern]\nfn _internal_helper() -> i32 {\n    0\n}\n')
        self.assertOnly("the function embed_audio(...) is not documented")

    def test_new_schema_function_without_documentation(self):
        p = self.root / "src" / "sql.rs"
        text = p.read_text()
        anchor = "#[pg_schema]\nmod embed {\n"
        self.assertIn(anchor, text)
        p.write_text(text.replace(anchor, anchor + "    #[pg_extern(volatile)]\n    fn reload_all() -> i32 {\n"
                                                   "        0\n    }\n\n", 1))
        self.assertOnly("the function embed.reload_all is not documented")

    def test_new_sql_procedure_without_documentation(self):
        p = self.root / "sql" / "workflow.sql"
        p.write_text(p.read_text() + "\nCREATE PROCEDURE embed.reembed(tbl regclass)\nLANGUAGE sql AS $$ SELECT 1 $$;\n")
        self.assertOnly("the function embed.reembed is not documented")

    def test_undocumented_setting(self):
        p = self.root / "src" / "guc.rs"
        p.write_text(p.read_text() + '\n// GucRegistry::define_int_guc(c"pg_embed.max_inputs", ...)\nconst X: &str = "pg_embed.max_inputs";\n')
        self.assertOnly("the setting pg_embed.max_inputs is not documented")

    def test_sources_gone(self):
        shutil.rmtree(self.root / "sql")
        errs = self.errors()
        self.assertTrue(any("has the extension's source moved?" in e for e in errs), errs)


if __name__ == "__main__":
    unittest.main(verbosity=1)
