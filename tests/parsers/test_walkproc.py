"""The walk helper process: the same rows and counts as an in-process walk, whatever the helper does."""
from __future__ import annotations

import os

import pytest

from parsers.decode import ingest
from parsers.decode import walkproc
from parsers.decode.ingest import IngestStats, read_capture

from tests.helpers.common import capture_files, corpus_or_skip, deadline

# Files with many records (so that several chunks come from the helper), radiotap with FCS first,
# then pcapng: radiotap, several interfaces, and an Ethernet pcap.
FILES = ["radiotap/wireshark__wpa-Induction.pcap", "radiotap/fragattacks__ping_I_F_BE_AE-fromap.pcapng",
         "pcapng/zeek__pcapng-multi-interface.pcapng", "wired/zeek__tcp_timestamp.pcap"]

# Helpers that misbehave in every way the caller must survive.
BROKEN = {
    "exits": "import sys; sys.exit(3)",
    "garbage": "import sys; sys.stdout.buffer.write(bytes([5, 0, 0, 0, 0, 0, 0, 0]) + b'hello'); sys.stdout.flush()",
    "dies midway": ("import os, sys; sys.path.insert(0, sys.argv[1]); import parsers.decode.walkproc as w; s = w.Sender.send\n"
                    "n = [0]\n"
                    "def f(self, obj):\n    n[0] += 1\n    if n[0] > 2: os._exit(1)\n    return s(self, obj)\n"
                    "w.Sender.send = f; w.serve(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))"),
    "lies": ("import sys; sys.path.insert(0, sys.argv[1]); import parsers.decode.walkproc as w; s = w.Sender.send\n"
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


@pytest.mark.skipif(os.name != "posix", reason="the helper runs on POSIX systems only")
def test_helper_without_fcs_checks_gives_the_same_projected_rows(forced, monkeypatch) -> None:
    """A read that does not ask for fcs_bad starts the helper with no FCS checks: same rows, and
    the helper's chunks then carry no verdicts."""
    started = []
    real = walkproc.WalkHelper.start.__func__

    def start(cls, *a, **k):
        started.append(k.get("fcs", True))
        return real(cls, *a, **k)

    monkeypatch.setattr(walkproc.WalkHelper, "start", classmethod(start))
    path = _paths()[0]
    cols = ["wlan_seq", "wlan_ta", "ip_dst", "dport"]
    here = read_capture(path, threads=1, chunk_bytes=2048, columns=cols)
    helped = read_capture(path, threads=2, chunk_bytes=2048, columns=cols)
    assert started == [False]
    assert helped.equals(here, null_equal=True)
    with_fcs = read_capture(path, threads=2, chunk_bytes=2048, columns=cols + ["fcs_bad"])
    assert started == [False, True]
    assert with_fcs.select(here.columns).equals(here, null_equal=True)
    assert with_fcs.get_column("fcs_bad").sum() > 0       # this file has frames with a bad FCS


@pytest.mark.parametrize("psi, loadavg, cpus, taken", [
    ("some avg10=97.70 avg60=97.08 avg300=93.04 total=1\n", "0.1 0.1 0.1 1/200 9", 2, True),
    ("some avg10=0.00 avg60=0.00 avg300=0.00 total=1\n", "0.1 0.1 0.1 1/200 9", 2, False),
    ("some avg10=0.00 avg60=0.00 avg300=0.00 total=1\n", "2.0 2.0 2.0 2/200 9", 2, True),
    (None, "9.0 9.0 9.0 4/200 9", 4, True),
    (None, "9.0 9.0 9.0 3/200 9", 4, False),
    (None, None, 2, False),
])
def test_helper_left_out_when_the_cpus_are_taken(monkeypatch, psi, loadavg, cpus, taken) -> None:
    """A helper process only pays with a free core: busy CPUs (pressure, or other runnable tasks)
    keep the walk in this process."""
    import io

    def fake_open(name, *a, **k):
        text = {"/proc/pressure/cpu": psi, "/proc/loadavg": loadavg}.get(name)
        if text is None:
            raise OSError(name)
        return io.StringIO(text)

    monkeypatch.setattr(ingest, "open", fake_open, raising=False)
    monkeypatch.setattr(ingest.os, "cpu_count", lambda: cpus)
    assert ingest._cpus_taken() is taken


@pytest.mark.parametrize("taken", [True, False])
def test_one_decoding_thread_when_the_cpus_are_taken(monkeypatch, taken: bool) -> None:
    seen = []
    real = ingest._decoded

    def spy(chunks, decoder, threads, proj, **kw):
        seen.append(threads)
        return real(chunks, decoder, threads, proj, **kw)

    monkeypatch.setattr(ingest, "_decoded", spy)
    monkeypatch.setattr(ingest, "_cpus_taken", lambda: taken)
    monkeypatch.setattr(ingest, "BUSY_CHECK_BYTES", 1)
    path = _paths()[3]          # Ethernet: never a helper
    busy = read_capture(path, threads=2, chunk_bytes=2048)
    assert seen == [1 if taken else 2]
    assert busy.equals(read_capture(path, threads=1, chunk_bytes=2048), null_equal=True)
