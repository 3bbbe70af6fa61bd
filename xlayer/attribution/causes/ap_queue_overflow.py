"""AP (or bottleneck) queue overflow: packets that reached the queue's input and never left it.

With an air capture, the cross-layer join says which downlink packets the AP dropped (seen on its
wired side, never on the air, and no ACK or Block Ack shows the sniffer merely missed them).
Without one, packets lost between two wired captures on the path (a router's input and output)
are the same evidence.  The numbers: packets dropped of those offered, per station, the sojourn
time of those that got through (p95), and for each UDP flow to an affected station three rates over
the same span (the window and `LEAD_NS` before it): offered (reached the AP's wired side), forwarded
(the AP transmitted it on the air) and delivered (acknowledged by the station), beside everything the
station was delivered (its airtime-limited capacity).
"""
from __future__ import annotations

import polars as pl

from xlayer.attribution.causes.base import (
    LEAD_NS,
    NS,
    Context,
    Window,
    clip01,
    frames,
    mbps,
)
from xlayer.attribution.incidents import CauseFinding

NAME = "ap_queue_overflow"
COLOR = "#8c564b"          # its incidents in the report
MEANING = "packets reached the AP's (or a bottleneck's) queue and never left it"
MIN_DROPS = 3


def _confidence(n: int, offered: int) -> float:
    if n < MIN_DROPS:
        return 0.0
    frac = n / max(offered, 1)
    return clip01(0.55 + 0.4 * min(1.0, n / 30) * clip01(frac / 0.02))


def _air(ctx: Context, w: Window) -> CauseFinding | None:
    s, e = w.start_ns - LEAD_NS, w.end_ns
    dl = ctx.between("downlink", s, e)
    if dl.height == 0:
        return None
    dropped = dl.filter(pl.col("fate") == "dropped_at_ap")
    n = dropped.height
    conf = _confidence(n, dl.height)
    if conf <= 0:
        return None
    secs = max((e - s) / NS, 1e-9)
    # in station order: group_by's order varies between runs, and the text names the first UDP flow
    per_station = {st: c for st, c in dropped.group_by("station").len().sort("station").iter_rows() if st is not None}
    soj = dl.filter(pl.col("sojourn_ns").is_not_null())["sojourn_ns"]
    p95 = float(soj.quantile(0.95)) / 1e6 if soj.len() else None
    udp = []
    for st in per_station:
        to_st = dl.filter(pl.col("station") == st)
        delivered_bps = float(to_st.filter(pl.col("fate") == "delivered")["ip_len"].cast(pl.Float64).sum()) * 8 / secs
        for flow, offered, forwarded, delivered in _udp_bytes(to_st).iter_rows():
            udp.append({"flow": flow, "station": st, "offered_bps": offered * 8 / secs,
                        "forwarded_bps": forwarded * 8 / secs, "delivered_bps": delivered * 8 / secs,
                        "station_delivered_bps": delivered_bps})
    worst = max(per_station, key=per_station.get) if per_station else None
    # The span is said: the report's AP queue panel counts the whole capture, this the window only.
    text = (f"AP dropped {n:,} of {dl.height:,} downlink packets"
            + (f" ({per_station[worst]:,} to {worst})" if worst else "")
            + f" in {secs:.1f} s (the incident and {LEAD_NS / NS:g} s before it)"
            + (f"; sojourn p95 {p95:.0f} ms" if p95 is not None else ""))
    for u in udp[:1]:
        text += (f"; {u['flow']} over that span: offered {mbps(u['offered_bps'])} at the AP's wired side, "
                 f"forwarded {mbps(u['forwarded_bps'])} on the air, delivered {mbps(u['delivered_bps'])}; "
                 f"all traffic delivered to {u['station']}: {mbps(u['station_delivered_bps'])} (airtime-limited)")
    return CauseFinding(NAME, conf, text,
                        {"dropped": n, "offered": dl.height, "span_s": secs, "dropped_per_station": per_station,
                         "sojourn_p95_ms": p95, "udp": udp},
                        stations=sorted(per_station), flows=sorted(dropped["flow"].drop_nulls().unique().to_list()),
                        frames=frames(dropped, "dropped at the AP (wired side)"))


def _udp_bytes(to_st: pl.DataFrame) -> pl.DataFrame:
    """Return (flow, offered, forwarded, delivered) IP bytes of each UDP flow in downlink rows to one station.

    Offered: every packet seen on the AP's wired side; forwarded: those the AP transmitted (ACKed,
    never ACKed, or missed by the sniffer but confirmed); delivered: those the station acknowledged.
    """
    size = pl.col("ip_len").cast(pl.Float64)
    sent = pl.col("fate").is_in(["delivered", "air_unacked", "sniffer_missed"])
    return (to_st.filter(pl.col("flow").str.starts_with("udp "))
            .group_by("flow", maintain_order=True)
            .agg(size.sum().alias("offered"), size.filter(sent).sum().alias("forwarded"),
                 size.filter(pl.col("fate") == "delivered").sum().alias("delivered")))


def _wired(ctx: Context, w: Window) -> CauseFinding | None:
    s, e = w.start_ns - LEAD_NS, w.end_ns
    lb = ctx.table("loss_bursts")
    if lb.height == 0:
        return None
    kinds = {x.file: x.kind for x in ctx.tl.entries()}
    lb = lb.filter((pl.col("start_ts_ns") >= s) & (pl.col("start_ts_ns") < e))
    lb = lb.filter(pl.col("capture_file_a").replace_strict(kinds, default="?") == "wired")
    lb = lb.filter(pl.col("capture_file_b").replace_strict(kinds, default="?") == "wired")
    if lb.height == 0:
        return None
    pairs = lb.group_by("vantage_a", "vantage_b", "capture_file_a").agg(pl.col("length").sum().alias("lost"),
                                                                       pl.len().alias("bursts"))
    # The loss appears on every pair spanning the queue; the pair with the fewest hops that shows it
    # all (the fewest total packets lost elsewhere) is where the queue is: take the largest count.
    best = pairs.sort(["lost", "vantage_a", "vantage_b"], descending=[True, False, False]).row(0, named=True)
    n = int(best["lost"])
    sent = ctx.table("loss").filter((pl.col("vantage_a") == best["vantage_a"]) & (pl.col("vantage_b") == best["vantage_b"]))
    offered = int(sent["sent"].sum()) if sent.height else n
    conf = _confidence(n, offered)
    if conf <= 0:
        return None
    mine = lb.filter((pl.col("vantage_a") == best["vantage_a"]) & (pl.col("vantage_b") == best["vantage_b"]))
    flows = sorted(mine["flow"].unique().to_list())
    text = (f"{n:,} packets entered the queue between {best['vantage_a']} and {best['vantage_b']} and never "
            f"left it ({best['bursts']} loss periods)")
    return CauseFinding(NAME, conf, text, {"dropped": n, "between": [best["vantage_a"], best["vantage_b"]],
                                           "loss_periods": int(best["bursts"])},
                        flows=flows, frames=frames(mine, "first packet of a loss period", file_col="capture_file_a",
                                                   frame_col="first_frame_a"))


def score(ctx: Context, w: Window) -> CauseFinding | None:
    """Return the evidence of queue overflow in the window (AP drops, else wired-path loss)."""
    if ctx.tl.entries("air"):
        # With an air capture the join tells AP drops from air losses and sniffer misses; wired-path
        # loss across the air (a station's uplink) would be mistaken for a queue.
        return _air(ctx, w)
    return _wired(ctx, w)
