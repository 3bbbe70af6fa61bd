"""Drop detection: the windows where a flow's goodput fell well below its own steady state.

Per flow, one goodput series is used: the one from the capture furthest downstream (the capture
whose first packet of the flow is latest, among those with at least a tenth of the packets of the
best one: a queue that drops most of a flow still leaves the rest to count), because a drop made by
a queue or the air shows only after it.  Only data flows count: a flow carrying transport payload at
`min_rate_bps` or more on average (default 100 kbit/s, `xlayer analyze --min-rate`) over at least
`min_flow_duration_s` between its first and last packet (default 1 s, `--min-flow-duration`), at one
capture at least.  `left_out(flows, cfg)` lists the others with the reason; `xlayer analyze` names
them in its notes, so that a slow flow (a control connection, a flow starved from its start) does
not vanish without a word.

The series is smoothed over `smooth_bins` bins; the flow's steady state (its baseline) is the
`baseline_quantile` of the smoothed series inside the analysis window, leaving out the flow's slow
start (the first `warmup_s`, or `WARMUP_RTTS` base round trips of a TCP flow when longer) and its
last bin.  A drop is a run of smoothed bins below
`threshold` x baseline lasting at least `min_duration_s`; runs closer than `merge_gap_s` are one.
Windows of different flows that overlap (or nearly: `merge_gap_s`) are merged into one incident
window, as study 001 read its plots: flows that drop together share a cause.

Flows sharing a path also fall together by less than that: a station retried for a burst holds the
AP's queue for every station behind it, and each flow loses a third.  TCP flows hold their summed
goodput when only their shares move, so a fall of the sum under `SHARED_KEPT` of its steady state,
from that level (`path_drops`), is a drop of the path, with the flows that fell in it.  The same
ratio decides the converse: one flow's drop while the sum kept `SHARED_KEPT` is sharing, no incident,
unless the flow delivered nothing (a stall: `analyze.sharing`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from xlayer.text import NS


@dataclass(frozen=True)
class DropConfig:
    """Thresholds of drop detection (see the module docstring)."""

    threshold: float = 0.5
    min_duration_s: float = 0.3
    smooth_bins: int = 3
    baseline_quantile: float = 0.9
    warmup_s: float = 0.5
    merge_gap_s: float = 0.3
    min_rate_bps: float = 100_000.0               # a data flow carries at least this payload rate, bit/s
    min_flow_duration_s: float = 1.0              # ... over at least this long (first to last packet)
    window: tuple[float, float] | None = None     # analysis window, seconds since the bundle's first packet

    @property
    def min_seconds(self) -> float:
        """Return `min_flow_duration_s` (its former name)."""
        return self.min_flow_duration_s


def _with_rate(flows: pl.DataFrame) -> pl.DataFrame:
    """Return the flows table with `_dur` (seconds, first to last packet) and `_rate` (payload bit/s) added."""
    f = flows.with_columns(((pl.col("last_ts_ns") - pl.col("first_ts_ns")) / NS).alias("_dur"))
    return f.with_columns(pl.when(pl.col("_dur") > 0).then(pl.col("payload_bytes") * 8 / pl.col("_dur"))
                          .alias("_rate"))


def data_flows(flows: pl.DataFrame, cfg: DropConfig) -> pl.DataFrame:
    """Return one row per data flow: the flow and the capture (vantage, file) its series is read from."""
    if flows.height == 0:
        return flows.select("flow", "vantage", "capture_file")
    f = flows.with_columns(((pl.col("last_ts_ns") - pl.col("first_ts_ns")) / NS).alias("_dur"))
    f = f.filter((pl.col("payload_bytes") > 0) & (pl.col("_dur") >= cfg.min_flow_duration_s))
    f = f.filter(pl.col("payload_bytes") * 8 / pl.col("_dur") >= cfg.min_rate_bps)
    f = f.with_columns(pl.col("packets").max().over("flow").alias("_best"))
    f = f.filter(pl.col("packets") >= pl.col("_best") * 0.1)
    return (f.sort(["flow", "first_ts_ns", "capture_file"], descending=[False, True, False])
            .group_by("flow", maintain_order=True).first().select("flow", "vantage", "capture_file"))


def left_out(flows: pl.DataFrame, cfg: DropConfig) -> pl.DataFrame:
    """Return one row per flow `data_flows` leaves out, with the numbers that decided it.

    Columns: flow, proto, vantage and capture_file (the capture that saw most of its payload),
    payload_bytes, duration_s, rate_bps (payload bit/s; null for a single packet), and reason:
    "no_payload", "below_rate", "too_short" or "below_rate_and_too_short" (against `min_rate_bps`
    and `min_flow_duration_s`).  Sorted by payload, largest first.
    """
    schema = {"flow": pl.String, "proto": pl.String, "vantage": pl.String, "capture_file": pl.String,
              "payload_bytes": pl.Int64, "duration_s": pl.Float64, "rate_bps": pl.Float64, "reason": pl.String}
    if flows.height == 0:
        return pl.DataFrame(schema=schema)
    kept = data_flows(flows, cfg)["flow"]
    f = _with_rate(flows.filter(~pl.col("flow").is_in(kept.to_list())))
    f = (f.sort(["flow", "payload_bytes", "_dur", "capture_file"], descending=[False, True, True, False])
         .group_by("flow", maintain_order=True).first())
    slow = pl.col("_rate").fill_null(0.0) < cfg.min_rate_bps
    short = pl.col("_dur") < cfg.min_flow_duration_s
    reason = (pl.when(pl.col("payload_bytes").fill_null(0) <= 0).then(pl.lit("no_payload"))
              .when(slow & short).then(pl.lit("below_rate_and_too_short"))
              .when(short).then(pl.lit("too_short")).otherwise(pl.lit("below_rate")))
    out = f.select("flow", "proto", "vantage", "capture_file", pl.col("payload_bytes").fill_null(0),
                   pl.col("_dur").alias("duration_s"), pl.col("_rate").alias("rate_bps"), reason.alias("reason"))
    return out.cast(schema).sort(["payload_bytes", "flow"], descending=[True, False])


def _until_conversation_ends(s: pl.DataFrame, flows: pl.DataFrame) -> pl.DataFrame:
    """Return the series with zero bins added after a flow's last packet while its conversation went on.

    A flow starved to nothing (every packet dropped, the sender backing off its timer) ends its own
    series early, but its sender is still trying: until the last packet of the conversation at any
    capture, its goodput is zero, not unknown.
    """
    if s.height == 0 or flows.height == 0:
        return s
    ends = flows.group_by("conn").agg(pl.col("last_ts_ns").max().alias("_end"))
    per = (s.group_by("flow", "vantage", "capture_file").agg(pl.col("bin_start_ns").max().alias("_last"),
                                                             pl.col("bin_ns").first())
           .join(flows.select("flow", "conn").unique("flow"), on="flow").join(ends, on="conn"))
    extra = []
    for r in per.iter_rows(named=True):
        first = r["_last"] + r["bin_ns"]
        if r["_end"] >= first + r["bin_ns"]:
            t = np.arange(first, r["_end"], r["bin_ns"], dtype=np.int64)
            extra.append(pl.DataFrame({"flow": r["flow"], "vantage": r["vantage"], "capture_file": r["capture_file"],
                                       "bin_start_ns": t, "bin_ns": r["bin_ns"]}))
    if not extra:
        return s
    add = pl.concat(extra).with_columns(pl.lit(0.0).alias("goodput_bps"))
    return pl.concat([s, add], how="diagonal_relaxed").with_columns(pl.col("goodput_bps").fill_null(0.0))


def flow_goodput(series: pl.DataFrame, chosen: pl.DataFrame, cfg: DropConfig,
                 flows: pl.DataFrame | None = None) -> pl.DataFrame:
    """Return the chosen series per flow with `smooth_bps` (rolling mean) added, sorted by flow and time."""
    s = series.join(chosen, on=["flow", "vantage", "capture_file"], how="inner")
    if flows is not None:
        s = _until_conversation_ends(s, flows)
    s = s.sort("flow", "bin_start_ns")
    return s.with_columns(pl.col("goodput_bps").rolling_mean(cfg.smooth_bins, min_samples=1, center=True)
                          .over("flow").alias("smooth_bps"))


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """Return [start, end) index pairs of the True runs of a boolean array."""
    if mask.size == 0:
        return []
    d = np.diff(np.concatenate(([0], mask.astype(np.int8), [0])))
    return list(zip(np.flatnonzero(d == 1).tolist(), np.flatnonzero(d == -1).tolist()))


def _low_runs(low: np.ndarray, bin_ns: int, cfg: DropConfig) -> list[tuple[int, int]]:
    """Return [start, end) bin index pairs of the low runs, those `merge_gap_s` apart or less joined
    (one drop, not several), lasting `min_duration_s` or more."""
    gap = max(1, int(round(cfg.merge_gap_s * NS / bin_ns)))
    merged: list[list[int]] = []
    for a, b in _runs(low):
        if merged and a - merged[-1][1] <= gap:
            merged[-1][1] = b
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged if (b - a) * bin_ns >= cfg.min_duration_s * NS]


WARMUP_RTTS = 10        # slow start reaches a path's window within this many base round trips


def warmups(rtt: pl.DataFrame, cfg: DropConfig) -> dict[str, int]:
    """Return per TCP flow its warm-up (ns): `warmup_s`, or `WARMUP_RTTS` base round trips when longer.

    A flow's goodput climbs through slow start for some round trips, so a path 70 ms away warms up
    for over a second; the base round trip is the smallest sample at the capture that sees the most
    of it (the sender's: the whole round trip)."""
    if rtt.height == 0:
        return {}
    base = (rtt.filter(pl.col("rtt_ns") > 0).group_by("flow", "capture_file").agg(pl.col("rtt_ns").min())
            .group_by("flow").agg(pl.col("rtt_ns").max()))
    floor = int(cfg.warmup_s * NS)
    return {f: max(floor, int(r) * WARMUP_RTTS) for f, r in base.iter_rows()}


def find_drops(g: pl.DataFrame, cfg: DropConfig, span: tuple[int, int] | None = None,
               warmup_ns: dict[str, int] | None = None) -> pl.DataFrame:
    """Return one row per drop of one flow: flow, start_ns, end_ns, baseline_bps, mean_bps (in the window).

    `warmup_ns`: per flow, the start left out (default `warmup_s` for every flow; see `warmups`)."""
    rows = []
    for (flow,), part in g.group_by("flow", maintain_order=True):
        t = part["bin_start_ns"].to_numpy()
        y = part["smooth_bps"].to_numpy()
        raw = part["goodput_bps"].to_numpy()
        if t.size < 3:
            continue
        bin_ns = int(part["bin_ns"][0])
        inside = t >= t[0] + (warmup_ns or {}).get(flow, int(cfg.warmup_s * NS))
        inside[-1] = False
        if span is not None:
            inside &= (t >= span[0]) & (t + bin_ns <= span[1])
        if inside.sum() < 3:
            continue
        base = float(np.quantile(y[inside], cfg.baseline_quantile))
        if base <= 0:
            # nothing delivered after the warm-up although packets went on (a flow starved from within
            # its slow start on): the level it fell from is the warm-up's
            base = float(np.quantile(y, cfg.baseline_quantile))
        if base <= 0:
            continue
        low = (y < cfg.threshold * base) & inside
        for a, b in _low_runs(low, bin_ns, cfg):
            rows.append({"flow": flow, "start_ns": int(t[a]), "end_ns": int(t[b - 1]) + bin_ns,
                         "baseline_bps": base, "mean_bps": float(raw[a:b].mean())})
    schema = {"flow": pl.String, "start_ns": pl.Int64, "end_ns": pl.Int64, "baseline_bps": pl.Float64,
              "mean_bps": pl.Float64}
    return pl.DataFrame(rows, schema=schema)


SHARED_KEPT = 0.75       # the flows' aggregate kept this share of its baseline: sharing shifted, no drop


def _summed(g: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Return (bin start ns, the data flows' summed goodput bit/s) per bin, in time order."""
    agg = g.group_by("bin_start_ns").agg(pl.col("goodput_bps").sum()).sort("bin_start_ns")
    return agg["bin_start_ns"].to_numpy(), agg["goodput_bps"].to_numpy().astype(float)


def aggregate_kept(g: pl.DataFrame, start_ns: int, end_ns: int, cfg: DropConfig) -> float | None:
    """Return the data flows' summed goodput in [start_ns, end_ns) over its steady state (its median
    outside the first `warmup_s`), or None when unknown.

    One flow's goodput falling while the sum of all of them holds is TCP flows sharing a path
    (one backed off, the others took its share), not a drop of the path's throughput.
    """
    if g.height == 0:
        return None
    t, y = _summed(g)
    steady = t >= t[0] + int(cfg.warmup_s * NS)
    steady[-1] = False
    inside = (t >= start_ns) & (t < end_ns)
    if steady.sum() < 3 or not inside.any():
        return None
    base = float(np.median(y[steady]))
    return float(y[inside].mean()) / base if base > 0 else None


FALL_FROM_NS = NS      # a fall of the path is from its steady level within this long before it


def path_drops(g: pl.DataFrame, cfg: DropConfig, span: tuple[int, int] | None = None,
               warmup_ns: dict[str, int] | None = None) -> pl.DataFrame:
    """Return one row per data flow that fell during a fall of the path (`find_drops`' columns).

    TCP flows sharing a path hold their summed goodput: one backs off, the others take its share
    (`aggregate_kept`).  When the sum of two or more data flows falls under `SHARED_KEPT` of its
    steady state (its median after every flow's warm-up) for `min_duration_s`, the path itself lost
    throughput, though no single flow fell to `threshold` of its own: a station retried for a burst
    holds the AP's queue for every station behind it.  It must be a fall: within `FALL_FROM_NS` before
    it, the sum stood at its steady level (a sum still climbing, many flows' slow start on a fast
    link, is not one).  A shallower fall is as sure only when it lost as much: the sum's shortfall
    over the window (seconds of its steady goodput) is at least that of the shortest drop of one
    flow, (1 - `threshold`) x `min_duration_s`.  The flows listed are those whose goodput in the
    window was under `SHARED_KEPT` of their own median (the others held; nothing to explain)."""
    schema = {"flow": pl.String, "start_ns": pl.Int64, "end_ns": pl.Int64, "baseline_bps": pl.Float64,
              "mean_bps": pl.Float64}
    if g.height == 0 or g["flow"].n_unique() < 2:
        return pl.DataFrame(schema=schema)
    t, y = _summed(g)
    bin_ns = int(g["bin_ns"][0])
    ys = pl.Series(y).rolling_mean(cfg.smooth_bins, min_samples=1, center=True).to_numpy()
    warm = max([*(warmup_ns or {}).values(), int(cfg.warmup_s * NS)])
    firsts = g.group_by("flow").agg(pl.col("bin_start_ns").min())["bin_start_ns"]
    inside = t >= int(firsts.max()) + warm
    if t.size:
        inside[-1] = False
    if span is not None:
        inside &= (t >= span[0]) & (t + bin_ns <= span[1])
    if inside.sum() < 3:
        return pl.DataFrame(schema=schema)
    base = float(np.median(ys[inside]))
    if base <= 0:
        return pl.DataFrame(schema=schema)
    low = (ys < SHARED_KEPT * base) & inside
    rows = []
    steady = pl.Series(t[inside])
    first = int(np.argmax(inside))
    before = max(1, int(round(FALL_FROM_NS / bin_ns)))
    for a, b in _low_runs(low, bin_ns, cfg):
        if a <= first or float(ys[max(first, a - before):a].max()) < base:
            continue        # no fall from the steady level: a climb still under way (a long slow start)
        if float((1.0 - ys[a:b] / base).sum()) * bin_ns < (1.0 - cfg.threshold) * cfg.min_duration_s * NS:
            continue        # less throughput lost than the shortest drop of one flow loses
        s, e = int(t[a]), int(t[b - 1]) + bin_ns
        for (flow,), part in g.group_by("flow", maintain_order=True):
            own = part.filter(pl.col("bin_start_ns").is_in(steady.implode()))["goodput_bps"]
            fb = float(own.median()) if own.len() else 0.0
            win = part.filter((pl.col("bin_start_ns") >= s) & (pl.col("bin_start_ns") < e))["goodput_bps"]
            if fb > 0 and win.len() and float(win.mean()) < SHARED_KEPT * fb:
                rows.append({"flow": flow, "start_ns": s, "end_ns": e, "baseline_bps": fb,
                             "mean_bps": float(win.mean())})
    return pl.DataFrame(rows, schema=schema)


def merge_windows(drops: pl.DataFrame, gap_ns: int) -> list[tuple[int, int, pl.DataFrame]]:
    """Return merged windows (start_ns, end_ns, the drops inside) of drops that overlap across flows."""
    out: list[tuple[int, int, list[int]]] = []
    d = drops.sort("start_ns")
    for i, (s, e) in enumerate(zip(d["start_ns"].to_list(), d["end_ns"].to_list())):
        if out and s <= out[-1][1] + gap_ns:
            out[-1] = (out[-1][0], max(out[-1][1], e), out[-1][2] + [i])
        else:
            out.append((s, e, [i]))
    return [(s, e, d[idx]) for s, e, idx in out]
