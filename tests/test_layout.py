"""The package's shape: data flows one way (formats -> tables -> timeline -> metrics -> attribution -> report).

Walks every import of `parsers/` and `xlayer/` (module-level and inside functions, found with `ast`) and
fails on an import cycle, on an import that runs back up the pipeline, and on a flat `xlayer/`.
"""
from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers.common import REPO

# Stages, lowest first: a module may import its own stage and the ones below it, never one above.
STAGES: list[tuple[str, ...]] = [
    ("parsers.schema", "parsers.columnar"),
    ("parsers.formats", "parsers.hoststate"),
    ("parsers.layers",),
    ("parsers.decode", "parsers.tshark", "parsers"),
    ("xlayer.signals", "xlayer.text"),
    ("xlayer.bundle", "xlayer.ingest"),
    ("xlayer.acquire", "xlayer.timeline"),
    ("xlayer.metrics",),
    ("xlayer.attribution",),
    ("xlayer.report", "xlayer.testbeds"),
    ("xlayer.campaign",),
    ("xlayer.cli",),
    ("xlayer", "xlayer.__main__"),
]
MAX_TOP_LEVEL = 8


def modules() -> dict[str, Path]:
    """Return every module of the two packages by dotted name."""
    out = {}
    for pkg in ("parsers", "xlayer"):
        for p in sorted((REPO / pkg).rglob("*.py")):
            name = ".".join(p.relative_to(REPO).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = p
    return out


def stage(mod: str) -> int:
    """Return the stage of a module: that of the longest prefix listed in STAGES."""
    best, rank = "", None
    for i, names in enumerate(STAGES):
        for n in names:
            if (mod == n or mod.startswith(n + ".")) and len(n) > len(best):
                best, rank = n, i
    assert rank is not None, f"{mod} is in no stage of tests/test_layout.py"
    return rank


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Return each module's imports of the two packages (resolved to modules where they are ones)."""
    graph = {}
    for mod, path in mods.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = mod.split(".")[: len(mod.split(".")) - node.level + (path.name == "__init__.py")]
                    base = ".".join(parts + ([node.module] if node.module else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]
            else:
                continue
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != mod:
                    deps.add(t)
        graph[mod] = deps
    return graph


def test_parsers_import_nothing_of_xlayer():
    g = imports(modules())
    bad = [f"{m} -> {d}" for m, ds in g.items() if m.startswith("parsers") for d in ds if d.startswith("xlayer")]
    assert not bad, bad


def test_no_import_runs_back_up_the_pipeline():
    g = imports(modules())
    bad = sorted(f"{m} (stage {stage(m)}) -> {d} (stage {stage(d)})"
                 for m, ds in g.items() for d in ds if stage(d) > stage(m))
    assert not bad, "\n".join(bad)


def test_no_import_cycle():
    g = imports(modules())
    # A package's __init__ may re-export its own modules: the package imports them, not the reverse.
    edges = {m: {d for d in ds if not (m.startswith(d + ".") and (REPO / d.replace(".", "/")).is_dir())}
             for m, ds in g.items()}
    seen, on_path, cycles = set(), [], []

    def visit(m: str) -> None:
        if m in on_path:
            cycles.append(" -> ".join(on_path[on_path.index(m):] + [m]))
            return
        if m in seen:
            return
        seen.add(m)
        on_path.append(m)
        for d in sorted(edges.get(m, ())):
            visit(d)
        on_path.pop()

    for m in sorted(edges):
        visit(m)
    assert not cycles, "\n".join(cycles)


def test_xlayer_top_level_is_small():
    top = sorted(p.name for p in (REPO / "xlayer").glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL, top


def test_every_stage_prefix_exists():
    mods = modules()
    for names in STAGES:
        for n in names:
            assert n in mods, f"tests/test_layout.py names {n}, which is not a module"
