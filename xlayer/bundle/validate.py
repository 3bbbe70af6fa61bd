"""What a parsed `bundle.json` must be before anything uses it: one pass over the JSON, one-line problems.

A manifest is data from someone else's machine.  Each check here returns the first problem it finds
as one line naming the key path (``captures[3].vantage: ...``), or None; `xlayer.bundle.manifest`
raises it as a BundleError, which every command turns into one line on stderr and exit 2.

What is checked, beyond the per-key types the manifest module checks:

* every string, and every object key, can be written as UTF-8 (no lone surrogate from a ``\\ud800``
  escape, which would fail much later, when a report or a table is written);
* every number is finite (`parse_json` never lets NaN or Infinity through, nor ``1e400``) and every
  integer fits in 64 bits (a 5,000-digit integer is reported, not converted);
* at most `MAX_CAPTURES` capture entries and `MAX_ENTRIES` tags, clocks or clock overrides, so that a
  manifest cannot make a command spend minutes on entries nobody recorded;
* ``capture`` (the run that made the bundle): times are integer epoch nanoseconds, ``command`` and
  ``errors`` are arrays of strings;
* ``clock_overrides``: offsets within `MAX_OFFSET_S`, skews within `MAX_SKEW_PPM`, anchors from 0
  to `MAX_ANCHOR_TS` (epoch seconds whose nanoseconds fit in int64).
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

MAX_CAPTURES = 10_000               # capture entries (packet captures and host-state files) in one bundle
MAX_ENTRIES = 10_000                # tags, clocks, clock overrides: each at most this many
MAX_OFFSET_S = 10 * 365.25 * 86400  # a clock ten years off is a wrong manifest, not a clock
MAX_SKEW_PPM = 1000.0               # quartz is within ~100 ppm; 1000 leaves room for odd hardware
NS_MAX = 2**63 - 1                  # epoch nanoseconds are int64 everywhere downstream
MAX_ANCHOR_TS = NS_MAX // 10**9     # anchor_ts, in seconds, must be an int64 nanosecond time
INT_MIN, INT_MAX = -(2**63), 2**64 - 1
INT_MAX_DIGITS = 20                 # no integer of more digits fits in 64 bits (nor needs converting)

_SURROGATE = re.compile("[\ud800-\udfff]")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_RUN_STRINGS = ("tool", "filter", "kernel", "state")


class Unreadable:
    """A number the JSON text holds but no manifest may: NaN, Infinity, 1e400, a 5,000-digit integer."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why

    def __repr__(self) -> str:
        return f"Unreadable({self.why!r})"


def _parse_int(text: str) -> int | Unreadable:
    # Checked before int(): Python refuses over 4,300 digits with a ValueError, and converting a few
    # thousand digits is wasted work for a number that cannot be used anyway.
    digits = len(text.lstrip("-"))
    if digits > INT_MAX_DIGITS:
        return Unreadable(f"an integer of {digits} digits does not fit in 64 bits")
    return int(text)


def _parse_float(text: str) -> float | Unreadable:
    v = float(text)
    if not math.isfinite(v):
        return Unreadable(f"{_clip(text)} is too large for a number")
    return v


def _parse_constant(text: str) -> Unreadable:
    return Unreadable(f"{text} is not a number a manifest may hold")


def parse_json(text: str) -> Any:
    """Return the JSON value of `text`, with every NaN, Infinity, overflowing float or overlong integer
    replaced by an `Unreadable` marker that `json_problem` reports with its key path.

    Raises json.JSONDecodeError and RecursionError as json.loads does.
    """
    return json.loads(text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant)


# ---------------------------------------------------------------------------------------------
# key paths

KeyPath = tuple[Any, ...] | None      # (parent path, key): built only when a problem is reported


def path_text(path: KeyPath) -> str:
    """Return a key path as text: captures[3].vantage, tags["a b"] (an empty path is the manifest)."""
    keys: list[Any] = []
    while path is not None:
        path, key = path
        keys.append(key)
    out = ""
    for key in reversed(keys):
        if isinstance(key, int):
            out += f"[{key}]"
        elif isinstance(key, str) and _IDENT.match(key):
            out += f".{key}" if out else key
        else:                                   # ensure_ascii: a lone surrogate is shown as \udXXX
            out += f"[{json.dumps(key if isinstance(key, str) else str(key))}]"
    return out or "the manifest"


def _clip(text: str, n: int = 40) -> str:
    return text if len(text) <= n else text[:n] + "..."


def shown(v: Any) -> str:
    """Return a JSON value as short text for a message (1e+30, true, "abc", an object)."""
    if isinstance(v, Unreadable):
        return "an unreadable number"
    if isinstance(v, dict):
        return "an object"
    if isinstance(v, (list, tuple)):
        return "an array"
    try:
        return _clip(json.dumps(v))
    except (TypeError, ValueError):
        return type(v).__name__


# ---------------------------------------------------------------------------------------------
# every value: strings writable as UTF-8, numbers finite, integers of 64 bits

def _children(v: Any) -> Iterator[tuple[Any, Any]]:
    if isinstance(v, dict):
        return iter(v.items())
    if isinstance(v, (list, tuple)):       # a tuple: a Bundle built in code, written as an array
        return enumerate(v)
    return iter(())


def _string_problem(s: str) -> str | None:
    if s.isascii() or not _SURROGATE.search(s):
        return None
    return f"{json.dumps(_clip(s))} holds a lone UTF-16 surrogate, not text that UTF-8 can hold"


def _value_problem(v: Any) -> str | None:
    if isinstance(v, str):
        return _string_problem(v)
    if isinstance(v, Unreadable):
        return v.why
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int):
        return None if INT_MIN <= v <= INT_MAX else f"{_clip(str(v))} does not fit in 64 bits"
    if isinstance(v, float):
        return None if math.isfinite(v) else f"{v} is not a finite number"
    if isinstance(v, (dict, list, tuple)):
        return None
    return f"{type(v).__name__} is not a JSON value"


def _key_problem(d: dict[Any, Any], path: KeyPath) -> str | None:
    for k in d:
        # parsed JSON has string keys only; a Bundle built in code may use what json.dumps turns into one
        if isinstance(k, str):
            why = _string_problem(k)
        else:
            why = None if k is None or isinstance(k, (int, float)) else "is not a string"
        if why:
            return f"{path_text((path, k))}: the key {why}"
    return None


def json_problem(obj: Any) -> str | None:
    """Return the first value of `obj` (a parsed manifest) no manifest may hold, as 'key.path: why'; else None."""
    if not isinstance(obj, (dict, list, tuple)):
        why = _value_problem(obj)
        return f"the manifest: {why}" if why else None
    # Depth first with one iterator per level: memory follows the depth, not the size (a 16 MB
    # array holds 8 million numbers), no recursion however deep json.loads nested it, and the
    # common values (ASCII text, small integers) cost one type test each.
    why = _key_problem(obj, None) if isinstance(obj, dict) else None
    if why:
        return why
    stack: list[tuple[KeyPath, Iterator[tuple[Any, Any]]]] = [(None, _children(obj))]
    while stack:
        path, items = stack.pop()
        for key, v in items:
            t = type(v)
            if t is str:
                if v.isascii():
                    continue
            elif t is int:
                if INT_MIN <= v <= INT_MAX:
                    continue
            elif t is float:
                if math.isfinite(v):
                    continue
            elif v is None or t is bool:
                continue
            elif isinstance(v, (dict, list, tuple)):
                here = (path, key)
                why = _key_problem(v, here) if isinstance(v, dict) else None
                if why:
                    return why
                stack.append((path, items))         # this level goes on after the child
                stack.append((here, _children(v)))
                break
            why = _value_problem(v)
            if why:
                return f"{path_text((path, key))}: {why}"
    return None


# ---------------------------------------------------------------------------------------------
# sizes

def size_problem(d: dict[str, Any]) -> str | None:
    """Return a problem if the manifest object `d` lists more entries than a bundle may have; else None."""
    caps = d.get("captures")
    if isinstance(caps, list) and len(caps) > MAX_CAPTURES:
        return (f"captures: {len(caps)} entries, more than a bundle may have ({MAX_CAPTURES}); refused "
                "without reading them")
    for key in ("tags", "clocks", "clock_overrides"):
        v = d.get(key)
        if isinstance(v, dict) and len(v) > MAX_ENTRIES:
            return f"{key}: {len(v)} entries, more than a bundle may have ({MAX_ENTRIES}); refused"
    return None


# ---------------------------------------------------------------------------------------------
# the capture run and clock overrides

def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


def _strings_problem(v: Any, key: str) -> str | None:
    if v is None:
        return None
    if not isinstance(v, (list, tuple)):
        return f"capture.{key}: {shown(v)} is not an array of strings"
    for i, s in enumerate(v):
        if not isinstance(s, str):
            return f"capture.{key}[{i}]: {shown(s)} is not a string"
    return None


def run_problem(run: dict[str, Any]) -> str | None:
    """Return the first problem of the manifest's `capture` object (the run that made the bundle); else None."""
    for key in ("started_ns", "stopped_ns"):
        v = run.get(key)
        if v is not None and not (_is_int(v) and 0 <= v <= NS_MAX):
            return f"capture.{key}: {shown(v)} is not an integer nanosecond time (0 to {NS_MAX})"
    for key in ("command", "errors"):
        why = _strings_problem(run.get(key), key)
        if why:
            return why
    for key in _RUN_STRINGS:
        v = run.get(key)
        if v is not None and not isinstance(v, str):
            return f"capture.{key}: {shown(v)} is not a string"
    v = run.get("snaplen")
    if v is not None and not (_is_int(v) and v >= 0):
        return f"capture.snaplen: {shown(v)} is not a non-negative integer"
    return None


# (key, lowest, highest, the range as said): an anchor is an epoch time of the clock, never before
# 1970, so that `ts - anchor` of any int64 nanosecond stamp stays within int64
_OVERRIDE_BOUNDS = (
    ("offset_s", -MAX_OFFSET_S, MAX_OFFSET_S, f"at most {MAX_OFFSET_S:.0f} s (ten years) either way"),
    ("skew_ppm", -MAX_SKEW_PPM, MAX_SKEW_PPM, f"at most {MAX_SKEW_PPM:.0f} ppm either way"),
    ("anchor_ts", 0, MAX_ANCHOR_TS, f"0 to {MAX_ANCHOR_TS} epoch seconds, so that it is an int64 nanosecond time"),
)


def override_problem(clock: str, ov: dict[str, Any]) -> str | None:
    """Return the first bad key of one clock override, as 'clock_overrides.CLOCK.KEY ...'; else None."""
    for key, lo, hi, allowed in _OVERRIDE_BOUNDS:
        v = ov.get(key)
        if v is None:
            continue
        where = f"{path_text(((None, 'clock_overrides'), clock))}.{key}"
        if not _is_num(v):
            # the wording older manifests' errors used: "clock_overrides.ap.offset_s must be a number"
            return f"{where} must be a number, not {shown(v)}"
        if not lo <= v <= hi:
            return f"{where}: {shown(v)} is out of range ({allowed})"
    return None
