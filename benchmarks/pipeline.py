#!/usr/bin/env python3
"""Whole-pipeline benchmark: read, align, join and every metric table of a bundle, next to tshark.

    python benchmarks/pipeline.py BUNDLE [--skip-tshark]

Runs the pipeline as `xlayer metrics` does, in a child process (its peak RSS is its own):
`xlayer.open_timeline(BUNDLE)` (every packet capture read once, clocks aligned), then
`xlayer.metrics.export.write_metrics` writing every metric table to Parquet in a temporary directory,
module by module: each module computes its tables, they are written, and the caller holds none of
them (a large bundle's timeline spills finished tables to its temporary Arrow files, as it does the
packet tables).  For comparison, tshark merely dissects each packet capture of the bundle
(`tshark -n -r FILE`, 802.11 FCS checked, output discarded), one file after another.  Prints frames
per capture, wall times, the ratio, per-table time and peak RSS so far, and the pipeline's peak RSS
(the issue's limit: 2 GB on >= 1 M air frames and >= 1 M wired packets).  Make a large bundle with
`xlayer sim baseline -o DIR --seconds 200`.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def child(bundle: str) -> None:
    """Run the pipeline and print one JSON line: rows per table, seconds per stage, peak RSS."""
    from xlayer.metrics.export import write_metrics
    from xlayer.metrics import open_timeline

    t0 = time.perf_counter()
    tl = open_timeline(bundle, cache=False)   # the whole pipeline each time, nothing kept
    t1 = time.perf_counter()
    stages: dict[str, float] = {}
    last = [time.perf_counter()]

    rss_at: dict[str, float] = {}
    prev = [""]

    def step(name: str) -> None:
        # called before each table: the time and peak RSS since the previous call belong to the previous table
        now = time.perf_counter()
        if prev[0]:
            stages[prev[0]] = round(now - last[0], 3)
            rss_at[prev[0]] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        prev[0] = name
        last[0] = now

    rss_open = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with tempfile.TemporaryDirectory(prefix="xlayer-bench-") as out:
        man = write_metrics(tl, out, progress=step)
        step("")
        parquet_mb = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out)) / 1e6
    rows = {n: t["rows"] for n, t in man["tables"].items()}
    t2 = time.perf_counter()
    # one column suffices to count rows: the whole table would be read into memory for its height
    frames = {e.file: tl.packets(e.file, columns=["frame"]).height for e in tl.entries()}
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"read_align_s": t1 - t0, "metrics_s": t2 - t1, "total_s": t2 - t0, "rows": rows,
                      "stage_s": stages, "peak_rss_after_mb": rss_at, "peak_rss_open_mb": rss_open,
                      "frames": frames, "peak_rss_mb": rss, "parquet_mb": parquet_mb, "kinds": {e.file: e.kind for e in tl.entries()}}))


def main() -> int:
    """Run the benchmark; return the exit code."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bundle")
    ap.add_argument("--skip-tshark", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.bundle)
        return 0
    t = time.perf_counter()
    r = subprocess.run([sys.executable, __file__, a.bundle, "--child"], capture_output=True, text=True)
    wall = time.perf_counter() - t
    if r.returncode:
        print(r.stderr[-3000:], file=sys.stderr)
        return 1
    res = json.loads(r.stdout.strip().splitlines()[-1])
    air = sum(n for f, n in res["frames"].items() if res["kinds"][f] == "air")
    wired = sum(n for f, n in res["frames"].items() if res["kinds"][f] == "wired")
    print(f"bundle {a.bundle}: {air:,} air frames, {wired:,} wired packets in {len(res['frames'])} captures")
    for f, n in res["frames"].items():
        print(f"  {f:24s} {res['kinds'][f]:6s} {n:>10,}")
    print(f"xlayer pipeline (as `xlayer metrics`: read, align, every metric table computed and written to Parquet): "
          f"{wall:.1f} s wall (read+align {res['read_align_s']:.1f} s, metric tables {res['metrics_s']:.1f} s), "
          f"peak RSS {res['peak_rss_mb']:.0f} MB; tables written: {res['parquet_mb']:.0f} MB of Parquet")
    print(f"  peak RSS after reading and aligning: {res['peak_rss_open_mb']:.0f} MB")
    for name, n in res["rows"].items():
        # a module computes all its tables at once: the time shows on its first table, 0 on the others
        print(f"  {name:18s} {n:>10,} rows  {res['stage_s'].get(name, 0):7.1f} s  "
              f"peak RSS so far {res['peak_rss_after_mb'].get(name, 0):6.0f} MB")
    if not a.skip_tshark:
        from xlayer.bundle.manifest import open_bundle

        b = open_bundle(a.bundle)
        t = time.perf_counter()
        for e in b.captures:
            if e.is_packets:
                subprocess.run(["tshark", "-n", "-o", "wlan.check_checksum:TRUE", "-r", str(b.file_path(e))],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        tsh = time.perf_counter() - t
        print(f"tshark dissecting the same files (tshark -n -r, output discarded): {tsh:.1f} s; "
              f"xlayer's whole pipeline / tshark's dissection alone: {wall / tsh:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
