"""Spurious retransmission timeouts: the sender's RTO fired while the original was still on its way.

Study 003's finding: MAC retransmissions (or any delay spike) push one-way delay above the RTO; the
sender times out, retransmits what was delivered, and collapses its window.  Evidence: retransmissions
the TCP analysis classed spurious (a receiver-side capture saw the original, D-SACK, or the Eifel
TSecr echo) whose trigger was a timeout, with the RTO and the one-way delay of the window.  The text
names one RTO: the host's (smallest sampled in the window) when a tcp_state capture has it, else the
capture's estimate, and says which.
"""
from __future__ import annotations

import numpy as np
import polars as pl

from xlayer.attribution.causes.base import LEAD_NS, Context, Window, clip01, frames
from xlayer.attribution.incidents import CauseFinding
from xlayer.timeline.flowkey import reverse_flow

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
    named_rto = owd_max is not None and bool(host_rto_ms or rto_ms)
    if named_rto:
        text += f"; one-way delay reached {owd_max:.0f} ms against {_rto_text(host_rto_ms, rto_ms)}"
    # Each deciding method once, with its count ("decided by receiver_capture x140, dsack x10"); a single
    # retransmission keeps its whole reasoning unless the sentence already names an RTO (the reasoning
    # quotes the capture's estimate: one RTO per sentence).  The numbers keep the counts per method and
    # trigger and one example of the reasoning, not one entry per retransmission.
    methods = method_counts(sp)
    if n == 1 and sp["method"][0] is not None:
        text += f" (decided by {next(iter(methods)) if named_rto else sp['method'][0]})"
    elif methods:
        text += f" (decided by {', '.join(f'{k} x{v}' for k, v in methods.items())})"
    triggers = dict(sp.group_by("trigger").len().sort(["len", "trigger"], descending=[True, False]).iter_rows())
    example = sp["method"].drop_nulls()
    held = acks_held(ctx, sp, rto_ms or host_rto_ms)
    if held is not None:
        text += (f"; most of the wait was on the ACK path: data of {held['flow_data']} reached {held['station']} "
                 f"on the air {held['down_ms']:.0f} ms after the original left, then the station sent nothing of the "
                 f"connection on the air for {held['held_ms']:.0f} ms"
                 + (" (up to the retransmission)" if held["until_retransmission"] else ""))
    ex = frames(sp, "spurious retransmission")
    # a null evidence_capture means the retransmission's own capture (the table's convention)
    ev = sp.filter(pl.col("evidence_frame").is_not_null()).with_columns(
        pl.col("evidence_capture").fill_null(pl.col("capture_file")))
    ex += frames(ev, "evidence the original arrived", n=2, file_col="evidence_capture", frame_col="evidence_frame")
    return CauseFinding(NAME, conf, text,
                        {"spurious_retransmissions": n, "timeouts": episodes, "rto_estimate_ms": rto_ms,
                         "host_rto_ms": host_rto_ms, "owd_max_ms": owd_max, "vantage": best, "methods": methods,
                         "acks_held": held,
                         "triggers": triggers, "method_example": example[0] if example.len() else None},
                        stations=ctx.stations_of(sorted(sp["flow"].unique().to_list())),
                        flows=sorted(sp["flow"].unique().to_list()), frames=ex)


ACK_HELD_SHARE = 0.5     # the station's silence made at least this share of the wait that timed out


def acks_held(ctx: Context, sp: pl.DataFrame, rto_ms: float | None) -> dict | None:
    """Return the longest silence of the receiving station on the air after the flow's data reached it,
    during the first timeout's wait, when that silence made ACK_HELD_SHARE of the wait; else None:
    {flow_data, station, down_ms (the original leaving the sender's vantage to that data reaching the
    station on the air), held_ms (from there to the station's next packet of the connection on the air,
    or to the retransmission if none came before it: until_retransmission)}.

    A timeout is spurious when the data arrived and its ACK did not come back in time.  When data
    reached the station on the air and the station then sent nothing of the connection for most of the
    wait (its uplink stalled: a Block Ack exchange it retries, a reorder buffer holding what it got
    behind a missing frame, its own contention; or its TCP held the ACK of a lone segment for its
    delayed-ACK timer), the delay that passed the RTO is on the ACK path, which the downlink's delay
    parts cannot show.  Needs an air capture (the join's downlink and uplink)."""
    if sp.height == 0 or not rto_ms:
        return None
    first = sp.row(0, named=True)
    t_o, t_r, flow = first.get("original_ts_ns"), first["ts_ns"], first["flow"]
    if t_o is None or t_r <= t_o:
        return None
    down = ctx.between("downlink", t_o - int(rto_ms * 1e6), t_r)
    if down.height == 0 or "last_air_ts_ns" not in down.columns:
        return None
    got = (down.filter((pl.col("flow") == flow) & pl.col("last_air_ts_ns").is_between(t_o, t_r, closed="left")
                       & pl.col("fate").is_in(["delivered", "air_unacked"]) & pl.col("station").is_not_null())
           .select("last_air_ts_ns", "station").unique("last_air_ts_ns").sort("last_air_ts_ns"))
    if got.height == 0:
        return None
    d = got.get_column("last_air_ts_ns").to_numpy()
    up = ctx.between("uplink", t_o - int(rto_ms * 1e6), t_r + int(rto_ms * 1e6))
    u = (up.filter((pl.col("flow") == reverse_flow(flow)) & pl.col("first_air_ts_ns").is_not_null())
         .get_column("first_air_ts_ns").sort().to_numpy() if up.height and "first_air_ts_ns" in up.columns
         else np.zeros(0, np.int64))
    k = np.searchsorted(u, d, side="right")
    nxt = np.full(len(d), t_r, np.int64)
    has = k < len(u)
    nxt[has] = np.minimum(u[k[has]], t_r)
    held = nxt - d
    i = int(np.argmax(held))
    if held[i] < ACK_HELD_SHARE * (t_r - t_o):
        return None
    return {"flow_data": flow, "station": got["station"][i], "down_ms": round((int(d[i]) - t_o) / 1e6, 3),
            "held_ms": round(int(held[i]) / 1e6, 3), "until_retransmission": bool(nxt[i] == t_r)}


def _rto_text(host_rto_ms: float | None, rto_ms: float | None) -> str:
    """Return the one RTO a sentence names: the host's sampled one if any, else the capture's estimate, labelled."""
    if host_rto_ms:
        return f"the host's smallest sampled RTO, {host_rto_ms:.0f} ms"
    return f"the RTO estimated from the capture (no host sample), {rto_ms:.0f} ms"


def method_counts(sp: pl.DataFrame) -> dict[str, int]:
    """Return {method: retransmissions it decided}, most first.

    The method is the head of the retransmissions table's `method` text ("receiver_capture" of
    "receiver_capture (trigger rto: 497 ms after the original ...)"): the reasoning after it differs
    for every retransmission and stays in the table.
    """
    m = sp.select(pl.col("method").drop_nulls().str.split(" (").list.first().str.strip_chars().alias("m"))
    if m.height == 0:
        return {}
    return dict(m.group_by("m").len().sort(["len", "m"], descending=[True, False]).iter_rows())
