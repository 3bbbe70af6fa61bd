"""The integer keys and sort-based kernels that replaced string sorts and windows (issue 15) give what the
windows gave: each against a direct polars formulation of its definition, on crafted data with ties and nulls."""
from __future__ import annotations

import numpy as np
import polars as pl

import xlayer.metrics.flows as fm
from xlayer.metrics.join import _rank_within
from xlayer.metrics.keys import with_sorted_ids


def _rows(n: int, seed: int) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    macs = ["02:00:00:00:00:0a", "02:00:00:00:00:01", "ff:ff:ff:ff:ff:ff", None]
    return pl.DataFrame({
        "ta": [macs[i] for i in rng.integers(0, 4, n)],
        "ra": [macs[i] for i in rng.integers(0, 3, n)],
        "tid": rng.integers(-1, 3, n),
        "ts_ns": rng.integers(0, 50, n),          # many ties
        "frame": np.arange(1, n + 1),
    })


def test_sorted_ids_follow_the_sort_order_of_the_strings():
    df = _rows(3000, 1)
    got = with_sorted_ids(df, ["ta", "ra", "tid"], "_g")
    assert got.select("ta", "ra", "tid", "ts_ns", "frame").equals(df)      # rows kept in their order
    # the same key, the same id; sorting by the id is sorting by the columns (nulls first)
    assert got.group_by("ta", "ra", "tid").agg(pl.col("_g").n_unique())["_g"].max() == 1
    assert got.select(pl.struct("ta", "ra", "tid").n_unique()).item() == got["_g"].n_unique()
    by_id = got.sort("_g", "frame").select("ta", "ra", "tid", "frame")
    by_cols = df.sort("ta", "ra", "tid", "frame").select("ta", "ra", "tid", "frame")
    assert by_id.equals(by_cols)


def test_rank_within_equals_the_ordered_window():
    df = _rows(4000, 2).with_columns((pl.col("frame") % 7 == 0).alias("m"))
    order = [~pl.col("m"), pl.col("ts_ns"), pl.col("frame")]
    got = _rank_within(df, ["ta", "tid"], order)
    want = df.select(pl.int_range(pl.len()).over("ta", "tid", order_by=order))
    assert got.to_list() == want.to_series().to_list()
    # ties in every ordering column are broken by row order
    tied = pl.DataFrame({"k": [1, 1, 1, 2, 2], "o": [5, 5, 5, 0, 0]})
    assert _rank_within(tied, ["k"], [pl.col("o")]).to_list() == [0, 1, 2, 0, 1]


def test_mac_retry_filter_equals_the_window_definition():
    rng = np.random.default_rng(3)
    n = 5000
    m = pl.DataFrame({"_mpdu": rng.integers(0, 300, n).astype(np.uint64),
                      "ts_ns": np.sort(rng.integers(0, 20 * fm.MAC_RETRY_WINDOW_NS, n))})
    m = m.with_columns(pl.when(pl.int_range(pl.len()) % 97 == 5).then(None).otherwise(pl.col("ts_ns")).alias("ts_ns"))
    want = m.select(((pl.col("ts_ns") - pl.col("ts_ns").shift(1).over("_mpdu")) >= fm.MAC_RETRY_WINDOW_NS)
                    .fill_null(True)).to_series().to_list()
    assert fm._not_retry(m).tolist() == want
    assert 0 < sum(want) < n                       # both kinds of rows occur


def _keyed(rows: list[tuple[int, int]], name: str) -> fm.Keyed:
    """A capture's identities (flow hash 7, IP id, seq) seen once each at times 10 * IP id (+ 5 at `b`)."""
    off = 5 if name == "b" else 0
    df = pl.DataFrame({"fh": [7] * len(rows), "k_id": [r[0] for r in rows], "k_seq": [r[1] for r in rows],
                       "k_ulen": [-1] * len(rows), "k_iplen": [40] * len(rows), "k_off": [0] * len(rows),
                       "frame": list(range(1, len(rows) + 1)), "ts_ns": [10 * r[0] + off for r in rows],
                       "n": [1] * len(rows)},
                      schema_overrides={"fh": pl.UInt64, "k_ulen": pl.Int32, "k_off": pl.Int32, "n": pl.Int32})
    df = df.with_columns(pl.struct(list(fm._KEY)).hash().alias("_k"))
    names = pl.DataFrame({"fh": [7], "flow": ["tcp 10.0.0.1:1>10.0.0.2:2"], "conn": ["c"], "dir": ["a"],
                          "src": ["10.0.0.1"], "dst": ["10.0.0.2"]}, schema_overrides={"fh": pl.UInt64})
    return fm.Keyed(name, f"{name}.pcap", df, names, (0, 10**10))


def test_identity_hash_is_checked_and_made_exact_on_a_collision():
    a = _keyed([(i, 1000 + i) for i in range(1, 40)], "a")
    b = _keyed([(i, 1000 + i) for i in range(1, 40) if i % 5], "b")
    ka, kb = fm.exact_ids([a, b])
    assert ka.df.equals(a.df) and kb.df.equals(b.df)       # no collision: the hashes are kept
    want = fm.pair_tables(ka, kb)
    assert want["owd"].height == kb.df.height and set(want["owd"]["owd_ns"].to_list()) == {5}
    assert want["loss"]["lost"].to_list() == [a.df.height - b.df.height]
    # two different identities given one hash (as a 64-bit collision would): renumbered exactly
    shared = a.df["_k"][0]
    a2 = fm.Keyed(a.vantage, a.capture_file, a.df.with_columns(
        pl.when(pl.col("k_id") <= 2).then(pl.lit(shared, pl.UInt64)).otherwise(pl.col("_k")).alias("_k")), a.names, a.span)
    b2 = fm.Keyed(b.vantage, b.capture_file, b.df.with_columns(
        pl.when(pl.col("k_id") <= 2).then(pl.lit(shared, pl.UInt64)).otherwise(pl.col("_k")).alias("_k")), b.names, b.span)
    ea, eb = fm.exact_ids([a2, b2])
    both = pl.concat([ea.df, eb.df])
    assert both.select(pl.struct(list(fm._KEY)).n_unique()).item() == both["_k"].n_unique()
    assert ea.df.select(pl.exclude("_k")).equals(a.df.select(pl.exclude("_k")))
    got = fm.pair_tables(ea, eb)
    for name in ("owd", "loss", "loss_bursts"):
        assert got[name].equals(want[name]), name
