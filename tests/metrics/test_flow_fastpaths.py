"""The faster paths of the flows and tcp modules against the plain ones they replace, on crafted flows:
identity numbers instead of hash joins between captures, copies counted by hash, the ACK unwrapping
kernel, the ts_echo match on one integer key, the latest segment per ACK, the direction numbers."""
from __future__ import annotations

import dataclasses
import random

import numpy as np
import polars as pl
import pytest

import xlayer.metrics.flows as fm
import xlayer.metrics.tcp as tm
from tests.metrics.test_flowmetrics import MS, A, B, _karn_trace, _packets, _tcp, _udp_stream
from xlayer.metrics.keys import with_sorted_ids

W = 1 << 32


def _same(a: pl.DataFrame, b: pl.DataFrame) -> None:
    assert a.schema == b.schema
    assert a.height == b.height
    for c in a.columns:
        assert a[c].equals(b[c], null_equal=True), (c, a.filter(~a[c].eq_missing(b[c])).head(3))


def _same_tables(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        _same(a[k], b[k])


# --- between captures: identity numbers ---

def _two_captures() -> tuple[fm.Prepared, fm.Prepared]:
    """A UDP stream with losses, reordering and a duplicated packet upstream, plus a TCP flow both ways."""
    rnd = random.Random(3)
    owd: list[float | None] = [rnd.uniform(1, 4) for _ in range(60)]
    for i in (3, 4, 5, 17, 40):
        owd[i] = None
    owd[22] = 30.0
    a, b = _udp_stream(owd)
    # the upstream capture holds packet 8 twice (one identity seen twice: ambiguous, no delay)
    a = pl.concat([a, a.slice(7, 1)]).with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).alias("frame"))
    tcp_up, tcp_down = [], []
    for i in range(40):
        t = 2000 + i * 5
        seg = _tcp(0, t, A, B, 1000 + i * 100, 7000, length=100, tsval=i + 1, ip_id=i + 1)
        ack = _tcp(0, t + 1, B, A, 7000, 1100 + i * 100, tsval=900 + i, ip_id=500 + i)
        tcp_up += [seg, dict(ack, ts_ns=ack["ts_ns"] + 2 * MS)]
        if i != 12:                       # one segment lost between the captures
            tcp_down += [dict(seg, ts_ns=seg["ts_ns"] + 2 * MS), ack]

    def add(df: pl.DataFrame, rows: list[dict], vantage: str, file: str) -> pl.DataFrame:
        more = _packets(rows, vantage, file)
        both = pl.concat([df, more], how="diagonal_relaxed").sort("ts_ns")
        return both.with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).alias("frame"))

    return fm.prepare(add(a, tcp_up, "up", "up.pcap")), fm.prepare(add(b, tcp_down, "down", "down.pcap"))


def test_numbered_ids_number_the_identities() -> None:
    """One number per distinct identity across the captures, the same for the same identity, 0..n-1."""
    ka, kb = (fm.keyed(p) for p in _two_captures())
    da, db = fm.numbered_ids([ka, kb])
    both = pl.concat([d.df.select(*fm._KEY, "_k") for d in (da, db)])
    n = both.select(fm._KEY).unique().height
    assert da.ids == db.ids == n
    assert sorted(both.unique("_k")["_k"].to_list()) == list(range(n))
    # the number follows the identity: one identity, one number, and the reverse
    assert both.unique().height == n


def test_dense_ids_give_the_hash_join_tables() -> None:
    """owd / loss / loss_bursts by array look-ups (numbered identities) equal those of the hash joins."""
    ka, kb = (fm.keyed(p) for p in _two_captures())
    hashed = fm.pair_tables(ka, kb, guard_min_ns=0)          # ids == 0: joins on the 64-bit hashes
    da, db = fm.numbered_ids([ka, kb])
    assert da.ids > 0
    dense = fm.pair_tables(da, db, guard_min_ns=0)
    _same_tables(hashed, dense)
    assert dense["owd"].height > 80 and dense["loss"]["lost"].sum() >= 6
    # the path order and the medians it is decided by: the same with the joins
    plain = [dataclasses.replace(d, ids=0) for d in (da, db)]
    _same(fm._paths([da, db], [0, 1]), fm._paths(plain, [0, 1]))



def test_between_keyed_with_hash_joins_is_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole pairwise step with identity numbers equals it with the hashes joined (no collision here)."""
    ka, kb = (fm.keyed(p) for p in _two_captures())
    dense = fm.between_keyed([ka, kb], 0)
    monkeypatch.setattr(fm, "numbered_ids", fm.exact_ids)      # the hashes kept (no collision), joined
    hashed = fm.between_keyed([ka, kb], 0)
    _same_tables(dense, hashed)
    assert dense["owd"].height > 80


def test_hash_collision_numbers_by_identity() -> None:
    """Two identities given one hash are still told apart: numbered by the identities themselves."""
    ka, kb = (fm.keyed(p) for p in _two_captures())
    want = fm.pair_tables(*fm.numbered_ids([ka, kb]), guard_min_ns=0)
    # every identity of both captures given the same "hash"
    fake = [dataclasses.replace(k, df=k.df.with_columns(pl.lit(7, pl.UInt64).alias("_k"))) for k in (ka, kb)]
    da, db = fm.numbered_ids(fake)
    assert da.ids == pl.concat([k.df.select(fm._KEY) for k in fake]).unique().height
    _same_tables(want, fm.pair_tables(da, db, guard_min_ns=0))


def _identities_by_group_by(df: pl.DataFrame) -> pl.DataFrame:
    """`keyed`'s rows the plain way: a group-by on the identity's six columns."""
    return (df.group_by(list(fm._KEY)).agg(pl.col("frame").first(), pl.col("ts_ns").first(),
                                          pl.len().cast(pl.Int32).alias("n"))
            .with_columns(pl.struct(list(fm._KEY)).hash().alias("_k")).sort("frame"))


def test_identities_by_hash_equal_the_group_by() -> None:
    """First frame, time and copies per identity, found by hash, equal the group-by's; out of frame order
    the group-by runs."""
    up, _ = _two_captures()
    got = fm._identities(up.df)
    assert got is not None and (got["n"] == 2).sum() == 1
    _same(got, _identities_by_group_by(up.df))
    # no identity repeated: every count is 1
    once = up.df.filter(pl.col("frame") != 9)
    _same(fm._identities(once), _identities_by_group_by(once))
    assert fm._identities(up.df.reverse()) is None


# --- rtt: ACK unwrapping, ts_echo key, the latest segment per ACK ---

@pytest.mark.skipif(tm._tcpk is None, reason="xlayer.metrics._tcpk not built (no C compiler)")
def test_ack_unwrap_kernel_is_polars(monkeypatch: pytest.MonkeyPatch) -> None:
    """ACK numbers unwrapped per direction by the kernel equal the window expression, across the 32-bit wrap
    both ways, with the directions' rows interleaved."""
    rnd = random.Random(5)
    rows = []
    state = {0: W - 5000, 3: 100, 6: W - 1}
    for _ in range(3000):
        g = rnd.choice(list(state))
        state[g] = (state[g] + rnd.randint(-3000, 20000)) % W
        rows.append({"g": g, "tcp_ack": state[g]})
    df = pl.DataFrame(rows, schema={"g": pl.Int64, "tcp_ack": pl.Int64})
    monkeypatch.setattr(tm, "KERNEL", True)
    k = fm._unwrapped(df, "tcp_ack", "g")
    monkeypatch.setattr(tm, "KERNEL", False)
    p = fm._unwrapped(df, "tcp_ack", "g")
    assert k.to_list() == p.to_list()
    u = df.with_columns(k.alias("u"))
    assert u.filter(pl.col("g") == 0)["u"].max() > W       # the wrap was unwrapped
    assert (u.select((pl.col("u") % W == pl.col("tcp_ack")).all()).item())


def _high_tsval_trace() -> pl.DataFrame:
    """`_karn_trace` with its TSvals and TSecrs just below 2^32 (and one past the wrap)."""
    rows = _karn_trace().to_dicts()
    for r in rows:
        for c in ("tcp_tsval", "tcp_tsecr"):
            if r[c] is not None:
                r[c] = (r[c] + W - 40) % W
    return _packets(rows)


@pytest.mark.parametrize("trace", ["karn", "high"])
def test_ts_echo_on_one_key_equals_two_keys(trace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ts_echo samples matched on (direction, TSval) as one integer equal those matched on the two."""
    prep = fm.prepare(_karn_trace() if trace == "karn" else _high_tsval_trace())
    one = fm.rtt_samples(prep)
    monkeypatch.setattr(fm, "_echo_key", lambda stamped, echo: ["g", "tsval"])
    two = fm.rtt_samples(prep)
    _same(one, two)
    assert (one["method"] == "ts_echo").sum() >= 5


def test_echo_key_refuses_what_does_not_fit() -> None:
    """Directions numbered 2^31 or more (or null) keep the two-column match."""
    st = pl.DataFrame({"g": [1, 2], "tsval": [5, W - 1]})
    ec = pl.DataFrame({"g": [1], "tsecr": [5]})
    assert fm._echo_key(st, ec) == ["_gt"]
    assert fm._echo_key(st.with_columns(pl.lit(1 << 31).alias("g")), ec) == ["g", "tsval"]
    assert fm._echo_key(st, ec.with_columns(pl.lit(None, pl.Int64).alias("g"))) == ["g", "tsval"]


@pytest.mark.parametrize("rising", [False, True])
def test_seq_ack_takes_the_latest_segment_an_ack_covers(rising: bool) -> None:
    """Two segments sent at the same instant and acknowledged by one ACK: the sample is the later frame's;
    a segment sent later in time but earlier in frame order wins on time (times not rising with the frames;
    when they rise, the later frame)."""
    s, r = 1000, 7000
    rows = [
        _tcp(1, 0, A, B, s, 0, 0x02),
        _tcp(2, 10, B, A, r, s + 1, 0x12),
        _tcp(3, 10.1, A, B, s + 1, r + 1),
        _tcp(4, 20, A, B, s + 1, r + 1, length=100),
        _tcp(5, 20, A, B, s + 101, r + 1, length=100),            # same instant as frame 4
        _tcp(6, 35, B, A, r + 1, s + 201),
        _tcp(7, 41, A, B, s + 201, r + 1, length=100),            # later in time ...
        _tcp(8, 40, A, B, s + 301, r + 1, length=100),            # ... than this one, later in frames
        _tcp(9, 55, B, A, r + 1, s + 401),
    ]
    if rising:
        rows[7]["ts_ns"] = 42 * MS
    rtt = fm.rtt_samples(fm.prepare(_packets(rows)))
    seq = rtt.filter((pl.col("method") == "seq_ack") & (pl.col("ack_frame") != 2))
    assert dict(zip(seq["ack_frame"], seq["data_frame"])) == {3: 2, 6: 5, 9: 8 if rising else 7}
    assert dict(zip(seq["ack_frame"], seq["rtt_ns"]))[9] == (13 if rising else 14) * MS


# --- tcp: direction numbers ---

def test_direction_ids_equal_sorted_ids() -> None:
    """`_direction_ids` numbers (conn, dir) as `with_sorted_ids` does, conns seen one way included."""
    rnd = np.random.default_rng(11)
    conns = [f"tcp 10.0.{i % 7}.{i}:{4000 + i} 10.1.0.1:80" for i in rnd.integers(0, 60, 4000)]
    dirs = list(rnd.choice(["a", "b"], 4000))
    one_way = [f"tcp 10.9.9.{i}:1 10.1.0.1:80" for i in range(5)]
    t = pl.DataFrame({"conn": conns + one_way, "dir": dirs + ["b"] * 5}).with_columns(
        pl.col("conn").cast(pl.Categorical), pl.col("dir").cast(tm.DIR))
    got = tm._direction_ids(t)
    want = with_sorted_ids(t.select(tm.G), tm.G, "_g").get_column("_g")
    assert got.dtype == want.dtype and got.to_list() == want.to_list()
    assert got.n_unique() == t.unique().height
