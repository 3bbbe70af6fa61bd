"""The vectorized integer readers against int.from_bytes, at every width and near the buffer's end."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from parsers.columnar import gather


@settings(max_examples=200, deadline=None)
@given(data=st.binary(min_size=1, max_size=64), size=st.integers(1, 8), seed=st.integers(0, 2**32 - 1))
def test_reads_equal_int_from_bytes(data: bytes, size: int, seed: int) -> None:
    buf = np.frombuffer(data, dtype=np.uint8)
    rng = np.random.default_rng(seed)
    pos = rng.integers(-3, len(data) + 3, 20)
    le, be = gather.ule(buf, pos, size), gather.ube(buf, pos, size)   # must not raise anywhere
    assert le.shape == be.shape == pos.shape
    inside = (pos >= 0) & (pos + size <= len(data))
    for p, a, b in zip(pos[inside], le[inside], be[inside]):
        chunk = data[p:p + size]
        assert int(a) == int.from_bytes(chunk, "little")
        assert int(b) == int.from_bytes(chunk, "big")
    signed = gather.sle(buf, pos[inside], size)
    for p, s in zip(pos[inside], signed):
        assert int(s) == int.from_bytes(data[p:p + size], "little", signed=True)
