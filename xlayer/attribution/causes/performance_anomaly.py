"""The performance anomaly (Heusse et al.): a slow station's airtime share starves the fast ones.

802.11's fair access is per frame, not per second of air: a station at a low PHY rate takes most of
the airtime, and every station's goodput falls towards the slow one's.  Evidence in the window: two
or more stations with downlink data, the slowest one's PHY rate well below the fastest's, and its
airtime share above half; the numbers are each station's rate, airtime share and goodput.  The
condition holds for as long as both stations are busy, so this cause also proposes those windows.
"""
from __future__ import annotations

import polars as pl

from xlayer.attribution.causes.base import NS, Context, Window, clip01
from xlayer.attribution.incidents import CauseFinding

NAME = "performance_anomaly"
COLOR = "#9467bd"          # its incidents in the report
MEANING = "a slow station's airtime share starved the fast ones"
MIN_FRAMES = 50
STEP_NS = NS


def _stations(ss: pl.DataFrame) -> pl.DataFrame:
    d = ss.filter(pl.col("data_frames") > 0)
    return (d.group_by("station").agg(
        pl.col("data_frames").sum().alias("frames"), pl.col("airtime_ns").sum().alias("air"),
        ((pl.col("phy_rate_mbps").fill_null(0) * pl.col("data_frames")).sum() / pl.col("data_frames").sum())
        .alias("rate")).filter(pl.col("frames") >= MIN_FRAMES))


def _assess(ss: pl.DataFrame) -> tuple[float, dict] | None:
    st = _stations(ss)
    if st.height < 2:
        return None
    st = st.with_columns((pl.col("air") / pl.col("air").sum()).alias("share")).sort("share", descending=True)
    slow = st.row(0, named=True)
    fast = st.sort("rate", descending=True).row(0, named=True)
    if slow["station"] == fast["station"] or not fast["rate"]:
        return None
    ratio = slow["rate"] / fast["rate"]
    # Equal frames, unequal rates: a slow station past half the air while its rate is a fraction
    # of the fast one's is the anomaly (ideal DCF gives it rate_fast / (rate_fast + rate_slow)).
    conf = clip01((slow["share"] - 0.4) / 0.2) * clip01((1 - ratio) / 0.5) * 0.85
    return conf, {"slow": slow, "fast": fast, "stations": st.to_dicts()}


def score(ctx: Context, w: Window) -> CauseFinding | None:
    """Return the evidence of the performance anomaly in the window."""
    ss = ctx.between("station_series", w.start_ns, w.end_ns, col="bin_start_ns")
    a = _assess(ss)
    if a is None or a[0] < 0.05:
        return None
    conf, d = a
    slow, fast = d["slow"], d["fast"]
    secs = max(w.seconds, 1e-9)
    fs = ctx.between("flow_series", w.start_ns, w.end_ns, col="bin_start_ns")
    goodput = {}
    for st in (slow["station"], fast["station"]):
        for f in ctx.flows_of([st]):
            g = fs.filter(pl.col("flow") == f)
            if g.height:
                best = g.group_by("capture_file").agg(pl.col("goodput_bytes").sum()).sort("goodput_bytes")
                goodput[f] = float(best["goodput_bytes"][0]) * 8 / secs
    text = (f"{slow['station']} at {slow['rate']:.1f} Mbit/s took {slow['share']:.0%} of the airtime; "
            f"{fast['station']} at {fast['rate']:.1f} Mbit/s got {fast['share']:.0%}")
    stations = [s["station"] for s in d["stations"]]
    return CauseFinding(NAME, conf, text,
                        {"stations": [{"station": s["station"], "rate_mbps": s["rate"], "airtime_share": s["share"]}
                                      for s in d["stations"]], "goodput_bps": goodput},
                        stations=stations, flows=ctx.flows_of(stations))


def propose(ctx: Context) -> list[Window]:
    """Return the spans (1 s steps) where the anomaly holds, as sustained windows."""
    ss = ctx.table("station_series")
    if ss.height == 0 or ss["station"].n_unique() < 2:
        return []
    # The span where two or more stations carry data: if the anomaly holds over all of it, that is
    # the window (the condition is the run's, not a moment's).
    busy = ss.filter(pl.col("data_frames") > 0).group_by("station").agg(
        pl.col("bin_start_ns").min().alias("lo"), pl.col("bin_start_ns").max().alias("hi"),
        pl.col("data_frames").sum().alias("n")).filter(pl.col("n") >= MIN_FRAMES).sort("n", descending=True)
    if busy.height >= 2:
        s, e = int(busy["lo"].head(2).max()), int(busy["hi"].head(2).min()) + ctx.tl.bin_ns
        a = _assess(ss.filter((pl.col("bin_start_ns") >= s) & (pl.col("bin_start_ns") < e))) if e > s else None
        if a is not None and a[0] >= 0.4:
            stations = [x["station"] for x in a[1]["stations"]]
            return [Window(s, e, ctx.flows_of(stations), stations, kind="sustained", proposer=NAME)]
    lo, hi = int(ss["bin_start_ns"].min()), int(ss["bin_start_ns"].max())
    good = []
    for t in range(lo, hi + 1, STEP_NS):
        a = _assess(ss.filter((pl.col("bin_start_ns") >= t) & (pl.col("bin_start_ns") < t + STEP_NS)))
        good.append(a is not None and a[0] >= 0.4)
    out: list[Window] = []
    i = 0
    while i < len(good):
        if not good[i]:
            i += 1
            continue
        j = i
        while j < len(good) and good[j]:
            j += 1
        if j - i >= 2:
            s, e = lo + i * STEP_NS, min(lo + j * STEP_NS, hi + 1)
            a = _assess(ss.filter((pl.col("bin_start_ns") >= s) & (pl.col("bin_start_ns") < e)))
            stations = [x["station"] for x in a[1]["stations"]] if a else []
            out.append(Window(s, e, ctx.flows_of(stations), stations, kind="sustained", proposer=NAME))
        i = j
    return out
