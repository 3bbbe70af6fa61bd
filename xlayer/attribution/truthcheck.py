"""Compare an analysis with a bundle's truth: is the truth's cause ranked first for each truth event?

A truth event is a `primary` cause of truth.json (ns-3 bundles; lab bundles list theirs the same
way).  It is found when an incident covers at least half of its window and ranks its cause first;
two primary causes whose windows overlap (one drop, a chain of causes: MAC retries and the spurious
timeouts they provoke, however little their windows overlap) are one event found when either is
first and the other among the causes, unless the truth tags them with different injections
(`injected`: two causes made at once).
A bundle whose truth has no cause must give no incident.
"""
from __future__ import annotations

from typing import Any

from xlayer.attribution.incidents import Analysis, Incident

MIN_COVER = 0.5


def _cover(inc: Incident, s: float, e: float) -> float:
    a, b = inc.start_ns / 1e9, inc.end_ns / 1e9
    return max(0.0, min(b, e) - max(a, s)) / max(e - s, 1e-9)


def _events(truth: dict[str, Any]) -> list[list[dict]]:
    prim = sorted((c for c in truth.get("causes", []) if c.get("role", "primary") == "primary"),
                  key=lambda c: c["start_ts"])
    groups: list[list[dict]] = []
    for c in prim:
        for g in groups:
            # causes a truth tags with different injections (`injected`) are separate events even when
            # their windows overlap (a walk-away during a whole-run RTS threshold)
            # (windows that only touch, a walk's rate change then its lost association, stay apart)
            if any(min(c["end_ts"], o["end_ts"]) - max(c["start_ts"], o["start_ts"]) > 0
                   and c.get("injected") == o.get("injected") for o in g):
                g.append(c)
                break
        else:
            groups.append([c])
    return groups


def check(analysis: Analysis, truth: dict[str, Any]) -> dict[str, Any]:
    """Return {"events": [{causes, window, found, by}], "right", "total", "spurious_incidents"}."""
    out = []
    for g in _events(truth):
        names = {c["cause"] for c in g}
        s, e = min(c["start_ts"] for c in g), max(c["end_ts"] for c in g)
        by = None
        for inc in analysis.incidents:
            if not inc.findings or _cover(inc, s, e) < MIN_COVER:
                continue
            ranked = [f.cause for f in inc.findings]
            if ranked[0] in names and names <= set(ranked):
                by = inc
                break
        out.append({"causes": sorted(names), "window": [s, e], "found": by is not None,
                    "by": None if by is None else [by.start_ns / 1e9, by.end_ns / 1e9, by.cause]})
    extra = len(analysis.incidents) if not truth.get("causes") else 0
    return {"events": out, "right": sum(x["found"] for x in out), "total": len(out), "spurious_incidents": extra}
