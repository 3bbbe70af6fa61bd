"""The compiled TCP state machines (xlayer/metrics/_tcpk.c) against the polars expressions they replace:
the same tables, row for row, on hand-made conversations (reordering, sequence wrap, SACK / D-SACK,
zero-window probes, keep-alives, retransmitted SYN and FIN, a flow seen one way only) and random ones."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest

import xlayer.metrics.flows as fm
import xlayer.metrics.tcp as tm
from parsers.schema import SCHEMA
from xlayer.timeline.flowkey import flow_exprs

pytestmark = pytest.mark.skipif(tm._tcpk is None, reason="xlayer.metrics._tcpk not built (no C compiler)")

SYN, FIN, RST, ACK = 0x02, 0x01, 0x04, 0x10
W = 2**32


def _table(rows: list[dict]) -> pl.DataFrame:
    """Return a packet table from row dicts (conversation c: client 10.0.0.c:5000+c -> server 10.0.1.1:80)."""
    out = []
    for i, r0 in enumerate(rows, 1):
        r = dict(r0)
        c, fwd = r.pop("c", 1), r.pop("fwd", True)
        cli, srv = (f"10.0.0.{c}", 5000 + c), ("10.0.1.1", 80)
        (src, sport), (dst, dport) = (cli, srv) if fwd else (srv, cli)
        d = {"ip_version": 4, "ip_proto": 6, "ip_ttl": 64 if fwd else 61, "ip_frag_offset": 0, "tcp_win": 1000,
             "tcp_flags": ACK, "frame": i, "ts_ns": 1_000_000_000 + r.pop("t_us", i * 1000) * 1000,
             "ip_src": src, "ip_dst": dst, "sport": sport, "dport": dport, **r}
        out.append(d)
    cols = [c for c in SCHEMA if any(c in d for d in out)]
    return pl.DataFrame([{c: d.get(c) for c in cols} for d in out], schema={c: SCHEMA[c] for c in cols})


def _scenario() -> pl.DataFrame:
    """Return conversations exercising every state the kernels track."""
    M, S = 1000, W - 2500                        # conversation 1 wraps the 32-bit sequence space
    rows: list[dict] = []
    t = [0]

    def at(step: int = 1000) -> int:
        t[0] += step
        return t[0]

    def data(c: int, seq: int, n: int = M, ack: int = 1, **kw) -> dict:
        return {"c": c, "tcp_seq": seq % W, "tcp_len": n, "tcp_ack": ack % W, "t_us": at(), **kw}

    def ack(c: int, a: int | None, seq: int = 1, win: int = 1000, **kw) -> dict:
        return {"c": c, "fwd": False, "tcp_seq": seq % W, "tcp_ack": None if a is None else a % W, "tcp_len": 0,
                "tcp_win": win, "t_us": at(), **kw}

    # conversation 1: handshake (the SYN sent twice), data across the wrap, reordering, a network copy,
    # duplicate ACKs with SACK, a fast retransmission, a D-SACK, an RTO, a zero window and its probes
    rows += [{"c": 1, "tcp_seq": S - 1, "tcp_flags": SYN, "tcp_ack": None, "ip_id": 1, "tcp_wscale": 2, "t_us": at()},
             {"c": 1, "tcp_seq": S - 1, "tcp_flags": SYN, "tcp_ack": None, "ip_id": 2, "tcp_wscale": 2,
              "t_us": at(1_000_000)},
             {"c": 1, "fwd": False, "tcp_seq": 7, "tcp_flags": SYN | ACK, "tcp_ack": S, "tcp_wscale": 1, "t_us": at()},
             {"c": 1, "tcp_seq": S, "tcp_ack": 8, "t_us": at()}]
    ids = iter(range(10, 1000))
    for k in (0, 1, 3, 4, 2):                    # segment 2 arrives late (lower IP id: sent before 3 and 4)
        rows.append(data(1, S + k * M, ack=8, ip_id=10 + k, tcp_tsval=100 + k, tcp_tsecr=5))
    rows.append(ack(1, S + 2 * M, seq=8, tcp_tsval=6, tcp_tsecr=101))
    rows += [data(1, S + k * M, ack=8, ip_id=20 + k, tcp_tsval=110 + k) for k in (5, 6)]
    rows.append(dict(rows[-1], t_us=at(100)))   # a byte-identical copy 100 us later
    sack = [(np.array([S + 6 * M, S + 7 * M]) % W).astype(np.uint32)]
    rows += [ack(1, S + 5 * M, seq=8, tcp_sack=sack, tcp_tsval=7, tcp_tsecr=105) for _ in range(4)]
    rows.append(data(1, S + 5 * M, ack=8, ip_id=next(ids), tcp_tsval=120))        # fast retransmission
    dsack = [(np.array([S + 5 * M, S + 6 * M]) % W).astype(np.uint32), (np.array([S + 5 * M, S + 6 * M]) % W).astype(np.uint32)]
    rows.append(ack(1, S + 7 * M, seq=8, tcp_sack=dsack, tcp_tsval=8, tcp_tsecr=120))
    rows.append(data(1, S + 7 * M, ack=8, ip_id=next(ids), tcp_tsval=130))
    rows.append(data(1, S + 7 * M, ack=8, ip_id=next(ids), tcp_tsval=400, t_us=at(900_000)))   # RTO
    rows.append(ack(1, S + 8 * M, seq=8, win=0))                                 # zero window
    rows += [data(1, S + 8 * M, n=1, ack=8, ip_id=next(ids)) for _ in range(2)]   # zero-window probes
    rows += [ack(1, S + 8 * M, seq=8, win=0), ack(1, S + 8 * M, seq=8, win=500)]
    rows.append(data(1, S + 8 * M, ack=8, ip_id=next(ids), tcp_tsval=500))
    # the server sends data back (its sequence numbers, the client's ACKs)
    rows += [ack(1, S + 9 * M, seq=8 + k * 100, tcp_len=100) for k in range(3)]
    rows.append({"c": 1, "tcp_seq": (S + 9 * M) % W, "tcp_ack": 308, "tcp_len": 0, "t_us": at()})
    # keep-alives both ways (one byte below "next expected"), then the FIN sent twice and the close
    rows += [data(1, S + 9 * M - 1, n=0, ack=308, t_us=at(5_000_000)), ack(1, S + 9 * M, seq=307),
             data(1, S + 9 * M - 1, n=1, ack=308), ack(1, S + 9 * M, seq=308)]
    rows += [data(1, S + 9 * M, n=0, ack=308, tcp_flags=FIN | ACK), data(1, S + 9 * M, n=0, ack=308, tcp_flags=FIN | ACK),
             ack(1, S + 9 * M + 1, seq=308, tcp_flags=FIN | ACK), data(1, S + 9 * M + 1, n=0, ack=309),
             data(1, S + 9 * M + 1, n=0, ack=309, tcp_flags=RST)]
    # conversation 2: seen one way only (no SYN, no ACKs back), interleaved with conversation 3, whose ACK
    # numbers wrap and whose packets carry no window or IP id; null ACK numbers on ACK-flagged rows
    for k in range(12):
        rows.append(data(2, 5000 + (k if k != 7 else 3) * M, ack=77, ip_id=0))
        rows.append(data(3, 40 + k * 10, n=10, ack=W - 5 + k * 3, tcp_win=None, ip_id=None))
        rows.append(ack(3, 50 + k * 10 if k % 4 else None, seq=W - 5 + k * 3))
    return _table(rows)


def _random(n: int, seed: int) -> pl.DataFrame:
    """Return `n` random TCP packets of a few conversations: sequence jumps back and forth (and across the
    wrap), random flags, windows, SACK blocks and missing values."""
    g = np.random.default_rng(seed)
    c = g.integers(1, 5, n)
    fwd = g.random(n) < 0.6
    base = g.integers(0, W, 5)
    seq = (base[c] + np.cumsum(g.choice([0, 1, 1000, 1000, -1000, -1, 3000], n))) % W
    ack = (base[(c + 2) % 5] + np.cumsum(g.choice([0, 0, 1000, -1000, 2**31], n))) % W
    flags = g.choice([ACK, ACK, ACK, ACK | 0x08, SYN, SYN | ACK, FIN | ACK, RST, 0], n)
    ln = g.choice([0, 0, 1, 1000, 1000, 500], n)
    rows = []
    for i in range(n):
        r = {"c": int(c[i]), "fwd": bool(fwd[i]), "tcp_seq": int(seq[i]), "tcp_ack": int(ack[i]),
             "tcp_flags": int(flags[i]), "tcp_len": int(ln[i]), "tcp_win": int(g.choice([0, 1000, 1000, 500])),
             "ip_id": int(g.integers(0, 50)), "tcp_tsval": int(g.integers(0, 20)), "tcp_tsecr": int(g.integers(0, 20)),
             "t_us": int(i * 1000 + g.integers(0, 400_000) * (g.random() < 0.05))}
        for k in ("tcp_ack", "tcp_win", "ip_id", "tcp_tsval"):
            if g.random() < 0.05:
                r[k] = None
        if g.random() < 0.1:
            left = (int(ack[i]) + int(g.integers(-3000, 3000))) % W
            r["tcp_sack"] = [np.array([left, (left + 1000) % W], np.uint32)]
        rows.append(r)
    rows.sort(key=lambda r: r["t_us"])
    return _table(rows)


def _both(fn, monkeypatch: pytest.MonkeyPatch):
    """Return fn() with the compiled kernels, then with the polars expressions."""
    monkeypatch.setattr(tm, "KERNEL", True)
    k = fn()
    monkeypatch.setattr(tm, "KERNEL", False)
    return k, fn()


def _same(a: pl.DataFrame, b: pl.DataFrame) -> None:
    assert a.schema == b.schema
    assert a.height == b.height
    for c in a.columns:
        assert a[c].equals(b[c], null_equal=True), (c, a.filter(~a[c].eq_missing(b[c])).head(3))


@pytest.fixture(params=["scenario", "random1", "random2", "random3"])
def packets(request: pytest.FixtureRequest) -> pl.DataFrame:
    if request.param == "scenario":
        return _scenario()
    return _random(600, int(request.param[-1]))


def test_prepare_state_is_the_same(packets: pl.DataFrame, monkeypatch: pytest.MonkeyPatch) -> None:
    k, p = _both(lambda: tm.prepare(packets), monkeypatch)
    _same(k, p)
    # the rows reached the states compared (else equality would prove little; the scenario reaches the rest)
    assert k["adv"].any() and not k["adv"].all() and k["sack_max"].is_not_null().any()
    assert k["nxt"].is_null().sum() > k["conn"].n_unique() and k["ack_u"].is_not_null().any()


def test_scenario_states() -> None:
    t = tm.prepare(_scenario())
    c1 = t.filter(pl.col("conn").cast(pl.String).str.contains("10.0.0.1:"))
    # sequence numbers run on across the wrap, relative to the SYN
    a = c1.filter((pl.col("dir") == c1["dir"][0]) & (pl.col("len") == 1000))
    assert (a["seq_u"] - a["base"]).min() == 1 and (a["seq_u"] - a["base"]).max() == 8 * 1000 + 1
    # the second probe resends the first one's byte; the probes do not move "next expected"
    assert c1["zwp"].sum() == 1 and c1["dupack"].sum() >= 3 and c1["rev_ka"].any()
    assert sorted(c1.filter(pl.col("keepalive"))["len"].to_list()) == [0, 0, 1]
    assert c1.filter(pl.col("dsack_left").is_not_null()).height == 1


def test_classify_is_the_same(packets: pl.DataFrame, monkeypatch: pytest.MonkeyPatch) -> None:
    k, p = _both(lambda: tm.classify(packets, "x.pcap", "v"), monkeypatch)
    for name in ("retransmissions", "tcp_events"):
        _same(k[name], p[name])
    assert k["retransmissions"].height and k["tcp_events"].height


def test_scenario_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    for kernel in (True, False):
        monkeypatch.setattr(tm, "KERNEL", kernel)
        r = tm.classify(_scenario())
        rt = r["retransmissions"]
        assert {"reorder", "network_duplicate", "spurious", "rto"} <= set(rt["class"]), rt
        assert {"fast", "rto", "unknown"} <= set(rt["trigger"].drop_nulls()), rt
        assert {2, 37} <= set(rt["frame"])          # the SYN and the FIN sent again
        ev = set(r["tcp_events"]["event"])
        assert {"dup_ack", "zero_window", "zero_window_probe", "keep_alive", "out_of_order"} <= ev, ev


def test_first_ack_is_the_same(packets: pl.DataFrame, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tm, "KERNEL", True)
    t = tm.prepare(packets)
    # every row asks, for a need below, at and above its own end (none found, the next ACK, a later one)
    left = pl.concat([t.select(*tm.G, "frame", (pl.col("end_u") + d).alias("need")) for d in (-5000, 0, 1, 3000)])
    left = pl.concat([left, left.head(3).with_columns(pl.lit(None, pl.Int64).alias("need"))])
    got = tm._first_ack(left, t, "need", tm._AckIndex(t))
    monkeypatch.setattr(tm, "KERNEL", False)
    want = tm._first_ack(left, t, "need", tm._ack_tables(t))
    _same(got, want)
    assert got["ack_frame"].is_not_null().sum() > left.height // 4 and got["ack_frame"].is_null().any()


def _flow_prep(packets: pl.DataFrame) -> fm.Prepared:
    return fm.prepare(packets.with_columns(flow_exprs()).with_columns(pl.lit("v").alias("vantage"),
                                                                      pl.lit("x.pcap").alias("capture_file")))


def _canonical(df: pl.DataFrame) -> pl.DataFrame:
    """Return `df` with its categorical codes (fid, g: which polars may number differently from one call to the
    next) replaced by the first row of each code: the same grouping compares equal."""
    return df.with_columns(pl.int_range(pl.len()).min().over(c).alias(c) for c in ("fid", "g"))


def test_flows_are_the_same(packets: pl.DataFrame, monkeypatch: pytest.MonkeyPatch) -> None:
    k, p = _both(lambda: _flow_prep(packets), monkeypatch)
    _same(_canonical(k.df), _canonical(p.df))
    assert k.df["retx"].any() and (k.df["new_payload"] < k.df["payload"]).any()
    for fn in (fm.flow_totals, fm.rtt_samples, lambda x: fm.flow_series(x, 100_000_000)):
        _same(fn(k), fn(p))
    assert (fm.rtt_samples(k)["method"] == "seq_ack").any()


def test_kernels_refuse_bad_buffers() -> None:
    n = 4
    z = np.zeros(n, np.int64)
    order = np.array([0, 1, 2, 9], np.int64)                       # an index outside the rows
    inp = np.zeros((len(tm._K_IN), n), np.int64)
    out = np.empty((len(tm._K_OUT), n), np.int64)
    outb = np.empty((len(tm._K_OUTB), n), np.uint8)
    d = np.zeros(n, np.uint8)
    with pytest.raises(ValueError):
        tm._tcpk.tcp_state(order, z, d, d, inp, out, outb, 1)
    with pytest.raises(ValueError):                                # a connection number out of range
        tm._tcpk.tcp_state(np.arange(n, dtype=np.int64), z + 3, d, d, inp, out, outb, 1)
    with pytest.raises(ValueError):                                # buffers of the wrong size
        tm._tcpk.tcp_state(np.arange(n, dtype=np.int64), z, d, d, inp[:2], out, outb, 1)
    with pytest.raises(ValueError):                                # group offsets past the ACKs
        tm._tcpk.first_ack(np.array([0, 7], np.int64), z, z, z.copy(), z, z, z, z.copy())
    with pytest.raises(ValueError):                                # a query's group out of range
        tm._tcpk.first_ack(np.array([0, n], np.int64), z, z, z.copy(), z + 5, z, z, z.copy())
    with pytest.raises(ValueError):
        tm._tcpk.seq_track(z, z[:2], z, z.copy(), z.copy())


@pytest.mark.parametrize("rows", [
    [{"tcp_seq": 5, "tcp_len": 100, "tcp_ack": 1}],                                      # one packet
    [{"tcp_seq": 5 + 100 * k, "tcp_len": 100, "tcp_flags": 0} for k in (0, 1, 1, 2)],     # data, no ACK at all
    [{"fwd": k % 2 == 0, "tcp_seq": 9, "tcp_ack": None, "tcp_len": 0, "tcp_win": None} for k in range(3)],
    [{"ip_proto": 17, "tcp_flags": None, "tcp_win": None, "udp_len": 100} for _ in range(3)],    # no TCP
])
def test_tiny_tables_are_the_same(rows: list[dict], monkeypatch: pytest.MonkeyPatch) -> None:
    df = _table(rows)
    k, p = _both(lambda: (tm.prepare(df), tm.classify(df), _flow_prep(df)), monkeypatch)
    _same(k[0], p[0])
    for name in ("retransmissions", "tcp_events"):
        _same(k[1][name], p[1][name])
    _same(_canonical(k[2].df), _canonical(p[2].df))
    for fn in (fm.flow_totals, fm.rtt_samples):
        _same(fn(k[2]), fn(p[2]))


def test_first_ack_searches_agree_with_numpy() -> None:
    """The galloping searches of `first_ack` and `count_upto` (each query starts where the previous one
    ended) against plain binary searches, on random groups and queries in any order."""
    nul = np.iinfo(np.int64).min
    rng = np.random.default_rng(0)
    for _ in range(300):
        sizes = rng.integers(0, 30, rng.integers(1, 4))
        off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        frame = np.concatenate([np.sort(rng.choice(200, s, replace=False)) for s in sizes]).astype(np.int64)
        ack = rng.integers(-50, 50, off[-1]).astype(np.int64)
        cm = np.empty_like(ack)
        nq = int(rng.integers(0, 60))
        grp = rng.integers(-1, len(sizes), nq).astype(np.int64)
        qf = rng.integers(-5, 210, nq).astype(np.int64)
        qn = rng.integers(-60, 60, nq).astype(np.int64)
        qf[rng.random(nq) < 0.1] = nul
        qn[rng.random(nq) < 0.1] = nul
        out, cnt = np.empty(nq, np.int64), np.empty(nq, np.int64)
        tm._tcpk.first_ack(off, frame, ack, cm, grp, qf, qn, out)
        tm._tcpk.count_upto(off, frame, grp, qf, cnt)
        for q in range(nq):
            ok = grp[q] >= 0 and qf[q] != nul
            fr = frame[off[grp[q]]:off[grp[q] + 1]] if ok else frame[:0]
            assert cnt[q] == (np.searchsorted(fr, qf[q], side="right") if ok else 0), (q, cnt[q])
            g, want = grp[q], -1
            if g >= 0 and qn[q] != nul:
                lo, hi = off[g], off[g + 1]
                c = np.maximum.accumulate(ack[lo:hi]) if hi > lo else ack[lo:hi]
                assert (cm[lo:hi] == c).all()
                j = hi if qf[q] == nul else lo + np.searchsorted(frame[lo:hi], qf[q], side="right")
                j2 = lo + np.searchsorted(c, qn[q], side="left")
                want = j if j < hi and cm[j] >= qn[q] else (j2 if j2 < hi else -1)
            assert out[q] == want, (q, out[q], want)


def test_numbered_counts_distinct_ids_as_polars() -> None:
    """The distinct-id test per direction (IPv4 ids in a bitmap, larger ids in a hash table, null one value)
    against polars' n_unique, and a negative value refused."""
    nul = np.iinfo(np.int64).min
    rng = np.random.default_rng(1)
    sizes = rng.integers(0, 40, 60)
    g = np.repeat(np.arange(len(sizes)), sizes)
    pools = [rng.integers(0, 2**32, 5), np.array([nul]), rng.integers(0, 2**16, 5), rng.integers(0, 70000, 200)]
    vals = np.concatenate([rng.choice(pools[k % 4], s) for k, s in enumerate(sizes)]).astype(np.int64)
    out = np.empty(len(vals), np.uint8)
    tm._tcpk.numbered(np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64), vals, out)
    df = pl.DataFrame({"g": g, "v": vals}).with_columns(pl.when(pl.col("v") != nul).then(pl.col("v")).alias("v"))
    n = pl.col("v").n_unique().over("g")
    want = df.select((n >= 2) & (n * 4 >= pl.len().over("g"))).to_series()
    assert (out.astype(bool) == want.to_numpy()).all() and 0 < out.sum() < len(out)
    with pytest.raises(ValueError):
        tm._tcpk.numbered(np.array([0, 2], np.int64), np.array([5, -3], np.int64), np.empty(2, np.uint8))


def test_mac_retries_are_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """802.11 retries (same transmitter, sequence and fragment number soon after) found by the one-pass
    kernel as by the sort: tcp's `_mac_gap` and flows' `_not_retry`, with null times and 64-bit hashes."""
    rng = np.random.default_rng(3)
    n = 3000
    ts = np.cumsum(rng.integers(0, 400_000_000, n))
    df = pl.DataFrame({"frame": np.arange(1, n + 1), "ts_ns": ts,
                       "wlan_ta": pl.Series([("02:00:00:00:00:01", "02:00:00:00:00:02", None)[i]
                                             for i in rng.integers(0, 3, n)], dtype=pl.String),
                       "wlan_seq": rng.integers(0, 20, n), "wlan_frag": rng.integers(0, 2, n)})
    df = df.with_columns(pl.when(pl.col("frame") % 97 == 0).then(None).otherwise(pl.col("ts_ns")).alias("ts_ns"),
                         pl.when(pl.col("frame") % 89 == 0).then(None).otherwise(pl.col("wlan_seq")).alias("wlan_seq"))
    k, p = _both(lambda: tm._mac_gap(df), monkeypatch)
    assert k.equals(p, null_equal=True) and k.is_not_null().sum() > n // 2 and (k < fm.MAC_RETRY_WINDOW_NS).any()
    m = df.select(pl.struct("wlan_ta", "wlan_seq", "wlan_frag").hash().alias("_mpdu"), "ts_ns")
    assert (m["_mpdu"] >= 2**63).any()                    # keys past int64's range are compared as they are
    k, p = _both(lambda: fm._not_retry(m), monkeypatch)
    assert (k == p).all() and 0 < k.sum() < n


def test_first_distinct_is_polars() -> None:
    rng = np.random.default_rng(4)
    sizes = rng.integers(0, 50, 40)
    g = np.repeat(np.arange(len(sizes)), sizes)
    vals = rng.choice(np.array([-(2**40), -1, 0, 5, 2**33, 7, 9], np.int64), len(g))
    out = np.empty(len(g), np.uint8)
    tm._tcpk.first_distinct(np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64), vals, out)
    want = pl.DataFrame({"g": g, "v": vals}).select(pl.struct("g", "v").is_first_distinct()).to_series()
    assert (out.astype(bool) == want.to_numpy()).all() and 0 < out.sum() < len(out)


def test_without_the_compiled_module_the_fallback_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """An install without a C compiler has no _tcpk: the modules import and use the polars expressions."""
    import subprocess
    import sys

    from tests.helpers.common import REPO
    code = ("import sys; sys.modules['xlayer.metrics._tcpk'] = None\n"
            "import xlayer.metrics.tcp as t, xlayer.metrics.flows as f\n"
            "from tests.metrics.test_tcp_kernel import _scenario, _flow_prep\n"
            "assert t._tcpk is None and not t.KERNEL\n"
            "r = t.classify(_scenario())['retransmissions']\n"
            "print(r.height, f.rtt_samples(_flow_prep(_scenario())).height)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    monkeypatch.setattr(tm, "KERNEL", True)
    want = [tm.classify(_scenario())["retransmissions"].height, fm.rtt_samples(_flow_prep(_scenario())).height]
    assert [int(x) for x in out.stdout.split()] == want and want[0] > 0
