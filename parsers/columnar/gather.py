"""Vectorized readers: integers gathered from a byte array at per-row absolute offsets.

Callers check bounds (``pos + size <= end``) before reading; positions past the buffer are clipped
so that a bad offset can never raise, and the caller masks those rows out.
"""
from __future__ import annotations

import numpy as np

_OFFS = {k: np.arange(k, dtype=np.int64) for k in range(1, 9)}
_READ_WIDTH = {1: 1, 2: 2, 3: 4, 4: 4, 5: 8, 6: 8, 7: 8, 8: 8}    # the integer read for `size` bytes


def _bytes(buf: np.ndarray, pos: np.ndarray, size: int, width: int, pad_front: bool) -> np.ndarray:
    """Return an (n, width) uint8 matrix: `size` bytes at each position, zero-padded to width."""
    p = np.asarray(pos, dtype=np.int64)
    n = len(p)
    out = np.zeros((n, width), dtype=np.uint8)
    if n == 0 or len(buf) == 0:
        return out
    # One clip on the start position and one gather: far cheaper than a gather per byte.
    start = np.clip(p, 0, max(len(buf) - size, 0))
    idx = start[:, None] + _OFFS[size][None, :]
    np.minimum(idx, len(buf) - 1, out=idx)
    if pad_front:
        out[:, width - size:] = buf[idx]
    else:
        out[:, :size] = buf[idx]
    return out


def _strided(buf: np.ndarray, pos: np.ndarray, size: int, order: str) -> np.ndarray | None:
    """Return the integers by one gather from an overlapping view (element i = bytes i..i+w-1)."""
    width = _READ_WIDTH[size]
    nview = len(buf) - width + 1
    if nview <= 0 or not buf.flags.c_contiguous:
        return None
    view = np.ndarray((nview,), dtype=f"{order}u{width}", buffer=buf, strides=(1,))
    p = np.asarray(pos, dtype=np.int64)
    tail = p > nview - 1
    vals = _narrow(view[np.clip(p, 0, nview - 1)].astype(np.uint64), size, width, order)
    if tail.any():  # reads ending in the last bytes of the buffer: the view stops short of them
        m = _bytes(buf, p[tail], size, width, pad_front=order == ">")
        vals[tail] = m.view(f"{order}u{width}").reshape(-1).astype(np.uint64)
    return vals


def u8(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Return the byte at each position as uint64."""
    p = np.asarray(pos, dtype=np.int64)
    if len(buf) == 0:
        return np.zeros(len(p), dtype=np.uint64)
    return buf[np.clip(p, 0, len(buf) - 1)].astype(np.uint64)


def uint(buf: np.ndarray, pos: np.ndarray, size: int, order: str) -> np.ndarray:
    """Return the unsigned integer of `size` bytes at each position, in byte order `order` ("<" or ">")."""
    if size == 1:
        return u8(buf, pos)
    fast = _strided(buf, pos, size, order)
    if fast is not None:
        return fast
    width = _READ_WIDTH[size]
    m = _bytes(buf, pos, size, width, pad_front=order == ">")
    return m.view(f"{order}u{width}").reshape(-1).astype(np.uint64)


def ule(buf: np.ndarray, pos: np.ndarray, size: int) -> np.ndarray:
    """Return the little-endian unsigned integer of `size` bytes at each position."""
    return uint(buf, pos, size, "<")


def ube(buf: np.ndarray, pos: np.ndarray, size: int) -> np.ndarray:
    """Return the big-endian unsigned integer of `size` bytes at each position."""
    return uint(buf, pos, size, ">")


def sle(buf: np.ndarray, pos: np.ndarray, size: int) -> np.ndarray:
    """Return the little-endian signed integer of `size` bytes at each position."""
    v = ule(buf, pos, size).astype(np.int64)  # wraps for size 8: already two's complement
    if size == 8:
        return v
    bits = 8 * size
    return np.where(v >= (1 << (bits - 1)), v - (1 << bits), v)


def fits(pos: np.ndarray, size: int, end: np.ndarray) -> np.ndarray:
    """Return a mask: the `size` bytes at pos lie before end."""
    return pos + size <= end


def window(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """Return an (n, width) uint8 matrix of the bytes at each position (zero past the buffer)."""
    p = np.asarray(pos, dtype=np.int64)[:, None] + np.arange(width, dtype=np.int64)[None, :]
    ok = p < len(buf)
    out = buf[np.clip(p, 0, max(len(buf) - 1, 0))] if len(buf) else np.zeros(p.shape, np.uint8)
    return np.where(ok, out, 0).astype(np.uint8)


def rows_bytes(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """Return an (n, width) uint8 matrix of the bytes at each position by one gather (zero past the
    buffer's end)."""
    p = np.asarray(pos, dtype=np.int64)
    n = len(p)
    nview = len(buf) - width + 1
    if n == 0 or nview <= 0 or not buf.flags.c_contiguous:
        return window(buf, p, width) if n else np.zeros((0, width), np.uint8)
    view = np.ndarray((nview,), dtype=f"V{width}", buffer=buf, strides=(1,))
    inside = (p >= 0) & (p < nview)
    if inside.all():
        return view[p].view(np.uint8).reshape(n, width)
    # only the rows near the end go byte by byte (zero-padded): a buffer's last frame is often one,
    # and gathering every row that way cost 10x the one gather
    out = np.empty((n, width), np.uint8)
    k = np.flatnonzero(inside)
    out[k] = view[p[k]].view(np.uint8).reshape(-1, width)
    far = np.flatnonzero(~inside)
    out[far] = window(buf, p[far], width)
    return out


class Window:
    """The first `width` bytes at each row's position, gathered once; fields are then read from the
    copy at fixed or per-row offsets (contiguous and cache-resident: far cheaper than a gather from the
    capture per field). A read that would run past the copy is served from the buffer instead."""

    def __init__(self, buf: np.ndarray, pos: np.ndarray, width: int, m: np.ndarray | None = None,
                 sel: np.ndarray | None = None):
        self.buf, self.pos, self.width = buf, np.asarray(pos, dtype=np.int64), width
        self.m = rows_bytes(buf, self.pos, width) if m is None else m
        self.sel = sel      # the matrix row of each of our rows (None: row i is matrix row i)

    def __len__(self) -> int:
        return len(self.pos)

    def take(self, k) -> "Window":
        """Return the window of the rows k (a slice or an index array), sharing the copied bytes."""
        if isinstance(k, slice) and k == slice(None):
            return self
        rows = np.arange(len(self.m))[k] if self.sel is None else self.sel[k]
        return Window(self.buf, self.pos[k], self.width, self.m, rows)

    def u8(self, off) -> np.ndarray:
        """Return the byte at offset off (an int or one per row) of every row, as uint64."""
        return self._read(off, 1, "<")

    def ule(self, off, size: int) -> np.ndarray:
        """Return the little-endian unsigned integer of `size` bytes at offset off, as uint64."""
        return self._read(off, size, "<")

    def ube(self, off, size: int) -> np.ndarray:
        """Return the big-endian unsigned integer of `size` bytes at offset off, as uint64."""
        return self._read(off, size, ">")

    def _read(self, off, size: int, order: str) -> np.ndarray:
        n = len(self.pos)
        wr = _READ_WIDTH[size]
        if n == 0:
            return np.zeros(0, np.uint64)
        if not isinstance(off, np.ndarray):
            off = int(off)
            if 0 <= off and off + wr <= self.width:
                raw = np.ndarray((len(self.m),), dtype=f"{order}u{wr}", buffer=self.m, offset=off,
                                 strides=(self.width,))
                if self.sel is not None:
                    raw = raw[self.sel]
                return _narrow(raw.astype(np.uint64), size, wr, order)
            return uint(self.buf, self.pos + off, size, order)
        off = off.astype(np.int64, copy=False)
        lo, hi = int(off.min()), int(off.max())
        if lo == hi:
            return self._read(lo, size, order)
        flat = self.m.reshape(-1)
        if len(flat) < wr:
            return uint(self.buf, self.pos + off, size, order)
        view = np.ndarray((len(flat) - wr + 1,), dtype=f"{order}u{wr}", buffer=flat, strides=(1,))
        inside = (off >= 0) & (off + wr <= self.width)
        base = np.arange(n, dtype=np.int64) if self.sel is None else self.sel
        at = np.where(inside, base * self.width + off, 0)
        vals = _narrow(view[at].astype(np.uint64), size, wr, order)
        if not inside.all():
            k = np.flatnonzero(~inside)
            vals[k] = uint(self.buf, self.pos[k] + off[k], size, order)
        return vals


def _narrow(vals: np.ndarray, size: int, width: int, order: str) -> np.ndarray:
    """Return `size`-byte integers from `width`-byte reads that start at the same byte."""
    if width == size:
        return vals
    if order == ">":
        vals >>= np.uint64(8 * (width - size))
    else:
        vals &= np.uint64((1 << (8 * size)) - 1)
    return vals


def gathered_ahead(ahead: dict | None, name: str, rows: np.ndarray, pos: np.ndarray,
                   width: int) -> np.ndarray | None:
    """Return rows_bytes(buf, pos, width) for these chunk rows if it was gathered ahead under `name`
    at the same positions (see RecordChunk.ahead), else None."""
    got = ahead.get(name) if ahead else None
    if got is None or got[1].shape[1] != width or not len(rows):
        return None
    at, m = got
    whole = len(rows) == len(at) and rows[0] == 0 and rows[-1] == len(at) - 1
    if not np.array_equal(at if whole else at[rows], pos):
        return None
    return m if whole else m[rows]
