"""Window-free forms the join groups MSDUs and sequence numbers by, against the windows and group-bys they replace."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from xlayer.metrics.join import _before_in_run, _distinct_numbers


@pytest.mark.parametrize("seed", range(5))
def test_same_as_the_windows(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 5_000
    runs = np.sort(rng.integers(0, n // 3, n))          # contiguous runs of 1..~10 rows
    x = rng.integers(0, 1 << 62, n).astype(np.uint64)
    df = pl.DataFrame({"_q": runs, "x": x}).with_columns(
        pl.when(pl.Series(rng.random(n) < 0.4)).then(None).otherwise(pl.col("x")).alias("x"))
    first = pl.col("_q").shift(1).ne_missing(pl.col("_q"))
    want = df.select(pl.col("x").forward_fill().over("_q").shift(1).over("_q")).to_series()
    got = df.select(_before_in_run(pl.col("x"), first)).to_series()
    assert got.dtype == want.dtype and got.equals(want)
    assert got.null_count() < n      # the case is not vacuous: values do carry within runs


def test_never_from_the_previous_run() -> None:
    df = pl.DataFrame({"_q": [0, 0, 1, 1, 1, 2], "x": [5, None, None, 7, None, None]})
    got = df.select(_before_in_run(pl.col("x"), pl.col("_q").shift(1).ne_missing(pl.col("_q")))).to_series()
    assert got.to_list() == [None, 5, None, None, 7, None]


def _numbers(seed: int, n: int = 4_000) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    q = np.sort(rng.integers(0, 5, n)).astype(np.uint32)
    return pl.DataFrame({
        "_q": q, "_i": np.arange(n, dtype=np.uint32),
        "ta": [f"02:00:00:00:00:{x:02x}" for x in q], "ra": [None if x == 3 else "aa" for x in q],
        "_tid": (q % 2).astype(np.int16), "seq": rng.integers(0, 4096, n),
        "useq": rng.integers(-40, 300, n),          # repeats, steps back (Block Ack retransmissions)
        "ts_ns": rng.integers(0, 1 << 50, n),        # not in record order: the earliest is not the first
        "direction": rng.choice(["down", "up", "other"], n),
    })


@pytest.mark.parametrize("seed", range(3))
def test_distinct_numbers_as_the_group_by(seed: int) -> None:
    s = _numbers(seed)
    part = ["ta", "ra", "_tid"]
    want = (s.group_by("_q", "useq").agg(pl.col(*part, "seq").first(), pl.col("ts_ns").min(),
                                         pl.col("direction").first()).sort("_q", "useq"))
    got = _distinct_numbers(s, part)
    assert got.equals(want) and got.height < s.height
    # the fallback (numbers too far apart for one integer key) gives the same rows
    far = s.with_columns(pl.when(pl.col("_i") == 0).then(-(1 << 45)).otherwise(pl.col("useq")).alias("useq"))
    assert _distinct_numbers(far, part).equals(
        far.group_by("_q", "useq").agg(pl.col(*part, "seq").first(), pl.col("ts_ns").min(),
                                       pl.col("direction").first()).sort("_q", "useq"))
    assert _distinct_numbers(s.head(0), part).height == 0
