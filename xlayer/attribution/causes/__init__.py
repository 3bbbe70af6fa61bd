"""Causes of throughput drops: one module per cause; `CAUSES` is the registry.

A cause module defines ``NAME`` (the cause's name in reports and JSON), ``COLOR`` (its incidents'
colour in the report), ``MEANING`` (one line: what it means), ``score(ctx, window)`` returning a
`xlayer.attribution.incidents.CauseFinding` (or None when it finds no evidence in the window), and
optionally ``propose(ctx)`` returning windows the cause sees by itself — conditions that hold for a
whole run (a slow station's airtime share, RTS/CTS always on) or events that start an incident (a
station lost its association), and ``episode(ctx, window, finding)`` returning the span (start_ns,
end_ns) over which the cause, found as a drop's root, was at work around it (the incident is widened
to it).  Causes read metric tables (`ctx.table`), never packet tables.
Adding a cause is one file here and one entry in `CAUSES`.
"""
from __future__ import annotations

from types import ModuleType

from xlayer.attribution.causes import (
    ap_queue_overflow,
    fragmentation,
    handoff,
    host_limited,
    interference,
    mac_retries,
    performance_anomaly,
    rate_change,
    rts_overhead,
    spurious_rto,
)

# Sorted by name: the order findings of equal confidence are listed in.
CAUSES: tuple[ModuleType, ...] = (ap_queue_overflow, fragmentation, handoff, host_limited, interference, mac_retries, performance_anomaly, rate_change, rts_overhead, spurious_rto)


def causes() -> list[ModuleType]:
    """Return every registered cause module, sorted by name."""
    return list(CAUSES)


def cause_names() -> list[str]:
    """Return the names of every registered cause."""
    return [m.NAME for m in CAUSES]
