"""The documentation's promises: the reference in docs/ says what the code does, it builds with every link
resolved, and the README stays short with a quick start of two commands that CI runs."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest

from tests.helpers.common import REPO

DOCS = REPO / "docs"


def _generate():
    """Return docs/generate.py as a module (docs/ is not a package)."""
    spec = importlib.util.spec_from_file_location("docs_generate", DOCS / "generate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _quick_start(text: str) -> list[str]:
    """Return the non-blank lines of the first code block after a "## Quick start" heading."""
    section = text.split("## Quick start", 1)[1]
    block = re.search(r"```\w*\n(.*?)```", section, re.S).group(1)
    return [ln for ln in block.splitlines() if ln.strip()]


def text_between(page: str, name: str) -> str:
    """Return what stands between a generated part's markers."""
    return page.split(f"<!-- {name}:begin -->")[1].split(f"<!-- {name}:end -->")[0]


def test_generated_parts_of_the_reference_are_current() -> None:
    stale = _generate().stale_pages(write=False)
    assert not stale, f"stale generated docs {[str(p.relative_to(REPO)) for p in stale]}: run python docs/generate.py"


def test_every_generated_part_has_exactly_one_place() -> None:
    gen = _generate()
    pages = {p: p.read_text() for p in sorted(gen.PAGES.rglob("*.md"))}
    for name in gen.BLOCKS:
        found = [p.name for p, text in pages.items() if gen.block_re(name).search(text)]
        assert len(found) == 1, f"generated part {name!r} appears in {found or 'no page'}"
        (page,) = [text for text in pages.values() if gen.block_re(name).search(text)]
        assert text_between(page, name).strip(), f"generated part {name!r} is empty"


def test_a_stale_part_is_noticed_and_rewritten() -> None:
    gen = _generate()
    page = (gen.PAGES / "reference" / "packets.md").read_text()
    body = text_between(page, "schema")
    stale = page.replace(body, "\n| `frame` | Int64 |  | a column that changed since |\n")
    assert stale != page
    assert gen.render(stale, {"schema": gen.packet_schema()}) == page


def test_generated_reference_names_every_command_table_and_cause() -> None:
    from parsers.schema import COLUMNS
    from xlayer.attribution.causes import CAUSES
    from xlayer.metrics import table_names

    pages = _generate().PAGES
    cli = (pages / "reference" / "cli.md").read_text()
    for name in ("ingest", "info", "bundle new", "bundle show", "analyze", "metrics", "report"):
        assert f"## `xlayer {name}`" in cli
    metrics = (pages / "reference" / "metrics.md").read_text()
    assert all(f"#### `{t}`" in metrics for t in table_names())
    packets = (pages / "reference" / "packets.md").read_text()
    assert all(f"| `{c.name}` |" in packets for c in COLUMNS)
    causes = (pages / "guides" / "analyze.md").read_text()
    assert all(f"### `{m.NAME}`" in causes for m in CAUSES)


def test_docs_build_strictly(tmp_path) -> None:
    pytest.importorskip("material", reason="mkdocs-material is not installed (pip install -e '.[docs]')")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(DOCS / "mkdocs.yml"),
                        "-d", str(tmp_path / "site")], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "site" / "reference" / "cli.html").is_file()


def test_readme_is_short_and_its_links_resolve() -> None:
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 300, "README.md is for a five-minute read: the rest belongs in docs/"
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if not re.match(r"[a-z]+://", target):
            assert (REPO / target).exists(), f"README links to {target}, which does not exist"


def _ci_steps() -> list[str]:
    """Return the commands .ci/run runs, in order (comments, blank lines and shell set-up left out)."""
    lines = [ln.strip() for ln in (REPO / ".ci" / "run").read_text().splitlines()]
    return [ln for ln in lines if ln and not ln.startswith(("#", "set ", "cd "))]


def test_quick_start_is_two_commands_and_ci_runs_the_second() -> None:
    lines = _quick_start((REPO / "README.md").read_text())
    assert len(lines) == 2
    assert "samples/" in lines[0]
    setup, test_command = (part.strip() for part in lines[1].split("&&"))
    steps = _ci_steps()
    assert steps[0] == setup and steps[-1] == test_command, f".ci/run does not run {lines[1]!r}: {steps}"
    assert _quick_start((DOCS / "pages" / "index.md").read_text()) == lines, "docs index quick start differs"


def test_ci_builds_the_docs_strictly_before_the_tests() -> None:
    steps = _ci_steps()
    builds = [i for i, s in enumerate(steps) if re.search(r"mkdocs build --strict .*-f docs/mkdocs\.yml", s)]
    assert builds and 0 < builds[0] < len(steps) - 1, f"no strict docs build between set-up and tests: {steps}"
    extras = re.search(r"pip install[^\n]*-e '\.\[([^\]]*)\]'", (REPO / ".ci" / "setup").read_text()).group(1)
    assert "docs" in extras.split(",")
