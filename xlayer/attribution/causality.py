"""What produces what: the causes as a graph, and a window's findings put root first by measured delay.

The graph (issue 11; study 003's finding: MAC retransmissions push IP delay above the RTO):

    AP queue sojourn   <- ap_queue_overflow (a full queue), performance_anomaly (a FIFO held by slow frames)
    MAC retry time     <- mac_retries, interference (corrupted frames are retried)
    delay above the RTO -> spurious_rto (the sender times out although nothing was lost)

A `spurious_rto` finding is a consequence when the downlink packets of its flows in the window show
where their delay at the AP went.  A packet's AP-side delay is its sojourn in the queue (`sojourn_ns`
of the `downlink` table) plus its own retry time (first to last transmission of its MPDU).  The AP's
queue is a FIFO: while a packet waits, the AP serves the packets ahead of it, so the part of its
sojourn during which the AP was retrying some MPDU (any station's: the union of every packet's retry
span) is retry time too, the rest queueing proper (many packets ahead, or slow frames).  The delay
maker whose share is the larger is the root when, by itself, it reached at least half the RTO (p95
over the packets); the consequence then ranks right after its root and says why (`explained_by`,
`because`).  Nothing is
decided by which causes are named, only by these measured quantities: with no air capture, or with
delay made on the wired path, the spurious timeouts stay a root themselves.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from xlayer.attribution.causes.base import LEAD_NS, Context, Window
from xlayer.attribution.incidents import CauseFinding

# Which findings a delay component is made by, in order of preference when several were found.
QUEUE_MAKERS = ("ap_queue_overflow", "performance_anomaly")
MAC_MAKERS = ("mac_retries", "interference")
ROOT_MIN_RTO_SHARE = 0.5        # the component's p95 reached this share of the RTO by itself


def delay_components(ctx: Context, w: Window, flows: list[str]) -> dict[str, float] | None:
    """Return the p95 in ms of the AP queue sojourn and of the MAC retry time of the flows' downlink
    packets in the window (and just before it), or None when the join has no such packets."""
    dl = ctx.between("downlink", w.start_ns - LEAD_NS, w.end_ns)
    if dl.height == 0 or not flows:
        return None
    spans = dl.filter(pl.col("last_air_ts_ns") > pl.col("first_air_ts_ns")).select("first_air_ts_ns", "last_air_ts_ns")
    mine = dl.filter(pl.col("flow").is_in(flows) & pl.col("sojourn_ns").is_not_null())
    if mine.height == 0:
        return None
    arrive = mine["ts_ns"].to_numpy()
    sojourn = np.clip(mine["sojourn_ns"].to_numpy(), 0, None)
    own = np.clip((mine["last_air_ts_ns"] - mine["first_air_ts_ns"]).fill_null(0).to_numpy(), 0, None)
    retrying = _covered(spans["first_air_ts_ns"].to_numpy(), spans["last_air_ts_ns"].to_numpy())
    waited_on_retries = np.minimum(retrying(arrive + sojourn) - retrying(arrive), sojourn)
    mac = own + waited_on_retries
    queue = sojourn - waited_on_retries
    return {"queue": float(np.quantile(queue, 0.95)) / 1e6, "mac": float(np.quantile(mac, 0.95)) / 1e6}


def _covered(starts: np.ndarray, ends: np.ndarray) -> Any:
    """Return F(t): how long, up to t, at least one of the intervals [start, end) covered (ns)."""
    if len(starts) == 0:
        return lambda t: np.zeros(len(t))
    order = np.argsort(starts, kind="stable")
    s, e = starts[order].astype(np.int64), ends[order].astype(np.int64)
    e = np.maximum.accumulate(e)
    new = np.ones(len(s), bool)
    new[1:] = s[1:] > e[:-1]                      # a gap before it: a new merged interval starts
    idx = np.flatnonzero(new)
    ms, me = s[idx], np.maximum.reduceat(e, idx)
    before = np.concatenate([[0], np.cumsum(me - ms)])

    def f(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(ms, t, side="right")          # merged intervals starting at or before t
        inside = np.clip(t - ms[np.maximum(k - 1, 0)], 0, me[np.maximum(k - 1, 0)] - ms[np.maximum(k - 1, 0)])
        return before[np.maximum(k - 1, 0)] + np.where(k > 0, inside, 0)

    return f


def _rto_ms(f: CauseFinding) -> float | None:
    rto = f.numbers.get("host_rto_ms") or f.numbers.get("rto_estimate_ms")
    return float(rto) if rto else None


def explain(ctx: Context, w: Window, found: list[CauseFinding]) -> list[CauseFinding]:
    """Return the findings with each consequence placed right after the root the measurements show made it."""
    by = {f.cause: f for f in found}
    sp = by.get("spurious_rto")
    rto = _rto_ms(sp) if sp is not None else None
    if sp is None or rto is None:
        return found
    comp = delay_components(ctx, w, sp.flows or w.flows)
    if comp is None:
        return found
    makers = {"queue": next((by[c] for c in QUEUE_MAKERS if c in by), None),
              "mac": next((by[c] for c in MAC_MAKERS if c in by), None)}
    name = {"queue": "AP queue sojourn", "mac": "MAC retry time"}
    total = comp["queue"] + comp["mac"]
    part = max(("queue", "mac"), key=lambda k: comp[k])
    root = makers[part]
    if root is None or total <= 0 or comp[part] < ROOT_MIN_RTO_SHARE * rto:
        return found
    share = comp[part] / total
    sp.explained_by = root.cause
    sp.because = (f"spurious RTOs because {root.cause} pushed delay past the RTO: {name[part]} {share:.0%} of "
                  f"the AP-side delay (p95 {comp[part]:.0f} ms against an RTO of {rto:.0f} ms)")
    sp.numbers = {**sp.numbers, "delay_p95_ms": {"ap_queue": round(comp["queue"], 3), "mac_retry": round(comp["mac"], 3)}}
    out = [f for f in found if f is not sp]
    out.insert(out.index(root) + 1, sp)
    return out


def chain(found: list[CauseFinding]) -> dict[str, Any]:
    """Return {"root": cause, "consequences": [{cause, because}]} of ordered findings."""
    roots = [f for f in found if f.explained_by is None]
    return {"root": roots[0].cause if roots else None,
            "consequences": [{"cause": f.cause, "explained_by": f.explained_by, "because": f.because}
                             for f in found if f.explained_by is not None]}
