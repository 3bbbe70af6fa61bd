"""How xlayer shows things: capture strings made safe for a terminal, times as UTC text, its version.

One rule each, used by every command and the report: `safe_text` escapes what a capture may hold
(control characters, bytes that were not UTF-8); times are epoch nanoseconds (`NS` per second) shown
in UTC.
"""
from __future__ import annotations

from datetime import datetime, timezone

NS = 1_000_000_000


def safe_text(s: object) -> str:
    """Return text safe to print on a terminal: non-printable characters become \\xNN / \\uNNNN."""
    if s is None:
        return "-"
    out = []
    for ch in str(s):
        o = ord(ch)
        if ch.isprintable() or ch == " ":
            out.append(ch)
        elif 0xDC80 <= o <= 0xDCFF:   # a byte that was not UTF-8 (surrogateescape): show the byte
            out.append(f"\\x{o - 0xDC00:02x}")
        elif o < 0x100:
            out.append(f"\\x{o:02x}")
        elif o < 0x10000:
            out.append(f"\\u{o:04x}")
        else:
            out.append(f"\\U{o:08x}")
    return "".join(out)


def iso_ns(ns: int | None) -> str | None:
    """Return epoch nanoseconds as UTC ISO 8601 text with all nine digits, or None."""
    if ns is None:
        return None
    sec, frac = divmod(int(ns), 1_000_000_000)
    return datetime.fromtimestamp(sec, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{frac:09d}Z"


def utc_text(ns: int | float | None, digits: int = 6) -> str:
    """Return epoch nanoseconds as 'YYYY-MM-DDTHH:MM:SS.ffffff+00:00' (digits of the second: 0-6), or '-'."""
    if ns is None:
        return "-"
    spec = "seconds" if digits == 0 else "milliseconds" if digits <= 3 else "microseconds"
    return datetime.fromtimestamp(ns / NS, tz=timezone.utc).isoformat(timespec=spec)


def package_version() -> str:
    """Return the installed xlayer's version (setup.cfg's, the one place it is written), or 'unknown'."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("xlayer")
    except PackageNotFoundError:
        return "unknown"


def clock_text(seconds: float | None) -> str:
    """Return epoch seconds as the UTC time of day 'HH:MM:SS.mmm', or '-'."""
    if seconds is None:
        return "-"
    return datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%H:%M:%S.%f")[:-3]
