"""Which packets two captures both saw, and when: keys, airtime, TSFT, and the joins.

A capture is reduced to *observations* (all columnar):

* ``ip``: one row per IP packet, keyed by a 64-bit hash of the fields no hop changes (IPv4 id,
  addresses, protocol, lengths, fragment offset, ports, TCP seq/ack/flags/TSval, UDP length, ICMP
  type/code; IPv6: the same without the id).  TTL and checksum are left out (routers rewrite them).
  A wired capture keeps only keys it holds once (a retransmission that reuses the id, or a capture
  that saw a packet twice, is ambiguous and dropped).  An air capture merges the MAC retransmissions
  of one packet (same key within 100 ms): the first attempt's start and the last attempt's end are
  both valid bounds.  Unencrypted 802.11 data frames decode through LLC/SNAP into the same columns,
  so air and wired match on the same key.
* ``fr`` (air only): one row per 802.11 frame keyed by (TA, RA, seq, frag, retry, type, subtype,
  TID, IP key): the same transmission heard by two sniffers, beacons included.
* ``sz`` (air only): protected data frames (no keys here), for matching by size and order.

Each observation carries a start and an end time.  Wired stamps are points (start = end).  A sniffer
stamps a frame once it has been received, at the end of the PPDU (Linux mac80211 and ns-3 both do);
the start is the end minus the PPDU's airtime (preamble + bits / PHY rate; an A-MPDU's airtime is
its subframes' together).  A packet leaving a vantage is taken at its end there, a packet arriving
at its start: that keeps the airtime out of the one-way delays in both directions.  Where frames
carry TSFT, the stamps are replaced by TSFT mapped to the sniffer's clock (a running median of
stamp - TSFT over windows of frames, per TSF segment), which removes the host's stamping jitter;
whether TSFT marks the frame's start or its end is decided by which fits better.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

IP_KEY = (("ip_version", pl.UInt8), ("ip_src", pl.String), ("ip_dst", pl.String), ("ip_proto", pl.UInt8),
          ("ip_id", pl.UInt32), ("ip_len", pl.UInt32), ("ip_frag_offset", pl.UInt16), ("ip_mf", pl.Boolean),
          ("sport", pl.UInt16), ("dport", pl.UInt16), ("tcp_seq", pl.UInt32), ("tcp_ack", pl.UInt32),
          ("tcp_flags", pl.UInt16), ("tcp_tsval", pl.UInt32), ("udp_len", pl.UInt16),
          ("icmp_type", pl.UInt8), ("icmp_code", pl.UInt8))
AIR_COLS = ("tsft", "rt_layout", "rt_flags", "phy_rate_mbps", "phy", "nss", "ampdu_ref", "ampdu_flags", "wlan_type",
            "wlan_subtype", "wlan_to_ds", "wlan_from_ds", "wlan_retry", "wlan_protected", "wlan_order",
            "wlan_ta", "wlan_ra", "wlan_sa", "wlan_da", "wlan_seq", "wlan_frag", "wlan_tid", "wlan_pn")
BASE_COLS = ("frame", "ts_ns", "wirelen", "malformed", "fcs_bad", "ip_ttl", "eth_src", "eth_dst")
READ_COLS = tuple(dict.fromkeys(BASE_COLS + tuple(c for c, _ in IP_KEY) + AIR_COLS))

RETRY_SPAN_NS = 100_000_000          # MAC retransmissions of one packet fall within this
TSFT_WINDOW = 64                     # frames per median window of the TSFT mapping
TSFT_MIN_FRAMES = 32
TSFT_BREAK_NS = 20_000_000           # a jump of stamp - TSFT beyond this starts a new TSF segment
HASH_SEED = 0x5EED


@dataclass
class Observations:
    """What one capture contributes to matching; times are int64 ns on the capture's own clock."""

    file: str
    kind: str
    ip: pl.DataFrame                  # key, t_s, t_e, pair, orient, ttl
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

_NLTF = np.array([1, 1, 2, 4, 4, 6, 6, 8, 8], dtype=np.float64)   # HT/VHT/HE LTFs for NSS 0..8


def airtime(df: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return per frame (PPDU airtime ns, whether known, MPDU length estimate or -1, ns from the
    PPDU's start to this MPDU's end, NaN if that is unknown).

    The MPDU length of an unprotected data frame follows from its IP length (802.11 header, LLC/SNAP,
    FCS); other frames take wirelen minus the radiotap header length learnt per radiotap layout
    from those.  An A-MPDU's PPDU carries all its subframes (delimiters, 4-byte padding).
    """
    n = df.height
    if n == 0:
        z = np.zeros(0)
        return z, z.astype(bool), z, z
    qos = (pl.col("wlan_type") == 2) & ((pl.col("wlan_subtype").cast(pl.Int32) & 8) != 0)
    hdr = (24 + 6 * (pl.col("wlan_to_ds") & pl.col("wlan_from_ds")).cast(pl.Int64)
           + 2 * qos.cast(pl.Int64) + 4 * (qos & pl.col("wlan_order")).cast(pl.Int64))
    est = (pl.when((pl.col("wlan_type") == 2) & pl.col("ip_len").is_not_null() & (pl.col("ip_len") > 0))
           .then(hdr + 8 + pl.col("ip_len").cast(pl.Int64) + 4).otherwise(None))
    d = df.select(
        pl.col("wirelen").cast(pl.Int64),
        pl.col("rt_layout").fill_null(""),
        ((pl.col("rt_flags").fill_null(0).cast(pl.Int32) & 0x10) != 0).alias("fcs"),
        est.alias("est"),
        pl.col("ampdu_ref"),
        pl.col("phy_rate_mbps").cast(pl.Float64).alias("rate"),
        pl.col("phy").fill_null(""),
        pl.col("nss").cast(pl.Int64).fill_null(1).clip(1, 8).alias("nss"),
        ((pl.col("rt_flags").fill_null(0).cast(pl.Int32) & 0x02) != 0).alias("short"),
    )
    adj = (d.filter(pl.col("est").is_not_null())
           .group_by("rt_layout", "fcs").agg((pl.col("wirelen") - pl.col("est")).median().alias("adj")))
    d = d.join(adj, on=["rt_layout", "fcs"], how="left")
    # Layouts with no unprotected IP frame to learn from: the radiotap length of the layout itself.
    miss = d.filter(pl.col("adj").is_null()).select("rt_layout", "fcs").unique()
    if miss.height:
        rows = [(lay, fcs, _rt_len(lay)) for lay, fcs in miss.iter_rows()]
        known_len = pl.DataFrame({"rt_layout": [r[0] for r in rows], "fcs": [r[1] for r in rows],
                                  "adj2": [None if r[2] is None else float(r[2] - (0 if r[1] else 4)) for r in rows]},
                                 schema={"rt_layout": pl.String, "fcs": pl.Boolean, "adj2": pl.Float64})
        d = (d.join(known_len, on=["rt_layout", "fcs"], how="left")
             .with_columns(pl.coalesce(pl.col("adj").cast(pl.Float64), pl.col("adj2")).alias("adj")).drop("adj2"))
    d = d.with_columns(pl.coalesce(pl.col("est"), (pl.col("wirelen") - pl.col("adj").round(0).cast(pl.Int64)))
                       .clip(lower_bound=10).alias("mpdu"))
    d = d.with_row_index("_i").with_columns(
        pl.when(pl.col("ampdu_ref").is_not_null())
        .then((4 + (pl.col("mpdu") + 3) // 4 * 4).sum().over("ampdu_ref"))
        .otherwise(pl.col("mpdu")).alias("ppdu_bytes"),
        # bytes of the PPDU up to and including this subframe (record order is transmission order)
        pl.when(pl.col("ampdu_ref").is_not_null())
        .then((4 + (pl.col("mpdu") + 3) // 4 * 4).cum_sum().over("ampdu_ref", order_by="_i"))
        .otherwise(pl.col("mpdu")).alias("upto_bytes"))
    # Is everything sent after this subframe in its A-MPDU in the capture?  Only then is the time
    # from this MPDU's end to the PPDU's end known: a subframe the sniffer missed after it would
    # make its end look later than it was.  Evidence: the last subframe (radiotap flag 0x08, when
    # the driver says it knows the last one, 0x04) was seen, and sequence numbers run on by 1.
    seqs = df.select(pl.col("wlan_seq").cast(pl.Int32), pl.col("ampdu_flags").cast(pl.Int32))
    d = d.with_columns(seqs)
    nxt = pl.col("wlan_seq").shift(-1).over("ampdu_ref", order_by="_i")
    is_last = pl.col("_i") == pl.col("_i").max().over("ampdu_ref")
    flags = pl.col("ampdu_flags").fill_null(0)
    bad = (pl.when(is_last).then(((flags & 0x04) != 0) & ((flags & 0x08) == 0))
           .otherwise(((nxt - pl.col("wlan_seq") + 4096) % 4096 != 1).fill_null(True)))
    d = d.with_columns(pl.when(pl.col("ampdu_ref").is_not_null())
                       .then(bad.cast(pl.Int32).cum_sum(reverse=True).over("ampdu_ref", order_by="_i") == 0)
                       .otherwise(True).alias("tail_ok"))
    rate = d["rate"].to_numpy().astype(np.float64)
    rate = np.where(np.isfinite(rate) & (rate > 0), rate, np.nan)
    phy = d["phy"].to_numpy()
    nltf = _NLTF[d["nss"].to_numpy()]
    dsss = np.isin(np.round(rate * 2), (2, 4, 11, 22))
    pre = np.where(phy == "ht", 32 + 4 * nltf,
                   np.where(phy == "vht", 36 + 4 * nltf,
                            np.where(phy == "he", 36 + 8 * nltf,
                                     np.where(dsss, np.where(d["short"].to_numpy() & (rate > 1.5), 96.0, 192.0),
                                              20.0))))
    pb = d["ppdu_bytes"].to_numpy().astype(np.float64)
    ub = d["upto_bytes"].to_numpy().astype(np.float64)
    known = np.isfinite(rate) & np.isfinite(pb)
    r1 = np.where(known, rate, 1.0)
    dur = np.where(known, (pre + (8.0 * np.nan_to_num(pb) + 22.0) / r1) * 1000.0, 0.0)
    upto = np.where(known, (pre + (8.0 * np.nan_to_num(ub) + 22.0) / r1) * 1000.0, 0.0)
    mpdu = d["mpdu"].fill_null(-1).to_numpy()
    # Unknown end (see tail_ok): NaN.
    upto = np.where(d["tail_ok"].to_numpy(), np.minimum(upto, dur), np.nan)
    return dur, known, mpdu, upto


def _rt_len(layout: str) -> int | None:
    """Return the radiotap header length a presence-word layout implies (None if it cannot tell)."""
    try:
        from parsers.radiotap import _layout

        words = tuple(int(w, 16) for w in layout.split(",") if w)
        if not words:
            return None
        lay = _layout(words, ())
    except Exception:  # noqa: BLE001 - a layout we cannot read just gives no length
        return None
    if lay.defer or lay.need_skip is not None:
        return None
    return int(lay.end)


# ---------------------------------------------------------------------------------------------
# TSFT -> the sniffer's clock


def _running_median_map(T: np.ndarray, o: np.ndarray) -> np.ndarray:
    """Return, per point, the median of o over windows of TSFT_WINDOW points, interpolated in T."""
    n = len(T)
    m = max(1, n // TSFT_WINDOW)
    cut = np.linspace(0, n, m + 1).astype(np.int64)
    cx = np.empty(m)
    cy = np.empty(m)
    for i in range(m):            # m = n / 64 windows; a loop over windows, not over frames
        cx[i] = np.median(T[cut[i]:cut[i + 1]])
        cy[i] = np.median(o[cut[i]:cut[i + 1]])
    if m == 1:
        return np.full(n, cy[0])
    return np.interp(T, cx, cy)


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
    jump = np.abs(np.diff(o_end)) > TSFT_BREAK_NS + 2e-4 * np.abs(np.diff(t).astype(np.float64))
    seg = np.concatenate([[0], np.cumsum(jump)])
    out: dict[str, np.ndarray] = {}
    score: dict[str, float] = {}
    kn = known[idx]
    for hyp, o in (("end", o_end), ("start", o_end - dur[idx])):
        hat = np.empty(len(idx))
        ok = np.ones(len(idx), dtype=bool)
        for s in np.unique(seg):
            sel = np.flatnonzero(seg == s)
            Ts = T[sel]
            span_t = float(t[sel].max() - t[sel].min())
            span_T = float(Ts.max() - Ts.min())
            if len(sel) < TSFT_MIN_FRAMES or span_T <= 0 or abs(span_T / max(span_t, 1.0) - 1.0) > 0.01:
                ok[sel] = False       # TSFT does not advance with the clock here: leave the stamps
                hat[sel] = o[sel]
                continue
            order = np.argsort(Ts, kind="stable")
            h = np.empty(len(sel))
            h[order] = _running_median_map(Ts[order].astype(np.float64), o[sel][order])
            hat[sel] = h
        r = (o - hat)[ok & kn]
        score[hyp] = float(1.4826 * np.median(np.abs(r - np.median(r)))) if len(r) >= TSFT_MIN_FRAMES else math.inf
        out[hyp] = np.where(ok, T + np.round(hat).astype(np.int64), np.int64(-1))
    if not math.isfinite(score["end"]) and not math.isfinite(score["start"]):
        # Airtimes unknown: the hypotheses cannot be told apart; stamps are frame ends.
        r = o_end - (out["end"] - T)
        score["end"] = float(1.4826 * np.median(np.abs(r))) if len(r) else math.inf
        point = "end"
    else:
        point = "start" if score["start"] < 0.8 * score["end"] else "end"
    mapped = np.full(len(ts), np.int64(-1))
    mapped[idx] = out[point]
    info.update({"tsft": point, "tsft_residual_us": round(score[point] / 1e3, 3)
                 if math.isfinite(score[point]) else None,
                 "tsft_segments": int(seg.max() + 1)})
    return mapped, point, info


# ---------------------------------------------------------------------------------------------
# observations of one capture


def observe(df: pl.DataFrame, file: str, kind: str, ts_point: str = "end", use_tsft: bool = True) -> Observations:
    """Return the observations of one capture's packet table (see the module docstring)."""
    for c in READ_COLS:
        if c not in df.columns:
            df = df.with_columns(pl.lit(None).alias(c))
    df = df.filter(_usable(df))
    if kind != "air":
        ip = (df.filter(pl.col("ip_version").is_not_null())
              .select(_key_expr().alias("key"), pl.col("ts_ns").alias("t_s"), pl.col("ts_ns").alias("t_e"),
                      *_pair_exprs(), pl.col("ip_ttl").cast(pl.Int16).alias("ttl")))
        ip = ip.filter(pl.len().over("key") == 1)
        wsz = (df.filter(pl.col("ip_version").is_not_null())
               .select(pl.col("ts_ns").alias("t"), pl.col("eth_src"), pl.col("eth_dst"),
                       pl.col("ip_len").cast(pl.Int64), _key_expr().alias("key")))
        return Observations(file, kind, ip, wired_sz=wsz, info={"packets": df.height, "ip_keys": ip.height})

    ts = df["ts_ns"].to_numpy()
    dur, known, mpdu, upto = airtime(df)
    dur_i = np.round(dur).astype(np.int64)
    te_ok = np.isfinite(upto)
    upto_i = np.round(np.nan_to_num(upto)).astype(np.int64)
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
        info.update(tinfo)
        if mapped is not None:
            m = mapped >= 0
            t_s = np.where(m, mapped - dur_i if point == "end" else mapped, t_s)
    t_e = t_s + upto_i
    d = df.with_columns(pl.Series("t_s", t_s),
                        pl.when(pl.Series(te_ok)).then(pl.Series(t_e)).otherwise(None).alias("t_e"),
                        pl.Series("mpdu", mpdu),
                        pl.Series("dur", dur_i))
    data = d.filter((pl.col("wlan_type") == 2) & pl.col("ip_version").is_not_null())
    ip = (data.select(_key_expr().alias("key"), "t_s", "t_e", "ts_ns", *_pair_exprs(),
                      pl.col("ip_ttl").cast(pl.Int16).alias("ttl"))
          .group_by("key")
          .agg(pl.col("t_s").min(), pl.col("t_e").max(),
               (pl.col("ts_ns").max() - pl.col("ts_ns").min()).alias("span"),
               pl.col("pair").first(), pl.col("orient").first(), pl.col("ttl").first())
          .filter(pl.col("span") <= RETRY_SPAN_NS).drop("span"))
    fkey = pl.struct(pl.col("wlan_ta"), pl.col("wlan_ra"), pl.col("wlan_seq").cast(pl.UInt16),
                     pl.col("wlan_frag").cast(pl.UInt8), pl.col("wlan_retry").cast(pl.Boolean),
                     pl.col("wlan_type").cast(pl.UInt8), pl.col("wlan_subtype").cast(pl.UInt8),
                     pl.col("wlan_tid").cast(pl.UInt8), pl.col("wlan_pn").cast(pl.UInt64),
                     _key_expr()).hash(seed=HASH_SEED)
    fr = (d.filter(pl.col("wlan_ta").is_not_null() & pl.col("wlan_seq").is_not_null()
                   & pl.col("wlan_type").is_in([0, 2]))
          .select(fkey.alias("key"), (pl.col("t_s") + pl.col("dur")).alias("t"))
          .filter(pl.len().over("key") == 1))
    # Protected data frames: station, direction and size, for the size-and-order path.
    sz = (d.filter((pl.col("wlan_type") == 2) & pl.col("wlan_protected").fill_null(False)
                   & (pl.col("mpdu") > 0))
          .select("t_s", "t_e",
                  pl.when(pl.col("wlan_from_ds") & ~pl.col("wlan_to_ds")).then(pl.col("wlan_ra"))
                  .otherwise(pl.col("wlan_ta")).alias("sta"),
                  (pl.col("wlan_from_ds") & ~pl.col("wlan_to_ds")).alias("down"),
                  pl.col("wlan_sa").alias("sa"), pl.col("wlan_da").alias("da"),
                  pl.col("mpdu"), pl.col("wlan_retry").fill_null(False).alias("retry"),
                  pl.col("wlan_pn"), pl.col("wlan_ta"), pl.col("wlan_seq"),
                  ((pl.col("wlan_to_ds") & pl.col("wlan_from_ds")).cast(pl.Int64) * 6
                   + 24 + 2 * ((pl.col("wlan_subtype").cast(pl.Int32) & 8) != 0).cast(pl.Int64)
                   + 4 * (pl.col("wlan_order").fill_null(False) & ((pl.col("wlan_subtype").cast(pl.Int32) & 8) != 0))
                   .cast(pl.Int64)).alias("hdr")))
    info.update({"ip_keys": ip.height, "frame_keys": fr.height, "protected_data": sz.height})
    return Observations(file, kind, ip, fr=fr, sz=sz, info=info)


# ---------------------------------------------------------------------------------------------
# joins between two captures


def match_ip(a: Observations, b: Observations) -> pl.DataFrame:
    """Return the IP packets both captures saw: tAs, tAe, tBs, tBe, pair, orient, ttl_a, ttl_b."""
    j = a.ip.join(b.ip.select("key", "t_s", "t_e", "ttl"), on="key", how="inner", suffix="_b")
    return j.select(pl.col("t_s").alias("tAs"), pl.col("t_e").alias("tAe"), pl.col("t_s_b").alias("tBs"),
                    pl.col("t_e_b").alias("tBe"), "pair", "orient", pl.col("ttl").alias("ttl_a"),
                    pl.col("ttl_b"))


def match_frames(a: Observations, b: Observations) -> pl.DataFrame:
    """Return the 802.11 frames both sniffers heard: tA, tB (frame ends)."""
    if a.fr is None or b.fr is None:
        return pl.DataFrame(schema={"tA": pl.Int64, "tB": pl.Int64})
    j = a.fr.join(b.fr, on="key", how="inner", suffix="_b")
    return j.select(pl.col("t").alias("tA"), pl.col("t_b").alias("tB"))
