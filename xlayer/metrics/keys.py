"""Integer keys for the metric modules' sorts, windows and look-ups.

Sorting a million rows by address or connection strings compares strings (or, as categoricals, looks
them up) at every step; their distinct values are few.  `with_sorted_ids` sorts only those and gives
each row the rank of its value, so the rows can be sorted and windowed by one integer in the same order.
"""
from __future__ import annotations

import numpy as np
import polars as pl


def with_sorted_ids(df: pl.DataFrame, cols: list[str], name: str) -> pl.DataFrame:
    """Return `df` with column `name` (UInt32): the rank of each row's `cols` among their distinct values
    in sort order (nulls first, as `DataFrame.sort`), rows kept in their order."""
    # One hashing pass: the rows of each distinct value gathered by a group-by, its rank scattered back to
    # them (the distinct values, then a join of every row back to them, hashed each row twice: 2-3x the time)
    g = (df.select(cols).with_row_index("__r").group_by(cols).agg(pl.col("__r"))
         .sort(cols, nulls_last=False).with_row_index(name))
    ids = np.empty(df.height, np.uint32)
    ids[g.get_column("__r").explode().to_numpy()] = np.repeat(g.get_column(name).to_numpy(),
                                                             g.get_column("__r").list.len().to_numpy())
    return df.with_columns(pl.Series(name, ids, pl.UInt32))


def index_rows(keys: pl.Series, want: pl.Series) -> pl.Series | None:
    """Return per value of `want` the row of `keys` holding it (null: none), or None when the keys are not
    distinct small non-negative integers (row numbers, group ids) that can be looked up by position."""
    if not keys.dtype.is_integer() or not want.dtype.is_integer() or keys.null_count():
        return None
    if keys.len() and (keys.min() < 0 or keys.max() > 4 * (keys.len() + want.len()) + 1024):
        return None
    k = keys.cast(pl.Int64).to_numpy()
    at = np.full(int(k.max()) + 1 if len(k) else 0, -1, np.int64)
    at[k] = np.arange(len(k))
    if len(k) and (at[k] != np.arange(len(k))).any():     # a key repeated
        return None
    # (a value beyond every key, negative or null looks up nothing)
    if not want.len():
        w = np.zeros(0, np.int64)
    elif want.null_count() or want.dtype == pl.UInt64:
        w = want.cast(pl.Int64, strict=False).fill_null(-1).to_numpy()
    else:       # (no nulls: the numbers as they are, no cast of a million values through polars)
        w = want.to_numpy().astype(np.int64, copy=False)
    inside = (w >= 0) & (w < len(at))
    rows = np.full(len(w), -1, np.int64)
    rows[inside] = at[w[inside]]
    miss = rows < 0
    return pl.Series("_row", np.ma.masked_array(rows, miss), pl.Int64) if miss.any() else pl.Series("_row", rows)
