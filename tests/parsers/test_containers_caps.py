"""Compressed captures are decompressed only up to a cap (xlayer issue 12): a gzip bomb is refused with one clear
error, and the temporary file is gone on every way out (the cap, an interrupt, a full TMPDIR)."""
from __future__ import annotations

import gzip
import io
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import parsers.formats.containers as containers
from parsers.formats.containers import CappedReader, DecompressionLimit, decompressed_cap, open_capture
from parsers.formats.records import CaptureError
from tests.helpers.common import REPO
from xlayer.signals import Stop

PCAP_HEADER = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)


def _records(n: int) -> bytes:
    """Return n Ethernet records of 60 bytes each, one per ms."""
    frame = bytes(range(60))
    return b"".join(struct.pack("<IIII", 1_700_000_000, i * 1000, 60, 60) + frame for i in range(n))


def _bomb(n_mib: int) -> bytes:
    """Return a gzipped pcap: a header, then n_mib MiB of zeros (members concatenated: ~1 KB per MiB)."""
    return gzip.compress(PCAP_HEADER) + gzip.compress(b"\0" * (1 << 20), compresslevel=9) * n_mib


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.fixture
def own_tmpdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point tempfile at an empty directory of the test's own, to see nothing is left in it."""
    d = tmp_path / "tmpdir"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


def test_decompressed_cap_is_ratio_then_absolute(monkeypatch: pytest.MonkeyPatch) -> None:
    assert decompressed_cap(0) == containers.RATIO_FREE_BYTES
    assert decompressed_cap(10 << 20) == containers.MAX_RATIO * (10 << 20)
    assert decompressed_cap(1 << 40) == containers.MAX_DECOMPRESSED_BYTES
    monkeypatch.setattr(containers, "MAX_RATIO", 3)
    assert decompressed_cap(1 << 30) == 3 << 30     # the module constants are read at each call


def test_capped_reader_cap_is_exact() -> None:
    assert CappedReader(io.BytesIO(b"x" * 10), 10, "f").read() == b"x" * 10
    with pytest.raises(DecompressionLimit, match="f: decompresses to more than 9 bytes") as e:
        CappedReader(io.BytesIO(b"x" * 10), 9, "f").read()
    assert e.value.cap == 9 and isinstance(e.value, CaptureError)


def test_capture_at_the_cap_reads_one_byte_more_is_refused(tmp_path: Path, own_tmpdir: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    raw = PCAP_HEADER + _records(1000)
    p = tmp_path / "c.pcap.gz"
    p.write_bytes(gzip.compress(raw))
    monkeypatch.setattr(containers, "RATIO_FREE_BYTES", 1 << 30)
    monkeypatch.setattr(containers, "MAX_DECOMPRESSED_BYTES", len(raw))
    with open_capture(p) as cap:
        assert sum(len(c) for c in cap.chunks()) == 1000 and cap.gzipped
    monkeypatch.setattr(containers, "MAX_DECOMPRESSED_BYTES", len(raw) - 1)
    before = _fds()
    with pytest.raises(CaptureError, match=r"c\.pcap\.gz: decompresses to more than .*decompression bomb"):
        open_capture(p)
    assert _fds() == before and os.listdir(own_tmpdir) == []


def test_gzip_bomb_refused_with_small_caps(tmp_path: Path, own_tmpdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(containers, "RATIO_FREE_BYTES", 1 << 20)
    monkeypatch.setattr(containers, "MAX_RATIO", 20)
    p = tmp_path / "bomb.pcap.gz"
    p.write_bytes(_bomb(32))
    before = _fds()
    with pytest.raises(DecompressionLimit) as e:
        open_capture(p)
    assert e.value.cap == decompressed_cap(p.stat().st_size) == 1 << 20
    assert _fds() == before and os.listdir(own_tmpdir) == []


def test_gzip_bomb_real_size(tmp_path: Path, own_tmpdir: Path) -> None:
    # the attacker's 1 GiB of zeros in ~1 MB, default caps: refused after a few hundred MB at most
    p = tmp_path / "bomb.pcap.gz"
    p.write_bytes(_bomb(1024))
    assert p.stat().st_size < 2 << 20
    before = _fds()
    with pytest.raises(DecompressionLimit) as e:
        open_capture(p)
    assert e.value.cap <= 400 << 20
    assert _fds() == before and os.listdir(own_tmpdir) == []


class _Interrupting:
    """A compressed file that is interrupted (as by a signal) after a few reads."""

    def __init__(self, data: bytes, exc: type[BaseException], after: int):
        self._f, self._exc, self._left = io.BytesIO(data), exc, after

    def read(self, n: int = -1) -> bytes:
        self._left -= 1
        if self._left < 0:
            raise self._exc()
        return self._f.read(min(n, 4096) if n > 0 else 4096)


@pytest.mark.parametrize("exc", [KeyboardInterrupt, Stop, MemoryError])
def test_interrupt_while_decompressing_leaves_no_temp_file(own_tmpdir: Path, exc: type[BaseException]) -> None:
    data = gzip.compress(PCAP_HEADER + os.urandom(1 << 20))
    before = _fds()
    with pytest.raises(exc):
        containers._gunzip("x.pcap.gz", _Interrupting(data, exc, 20), [])  # noqa: SLF001
    assert _fds() == before and os.listdir(own_tmpdir) == []


def test_full_tmpdir_is_named_and_cleaned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    full = tmp_path / "full"
    full.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(full)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        monkeypatch.setattr(tempfile, "tempdir", str(full))
        p = tmp_path / "c.pcap.gz"
        p.write_bytes(gzip.compress(PCAP_HEADER + os.urandom(2 << 20)))
        before = _fds()
        with pytest.raises(CaptureError, match=f"c.pcap.gz: cannot decompress to a temporary file in {full}: "
                                               "No space left on device"):
            open_capture(p)
        assert _fds() == before and os.listdir(full) == []
        assert os.statvfs(full).f_bfree == os.statvfs(full).f_blocks   # the space is given back
    finally:
        subprocess.run(["umount", str(full)], check=True)


def test_cli_refuses_a_bomb_in_one_line(tmp_path: Path) -> None:
    p = tmp_path / "bomb.pcap.gz"
    p.write_bytes(_bomb(1024))
    env = dict(os.environ, TMPDIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-m", "xlayer", "info", str(p)], cwd=REPO, capture_output=True,
                         text=True, env=env, timeout=600)
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and "bomb.pcap.gz" in out.stderr and "decompression bomb" in out.stderr
    assert [f.name for f in tmp_path.iterdir()] == ["bomb.pcap.gz"]
