"""Vectorized readers: integers gathered from a byte array at per-row absolute offsets.

Callers check bounds (``pos + size <= end``) before reading; positions past the buffer are clipped
so that a bad offset can never raise, and the caller masks those rows out.
"""
from __future__ import annotations

import numpy as np


def _at(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    p = np.asarray(pos, dtype=np.int64)
    if len(buf) == 0:
        return np.zeros(len(p), dtype=np.uint64)
    return buf[np.clip(p, 0, len(buf) - 1)].astype(np.uint64)


def u8(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Return the byte at each position as uint64."""
    return _at(buf, pos)


def ule(buf: np.ndarray, pos: np.ndarray, size: int) -> np.ndarray:
    """Return the little-endian unsigned integer of `size` bytes at each position."""
    out = _at(buf, pos)
    for k in range(1, size):
        out |= _at(buf, pos + k) << np.uint64(8 * k)
    return out


def ube(buf: np.ndarray, pos: np.ndarray, size: int) -> np.ndarray:
    """Return the big-endian unsigned integer of `size` bytes at each position."""
    out = _at(buf, pos)
    for k in range(1, size):
        out = (out << np.uint64(8)) | _at(buf, pos + k)
    return out


def sle(buf: np.ndarray, pos: np.ndarray, size: int) -> np.ndarray:
    """Return the little-endian signed integer of `size` bytes at each position."""
    v = ule(buf, pos, size).astype(np.int64)
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
