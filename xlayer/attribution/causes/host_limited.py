"""Host limits: the endpoints, not the network, held the flow back (receive window, send buffer, application).

Evidence for the window's flows: zero-window advertisements (TCP events), the share of time the
kernel reported the sender limited by the receiver's window or its send buffer (tcp_info), and the
application-limited flag in more of the window's samples than outside it (a rate-limited
application is always app-limited: only a change counts).
"""
from __future__ import annotations

import polars as pl

from xlayer.attribution.causes.base import LEAD_NS, Context, Window, clip01, frames
from xlayer.attribution.incidents import CauseFinding

NAME = "host_limited"
COLOR = "#2ca02c"          # its incidents in the report
MEANING = "the endpoints, not the network, held the flow back (window, buffer, application)"


def score(ctx: Context, w: Window) -> CauseFinding | None:
    """Return the evidence of host limits on the window's flows."""
    s, e = w.start_ns - LEAD_NS, w.end_ns
    flows = w.flows
    ev = ctx.between("tcp_events", s, e)
    zw = ev.filter((pl.col("event") == "zero_window")) if ev.height else ev
    if flows and zw.height:
        # a zero window is advertised by the receiver, in the reverse direction of the data flow
        conns = set(ctx.table("flows").filter(pl.col("flow").is_in(flows))["conn"].to_list())
        zw = zw.filter(pl.col("conn").is_in(list(conns)))
    hs = ctx.between("host_state", s, e)
    hs_out = ctx.outside("host_state")
    if flows:
        hs = hs.filter(pl.col("flow").is_in(flows))
        hs_out = hs_out.filter(pl.col("flow").is_in(flows))
    reasons, conf, nums = [], 0.0, {}
    if zw.height:
        conf = max(conf, 0.7)
        reasons.append(f"{zw.height} zero-window advertisements")
        nums["zero_windows"] = zw.height
    for col, what in (("rwnd_limited", "the receiver's window"), ("sndbuf_limited", "the send buffer")):
        v = hs[col].drop_nulls() if hs.height else pl.Series([], dtype=pl.Float64)
        if v.len() and float(v.mean()) >= 0.3:
            conf = max(conf, clip01(float(v.mean()) / 0.6) * 0.75)
            reasons.append(f"limited by {what} {float(v.mean()):.0%} of the time")
            nums[col] = float(v.mean())
    if hs.height and hs["app_limited"].drop_nulls().len():
        a_in = float(hs["app_limited"].drop_nulls().cast(pl.Float64).mean())
        a_out_s = hs_out["app_limited"].drop_nulls() if hs_out.height else pl.Series([], dtype=pl.Boolean)
        a_out = float(a_out_s.cast(pl.Float64).mean()) if a_out_s.len() else 0.0
        if a_in - a_out >= 0.3:
            conf = max(conf, 0.5)
            reasons.append(f"application-limited in {a_in:.0%} of samples (outside {a_out:.0%})")
            nums["app_limited"] = a_in
    if conf < 0.05:
        return None
    return CauseFinding(NAME, conf, "; ".join(reasons), nums, stations=ctx.stations_of(flows), flows=flows,
                        frames=frames(zw, "zero window"))
