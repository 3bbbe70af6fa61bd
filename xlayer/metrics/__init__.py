"""Per-layer metric tables computed from a timeline: the cross-layer join, flows, TCP events, stations, host state.

`MODULES` is the registry, in the order the tables are listed; a module may use the tables of the
ones before it.  Each module has ``NEEDS`` (the packet columns it reads), ``TABLES`` (its tables'
schemas, `xlayer.metrics.schema`) and ``build(tl) -> {name: DataFrame}``.  Adding a table module is
one file here and one entry in the list.
"""
from __future__ import annotations

import os
from typing import Any

from xlayer.bundle import Bundle
from xlayer.metrics import air, delay, flows, host, join, stations, tcp
from xlayer.timeline import Timeline
from xlayer.timeline import open_timeline as _open_timeline

MODULES = (join, flows, tcp, stations, host, air, delay)


def table_names() -> list[str]:
    """Return the name of every metric table, in module order."""
    return [n for m in MODULES for n in m.TABLES]


def markdown_tables() -> str:
    """Return every metric table's schema as Markdown (a heading and a column table each), for the docs."""
    from parsers.schema import markdown_table
    from xlayer.metrics.schema import DOCS, REGISTRY

    return "\n\n".join(f"#### `{name}`: {DOCS[name]}\n\n{markdown_table(REGISTRY[name])}" for name in table_names())


def open_timeline(bundle: Bundle | str | os.PathLike, reference: str | None = None, **kw: Any) -> Timeline:
    """Return the bundle's Timeline with the metric tables on demand (`tl.table(name)`, `tl.flows()`)."""
    return _open_timeline(bundle, reference, modules=MODULES, **kw)


__all__ = ["MODULES", "markdown_tables", "open_timeline", "table_names"]
