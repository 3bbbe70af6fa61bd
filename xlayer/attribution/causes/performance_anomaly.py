"""The performance anomaly (Heusse et al.): a slow station's airtime share starves the fast ones.

802.11's fair access is per frame, not per second of air: a station at a low PHY rate takes most of
the airtime, and every station's goodput falls towards the slow one's.  Two measures, the stronger
counts: (1) from the air, two or more stations with data, the one with the largest airtime share at
a PHY rate well below the fastest's and past 40 % of the air, its signal weaker than the others' (where
the capture has it); (2) from the AP's transmit line (the
`delay` table, `delaysplit.find_hog`), one station whose packets took far more of the AP's service
time than their share, the excess being the line time the others lost, on a weak link (its rate a
fraction of the others', its signal weaker).  The second sees the anomaly among many stations, where
the slow one's airtime share stays under half.  Both count only the line time the others wanted:
where the AP's transmit line stood idle while the slow station's packets were in it, the others'
traffic was limited elsewhere (a TCP window, the wired path) and could have had that time, so it comes
off the slow station's excess (`delaysplit.Hog.lost_share`; for the air measure only where the slow
station's frames are mostly the AP's to it).  The condition holds for as long as the stations are
busy, so this cause also proposes those windows.  A drop it is the root of spans its episode: the
0.1 s steps around the drop in which the slow station kept taking about as much air at its slow rate
as in the drop (`episode`), since its traffic starts before the others' goodput gives way.
"""
from __future__ import annotations

from statistics import median
from typing import Callable

import polars as pl

from xlayer.attribution.causes import delaysplit, episodes
from xlayer.attribution.causes.base import NS, Context, Window, clip01, frames
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
        .alias("rate"), pl.col("signal_dbm").median().alias("signal")).filter(pl.col("frames") >= MIN_FRAMES))


def _weak_signal(st: pl.DataFrame, station: str) -> bool:
    """Return whether `station`'s signal is `delaysplit.WEAK_SIGNAL_DB` below the others' median, or unknown:
    a station near the AP at a low rate is rate adaptation's choice of the moment, not a weak link."""
    own = st.filter(pl.col("station") == station)["signal"].drop_nulls()
    others = st.filter(pl.col("station") != station)["signal"].drop_nulls()
    if own.len() == 0 or others.len() == 0:
        return True
    return float(others.median()) - float(own[0]) >= delaysplit.WEAK_SIGNAL_DB


def _line_busy(ctx: Context, station: str, start_ns: int, end_ns: int) -> float:
    """Return the share of [start_ns, end_ns) the AP's transmit line was busy when `station`'s data
    frames there are mostly the AP's to it (1.0 when they are its own, or the line is not seen).

    Frames to a slow station take line time from the others' frames only while those wait behind
    them in the AP; stations sending their own frames contend on the air, which the AP's line does
    not show."""
    air = ctx.between("air_frames", start_ns, end_ns).filter(pl.col("wlan_type") == 2)
    down = air.filter(pl.col("wlan_ra") == station).height
    if down == 0 or down < air.filter(pl.col("wlan_ta") == station).height:
        return 1.0
    d = ctx.between("delay", start_ns, end_ns)
    if d.filter(pl.col("ap_ns").is_not_null()).height < delaysplit.MIN_PACKETS:
        return 1.0
    return delaysplit.line_busy(d, start_ns, end_ns, station)


def _assess(ss: pl.DataFrame, busy: Callable[[str], float] | None = None) -> tuple[float, dict] | None:
    """Return (confidence, numbers) of the anomaly from the stations' airtime, or None; `busy` gives
    the AP line's busy share for the slow station (`_line_busy`)."""
    st = _stations(ss)
    if st.height < 2:
        return None
    st = st.with_columns((pl.col("air") / pl.col("air").sum()).alias("share")).sort("share", descending=True)
    slow = st.row(0, named=True)
    fast = st.sort("rate", descending=True).row(0, named=True)
    if slow["station"] == fast["station"] or not fast["rate"]:
        return None
    ratio = slow["rate"] / fast["rate"]
    if not _weak_signal(st, slow["station"]):
        return None
    # Equal frames, unequal rates: a slow station past half the air while its rate is a fraction
    # of the fast one's is the anomaly (ideal DCF gives it rate_fast / (rate_fast + rate_slow)).
    # Its share is of the line's busy time: what the line left idle the others could have had
    # (`delaysplit.Hog.lost_share`), so that comes off it.
    u = max(busy(slow["station"]) if busy is not None else 1.0, 1e-9)
    share = slow["share"] - (1.0 - u) / u
    conf = clip01((share - 0.4) / 0.2) * clip01((1 - ratio) / 0.5) * 0.85
    return conf, {"slow": slow, "fast": fast, "stations": st.to_dicts(), "line_busy": u}


def _hog_conf(h: delaysplit.Hog | None) -> float:
    """Return the anomaly's confidence from the AP's service time: the others' lost share on a weak link."""
    if h is None or not h.weak_link:
        return 0.0
    return clip01((h.lost_share - 0.05) / 0.2) * 0.9


def _hog_finding(ctx: Context, h: delaysplit.Hog, conf: float, extra: dict | None = None) -> CauseFinding:
    """Return the finding of a hog station on a weak link."""
    rate = f" at {h.rate_mbps:.1f} Mbit/s" if h.rate_mbps is not None else ""
    orate = f" at {h.others_rate_mbps:.1f} Mbit/s" if h.others_rate_mbps is not None else ""
    text = (f"{h.station}{rate} held the AP's transmit line {h.service_share:.0%} of the time for "
            f"{h.packet_share:.0%} of the packets ({h.per_packet_ms:.2f} ms per packet, the others{orate} "
            f"{h.others_per_packet_ms:.2f} ms) while the line was busy {h.line_busy:.0%} of the window: "
            f"the other stations lost {h.lost_share:.0%} of it")
    att = ctx.table("attempts")
    ex = frames(att.filter(pl.col("station") == h.station), "transmission to the slow station") if att.height else []
    return CauseFinding(NAME, conf, text, {"hog": h.as_numbers(), **(extra or {})}, stations=[h.station],
                        flows=ctx.flows_of([h.station]), frames=ex)


def from_delay(ctx: Context, w: Window, split: delaysplit.Split, conf: float) -> CauseFinding | None:
    """Return the anomaly's finding made from a window's delay split (the root of a consequence)."""
    if split.hog is None:
        return None
    return _hog_finding(ctx, split.hog, conf, {"delay_ms": {k: round(v, 3) for k, v in split.inside.items()}})


def score(ctx: Context, w: Window) -> CauseFinding | None:
    """Return the evidence of the performance anomaly in the window."""
    ss = ctx.between("station_series", w.start_ns, w.end_ns, col="bin_start_ns")
    a = _assess(ss, lambda st: _line_busy(ctx, st, w.start_ns, w.end_ns))
    # the condition holds while it holds: read in the window itself, not from before it
    h = delaysplit.find_hog(ctx, w, ctx.between("delay", w.start_ns, w.end_ns))
    hc = _hog_conf(h)
    if h is not None and hc >= 0.05 and (a is None or hc > a[0]):
        return _hog_finding(ctx, h, hc)
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
    if d["line_busy"] < 1.0:
        text += f" (the AP's transmit line busy {d['line_busy']:.0%} of the window)"
    stations = [s["station"] for s in d["stations"]]
    return CauseFinding(NAME, conf, text,
                        {"stations": [{"station": s["station"], "rate_mbps": s["rate"], "airtime_share": s["share"]}
                                      for s in d["stations"]], "goodput_bps": goodput},
                        stations=stations, flows=ctx.flows_of(stations))


def _runs(good: list[bool], lo: int) -> list[tuple[int, int]]:
    """Return [start, end) spans (ns) of two or more consecutive good 1 s steps from `lo`."""
    out, i = [], 0
    while i < len(good):
        j = i
        while j < len(good) and good[j]:
            j += 1
        if j - i >= 2:
            out.append((lo + i * STEP_NS, lo + j * STEP_NS))
        i = max(j, i + 1)
    return out


def _weak_link_in(ctx: Context, station: str, s: int, e: int) -> bool | None:
    """Return whether `station`'s link is weak against the others' within [s, e) (None: not measured there)."""
    w = Window(s, e)
    rates, sig = delaysplit._rates(ctx, w), delaysplit._signals(ctx, w)
    others = [r for st, r in rates.items() if st != station]
    if rates.get(station) is None or not others:
        return None
    osig = [v for st, v in sig.items() if st != station]
    below = median(osig) - sig[station] if station in sig and osig else None
    h = delaysplit.Hog(station, 0.0, 0.0, 0.0, 0.0, 0.0, rates[station], median(others), below, 0.0, 0.0)
    return h.weak_link


def _trim_strong(ctx: Context, station: str, s: int, e: int) -> tuple[int, int]:
    """Return [s, e) less its leading and trailing seconds where the slow station's link was not yet (or
    no longer) weak: a station that walks away is slow only from some point of its span on."""
    while e - s > STEP_NS and _weak_link_in(ctx, station, s, s + STEP_NS) is False:
        s += STEP_NS
    while e - s > STEP_NS and _weak_link_in(ctx, station, e - STEP_NS, e) is False:
        e -= STEP_NS
    return s, e


def _propose_hog(ctx: Context) -> list[Window]:
    """Return the spans (1 s steps) where one station on a weak link holds the AP's transmit line."""
    d = ctx.table("delay")
    if d.height == 0:
        return []
    lo, hi = int(d["ts_ns"].min()), int(d["ts_ns"].max())
    # The condition is the slow station's presence: over the span its packets are sent among the
    # others', if the anomaly holds over all of it, that span is the window (slowest station first).
    per = (d.group_by("station").agg(pl.len().alias("n"), pl.col("service_ns").mean().alias("c"),
                                     pl.col("ts_ns").min().alias("s"), pl.col("ts_ns").max().alias("e"))
           .filter(pl.col("n") >= delaysplit.MIN_PACKETS).sort("c", descending=True))
    for st, s, e in per.select("station", "s", "e").iter_rows():
        span = ctx.between("delay", s, e + 1)
        h = delaysplit.find_hog(ctx, Window(s, e + 1), span)
        if h is not None and h.station == st and _hog_conf(h) >= 0.4:
            s, e = _trim_strong(ctx, st, s, e + 1)
            stations = sorted(ctx.between("delay", s, e)["station"].drop_nulls().unique().to_list())
            return [Window(s, e, ctx.flows_of(stations), stations, kind="sustained", proposer=NAME)]
        break                   # only the slowest station can be the one holding the line
    good = []
    for t in range(lo, hi + 1, STEP_NS):
        # (a window's evidence is read from LEAD_NS before it: a step's own second is read alone here)
        h = delaysplit.find_hog(ctx, Window(t, t + STEP_NS), ctx.between("delay", t, t + STEP_NS))
        good.append(_hog_conf(h) >= 0.4)
    out = []
    for s, e in _runs(good, lo):
        # every station sharing the AP's line in the span loses to the slow one
        stations = sorted(ctx.between("delay", s, e)["station"].drop_nulls().unique().to_list())
        out.append(Window(s, min(e, hi + 1), ctx.flows_of(stations), stations, kind="sustained", proposer=NAME))
    return out


def propose(ctx: Context) -> list[Window]:
    """Return the spans (1 s steps) where the anomaly holds, as sustained windows."""
    hog = _propose_hog(ctx)
    if hog:
        return hog
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
        a = (_assess(ss.filter((pl.col("bin_start_ns") >= s) & (pl.col("bin_start_ns") < e)),
                     lambda st: _line_busy(ctx, st, s, e)) if e > s else None)
        if a is not None and a[0] >= 0.4:
            stations = [x["station"] for x in a[1]["stations"]]
            return [Window(s, e, ctx.flows_of(stations), stations, kind="sustained", proposer=NAME)]
    lo, hi = int(ss["bin_start_ns"].min()), int(ss["bin_start_ns"].max())
    good = []
    for t in range(lo, hi + 1, STEP_NS):
        a = _assess(ss.filter((pl.col("bin_start_ns") >= t) & (pl.col("bin_start_ns") < t + STEP_NS)),
                    lambda st, t=t: _line_busy(ctx, st, t, t + STEP_NS))
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
            a = _assess(ss.filter((pl.col("bin_start_ns") >= s) & (pl.col("bin_start_ns") < e)),
                        lambda st, s=s, e=e: _line_busy(ctx, st, s, e))
            stations = [x["station"] for x in a[1]["stations"]] if a else []
            out.append(Window(s, e, ctx.flows_of(stations), stations, kind="sustained", proposer=NAME))
        i = j
    return out


# The episode of a drop's anomaly: where its slow station kept taking the air at its slow rate.
EPISODE_MIN_AIR = 0.5     # a step counts when the slow station's airtime is this fraction of its median in the drop


def _rates(f: CauseFinding) -> tuple[float, float] | None:
    """Return (slow station's rate, the others' rate) in Mbit/s from a finding's numbers, or None."""
    h = f.numbers.get("hog")
    if h is not None:
        slow, other = h.get("rate_mbps"), h.get("others_rate_mbps")
    else:
        st = f.numbers.get("stations") or []
        slow = st[0]["rate_mbps"] if st else None
        other = max((s["rate_mbps"] or 0.0 for s in st[1:]), default=None)
    if not slow or not other or slow >= other:
        return None
    return float(slow), float(other)


def episode(ctx: Context, w: Window, f: CauseFinding) -> tuple[int, int] | None:
    """Return (start_ns, end_ns) of the run of steps around the drop in which the slow station kept
    sending at its slow rate about as much air as it took in the drop, or None when it cannot be told.

    The anomaly holds while the slow station contends: its traffic starts before the others' goodput
    falls (their queues and TCP's timers absorb the first of it) and may outlast the drop.  A step
    belongs to it when the station's frames took at least EPISODE_MIN_AIR of the airtime per step
    they took in the drop, at a rate nearer its slow rate than the others' (below their geometric mean).
    """
    rates = _rates(f)
    if not f.stations or rates is None:
        return None
    st, cut = f.stations[0], (rates[0] * rates[1]) ** 0.5
    lo, hi = w.start_ns - episodes.MAX_NS, w.end_ns + episodes.MAX_NS
    att = ctx.between("attempts", lo, hi)
    if att.height == 0:
        return None
    k = ((pl.col("ts_ns") - lo) // episodes.STEP_NS).alias("k")
    seen = set(att.select(k.unique())["k"].to_list())     # steps with any transmission: the air was watched
    mine = (att.filter(pl.col("station") == st).group_by(k)
            .agg((pl.col("ts_ns") - pl.col("tx_start_ns")).sum().alias("air"),
                 (((pl.col("ts_ns") - pl.col("tx_start_ns")) * pl.col("rate_mbps")).sum()
                  / (pl.col("ts_ns") - pl.col("tx_start_ns")).sum()).alias("rate")))
    first, last = (w.start_ns - lo) // episodes.STEP_NS, (w.end_ns - 1 - lo) // episodes.STEP_NS
    inside = mine.filter((pl.col("k") >= first) & (pl.col("k") <= last))
    nsteps = int((hi - lo) // episodes.STEP_NS) + 1
    if inside.height == 0:
        return None
    # the drop's steps without the station's frames count as zero air
    need = EPISODE_MIN_AIR * float(pl.concat([inside["air"].cast(pl.Float64),
                                              pl.Series([0.0] * max(0, last - first + 1 - inside.height))]).median())
    if need <= 0:
        return None
    state = [-1 if s in seen else 0 for s in range(nsteps)]
    for s, air, rate in mine.iter_rows():
        if 0 <= s < nsteps and air and air >= need and rate is not None and rate <= cut:
            state[s] = 1
    return episodes.span(state, lo, w.start_ns, w.end_ns, ctx.cfg.merge_gap_s)
