"""Decryption for the decoders: one Decryptor per capture, fed each chunk's records in capture order.

The decoders may decode chunks on several threads, out of order; the handshakes must be seen before the
data frames they protect.  So the reader runs `ChunkDecryptor.chunk` on every chunk in file order, before
handing the chunk to a decoder: it returns the plaintext of that chunk's protected frames only (memory
stays per chunk), and both decoders take those plaintexts down the same LLC/SNAP -> IP -> transport path
as an open frame.  Records that can be neither a protected frame nor an EAPOL frame are skipped with a
vectorized byte test (most records of a capture), so the per-record loop runs over the few that matter.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from parsers.crypto.ccmp import CCMP_HDR, MIC_LEN
from parsers.crypto.decrypt import Decryptor
from parsers.crypto.frames import DOT11_LINKTYPES, LLC_EAPOL, Dot11Record, _record
from parsers.crypto.keys import Key
from parsers.crypto.tkip import TRAILER
from parsers.formats.records import RecordChunk
from parsers.layers.radiotap import FLAG_FCS_AT_END, fcs_trailer

# Columns the decryption adds to the packet table (declared in parsers.schema).
DECRYPT_COLUMNS = ("wlan_decrypted", "wlan_mic", "wlan_key")
_RADIOTAP = 127
_RAW = 105
_EAPOL = np.frombuffer(LLC_EAPOL, np.uint8)


@dataclass(slots=True)        # not frozen: built once per protected frame, and frozen ones build slowly
class Plain:
    """What decryption says about one protected record: its plaintext 802.11 frame (Protected bit cleared,
    no security header or MIC) or None, its length on the air, and the verdict."""

    frame: bytes | None
    claimed: int            # the plaintext frame's length on the air (more than len(frame) when cut)
    key: str | None         # "ptk", "gtk" or "tk": the kind of key, never key material
    mic: str | None         # "ok", "unverified" (cut by the snap length), "failed", or None (not tried)

    @property
    def cut(self) -> bool:
        """Return True when the snap length cut the frame (its captured prefix was decrypted)."""
        return self.frame is not None and self.claimed > len(self.frame)

    def columns(self) -> dict:
        """Return the decryption columns of this record as {column: value}."""
        return {"wlan_decrypted": self.frame is not None, "wlan_mic": self.mic, "wlan_key": self.key}


class ChunkDecryptor:
    """Decrypts a capture chunk by chunk, in file order; keeps only key state between chunks."""

    def __init__(self, keys: Sequence[Key]):
        self._dec = Decryptor(keys)

    def chunk(self, chunk: RecordChunk) -> dict[int, Plain]:
        """Return {chunk row: Plain} for the chunk's protected 802.11 frames (after feeding its EAPOL frames)."""
        rows = candidates(chunk)
        self._dec.counts.frames += len(chunk) - len(rows)   # records not worth a look are counted as seen
        out: dict[int, Plain] = {}
        data = chunk.data
        for r in rows.tolist():
            o, cl = int(chunk.offset[r]), int(chunk.caplen[r])
            rec = bare_record(int(chunk.frame[r]) - 1, bytes(data[o:o + cl]), max(int(chunk.wirelen[r]), cl),
                              int(chunk.linktype[r]) & 0xFFFF)
            got = self._dec.frame(rec.index, rec.frame, rec.wire_len, rec.skipped)
            if rec.frame is None or (got.plaintext is None and got.reason is None):
                continue        # not 802.11, or an open frame (an EAPOL one fed the handshakes)
            out[r] = _plain(got, rec.wire_len)
        return out

    def summary(self) -> dict:
        """Return the decryption counts (handshakes, keys derived, decrypted, MIC failures, no key...)."""
        self._dec.hs.finish()
        d = self._dec.counts.as_dict()
        d["keys_derived"] = sum(1 for k in self._dec.hs.all if k.kind != "tk")
        return d


def bare_record(index: int, raw: bytes, wirelen: int, linktype: int) -> Dot11Record:
    """Return a record as its bare 802.11 frame (as parsers.crypto.frames does), reading only the radiotap
    fields that decide it (length, Flags) on the common path; any other header goes the full way."""
    if linktype != _RADIOTAP or len(raw) < 8 or raw[0] != 0:
        return _record(index, raw, wirelen, linktype)
    it_len = int.from_bytes(raw[2:4], "little")
    w0 = int.from_bytes(raw[4:8], "little")
    at = 4
    while int.from_bytes(raw[at:at + 4], "little") & (1 << 31):
        at += 4
        if at + 4 > len(raw):
            return _record(index, raw, wirelen, linktype)
    at += 4
    # a PSDU-less PPDU, or a header the full walk must judge: not the common path
    if it_len < at or it_len > len(raw) or w0 & (1 << 26):
        return _record(index, raw, wirelen, linktype)
    if w0 & 1:                       # TSFT: 8 bytes, aligned to 8 from the header's start
        at = (at + 7) // 8 * 8 + 8
    flags = raw[at] if w0 & 2 and at < it_len else 0
    end, claimed, cut = len(raw), max(wirelen, len(raw)), len(raw) < wirelen
    if flags & FLAG_FCS_AT_END:
        trailer = fcs_trailer(raw, it_len, end, claimed, cut)
        if trailer is None:
            return _record(index, raw, wirelen, linktype)
        end, claimed, _ = trailer
    if end <= it_len:
        return _record(index, raw, wirelen, linktype)
    return Dot11Record(index, raw[it_len:end], claimed - it_len)


def _plain(got, wire_len: int) -> Plain:
    """Return the Plain of one Decryptor verdict on a protected frame."""
    if got.plaintext is None:
        return Plain(None, 0, None, "failed" if got.mic_ok is False else None)
    if got.mic_ok:
        return Plain(got.plaintext, len(got.plaintext), got.key.kind, "ok")
    cipher = got.key.cipher
    trailer = TRAILER if cipher == "TKIP" else MIC_LEN[cipher]
    # cut: the frame on the air was its header, the security header, the body and the MIC (or TKIP trailer)
    return Plain(got.plaintext, max(len(got.plaintext), wire_len - CCMP_HDR - trailer), got.key.kind, "unverified")


def candidates(chunk: RecordChunk) -> np.ndarray:
    """Return the rows that may hold a protected data/management frame or an EAPOL frame (a superset).

    Radiotap and raw 802.11 records are tested on their bytes; records of the other 802.11 link types
    (Prism, AVS, PPI) are all candidates (their radio headers are read per frame)."""
    n = len(chunk)
    if not n:
        return np.zeros(0, np.int64)
    lt = chunk.linktype.astype(np.int64)
    off = chunk.offset.astype(np.int64)
    end = off + chunk.caplen.astype(np.int64)
    data = chunk.data
    top = len(data) - 1
    start = np.full(n, -1, np.int64)
    raw = lt == _RAW
    start[raw] = off[raw]
    rt = (lt == _RADIOTAP) & (end - off >= 4)
    if rt.any():
        o = off[rt]
        it_len = data[np.minimum(o + 2, top)].astype(np.int64) | (data[np.minimum(o + 3, top)].astype(np.int64) << 8)
        start[rt] = o + it_len
    ok = (start >= 0) & (start + 24 <= end)
    s = np.where(ok, start, 0)
    fc0 = data[np.minimum(s, top)].astype(np.int64)
    fc1 = data[np.minimum(s + 1, top)].astype(np.int64)
    ftype = fc0 & 0x0C
    framed = ok & (ftype != 0x04) & (ftype != 0x0C)
    cand = framed & ((fc1 & 0x40) != 0)
    data_rows = np.flatnonzero(framed & ~cand & (ftype == 0x08))
    if len(data_rows):
        cand[data_rows[_eapol_within(data, s[data_rows], end[data_rows])]] = True
    other = np.isin(lt, [t for t in DOT11_LINKTYPES if t not in (_RAW, _RADIOTAP)])
    return np.flatnonzero(cand | other)


def _eapol_within(data: np.ndarray, s: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Return a mask of the frames (starting at s) with the EAPOL LLC/SNAP header within bytes 24..48."""
    at = s[:, None] + np.arange(24, 48)
    inside = at < end[:, None]
    win = data[np.minimum(at, len(data) - 1)]
    found = np.zeros(len(s), bool)
    for o in range(0, 24 - len(_EAPOL) + 1):
        found |= (win[:, o:o + len(_EAPOL)] == _EAPOL).all(axis=1) & inside[:, o + len(_EAPOL) - 1]
    return found
