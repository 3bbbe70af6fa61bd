"""Causes of throughput drops: one module per cause, found here by discovery.

A cause module defines ``NAME`` (the cause's name in reports), ``score(ctx, window)`` returning a
`xlayer.attribution.incidents.CauseFinding` (or None when it finds no evidence in the window), and optionally
``propose(ctx)`` returning windows the cause sees by itself — conditions that hold for a whole run
(a slow station's airtime share, RTS/CTS always on) or events that start an incident (a station
lost its association).  Adding a cause is adding one file here; `causes()` lists them all.
"""
from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

_NOT_CAUSES = {"base"}


def causes() -> list[ModuleType]:
    """Return every cause module of this package, sorted by name."""
    mods = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_") or info.name in _NOT_CAUSES:
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(mod, "NAME") and hasattr(mod, "score"):
            mods.append(mod)
    return sorted(mods, key=lambda m: m.NAME)


def cause_names() -> list[str]:
    """Return the names of every registered cause."""
    return [m.NAME for m in causes()]
