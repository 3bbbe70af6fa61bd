"""FCS (CRC-32) verification of many frames at once, and a cheap look at radiotap Flags.

Imports only numpy and a CRC-32, so that the record-walk helper process (`walkproc`) starts fast.
"""
from __future__ import annotations

import numpy as np

from parsers.columnar import accel

# A CRC-32 with carry-less multiplication is far faster than zlib's; frames are short, so the cost
# per call decides: zlib-ng's is ~260 ns per 1.1 kB frame, isal's ~420 ns, zlib's ~520 ns (measured).
try:
    from zlib_ng.zlib_ng import crc32 as _crc32
except ImportError:  # pragma: no cover - optional speed-up
    try:
        from isal.isal_zlib import crc32 as _crc32
    except ImportError:
        from zlib import crc32 as _crc32

# The CRC-32 of any byte string followed by its own CRC-32 (little-endian, as an FCS is sent).
# Exactly one 4-byte tail gives it, so "residue matches" is "the FCS is right".
RESIDUE = 0x2144DF1C
FLAG_FCS_AT_END = 0x10
RADIOTAP = 127
_MAX_WORDS = 8


def crc_ok(buf: np.ndarray, first: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Return, per row, whether buf[first:end] is a frame followed by its correct 4-byte FCS."""
    if not len(first):
        return np.zeros(0, bool)
    if accel.AVAILABLE:
        return accel.crc32_many(buf, first, end) == RESIDUE
    mv = memoryview(buf)
    # One C-level pipeline, no Python frame per row: the per-call cost is what remains.
    crcs = np.fromiter(map(_crc32, map(mv.__getitem__, map(slice, first.tolist(), end.tolist()))),
                       dtype=np.uint32, count=len(first))
    return crcs == RESIDUE


def radiotap_fcs(buf: np.ndarray, offset: np.ndarray, caplen: np.ndarray, wirelen: np.ndarray,
                 linktype: np.ndarray, part: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Check the FCS of (the first `part` of the) radiotap records whose Flags field says one ends
    the frame.

    Returns (first, ok): where the 802.11 frame starts (-1 where nothing was checked) and whether its
    FCS is right. Flags is found the simple way (the first presence word's fields come first: TSFT,
    then Flags); the decoder uses a verdict only where its own decoding agrees on the frame's bytes.
    """
    if accel.AVAILABLE and part >= 1.0:
        return accel.radiotap_fcs(buf, offset, caplen, wirelen, linktype)
    n = len(offset)
    first = np.full(n, -1, np.int64)
    ok = np.zeros(n, bool)
    cand = np.flatnonzero((linktype == RADIOTAP) & (caplen >= wirelen) & (caplen >= 16))
    if not len(cand) or len(buf) < 8:
        return first, ok
    at = offset[cand]
    u32 = np.ndarray((len(buf) - 3,), dtype="<u4", buffer=buf, strides=(1,))
    it_len = (u32[at] >> np.uint32(16)).astype(np.int64)     # bytes 2-3: it_len
    w0 = u32[at + 4]
    fits = (it_len >= 8) & (it_len + 4 <= caplen[cand])   # header and FCS inside the record
    words = np.ones(len(cand), np.int64)
    ext = (w0 >> np.uint32(31)).astype(bool)
    for k in range(1, _MAX_WORDS):      # count presence words (bit 31: another word follows)
        if not ext.any():
            break
        more = ext & fits & (4 + 4 * (k + 1) <= it_len)
        words += more
        ext = more & (u32[np.where(more, at + 4 + 4 * k, at)] >> np.uint32(31)).astype(bool)
    flags_at = 4 + 4 * words
    tsft = (w0 & 1).astype(bool)
    flags_at = np.where(tsft, (flags_at + 7) // 8 * 8 + 8, flags_at)
    has = fits & ((w0 >> np.uint32(1)) & 1).astype(bool) & ~ext & (flags_at < it_len)
    flags = buf[np.where(has, at + flags_at, at)]
    fcs = has & ((flags & FLAG_FCS_AT_END) != 0)
    k = np.flatnonzero(fcs)
    k = k[:int(round(len(k) * part))]
    rows = cand[k]
    start = at[k] + it_len[k]
    first[rows] = start
    ok[rows] = crc_ok(buf, start, offset[rows] + caplen[rows])
    return first, ok
