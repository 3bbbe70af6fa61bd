#!/usr/bin/env python3
"""Time `xlayer analyze` on the shipped samples (whole command, as a user runs it).

    python benchmarks/analyze.py [SAMPLE_DIR ...] [--repeat 3]

Prints, per sample, its size on disk, the median wall time of `xlayer analyze BUNDLE --json` over
the repeats (process start, reading, alignment, every table the causes read, scoring), and the
incidents found.  The issue's target: under 5 s on the largest sample.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    """Run the benchmark; return the exit code."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("samples", nargs="*", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    samples = a.samples or sorted(p.parent for p in (REPO / "samples").glob("*/bundle.json"))
    rows = []
    for d in samples:
        size = sum(f.stat().st_size for f in d.iterdir() if f.is_file())
        times, out = [], None
        for _ in range(a.repeat):
            t = time.perf_counter()
            r = subprocess.run([sys.executable, "-m", "xlayer", "analyze", str(d), "--json"],
                               capture_output=True, text=True, cwd=REPO)
            times.append(time.perf_counter() - t)
            if r.returncode:
                print(f"{d}: failed: {r.stderr[-500:]}", file=sys.stderr)
                return 1
            out = json.loads(r.stdout)
        causes = [i["cause"] for i in out["incidents"]]
        rows.append((d.name, size, statistics.median(times), causes))
        print(f"{d.name:28s} {size / 1e6:6.2f} MB  {statistics.median(times):5.2f} s  {causes}")
    big = max(rows, key=lambda r: r[1])
    print(f"largest sample {big[0]} ({big[1] / 1e6:.2f} MB): {big[2]:.2f} s (target < 5 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
