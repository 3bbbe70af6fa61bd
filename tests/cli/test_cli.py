"""The `xlayer ingest` and `xlayer info` commands as a user runs them."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import polars as pl
import pytest

from parsers import read_capture
from tests.helpers.common import CORPUS, REPO, corpus_or_skip, signal_once
from tests.helpers.pcapgen import write_udp_pcap


def xlayer(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the command line in a child process."""
    return subprocess.run([sys.executable, "-m", "xlayer", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def _count(out: str, label: str) -> int:
    for line in out.splitlines():
        if line.startswith(label + ":"):
            return int(line.split(":")[1])
    raise AssertionError(f"no '{label}:' line in:\n{out}")


def test_ingest_writes_what_read_capture_returns(tmp_path) -> None:
    corpus_or_skip()
    src = CORPUS / "radiotap" / "arkime__80211http.pcap"
    out = tmp_path / "t.parquet"
    p = xlayer("ingest", str(src), "-o", str(out))
    assert p.returncode == 0, p.stderr
    got = pl.read_parquet(out)
    want = read_capture(src)
    assert got.equals(want)
    assert _count(p.stdout, "records read") == want.height
    assert _count(p.stdout, "decoded") + _count(p.stdout, "malformed") == want.height


def test_info_lists_linktypes_span_and_layouts() -> None:
    corpus_or_skip()
    p = xlayer("info", str(CORPUS / "radiotap" / "aircrack-ng__test1.pcap"))
    assert p.returncode == 0, p.stderr
    assert "link type 127 (IEEE802_11_RADIOTAP): 192 records" in p.stdout
    assert "a000402f,a0000820,00000820" in p.stdout   # the file's three-word presence bitmap
    assert "time span:" in p.stdout


def test_unknown_format_exits_2_with_one_line(tmp_path) -> None:
    f = tmp_path / "notes.txt"
    f.write_bytes(b"hello, this is not a capture\n")
    for cmd in ("info", "ingest"):
        args = [cmd, str(f)] + (["-o", str(tmp_path / "x.parquet")] if cmd == "ingest" else [])
        p = xlayer(*args)
        assert p.returncode == 2
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and "notes.txt" in lines[0] and "68656c6c6f" in lines[0], p.stderr
        assert not (tmp_path / "x.parquet").exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ingest_stops_cleanly_on_signal(tmp_path, sig) -> None:
    src = tmp_path / "big.pcap"
    n = 3_000_000
    write_udp_pcap(src, n)
    out = tmp_path / "big.parquet"
    proc = subprocess.Popen([sys.executable, "-m", "xlayer", "ingest", str(src), "-o", str(out), "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    # Signalled once the output file is there (the first chunk is written), however busy the machine is:
    # a fixed sleep would sometimes land during start-up, before any file exists.
    stdout, stderr = signal_once(proc, out, sig)
    assert "Traceback" not in stderr
    df = pl.read_parquet(out)         # a valid file either way
    if proc.returncode == 130:        # interrupted: a prefix of the capture, and it says how much
        assert 0 <= df.height < n
        assert f"holds the {df.height} records" in stderr
        assert df.get_column("frame").to_list()[:3] == [1, 2, 3][: df.height]
    else:                             # finished before the signal arrived
        assert proc.returncode == 0 and df.height == n


def test_ingest_disk_full_leaves_no_file(tmp_path) -> None:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a small tmpfs")
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)]).returncode:
        pytest.skip("cannot mount tmpfs here")
    try:
        src = tmp_path / "src.pcap"
        write_udp_pcap(src, 200_000)
        out = mnt / "out.parquet"
        p = xlayer("ingest", str(src), "-o", str(out), "-q")
        assert p.returncode == 1
        assert "No space left on device" in p.stderr and "Traceback" not in p.stderr
        assert not out.exists()
    finally:
        subprocess.run(["umount", str(mnt)])


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_during_start_up_is_one_line_and_130(tmp_path, sig) -> None:
    """A signal while the command line is still importing (polars, numpy: about a second) stops it with
    one line and 130.  The test signals as soon as the handlers are in place (XLAYER_READY_FILE), not
    after a sleep that a busy machine would stretch past start-up or that could land before it."""
    ready = tmp_path / "ready"
    env = {**os.environ, "XLAYER_READY_FILE": str(ready)}
    proc = subprocess.Popen([sys.executable, "-m", "xlayer", "analyze", str(REPO / "samples" / "sim-baseline"),
                             "--no-cache"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            env=env)
    out, err = signal_once(proc, ready, sig)
    assert proc.returncode == 130, (proc.returncode, err)
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("xlayer: interrupted"), err


def test_version_is_the_installed_packages() -> None:
    """`xlayer --version` prints the installed version on stdout and exits 0, as `xlayer.__version__` says."""
    from importlib import import_module
    from importlib.metadata import version

    p = xlayer("--version")
    assert p.returncode == 0, p.stderr
    assert p.stdout == f"xlayer {version('xlayer')}\n"
    assert import_module("xlayer").__version__ == version("xlayer")
