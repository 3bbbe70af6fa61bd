"""The packed-key paths of the flows and tcp modules against the plain polars steps they replace: the rtt
table's order, Karn's "retransmitted later", the arrival order for the jitter, a flow's first row, and a
retransmission candidate's covering segment start.  Each runs on random rows where the plain step has
ties, gaps and missing matches to get wrong; where the packing cannot fit, the plain step runs."""
from __future__ import annotations

import random

import numpy as np
import polars as pl
import pytest

import xlayer.metrics.flows as fm
import xlayer.metrics.tcp as tm
from tests.metrics.test_flow_fastpaths import _same, _two_captures


def test_rtt_order_by_packed_key_is_the_four_column_sort() -> None:
    rnd = random.Random(5)
    n = 500
    frames = rnd.sample(range(1, 10 * n), n)
    rows = pl.DataFrame({"_fr": [rnd.randrange(1, 4) for _ in range(n)],
                         "ts_ns": [1_700_000_000_000_000_000 + rnd.randrange(50) * 1000 for _ in range(n)],
                         "_m": [rnd.random() < 0.3 for _ in range(n)], "data_frame": frames,
                         "x": list(range(n))}, schema_overrides={"_fr": pl.UInt32})
    want = rows.sort("_fr", "ts_ns", "_m", "data_frame")
    _same(fm._in_rtt_order(rows), want)
    # times too far apart to pack with the frames: the four-column sort itself
    wide = rows.with_columns(pl.when(pl.col("x") == 0).then(pl.lit(-(1 << 62))).otherwise(pl.col("ts_ns")).alias("ts_ns"))
    _same(fm._in_rtt_order(wide), wide.sort("_fr", "ts_ns", "_m", "data_frame"))


def _later_by_join(seg: pl.DataFrame, merged: pl.DataFrame) -> pl.Series:
    probe = seg.select("g", "seq_u", (pl.col("end_u") - 1).alias("_last")).with_row_index("_i").sort("_last")
    hit = probe.join_asof(merged.sort("m_start"), left_on="_last", right_on="m_start", by="g", strategy="backward",
                          check_sortedness=False).sort("_i")
    return (hit["m_end"].is_not_null() & (hit["m_end"] > hit["seq_u"])).alias("later")


def test_retransmitted_later_by_search_is_the_join_asof() -> None:
    rnd = random.Random(6)
    seg = pl.DataFrame({"g": [rnd.choice([0, 1, 4, 5]) for _ in range(400)],
                        "seq_u": [rnd.randrange(-5000, 50_000) for _ in range(400)]}).with_columns(
        (pl.col("seq_u") + pl.Series([rnd.randrange(1, 1500) for _ in range(400)])).alias("end_u"))
    # disjoint intervals per direction; direction 5 has none
    starts = {g: sorted(rnd.sample(range(-5000, 50_000, 2000), 8)) for g in (0, 1, 4)}
    merged = pl.DataFrame([{"g": g, "m_start": s, "m_end": s + rnd.randrange(1, 1999)}
                           for g, ss in starts.items() for s in ss])
    # segments whose last byte is an interval's first: resent (the search must include an equal start)
    edge = merged.select("g", (pl.col("m_start") - 10).alias("seq_u"), (pl.col("m_start") + 1).alias("end_u"))
    seg = pl.concat([seg, edge])
    got = fm._later_by_search(seg, merged)
    assert got is not None and got.any() and not got.all() and got.tail(edge.height).all()
    assert got.equals(_later_by_join(seg, merged))


def test_retransmitted_later_flags_karn_on_prepared_rows() -> None:
    up, _ = _two_captures()
    seg = up.df.filter(pl.col("is_tcp") & (pl.col("span") > 0))
    seg = seg.with_columns(pl.when(pl.int_range(pl.len()) % 7 == 3).then(True).otherwise(pl.col("retx")).alias("retx"))
    retx = seg.filter(pl.col("retx")).select("g", "seq_u", "end_u").sort("g", "seq_u")
    retx = retx.with_columns(pl.col("end_u").cum_max().shift(1).over("g").alias("_reach"))
    retx = retx.with_columns((pl.col("_reach").is_null() | (pl.col("seq_u") > pl.col("_reach")))
                             .cum_sum().over("g").alias("_grp"))
    merged = retx.group_by("g", "_grp").agg(pl.col("seq_u").min().alias("m_start"), pl.col("end_u").max().alias("m_end"))
    got = fm._retransmitted_later(seg)
    assert got.any() and got.equals(_later_by_join(seg, merged.drop("_grp")))


def test_arrival_permutation_is_the_three_column_arg_sort() -> None:
    rnd = random.Random(7)
    n = 300
    fh = sorted(rnd.choice([3, 2**63 + 5, 2**64 - 1]) for _ in range(n))
    owd = pl.DataFrame({"fh": fh, "ts_b": [rnd.randrange(0, 40) for _ in range(n)],
                        "frame_b": rnd.sample(range(1, 5 * n), n)}, schema_overrides={"fh": pl.UInt64})
    want = owd.select(pl.arg_sort_by("fh", "ts_b", "frame_b")).to_series()
    assert fm._arrival_perm(owd).to_list() == want.to_list()
    # flows not in rising order: the plain arg_sort
    rev = owd.reverse()
    assert fm._arrival_perm(rev).to_list() == rev.select(pl.arg_sort_by("fh", "ts_b", "frame_b")).to_series().to_list()


def test_per_flow_first_row_is_the_group_by() -> None:
    up, _ = _two_captures()
    assert up.flows.height >= 3
    packets = pl.DataFrame({"fid": [2, 1, 2, 1, 0, 2], "frame": [1, 2, 3, 4, 5, 6], "keep": [False, True, True, True, True, True],
                            "flow": ["x", "a1", "b2", "a9", "c", "b5"], "conn": list("pqrstu"), "dir": list("ababab")})

    def col(name: str, dtype: pl.DataType) -> pl.Expr:
        return (pl.col(name).cast(dtype) if name in packets.columns else pl.lit(None, dtype)).alias(name)

    got = fm._per_flow(packets, pl.col("keep"), col).sort("fid")
    assert got["flow"].to_list() == ["c", "a1", "b2"] and got["conn"].to_list() == ["t", "q", "r"]
    # frames out of order: the group-by on the smallest frame
    shuffled = packets.with_columns(pl.Series("frame", [1, 9, 3, 4, 5, 2]))
    got = fm._per_flow(shuffled, pl.col("keep"), col).sort("fid")
    assert got["flow"].to_list() == ["c", "a9", "b5"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_covering_start_is_the_join_asof(seed: int) -> None:
    rnd = random.Random(seed)
    conns = pl.Series(["c1", "c2", "c3"]).cast(pl.Categorical)

    def rows(n: int, low: int) -> pl.DataFrame:
        return pl.DataFrame({"conn": [conns[rnd.randrange(3)] for _ in range(n)],
                             "dir": [rnd.choice("ab") for _ in range(n)],
                             "seq_u": [rnd.randrange(low, 400) for _ in range(n)]}).with_columns(
            pl.col("conn").cast(pl.Categorical), pl.col("dir").cast(tm.DIR))

    firsts = rows(300, -10).unique(["conn", "dir", "seq_u"]).with_columns(
        *(pl.int_range(pl.len()).cast(pl.Int64).alias(c) for c in ("o_frame", "o_ts", "o_end")))
    cand = rows(60, -60).with_columns(pl.int_range(pl.len()).alias("frame"))
    got = tm._covering(cand, firsts).sort("frame")
    cover = firsts.rename({c: "c" + c for c in firsts.columns if c.startswith("o_")}).rename({"seq_u": "c_seq"})
    want = cand.sort("seq_u").join_asof(cover.sort("c_seq"), left_on="seq_u", right_on="c_seq", by=tm.G,
                                        strategy="backward", check_sortedness=False,
                                        allow_exact_matches=False).sort("frame")
    assert got["c_seq"].is_null().any() and got["c_seq"].is_not_null().any()
    _same(got, want)
    # keys that do not pack (a string direction): the join_asof itself
    plain = tm._covering(cand.with_columns(pl.col("dir").cast(pl.String)),
                         firsts.with_columns(pl.col("dir").cast(pl.String))).sort("frame")
    _same(plain.with_columns(pl.col("dir").cast(tm.DIR)), want)


def test_direction_lookup_is_the_join() -> None:
    rnd = random.Random(9)
    conns = [f"c{i}" for i in range(6)]

    def rows(pairs: list[tuple[str, str]]) -> pl.DataFrame:
        return pl.DataFrame({"conn": [c for c, _ in pairs], "dir": [d for _, d in pairs]}).with_columns(
            pl.col("conn").cast(pl.Categorical), pl.col("dir").cast(tm.DIR))

    left = rows([(rnd.choice(conns), rnd.choice("ab")) for _ in range(200)])
    right = rows(rnd.sample([(c, d) for c in conns for d in "ab"], 7)).with_columns(
        pl.int_range(100, 107).alias("_ag"))
    want = left.join(right, on=tm.G, how="left", maintain_order="left").get_column("_ag").fill_null(-1).to_list()
    got = tm._group_of(left, right, "_ag").tolist()
    assert got == want and -1 in got
    # string keys: the join itself
    plain = tm._group_of(left.with_columns(pl.col("dir").cast(pl.String)),
                         right.with_columns(pl.col("dir").cast(pl.String)), "_ag").tolist()
    assert plain == want
    assert tm._group_of(left, right.clear(), "_ag").tolist() == [-1] * left.height
