"""The compiled TCP option walk (accel.tcp_options) against the numpy one it replaces: crafted captures
of TCP segments whose options are the usual layouts, cut by the snap length, malformed or random bytes,
read both ways, must give equal tables (option columns, SACK lists and malformed reasons) and counts."""
from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parsers.columnar import accel
from parsers.decode.ingest import IngestStats, read_capture

needs_accel = pytest.mark.skipif(not accel.AVAILABLE, reason="parsers.columnar._walk is not built")

OPTION_COLUMNS = ["tcp_hdr_len", "tcp_mss", "tcp_wscale", "tcp_sack_perm", "tcp_tsval", "tcp_tsecr",
                  "tcp_sack", "sport", "tcp_len"]

# option pieces a segment is made of: usual ones, odd lengths, and the malformed cases the walk names
PIECES = [b"\x01", b"\x00", b"\x01\x01", b"\x02\x04\x05\xb4", b"\x03\x03\x07", b"\x04\x02",
          b"\x08\x0a" + bytes(range(1, 9)), b"\x01\x01\x08\x0a" + bytes(range(9, 17)),
          b"\x05\x0a" + bytes(8), b"\x05\x12" + bytes(range(16)), b"\x05\x06\x00\x00\x00\x00",
          b"\x05\x02", b"\x1e\x03\x00", b"\x02\x03\x00", b"\x03\x04\x00\x00", b"\x08\x09" + bytes(7),
          b"\x04\x05\x00\x00\x00", b"\x07\x01", b"\x09\x28", b"\x06"]


def _segment(rng: random.Random) -> tuple[bytes, int]:
    """Return an Ethernet/IPv4/TCP frame and how many of its bytes are captured."""
    if rng.random() < 0.2:
        opts = bytes(rng.randrange(256) for _ in range(rng.randrange(41)))
    else:
        opts = b"".join(rng.choice(PIECES) for _ in range(rng.randrange(6)))[:40]
    hl_words = min(15, 5 + (len(opts) + 3) // 4) if rng.random() < 0.9 else rng.randrange(16)
    opts = opts.ljust(max(hl_words * 4 - 20, 0), b"\x00")[:max(hl_words * 4 - 20, 0)]
    payload = bytes(rng.randrange(4) * 10)
    tcp = struct.pack(">HHIIHHHH", 5000, 80, 1, 2, hl_words << 12 | 0x18, 1000, 0, 0) + opts + payload
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 1, 0, 64, 6, 0, b"\x0a\x00\x00\x01",
                     b"\x0a\x00\x00\x02")
    frame = b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + ip + tcp
    cut = len(frame) if rng.random() < 0.7 else rng.randrange(34 + 16, len(frame) + 1)
    return frame, cut


def _write_pcap(path, frames: list[tuple[bytes, int]]) -> None:
    with open(path, "wb") as fh:
        fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        fh.writelines(struct.pack("<IIII", 1_700_000_000 + i, 0, cut, len(frame)) + frame[:cut]
                      for i, (frame, cut) in enumerate(frames))


def _read(path, columns=None) -> tuple:
    st_ = IngestStats()
    df = read_capture(path, stats=st_, threads=1, columns=columns)
    d = st_.as_dict()
    d.pop("path")
    return df, d


@needs_accel
@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_same_tables_both_ways(tmp_path_factory, seed: int) -> None:
    rng = random.Random(seed)
    path = tmp_path_factory.mktemp("opts") / "tcp.pcap"
    _write_pcap(path, [_segment(rng) for _ in range(200)])
    for columns in (None, OPTION_COLUMNS):
        fast = _read(path, columns)
        accel.AVAILABLE = False
        try:
            slow = _read(path, columns)
        finally:
            accel.AVAILABLE = True
        assert fast[0].equals(slow[0], null_equal=True)
        assert fast[1] == slow[1]


@needs_accel
def test_findings_are_the_walks(tmp_path) -> None:
    """A few segments whose findings are known: the options found and the reasons given."""
    segs = [b"\x02\x04\x05\xb4\x04\x02\x08\x0a" + bytes(range(1, 9)) + b"\x01\x03\x03\x07",
            b"\x01\x01\x05\x0a\x00\x00\x00\x01\x00\x00\x00\x02",
            b"\x01\x01\x05\x06\x00\x00\x00\x00",                # SACK of no whole block: walk ends
            b"\x02\x01\x00\x00"]                                # length < 2
    frames = []
    for opts in segs:
        hl = (20 + len(opts)) // 4
        tcp = struct.pack(">HHIIHHHH", 1, 2, 3, 4, hl << 12 | 0x10, 5, 0, 0) + opts
        ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 1, 0, 64, 6, 0, bytes(4), bytes(4))
        frame = bytes(12) + b"\x08\x00" + ip + tcp
        frames.append((frame, len(frame)))
    path = tmp_path / "known.pcap"
    _write_pcap(path, frames)
    df = read_capture(path, threads=1)
    assert df["tcp_mss"].to_list() == [1460, None, None, None]
    assert df["tcp_wscale"].to_list() == [7, None, None, None]
    assert df["tcp_sack_perm"].to_list() == [True, None, None, None]
    assert df["tcp_tsval"].to_list() == [0x01020304, None, None, None]
    assert df["tcp_tsecr"].to_list() == [0x05060708, None, None, None]
    assert df["tcp_sack"].to_list()[1] == [[1, 2]]
    assert df["malformed"].to_list() == [None, None, "tcp: SACK option length is not 2 + 8n",
                                         "tcp: option length < 2"]


@needs_accel
def test_positions_outside_the_buffer_are_left_to_numpy() -> None:
    import numpy as np

    buf = np.zeros(10, np.uint8)
    one = np.array([0], np.int64)
    assert accel.tcp_options(buf, one, one + 8, one + 11) is None       # end past the buffer
    assert accel.tcp_options(buf, one - 1, one + 8, one + 8) is None    # before it
    got = accel.tcp_options(buf, one, one + 8, one + 8)
    assert got is not None and [int(a[0]) for a in got] == [-1, -1, -1, -1, 0, -1, 0, 0]
