"""The 802.11 header fields that decryption needs, and captures turned into bare 802.11 frames.

`Header` reads one MAC header (data or management; control frames are never protected).
`dot11_records(path)` yields every record of a pcap/pcapng capture as its 802.11 frame without
radio header and FCS, using the same per-frame radio-header decoders as the reference decoder.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

from parsers.columnar.span import KIND_DOT11
from parsers.formats.containers import open_capture
from parsers.layers.radioheaders import LINK_FRAME_DECODERS as RADIO_FRAME_DECODERS

LLC_EAPOL = b"\xaa\xaa\x03\x00\x00\x00\x88\x8e"
DOT11_LINKTYPES = (105, *RADIO_FRAME_DECODERS)


@dataclass(slots=True)        # not frozen: a frozen dataclass takes ~10x longer to build, once per frame
class Header:
    """One 802.11 MAC header: type, subtype, flags, addresses, QoS TID and where the body starts."""

    ftype: int
    subtype: int
    flags: int          # frame control byte 1
    hdr_len: int
    a1: bytes
    a2: bytes
    a3: bytes
    a4: bytes | None
    qos_at: int         # offset of QoS Control, 0 when none
    tid: int

    @property
    def protected(self) -> bool:
        """Return True when the Protected Frame bit is set."""
        return bool(self.flags & 0x40)

    @property
    def group(self) -> bool:
        """Return True when the receiver address is a group (multicast/broadcast) address."""
        return bool(self.a1[0] & 1)


def parse_header(f: bytes) -> Header | None:
    """Return the header of a data or management frame, or None (control/extension, version != 0, too short)."""
    if len(f) < 24 or f[0] & 3:
        return None
    ftype, sub, fl = (f[0] >> 2) & 3, f[0] >> 4, f[1]
    if ftype == 0:
        hdr, qos_at, a4 = 24 + 4 * bool(fl & 0x80), 0, None
    elif ftype == 2:
        four, qos = (fl & 3) == 3, bool(sub & 8)
        qos_at = (30 if four else 24) if qos else 0
        hdr = 24 + 6 * four + 2 * qos + 4 * (qos and bool(fl & 0x80))
        a4 = f[24:30] if four else None
    else:
        return None
    if len(f) < hdr:
        return None
    tid = f[qos_at] & 0x0F if qos_at else 0
    return Header(ftype, sub, fl, hdr, f[4:10], f[10:16], f[16:22], a4, qos_at, tid)


def eapol_body(h: Header, f: bytes) -> bytes | None:
    """Return the EAPOL PDU of an unprotected data frame carrying LLC/SNAP 0x888E, else None."""
    if h.ftype != 2 or h.subtype & 4 or h.protected:
        return None
    return eapol_after(f, h.hdr_len)


def eapol_after(f: bytes, at: int) -> bytes | None:
    """Return what follows an LLC/SNAP 0x888E header at offset `at`, else None."""
    if f[at:at + 8] != LLC_EAPOL:
        return None
    return f[at + 8:]


@dataclass
class Dot11Record:
    """One capture record as a bare 802.11 frame: index (0-based), bytes, length on the air, or why not."""

    index: int
    frame: bytes | None
    wire_len: int
    skipped: str | None = None


def dot11_records(path: str | os.PathLike) -> Iterator[Dot11Record]:
    """Yield every record of a capture as a Dot11Record (radio header and FCS removed); raise CaptureError."""
    index = 0
    with open_capture(path) as cap:
        for ch in cap.chunks():
            data = ch.data
            for off, cl, wl, lt in zip(ch.offset.tolist(), ch.caplen.tolist(), ch.wirelen.tolist(),
                                       ch.linktype.tolist()):
                yield _record(index, bytes(data[off:off + cl]), max(wl, cl), int(lt) & 0xFFFF)
                index += 1


def _record(index: int, raw: bytes, wirelen: int, linktype: int) -> Dot11Record:
    """Return one record with its radio header and FCS removed (or the reason it has no 802.11 frame)."""
    if linktype == 105:
        return Dot11Record(index, raw, wirelen)
    fn = RADIO_FRAME_DECODERS.get(linktype)
    if fn is None:
        return Dot11Record(index, None, 0, f"link type {linktype} carries no 802.11 frames")
    row: dict = {}
    try:
        nxt = fn(raw, 0, len(raw), wirelen, len(raw) < wirelen, row)
    except Exception as exc:  # noqa: BLE001 - a capture is untrusted: a bad header is a skipped record
        return Dot11Record(index, None, 0, f"radio header: {type(exc).__name__}")
    if nxt is None or nxt[0] != KIND_DOT11:
        return Dot11Record(index, None, 0, row.get("malformed") or "no 802.11 frame after the radio header")
    _, start, end, claimed = nxt
    return Dot11Record(index, raw[start:end], claimed - start)
