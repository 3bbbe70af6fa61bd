"""PHY rate changes: rate adaptation moved a station to slower rates (a weaker link: distance, fading).

Evidence: the station's effective downlink PHY rate in the window against its rate outside every
drop window, the downward rate changes seen from 2 s before the window (or, where rate adaptation
spread the frames over slower rates without holding one, the rate fall alone when below
`FALL_RATIO`), and the signal strength in and out.  The slower the rate, the more airtime each
packet takes, the less goodput: the effective rate is the one the airtime says, the harmonic mean
of the transmissions' rates (one frame in ten at 6 Mbit/s among frames at 54 costs the line as much
as all ten at 30, though their plain mean is 49), from the `attempts` table, else the
frame-weighted mean of `station_series`.

A rate fall is a weakening link (`link_weakened`) when the station's signal fell by `RATE_STEP_DB`
or more (about what separates neighbouring rates), or, where no signal is measured, when its frames
were retried more often at the new rate than at the old.  On a signal that held, more retries are
frames failing for another reason (a hidden node, an interferer): rate adaptation stepped down
answering them (`answering_retries`), and the retries lead the fall.  Otherwise the old rate was one
the link never carried (rate adaptation that started high and failed there, as Minstrel does on a
far station): the station was as slow before, and the fall leads no other cause
(`xlayer.attribution.causality`).

A drop it is the root of spans its episode (`episode`): the 0.1 s steps around the drop in which the
station's frames went at a rate it counts as fallen, since a walking station's rate falls for a
while before the goodput does (the queues absorb the first of it) and the drop is only its end.
"""
from __future__ import annotations

import polars as pl

from xlayer.attribution.causes import episodes
from xlayer.attribution.causes.base import NS, Context, Window, clip01, frames
from xlayer.attribution.incidents import CauseFinding

NAME = "rate_change"
COLOR = "#ff7f0e"          # its incidents in the report
MEANING = "rate adaptation moved a station to slower PHY rates"
BEFORE_NS = 2 * NS
FALL_RATIO = 0.8           # a rate below this share of the station's usual one counts as fallen


def _wrate(df: pl.DataFrame) -> float | None:
    d = df.filter(pl.col("phy_rate_mbps").is_not_null() & (pl.col("data_frames") > 0))
    if d.height == 0:
        return None
    return float((d["phy_rate_mbps"] * d["data_frames"]).sum() / d["data_frames"].sum())


def _effective() -> pl.Expr:
    """Return the effective PHY rate (Mbit/s) of the transmissions aggregated: their count over their
    summed inverse rates, the rate at which their airtime would carry them all."""
    return (pl.len() / (1.0 / pl.col("rate_mbps")).sum()).alias("rate")


_DOWN = (pl.col("direction") == "down") & (pl.col("rate_mbps") > 0)


def _effective_rates(att: pl.DataFrame) -> dict[str, float]:
    """Return per station the effective rate (`_effective`) of its downlink transmissions in `att`."""
    return dict(att.filter(_DOWN & pl.col("station").is_not_null()).group_by("station").agg(_effective()).iter_rows())


def _wretry(df: pl.DataFrame) -> float | None:
    """Return the retry fraction of the bins' data transmissions (weighted by frames; None: none)."""
    d = df.filter(pl.col("retry_fraction").is_not_null() & (pl.col("data_frames") > 0))
    if d.height == 0:
        return None
    return float((d["retry_fraction"] * d["data_frames"]).sum() / d["data_frames"].sum())


RATE_STEP_DB = 3.0         # about the SNR between neighbouring PHY rates: a signal this much weaker costs a rate step


def weakened(fall_db: float | None, retry_in: float | None, retry_out: float | None) -> bool:
    """Return whether a station's link weakened: its signal fell by RATE_STEP_DB or more, or, with no
    signal measured, its frames were retried more (nothing known: True)."""
    if fall_db is not None:
        # the same signal with more retries is frames failing for another reason (a collision, an
        # interferer): rate adaptation stepping down answers them, the link itself is as good as before
        return fall_db >= RATE_STEP_DB
    return retry_in is None or retry_out is None or retry_in > retry_out


def score(ctx: Context, w: Window) -> CauseFinding | None:
    """Return the evidence of a PHY rate fall for the window's stations."""
    ss = ctx.between("station_series", w.start_ns, w.end_ns, col="bin_start_ns")
    out_all = ctx.outside("station_series", col="bin_start_ns")
    # the effective rates from the transmissions, else the station series' frame-weighted means
    eff_in = _effective_rates(ctx.between("attempts", w.start_ns, w.end_ns))
    eff_out = _effective_rates(ctx.outside("attempts", columns=("station", "direction", "rate_mbps")))
    best = None
    for st in (w.stations or ss["station"].unique().to_list()):
        inside = ss.filter(pl.col("station") == st)
        out = out_all.filter(pl.col("station") == st)
        r_in, r_out = eff_in.get(st), eff_out.get(st)
        if r_in is None or not r_out:
            r_in, r_out = _wrate(inside), _wrate(out)
        if r_in is None or not r_out:
            continue
        ratio = r_in / r_out
        rc = ctx.between("rate_changes", w.start_ns - BEFORE_NS, w.end_ns)
        rc = rc.filter((pl.col("station") == st) & (pl.col("to_mbps") < pl.col("from_mbps")))
        if rc.height == 0 and ratio >= FALL_RATIO:
            # no rate held long enough to be a change, and the airtime says the frames went as fast
            continue
        sig_in = inside["signal_dbm"].drop_nulls()
        sig_out = out["signal_dbm"].drop_nulls()
        s_in = float(sig_in.median()) if sig_in.len() else None
        s_out = float(sig_out.median()) if sig_out.len() else None
        # A weaker signal with the rate falls is the link itself degrading (distance, fading): the
        # rate change is rate adaptation following it, whatever the retries do meanwhile.
        fall_db = (s_out - s_in) if s_in is not None and s_out is not None else None
        conf = 0.9 * max(clip01((FALL_RATIO - ratio) / 0.5), clip01(((fall_db or 0.0) - 3.0) / 9.0))
        cand = (conf, st, r_in, r_out, rc, s_in, s_out, fall_db, _wretry(inside), _wretry(out))
        if best is None or cand[0] > best[0]:
            best = cand
    if best is None or best[0] < 0.05:
        return None
    conf, st, r_in, r_out, rc, sig_in, sig_out, fall_db, retry_in, retry_out = best
    weak = weakened(fall_db, retry_in, retry_out)
    changes = (f"{rc.height} downward rate changes" if rc.height else
               "its frames spread over slower rates, none held long enough to be a change")
    text = f"{st}'s data rate fell to {r_in:.1f} Mbit/s from {r_out:.1f} Mbit/s ({changes})"
    if sig_in is not None and sig_out is not None:
        text += f"; signal {sig_in:.0f} dBm against {sig_out:.0f} dBm"
    if retry_in is not None and retry_out is not None:
        text += f"; retried {retry_in:.0%} against {retry_out:.0%}"
    answering = not weak and retry_in is not None and retry_out is not None and retry_in > retry_out
    if answering:
        text += " (the signal held: rate adaptation stepped down answering frames that failed for another reason)"
    elif not weak:
        text += " (the link did not weaken: the old rate was not one it carried)"
    return CauseFinding(NAME, conf, text,
                        {"station": st, "rate_in_mbps": r_in, "rate_outside_mbps": r_out,
                         "downward_changes": rc.height, "signal_in_dbm": sig_in, "signal_outside_dbm": sig_out,
                         "retry_fraction_in": retry_in, "retry_fraction_outside": retry_out,
                         "link_weakened": weak, "answering_retries": answering},
                        stations=[st], flows=ctx.flows_of([st]),
                        frames=frames(rc, "rate change") or _slow_frames(ctx, w, st, r_out))


def _slow_frames(ctx: Context, w: Window, st: str, usual: float) -> list:
    """Return example downlink transmissions of the station in the window below FALL_RATIO of its usual rate."""
    att = ctx.between("attempts", w.start_ns, w.end_ns)
    return frames(att.filter((pl.col("station") == st) & (pl.col("direction") == "down")
                             & (pl.col("rate_mbps") < FALL_RATIO * usual)), "slow PHY rate")


EPISODE_MIN_FRAMES = 10    # a step's rate counts from this many of the station's downlink transmissions
HELD_STEPS = 5             # a rate the link carried: held over this many consecutive steps (0.5 s) ...
HELD_LOOKBACK_NS = 2 * episodes.MAX_NS     # ... within this long before the drop (before an episode's earliest start)


def _held_before(steps: pl.DataFrame, first: int) -> float | None:
    """Return the best effective rate the station held over `HELD_STEPS` consecutive steps (each with
    `EPISODE_MIN_FRAMES` transmissions) before step `first`, or None."""
    ok = {k: r for k, n, r in steps.iter_rows() if k < first and n >= EPISODE_MIN_FRAMES}
    best = None
    for k in ok:
        run = [ok.get(k + i) for i in range(HELD_STEPS)]
        if all(r is not None for r in run):
            held = HELD_STEPS / sum(1.0 / r for r in run)
            best = held if best is None or held > best else best
    return best


def episode(ctx: Context, w: Window, f: CauseFinding) -> tuple[int, int] | None:
    """Return (start_ns, end_ns) of the run of steps around the drop in which the finding's station's
    downlink frames went below FALL_RATIO of its usual rate (each step's effective rate, `_effective`),
    or None when no step inside the drop did.

    The usual rate is the finding's rate outside the drops, or the best the station held for half a
    second in the `HELD_LOOKBACK_NS` before the drop when higher (`_held_before`): a link that weakens
    gradually (a walk) spends the time before the drop at falling rates, which outside the drops would
    count as its usual ones."""
    usual = f.numbers.get("rate_outside_mbps")
    if not f.stations or not usual:
        return None
    lo, hi = w.start_ns - episodes.MAX_NS, w.end_ns + episodes.MAX_NS
    back = w.start_ns - HELD_LOOKBACK_NS
    att = ctx.between("attempts", back, hi).filter((pl.col("station") == f.stations[0]) & _DOWN)
    steps = (att.group_by(((pl.col("ts_ns") - back) // episodes.STEP_NS).alias("k"))
             .agg(pl.len().alias("n"), _effective()))
    held = _held_before(steps, (w.start_ns - back) // episodes.STEP_NS)
    usual = max(usual, held) if held is not None else usual
    # the episode's steps count from lo (a whole number of steps after `back`)
    steps = steps.with_columns(pl.col("k") - (lo - back) // episodes.STEP_NS)
    nsteps = int((hi - lo) // episodes.STEP_NS) + 1
    state = [0] * nsteps          # 1 fallen, -1 not, 0 too few frames to say (a station gone quiet)
    for k, n, rate in steps.iter_rows():
        if 0 <= k < nsteps and n >= EPISODE_MIN_FRAMES:
            state[k] = 1 if rate < FALL_RATIO * usual else -1
    return episodes.span(state, lo, w.start_ns, w.end_ns, ctx.cfg.merge_gap_s)
