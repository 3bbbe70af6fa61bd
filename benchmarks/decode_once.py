"""Decode once per bundle: what `xlayer report` costs after `xlayer analyze`, and the cache under sharing.

    python benchmarks/decode_once.py BUNDLE [--keep-cache]

Runs, each as a fresh `xlayer` process with its own empty decode cache ($XLAYER_CACHE_DIR):
1. `xlayer analyze BUNDLE --json` on a cold cache (decode, align, metric tables, causes);
2. `xlayer report BUNDLE` right after it (should read everything back);
3. `xlayer analyze` on a read-only copy of the bundle (chmod a-w, hard-linked files) with a cold cache;
4. two `xlayer analyze --json` started together on one bundle with one cold cache: both must succeed
   with equal output.
It prints the wall times and the ratio report / analyze (issue 10's target: <= 15 %).  Make a bundle
of >= 1 M air frames with `xlayer sim baseline -o DIR --seconds 130`.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _run(args: list[str], cache: str) -> tuple[float, subprocess.CompletedProcess]:
    env = {**os.environ, "XLAYER_CACHE_DIR": cache}
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "xlayer", *args], capture_output=True, text=True, env=env)
    return time.perf_counter() - t, r


def _check(r: subprocess.CompletedProcess, what: str) -> None:
    if r.returncode != 0:
        sys.exit(f"{what} exited {r.returncode}: {r.stderr[-1500:]}")


def _read_only_copy(src: Path, dest: Path) -> None:
    shutil.copytree(src, dest, copy_function=os.link)
    for p in sorted(dest.rglob("*"), reverse=True) + [dest]:
        mode = p.stat().st_mode
        p.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def main() -> int:
    """Run the four measurements and print them; return the exit code."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle", type=Path)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="xlayer-decode-once-"))
    try:
        c1 = str(work / "cache1")
        t_an, r = _run(["analyze", str(a.bundle), "--json", "-q"], c1)
        _check(r, "analyze")
        first = json.loads(r.stdout)
        t_rep, r = _run(["report", str(a.bundle), "-o", str(work / "report.html"), "-q"], c1)
        _check(r, "report")
        print(f"analyze, cold cache:        {t_an:8.2f} s")
        print(f"report after it:            {t_rep:8.2f} s   = {t_rep / t_an:.1%} of analyze (target <= 15 %)")

        ro = work / "ro" / a.bundle.name
        ro.parent.mkdir()
        _read_only_copy(a.bundle, ro)
        t_ro, r2 = _run(["analyze", str(ro), "--json", "-q"], str(work / "cache2"))
        _check(r2, "analyze on the read-only copy")
        same = json.loads(r2.stdout) == first
        print(f"analyze, read-only copy:    {t_ro:8.2f} s   exit 0, same output as the original: {same}")

        c3 = str(work / "cache3")
        env = {**os.environ, "XLAYER_CACHE_DIR": c3}
        t = time.perf_counter()
        procs = [subprocess.Popen([sys.executable, "-m", "xlayer", "analyze", str(a.bundle), "--json", "-q"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                 for _ in range(2)]
        outs = [p.communicate() for p in procs]
        t_two = time.perf_counter() - t
        codes = [p.returncode for p in procs]
        equal = all(c == 0 for c in codes) and json.loads(outs[0][0]) == json.loads(outs[1][0]) == first
        print(f"two analyze at once:        {t_two:8.2f} s   exit codes {codes}, equal output: {equal}")
        left = [p.name for p in Path(c3).iterdir() if p.name.startswith(".")]
        print(f"unfinished builds left in the cache: {len(left)}")
        return 0 if equal and same and not left else 1
    finally:
        for p in sorted(work.rglob("*"), reverse=True):
            if p.is_dir() and not p.is_symlink():
                p.chmod(p.stat().st_mode | stat.S_IWUSR)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
