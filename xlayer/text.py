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


# For people reading a terminal, who should not have to know that 'Z' or '+00:00' means UTC (the
# JSON outputs keep ISO 8601): 'YYYY-MM-DD HH:MM:SS.ffffff UTC'.
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
