"""Protected 802.11 data frames matched to wired packets by size and order (no keys, no decryption).

A protected data frame's IP length is its MPDU length less the 802.11 header, the cipher's overhead
(CCMP 16 bytes: 8 header + 8 MIC; TKIP 20: 8 IV/extended IV + 8 MIC + 4 ICV; WEP 8), LLC/SNAP (8)
and the FCS (4).  The cipher is not known, so each overhead is tried and the one under which sizes
line up best wins.

1. Coarse: for sizes that are rare on both sides, every (air, wired) pair of equal size votes for
   its time difference; the clocks' offset plus a typical delay is the histogram's peak.
2. Fine: an air frame and a wired packet of equal size pair up when, once shifted by that peak,
   each is the other's only candidate within a window (its width from the spread around the peak).
3. Order: between two consecutive such pairs of one station and direction, equal numbers of frames
   and packets with the same sequence of sizes pair up in order.

Stations are told apart on the wired side by Ethernet addresses (a bridging AP forwards the
station's MAC); without them only step 2 runs, over all traffic.  The result has the columns of
`align_match.match_ip` (air side first), one row per pair, with `pair` naming the station and
`orient` the direction, so the two-way fit treats them as it treats keyed matches.
"""
from __future__ import annotations

import numpy as np
import polars as pl

from xlayer.timeline.match import HASH_SEED, RETRY_SPAN_NS, Observations

OVERHEADS = (16, 20, 8)             # CCMP, TKIP, WEP
RARE = 12
BIN_NS = 1_000_000
MIN_VOTES = 5
MAX_WINDOW_NS = 200_000_000


def _air_frames(air: Observations) -> pl.DataFrame | None:
    if air.sz is None or air.sz.height == 0:
        return None
    # MAC retransmissions of one MPDU: first start, last end (as for keyed frames).
    a = (air.sz.with_columns(pl.col("wlan_seq").cast(pl.Int64))
         .group_by("wlan_ta", "wlan_seq", "down", "sta")
         .agg(pl.col("t_s").min(), pl.col("t_e").max(), (pl.col("t_s").max() - pl.col("t_s").min()).alias("span"),
              # the MPDU length as if its header were a QoS data header (26 bytes)
              (pl.col("mpdu") - pl.col("hdr") + 26).first().alias("size0"))
         .filter(pl.col("span") <= RETRY_SPAN_NS).drop("span"))
    return a.with_columns(((pl.col("t_s") + pl.col("t_e").fill_null(pl.col("t_s"))) // 2).alias("t_mid"))


def _wired_key(w: pl.DataFrame, overhead: int) -> pl.DataFrame:
    """Return wired packets keyed by the MPDU length (rounded up to 4) they would have on the air."""
    return w.with_columns(((pl.col("ip_len") + 26 + 8 + 4 + overhead + 3) // 4 * 4).alias("size"))


def _air_key(a: pl.DataFrame) -> pl.Expr:
    # rounded up to 4: the sniffer may record an A-MPDU subframe with its padding
    return ((pl.col("size0") + 3) // 4 * 4).alias("size")


def _votes(a: pl.DataFrame, w: pl.DataFrame, overhead: int) -> tuple[int, int, pl.DataFrame]:
    """Return (peak votes, peak delta ns, the pairs' deltas) for one cipher overhead."""
    aa = a.select(_air_key(a), "t_mid")
    w = _wired_key(w, overhead)
    ca = aa.group_by("size").len().filter(pl.col("len") <= RARE).select("size")
    cw = w.group_by("size").len().filter(pl.col("len") <= RARE).select("size")
    rare = ca.join(cw, on="size")
    if rare.height == 0:
        return 0, 0, pl.DataFrame()
    p = (aa.join(rare, on="size").join(w.join(rare, on="size"), on="size")
         .select((pl.col("t_mid") - pl.col("t")).alias("delta")))
    if p.height == 0:
        return 0, 0, p
    h = p.group_by((pl.col("delta") // BIN_NS).alias("bin")).len()
    # a delay spreads a peak over neighbouring bins: count three at a time
    h3 = (h.with_columns(pl.col("bin") + 1).vstack(h).vstack(h.with_columns(pl.col("bin") - 1))
          .group_by("bin").agg(pl.col("len").sum()))
    best = h3.sort(["len", "bin"], descending=[True, False]).row(0)
    return int(best[1]), int(best[0]) * BIN_NS + BIN_NS // 2, p


def _unique_pairs(a: pl.DataFrame, w: pl.DataFrame, delta: int, window: int) -> pl.DataFrame:
    """Return air/wired pairs of equal size each of which is the other's only candidate in the window."""
    aa = a.with_columns((pl.col("t_mid") - delta).alias("tp")).sort("tp")
    ww = w.sort("t")

    def nearest(left: pl.DataFrame, right: pl.DataFrame, lt: str, rt: str, strategy: str) -> pl.DataFrame:
        return left.join_asof(right, left_on=lt, right_on=rt, by="size", strategy=strategy,
                              tolerance=window, check_sortedness=False)

    wr = ww.select("size", pl.col("t").alias("tw"), pl.col("wid"))
    back = nearest(aa, wr, "tp", "tw", "backward").select("aid", pl.col("wid").alias("wb"))
    fwd = nearest(aa, wr, "tp", "tw", "forward").select("aid", pl.col("wid").alias("wf"))
    c = back.join(fwd, on="aid")
    one = c.filter((pl.col("wb").is_null() != pl.col("wf").is_null()) | (pl.col("wb") == pl.col("wf")))
    one = one.select("aid", pl.coalesce("wb", "wf").alias("wid"))
    # and the other way round: the wired packet has no other air frame of its size in the window
    ar = aa.select("size", "tp", "aid")
    wl = ww.select("size", "t", "wid")
    b2 = wl.join_asof(ar, left_on="t", right_on="tp", by="size", strategy="backward", tolerance=window,
                      check_sortedness=False).select("wid", pl.col("aid").alias("ab"))
    f2 = wl.join_asof(ar, left_on="t", right_on="tp", by="size", strategy="forward", tolerance=window,
                      check_sortedness=False).select("wid", pl.col("aid").alias("af"))
    c2 = b2.join(f2, on="wid")
    one2 = c2.filter((pl.col("ab").is_null() != pl.col("af").is_null()) | (pl.col("ab") == pl.col("af")))
    one2 = one2.select("wid", pl.coalesce("ab", "af").alias("aid"))
    return one.join(one2, on=["aid", "wid"])


def match_sizes(air: Observations, wired: Observations) -> pl.DataFrame | None:
    """Return matches of protected air frames to wired packets (see the module docstring), or None."""
    a0 = _air_frames(air)
    if a0 is None or wired.wired_sz is None or wired.wired_sz.height == 0:
        return None
    a0 = a0.filter(pl.col("size0").is_not_null() & (pl.col("size0") > 20))
    w = (wired.wired_sz.filter(pl.col("ip_len").is_not_null() & (pl.col("ip_len") > 0))
         .select("ip_len", "t", "eth_src", "eth_dst").with_row_index("wid"))
    if a0.height == 0 or w.height == 0:
        return None
    best = max(((*_votes(a0, w, oh), oh) for oh in OVERHEADS), key=lambda r: r[0])
    votes, delta, deltas, overhead = best
    if votes < MIN_VOTES:
        return None
    dv = deltas["delta"].to_numpy()
    near = dv[np.abs(dv - delta) <= 50 * BIN_NS]
    spread = float(np.subtract(*np.percentile(near, [75, 25]))) if len(near) >= 4 else 10 * BIN_NS
    # Wide rather than tight: a partner delayed beyond the window leaves a wrong "unique" pair,
    # and one wrong pair below the delay envelope costs more than many right pairs bring.
    window = int(min(max(5 * spread, 10 * BIN_NS), MAX_WINDOW_NS))
    a = a0.with_columns(_air_key(a0)).sort("t_mid").with_row_index("aid")
    w = _wired_key(w, overhead)
    pairs = _unique_pairs(a, w, delta, window)
    pairs = _order_fill(a, w, pairs)
    if pairs.height == 0:
        return None
    j = (pairs.join(a.select("aid", "t_s", "t_e", "sta", "down"), on="aid")
         .join(w.select("wid", "t"), on="wid"))
    return j.select(pl.col("t_s").alias("tAirS"), pl.col("t_e").alias("tAirE"), pl.col("t").alias("tW"),
                    pl.col("sta").hash(seed=HASH_SEED).alias("pair"), pl.col("down").alias("orient"),
                    pl.lit(None, dtype=pl.Int16).alias("ttl_a"), pl.lit(None, dtype=pl.Int16).alias("ttl_b"))


def _order_fill(a: pl.DataFrame, w: pl.DataFrame, pairs: pl.DataFrame) -> pl.DataFrame:
    """Add the pairs that order gives between consecutive anchor pairs of one station and direction."""
    if pairs.height == 0:
        return pairs
    # the wired packets of a station's stream: its MAC as destination (down) or source (up)
    wd = w.select("wid", "t", "size", pl.col("eth_dst").alias("sta"), pl.lit(True).alias("down"))
    wu = w.select("wid", "t", "size", pl.col("eth_src").alias("sta"), pl.lit(False).alias("down"))
    ws = pl.concat([wd, wu]).filter(pl.col("sta").is_not_null())
    stas = a.select("sta", "down").unique()
    ws = ws.join(stas, on=["sta", "down"])
    if ws.height == 0:
        return pairs
    anchor = pairs.join(a.select("aid", "sta", "down"), on="aid")
    ws = ws.join(anchor.select("wid", "sta", "down", pl.lit(True).alias("is_anchor")), on=["wid", "sta", "down"],
                 how="left")
    # keep only anchors whose wired packet belongs to the same stream
    good = ws.filter(pl.col("is_anchor").fill_null(False)).select("wid", "sta", "down")
    anchor = anchor.join(good, on=["wid", "sta", "down"])
    if anchor.height < 2:
        return pairs
    aa = a.join(anchor.select("aid", pl.lit(True).alias("is_anchor")), on="aid", how="left")
    seg = lambda df, t: (df.sort(t).with_columns(  # noqa: E731
        pl.col("is_anchor").fill_null(False).cast(pl.Int32).cum_sum().over(["sta", "down"]).alias("seg")))
    aa = seg(aa, "t_mid").filter(~pl.col("is_anchor").fill_null(False))
    ws = seg(ws.with_columns(pl.col("is_anchor").fill_null(False)), "t").filter(~pl.col("is_anchor"))
    ga = aa.group_by("sta", "down", "seg").agg(pl.col("aid").sort_by("t_mid"), pl.col("size").sort_by("t_mid"))
    gw = ws.group_by("sta", "down", "seg").agg(pl.col("wid").sort_by("t"), pl.col("size").sort_by("t").alias("wsize"))
    last = anchor.group_by("sta", "down").len().rename({"len": "nseg"})
    g = ga.join(gw, on=["sta", "down", "seg"]).join(last, on=["sta", "down"]).filter(
        (pl.col("seg") > 0) & (pl.col("seg") < pl.col("nseg"))          # between two anchors
        & (pl.col("aid").list.len() == pl.col("wid").list.len())
        & (pl.col("size") == pl.col("wsize")))
    if g.height == 0:
        return pairs
    extra = g.select("aid", "wid").explode(["aid", "wid"])
    return pl.concat([pairs, extra.select(pairs.columns).cast(pairs.schema)]).unique()
