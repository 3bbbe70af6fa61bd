"""The walk helper process: the same rows and counts as an in-process walk, whatever the helper does."""
from __future__ import annotations

import os

import pytest

from parsers import ingest, walkproc
from parsers.ingest import IngestStats, read_capture

from .conftest import capture_files, corpus_or_skip, deadline

# Files with many records (so that several chunks come from the helper), radiotap with FCS first,
# then pcapng: radiotap, several interfaces, and an Ethernet pcap.
FILES = ["radiotap/wireshark__wpa-Induction.pcap", "radiotap/fragattacks__ping_I_F_BE_AE-fromap.pcapng",
         "pcapng/zeek__pcapng-multi-interface.pcapng", "wired/zeek__tcp_timestamp.pcap"]

# Helpers that misbehave in every way the caller must survive.
BROKEN = {
    "exits": "import sys; sys.exit(3)",
    "garbage": "import sys; sys.stdout.buffer.write(bytes([5, 0, 0, 0, 0, 0, 0, 0]) + b'hello'); sys.stdout.flush()",
    "dies midway": ("import os, sys; sys.path.insert(0, sys.argv[1]); import parsers.walkproc as w; s = w.Sender.send\n"
                    "n = [0]\n"
                    "def f(self, obj):\n    n[0] += 1\n    if n[0] > 2: os._exit(1)\n    return s(self, obj)\n"
                    "w.Sender.send = f; w.serve(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))"),
    "lies": ("import sys; sys.path.insert(0, sys.argv[1]); import parsers.walkproc as w; s = w.Sender.send\n"
             "def f(self, obj):\n    k, m = obj\n"
             "    if k == 'chunk': m['offset'] = w._pack(w._unpack(m['offset']) + 10**9)\n    return s(self, obj)\n"
             "w.Sender.send = f; w.serve(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))"),
    "hangs": "import time; time.sleep(60)",
}


@pytest.fixture
def forced(monkeypatch):
    """Use the helper for any file, from the second tiny chunk on."""
    monkeypatch.setattr(ingest, "_use_helper", lambda cap, d, t, w: w and t > 1 and not cap.gzipped)
    monkeypatch.setattr(ingest, "HERE_BYTES", 1)
    monkeypatch.setattr(walkproc, "STALL_SECONDS", 2.0)


def _read(path: str, threads: int) -> tuple:
    st = IngestStats()
    df = read_capture(path, stats=st, threads=threads, chunk_bytes=2048)
    d = st.as_dict()
    d.pop("path")
    return df, d


def _paths() -> list[str]:
    root = corpus_or_skip()
    have = set(capture_files())
    assert set(FILES) <= have, set(FILES) - have
    return [os.path.join(root, f) for f in FILES]


@pytest.mark.skipif(os.name != "posix", reason="the helper runs on POSIX systems only")
def test_helper_gives_the_same_rows(forced) -> None:
    for path in _paths():
        here, st_here = _read(path, 1)
        helped, st_helped = _read(path, 2)
        assert helped.equals(here, null_equal=True), path
        assert st_helped == st_here, path


@pytest.mark.skipif(os.name != "posix", reason="the helper runs on POSIX systems only")
@pytest.mark.parametrize("how", sorted(BROKEN))
def test_broken_helper_falls_back(forced, monkeypatch, how: str) -> None:
    monkeypatch.setattr(walkproc, "_BOOT", BROKEN[how])
    for path in _paths()[:1]:
        here, st_here = _read(path, 1)
        with deadline(30):
            helped, st_helped = _read(path, 2)
        assert helped.equals(here, null_equal=True)
        assert st_helped == st_here


def test_pack_round_trip() -> None:
    import numpy as np

    for a in (np.full(5, 7), np.arange(3, 9), np.array([1, 5, -2]), np.array([2**40, 0]), np.zeros(0)):
        a = a.astype(np.int64)
        b = walkproc._unpack(walkproc._pack(a))
        assert b.dtype == np.int64 and (b == a).all()
