"""The sort-based kernels of the TCP tables (issue 15: `flows` and `tcp`) give what the windows and sorts they
replaced gave: each against a direct polars formulation of its definition, on crafted data with ties and nulls."""
from __future__ import annotations

import numpy as np
import polars as pl

import xlayer.metrics.flows as fm
import xlayer.metrics.tcp as tm


def _conn_rows(n: int, seed: int) -> pl.DataFrame:
    """Rows of a few conns in (conn, dir, frame) order, as `tcp.prepare` keeps them, with nulls in the values."""
    rng = np.random.default_rng(seed)
    df = pl.DataFrame({"conn": rng.integers(0, 6, n), "dir": rng.choice(["a", "b"], n),
                       "frame": rng.permutation(n) + 1, "v": rng.integers(0, 9, n)})
    df = df.with_columns(pl.when(pl.col("frame") % 5 == 0).then(None).otherwise(pl.col("v")).alias("v"))
    df = df.sort("conn", "dir", "frame")
    return df.with_columns(pl.col("conn").rle_id().alias("_c"))


def test_conn_order_is_the_conn_frame_sort_and_its_inverse():
    df = _conn_rows(3000, 1)
    order, back = tm._conn_order(df)
    want = df.select(pl.arg_sort_by("_c", "frame")).to_series()
    assert order.to_list() == want.to_list()
    assert df["frame"].gather(order).gather(back).equals(df["frame"])
    # frames too large for one packed key: the two-column sort
    big = df.with_columns(pl.col("frame") * (1 << 50))
    assert tm._conn_order(big)[0].to_list() == big.select(pl.arg_sort_by("_c", "frame")).to_series().to_list()


def test_reverse_direction_fill_equals_the_window_per_conn():
    df = _conn_rows(4000, 2)
    o = df.sort("_c", "frame")
    got = o.select(tm._rev_runs("v").alias("x"))
    a = pl.when(pl.col("dir") == "a").then(pl.col("v")).forward_fill().over("_c")
    b = pl.when(pl.col("dir") == "b").then(pl.col("v")).forward_fill().over("_c")
    want = o.select(pl.when(pl.col("dir") == "a").then(b).otherwise(a).alias("x"))
    assert got.equals(want)
    assert got["x"].null_count() > 0 and got["x"].null_count() < o.height   # both kinds of rows occur


def test_mac_gap_equals_the_ordered_window():
    rng = np.random.default_rng(3)
    n = 5000
    tas = ["02:00:00:00:00:0a", "02:00:00:00:00:01", None]
    df = pl.DataFrame({"wlan_ta": [tas[i] for i in rng.integers(0, 3, n)],
                       "wlan_seq": rng.integers(0, 40, n).astype(np.uint16),
                       "wlan_frag": rng.integers(0, 2, n).astype(np.uint8),
                       "frame": rng.permutation(n) + 1, "ts_ns": rng.integers(0, 10**6, n)})
    df = df.with_columns(pl.when(pl.col("frame") % 11 == 0).then(None).otherwise(pl.col("wlan_seq")).alias("wlan_seq"))
    want = df.select(pl.col("ts_ns").diff().over(["wlan_ta", "wlan_seq", "wlan_frag"], order_by="frame"))
    got = tm._mac_gap(df)
    assert got.to_list() == want.to_series().to_list()
    assert 0 < got.null_count() < n


def test_arrival_jitter_equals_the_sorted_recurrence():
    rng = np.random.default_rng(4)
    n = 3000
    owd = pl.DataFrame({"fh": rng.integers(0, 4, n).astype(np.uint64), "ts_ns": rng.integers(0, 10**6, n),
                        "frame_a": rng.permutation(n) + 1, "ts_b": rng.integers(0, 10**6, n),
                        "frame_b": rng.permutation(n) + 1}).sort("fh", "ts_ns", "frame_a")
    owd = owd.with_columns((pl.col("ts_b") - pl.col("ts_ns")).alias("owd_ns"))
    want = owd.sort("fh", "ts_b", "frame_b").with_columns(
        fm.rfc3550_jitter((pl.col("owd_ns") - pl.col("owd_ns").shift(1).over("fh")).abs().fill_null(0))
        .over("fh").alias("jitter_ns")).sort("fh", "ts_ns", "frame_a")
    assert owd.with_columns(fm._arrival_jitter(owd)).equals(want)


def _keyed(name: str, off: int, order: str) -> fm.Keyed:
    """A capture's identities of two flows seen once each, rows in `order` ("sorted" or "shuffled")."""
    rows = [(fh, i) for fh in (7, 9) for i in range(1, 60) if (i + fh) % (4 if name == "b" else 1000)]
    df = pl.DataFrame({"fh": [r[0] for r in rows], "k_id": [r[1] for r in rows], "k_seq": [1000 + r[1] for r in rows],
                       "k_ulen": [-1] * len(rows), "k_iplen": [40] * len(rows), "k_off": [0] * len(rows),
                       "frame": list(range(1, len(rows) + 1)), "ts_ns": [10 * r[1] + off for r in rows],
                       "n": [1] * len(rows)},
                      schema_overrides={"fh": pl.UInt64, "k_ulen": pl.Int32, "k_off": pl.Int32, "n": pl.Int32})
    df = df.with_columns(pl.struct(list(fm._KEY)).hash().alias("_k"))
    df = df.sort("fh", "ts_ns", "frame") if order == "sorted" else df.sample(fraction=1.0, shuffle=True, seed=5)
    names = pl.DataFrame({"fh": [7, 9], "flow": ["tcp 10.0.0.1:1>10.0.0.2:2", "tcp 10.0.0.1:3>10.0.0.2:4"],
                          "conn": ["c", "d"], "dir": ["a", "a"], "src": ["10.0.0.1"] * 2, "dst": ["10.0.0.2"] * 2},
                         schema_overrides={"fh": pl.UInt64})
    return fm.Keyed(name, f"{name}.pcap", df, names, (0, 10**10), ordered=order == "sorted")


def test_pair_tables_read_ordered_keys_as_they_sort_unordered_ones():
    want = fm.pair_tables(_keyed("a", 0, "shuffled"), _keyed("b", 5, "shuffled"))
    got = fm.pair_tables(_keyed("a", 0, "sorted"), _keyed("b", 5, "sorted"))
    for name in ("owd", "loss", "loss_bursts"):
        assert got[name].equals(want[name]), name
    assert want["owd"].height > 0 and want["loss"]["lost"].sum() > 0 and want["loss_bursts"].height > 0
