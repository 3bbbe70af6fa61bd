"""Which packets two captures both saw, and when: keys, airtime, TSFT, and the joins.

A capture is reduced to *observations* (all columnar):

* ``ip``: one row per IP packet, keyed by a 64-bit hash of the fields no hop changes (IPv4 id,
  addresses, protocol, lengths, fragment offset, ports, TCP seq/ack/flags/TSval, UDP length, ICMP
  type/code; IPv6: the same without the id).  TTL and checksum are left out (routers rewrite them).
  A wired capture keeps only keys it holds once (a retransmission that reuses the id, or a capture
  that saw a packet twice, is ambiguous and dropped).  An air capture merges the MAC retransmissions
  of one packet (same key within 100 ms) into the first attempt's start and the first attempt's end:
  the packet cannot have reached the air before the one nor left it before the other (a later
  attempt may repeat one the receiver already had, its ACK lost; if the first attempt heard carries
  the Retry bit, the one before was missed and the end is left unknown).  Unencrypted 802.11 data
  frames decode through LLC/SNAP into the same columns, so air and wired match on the same key.
* ``fr`` (air only): one row per 802.11 frame keyed by (TA, RA, seq, frag, retry, type, subtype,
  TID, IP key): the same transmission heard by two sniffers, beacons included.
* ``sz`` (air only): protected data frames (no keys here), for matching by size and order.

Each observation carries a start and an end time.  Wired stamps are points (start = end).  A sniffer
stamps a frame once it has been received, at the end of the PPDU (Linux mac80211 and ns-3 both do);
the start is the end minus the PPDU's airtime (preamble + bits / PHY rate; an A-MPDU's airtime is
its subframes' together).  A packet leaving a vantage is taken at its end there, a packet arriving
at its start: that keeps the airtime out of the one-way delays in both directions.  The start is
that of the whole exchange: an RTS/CTS (or CTS-to-self) just before a frame moves it to the RTS
(`txop_start`), since the sender won the medium there.  An A-MPDU's subframe ends at
its own last bit, its position in the PPDU (a receiver cannot hand it on before; ns-3 hands each on
then, a driver that passes the aggregate up whole puts its last subframes on the delay floor); a
fragmented MSDU (its IP header in the first fragment) ends with its last fragment, since a receiver
hands it on only then.  Airtimes come from `xlayer.timeline.airtime` (exact PPDU durations).  Where frames
carry TSFT, the stamps are replaced by TSFT mapped to the sniffer's clock (lines of stamp - TSFT
through the frames stamped after an idle gap, per TSF segment and minute: see `_stamp_line_map`),
which removes the host's stamping jitter and the lateness of frames stamped in a burst; whether TSFT
marks the frame's start or its end is decided by which fits better.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

import xlayer.timeline.fit as fitm
from xlayer.timeline.airtime import airtime as _airtime

IP_KEY = (("ip_version", pl.UInt8), ("ip_src", pl.String), ("ip_dst", pl.String), ("ip_proto", pl.UInt8),
          ("ip_id", pl.UInt32), ("ip_len", pl.UInt32), ("ip_frag_offset", pl.UInt16), ("ip_mf", pl.Boolean),
          ("sport", pl.UInt16), ("dport", pl.UInt16), ("tcp_seq", pl.UInt32), ("tcp_ack", pl.UInt32),
          ("tcp_flags", pl.UInt16), ("tcp_tsval", pl.UInt32), ("udp_len", pl.UInt16),
          ("icmp_type", pl.UInt8), ("icmp_code", pl.UInt8))
AIR_COLS = ("linktype", "tsft", "rt_layout", "rt_len", "rt_flags", "phy_rate_mbps", "phy", "nss", "sgi", "he_gi_us",
            "freq_mhz", "chan_flags", "ampdu_ref", "ampdu_flags", "wlan_type", "wlan_amsdu",
            "wlan_subtype", "wlan_to_ds", "wlan_from_ds", "wlan_retry", "wlan_protected", "wlan_order",
            "wlan_ta", "wlan_ra", "wlan_sa", "wlan_da", "wlan_seq", "wlan_frag", "wlan_more_frag", "wlan_tid",
            "wlan_pn")
BASE_COLS = ("frame", "ts_ns", "wirelen", "malformed", "fcs_bad", "ip_ttl", "eth_src", "eth_dst")
READ_COLS = tuple(dict.fromkeys(BASE_COLS + tuple(c for c, _ in IP_KEY) + AIR_COLS))

RETRY_SPAN_NS = 100_000_000          # MAC retransmissions of one packet fall within this
TSFT_MIN_FRAMES = 32
# A host clock may wander against the NIC's TSF counter (NTP slews it): one line per this much TSFT.
TSFT_PIECE_NS = 60 * 10**9
TSFT_ISOLATED_SIGMAS = 6.0           # an idle gap this many stamping noises long: a frame stamped on its own
TSFT_BREAK_NS = 20_000_000           # a jump of stamp - TSFT beyond this starts a new TSF segment
HASH_SEED = 0x5EED


@dataclass
class Observations:
    """What one capture contributes to matching; times are int64 ns on the capture's own clock."""

    file: str
    kind: str
    ip: pl.DataFrame                  # key, t_s, t_e, pair, orient, ttl, len (IP length)
    fr: pl.DataFrame | None = None    # key, t
    sz: pl.DataFrame | None = None    # protected data frames: t_s, t_e, sta, down, mpdu, retry, pn
    wired_sz: pl.DataFrame | None = None   # wired packets for the size path: t, mac_src, mac_dst, ip_len
    info: dict[str, Any] = field(default_factory=dict)


def _key_expr() -> pl.Expr:
    return pl.struct([pl.col(c).cast(t) for c, t in IP_KEY]).hash(seed=HASH_SEED)


def _pair_exprs() -> list[pl.Expr]:
    hs = pl.col("ip_src").hash(seed=HASH_SEED)
    hd = pl.col("ip_dst").hash(seed=HASH_SEED)
    # XOR of the two address hashes names the host pair whatever the direction; the order names it.
    return [hs.xor(hd).alias("pair"), (hs < hd).alias("orient")]


def _usable(df: pl.DataFrame) -> pl.Expr:
    ok = pl.col("malformed").is_null()
    if "fcs_bad" in df.columns:
        ok = ok & ~pl.col("fcs_bad").fill_null(False)
    return ok


# ---------------------------------------------------------------------------------------------
# airtime

AIRTIME_CHUNK = 1 << 18             # records per airtime pass (its temporaries grow with the rows)


def airtime(df: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return per frame (PPDU airtime ns, whether known, MPDU length or -1, ns from the PPDU's start to
    this MPDU's end or NaN where unknown), from `xlayer.timeline.airtime` (the 802.11 TXTIME formulas)."""
    n = df.height
    dur = np.zeros(n, dtype=np.float64)
    known = np.zeros(n, dtype=bool)
    mpdu = np.full(n, -1, dtype=np.int64)
    upto = np.full(n, np.nan, dtype=np.float64)
    # In slices of records cut between PPDUs (an A-MPDU's subframes are consecutive records), so
    # that memory stays bounded on millions of frames.
    cuts = [0]
    if n > AIRTIME_CHUNK and "ampdu_ref" in df.columns:
        ref = df["ampdu_ref"]
        starts = ref.is_null() | (ref != ref.shift(1)).fill_null(True)
        first = np.flatnonzero(starts.to_numpy())
        for c in range(AIRTIME_CHUNK, n, AIRTIME_CHUNK):
            k = int(np.searchsorted(first, c))
            if k < len(first) and first[k] > cuts[-1]:
                cuts.append(int(first[k]))
    elif n > AIRTIME_CHUNK:
        cuts += list(range(AIRTIME_CHUNK, n, AIRTIME_CHUNK))
    cuts = sorted(set(cuts)) + [n]
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        a = _airtime(df.slice(lo, hi - lo))
        p = a["ppdu_ns"]
        known[lo:hi] = p.is_not_null().to_numpy()
        dur[lo:hi] = p.fill_null(0).to_numpy()
        mpdu[lo:hi] = a["mpdu_bytes"].fill_null(-1).to_numpy()
        upto[lo:hi] = a["upto_ns"].cast(pl.Float64).fill_null(np.nan).to_numpy()
    return dur, known, mpdu, upto


# ---------------------------------------------------------------------------------------------
# TSFT -> the sniffer's clock


def _robust_line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Return (a, b) of y = a + b*x by least squares, refitted twice without the points beyond 4 robust sigmas."""
    k = np.ones(len(x), dtype=bool)
    line = fitm.Line(float(np.median(y)), 0.0)
    for i in range(3):
        if k.sum() < 2:
            break
        line, _, _ = fitm._ls(x[k], y[k])
        if i == 2:
            break
        r = y - line(x)
        med = float(np.median(r[k]))
        k = np.abs(r - med) <= 4.0 * max(1.4826 * float(np.median(np.abs(r[k] - med))), 1.0)
    return line.a, line.b


def _piecewise_line(T: np.ndarray, o: np.ndarray, sel: np.ndarray) -> np.ndarray:
    """Return per point o's value on robust lines through the selected points, one per TSFT_PIECE_NS of
    T at most, joined where they meet (T sorted ascending)."""
    lo, hi = float(T[0]), float(T[-1])
    n_sel = int(sel.sum())
    nb = int(max(1, min(math.ceil((hi - lo) / TSFT_PIECE_NS), n_sel // (4 * TSFT_MIN_FRAMES))))
    edges = np.linspace(lo, hi, nb + 1)
    # T is sorted: each piece is a slice
    cut = np.concatenate([[0], np.searchsorted(T, edges[1:-1], side="right"), [len(T)]])
    lines = []
    for i in range(nb):
        a, b = int(cut[i]), int(cut[i + 1])
        m = sel[a:b]
        lines.append(_robust_line(T[a:b][m], o[a:b][m]) if m.sum() >= 2 else None)
    if all(ln is None for ln in lines):
        return np.full(len(T), float(np.median(o[sel])) if n_sel else float(np.median(o)))
    # a piece without points takes its neighbours' lines
    for i in range(nb):
        if lines[i] is None:
            j = min((j for j in range(nb) if lines[j] is not None), key=lambda j: abs(j - i))
            lines[i] = lines[j]
    knots = []
    for i, x in enumerate(edges):
        near = [lines[j] for j in (i - 1, i) if 0 <= j < nb]
        knots.append(sum(a + b * x for a, b in near) / len(near))
    return np.interp(T, edges, np.asarray(knots)) if nb > 1 else lines[0][0] + lines[0][1] * T


def _stamp_line_map(T: np.ndarray, o: np.ndarray) -> np.ndarray:
    """Return per frame stamp - TSFT on the line the host's stamps follow (T sorted ascending).

    A host stamps frames in the order it takes them and never one before the one it took earlier, and
    frames that arrive together wait for each other (an interrupt's batch; a running maximum of jittered
    stamps in a simulator): a frame close behind another is stamped late by an amount that follows the
    traffic.  A median of stamp - TSFT over neighbouring frames follows that load and tilts the mapped
    clock by ppm where it changes.  Frames after an idle gap (TSFT_ISOLATED_SIGMAS stamping noises long,
    the noise measured on the quarter of frames after the longest gaps) were stamped on their own: the
    line goes through them.
    """
    gap = np.empty(len(T))
    gap[1:] = np.diff(T)
    # the first frame came after the longest gap there is (a finite one: quantiles of inf are NaN)
    gap[0] = max(float(gap[1:].max()), 1.0) if len(T) > 1 else 1.0
    # (frames of one PPDU share its TSFT: a gap of 0 is no gap)
    pos = gap > 0
    top = pos & (gap >= np.quantile(gap[pos], 0.75)) if pos.any() else pos | True
    iso = top
    for _ in range(2):
        hat = _piecewise_line(T, o, iso)
        r = (o - hat)[top]
        sigma = 1.4826 * float(np.median(np.abs(r - np.median(r))))
        iso = pos & (gap >= TSFT_ISOLATED_SIGMAS * sigma)
        if iso.sum() < TSFT_MIN_FRAMES:
            iso = top
    return _piecewise_line(T, o, iso)


def map_tsft(ts: np.ndarray, tsft: np.ndarray, valid: np.ndarray, dur: np.ndarray,
             known: np.ndarray) -> tuple[np.ndarray | None, str, dict[str, Any]]:
    """Return (mapped stamps or None, 'start'|'end', info): TSFT on the sniffer's clock.

    The mapped stamp is the frame's end under 'end' and its start under 'start'.
    """
    info: dict[str, Any] = {"tsft_frames": int(valid.sum())}
    idx = np.flatnonzero(valid)
    if len(idx) < TSFT_MIN_FRAMES:
        info["tsft"] = "too few frames with TSFT"
        return None, "end", info
    T = tsft[idx].astype(np.int64) * 1000
    t = ts[idx]
    o_end = (t - T).astype(np.float64)
    # TSF segments: a reset or channel change makes stamp - TSFT jump.
    dt = np.abs(np.diff(t).astype(np.float64))
    jump = np.abs(np.diff(o_end)) > TSFT_BREAK_NS + 2e-4 * dt
    del dt
    bounds = np.concatenate([[0], np.flatnonzero(jump) + 1, [len(idx)]])
    del jump
    # per segment: its slice (records in order), and whether TSFT advances with the clock there
    segs = []
    ok = np.ones(len(idx), dtype=bool)
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        span_t = float(t[lo:hi].max() - t[lo:hi].min())
        span_T = float(T[lo:hi].max() - T[lo:hi].min())
        if hi - lo < TSFT_MIN_FRAMES or span_T <= 0 or abs(span_T / max(span_t, 1.0) - 1.0) > 0.01:
            ok[lo:hi] = False         # TSFT does not advance with the clock here: leave the stamps
        else:
            segs.append((lo, hi))
    del t
    hats: dict[str, np.ndarray] = {}
    score: dict[str, float] = {}
    use = ok & known[idx]
    for hyp in ("end", "start"):
        o = o_end if hyp == "end" else o_end - dur[idx]
        hat = o.copy()
        for lo, hi in segs:
            Ts = T[lo:hi]
            if np.all(Ts[1:] >= Ts[:-1]):
                hat[lo:hi] = _stamp_line_map(Ts.astype(np.float64), o[lo:hi])
            else:
                order = np.argsort(Ts, kind="stable")
                h = np.empty(hi - lo)
                h[order] = _stamp_line_map(Ts[order].astype(np.float64), o[lo:hi][order])
                hat[lo:hi] = h
        r = (o - hat)[use]
        score[hyp] = float(1.4826 * np.median(np.abs(r - np.median(r)))) if len(r) >= TSFT_MIN_FRAMES else math.inf
        hats[hyp] = hat
        del o, r
    if not math.isfinite(score["end"]) and not math.isfinite(score["start"]):
        # Airtimes unknown: the hypotheses cannot be told apart; stamps are frame ends.
        r = o_end - np.where(ok, np.round(hats["end"]), -1.0 - T)
        score["end"] = float(1.4826 * np.median(np.abs(r))) if len(r) else math.inf
        point = "end"
    else:
        point = "start" if score["start"] < 0.8 * score["end"] else "end"
    mapped = np.full(len(ts), np.int64(-1))
    mapped[idx] = np.where(ok, T + np.round(hats[point]).astype(np.int64), np.int64(-1))
    info.update({"tsft": point, "tsft_residual_us": round(score[point] / 1e3, 3)
                 if math.isfinite(score[point]) else None,
                 "tsft_segments": len(bounds) - 1})
    return mapped, point, info


# ---------------------------------------------------------------------------------------------
# RTS/CTS: where a frame's exchange began

EXCHANGE_GAP_NS = 100_000            # SIFS (10/16 us) between the frames of one exchange, plus stamp slack


def txop_start(df: pl.DataFrame, t_s: np.ndarray, t_end: np.ndarray) -> np.ndarray:
    """Return per record the start of the exchange it belongs to: the RTS (or CTS-to-self) just
    before a data or management frame, else the frame's own PPDU start t_s.

    A sender that protects a frame with RTS/CTS got the medium when its RTS began: the wait from a
    packet's arrival to the air ends there, not at the data frame some 100 us to 700 us later
    (an exchange at 1 Mbit/s).  Evidence in record order: a CTS addressed to the frame's sender,
    ending within a SIFS (plus slack) of its start, and before it an RTS from that sender; or the
    RTS alone, two SIFS and about its own airtime (the CTS the sniffer missed) before.
    """
    n = df.height
    out = t_s.copy()
    if n < 2:
        return out
    h = df.select(pl.col("wlan_type").fill_null(255).cast(pl.Int16).alias("ty"),
                  pl.col("wlan_subtype").fill_null(255).cast(pl.Int16).alias("st"),
                  pl.col("wlan_ta").hash(seed=HASH_SEED).alias("ta"),
                  pl.col("wlan_ra").hash(seed=HASH_SEED).alias("ra"),
                  pl.col("wlan_ta").is_null().alias("ta_null"))
    ty, st = h["ty"].to_numpy(), h["st"].to_numpy()
    ta, ra = h["ta"].to_numpy(), h["ra"].to_numpy()
    ta_ok = ~h["ta_null"].to_numpy()
    is_cts = (ty == 1) & (st == 12)
    is_rts = (ty == 1) & (st == 11)
    prot = np.isin(ty, (0, 2)) & ta_ok
    i = np.flatnonzero(prot[1:]) + 1                 # candidates with a record before them
    p1 = i - 1
    gap1 = t_s[i] - t_end[p1]
    cts = is_cts[p1] & (ra[p1] == ta[i]) & (gap1 <= EXCHANGE_GAP_NS) & (gap1 >= -EXCHANGE_GAP_NS)
    start = np.where(cts, t_s[p1], t_s[i])
    # the RTS before that CTS
    ok2 = cts & (p1 >= 1)
    p2 = np.maximum(p1 - 1, 0)
    gap2 = t_s[p1] - t_end[p2]
    rts2 = ok2 & is_rts[p2] & (ta[p2] == ta[i]) & (gap2 <= EXCHANGE_GAP_NS) & (gap2 >= -EXCHANGE_GAP_NS)
    start = np.where(rts2, t_s[p2], start)
    # an RTS straight before the frame (its CTS unheard): SIFS + CTS (no longer than the RTS) + SIFS
    rts1 = (is_rts[p1] & (ta[p1] == ta[i]) & (ra[p1] == ra[i])
            & (gap1 <= 2 * EXCHANGE_GAP_NS + (t_end[p1] - t_s[p1])) & (gap1 >= 0))
    start = np.where(rts1, t_s[p1], start)
    out[i] = np.minimum(start, t_s[i])
    # an A-MPDU's subframes (consecutive records) share its first subframe's exchange
    ref = df["ampdu_ref"]
    if ref.null_count() < n:
        inr = ref.is_not_null().to_numpy()
        r = ref.fill_null(0).to_numpy()
        starts = np.flatnonzero(np.concatenate([[True], (r[1:] != r[:-1]) | ~inr[1:] | ~inr[:-1]]))
        mins = np.minimum.reduceat(out, starts)
        out = np.where(inr, np.repeat(mins, np.diff(np.append(starts, n))), out)
    return out


# ---------------------------------------------------------------------------------------------
# observations of one capture


def _frame(df: pl.DataFrame, cols: tuple[str, ...]) -> pl.DataFrame:
    """Return only `cols` of a packet table (absent ones as nulls of their schema type), usable rows."""
    from parsers.schema import SCHEMA

    d = df.select([c for c in cols if c in df.columns])
    miss = [pl.lit(None, dtype=SCHEMA.get(c)).alias(c) for c in cols if c not in df.columns]
    if miss:
        d = d.with_columns(miss)
    # Most captures have no unusable record: then the columns stay shared with the caller's table.
    ok = d.select(_usable(d).alias("ok"))["ok"]
    return d if ok.all() else d.filter(ok)


WIRED_COLS = tuple(dict.fromkeys(BASE_COLS + tuple(c for c, _ in IP_KEY)))


def _fragmented_end(df: pl.DataFrame, att: pl.DataFrame, t_end: np.ndarray) -> pl.DataFrame:
    """Return `att` with a fragmented MSDU's end moved to its last fragment's (null if that was not heard).

    The IP header travels in the first fragment, but a receiver hands the MSDU on only once the last
    one has arrived: the first fragment's end would put every fragmented packet's delay out of the
    air several exchanges above its floor.  The last fragment is the first frame after the first
    fragment from the same transmitter with the same sequence number and More Fragments clear; if
    its first copy heard carries the Retry bit, an earlier one was missed and the end is unknown.
    """
    if not att.select(pl.col("mf").any()).item():
        return att.drop("ta", "seq", "mf")
    last = (df.select(pl.col("wlan_ta").alias("ta"), pl.col("wlan_seq").cast(pl.Int32).alias("seq"),
                      pl.col("wlan_frag").cast(pl.Int32).alias("frag"),
                      pl.col("wlan_more_frag").fill_null(True).alias("more"),
                      pl.col("wlan_retry").fill_null(False).alias("rt_last"),
                      (pl.col("wlan_type") == 2).alias("data"))
            .with_columns(pl.Series("t_last", t_end))
            .filter(pl.col("data") & ~pl.col("more") & (pl.col("frag") > 0) & pl.col("ta").is_not_null()
                    & pl.col("seq").is_not_null())
            .select("ta", "seq", "t_last", "rt_last").sort("t_last"))
    frag = att.filter(pl.col("mf")).with_row_index("_i").sort("t_e", nulls_last=True)
    # Only fragments whose first copy's end is known can be followed to their last one.
    known = frag.filter(pl.col("t_e").is_not_null())
    hit = known.join_asof(last, left_on="t_e", right_on="t_last", by=["ta", "seq"], strategy="forward",
                          tolerance=RETRY_SPAN_NS, check_sortedness=False)
    ends = hit.select("_i", pl.when(pl.col("rt_last").fill_null(True)).then(None)
                      .otherwise(pl.col("t_last")).alias("t_e2"))
    frag = (frag.join(ends, on="_i", how="left")
            .with_columns(pl.col("t_e2").alias("t_e")).drop("t_e2")
            .sort("_i").drop("_i"))
    return (pl.concat([att.filter(~pl.col("mf")), frag], how="vertical")
            .sort("key", "ts_ns").drop("ta", "seq", "mf"))


def observe(df: pl.DataFrame, file: str, kind: str, ts_point: str = "end", use_tsft: bool = True,
            sizes: bool = True, frames: bool = True) -> Observations:
    """Return the observations of one capture's packet table (see the module docstring).

    sizes: also keep what matching protected frames by size needs (`sz`, `wired_sz`); frames: also
    the per-frame keys of air captures (`fr`, for two sniffers).  Both cost memory on big captures.
    """
    if kind != "air":
        d = _frame(df, WIRED_COLS)
        n = d.height
        d = d.lazy().filter(pl.col("ip_version").is_not_null())
        ip = (d.select(_key_expr().alias("key"), pl.col("ts_ns").cast(pl.Int64).alias("t_s"), *_pair_exprs(),
                       pl.col("ip_ttl").cast(pl.Int16).alias("ttl"), pl.col("ip_len").cast(pl.Int32).alias("len"))
              .filter(pl.len().over("key") == 1)
              .select("key", "t_s", pl.col("t_s").alias("t_e"), "pair", "orient", "ttl", "len").collect())
        wsz = None
        if sizes:
            wsz = d.select(pl.col("ts_ns").cast(pl.Int64).alias("t"), pl.col("eth_src"), pl.col("eth_dst"),
                           pl.col("ip_len").cast(pl.Int64), _key_expr().alias("key")).collect()
        return Observations(file, kind, ip, wired_sz=wsz, info={"packets": n, "ip_keys": ip.height})

    df = _frame(df, READ_COLS)
    ts = df["ts_ns"].cast(pl.Int64).to_numpy()
    dur, known, mpdu, upto = airtime(df)
    dur_i = np.round(dur).astype(np.int64)
    # Every subframe's own end, not only the first's: in ns-3 runs of 802.11n/ac/ax a station got each
    # later subframe its own delay after its own end (the medians at positions up to 24 within a few
    # us of the first's); the first subframes alone left a fifteenth of the points out of the air.
    # Positions that a slower host link queued are screened per pair of clocks
    # (`xlayer.timeline.align._behind_in_aggregate`).
    te_ok = np.isfinite(upto)
    upto_i = np.round(np.nan_to_num(upto)).astype(np.int64)
    del upto
    info: dict[str, Any] = {"frames": df.height}
    # t_s: the PPDU's first bit; t_e: this MPDU's last bit (an A-MPDU's subframes are delivered
    # one by one, before the PPDU ends).
    if ts_point == "start":
        t_s = ts.copy()
    else:
        t_s = ts - dur_i
    if use_tsft and df.height:
        tsft_s = df["tsft"]
        valid = tsft_s.is_not_null().to_numpy()
        tsft = tsft_s.fill_null(0).to_numpy()
        mapped, point, tinfo = map_tsft(ts, tsft, valid, dur, known)
        del tsft, valid
        info.update(tinfo)
        if mapped is not None:
            m = mapped >= 0
            t_s = np.where(m, mapped - dur_i if point == "end" else mapped, t_s)
            del mapped, m
    del ts, dur, known
    txop = txop_start(df, t_s, t_s + dur_i)
    info["rts_protected"] = int((txop < t_s).sum())
    t_e = pl.Series("t_e", t_s + upto_i)
    if not te_ok.all():
        t_e = pl.select(pl.when(pl.Series(te_ok)).then(t_e).otherwise(None)).to_series().alias("t_e")
    del upto_i, te_ok
    # Per-record results go beside narrow selections of the table, never into the table itself:
    # adding a column to a table read in several chunks would make polars rechunk every column.
    # MAC retransmissions of one packet: the first attempt's start (of its exchange: RTS/CTS) is
    # the earliest the packet can have reached the air; the first attempt's end is the earliest it
    # can have left it (a later attempt may repeat one the receiver already had, its ACK lost, and
    # the wired copy left after that first one).  If the first attempt seen has the Retry bit, an
    # earlier one was missed: the end is unknown.  (Sorted by key and time rather than grouped: a
    # group-by over a million keys costs far more memory than one sort of a few narrow columns.)
    is_ip = (pl.col("wlan_type") == 2) & pl.col("ip_version").is_not_null()
    att = (df.select(is_ip.alias("is_ip"), _key_expr().alias("key"), pl.col("ts_ns").cast(pl.Int64),
                     pl.col("wlan_retry").fill_null(False).alias("rt"), *_pair_exprs(),
                     pl.col("ip_ttl").cast(pl.Int16).alias("ttl"), pl.col("ip_len").cast(pl.Int32).alias("len"),
                     pl.col("wlan_ta").alias("ta"), pl.col("wlan_seq").cast(pl.Int32).alias("seq"),
                     pl.col("wlan_more_frag").fill_null(False).alias("mf"))
           .with_columns(pl.Series("t_s", txop), t_e)
           .filter(pl.col("is_ip")).drop("is_ip").sort("key", "ts_ns"))
    del txop
    att = _fragmented_end(df, att, t_s + dur_i)
    key = att["key"]
    first = (key != key.shift(1)).fill_null(True)
    last = (key != key.shift(-1)).fill_null(True)
    span = att.filter(last)["ts_ns"] - att.filter(first)["ts_ns"]
    ip = (att.filter(first)
          .with_columns(pl.when(pl.col("rt")).then(None).otherwise(pl.col("t_e")).alias("t_e"),
                        span.alias("span"))
          .filter(pl.col("span") <= RETRY_SPAN_NS)
          .select("key", "t_s", "t_e", "pair", "orient", "ttl", "len"))
    del att, key, first, last, span
    fr = None
    if frames:
        fkey = pl.struct(pl.col("wlan_ta"), pl.col("wlan_ra"), pl.col("wlan_seq").cast(pl.UInt16),
                         pl.col("wlan_frag").cast(pl.UInt8), pl.col("wlan_retry").cast(pl.Boolean),
                         pl.col("wlan_type").cast(pl.UInt8), pl.col("wlan_subtype").cast(pl.UInt8),
                         pl.col("wlan_tid").cast(pl.UInt8), pl.col("wlan_pn").cast(pl.UInt64),
                         _key_expr()).hash(seed=HASH_SEED)
        fr = (df.select((pl.col("wlan_ta").is_not_null() & pl.col("wlan_seq").is_not_null()
                         & pl.col("wlan_type").is_in([0, 2])).alias("ok"), fkey.alias("key"))
              .with_columns(pl.Series("t", t_s + dur_i))
              .filter(pl.col("ok")).drop("ok")
              .filter(pl.len().over("key") == 1))
    # Protected data frames: station, direction and size, for the size-and-order path.
    is_prot = (pl.col("wlan_type") == 2) & pl.col("wlan_protected").fill_null(False)
    sz = None
    if sizes or df.select(is_prot.any()).item():
        sz = (df.select(
            is_prot.alias("prot"),
            pl.when(pl.col("wlan_from_ds") & ~pl.col("wlan_to_ds")).then(pl.col("wlan_ra"))
            .otherwise(pl.col("wlan_ta")).alias("sta"),
            (pl.col("wlan_from_ds") & ~pl.col("wlan_to_ds")).alias("down"),
            pl.col("wlan_sa").alias("sa"), pl.col("wlan_da").alias("da"),
            pl.col("wlan_retry").fill_null(False).alias("retry"),
            pl.col("wlan_pn"), pl.col("wlan_ta"), pl.col("wlan_seq"),
            ((pl.col("wlan_to_ds") & pl.col("wlan_from_ds")).cast(pl.Int64) * 6
             + 24 + 2 * ((pl.col("wlan_subtype").cast(pl.Int32) & 8) != 0).cast(pl.Int64)
             + 4 * (pl.col("wlan_order").fill_null(False) & ((pl.col("wlan_subtype").cast(pl.Int32) & 8) != 0))
             .cast(pl.Int64)).alias("hdr"))
            .with_columns(pl.Series("t_s", t_s), t_e, pl.Series("mpdu", mpdu))
            .filter(pl.col("prot") & (pl.col("mpdu") > 0))
            .select("t_s", "t_e", "sta", "down", "sa", "da", "mpdu", "retry", "wlan_pn", "wlan_ta", "wlan_seq",
                    "hdr"))
    del t_s, t_e, dur_i, mpdu, df
    info.update({"ip_keys": ip.height, "frame_keys": None if fr is None else fr.height,
                 "protected_data": 0 if sz is None else sz.height})
    return Observations(file, kind, ip, fr=fr, sz=sz, info=info)


# ---------------------------------------------------------------------------------------------
# joins between two captures


def match_ip(a: Observations, b: Observations) -> pl.DataFrame:
    """Return the IP packets both captures saw: tAs, tAe, tBs, tBe, pair, orient, ttl_a, ttl_b, len (IP length)."""
    j = a.ip.join(b.ip.select("key", "t_s", "t_e", "ttl"), on="key", how="inner", suffix="_b")
    return j.select(pl.col("t_s").alias("tAs"), pl.col("t_e").alias("tAe"), pl.col("t_s_b").alias("tBs"),
                    pl.col("t_e_b").alias("tBe"), "pair", "orient", pl.col("ttl").alias("ttl_a"),
                    pl.col("ttl_b"), "len")


def match_frames(a: Observations, b: Observations) -> pl.DataFrame:
    """Return the 802.11 frames both sniffers heard: tA, tB (frame ends)."""
    if a.fr is None or b.fr is None:
        return pl.DataFrame(schema={"tA": pl.Int64, "tB": pl.Int64})
    j = a.fr.join(b.fr, on="key", how="inner", suffix="_b")
    return j.select(pl.col("t").alias("tA"), pl.col("t_b").alias("tB"))
