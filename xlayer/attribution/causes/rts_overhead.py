"""RTS/CTS overhead: an RTS/CTS exchange before (nearly) every data frame.

Protection costs two control frames, two SIFS and their preambles per data frame, at a basic rate:
at high PHY rates that is a large share of the air.  Evidence: RTS frames per data transmission of
the stations in the window (an A-MPDU is one transmission: one RTS protects the whole PPDU), CTS
answers, and the airtime the exchanges took against the data's.
An RTS threshold holds all run long, so this cause proposes the span where the ratio stays high.
"""
from __future__ import annotations

from weakref import WeakKeyDictionary

import polars as pl

from xlayer.attribution.causes.base import Context, Window, clip01, frames, rose
from xlayer.attribution.incidents import CauseFinding
from xlayer.metrics.stations import cts_answers_rts

NAME = "rts_overhead"
COLOR = "#17becf"          # its incidents in the report
MEANING = "an RTS/CTS exchange before (nearly) every data frame cost airtime"
MIN_DATA = 50


# A CTS answers an RTS only when it is the record right after an RTS from the station it is addressed
# to, within SIFS + CTS airtime (`xlayer.metrics.stations.cts_answers_rts`).  Any other CTS is a
# CTS-to-self (a station protecting its own transmission or retry): not part of an RTS/CTS exchange,
# so neither counted nor its airtime added here.
_ANSWERS: WeakKeyDictionary = WeakKeyDictionary()     # per analysis context: the CTS frames answering an RTS


def _answering_cts(ctx: Context) -> pl.DataFrame:
    """Return the air_frames rows that are CTS answering an RTS (each capture in frame order)."""
    try:
        return _ANSWERS[ctx]
    except (KeyError, TypeError):       # TypeError: a context that takes no weak reference is not cached
        pass
    af = ctx.table("air_frames").filter(pl.col("wlan_type").is_not_null())
    ans = cts_answers_rts("ts_ns", "wlan_type", "wlan_subtype", "wlan_ta", "wlan_ra", "fcs_bad")
    got = af.filter(ans.over("capture_file", order_by="frame")) if af.height else af
    try:
        _ANSWERS[ctx] = got
    except TypeError:
        pass
    return got


def _control(ctx: Context, subtype: int, start: int | None = None, end: int | None = None) -> pl.DataFrame:
    """Return the RTS (11) or the CTS answering one (12) of the air captures, in [start, end) if given."""
    q = _answering_cts(ctx) if subtype == 12 else \
        ctx.table("air_frames").filter((pl.col("wlan_type") == 1) & (pl.col("wlan_subtype") == subtype))
    if start is not None:
        q = q.filter((pl.col("ts_ns") >= start) & (pl.col("ts_ns") < end))
    return q


def ppdus(att: pl.DataFrame) -> int:
    """Return the data PPDUs of transmissions: an A-MPDU's subframes (one `ampdu_ref`) are one PPDU."""
    if att.height == 0 or "ampdu_ref" not in att.columns:
        return att.height
    agg = att.filter(pl.col("ampdu_ref").is_not_null())
    return att.height - agg.height + (agg.select("capture_file", "ampdu_ref").n_unique() if agg.height else 0)


def _ratio(ctx: Context, start: int, end: int, stations: list[str]) -> tuple[float, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    # one RTS protects one PPDU: an 802.11n A-MPDU of 30 MPDUs has one RTS, not 30
    att = ctx.between("attempts", start, end)
    rts = _control(ctx, 11, start, end)
    if stations and rts.height:
        rts = rts.filter(pl.col("wlan_ta").is_in(stations) | pl.col("wlan_ra").is_in(stations))
        att = att.filter(pl.col("station").is_in(stations))
    n = ppdus(att)
    return (rts.height / n if n else 0.0), rts, att, _control(ctx, 12, start, end)


def _ratio_outside(ctx: Context, stations: list[str]) -> float | None:
    """Return RTS per data transmission of the stations outside the drop windows (None: too few)."""
    # only what `ppdus` and the station filters read: outside copies the rows it keeps
    att = ctx.outside("attempts", columns=("station", "capture_file", "ampdu_ref"))
    rts = ctx.outside("air_frames", columns=("wlan_type", "wlan_subtype", "wlan_ta", "wlan_ra")).filter(
        (pl.col("wlan_type") == 1) & (pl.col("wlan_subtype") == 11))
    if stations:
        att = att.filter(pl.col("station").is_in(stations))
        rts = rts.filter(pl.col("wlan_ta").is_in(stations) | pl.col("wlan_ra").is_in(stations))
    n = ppdus(att)
    return rts.height / n if n >= MIN_DATA else None


def score(ctx: Context, w: Window) -> CauseFinding | None:
    """Return the evidence of RTS/CTS overhead in the window."""
    ratio, rts, att, cts = _ratio(ctx, w.start_ns, w.end_ns, w.stations)
    if ppdus(att) < MIN_DATA or rts.height == 0:
        return None
    out = ctx.memo(ctx.steady_key(NAME, sorted(w.stations or [])), lambda: _ratio_outside(ctx, w.stations))
    # RTS past one per data transmission are RTS sent again (no CTS came back): retries of a weak
    # link, not more protection; the protected share is at most all of them
    conf = clip01((ratio - 0.2) / 0.5) * 0.8 * rose(w, min(ratio, 1.0), None if out is None else min(out, 1.0), 0.5,
                                                          NAME)
    if conf < 0.05:
        return None
    ctl_air = float(rts["airtime_ns"].fill_null(0).sum() + (cts["airtime_ns"].fill_null(0).sum() if cts.height else 0))
    n = ppdus(att)
    text = (f"{rts.height:,} RTS and {cts.height:,} CTS for {n:,} data transmissions "
            f"({ratio:.2f} RTS per data frame; {ctl_air / 1e6:.0f} ms of air on the exchanges)")
    ends = set(rts["wlan_ta"].drop_nulls().to_list()) | set(rts["wlan_ra"].drop_nulls().to_list())
    stations = sorted(ends & set(att["station"].drop_nulls().to_list()))
    return CauseFinding(NAME, conf, text, {"rts": rts.height, "cts": cts.height, "data_transmissions": n, "mpdu_transmissions": att.height,
                                           "rts_per_data": ratio, "control_airtime_ms": ctl_air / 1e6},
                        stations=stations, flows=ctx.flows_of(stations), frames=frames(rts, "RTS"))


def propose(ctx: Context) -> list[Window]:
    """Return the spans when RTS/CTS precedes most of the data: each station's, those that overlap joined.

    The condition is the network's while any of its stations protects its data: a station that joins
    later (and protects too) continues it rather than starting a condition of its own, which a drop
    it brings (its traffic filling the AP's queue) would otherwise take for its explanation."""
    att = ctx.table("attempts")
    out: list[Window] = []
    if att.height == 0:
        return out
    # each station's first and last transmission (not its rows split out: a copy of the whole table)
    spans = att.group_by("station").agg(pl.col("ts_ns").min().alias("s"), pl.col("ts_ns").max().alias("e"))
    each = []
    for st, s, e in spans.iter_rows():
        s, e = int(s), int(e) + 1
        ratio, rts, att_w, _ = _ratio(ctx, s, e, [st])
        if ppdus(att_w) >= MIN_DATA and ratio >= 0.5:
            each.append((s, e, st))
    for s, e, st in sorted(each):
        if out and s <= out[-1].end_ns:
            last = out[-1]
            stations = sorted(set(last.stations) | {st})
            out[-1] = Window(last.start_ns, max(last.end_ns, e), ctx.flows_of(stations), stations,
                             kind="sustained", proposer=NAME)
        else:
            out.append(Window(s, e, ctx.flows_of([st]), [st], kind="sustained", proposer=NAME))
    return out
