#!/usr/bin/env python3
"""The TCP metric tables with the compiled state machines (xlayer/metrics/_tcpk.c) against the polars
expressions they replace, on one bundle:

    python benchmarks/tcp_kernels.py BUNDLE [--reps N]

Opens the bundle once (`open_timeline`, nothing cached), then builds `xlayer.metrics.tcp` (retransmissions,
tcp_events) and `xlayer.metrics.flows` (flows, flow_series, rtt, owd, loss) N times each way, alternating,
and prints per module the CPU time (user + system, all threads) and wall time of its run with the least CPU, their
ratio, and whether both ways gave the same tables (they must: the kernels change the speed only).  The
smallest of several runs is the steadiest figure on a machine shared with other work.
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(a[k].schema == b[k].schema and a[k].equals(b[k], null_equal=True) for k in a)


def main() -> int:
    """Measure and print; return 1 when the two ways disagree (or the kernels are not built), else 0."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    from xlayer.metrics import flows, open_timeline, tcp

    if tcp._tcpk is None:
        print("xlayer.metrics._tcpk is not built: python3 setup.py build_ext --inplace", file=sys.stderr)
        return 1
    tl = open_timeline(a.bundle, cache=False)
    times: dict[tuple[str, bool], list[tuple[float, float]]] = {}
    last: dict[tuple[str, bool], dict] = {}
    for _ in range(a.reps):
        for kernel in (False, True):
            tcp.KERNEL = kernel
            for name, mod in (("tcp", tcp), ("flows", flows)):
                c0, w0 = _cpu(), time.perf_counter()
                last[(name, kernel)] = mod.build(tl)
                times.setdefault((name, kernel), []).append((_cpu() - c0, time.perf_counter() - w0))
    ok = True
    for name in ("tcp", "flows"):
        (cp, wp), (ck, wk) = (min(times[(name, k)]) for k in (False, True))
        same = _same(last[(name, False)], last[(name, True)])
        ok &= same
        print(f"{name:6s} polars: CPU {cp:6.2f} s, wall {wp:6.2f} s | kernels: CPU {ck:6.2f} s, wall {wk:6.2f} s | "
              f"CPU ratio {cp / max(ck, 1e-9):.2f}x | tables identical: {same}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
