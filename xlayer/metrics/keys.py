"""Integer keys for the metric modules' sorts and windows over string columns.

Sorting a million rows by address or connection strings compares strings (or, as categoricals, looks
them up) at every step; their distinct values are few.  `with_sorted_ids` sorts only those and gives
each row the rank of its value, so the rows can be sorted and windowed by one integer in the same order.
"""
from __future__ import annotations

import polars as pl


def with_sorted_ids(df: pl.DataFrame, cols: list[str], name: str) -> pl.DataFrame:
    """Return `df` with column `name` (UInt32): the rank of each row's `cols` among their distinct values
    in sort order (nulls first, as `DataFrame.sort`), rows kept in their order."""
    ids = df.select(cols).unique().sort(cols).with_row_index(name)
    return df.join(ids, on=cols, how="left", nulls_equal=True, maintain_order="left")
