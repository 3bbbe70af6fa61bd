"""`xlayer metrics` and `xlayer report` outputs under a full disk, interrupts and concurrent writers.

Whatever happens, the output directory holds whole files only, `metrics.json` lists exactly the
Parquet files present, no temporary file is left, and the command exits non-zero with one line
saying what was left.  Disk-full tests mount a small tmpfs (root only) so the disk really fills.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from tests.helpers.common import REPO
from xlayer.metrics import open_timeline, table_names
from xlayer.metrics.export import MANIFEST, Written, dictionary_columns, with_utc_times, write_metrics
from xlayer.signals import Stop

SAMPLE = REPO / "samples" / "lab-baseline"
BIG_SAMPLE = REPO / "samples" / "sim-walkaway"
# Runs `xlayer` with the packet tables spilled to temporary files whatever the bundle's size, as a
# bundle over SPILL_MIN_BYTES is read: the samples are small.
SPILLING = ("import sys, xlayer.timeline.open as o; o.SPILL_MIN_BYTES = 0; "
            "from xlayer.__main__ import run; sys.exit(run())")


def _xlayer(*args: str, code: str | None = None) -> list[str]:
    return [sys.executable, *(["-c", code] if code else ["-m", "xlayer"]), *args]


def _run(*args: str, env: dict[str, str] | None = None, code: str | None = None,
         timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(_xlayer(*args, code=code), capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          env={**os.environ, **(env or {})})


def _temps(d: Path) -> list[str]:
    """Return the temporary files in `d` (ours are hidden: `.NAME.PID-RANDOM.part`)."""
    return sorted(p.name for p in d.iterdir() if p.name.endswith((".part", ".tmp")))


def assert_consistent(out: Path) -> dict | None:
    """Check the directory's invariants; return its manifest (None: there is none, and no table either)."""
    assert not _temps(out), _temps(out)
    present = {p.name for p in out.glob("*.parquet")}
    if not (out / MANIFEST).exists():
        assert not present, present
        return None
    man = json.loads((out / MANIFEST).read_text())
    assert {t["file"] for t in man["tables"].values()} == present
    for name, t in man["tables"].items():
        assert t["file"] == f"{name}.parquet"
        assert pl.read_parquet(out / t["file"]).height == t["rows"], name   # whole: readable, all rows
    if man["complete"]:
        assert set(man["tables"])
    return man


def _one_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    return lines[0]


def _assert_left_said(man: dict | None, line: str) -> None:
    """The one line says what was left: nothing, or the partial manifest's tables."""
    if man is None:
        assert "nothing written" in line, line
    else:
        assert man["complete"] is False
        n = len(man["tables"])
        assert (f"lists the {n} table" if n else "lists no tables") in line, line


@contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    """Yield a directory on a tmpfs of `size` (skips the test unless root and mounting works)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs (a disk that really fills)")
    where.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                      capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _fill(d: Path) -> None:
    """Fill the file system of `d` to the last block."""
    with open(d / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass
    assert os.statvfs(d).f_bavail == 0


# --- in-process: the write itself, stopped at every table ---


@pytest.fixture(scope="module")
def timeline():
    return open_timeline(SAMPLE)


def test_success_output_is_what_the_writers_give(timeline, tmp_path: Path) -> None:
    """Byte for byte: each file is pyarrow's zstd Parquet of the table (dictionary pages for its strings),
    the manifest json.dump's text."""
    out = tmp_path / "m"
    man = write_metrics(timeline, out)
    assert man["complete"] is True and list(man["tables"]) == table_names()
    assert_consistent(out)
    for name in ("flows", "owd", "captures"):
        ref = tmp_path / f"ref-{name}.parquet"
        table = with_utc_times(name, timeline.table(name)).to_arrow()
        pq.write_table(table, ref, compression="zstd", use_dictionary=dictionary_columns(table.schema))
        assert (out / f"{name}.parquet").read_bytes() == ref.read_bytes(), name
    assert (out / MANIFEST).read_text() == json.dumps(man, indent=1, allow_nan=False, default=str)
    umask = os.umask(0)
    os.umask(umask)
    assert {(p.stat().st_mode & 0o777) for p in out.iterdir()} == {0o666 & ~umask}


@pytest.mark.parametrize("stop", [Stop, KeyboardInterrupt, RuntimeError])
@pytest.mark.parametrize("at", [0, 1, 7, 20])
def test_stopped_at_any_table_leaves_a_true_manifest(timeline, tmp_path: Path, stop: type, at: int) -> None:
    """An interrupt (as the signal handler raises it) or an error before table `at`: whole files, listed."""
    out = tmp_path / "m"
    names = table_names()
    seen = []

    def progress(what: str) -> None:
        seen.append(what)
        if what in names and names.index(what) == at:
            raise stop()

    written = Written()
    with pytest.raises(stop):
        write_metrics(timeline, out, progress=progress, written=written)
    man = assert_consistent(out)
    assert man is not None and man["complete"] is False
    assert list(man["tables"]) == written.tables == names[:at]


def test_rerun_replaces_an_earlier_run_and_its_leftovers(timeline, tmp_path: Path) -> None:
    """A second run (fewer tables) leaves no file of the first; dead writers' temporary files go too."""
    out = tmp_path / "m"
    write_metrics(timeline, out)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = [out / f".flows.parquet.{int(dead.stdout)}-abcd.part", out / "metrics.json.part", out / "rtt.parquet.part"]
    for p in stale:
        p.write_bytes(b"half")
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        theirs = out / f".owd.parquet.{live.pid}-abcd.part"     # a running writer's: not ours to remove
        theirs.write_bytes(b"busy")
        man = write_metrics(timeline, out, tables=["flows", "captures"])
        assert theirs.exists()
        theirs.unlink()
    finally:
        live.kill()
        live.wait()
    assert not any(p.exists() for p in stale)
    assert assert_consistent(out) == man and list(man["tables"]) == ["flows", "captures"]


def test_page_write_failing_part_way_keeps_the_earlier_page(tmp_path: Path) -> None:
    """Any error while the page is written (here text that cannot be encoded) leaves the earlier page."""
    from xlayer.report.page import write_page

    page = tmp_path / "r.html"
    page.write_text("<p>the earlier report</p>")
    with pytest.raises(UnicodeEncodeError):
        write_page("<p>" + "x" * 100_000 + "\udc80</p>", page)
    assert page.read_text() == "<p>the earlier report</p>"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]
    write_page("<p>new</p>", page)
    assert page.read_text() == "<p>new</p>" and sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]


# --- disk full (a real one: a small tmpfs) ---


@pytest.mark.parametrize("size", ["0", "12k", "40k", "200k"])
def test_metrics_disk_full(tmp_path: Path, size: str) -> None:
    """Each size runs out at another step: before the manifest, at the first table, part-way."""
    with tmpfs(tmp_path / "small", size if size != "0" else "16k") as mnt:
        if size == "0":
            _fill(mnt)
        out = mnt / "m"
        r = _run("metrics", str(SAMPLE), "-o", str(out), "-q")
        assert r.returncode == 1, r.stderr[-3000:]
        line = _one_line(r.stderr)
        assert f"cannot write {out}: No space left on device" in line, line
        _assert_left_said(assert_consistent(out) if out.exists() else None, line)
        assert not list(mnt.glob("**/*.part"))


def test_report_disk_full_keeps_the_earlier_page(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "small", "200k") as mnt:
        page = mnt / "r.html"
        page.write_text("<p>the earlier report</p>")
        r = _run("report", str(SAMPLE), "-o", str(page), "-q")
        assert r.returncode == 1, r.stderr[-3000:]
        line = _one_line(r.stderr)
        assert f"cannot write {mnt}: No space left on device" in line and "no report written" in line, line
        assert page.read_text() == "<p>the earlier report</p>"
        assert sorted(p.name for p in mnt.iterdir()) == ["r.html"]


def test_full_decode_cache_is_named_not_the_output(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "cache", "16k") as cache:
        _fill(cache)
        out = tmp_path / "m"
        r = _run("metrics", str(SAMPLE), "-o", str(out), "-q", env={"XLAYER_CACHE_DIR": str(cache / "x")})
        assert r.returncode == 1, r.stderr[-3000:]
        line = _one_line(r.stderr)
        assert f"cannot write the decode cache {cache / 'x'}" in line and "No space left" in line, line
        assert f"cannot write {out}" not in line and "nothing written" in line, line
        assert not out.exists() or assert_consistent(out) is not None


def test_full_tmpdir_is_named_not_the_output(tmp_path: Path) -> None:
    """--no-cache spills a large bundle's packet tables to TMPDIR: when that fills, TMPDIR is to blame."""
    with tmpfs(tmp_path / "tmp", "256k") as tmp:
        out = tmp_path / "m"
        r = _run("metrics", str(SAMPLE), "-o", str(out), "-q", "--no-cache", env={"TMPDIR": str(tmp)}, code=SPILLING)
        assert r.returncode == 1, r.stderr[-3000:]
        line = _one_line(r.stderr)
        assert f"cannot write the temporary directory {tmp}" in line and "No space left" in line, line
        assert f"cannot write {out}" not in line, line
        assert not out.exists() or assert_consistent(out) is not None
        assert not [p for p in tmp.iterdir() if p.name.startswith("xlayer-")]   # the spill files went too


# --- concurrent writers (real processes, started together) ---


@pytest.mark.parametrize("second", [[], ["--tables", "flows,rtt,captures"]])
def test_concurrent_metrics_into_one_directory(tmp_path: Path, second: list[str]) -> None:
    out = tmp_path / "m"
    procs = [subprocess.Popen(_xlayer("metrics", str(SAMPLE), "-o", str(out), "-q", *extra), cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for extra in ([], second)]
    results = [(p.wait(timeout=600), p.stderr.read()) for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    for rc, err in results:
        # the writers take turns: both succeed (a clean refusal would be exit 2 and one line)
        assert rc == 0 or (rc == 2 and len(err.strip().splitlines()) == 1), err[-3000:]
        assert "No such file" not in err and "Traceback" not in err, err[-3000:]
    man = assert_consistent(out)
    assert man is not None and man["complete"] is True
    assert set(man["tables"]) in ({*table_names()}, {"flows", "rtt", "captures"})


# --- SIGTERM / SIGINT at a few moments of a real run ---


def _when_metrics(out: Path) -> bool:
    return (out / MANIFEST).exists()


def _when_parquet(n: int):
    return lambda out: len(list(out.glob("*.parquet"))) >= n


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("when", [_when_metrics, _when_parquet(1), _when_parquet(8)],
                         ids=["manifest", "first-parquet", "eighth-parquet"])
def test_signal_while_writing(tmp_path: Path, sig: int, when) -> None:
    """Whenever the signal lands (even after the last file), the invariants hold."""
    out = tmp_path / "m"
    p = subprocess.Popen(_xlayer("metrics", str(BIG_SAMPLE), "-o", str(out), "-q", "--no-cache"), cwd=REPO,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while p.poll() is None and time.monotonic() < deadline and not (out.is_dir() and when(out)):
        time.sleep(0.005)
    p.send_signal(sig)
    _, err = p.communicate(timeout=300)
    man = assert_consistent(out) if out.exists() else None
    assert p.returncode in (0, 130), err[-3000:]
    line = _one_line(err) if p.returncode else ""
    if man is not None and man["complete"]:
        return      # every table was in before the signal came (a signal while printing the summary: 130)
    assert p.returncode == 130, err[-3000:]
    assert line.startswith("xlayer: interrupted; "), line
    _assert_left_said(man, line)


# The signal lands while polars' Rust calls back into Python: PyO3 hands back an error of its own
# (a TypeError about an "unprintable str object", seen once in CI), not the KeyboardInterrupt raised.
MANGLED = ("import os, signal, sys, xlayer.timeline.airtime as a; orig = a._mpdu_inputs\n"
           "def hit(df):\n"
           "    try:\n"
           "        os.kill(os.getpid(), signal.{sig})\n"
           "    except BaseException as exc:\n"
           "        raise TypeError(\"'<unprintable str object>' is not a Polars data type\") from exc\n"
           "a._mpdu_inputs = hit\n"
           "from xlayer.__main__ import run; sys.exit(run())")


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_a_library_turned_into_its_own_error_still_stops_cleanly(tmp_path: Path, sig: str) -> None:
    out = tmp_path / "m"
    p = _run("metrics", str(BIG_SAMPLE), "-o", str(out), "-q", "--no-cache", code=MANGLED.format(sig=sig))
    assert p.returncode == 130, p.stderr[-3000:]
    line = _one_line(p.stderr)
    assert line.startswith("xlayer: interrupted; "), line
    _assert_left_said(assert_consistent(out) if out.exists() else None, line)
