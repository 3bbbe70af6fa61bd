"""Write a timeline's metric tables to a directory of Parquet files with a manifest saying what is there.

Each table is written to ``NAME.parquet.part`` and renamed when complete, then ``metrics.json`` is
rewritten (also through a rename), so at any moment — after an interrupt, a kill or a full disk — the
directory holds whole Parquet files and a manifest listing exactly those, with ``complete`` false
until the last table is in.  The manifest documents every table's columns (name, dtype, unit, meaning)
and carries the clock alignment the tables are on.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from xlayer.metrics import table_names
from xlayer.metrics.schema import DOCS, REGISTRY
from xlayer.timeline import Timeline

MANIFEST = "metrics.json"
VERSION = 1


def _atomic_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, allow_nan=False, default=str)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def table_doc(name: str) -> dict[str, Any]:
    """Return a table's documentation: what a row is, and each column's dtype, unit and meaning."""
    return {"row": DOCS.get(name, ""), "columns": [
        {"name": c.name, "dtype": str(c.dtype), "unit": c.unit, "doc": c.doc} for c in REGISTRY[name]]}


def write_metrics(tl: Timeline, out: str | os.PathLike, tables: list[str] | None = None,
                  progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Write the metric tables as Parquet under `out`; return the manifest written (metrics.json)."""
    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    names = tables if tables is not None else table_names()
    unknown = [n for n in names if n not in table_names()]
    if unknown:
        raise KeyError(f"no metric table {', '.join(map(repr, unknown))} (tables: {', '.join(table_names())})")
    man: dict[str, Any] = {
        "xlayer_metrics": VERSION,
        "bundle": str(tl.bundle.path) if tl.bundle.path is not None else None,
        "tags": dict(tl.bundle.tags),
        "bin_ns": tl.bin_ns,
        "alignment": tl.alignment.as_json(),
        "read_errors": dict(tl.errors),
        "complete": False,
        "tables": {},
    }
    for stale in outdir.glob("*.parquet.part"):
        stale.unlink()
    _atomic_json(outdir / MANIFEST, man)
    for name in names:
        if progress is not None:
            progress(name)
        df = tl.table(name)
        target = outdir / f"{name}.parquet"
        tmp = target.with_name(target.name + ".part")
        try:
            # pyarrow's writer reports a full disk as OSError (polars would wrap it in ComputeError).
            pq.write_table(df.to_arrow(), tmp, compression="zstd")
            os.replace(tmp, target)
        except BaseException:
            if tmp.exists():
                tmp.unlink()
            raise
        man["tables"][name] = {"file": target.name, "rows": df.height, **table_doc(name)}
        _atomic_json(outdir / MANIFEST, man)
    man["complete"] = True
    _atomic_json(outdir / MANIFEST, man)
    return man
