"""Issue 15's shortcuts in the join and delay tables give what the general paths give."""
from __future__ import annotations

import numpy as np
import polars as pl
from polars.testing import assert_frame_equal

from xlayer.metrics import delay, join

RNG = np.random.default_rng(15)


def _some_null(values: list, share: float = 0.2) -> list:
    return [None if RNG.random() < share else v for v in values]


def _matched_groups(n: int, packets: int) -> pl.DataFrame:
    """Return matched MSDU groups as `downlink_one` hands them to `_merge_groups`, nulls everywhere."""
    return pl.DataFrame({
        "_w": pl.Series(RNG.integers(0, packets, n), dtype=pl.UInt32),
        "air_capture_file": _some_null(RNG.choice(["a.pcap", "b.pcap"], n).tolist()),
        "first_air_frame": pl.Series(RNG.permutation(n), dtype=pl.Int64),
        "first_air_ts_ns": _some_null(RNG.integers(0, 10**9, n).tolist()),
        "_start": _some_null(RNG.integers(0, 10**9, n).tolist()),
        "mac_seq": pl.Series(_some_null(RNG.integers(0, 4096, n).tolist()), dtype=pl.UInt16),
        "tid": pl.Series(_some_null(RNG.integers(0, 8, n).tolist()), dtype=pl.UInt8),
        "ta": _some_null(RNG.choice(["02:00:00:00:00:01", "02:00:00:00:00:02"], n).tolist()),
        "ra": _some_null(RNG.choice(["02:00:00:00:00:01", "02:00:00:00:00:02"], n).tolist()),
        "useq": _some_null(RNG.integers(0, 9999, n).tolist()),
        "holes": _some_null(RNG.integers(0, 99, n).tolist()),
        "gid": pl.Series(np.arange(n), dtype=pl.Int64),
        "last_air_frame": _some_null(RNG.integers(0, n, n).tolist()),
        "last_air_ts_ns": _some_null(RNG.integers(0, 10**9, n).tolist()),
        "n_attempts": pl.Series(_some_null(RNG.integers(1, 9, n).tolist()), dtype=pl.UInt32),
        "n_retries": pl.Series(_some_null(RNG.integers(0, 9, n).tolist()), dtype=pl.UInt32),
        "n_fragments": pl.Series(_some_null(RNG.integers(1, 3, n).tolist()), dtype=pl.UInt32),
        "rates_mbps": pl.Series([None if RNG.random() < 0.1 else _some_null(RNG.choice([6.0, 54.0], RNG.integers(0, 4))
                                                                              .tolist(), 0.1) for _ in range(n)],
                                dtype=pl.List(pl.Float64)),
        "ampdu": _some_null((RNG.random(n) < 0.5).tolist()),
        "acked_by": _some_null(RNG.choice(["ack", "none", "blockack"], n).tolist()),
        "ack_frame": _some_null(RNG.integers(0, n, n).tolist()),
        "match": _some_null(RNG.choice(["key", "size_order"], n).tolist()),
        "match_confidence": _some_null(RNG.random(n).tolist()),
    })


def test_merge_groups_one_group_per_packet_as_the_group_by():
    m = _matched_groups(3000, 2500)           # most packets one group, some two or three
    assert m.get_column("_w").is_duplicated().any() and not m.get_column("_w").is_duplicated().all()
    for part in (m, m.unique("_w"), m.filter(pl.col("_w").is_duplicated()), m.head(0)):
        got = join._merge_groups(part, "_w").sort("_w")
        want = join._merge_several(part.select("_w", *join._MERGE_COLS, "match", "match_confidence"), "_w").sort("_w")
        assert got.schema == want.schema
        assert_frame_equal(got, want, check_exact=True)


def _owd_reference(out: pl.DataFrame, owd: pl.DataFrame, wired: list[str]) -> pl.Series:
    """Return `delay._wired_ns` as a plain join: the first owd row of each packet, in owd order."""
    w = (owd.with_row_index("_o").filter(pl.col("capture_file_b").is_in(out["capture_file"].unique().to_list())
                                         & pl.col("capture_file_a").is_in(wired))
         .sort("_o").unique(["capture_file_b", "frame_b"], keep="first")
         .select(pl.col("capture_file_b").alias("capture_file"), pl.col("frame_b").alias("frame"), "owd_ns"))
    return out.join(w, on=["capture_file", "frame"], how="left", maintain_order="left").get_column("owd_ns")


def test_wired_delay_is_the_first_owd_row_of_each_packet():
    n = 4000
    out = pl.DataFrame({"capture_file": _some_null(RNG.choice(["ap.pcap", "ap2.pcap"], n).tolist(), 0.05),
                        "frame": pl.Series(_some_null(RNG.integers(0, 3000, n).tolist(), 0.05), dtype=pl.Int64)})
    m = 9000       # several rows per packet (first wins), packets with none, other captures' rows, null delays
    owd = pl.DataFrame({
        "capture_file_a": RNG.choice(["server.pcap", "client.pcap", "other.pcap"], m).tolist(),
        "capture_file_b": RNG.choice(["ap.pcap", "ap2.pcap", "server.pcap"], m).tolist(),
        "frame_b": pl.Series(_some_null(RNG.integers(0, 3500, m).tolist(), 0.02), dtype=pl.Int64),
        "owd_ns": pl.Series(_some_null(RNG.integers(-10**6, 10**7, m).tolist(), 0.1), dtype=pl.Int64)})
    wired = ["server.pcap", "client.pcap"]
    got = delay._wired_ns(out, owd, wired)
    want = _owd_reference(out, owd, wired)
    assert got.null_count() and got.null_count() < n
    assert_frame_equal(pl.DataFrame({"x": got}), pl.DataFrame({"x": want.cast(pl.Int64)}), check_exact=True)


def _downlink(n: int, files: list[str | None]) -> pl.DataFrame:
    arrive = np.sort(RNG.integers(0, 10**9, n))
    soj = RNG.integers(0, 10**7, n)
    first = arrive + soj + RNG.integers(100_000, 400_000, n)
    return pl.DataFrame({
        "capture_file": ["ap.pcap"] * n, "frame": np.arange(n, dtype=np.int64), "ts_ns": arrive,
        "flow": ["f"] * n, "station": ["s"] * n, "sojourn_ns": soj, "first_air_ts_ns": first,
        "last_air_ts_ns": first + RNG.integers(0, 3, n) * 500_000,
        "n_attempts": pl.Series(RNG.integers(1, 4, n), dtype=pl.UInt32),
        "n_fragments": pl.Series(np.ones(n, np.int64), dtype=pl.UInt32),
        "rates_mbps": [[54.0]] * n, "air_capture_file": RNG.choice(np.array(files, dtype=object), n).tolist()})


def test_delay_per_air_capture_as_each_alone():
    down = _downlink(3000, ["a.pcap", "b.pcap", None])
    whole = delay.decompose(down)
    for f in ("a.pcap", "b.pcap", None):
        one = down.filter(pl.col("air_capture_file").eq_missing(f))
        alone = delay.decompose(one)
        assert alone.height == one.height
        assert_frame_equal(whole.filter(pl.col("frame").is_in(one["frame"].implode())), alone, check_exact=True)
    # one air capture (every row in one pass) as beside a row of another, which then takes the per-file path
    single = down.with_columns(pl.lit("a.pcap").alias("air_capture_file"))
    other = single.head(1).with_columns(pl.lit(down.height, pl.Int64).alias("frame"),
                                        pl.lit("z.pcap").alias("air_capture_file"))
    beside = delay.decompose(pl.concat([single, other])).filter(pl.col("frame") < down.height)
    assert_frame_equal(delay.decompose(single), beside, check_exact=True)
