"""Issue 15 (the cross-layer join's time and memory): each shortcut gives what the general path gives."""
from __future__ import annotations

import numpy as np
import polars as pl
from polars.testing import assert_frame_equal, assert_series_equal

from xlayer.metrics import join

RNG = np.random.default_rng(21)
MACS = ["02:00:00:00:00:01", "02:00:00:00:00:02", "02:00:00:00:00:03"]


def _some_null(values: list, share: float = 0.2) -> list:
    return [None if RNG.random() < share else v for v in values]


def _attempts(n: int) -> pl.DataFrame:
    """Return attempts as `_analyse_usable` hands them to `_msdu_groups`: record order, groups of one attempt
    and of several (retries, fragments), nulls where the air records have them."""
    gid = np.sort(RNG.integers(0, int(n * 0.7), n))
    RNG.shuffle(gid[: n // 3])          # a group's attempts need not be adjacent records
    frag = np.where(RNG.random(n) < 0.2, RNG.integers(0, 3, n), 0)
    return pl.DataFrame({
        "_i": pl.Series(np.arange(n), dtype=pl.UInt32),
        "frame": pl.Series(np.arange(n) + 1, dtype=pl.Int64),
        "ts_ns": pl.Series(np.arange(n) * 1000, dtype=pl.Int64),
        "tx_start_ns": pl.Series(_some_null((np.arange(n) * 1000 - 90).tolist(), 0.05), dtype=pl.Int64),
        "key": pl.Series(_some_null(RNG.integers(0, 2**63, n).tolist()), dtype=pl.UInt64),
        "direction": RNG.choice(["down", "up", "other"], n).tolist(),
        "station": _some_null(RNG.choice(MACS, n).tolist(), 0.05),
        "ta": RNG.choice(MACS, n).tolist(), "ra": RNG.choice(MACS, n).tolist(),
        "mac_seq": pl.Series(RNG.integers(0, 4096, n), dtype=pl.UInt16),
        "frag": pl.Series(frag, dtype=pl.UInt8),
        "tid": pl.Series(_some_null(RNG.integers(0, 8, n).tolist()), dtype=pl.UInt8),
        "retry": (RNG.random(n) < 0.3).tolist(), "more_frag": (RNG.random(n) < 0.15).tolist(),
        "rate_mbps": _some_null(RNG.choice([6.0, 54.0, 65.0], n).tolist(), 0.1),
        "ampdu_ref": pl.Series(_some_null(RNG.integers(0, 50, n).tolist(), 0.5), dtype=pl.UInt32),
        "protected": (RNG.random(n) < 0.5).tolist(), "nokey": (RNG.random(n) < 0.5).tolist(),
        "pn": pl.Series(_some_null(RNG.integers(0, 2**40, n).tolist()), dtype=pl.UInt64),
        "amsdu": (RNG.random(n) < 0.1).tolist(),
        "body": pl.Series(_some_null(RNG.integers(20, 1600, n).tolist(), 0.1), dtype=pl.Int64),
        "flow": _some_null(RNG.choice(["f1", "f2"], n).tolist()),
        "ip_id": pl.Series(_some_null(RNG.integers(0, 65536, n).tolist()), dtype=pl.UInt32),
        "ip_len": pl.Series(_some_null(RNG.integers(40, 1500, n).tolist()), dtype=pl.UInt32),
        "gid": pl.Series(gid, dtype=pl.Int64),
        "attempt": pl.Series(np.zeros(n), dtype=pl.UInt32),
        "acked_by": RNG.choice(["ack", "blockack", "none"], n).tolist(),
        "ack_frame": pl.Series(_some_null(RNG.integers(0, n, n).tolist()), dtype=pl.Int64),
    }).with_columns((pl.col("acked_by") != "none").alias("acked"),
                    pl.Series("useq", RNG.integers(0, 10_000, n), dtype=pl.Int64),
                    pl.Series("holes", RNG.integers(0, 50, n), dtype=pl.Int64))


def test_msdu_groups_of_single_attempts_as_the_group_by():
    att = _attempts(5000)
    several = att.get_column("gid").is_duplicated()
    assert several.any() and not several.all()
    for part in (att, att.filter(~several), att.filter(several), att.head(0)):
        got = join._msdu_groups(part).sort("gid")
        want = join._msdu_groups_by(part).sort("gid")
        assert got.schema == want.schema
        assert_frame_equal(got, want, check_exact=True)


def test_positions_and_positional_join_as_a_join_on_the_row_number():
    all_i = pl.Series("_i", np.sort(RNG.choice(10_000, 6000, replace=False)), dtype=pl.UInt32)
    sub = pl.Series("_i", np.sort(RNG.choice(all_i.to_numpy(), 2500, replace=False)), dtype=pl.UInt32)
    assert (all_i.to_numpy()[join._positions(all_i, sub)] == sub.to_numpy()).all()
    every = pl.Series("_i", np.arange(100), dtype=pl.UInt32)
    assert (join._positions(every, sub.filter(sub < 100)) == sub.filter(sub < 100).to_numpy()).all()
    # values keyed by distinct row numbers in no order; some wanted numbers have none, one is past them all,
    # one is null
    keys = pl.Series("_i", RNG.permutation(all_i.to_numpy()), dtype=pl.UInt32)
    right = pl.DataFrame([keys, pl.Series("useq", _some_null(RNG.integers(-50, 10**6, keys.len()).tolist(), 0.1),
                                          dtype=pl.Int64),
                          pl.Series("ta", RNG.choice(MACS, keys.len()).tolist(), dtype=pl.Categorical)])
    left = pl.DataFrame([pl.Series("_i", [*RNG.integers(0, 10_000, 3000), 20_000, None], dtype=pl.UInt32),
                         pl.Series("x", np.arange(3002))])
    assert join.index_rows(right.get_column("_i"), left.get_column("_i")) is not None
    got = join._join_left(left, right, ["_i"])
    ref = left.join(right, on="_i", how="left", maintain_order="left")
    assert got.get_column("useq").null_count() > right.get_column("useq").null_count() // 2   # both kinds of null
    assert_frame_equal(got, ref, check_exact=True)
    empty = join._join_left(left, right.head(0), ["_i"])
    assert_frame_equal(empty, left.join(right.head(0), on="_i", how="left", maintain_order="left"))
    # a repeated key, a negative one, or keys far larger than the tables: the hash join
    for r in (pl.concat([right, right.head(5)]), right.with_columns(-pl.col("_i").cast(pl.Int64) - 1),
              right.with_columns(pl.col("_i").cast(pl.Int64) * 10**9)):
        assert join.index_rows(r.get_column("_i"), left.get_column("_i").cast(r.schema["_i"])) is None
        lf = left.with_columns(pl.col("_i").cast(r.schema["_i"]))
        assert_frame_equal(join._join_left(lf, r, ["_i"]), lf.join(r, on="_i", how="left", maintain_order="left"))


def test_compact_keeps_values_and_types_and_sheds_the_shared_buffers():
    n = 50_000
    big = pl.DataFrame({"ta": RNG.choice(MACS, n).tolist(), "flow": _some_null([f"flow-{i}" for i in range(n)]),
                        "x": np.arange(n)})
    part = big.head(4000)                       # views into the big table's buffers
    got = join._compact(part)
    assert_frame_equal(got, part, check_exact=True)
    # few distinct values: views of one small copy each (16 bytes a row, no copy of the text per row)
    ta = join._compact(pl.DataFrame({"ta": RNG.choice(MACS, n).tolist()}))
    assert ta.estimated_size() < 20 * n
    assert_frame_equal(join._compact(part.head(0)), part.head(0))


def test_block_ack_pairs_as_the_address_bits():
    n = 300
    ba = pl.DataFrame({
        "_i": pl.Series(np.sort(RNG.choice(5000, n, replace=False)), dtype=pl.UInt32),
        "frame": pl.Series(np.arange(n) * 3, dtype=pl.Int64),
        "ts_ns": pl.Series(np.arange(n) * 10, dtype=pl.Int64),
        "wlan_ta": _some_null(RNG.choice(MACS, n).tolist(), 0.05), "wlan_ra": RNG.choice(MACS, n).tolist(),
        "wlan_ba_ssn": pl.Series(_some_null(RNG.integers(0, 4096, n).tolist(), 0.05), dtype=pl.UInt16),
        "wlan_ba_bitmap": _some_null([RNG.bytes(int(RNG.choice([8, 32]))).hex() for _ in range(n)], 0.05),
    })
    got = join._ba_pairs(ba, join._ba_bits(ba, ("ba_i", "mac_seq"))).sort("ta", "ra", "mac_seq")
    want = (join._ba_bits(ba, ("ba_ta", "ba_ra", "mac_seq"))
            .select(pl.col("ba_ra").alias("ta"), pl.col("ba_ta").alias("ra"), "mac_seq").unique()
            .sort("ta", "ra", "mac_seq"))
    assert want.height > n
    assert_frame_equal(got, want, check_exact=True)


def test_capture_loss_direction_is_the_same_on_a_tie():
    # a transmitter seen as much sending up as sending other frames: the tie is broken the same way each time
    space = pl.DataFrame({"ta": ["a"] * 4 + ["b"] * 3, "ra": pl.Series([None] * 7, dtype=pl.Utf8), "_tid": pl.Series([-1] * 7, dtype=pl.Int16),
                          "useq": list(range(4)) + list(range(3)), "holes": [0] * 7,
                          "direction": ["up", "other", "other", "up", "down", "down", "up"]})
    none = pl.DataFrame(schema={"ta": pl.Utf8, "orphan_acks": pl.Int64})
    ba = pl.DataFrame(schema={"ta": pl.Utf8, "ra": pl.Utf8, "blockack_missed": pl.Int64})
    # (the directions as strings, and as the enum `_seq_spaces` makes of them: the same least of the modes)
    for sp in (space, space.with_columns(pl.col("direction").cast(join._DIRECTION))):
        seen = {tuple(join._capture_loss("s.pcap", sp.sample(fraction=1.0, shuffle=True, seed=k), none, ba)
                      .sort("ta", nulls_last=True).get_column("direction")) for k in range(12)}
        assert seen == {("other", "down", "all")}


def _block_acks(n: int) -> pl.DataFrame:
    """Return Block Acks with bitmaps of several lengths, some missing, odd, empty or no hex at all."""
    maps = [RNG.bytes(int(RNG.choice([8, 32, 128]))).hex() for _ in range(n)]
    for k in RNG.choice(n, 12, replace=False):
        maps[k] = str(RNG.choice(["", "abc", None]))
    maps[int(RNG.integers(n))] = "zz" * 8          # no hex: every 8-byte bitmap is skipped with it
    return pl.DataFrame({
        "_i": pl.Series(np.sort(RNG.choice(5000, n, replace=False)), dtype=pl.UInt32),
        "frame": pl.Series(np.arange(n) * 3, dtype=pl.Int64),
        "wlan_ba_ssn": pl.Series(_some_null(RNG.integers(0, 4096, n).tolist(), 0.05), dtype=pl.UInt16),
        "wlan_ba_bitmap": pl.Series([None if m == "None" else m for m in maps], dtype=pl.String),
    })


def test_block_ack_marks_as_the_bits_set():
    for ba in (_block_acks(400), _block_acks(400).with_columns(pl.col("wlan_ba_bitmap").str.replace("zz", "00"))):
        m = 20_000
        b = pl.Series(_some_null(RNG.integers(0, ba.height, m).tolist(), 0.2), dtype=pl.UInt32)
        # numbers near each Block Ack's start (inside and past its bitmap, across the wrap) and anywhere
        ssn = ba.get_column("wlan_ba_ssn").fill_null(0).to_numpy().astype(np.int64)[b.fill_null(0).to_numpy()]
        seq = pl.Series(np.where(RNG.random(m) < 0.7, (ssn + RNG.integers(-20, 1100, m)) % 4096,
                                 RNG.integers(0, 4096, m)), dtype=pl.UInt16)
        got = join._ba_marked(ba, b, seq)
        bits = join._ba_bits(ba, ("ba_frame", "mac_seq"))
        frame = ba.get_column("frame").gather(b)
        want = (pl.DataFrame({"f": frame, "s": seq.cast(pl.Int64)})
                .select((pl.col("f") * 4096 + pl.col("s")).is_in((bits["ba_frame"] * 4096 + bits["mac_seq"]).implode())
                        .fill_null(False)).to_series())
        assert 0 < got.sum() < m
        assert_series_equal(got, want, check_names=False)
    # frame numbers shared by two Block Acks, or a bitmap longer than the sequence space: not read per bitmap
    ba = _block_acks(50)
    assert join._ba_marked(ba.with_columns(pl.lit(7, pl.Int64).alias("frame")), b.head(0), seq.head(0)) is None
    long = ba.with_columns(pl.lit("ff" * (join.BA_MAX_BYTES + 1)).alias("wlan_ba_bitmap"))
    assert join._ba_marked(long, b.head(0), seq.head(0)) is None


def test_client_copies_of_packets_with_distinct_keys_as_the_asof_join():
    n = 4000
    down = pl.DataFrame({"_w": pl.Series(RNG.permutation(n), dtype=pl.UInt32),
                         "key": pl.Series(RNG.permutation(n) * 7919, dtype=pl.UInt64),
                         "ts_ns": pl.Series(RNG.integers(0, 10**11, n), dtype=pl.Int64)})
    # copies before, at, within and past the window after each packet (some packets none, some several)
    pick = RNG.integers(0, n, 3 * n)
    lag = RNG.choice([-5, 0, 1, join.MATCH_WINDOW_NS // 2, join.MATCH_WINDOW_NS, join.MATCH_WINDOW_NS + 1], 3 * n)
    client = pl.DataFrame({"key": down["key"].gather(pick), "ts_ns": down["ts_ns"].gather(pick) + pl.Series(lag),
                           "_ap": down["ts_ns"].gather(pick)})
    got = join._client_has(down, client, True)
    want = join._client_has(down, client, False)
    assert 0 < got.sum() < n
    assert_series_equal(got, want)


def test_packets_by_station_as_the_joins_on_the_addresses():
    n = 20_000
    ips = [f"10.0.0.{i}" for i in range(6)]
    w = pl.DataFrame({"_w": pl.Series(np.arange(n), dtype=pl.UInt32), "ip_src": RNG.choice(ips, n).tolist(),
                      "ip_dst": RNG.choice(ips, n).tolist(), "x": RNG.random(n)})
    one = pl.DataFrame({"station": MACS, "ip": ips[:3]}).with_columns(pl.col("station").cast(pl.Categorical))
    # an IP behind two stations: the joins (each of its packets once per station)
    two = pl.concat([one, one.head(1).with_columns(pl.lit(MACS[1]).cast(pl.Categorical).alias("station"))])
    for sta in (one, two):
        down, up = join._by_station(w, sta)
        want_down = w.join(sta.rename({"ip": "ip_dst"}), on="ip_dst", how="inner", maintain_order="left")
        want_up = (w.join(sta.rename({"ip": "ip_src"}), on="ip_src", how="inner", maintain_order="left")
                   .join(want_down.select("_w"), on="_w", how="anti", maintain_order="left"))
        assert_frame_equal(down.sort("_w", "station"), want_down.sort("_w", "station"))
        assert_frame_equal(up.sort("_w", "station"), want_up.sort("_w", "station"))
        assert down.height > 0 and up.height > 0


def test_positional_join_on_a_categorical_key_as_the_hash_join():
    n = 5000
    left = pl.DataFrame({"station": _some_null(RNG.choice([*MACS, "02:00:00:00:00:09"], n).tolist(), 0.1),
                         "x": np.arange(n)}).with_columns(pl.col("station").cast(pl.Categorical))
    right = pl.DataFrame({"station": MACS[::-1], "v": [1.5, None, 3.5]}).with_columns(
        pl.col("station").cast(pl.Categorical))
    want = left.join(right, on="station", how="left", maintain_order="left")
    assert_frame_equal(join._join_left(left, right, ["station"]), want)
    # the same values as strings on one side: no codes to compare, the hash join
    assert_frame_equal(join._join_left(left.with_columns(pl.col("station").cast(pl.String)),
                                       right.with_columns(pl.col("station").cast(pl.String)), ["station"]),
                       want.with_columns(pl.col("station").cast(pl.String)))


def test_block_ack_numbers_not_seen_as_the_anti_join():
    n = 3000
    def frame(k: int) -> pl.DataFrame:
        return pl.DataFrame({"ta": _some_null(RNG.choice(MACS, k).tolist(), 0.05),
                             "ra": _some_null(RNG.choice(MACS, k).tolist(), 0.05),
                             "mac_seq": pl.Series(RNG.integers(0, 300, k), dtype=pl.Int64)}).with_columns(
            pl.col("ta", "ra").cast(pl.Categorical))
    bits, att = frame(n).unique(), frame(n).with_columns(pl.col("mac_seq").cast(pl.UInt16))
    got = join._not_seen(bits, att)
    seen = att.select("ta", "ra", pl.col("mac_seq").cast(pl.Int64)).unique()
    want = bits.join(seen, on=["ta", "ra", "mac_seq"], how="anti")
    assert 0 < got.height < bits.height and got.select(pl.col("ta").is_null().any()).item()
    assert_frame_equal(got.sort(pl.all()), want.sort(pl.all()))
    # addresses as strings: the join itself
    s = [x.with_columns(pl.col("ta", "ra").cast(pl.String)) for x in (bits, att)]
    assert_frame_equal(join._not_seen(*s).sort(pl.all()), want.with_columns(pl.col("ta", "ra").cast(pl.String))
                       .sort(pl.all()))
