"""Spill directories (a timeline opened without the cache): gone on every way out of a run, and one a
killed run left removed by the next run, never one whose process still lives."""
from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.helpers.common import REPO, deadline
from xlayer.timeline import open as topen
from xlayer.timeline.open import SPILL_PREFIX, clean_stale_spills, open_timeline

SAMPLE = REPO / "samples" / "lab-baseline"

# `xlayer` with every bundle spilled; PAUSE names where it stops to say "paused <spill dir>" and wait
# for the test's signal: inside open_timeline (after the first capture is spilled) or after it
# returned (the first metric table asked for).
_RUN = """
import sys, time, xlayer.timeline.open as o
o.SPILL_MIN_BYTES = 0
where = sys.argv.pop(1)

def pause(tl_dir):
    print("paused", tl_dir, flush=True)
    if where.endswith("-raise"):
        sys.stdin.readline()      # the test has seen the spill directory: raising now removes it
        raise RuntimeError("a bug after the spill directory was made")
    time.sleep(600)

if where == "open-raise":     # a bug once every capture is spilled (one capture's errors are kept)
    import pathlib, xlayer.timeline.align as al
    def align_bundle(bundle, reference, decoder, tables):
        pause(str(pathlib.Path(next(iter(tables._files.values()))).parents[1]))
    al.align_bundle = align_bundle
elif where == "open":
    read = o._spill_read
    def _spill_read(path, columns, keep, out_dir, *a, **k):
        got = read(path, columns, keep, out_dir, *a, **k)
        pause(str(__import__("pathlib").Path(out_dir).parent))
        return got
    o._spill_read = _spill_read
else:
    table = o.Timeline.table
    def _table(self, name):
        pause(self._spill_dir)
        return table(self, name)
    o.Timeline.table = _table
from xlayer.__main__ import run
sys.exit(run())
"""


def _spills(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.name.startswith(SPILL_PREFIX))


def _start(tmp: Path, where: str, *args: str) -> tuple[subprocess.Popen, Path]:
    """Start `xlayer analyze` spilling into tmp; return it and its spill directory once it paused there."""
    cmd = [sys.executable, "-c", _RUN, where, "analyze", str(SAMPLE), "--no-cache", "-q", *args]
    env = {**os.environ, "TMPDIR": str(tmp), "XLAYER_CACHE_DIR": str(tmp / "cache")}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    with deadline(300):
        line = proc.stdout.readline()
    assert line.startswith("paused "), (line, proc.communicate(timeout=60))
    spill = Path(line.split(" ", 1)[1].strip())
    assert spill.parent == tmp and spill.is_dir() and any(spill.iterdir())
    return proc, spill


@pytest.fixture
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Return a private TMPDIR, for this process and the runs it starts."""
    d = tmp_path / "tmp"
    d.mkdir()
    monkeypatch.setenv("TMPDIR", str(d))
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


def test_spill_directory_names_its_process(tmp: Path):
    with open_timeline(SAMPLE, spill=True, cache=False) as tl:
        d = Path(tl._spill_dir)
        assert d.parent == tmp and any(d.rglob("*.arrow"))
        assert topen._spill_owner(d.name) == (os.getpid(), topen._start_ticks(os.getpid()))
        assert clean_stale_spills(tmp) == 0 and d.is_dir()     # ours: we are alive
    assert not d.exists()


def test_spill_directory_goes_with_the_timeline(tmp: Path):
    tl = open_timeline(SAMPLE, spill=True, cache=False)
    d = Path(tl._spill_dir)
    assert d.is_dir()
    del tl
    gc.collect()
    assert not d.exists() and _spills(tmp) == []


@pytest.mark.parametrize("where", ["open", "tables"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_removes_the_spill(tmp: Path, where: str, sig: int):
    """SIGTERM (Stop) or SIGINT while the captures are spilled, or while the tables are computed."""
    proc, spill = _start(tmp, where)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted" in err and "Traceback" not in err
    assert not spill.exists() and _spills(tmp) == []


@pytest.mark.parametrize("where", ["open-raise", "tables-raise"])
def test_exception_removes_the_spill(tmp: Path, where: str):
    """A bug inside open_timeline, or after it returned: a traceback, but no spill left behind."""
    proc, spill = _start(tmp, where)
    out, err = proc.communicate(input="raise\n", timeout=300)
    assert proc.returncode not in (0, None) and "a bug after the spill directory was made" in err
    assert not spill.exists() and _spills(tmp) == []


def test_killed_run_spill_is_removed_by_the_next_run(tmp: Path):
    proc, spill = _start(tmp, "open")
    proc.kill()
    proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL and spill.is_dir()    # nothing can run on SIGKILL
    tl = open_timeline(SAMPLE, spill=False, cache=False)      # the next run, even one that spills nothing
    assert not spill.exists() and _spills(tmp) == []
    assert tl.entries()


def test_only_spills_of_dead_processes_are_removed(tmp: Path):
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        ticks = topen._start_ticks(live.pid)
        assert ticks is not None
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True)
        dead_pid = int(dead.stdout)
        if topen._start_ticks(dead_pid) is not None:
            pytest.skip(f"pid {dead_pid} was given to another process already")
        mine = tmp / f"{SPILL_PREFIX}{os.getpid()}-{topen._start_ticks(os.getpid())}-aaaa"
        alive = tmp / f"{SPILL_PREFIX}{live.pid}-{ticks}-bbbb"
        reused = tmp / f"{SPILL_PREFIX}{live.pid}-{ticks + 1}-cccc"   # its pid now names another process
        gone = tmp / f"{SPILL_PREFIX}{dead_pid}-7-dddd"
        foreign = [tmp / f"{SPILL_PREFIX}abc", tmp / f"{SPILL_PREFIX}{dead_pid}-x-eeee", tmp / "other-1-2-3"]
        for d in (mine, alive, reused, gone, *foreign):
            (d / "000").mkdir(parents=True)
            (d / "000" / "raw-00000.arrow").write_bytes(b"x" * 1000)
        a_file = tmp / f"{SPILL_PREFIX}{dead_pid}-7-ffff"
        a_file.write_bytes(b"not a directory")
        link = tmp / f"{SPILL_PREFIX}{dead_pid}-7-gggg"
        link.symlink_to(mine)
        assert clean_stale_spills(tmp) == 2
        assert not reused.exists() and not gone.exists()
        assert mine.is_dir() and alive.is_dir() and all(d.is_dir() for d in foreign)
        assert a_file.is_file() and link.is_symlink() and (mine / "000" / "raw-00000.arrow").is_file()
    finally:
        live.kill()
        live.wait()
