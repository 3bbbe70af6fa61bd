"""The per-frame reference decoder: one record's bytes in, one row of final Python values out.

It walks the same layers as the vectorized decoder, one frame at a time, with independently written
per-layer code (dpkt where dpkt is right). It decodes what the fast path passes down and is the check
on the fast path: both must agree on every cell.
"""
from __future__ import annotations

from parsers.columnar.span import KIND_DOT11
from parsers.decode import registry


def _call(fn, layer: str, data: bytes, start: int, end: int, claimed: int, cut: bool, row: dict):
    try:
        return fn(data, start, end, claimed, cut, row)
    except Exception as exc:  # noqa: BLE001 - untrusted input must never surface a traceback
        row.setdefault("malformed", f"internal error in {layer} decoder: {type(exc).__name__}: {exc}")
        return None


def decode_record(data: bytes, linktype: int, wirelen: int, plain=None) -> dict:
    """Return one record decoded as {column: value}; absent columns are missing from the dict.

    `plain` (a parsers.decode.decrypt.Plain) is what decryption found for a protected record: its
    verdict columns are set and a decrypted data frame's body is decoded from the plaintext."""
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
    if plain is not None and "wlan_type" in row:      # raw 802.11 (105): decoded as the link layer
        row.update(plain.columns())
        if plain.frame is not None:
            data, cut = plain.frame, plain.cut
            nxt = _plain_body(plain, row)
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


# Header columns the plaintext would give differently from the protected frame (its flags, no IV):
# the original frame's are kept. DA and SA of an A-MSDU come from its first subframe, in the body.
_BODY_ADDRESSES = ("wlan_da", "wlan_sa")


def _plain_body(plain, row: dict):
    """Decode a decrypted data frame's body into row; return what follows its LLC/SNAP header, or None."""
    f = plain.frame
    if len(f) < 1 or (f[0] >> 2) & 3 != 2:
        return None         # protected management frames: their bodies are not decoded
    scratch: dict = {}
    nxt = _call(registry.DOT11_FRAME_DECODER, "802.11", f, 0, len(f), plain.claimed, plain.cut, scratch)
    for name, value in scratch.items():
        if name == "malformed":
            row.setdefault("malformed", value)
        elif name not in row or name in _BODY_ADDRESSES:
            row[name] = value
    return nxt
