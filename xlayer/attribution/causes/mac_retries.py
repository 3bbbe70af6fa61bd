"""MAC retries: the link layer retransmitting frames (to the window's stations) far more than usual.

Evidence from the air: the retry fraction of the stations' data transmissions in the window against
the same stations outside every drop window, the frames that failed after the retry limit, and
example retried frames.  Retries are often a symptom: when the stations' PHY rate fell at the same
time (rate adaptation reacting to a weaker link) the rate change is the better explanation and this
cause's confidence is halved.  A second measure sees retries that are few but long: the share of the
AP's transmit line spent retransmitting (`delay` table: retry time over service time) against outside
the drops.  A deaf receiver behind a persistent MAC is one MPDU retried for a second: a small retry
fraction of the transmissions, most of the line's time.  A burst shorter than the drop (a hidden
node) is seen in a station's worst run of 100 consecutive transmissions (or of 0.1 s of its traffic,
when more) against what the worst of as many runs reaches in steady traffic (outside the drops, and
at least by the binomial law of the station's usual retry fraction).  A transmission there is a PPDU:
the MPDUs of an A-MPDU fail together (a collision, a rate probe too fast for the link) and count as
one trial, their share retried as its outcome.  A drop it is the root of spans
its episode: the 0.1 s steps around the drop in which its most retried station's retry fraction
stood well above that station's usual one (`episode`), since a hidden node starts before the
goodput falls and may outlast it.
Behind RTS/CTS a deaf receiver's data frames never go out: the RTS the AP sent it unanswered name
the station and count as its retries.
"""
from __future__ import annotations

from dataclasses import replace
from statistics import NormalDist

import polars as pl

from xlayer.attribution.causes import delaysplit, episodes
from xlayer.attribution.causes.base import LEAD_NS, Context, Window, clip01, frames
from xlayer.attribution.incidents import CauseFinding

NAME = "mac_retries"
COLOR = "#d62728"          # its incidents in the report
MEANING = "the link layer retransmitted frames far more than usual"
MIN_ATTEMPTS = 20
MIN_CONF = 0.05            # below this the evidence makes no finding


def _rate(df: pl.DataFrame) -> float | None:
    r = df.filter(pl.col("rate_mbps").is_not_null())["rate_mbps"]
    return float(r.mean()) if r.len() else None


def _signal_fall(ctx: Context, w: Window, stations: list[str]) -> float:
    """Return how many dB the stations' median signal fell in the window against outside (0 if unknown)."""
    ss = ctx.table("station_series")
    if ss.height == 0:
        return 0.0
    ss = ss.filter(pl.col("station").is_in(stations))
    inside = ss.filter((pl.col("bin_start_ns") >= w.start_ns) & (pl.col("bin_start_ns") < w.end_ns))
    out = ctx.outside("station_series", col="bin_start_ns").filter(pl.col("station").is_in(stations))
    a, b = inside["signal_dbm"].drop_nulls(), out["signal_dbm"].drop_nulls()
    return float(b.median() - a.median()) if a.len() and b.len() else 0.0


def _retry_time(d: pl.DataFrame) -> float | None:
    t = float(d["service_ns"].sum()) if d.height else 0.0
    return float(d["retry_ns"].sum()) / t if t > 0 else None


def _line_conf(ctx: Context, w: Window) -> tuple[float, float | None, float | None]:
    """Return (confidence, retry-time share in the window, outside) from the AP's transmit line."""
    d = ctx.between("delay", w.start_ns - LEAD_NS, w.end_ns)
    inside = _retry_time(d)
    if inside is None or d.height < MIN_ATTEMPTS:
        return 0.0, None, None
    outside = _retry_time(ctx.outside("delay"))
    conf = clip01((inside - 0.1) / 0.3) * 0.8
    if w.kind == "drop" and outside:
        conf *= clip01((inside / outside - 1.0) / 2.0)
    return conf, inside, outside


def from_delay(ctx: Context, w: Window, split: delaysplit.Split, conf: float) -> CauseFinding | None:
    """Return the retries' finding made from a window's delay split (the root of a consequence)."""
    d = ctx.between("delay", w.start_ns - LEAD_NS, w.end_ns)
    att = ctx.between("attempts", w.start_ns - LEAD_NS, w.end_ns)
    held = _unanswered(ctx.between("air_frames", w.start_ns - LEAD_NS, w.end_ns), d["station"].drop_nulls().unique().to_list())
    for st, ns in d.filter(pl.col("retry_ns") > 0).group_by("station").agg(pl.col("retry_ns").sum()).iter_rows():
        if st is not None:
            held[st] = held.get(st, 0) + int(ns)
    stations = sorted(held, key=lambda st: (-held[st], st))[:3]     # the most line time spent retrying first
    h = split.hog
    who = f"; most to {h.station} ({h.retry_share:.0%} of its service time)" if h is not None else ""
    if h is not None and split.increase("hog") > split.increase("retry"):
        rate = f" at {h.rate_mbps:.1f} Mbit/s like the others" if h.rate_mbps is not None else ""
        text = (f"{h.station} held the AP's transmit line {h.service_share:.0%} of the time for {h.packet_share:.0%} "
                f"of the packets on a good link{rate}: its frames (or their RTS) went unanswered and were "
                f"sent again; the late packets waited {split.inside['hog']:.0f} ms of their "
                f"{split.total_ms:.0f} ms behind it")
    else:
        text = (f"MAC retransmissions held the AP's transmit line: the late packets waited "
                f"{split.inside['retry']:.0f} ms of their {split.total_ms:.0f} ms on retries "
                f"({split.outside.get('retry', 0.0):.0f} ms outside the drops){who}")
    nums = {"delay_ms": {k: round(v, 3) for k, v in split.inside.items()},
            "retry_time_share": _retry_time(d), "retries": int(att["retry"].sum()) if att.height else 0,
            "attempts": att.height}
    if h is not None:
        nums["hog"] = h.as_numbers()
    st = [h.station] if h is not None else stations
    return CauseFinding(NAME, conf, text, nums, stations=st, flows=ctx.flows_of(st),
                        frames=frames(att.filter(pl.col("retry")), "MAC retry") if att.height else [])


def score(ctx: Context, w: Window) -> CauseFinding | None:
    """Return the evidence of elevated MAC retries in the window."""
    f = _score_attempts(ctx, w)
    lc, inside, outside = _line_conf(ctx, w)
    lc *= _weak_link_factor(ctx, w)
    if lc >= MIN_CONF and (f is None or lc > f.confidence):
        d = ctx.between("delay", w.start_ns - LEAD_NS, w.end_ns).filter(pl.col("retry_ns") > 0)
        top = (d.group_by("station").agg(pl.col("retry_ns").sum()).sort("retry_ns", descending=True)
               ["station"].drop_nulls().to_list()[:3])
        text = (f"retransmissions took {inside:.0%} of the AP's transmit line"
                + (f", against {outside:.0%} outside the drops" if outside is not None else "")
                + (f" (most to {top[0]})" if top else ""))
        nums = {"retry_time_share": inside, "retry_time_share_outside": outside}
        if f is not None:
            nums.update(f.numbers)
        att = ctx.between("attempts", w.start_ns - LEAD_NS, w.end_ns)
        return CauseFinding(NAME, lc, text, nums, stations=top, flows=ctx.flows_of(top),
                            frames=frames(att.filter(pl.col("retry") & pl.col("station").is_in(top)), "MAC retry")
                            if att.height else [])
    return f


def without(ctx: Context, w: Window, station: str) -> float:
    """Return the confidence of the window's retries evidence from its stations other than `station`."""
    att = ctx.between("attempts", w.start_ns - LEAD_NS, w.end_ns)
    stations = w.stations or att["station"].drop_nulls().unique().to_list()
    rest = [s for s in stations if s != station]
    f = _score_attempts(ctx, replace(w, stations=rest)) if rest else None
    return f.confidence if f is not None else 0.0


def _conf(rf: float, rf_out: float | None, kind: str) -> float:
    """Return the confidence of a retry fraction `rf` (against `rf_out` outside the drops)."""
    conf = clip01((rf - 0.05) / 0.3) * 0.8
    if kind == "drop" and rf_out:
        conf *= clip01((rf / rf_out - 1.0) / 2.0)     # a drop needs more retries than usual: what changed
    return conf


def _burst_conf(worst: float, base: float) -> float:
    """Return the confidence of a burst: its worst run's retry fraction `worst` against what steady
    runs reach, `base`, by its excess (as `_conf` counts a fraction above 5 %) and its ratio.

    Retries cluster (one collision retries two frames, and the contention window it doubles delays
    the next), so steady runs stray above the binomial law: only an excess a drop could feel counts."""
    return clip01((worst - base) / 0.3) * 0.8 * clip01((worst / base - 1.0) / 2.0 if base > 0 else 1.0)


def _weak_link_factor(ctx: Context, w: Window, att: pl.DataFrame | None = None, out: pl.DataFrame | None = None,
                      stations: list[str] | None = None) -> float:
    """Return 0.5 when the window's stations' PHY rate or signal fell (retries are the weak link's
    symptom: the rate change is the better explanation), else 1.0."""
    if att is None:
        att = ctx.between("attempts", w.start_ns - LEAD_NS, w.end_ns)
        if w.stations:
            att = att.filter(pl.col("station").is_in(w.stations))
    if stations is None:
        stations = att["station"].drop_nulls().unique().to_list() if att.height else []
    if out is None:
        out = ctx.outside("attempts").filter(pl.col("station").is_in(stations))
    rate_in, rate_out = _rate(att), _rate(out) if out.height else None
    fall_db = _signal_fall(ctx, w, stations) if stations else 0.0
    weak = (rate_in is not None and rate_out and rate_in < 0.6 * rate_out) or fall_db >= 6.0
    return 0.5 if weak else 1.0


STEP_MIN_ATTEMPTS = 5 * MIN_ATTEMPTS      # a burst is measured over at least this many consecutive transmissions
BURST_NS = episodes.STEP_NS               # ... and over at least what the station sends in this long


def _run_length(mine: pl.DataFrame, span_ns: int) -> int:
    """Return the transmissions a burst is measured over: STEP_MIN_ATTEMPTS, or what the station sent
    in BURST_NS at its pace in the window when more (a cluster of retries over a few milliseconds
    costs the line nothing a drop would show)."""
    return max(STEP_MIN_ATTEMPTS, round(mine.height * BURST_NS / max(span_ns, 1)))


def _ppdus(att: pl.DataFrame) -> pl.DataFrame:
    """Return one row per PPDU of `att` in time order: ts_ns (its first MPDU's) and retry (the share of
    its MPDUs that repeat an earlier attempt, Float64).

    An A-MPDU is sent and lost as one PHY transmission: a collision, or a probe at a rate the link
    does not carry, fails its MPDUs together and they come back together as retries, so the MPDUs of
    one PPDU are one trial of the retry statistics, not thirty (a burst test counting MPDUs takes two
    lost aggregates among a few for a hidden node).  MPDUs sent alone are each their own PPDU: without
    aggregation nothing changes.  A PPDU is its capture's A-MPDU reference, else its start on the air."""
    if att.height == 0:
        return pl.DataFrame(schema={"ts_ns": pl.Int64, "retry": pl.Float64})
    cols = att.columns
    cap = pl.col("capture_file") if "capture_file" in cols else pl.lit(None, pl.String)
    start = pl.coalesce("tx_start_ns", "ts_ns") if "tx_start_ns" in cols else pl.col("ts_ns")
    if "ampdu_ref" in cols:
        agg = pl.col("ampdu_ref").is_not_null()
        key = pl.when(agg).then(pl.col("ampdu_ref").cast(pl.Int64)).otherwise(start)
    else:
        agg, key = pl.lit(False), start
    return (att.lazy().select("ts_ns", pl.col("retry").cast(pl.Float64).fill_null(0.0), cap.alias("_c"),
                              agg.alias("_a"), key.alias("_k"))
            .group_by("_c", "_a", "_k").agg(pl.col("ts_ns").min(), pl.col("retry").mean())
            .sort("ts_ns", "_k").select("ts_ns", "retry").collect())


def _steps(att: pl.DataFrame, n: int) -> pl.Series:
    """Return the retry fractions of `att` (PPDUs in time order: `_ppdus`) over every run of `n`
    consecutive transmissions.

    Runs of transmissions, not of time: a burst's retries double the backoff, so a collided 0.1 s
    holds fewer transmissions than a clean one; over equal counts the extremes inside and outside a
    window share one binomial noise."""
    if att.height < n:
        return pl.Series("rf", [], pl.Float64)
    r = att["retry"].cast(pl.Float64).fill_null(0.0)
    return r.rolling_mean(n).drop_nulls().rename("rf")


BURST_SPREAD_RUNS = 5                     # disjoint runs in the window before their own spread counts


def _burst(mine: pl.DataFrame, theirs: pl.DataFrame, n: int) -> tuple[float, float] | None:
    """Return (worst run of `n` transmissions in the window, its baseline), None when the window holds no run.

    The worst of many runs is higher than the worst of few by chance alone, so the baseline is what
    the worst of the window's k disjoint runs reaches in steady traffic (q = 1 - 1/(k + 1)), the
    highest of: the runs outside the drops at quantile q; the binomial runs of the station's fraction
    (outside and in the window together) at q; and, with BURST_SPREAD_RUNS disjoint runs or more in
    the window, their median plus the normal q-quantile of their robust spread (retries cluster, so
    steady runs stray further than the binomial law; a burst stands out of its own window's runs)."""
    inside, outside = _steps(mine, n), _steps(theirs, n)
    if inside.len() == 0:
        return None
    k = max(1.0, mine.height / n)
    z = NormalDist().inv_cdf(1.0 - 1.0 / (k + 1.0))
    both = pl.concat([mine.select("retry"), theirs.select("retry")])["retry"].cast(pl.Float64).fill_null(0.0)
    p = float(both.mean())
    base = p + z * (p * (1.0 - p) / n) ** 0.5
    if outside.len():
        base = max(base, float(outside.quantile(1.0 - 1.0 / (k + 1.0), "higher")))
    runs = inside.gather_every(n)
    if runs.len() >= BURST_SPREAD_RUNS:
        med = float(runs.median())
        base = max(base, med + z * 1.4826 * float((runs - med).abs().median()))
    return float(inside.max()), base


def _score_attempts(ctx: Context, w: Window) -> CauseFinding | None:
    """Return the evidence of elevated MAC retries in the window from the transmissions' retry bits."""
    s, e = w.start_ns - LEAD_NS, w.end_ns
    att = ctx.between("attempts", s, e)
    if w.stations:
        att = att.filter(pl.col("station").is_in(w.stations))
    if att.height < MIN_ATTEMPTS:
        return None
    per = (att.group_by("station").agg(pl.len().alias("attempts"), pl.col("retry").sum().alias("retries"))
           .with_columns((pl.col("retries") / pl.col("attempts")).alias("rf")).sort("rf", descending=True))
    worst = per.row(0, named=True)
    rf = float(att["retry"].mean())
    # outside the drops and outside what this window reads (its lead-in included)
    out = ctx.outside("attempts", where=((pl.col("ts_ns") < s) | (pl.col("ts_ns") >= e))
                      & pl.col("station").is_in(per["station"].to_list()))
    rf_out = float(out["retry"].mean()) if out.height >= MIN_ATTEMPTS else None
    conf = _conf(rf, rf_out, w.kind) * _weak_link_factor(ctx, w, att, out, per["station"].to_list())
    # One station's link can be what changed while the others' stay clean (a hidden node beside it):
    # its own retries against its own outside count too, the stronger of the two.
    # A burst (a hidden node's transmissions) can be much shorter than the drop it starts: the
    # station's worst run of transmissions (`_run_length`) in the window also counts, against what
    # the worst of as many steady runs reaches (`_burst`: a burst is worse than the same extreme of
    # the same noise).
    bursts, runs = {}, {}
    for st, n in per.select("station", "attempts").iter_rows():
        if n < MIN_ATTEMPTS or st is None:
            continue
        mine, theirs = att.filter(pl.col("station") == st), out.filter(pl.col("station") == st)
        r_out = float(theirs["retry"].mean()) if theirs.height >= MIN_ATTEMPTS else None
        weak = _weak_link_factor(ctx, w, mine, theirs, [st])
        c = _conf(float(mine["retry"].mean()), r_out, w.kind) * weak
        # runs of PPDUs, an A-MPDU one trial (`_ppdus`)
        mine, theirs = _ppdus(mine), _ppdus(theirs)
        n_run = _run_length(mine, e - s)
        b = _burst(mine, theirs, n_run)
        if b is not None:
            bursts[st] = b[0]
            runs[st] = n_run
            c = max(c, _burst_conf(*b) * weak)     # a burst is one against its baseline, in any window
        conf = max(conf, c)
    if conf < MIN_CONF:
        return None
    failed = att.filter(~pl.col("acked").fill_null(True) & pl.col("retry"))
    top = max(bursts, key=bursts.get) if bursts else None
    if top is not None and bursts[top] > float(worst["rf"]) + 0.05:
        # the worst station's own burst needs no second name
        who = "" if top == worst["station"] else f"{top} "
        burst = f", {who}{bursts[top]:.0%} of its worst {runs[top]} transmissions in a row"
    else:
        burst = ""
    text = (f"{int(att['retry'].sum()):,} of {att.height:,} transmissions were MAC retries "
            f"({rf:.0%}; {worst['station']} {worst['rf']:.0%}{burst})"
            + (f", against {rf_out:.0%} outside the drops" if rf_out is not None else ""))
    return CauseFinding(NAME, conf, text,
                        {"attempts": att.height, "retries": int(att["retry"].sum()), "retry_fraction": rf,
                         "retry_fraction_outside": rf_out, "unacked_retries": failed.height,
                         "per_station": per.select("station", "attempts", "retries").to_dicts()},
                        stations=per["station"].to_list(), flows=ctx.flows_of(per["station"].to_list()),
                        frames=frames(att.filter(pl.col("retry")), "MAC retry"))


def _unanswered(air: pl.DataFrame, stations: list[str]) -> dict[str, int]:
    """Return per station the line time (ns) the AP's unanswered RTS to it held (`delaysplit.unanswered_rts`).

    Behind RTS/CTS a receiver that hears nothing never gets the data frame: the AP sends the RTS
    again and again, and the data's retry bits stay clear while its line is held for the burst."""
    return delaysplit.held_by_station(delaysplit.unanswered_rts(air, stations))


def _tries(ctx: Context, st: str, lo: int, hi: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Return the station's tries (ts_ns, retry: the share of it that failed or repeats one) in [lo, hi)
    and outside every drop: its data PPDUs (`_ppdus`), and the RTS sent to it, an unanswered one
    counted as a retry (`delaysplit.unanswered_rts`; `_unanswered` says why)."""
    # the captures that saw the station's data: one copy of each RTS (several sniffers hear it)
    caps = ctx.table("attempts").filter(pl.col("station") == st)["capture_file"].unique()

    def own(df: pl.DataFrame) -> pl.DataFrame:
        return _ppdus(df.filter(pl.col("station") == st))

    def rts(air: pl.DataFrame) -> pl.DataFrame:
        air = air.filter(pl.col("capture_file").is_in(caps.implode()))
        failed = delaysplit.unanswered_rts(air, [st])["ts_ns"]
        return (air.filter((pl.col("wlan_type") == 1) & (pl.col("wlan_subtype") == 11) & (pl.col("wlan_ra") == st))
                .select("ts_ns", pl.col("ts_ns").is_in(failed.implode()).cast(pl.Float64).alias("retry")))

    att, theirs = own(ctx.between("attempts", lo, hi)), own(ctx.outside("attempts"))
    return pl.concat([att, rts(ctx.between("air_frames", lo, hi))]), pl.concat([theirs, rts(ctx.outside("air_frames"))])


# The episode of a drop's retries: where its station's retry fraction stood above its usual level.
EPISODE_MIN_ATTEMPTS = 10         # a step's fraction counts from this many transmissions
EPISODE_Z = 3.0                   # standard errors above the usual fraction (binomial) that make a step elevated
EPISODE_MIN_RISE = 0.05           # ... and at least this much above it


def episode(ctx: Context, w: Window, f: CauseFinding) -> tuple[int, int] | None:
    """Return (start_ns, end_ns) of the run of steps around the drop in which the finding's most
    retried station sent retries well above its own usual fraction, or None when none does.

    A hidden node or a burst of interference starts before the goodput it costs falls (TCP rides
    out the first retries; its timers fire later) and may outlast the drop: the incident spans both.
    A step is elevated when its retry fraction (of its tries: `_tries`) is EPISODE_Z binomial standard
    errors and EPISODE_MIN_RISE above the station's fraction outside every drop and outside the span searched.
    """
    if not f.stations:
        return None
    st = f.stations[0]
    lo, hi = w.start_ns - episodes.MAX_NS, w.end_ns + episodes.MAX_NS
    att, theirs = _tries(ctx, st, lo, hi)
    if att.height < MIN_ATTEMPTS:
        return None
    usual = theirs.filter((pl.col("ts_ns") < lo) | (pl.col("ts_ns") >= hi))
    if usual.height < MIN_ATTEMPTS:
        usual = theirs
    if usual.height < MIN_ATTEMPTS:
        return None
    p0 = float(usual["retry"].mean())
    steps = (att.group_by(((pl.col("ts_ns") - lo) // episodes.STEP_NS).alias("k"))
             .agg(pl.len().alias("n"), pl.col("retry").sum().alias("r")).sort("k"))
    nsteps = int((hi - lo) // episodes.STEP_NS) + 1
    state = [0] * nsteps          # 1 elevated, -1 not, 0 too few transmissions to say
    for k, n, r in steps.iter_rows():
        if 0 <= k < nsteps and n >= EPISODE_MIN_ATTEMPTS:
            q = r / n
            se = (max(p0, 1.0 / n) * (1.0 - p0) / n) ** 0.5
            state[k] = 1 if q >= p0 + max(EPISODE_Z * se, EPISODE_MIN_RISE) else -1
    # On/off bursts (a hidden node's) leave quiet steps inside the episode
    return episodes.span(state, lo, w.start_ns, w.end_ns, ctx.cfg.merge_gap_s)
