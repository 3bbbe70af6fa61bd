"""The compiled record walks, batched CRC-32s and decryption helpers (parsers/columnar/_walk.c), when
they are there.

`AVAILABLE` says whether they are used. Setting XLAYER_PURE_PYTHON=1 in the environment turns them
off (tests compare both ways). Each function returns exactly what the pure-Python loop it replaces
returns; callers keep that loop for when the module is absent (it is optional at install).
"""
from __future__ import annotations

import ctypes
import os

import numpy as np

try:
    from parsers.columnar import _walk
except ImportError:  # pragma: no cover - no compiler at install time
    _walk = None

AVAILABLE = _walk is not None and os.environ.get("XLAYER_PURE_PYTHON", "") in ("", "0")


def _crc_address() -> int:
    """Return the address of zlib-ng's CRC-32 function (0: use _walk's own).

    zlib-ng's (carry-less multiplication, ~10 GB/s here) is exported by the zlib_ng wheel's module;
    _walk's own table-driven one does ~2 GB/s.
    """
    try:
        from zlib_ng import zlib_ng
        return ctypes.cast(ctypes.CDLL(zlib_ng.__file__).zng_crc32, ctypes.c_void_p).value or 0
    except (ImportError, OSError, AttributeError):
        return 0


_CRC = _crc_address() if AVAILABLE else 0


def pcap_walk(buf, pos: int, lim: int, swap: bool, lengths: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Return the offsets (int64) of the pcap record headers from pos while they start before lim,
    those headers ((n, 16) uint8, as in the file) and the position after the last; `lengths` picks
    the caplen field (0 first, 1 second, 2 smaller)."""
    raw, heads, nxt = _walk.pcap_walk(buf, pos, lim, swap, lengths)
    return np.frombuffer(raw, np.int64), np.frombuffer(heads, np.uint8).reshape(-1, 16), nxt


def pcapng_walk(buf, pos: int, lim: int, swap: bool) -> tuple[np.ndarray, int]:
    """Return the offsets (int64) of consecutive packet blocks from pos while they start before lim,
    and the position of the first block that is not one (or lim)."""
    raw, nxt = _walk.pcapng_walk(buf, pos, lim, swap)
    return np.frombuffer(raw, np.int64), nxt


def crc32_many(buf, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Return the CRC-32 of buf[starts[i]:ends[i]] for every i (uint32), with the GIL released."""
    s = np.ascontiguousarray(starts, dtype=np.int64)
    e = np.ascontiguousarray(ends, dtype=np.int64)
    return np.frombuffer(_walk.crc32_many(buf, s, e, _CRC), np.uint32)


def radiotap_fcs(buf, offset: np.ndarray, caplen: np.ndarray, wirelen: np.ndarray,
                 linktype: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return what parsers.layers.fcs.radiotap_fcs returns (where each checked frame starts, -1 if none,
    and whether its FCS is right), from one pass in C with the GIL released."""
    args = [np.ascontiguousarray(a, dtype=np.int64) for a in (offset, caplen, wirelen, linktype)]
    first, ok = _walk.radiotap_fcs(buf, *args, _CRC)
    return np.frombuffer(first, np.int64), np.frombuffer(ok, np.bool_)


def dontneed(buf, start: int, length: int) -> None:
    """Drop buf[start:start + length] (page-aligned, in a memory map) from the resident set, with
    the GIL released (mmap.madvise holds it)."""
    _walk.dontneed(buf, start, length)


def gather_ahead(buf, offset: np.ndarray, head_width: int, next_width: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (head (n, head_width) uint8, after int64, next (n, next_width) uint8): the bytes at each
    offset, offset + the u16 LE at head bytes 2-3, and the bytes there, as parsers.columnar.gather.rows_bytes
    reads them (zero past buf's end), from one pass in C with the GIL released."""
    head, after, nxt = _walk.gather_ahead(buf, _i64(offset), head_width, next_width)
    n = len(offset)
    return (np.frombuffer(head, np.uint8).reshape(n, head_width), np.frombuffer(after, np.int64),
            np.frombuffer(nxt, np.uint8).reshape(n, next_width))


def tcp_options(buf, pos: np.ndarray, hend: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, ...] | None:
    """Return (tsval, tsecr, mss, wscale, sack_perm, sack_pos, sack_cnt, reason) of the TCP option walk
    of each row (see _walk.tcp_options; int64, -1 where absent; sack_perm bool; reason int8 codes, 0
    none), from one pass in C with the GIL released; None if a position lies outside buf."""
    got = _walk.tcp_options(buf, _i64(pos), _i64(hend), _i64(end))
    if got is None:
        return None
    kinds = (np.int64,) * 4 + (np.bool_, np.int64, np.int64, np.int8)
    return tuple(np.frombuffer(b, t) for b, t in zip(got, kinds))


def _i64(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


def ctr_blocks(prefix: np.ndarray, width: int, first: np.ndarray, nb: np.ndarray) -> bytes:
    """Return the counter blocks of every frame one after another: nb[i] blocks of its prefix (a row of
    the (n, 16 - width) uint8 prefix) and a big-endian counter of `width` bytes from first[i]."""
    return _walk.ctr_blocks(np.ascontiguousarray(prefix, dtype=np.uint8), width, _i64(first), _i64(nb))


def ctr_xor(buf, at: np.ndarray, plen: np.ndarray, stream: bytes, dest: np.ndarray, dest_row: np.ndarray) -> None:
    """Write buf[at[i]:at[i]+plen[i]] XOR its rows of stream to dest ((rows, 16) uint8, C-contiguous)
    from row dest_row[i], zero past plen[i] in the last row (the GIL released meanwhile)."""
    _walk.ctr_xor(buf, _i64(at), _i64(plen), stream, dest, _i64(dest_row))


def put_headers(buf, s: np.ndarray, hdr: np.ndarray, dest: np.ndarray, end: np.ndarray) -> None:
    """Copy the hdr[i] bytes at buf[s[i]] to dest (flat uint8, C-contiguous) ending at end[i], the
    Protected bit of each cleared."""
    _walk.put_headers(buf, _i64(s), _i64(hdr), dest, _i64(end))


def dot11_locate(buf, offset: np.ndarray, caplen: np.ndarray, wirelen: np.ndarray, linktype: np.ndarray,
                 others) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return (candidate, start, end, length on the air, found) of every record, as
    parsers.decode.decrypt.candidates and locate give them (`others`: the 802.11 link types other
    than raw 802.11 and radiotap), from one pass in C with the GIL released."""
    cand, start, end, wire, found = _walk.dot11_locate(buf, _i64(offset), _i64(caplen), _i64(wirelen),
                                                       _i64(linktype), _i64(list(others)))
    return (np.frombuffer(cand, np.bool_), np.frombuffer(start, np.int64), np.frombuffer(end, np.int64),
            np.frombuffer(wire, np.int64), np.frombuffer(found, np.bool_))


def protected_fields(buf, s: np.ndarray, head_width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (head (n, head_width) uint8, fields (8, n) int64, nonce (n, 13) uint8) of the protected
    frames starting at s: see _walk.protected_fields for the fields' order."""
    head, fields, nonce = _walk.protected_fields(buf, _i64(s), head_width)
    n = len(s)
    return (np.frombuffer(head, np.uint8).reshape(n, head_width), np.frombuffer(fields, np.int64).reshape(8, n),
            np.frombuffer(nonce, np.uint8).reshape(n, 13))
