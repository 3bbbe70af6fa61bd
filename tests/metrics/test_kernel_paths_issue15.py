"""Issue 15's compiled and columnar paths of the flows, tcp and stations modules against the plain ones
they replace: identity numbering and counting by one hash pass (`_tcpk.hash_ids`), the per-direction IP id
test by the `numbered` kernel, the jitter without a sort when nothing was reordered, the latest segment per
ACK by a scatter-max, flow numbers spread from one row per flow, the first rows of cumulative-max runs, and
the station module's MPDU / MSDU / next-PPDU aggregates.  Crafted rows and the repository's sample bundles;
every comparison is exact (same rows, order and values)."""
from __future__ import annotations

import random
import types

import numpy as np
import polars as pl
import pytest

import xlayer.metrics.flows as fm
import xlayer.metrics.stations as sm
import xlayer.metrics.tcp as tm
from tests.helpers.common import REPO
from tests.metrics.test_flow_fastpaths import _same, _same_tables, _two_captures

pytestmark = pytest.mark.skipif(tm._tcpk is None, reason="xlayer.metrics._tcpk not built (no C compiler)")


def _plain(monkeypatch: pytest.MonkeyPatch) -> None:
    """Turn the compiled paths off (what XLAYER_PURE_PYTHON=1 does at import)."""
    monkeypatch.setattr(tm, "KERNEL", False)


# --- the hash_ids kernel ---

def test_hash_ids_numbers_keys_in_order_of_first_appearance() -> None:
    keys = np.array([9, -3, 9, 2**62, -3, np.iinfo(np.int64).min, 9], np.int64)
    ids, rep = np.empty(7, np.int64), np.empty(7, np.int64)
    assert tm._tcpk.hash_ids(keys, ids, rep) == 4
    assert ids.tolist() == [0, 1, 0, 2, 1, 3, 0]
    assert rep.tolist() == [0, 1, 0, 3, 1, 5, 0]
    rnd = np.random.default_rng(1).integers(-50, 50, 20_000).astype(np.int64)
    ids, rep = np.empty(len(rnd), np.int64), np.empty(len(rnd), np.int64)
    n = tm._tcpk.hash_ids(rnd, ids, rep)
    _, first_at = np.unique(rnd, return_index=True)
    assert n == len(first_at)
    assert (rnd[rep] == rnd).all() and (rep <= np.arange(len(rnd))).all()
    # numbers follow first appearance: the first rows, in order, are numbered 0, 1, 2, ...
    assert ids[np.sort(first_at)].tolist() == list(range(n))
    with pytest.raises(ValueError):
        tm._tcpk.hash_ids(rnd, ids[:-1], rep)


# --- flows: identities, numbering, copies, jitter, rtt ---

def test_identities_kernel_equals_the_hash_group_by(monkeypatch: pytest.MonkeyPatch) -> None:
    up, down = _two_captures()
    fast = [fm._identities(p.df) for p in (up, down)]
    assert (fast[0]["n"] == 2).sum() == 1                  # the packet captured twice upstream
    _plain(monkeypatch)
    for got, p in zip(fast, (up, down)):
        _same(got, fm._identities(p.df))


def test_identities_kernel_gives_up_on_a_shared_hash() -> None:
    """Two identities with one hash: None, so that `keyed` groups by the identity itself."""
    up, _ = _two_captures()
    k = up.df.select(*fm._KEY, "frame", "ts_ns", pl.lit(5, pl.UInt64).alias("_k"))
    assert fm._identities_kernel(k) is None
    assert fm._identities_kernel(k.head(1)) is not None


def test_numbering_by_kernel_gives_the_sorted_numbering_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    ka, kb = (fm.keyed(p) for p in _two_captures())
    fast = fm.numbered_ids([ka, kb])
    want_tables = fm.between_keyed([ka, kb], 0)
    _plain(monkeypatch)
    slow = fm.numbered_ids([ka, kb])
    # the same partition of the identities (the numbers themselves may be in another order)
    a = pl.concat([k.df.select(*fm._KEY, pl.col("_k").alias("x")) for k in fast])
    b = pl.concat([k.df.select(pl.col("_k").alias("y")) for k in slow])
    both = pl.concat([a, b], how="horizontal")
    assert fast[0].ids == slow[0].ids == both.select(fm._KEY).unique().height
    assert both.select("x", "y").unique().height == fast[0].ids
    _same_tables(want_tables, fm.between_keyed([ka, kb], 0))


def test_ip_numbering_by_kernel_equals_n_unique(monkeypatch: pytest.MonkeyPatch) -> None:
    """Per direction: distinct ids, one constant id, a missing id (-1), ids beyond 16 bits, a few repeats."""
    rnd = random.Random(4)
    g, kid = [], []
    per_dir = ((0, list(range(40))), (2, [7] * 40), (3, list(range(39)) + [-1]), (5, [70_000 + i for i in range(30)]),
               (6, [rnd.randrange(5) for _ in range(40)]), (9, [1, 2, 1, 2, 1, 2, 1, 2, 1]))
    for d, ids in per_dir:
        g += [d] * len(ids)
        kid += ids
    order = list(range(len(g)))
    rnd.shuffle(order)                                       # directions interleaved, as in frame order
    rows = pl.DataFrame({"g": [g[i] for i in order], "k_id": [kid[i] for i in order]},
                        schema={"g": pl.Int64, "k_id": pl.Int64})
    fast = fm._numbers_ip_packets(rows).sort("g")
    assert fast["idinfo"].to_list() == [True, False, False, True, False, False]
    _plain(monkeypatch)
    _same(fast, fm._numbers_ip_packets(rows).sort("g"))


def _owd(ts_b: list[int], frame_b: list[int], fh: list[int]) -> pl.DataFrame:
    owd = [(i * 37) % 11 * 1000 for i in range(len(fh))]
    return pl.DataFrame({"fh": fh, "ts_b": ts_b, "frame_b": frame_b, "owd_ns": owd},
                        schema={"fh": pl.UInt64, "ts_b": pl.Int64, "frame_b": pl.Int64, "owd_ns": pl.Int64})


def _jitter_by_sort(owd: pl.DataFrame) -> pl.Series:
    """The RFC 3550 jitter in b's arrival order, by a sort and back (the plain way)."""
    o = owd.with_row_index("_r").sort("fh", "ts_b", "frame_b")
    j = o.select("_r", fm.rfc3550_jitter((pl.col("owd_ns") - pl.col("owd_ns").shift(1).over("fh")).abs().fill_null(0))
                 .over("fh").alias("jitter_ns"))
    return j.sort("_r").get_column("jitter_ns")


@pytest.mark.parametrize("case", ["ordered", "tie_by_frame", "reordered", "flows_out_of_order"])
def test_arrival_jitter_with_and_without_the_sort(case: str) -> None:
    fh = [1] * 6 + [3] * 5
    ts = [10, 20, 30, 40, 50, 60, 5, 6, 7, 8, 9]
    fr = list(range(1, 12))
    if case == "tie_by_frame":
        ts[2] = ts[1]
    if case == "reordered":
        ts[3], ts[4] = 55, 45
    if case == "flows_out_of_order":
        fh = [3] * 6 + [1] * 5
    owd = _owd(ts, fr, fh)
    assert fm._in_arrival_order(owd) == (case in ("ordered", "tie_by_frame"))
    got = fm._arrival_jitter(owd)
    want = _jitter_by_sort(owd)
    assert got.to_list() == want.to_list()
    assert got.max() > 0


def test_latest_per_ack_scatter_equals_the_windows() -> None:
    rnd = random.Random(8)
    acks = sorted(rnd.sample(range(5, 3000), 200))
    rows = [(f, f * 10, a, a * 10) for a in acks for f in rnd.sample(range(1, a), 3)]
    m = pl.DataFrame(rows, schema={"frame": pl.Int64, "ts_ns": pl.Int64, "ack_frame": pl.Int64, "ack_ts": pl.Int64},
                     orient="row")
    windows = m.filter(pl.col("frame") == pl.col("frame").max().over("ack_frame"))
    got = fm._latest_per_ack(m, True)
    _same(got, windows)
    assert got.height == m.unique("ack_frame").height
    # frame numbers too large for an array: the windows
    big = m.with_columns(pl.col("ack_frame") * 10**9)
    _same(fm._latest_per_ack(big, True), big.filter(pl.col("frame") == pl.col("frame").max().over("ack_frame")))
    # times not rising with the frames: the latest by time first
    odd = m.with_columns((-pl.col("ts_ns")).alias("ts_ns"))
    _same(fm._latest_per_ack(odd, False),
          odd.filter(pl.col("ts_ns") == pl.col("ts_ns").max().over("ack_frame"))
          .filter(pl.col("frame") == pl.col("frame").max().over("ack_frame")))


def test_flow_numbers_are_the_per_row_ones() -> None:
    up, _ = _two_captures()
    df = up.df
    names = up.flows.select("fid", "flow", "conn", "dir")
    rows = df.select("fid", "fh", "g").join(names, on="fid", how="left", maintain_order="left")
    assert rows.select((pl.col("fh") == pl.col("flow").hash()).all()).item()
    # one conversation per g >> 1, its direction in the last bit
    per = rows.unique(["conn", "dir"]).select("conn", "dir", "g")
    assert per.select(((pl.col("g") % 2) == (pl.col("dir") == "b").cast(pl.Int64)).all()).item()
    convs = per.group_by("conn").agg((pl.col("g") // 2).n_unique().alias("c"))
    assert convs["c"].to_list() == [1] * convs.height and per["g"].n_unique() == per.height


def _sample_timeline(name: str):
    from xlayer.metrics import open_timeline
    return open_timeline(REPO / "samples" / name, cache=False)


@pytest.mark.parametrize("sample", ["sim-fragmentation", "ns3-ht", "sim-performance_anomaly"])
def test_modules_on_samples_with_and_without_kernels(sample: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every table of the flows, tcp and stations modules on a sample bundle: the same with the compiled
    paths as with the plain polars ones."""
    tl = _sample_timeline(sample)
    fast = {m.__name__: m.build(tl) for m in (fm, tm, sm)}
    tl._shared.clear()
    _plain(monkeypatch)
    for m in (fm, tm, sm):
        _same_tables(fast[m.__name__], m.build(tl))
    assert fast[fm.__name__]["owd"].height > 0 and fast[sm.__name__]["stations"].height > 0


# --- tcp: the first rows of cumulative-max runs ---

def test_direction_order_and_first_of_runs() -> None:
    rnd = random.Random(2)
    rows = []
    for conn in ("c1", "c2"):
        for d in ("a", "b"):
            cm = 0
            for f in sorted(rnd.sample(range(1, 400), 60)):
                cm = max(cm, rnd.randrange(0, 4000))
                rows.append((conn, d, f, cm))
    df = pl.DataFrame(rows, schema={"conn": pl.Categorical, "dir": tm.DIR, "frame": pl.Int64, "cmax": pl.Int64},
                      orient="row")
    assert tm._in_direction_order(df)
    _same(tm._first_of_runs(df, "cmax"), df.unique([*tm.G, "cmax"], keep="first", maintain_order=True))
    assert not tm._in_direction_order(df.reverse())
    assert not tm._in_direction_order(pl.concat([df.slice(60, 60), df.head(60), df.slice(120)]))
    assert not tm._in_direction_order(pl.concat([df.head(30), df.slice(60, 10), df.slice(30, 30), df.slice(70)]))
    with_null = df.with_columns(pl.when(pl.col("frame") % 7 == 0).then(None).otherwise(pl.col("cmax")).alias("cmax"))
    _same(tm._first_of_runs(with_null, "cmax"), with_null.unique([*tm.G, "cmax"], keep="first", maintain_order=True))


# --- stations: MPDU and MSDU aggregates, the record after a PPDU ---

def _data_rows(seed: int = 6) -> pl.DataFrame:
    """Data transmissions of two stations: retries, fragments, non-QoS frames (no TID), lost sequence numbers."""
    rnd = random.Random(seed)
    rows, i = [], 0
    for _ in range(400):
        sta = rnd.choice([1, 2])
        down = rnd.random() < 0.7
        ta, ra = (9, sta) if down else (sta, 9)
        tid = rnd.choice([0, 0, 5, None])
        useq = rnd.randrange(0, 60)
        frag = rnd.choice([0, 0, 0, 1, 2, None])
        lost = rnd.random() < 0.3                            # no transmission of it confirmed
        for k in range(rnd.choice([1, 1, 1, 2, 7])):
            i += 1
            rows.append((i, i * 1000, sta, 9, "down" if down else "up", ta, ra, tid, useq, frag,
                         k > 0 or rnd.random() < 0.1, not lost and rnd.random() < 0.6))
    schema = {"frame": pl.Int64, "ts_ns": pl.Int64, "station": pl.UInt32, "bss": pl.UInt32, "direction": pl.String,
              "ta": pl.UInt32, "ra": pl.UInt32, "tid": pl.Int32, "useq": pl.Int64, "frag": pl.Int32,
              "retry": pl.Boolean, "acked": pl.Boolean}
    return pl.DataFrame(rows, schema=schema, orient="row")


def _by_key(df: pl.DataFrame, key: list[str]) -> pl.DataFrame:
    return df.sort(key, nulls_last=True)


def test_failed_and_msdus_by_kernel_equal_the_group_by(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _data_rows()
    failed, msdu = sm._failed(data), sm._msdu_fragments(data)
    assert failed["failed"].sum() > 0 and msdu["n"].null_count() > 0 and msdu["n"].max() == 3
    _plain(monkeypatch)
    _same(_by_key(failed, sm._MPDU), _by_key(sm._failed(data), sm._MPDU))
    _same(_by_key(msdu, sm._MPDU[:-1]), _by_key(sm._msdu_fragments(data), sm._MPDU[:-1]))


def test_station_numbering_gives_up_when_the_kernel_merges_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hash shared by different keys (here: a kernel numbering every row 0) is caught: the group-by runs."""
    def merge_all(keys: np.ndarray, ids: np.ndarray, rep: np.ndarray) -> int:
        ids[:] = 0
        rep[:] = 0
        return 1
    data = _data_rows(7)
    want = _by_key(sm._failed(data), sm._MPDU)
    monkeypatch.setattr(tm, "_tcpk", types.SimpleNamespace(hash_ids=merge_all))
    assert sm._numbered(data, sm._MPDU) is None
    _same(_by_key(sm._failed(data), sm._MPDU), want)


def test_after_ppdu_by_runs_equals_the_joins() -> None:
    rnd = random.Random(9)
    ppdu, p = [], 1
    for _ in range(300):
        ppdu += [p] * rnd.choice([1, 1, 3, 8])
        p += 1
    n = len(ppdu)
    d = pl.DataFrame({"ppdu": pl.Series(ppdu, dtype=pl.UInt32), "ts_ns": [rnd.randrange(10**9) for _ in range(n)],
                      "type": pl.Series([rnd.choice([1, 2]) for _ in range(n)], dtype=pl.Int32),
                      "sub": pl.Series([rnd.choice([9, 13]) for _ in range(n)], dtype=pl.Int32),
                      "ra": pl.Series([rnd.randrange(4) for _ in range(n)], dtype=pl.UInt32),
                      "bad": [rnd.random() < 0.1 for _ in range(n)]})
    x = d.with_row_index("_i").filter(pl.col("type") == 2).select("_i", "ppdu")
    fast = sm._after_ppdu(d, x)
    # the plain joins: PPDU numbers not starting at 1 take that path
    slow = sm._after_ppdu(d.with_columns(pl.col("ppdu") + 10), x.with_columns(pl.col("ppdu") + 10)).sort("_i")
    assert fast.get_column("r_type").null_count() <= 1         # only the last PPDU has no next record
    _same(fast.drop("ppdu"), slow.drop("ppdu"))
