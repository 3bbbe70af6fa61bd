"""802.11 fragmentation: a small fragmentation threshold splits each packet into several MPDUs.

Every fragment pays its own preamble, header, SIFS and ACK, so goodput falls with the threshold.
Evidence: fragments per MSDU of the stations' data in the window (transmissions of distinct
(transmitter, sequence number, fragment) over distinct (transmitter, sequence number)) and the
airtime spent on headers and ACKs.  A fixed threshold holds all run long, so it proposes windows.
Inside a drop it explains the fall only by how much the fragments per packet multiplied against
outside the drops (a doubling, twice the line time per packet, explains a halving fully): one
fragment more on four is a quarter more, not the cause of a collapse.
"""
from __future__ import annotations

import polars as pl

from xlayer.attribution.causes import delaysplit
from xlayer.attribution.causes.base import Context, Window, clip01, frames, must_rise, rose
from xlayer.attribution.incidents import CauseFinding

NAME = "fragmentation"
COLOR = "#bcbd22"          # its incidents in the report
MEANING = "a small 802.11 fragmentation threshold split each packet into several MPDUs"
MIN_MSDUS = 20


def _fpm(att: pl.DataFrame) -> tuple[float, int, int]:
    msdus = att.select("ta", "mac_seq").n_unique()
    frags = att.select("ta", "mac_seq", "frag").n_unique()
    return (frags / msdus if msdus else 0.0), frags, msdus


def _fpm_outside(ctx: Context, stations: list[str] | None) -> tuple[float, int, int]:
    """Return `_fpm` of the stations' transmissions (all when None) in the steady state."""
    out = ctx.outside("attempts", columns=("station", "ta", "mac_seq", "frag"),
                      where=pl.col("station").is_in(stations) if stations else None)
    return _fpm(out) if out.height else (0.0, 0, 0)


def score(ctx: Context, w: Window) -> CauseFinding | None:
    """Return the evidence of fragmentation in the window."""
    att = ctx.between("attempts", w.start_ns, w.end_ns)
    if w.stations:
        att = att.filter(pl.col("station").is_in(w.stations))
    if att.height == 0:
        return None
    fpm, frags, msdus = _fpm(att)
    if msdus < MIN_MSDUS:
        return None
    conf = clip01((fpm - 1.2) / 1.0) * 0.9
    if must_rise(w, NAME):
        # a drop, or a span another cause proposed: the condition explains it only by how much it rose there
        fpm_out, _, msdus_out = ctx.memo(ctx.steady_key(NAME, sorted(w.stations or [])),
                                         lambda: _fpm_outside(ctx, w.stations))
        # each fragment pays its own overhead, so a packet's line time grows with its fragments: the
        # rise that halves goodput (a drop) is a doubling of them, whatever their number before
        known = msdus_out >= MIN_MSDUS and fpm_out > 0
        conf *= rose(w, fpm / fpm_out if known else 1.0, 1.0 if known else None, 1.0, NAME)
    if conf < 0.05:
        return None
    fr = att.filter(pl.col("frag") > 0)
    stations = sorted(fr["station"].drop_nulls().unique().to_list())
    text = f"{msdus:,} packets went as {frags:,} fragments ({fpm:.1f} per packet)"
    return CauseFinding(NAME, conf, text, {"fragments": frags, "msdus": msdus, "fragments_per_msdu": fpm},
                        stations=stations, flows=ctx.flows_of(stations), frames=frames(fr, "802.11 fragment"))


def from_delay(ctx: Context, w: Window, split: delaysplit.Split, conf: float) -> CauseFinding | None:
    """Return fragmentation's finding made from a window's delay split (the root of a consequence)."""
    att = ctx.between("attempts", w.start_ns, w.end_ns)
    fr = att.filter(pl.col("frag") > 0) if att.height else att
    if fr.height == 0:
        return None
    fpm, frags, msdus = _fpm(att)
    stations = sorted(fr["station"].drop_nulls().unique().to_list())
    text = (f"{msdus:,} packets went as {frags:,} fragments ({fpm:.1f} per packet); the late packets waited "
            f"{split.inside['fragments']:.0f} ms of their {split.total_ms:.0f} ms on further fragments")
    return CauseFinding(NAME, conf, text, {"fragments": frags, "msdus": msdus, "fragments_per_msdu": fpm,
                                           "delay_ms": {k: round(v, 3) for k, v in split.inside.items()}},
                        stations=stations, flows=ctx.flows_of(stations), frames=frames(fr, "802.11 fragment"))


def propose(ctx: Context) -> list[Window]:
    """Return the span of fragmented traffic per transmitter where fragments per MSDU stay high.

    The threshold is the transmitter's (an AP's applies to every station it sends to): one span per
    transmitter, so a station whose traffic starts later (and a drop starting with it) falls inside a
    condition that already held rather than starting one of its own.
    """
    # (only what the spans read: a group-by copies every column of its groups)
    att = ctx.table("attempts").select("ta", "mac_seq", "frag", "station", "ts_ns")
    out = []
    for (_ta,), a in att.group_by("ta", maintain_order=True):
        fpm, _, msdus = _fpm(a)
        if msdus >= MIN_MSDUS and fpm >= 1.5:
            fr = a.filter(pl.col("frag") > 0)
            st = sorted(fr["station"].drop_nulls().unique().to_list())
            out.append(Window(int(fr["ts_ns"].min()), int(fr["ts_ns"].max()) + 1, ctx.flows_of(st), st,
                              kind="sustained", proposer=NAME))
    return sorted(out, key=lambda w: (w.start_ns, w.stations))
