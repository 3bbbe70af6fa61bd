#!/usr/bin/env python3
"""Opening the timeline (read, align, spill) and the cross-layer join, timed alone (issue 15).

    python benchmarks/open_join.py BUNDLE [BUNDLE ...] [--repeat N] [--spill auto|yes|no]

Each repetition runs in a child process of its own (its peak RSS is its own): `open_timeline(BUNDLE,
cache=False)`, then the join module's tables (`xlayer.metrics.join.build`: downlink, uplink, attempts,
capture_loss), then the spill directory's removal (`Timeline.close`).  Prints per stage the wall and
CPU seconds (user + system, all threads) and the peak RSS; over several repetitions, the least of each
(on a machine shared with other work the least is the steadiest figure; CPU time stretches less than
wall time).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def child(bundle: str, spill: str) -> None:
    """Run the stages once and print one JSON line: {stage: [wall s, cpu s]}, rows, peak RSS."""
    from xlayer.metrics import MODULES, open_timeline
    from xlayer.metrics import join as mjoin

    out: dict[str, list[float]] = {}
    w, c = time.perf_counter(), _cpu()
    tl = open_timeline(bundle, cache=False, spill={"auto": None, "yes": True, "no": False}[spill])
    out["open_timeline"] = [time.perf_counter() - w, _cpu() - c]
    rss_open = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert mjoin in MODULES
    w, c = time.perf_counter(), _cpu()
    tables = mjoin.build(tl)
    out["join"] = [time.perf_counter() - w, _cpu() - c]
    rows = {n: t.height for n, t in tables.items()}
    del tables
    w, c = time.perf_counter(), _cpu()
    tl.close()
    out["close"] = [time.perf_counter() - w, _cpu() - c]
    print(json.dumps({"stages": out, "rows": rows, "rss_open_mb": rss_open,
                      "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def main() -> int:
    """Run the benchmark; return the exit code."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bundle", nargs="+")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--spill", choices=["auto", "yes", "no"], default="auto")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.bundle[0], a.spill)
        return 0
    for bundle in a.bundle:
        runs = []
        for _ in range(a.repeat):
            r = subprocess.run([sys.executable, __file__, bundle, "--child", "--spill", a.spill],
                               capture_output=True, text=True)
            if r.returncode:
                print(r.stderr[-3000:], file=sys.stderr)
                return 1
            runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
        print(f"bundle {bundle} (spill {a.spill}), least of {len(runs)}: rows {runs[0]['rows']}")
        for stage in runs[0]["stages"]:
            wall = min(r["stages"][stage][0] for r in runs)
            cpu = min(r["stages"][stage][1] for r in runs)
            print(f"  {stage:14s} wall {wall:6.2f} s  cpu {cpu:6.2f} s")
        print(f"  peak RSS after open {min(r['rss_open_mb'] for r in runs):.0f} MB, "
              f"at the end {min(r['rss_mb'] for r in runs):.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
