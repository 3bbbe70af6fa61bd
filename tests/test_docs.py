"""The README's promises: the schema table is the generated one, the quick start is two commands."""
from __future__ import annotations

import re

import parsers.hoststate.common as hoststate
from parsers.schema import markdown_table

from tests.helpers.common import REPO


def test_readme_tables_are_generated_from_the_schemas() -> None:
    text = (REPO / "README.md").read_text()
    for tag, table in (("schema", markdown_table()), ("hoststate", hoststate.markdown_table())):
        block = text.split(f"<!-- {tag}:begin -->")[1].split(f"<!-- {tag}:end -->")[0].strip()
        assert block == table, f"README {tag} table is stale: run python -m parsers.{tag}"


def test_readme_metric_tables_are_generated() -> None:
    from xlayer.metrics.schema import markdown_tables

    text = (REPO / "README.md").read_text()
    block = text.split("<!-- metrics:begin -->")[1].split("<!-- metrics:end -->")[0].strip()
    assert block == markdown_tables(), "README metric tables are stale: run python -m xlayer.metrics.schema"


def test_quick_start_is_two_commands_and_ci_runs_the_second() -> None:
    text = (REPO / "README.md").read_text()
    section = text.split("## Quick start", 1)[1]
    block = re.search(r"```\w*\n(.*?)```", section, re.S).group(1)
    lines = [ln for ln in block.splitlines() if ln.strip()]
    assert len(lines) == 2
    assert lines[1] in (REPO / ".ci" / "run").read_text()
    assert "samples/" in lines[0]
