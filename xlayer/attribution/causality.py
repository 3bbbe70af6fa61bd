"""What produces what: the causes as a graph, and a window's findings put root first by measured delay.

The graph (issue 11; study 003's finding: MAC retransmissions push IP delay above the RTO):

    retransmissions on the air  <- mac_retries, interference (corrupted or unheard frames are resent)
    one station holding the AP  <- performance_anomaly (a weak link: low PHY rate, retries)
    further fragments           <- fragmentation
    queueing behind plain work  <- ap_queue_overflow (a full queue)
    any of them, or the wired path -> delay above the RTO -> spurious_rto (nothing was lost)

A `spurious_rto` finding is a consequence when the delay of the timed-out flows' packets shows what
made it.  `xlayer.attribution.causes.delaysplit` splits each packet's delay (the `delay` table) by
what the AP's transmit line was doing while it waited and while it was sent: retransmissions,
further fragments, one hog station's service, plain work, and the wired path before the AP.  The
part that grew the most against outside the drop windows is what changed; it is the root when the
late packets' delay reached half the RTO and that part made at least `ROOT_MIN_SHARE` of its increase
(`root_cause`: plain queueing behind normally served packets is a root only as a full queue).  The
finding of that cause takes the consequence's rank and the consequence follows it, saying why
(`explained_by`, `because`).  When no cause module scored that root in the window (its own signs
were too weak to see on their own), the measured split is the evidence and the root's finding is
made from it.  Nothing is decided by which causes are named, only by these measured quantities:
with no air capture, or with delay made on the wired path, the spurious timeouts stay a root.
"""
from __future__ import annotations

from typing import Any

from xlayer.attribution.causes import (
    delaysplit,
    fragmentation,
    mac_retries,
    performance_anomaly,
)
from xlayer.attribution.causes.base import Context, Window
from xlayer.attribution.incidents import CauseFinding

ROOT_MIN_RTO_SHARE = 0.5        # the late packets' delay reached this share of the RTO
ROOT_MIN_SHARE = 0.3            # the part made at least this share of the late packets' delay increase
LABEL = {"retry": "MAC retry time", "fragments": "fragment time", "hog": "time the AP served one station",
         "load": "AP queue sojourn", "wired": "wired path delay"}


def _rto_ms(f: CauseFinding) -> float | None:
    rto = f.numbers.get("host_rto_ms") or f.numbers.get("rto_estimate_ms")
    return float(rto) if rto else None


def root_cause(sp: delaysplit.Split, found: dict[str, CauseFinding]) -> tuple[str, str] | None:
    """Return (cause, delay part) of the root the split shows, or None (the wired path, or plain queueing).

    Plain queueing behind normally served packets is a root only as a full queue
    (`ap_queue_overflow` found); otherwise the cause part (retries, fragments, a hog) that grew the
    most is, when it made `ROOT_MIN_SHARE` of the increase of the late packets' delay.  A station
    holding the line on a good link is slow because its MAC keeps trying (its data or its RTS unanswered:
    a deaf or interfered receiver), unless its further fragments are what takes the time.
    """
    part = max(("hog", "retry", "fragments"), key=sp.increase)
    if "ap_queue_overflow" in found and sp.increase("load") >= sp.increase(part):
        return "ap_queue_overflow", "load"
    grew = sum(sp.increase(k) for k in delaysplit.PARTS)
    if sp.increase(part) <= 0 or sp.increase(part) < ROOT_MIN_SHARE * grew:
        return None
    if part == "hog" and sp.hog is not None:
        h = sp.hog
        if h.weak_link:
            return performance_anomaly.NAME, part
        if h.fragments_share > 0.25 and h.fragments_share > h.retry_share:
            return fragmentation.NAME, part
        return ("interference" if "interference" in found else mac_retries.NAME), part
    if part == "retry":
        return ("interference" if "interference" in found else mac_retries.NAME), part
    return fragmentation.NAME, part


_MAKERS = {performance_anomaly.NAME: performance_anomaly, mac_retries.NAME: mac_retries,
           fragmentation.NAME: fragmentation}


def explain(ctx: Context, w: Window, found: list[CauseFinding]) -> list[CauseFinding]:
    """Return the findings with each consequence placed right after the root the measurements show made it."""
    by = {f.cause: f for f in found}
    sp = by.get("spurious_rto")
    rto = _rto_ms(sp) if sp is not None else None
    if sp is None or rto is None:
        return found
    s = delaysplit.split(ctx, w, sp.flows or w.flows, rto)
    if s is None or s.total_ms < ROOT_MIN_RTO_SHARE * rto:
        return found
    rc = root_cause(s, by)
    if rc is None:
        return found
    name, part = rc
    root = by.get(name)
    if root is None:
        maker = _MAKERS.get(name)
        root = maker.from_delay(ctx, w, s, sp.confidence) if maker is not None else None
        if root is None:
            return found
    share = s.inside[part] / s.total_ms
    sp.explained_by = root.cause
    sp.because = (f"spurious RTOs because {root.cause} pushed delay past the RTO: {LABEL[part]} "
                  f"{share:.0%} of the delay of the late packets (mean {s.total_ms:.0f} ms, "
                  f"{s.inside[part]:.0f} ms of it, {s.outside.get(part, 0.0):.0f} ms outside the drops; "
                  f"RTO {rto:.0f} ms)")
    sp.numbers = {**sp.numbers, "delay_ms": {k: round(v, 3) for k, v in s.inside.items()},
                  "delay_outside_ms": {k: round(v, 3) for k, v in s.outside.items()},
                  "late_packets": s.packets}
    # the pair takes the place of whichever of the two ranked higher
    first = min(found.index(sp), found.index(root) if root in found else len(found))
    rest = [f for f in found if f is not sp and f is not root]
    at = sum(1 for f in found[:first] if f is not sp and f is not root)
    return rest[:at] + [root, sp] + rest[at:]


def chain(found: list[CauseFinding]) -> dict[str, Any]:
    """Return {"root": cause, "consequences": [{cause, because}]} of ordered findings."""
    roots = [f for f in found if f.explained_by is None]
    return {"root": roots[0].cause if roots else None,
            "consequences": [{"cause": f.cause, "explained_by": f.explained_by, "because": f.because}
                             for f in found if f.explained_by is not None]}
