"""The compiled walks and CRCs (parsers/_walk.c): the same tables and counts as the pure-Python loops,
on every corpus capture and on hostile records, and bounds checks that refuse what lies outside."""
from __future__ import annotations

import os
import random
import zlib

import numpy as np
import pytest

from parsers.columnar import accel
from parsers.layers import fcs
from parsers.decode.ingest import IngestStats, read_capture

from tests.helpers.common import capture_files, corpus_or_skip

needs_accel = pytest.mark.skipif(not accel.AVAILABLE, reason="parsers.columnar._walk is not built (no C compiler at install)")


def test_built_in_ci() -> None:
    """CI installs with a compiler: the fast path under test there is the compiled one."""
    if not os.environ.get("CI"):
        pytest.skip("only checked in CI (CI=true)")
    assert accel.AVAILABLE, "parsers.columnar._walk did not build: pip install -e . needs a C compiler"


def _read(path: str, chunk_bytes: int, threads: int = 1) -> tuple | str:
    """Return (table, counts) of a read, or the refusal as text (a refused file must be refused alike)."""
    st = IngestStats()
    try:
        df = read_capture(path, stats=st, threads=threads, chunk_bytes=chunk_bytes)
    except Exception as exc:  # noqa: BLE001
        return repr(exc)
    d = st.as_dict()
    d.pop("path")
    return df, d


def _assert_same(a: tuple | str, b: tuple | str, rel: str) -> None:
    if isinstance(a, str) or isinstance(b, str):
        assert a == b, rel
        return
    assert a[0].equals(b[0], null_equal=True), rel
    assert a[1] == b[1], rel


@needs_accel
@pytest.mark.parametrize("chunk_bytes", [1 << 20, 700])
def test_same_tables_as_python_loops(monkeypatch, chunk_bytes: int) -> None:
    """Every corpus capture, malformed ones included: equal rows and equal counts both ways (small
    chunks too, so that walks stop and resume at many chunk borders)."""
    root = corpus_or_skip()
    files = capture_files()
    assert len(files) > 150
    for rel in files:
        path = str(root / rel)
        fast = _read(path, chunk_bytes)
        monkeypatch.setattr(accel, "AVAILABLE", False)
        slow = _read(path, chunk_bytes)
        monkeypatch.setattr(accel, "AVAILABLE", True)
        _assert_same(fast, slow, rel)


@needs_accel
def test_crc32_many_matches_zlib() -> None:
    rng = random.Random(7)
    buf = np.frombuffer(rng.randbytes(1 << 16), np.uint8)
    starts = np.array([rng.randrange(0, 1 << 16) for _ in range(2000)] + [0, 5, 1 << 16], np.int64)
    ends = np.minimum(starts + np.array([rng.randrange(0, 3000) for _ in range(2000)] + [1 << 16, 5, 1 << 16]),
                      1 << 16)
    got = accel.crc32_many(buf, starts, ends)
    want = [zlib.crc32(buf[s:e].tobytes()) for s, e in zip(starts.tolist(), ends.tolist())]
    assert got.tolist() == want
    from parsers.columnar import _walk    # the built-in table CRC, used where no library one is found
    own = np.frombuffer(_walk.crc32_many(buf, starts, ends, 0), np.uint32)
    assert own.tolist() == want


@needs_accel
def test_fcs_verdicts_both_ways(monkeypatch) -> None:
    """crc_ok says the same with and without the compiled CRC, for right and wrong FCSs."""
    rng = random.Random(3)
    frames = []
    for i in range(300):
        body = rng.randbytes(rng.randrange(1, 1600))
        good = zlib.crc32(body).to_bytes(4, "little")
        frames.append(body + (good if i % 3 else bytes(4)))
    blob = b"".join(frames)
    buf = np.frombuffer(blob, np.uint8)
    lens = np.array([len(f) for f in frames], np.int64)
    ends = np.cumsum(lens)
    starts = ends - lens
    fast = fcs.crc_ok(buf, starts, ends)
    monkeypatch.setattr(accel, "AVAILABLE", False)
    slow = fcs.crc_ok(buf, starts, ends)
    assert fast.tolist() == slow.tolist() == [bool(i % 3) for i in range(300)]


@needs_accel
@pytest.mark.parametrize("call", [
    lambda w, b: w.pcap_walk(b, 0, len(b) - 14, False, 0),       # a header would cross the end
    lambda w, b: w.pcap_walk(b, -1, 10, False, 0),
    lambda w, b: w.pcap_walk(b, 0, 10, False, 3),
    lambda w, b: w.pcapng_walk(b, 0, len(b) - 6, False),
    lambda w, b: w.crc32_many(b, np.array([0], np.int64), np.array([len(b) + 1], np.int64), 0),
    lambda w, b: w.crc32_many(b, np.array([5], np.int64), np.array([4], np.int64), 0),
    lambda w, b: w.crc32_many(b, np.array([0, 1], np.int64), np.array([1], np.int64), 0),
])
def test_out_of_bounds_refused(call) -> None:
    from parsers.columnar import _walk
    with pytest.raises(ValueError):
        call(_walk, bytes(100))


@needs_accel
def test_hostile_lengths_walk_off_the_end() -> None:
    """A record length of 0xffffffff ends the walk past the buffer, having read nothing there."""
    rec = (b"\0" * 8 + b"\xff\xff\xff\xff" * 2)
    buf = rec * 4
    offs, heads, nxt = accel.pcap_walk(buf, 0, len(buf) - 15, False, 0)
    assert offs.tolist() == [0] and heads.tobytes() == rec and nxt == 16 + 0xFFFFFFFF
    buf = (b"\x06\0\0\0" + (0xFFFFFFFC).to_bytes(4, "little")) * 4
    offs, nxt = accel.pcapng_walk(buf, 0, len(buf) - 7, False)
    assert offs.tolist() == [0] and nxt == 0xFFFFFFFC


@needs_accel
def test_walk_thread_gives_the_same_tables(monkeypatch) -> None:
    """Walked and FCS-checked by the thread one chunk ahead (every file, small chunks): the same rows
    and counts as walking and checking in the decoding thread."""
    from parsers.decode import ingest

    monkeypatch.setattr(ingest, "PREP_MIN_BYTES", 0)
    root = corpus_or_skip()
    for rel in capture_files():
        path = str(root / rel)
        _assert_same(_read(path, 4096, threads=2), _read(path, 4096), rel)


@needs_accel
def test_walk_thread_stops_and_reports(monkeypatch) -> None:
    """A reader left after its first table stops the thread; an error in the thread reaches the reader."""
    import threading

    from parsers.decode import ingest
    from parsers.decode.ingest import iter_tables

    monkeypatch.setattr(ingest, "PREP_MIN_BYTES", 0)
    path = str(corpus_or_skip() / "radiotap/wireshark__wpa-Induction.pcap")
    it = iter_tables(path, threads=2, chunk_bytes=2048)
    next(it)
    assert any(t.name == "xlayer-walk" for t in threading.enumerate())
    it.close()
    assert not any(t.name == "xlayer-walk" for t in threading.enumerate())

    def broken(*args, **kwargs):
        raise OSError("disk gone")

    monkeypatch.setattr(ingest, "radiotap_fcs", broken)
    with pytest.raises(OSError, match="disk gone"):
        list(iter_tables(path, threads=2, chunk_bytes=2048))
    assert not any(t.name == "xlayer-walk" for t in threading.enumerate())


def test_small_first_chunk_same_records() -> None:
    """chunks(first_bytes=...) cuts a smaller first chunk and hands out the same records."""
    from parsers.formats.containers import open_capture

    path = str(corpus_or_skip() / "radiotap/wireshark__wpa-Induction.pcap")
    got = []
    for first in (None, 300):
        with open_capture(path, chunk_bytes=8192) as cap:
            parts = list(cap.chunks(first_bytes=first))
        got.append((parts[0].offset.size, np.concatenate([p.offset for p in parts]).tolist(),
                    np.concatenate([p.frame for p in parts]).tolist()))
    assert got[1][0] < got[0][0]
    assert got[1][1:] == got[0][1:]


@needs_accel
def test_radiotap_fcs_same_both_ways(monkeypatch) -> None:
    """The compiled radiotap_fcs finds the same frames and verdicts as the numpy one: on every corpus
    capture's records, and on the same records with random bytes overwritten (hostile headers)."""
    from parsers.formats.containers import open_capture

    root = corpus_or_skip()
    rng = np.random.default_rng(5)
    checked = 0
    for rel in capture_files():
        try:
            with open_capture(str(root / rel), chunk_bytes=1 << 22) as cap:
                chunks = list(cap.chunks())
        except Exception:  # noqa: BLE001 - refused files have no records to check
            continue
        for ch in chunks:
            bufs = [ch.data]
            if (ch.linktype == 127).any():
                hostile = np.array(ch.data, copy=True)
                at = rng.integers(0, len(hostile), size=max(len(hostile) // 50, 1))
                hostile[at] = rng.integers(0, 256, size=len(at), dtype=np.uint8)
                bufs.append(hostile)
            for buf in bufs:
                args = (buf, ch.offset, ch.caplen, ch.wirelen, ch.linktype)
                monkeypatch.setattr(accel, "AVAILABLE", True)
                fast = fcs.radiotap_fcs(*args)
                monkeypatch.setattr(accel, "AVAILABLE", False)
                slow = fcs.radiotap_fcs(*args)
                assert fast[0].tolist() == slow[0].tolist(), rel
                assert fast[1].tolist() == slow[1].tolist(), rel
                checked += int((slow[0] >= 0).sum())
    assert checked > 1000      # frames whose FCS was checked both ways


@needs_accel
def test_dontneed_keeps_contents(tmp_path) -> None:
    """Pages dropped from a read-only map read back the same (the file is their backing)."""
    import mmap

    data = bytes(range(256)) * 64
    p = tmp_path / "f"
    p.write_bytes(data)
    with open(p, "rb") as fh:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        before = mm[:]
        accel.dontneed(mm, 0, mmap.PAGESIZE)
        assert mm[:] == before == data
        with pytest.raises(ValueError):
            accel.dontneed(mm, 0, len(data) + 1)
        mm.close()
