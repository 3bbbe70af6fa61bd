"""The compiled gather_ahead (parsers/columnar/_walk.c) against the numpy gathers it replaces: the same
bytes everywhere, records near and past the buffer's end included, and refusal of bad arguments."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parsers.columnar import accel, gather
from parsers.layers import radiotap
from parsers.layers.dot11 import WINDOW

needs_accel = pytest.mark.skipif(not accel.AVAILABLE, reason="parsers.columnar._walk is not built")


def _numpy_ahead(buf: np.ndarray, pos: np.ndarray, hw: int, nw: int) -> tuple[np.ndarray, ...]:
    head = gather.rows_bytes(buf, pos, hw)
    after = pos + (head[:, 2].astype(np.int64) | head[:, 3].astype(np.int64) << 8)
    return head, after, gather.rows_bytes(buf, after, nw)


@needs_accel
@settings(max_examples=300, deadline=None)
@given(data=st.binary(min_size=0, max_size=300), seed=st.integers(0, 2**32 - 1),
       widths=st.sampled_from([(64, 64), (4, 1), (8, 3), (64, 200)]))
def test_same_bytes_as_rows_bytes(data: bytes, seed: int, widths: tuple[int, int]) -> None:
    """Any buffer (empty, shorter than a row), any positions (before it, inside, at and past its end)."""
    buf = np.frombuffer(data, np.uint8)
    pos = np.random.default_rng(seed).integers(-8, len(data) + 80, 40).astype(np.int64)
    hw, nw = widths
    got = accel.gather_ahead(buf, pos, hw, nw)
    want = _numpy_ahead(buf, pos, hw, nw)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        assert np.array_equal(g, w)


@needs_accel
def test_radiotap_gather_ahead_same_both_ways(monkeypatch) -> None:
    """What the walk thread and decode_chunk hand the decoders is the same, compiled or not: crafted
    records with it_len past the buffer, a last record cut by its end, and a record of 3 bytes."""
    rng = np.random.default_rng(7)
    blob = bytearray(rng.integers(0, 256, 4000, dtype=np.uint8).tobytes())
    offsets = [0, 100, 900, 3990, 3997]
    for o, it_len in zip(offsets, (36, 0xFFFF, 18, 40, 12)):
        if o + 4 <= len(blob):
            blob[o + 2:o + 4] = it_len.to_bytes(2, "little")
    buf = np.frombuffer(bytes(blob), np.uint8)
    off = np.array(offsets, np.int64)
    lt = np.full(len(off), radiotap.LINKTYPE, np.int64)
    fast = radiotap.gather_ahead(buf, off, lt, WINDOW)
    monkeypatch.setattr(accel, "AVAILABLE", False)
    slow = radiotap.gather_ahead(buf, off, lt, WINDOW)
    assert fast.keys() == slow.keys() == {"radiotap", "dot11"}
    for k in fast:
        for a, b in zip(fast[k], slow[k]):
            assert np.array_equal(a, b), k
    assert radiotap.gather_ahead(buf, off, np.ones(len(off), np.int64), WINDOW) == {}


@needs_accel
def test_refuses_bad_arguments() -> None:
    buf = np.zeros(100, np.uint8)
    with pytest.raises(ValueError):
        accel._walk.gather_ahead(buf, np.zeros(3, np.int32), 64, 64)   # not int64 items
    with pytest.raises(ValueError):
        accel._walk.gather_ahead(buf, np.zeros(3, np.int64).tobytes()[:-1], 64, 64)
    for hw, nw in ((3, 64), (64, 0), (64, 5000)):
        with pytest.raises(ValueError):
            accel.gather_ahead(buf, np.zeros(3, np.int64), hw, nw)
    head, after, nxt = accel.gather_ahead(buf, np.zeros(0, np.int64), 64, 64)
    assert head.shape == (0, 64) and after.shape == (0,) and nxt.shape == (0, 64)
