#!/usr/bin/env python3
"""Time `xlayer campaign run` on 1 and on 2 local worker processes: the speed-up of the Dask campaign.

    python benchmarks/campaign.py [BUNDLE_OR_DIR ...] [--repeat 1]

Default bundles: the test campaign's simulated bundles (``python -m tests.campaign.sims`` makes them, in
$XLAYER_TEST_SIMS or /tmp/xlayer-test-sims) if there, else the shipped samples.  Every run starts from an
empty decode cache and an empty output directory, so both runs decode and analyze every bundle.  Prints
each wall time (cluster start included) and the ratio; the issue's target is 2 workers >= 1.7x faster than
1 on a 2-core machine.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def default_bundles() -> list[str]:
    """Return the simulated campaign's bundles if made, else the shipped samples."""
    from tests.campaign.sims import CONDITIONS, SECONDS, SEEDS
    from tests.helpers.common import SIM_CACHE, sim_tag

    tags = [sim_tag(sc, seed, SECONDS, standard=std) for sc, std in CONDITIONS for seed in SEEDS]
    found = [str(SIM_CACHE / t) for t in tags if (SIM_CACHE / t / "truth.json").is_file()]
    return found or sorted(str(p.parent) for p in (REPO / "samples").glob("*/bundle.json"))


def timed_run(bundles: list[str], workers: int) -> float:
    """Return the wall time of one campaign run on `workers` processes, from empty cache and output."""
    from xlayer.campaign.run import run_campaign

    with tempfile.TemporaryDirectory(prefix="xlayer-bench-campaign-") as tmp:
        os.environ["XLAYER_CACHE_DIR"] = str(Path(tmp) / "cache")    # the workers inherit it: nothing cached
        t = time.perf_counter()
        res = run_campaign(bundles, Path(tmp) / "out", workers=workers, progress=False)
        wall = time.perf_counter() - t
    if res.errors:
        print(f"  {len(res.errors)} bundles failed: {next(iter(res.errors.values()))}", file=sys.stderr)
    return wall


def main() -> int:
    """Run the benchmark; return the exit code."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bundles", nargs="*")
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    bundles = a.bundles or default_bundles()
    print(f"{len(bundles)} bundles, {os.cpu_count()} CPUs")
    walls = {}
    for n in (1, 2):
        walls[n] = statistics.median(timed_run(bundles, n) for _ in range(a.repeat))
        print(f"{n} worker{'s' if n > 1 else ''}: {walls[n]:.1f} s wall")
    ratio = walls[1] / walls[2]
    print(f"speed-up 2 vs 1 workers: {ratio:.2f}x (target >= 1.7x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
