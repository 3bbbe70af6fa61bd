"""The per-frame reference decoder: one record's bytes in, one row of final Python values out.

It walks the same layers as the vectorized decoder, one frame at a time, with independently written
per-layer code (dpkt where dpkt is right). It decodes what the fast path passes down and is the check
on the fast path: both must agree on every cell.
"""
from __future__ import annotations

from parsers.decode import registry
from parsers.columnar.span import KIND_DOT11


def _call(fn, layer: str, data: bytes, start: int, end: int, claimed: int, cut: bool, row: dict):
    try:
        return fn(data, start, end, claimed, cut, row)
    except Exception as exc:  # noqa: BLE001 - untrusted input must never surface a traceback
        row.setdefault("malformed", f"internal error in {layer} decoder: {type(exc).__name__}: {exc}")
        return None


def decode_record(data: bytes, linktype: int, wirelen: int) -> dict:
    """Return one record decoded as {column: value}; absent columns are missing from the dict."""
    row: dict = {}
    end = len(data)
    claimed = max(wirelen, end)
    cut = end < wirelen
    fn = registry.LINK_FRAME_DECODERS.get(linktype)
    if fn is None:
        row["malformed"] = f"link type {linktype} ({registry.linktype_name(linktype)}) is not decoded"
        return row
    nxt = _call(fn, "link", data, 0, end, claimed, cut, row)
    if nxt is not None and nxt[0] == KIND_DOT11:
        nxt = _call(registry.DOT11_FRAME_DECODER, "802.11", data, nxt[1], nxt[2], nxt[3], cut, row)
    if nxt is None:
        return row
    fn = registry.NET_FRAME_DECODERS.get(nxt[0])
    if fn is None:
        return row
    nxt = _call(fn, f"network {nxt[0]:#x}", data, nxt[1], nxt[2], nxt[3], cut, row)
    if nxt is None:
        return row
    fn = registry.TRANSPORT_FRAME_DECODERS.get(nxt[0])
    if fn is not None:
        _call(fn, f"transport {nxt[0]:#x}", data, nxt[1], nxt[2], nxt[3], cut, row)
    return row
