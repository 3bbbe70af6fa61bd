"""Cell-by-cell comparison of two packet tables (decoder against decoder, or against tshark)."""
from __future__ import annotations

import math
from collections.abc import Iterable

import polars as pl

# Columns compared with a tolerance: tshark prints some floats rounded.
TOLERANCE = {"phy_rate_mbps": 0.051, "he_gi_us": 1e-6}


def _same(a, b, tol: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if tol is not None:
        return math.isclose(float(a), float(b), abs_tol=tol)
    if isinstance(a, list) or isinstance(b, list):
        return [list(x) for x in (a or [])] == [list(x) for x in (b or [])]
    return a == b


def diff_tables(ours: pl.DataFrame, theirs: pl.DataFrame, columns: Iterable[str],
                key: str = "frame") -> list[tuple[int, str, object, object]]:
    """Return (frame, column, ours, theirs) for every cell that differs; rows are matched by `key`."""
    out: list[tuple[int, str, object, object]] = []
    a = ours.sort(key)
    b = theirs.sort(key)
    ka, kb = a.get_column(key).to_list(), b.get_column(key).to_list()
    if ka != kb:
        only_a = sorted(set(ka) - set(kb))
        only_b = sorted(set(kb) - set(ka))
        for f in only_a[:20]:
            out.append((f, "<row>", "present", "absent"))
        for f in only_b[:20]:
            out.append((f, "<row>", "absent", "present"))
        common = sorted(set(ka) & set(kb))
        a = a.filter(pl.col(key).is_in(common))
        b = b.filter(pl.col(key).is_in(common))
        ka = a.get_column(key).to_list()
    for col in columns:
        tol = TOLERANCE.get(col)
        va, vb = a.get_column(col).to_list(), b.get_column(col).to_list()
        if tol is None and va == vb:
            continue
        for f, x, y in zip(ka, va, vb):
            if not _same(x, y, tol):
                out.append((f, col, x, y))
    return out


def cells_compared(df: pl.DataFrame, columns: Iterable[str]) -> int:
    """Return the number of cells a comparison over these columns covers."""
    return df.height * len(list(columns))
