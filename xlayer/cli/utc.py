"""Times as the text commands print them: ISO date and time of day, labelled UTC ('2023-11-14 22:13:18.578573 UTC').

The JSON outputs keep ISO 8601 with 'Z'; this is for people reading a terminal, who should not have to
know that 'Z' or '+00:00' means UTC.
"""
from __future__ import annotations

from datetime import datetime, timezone

NS = 1_000_000_000


def utc_label(ns: int | None, digits: int = 6) -> str:
    """Return epoch nanoseconds as 'YYYY-MM-DD HH:MM:SS.ffffff UTC' (0-9 digits of the second), or '-'."""
    if ns is None:
        return "-"
    sec, frac = divmod(int(ns), NS)
    try:
        day = datetime.fromtimestamp(sec, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):
        # a stamp no calendar holds (a hostile capture's year 300000): the number, not a traceback
        return f"{int(ns)} ns since the epoch"
    digits = max(0, min(9, digits))
    return day + (f".{frac:09d}"[: digits + 1] if digits else "") + " UTC"


def iso_label(text: object) -> str | None:
    """Return ISO 8601 UTC text ('...T...Z' or '+00:00') as a UTC label, or None if it is not such text."""
    if not isinstance(text, str):
        return None
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if t.utcoffset() is None:
        return None
    t = t.astimezone(timezone.utc)
    return t.strftime("%Y-%m-%d %H:%M:%S") + (f".{t.microsecond:06d}" if t.microsecond else "") + " UTC"
