"""Spurious retransmission timeouts: the sender's RTO fired while the original was still on its way.

Study 003's finding: MAC retransmissions (or any delay spike) push one-way delay above the RTO; the
sender times out, retransmits what was delivered, and collapses its window.  Evidence: retransmissions
the TCP analysis classed spurious (a receiver-side capture saw the original, D-SACK, or the Eifel
TSecr echo) whose trigger was a timeout, with the RTO estimate and the one-way delay of the window.
"""
from __future__ import annotations

import polars as pl

from xlayer.attribution.causes.base import LEAD_NS, Context, Window, clip01, frames
from xlayer.attribution.incidents import CauseFinding

NAME = "spurious_rto"
COLOR = "#e377c2"          # its incidents in the report
MEANING = "TCP timed out and resent data that had arrived: delay, not loss, passed the RTO"


def score(ctx: Context, w: Window) -> CauseFinding | None:
    """Return the evidence of spurious timeouts in the window."""
    s, e = w.start_ns - LEAD_NS, w.end_ns
    rt = ctx.between("retransmissions", s, e)
    if rt.height == 0:
        return None
    sp = rt.filter(pl.col("spurious").fill_null(False) & pl.col("trigger").is_in(["rto", "tlp"]))
    if sp.height == 0:
        return None
    # One vantage counts (the sender's sees them all): the capture with the most such rows.
    # ties (two captures that see every one) go to the first file name, so the answer does not vary between runs
    best = sp.group_by("capture_file").len().sort(["len", "capture_file"], descending=[True, False])["capture_file"][0]
    sp = sp.filter(pl.col("capture_file") == best).sort("ts_ns")
    n = sp.height
    # Episodes: a timeout and the go-back-N burst after it are one.
    gaps = sp["ts_ns"].diff().fill_null(10**12)
    episodes = int((gaps > 200_000_000).sum())
    rto_ms = sp["rto_estimate_ns"].drop_nulls()
    rto_ms = float(rto_ms.median()) / 1e6 if rto_ms.len() else None
    owd = ctx.between("owd", s, e)
    owd = owd.filter(pl.col("flow").is_in(sp["flow"].unique().to_list())) if owd.height else owd
    owd_max = float(owd["owd_ns"].max()) / 1e6 if owd.height else None
    host = ctx.between("host_state", s, e)
    host_rto = host.filter(pl.col("flow").is_in(sp["flow"].unique().to_list()))["rto_us"].drop_nulls()
    host_rto_ms = float(host_rto.min()) / 1e3 if host_rto.len() else None
    conf = clip01(0.75 + 0.05 * min(episodes, 3) + 0.03 * min(n, 5))

    text = f"{n} spurious retransmission{'s' if n != 1 else ''} after {episodes} timeout{'s' if episodes != 1 else ''}"
    if owd_max is not None and (host_rto_ms or rto_ms):
        text += f"; one-way delay reached {owd_max:.0f} ms against an RTO of {(host_rto_ms or rto_ms):.0f} ms"
    methods = sorted(sp["method"].drop_nulls().unique().to_list())
    text += f" (decided by {', '.join(methods)})" if methods else ""
    ex = frames(sp, "spurious retransmission")
    ex += frames(sp.filter(pl.col("evidence_frame").is_not_null()), "evidence the original arrived", n=2,
                 file_col="evidence_capture", frame_col="evidence_frame")
    return CauseFinding(NAME, conf, text,
                        {"spurious_retransmissions": n, "timeouts": episodes, "rto_estimate_ms": rto_ms,
                         "host_rto_ms": host_rto_ms, "owd_max_ms": owd_max, "vantage": best, "methods": methods},
                        stations=ctx.stations_of(sp["flow"].unique().to_list()),
                        flows=sorted(sp["flow"].unique().to_list()), frames=ex)
