#!/usr/bin/env python3
"""Opening the timeline (read, align, spill) and the cross-layer join, timed alone (issue 15).

    python benchmarks/open_join.py BUNDLE [BUNDLE ...] [--repeat N] [--spill auto|yes|no]
                                [--against FILE[,FILE]]

Each repetition runs in a child process of its own (its peak RSS is its own): `open_timeline(BUNDLE,
cache=False)`, then the join module's tables (`xlayer.metrics.join.build`: downlink, uplink, attempts,
capture_loss), then the spill directory's removal (`Timeline.close`).  Prints per stage the wall and
CPU seconds (user + system, all threads) and the peak RSS; over several repetitions, the least of each
(on a machine shared with other work the least is the steadiest figure; CPU time stretches less than
wall time).  `--against FILE[,FILE]` (saved copies of xlayer/metrics/keys.py and join.py, say: each
NAME.py stands in for xlayer.metrics.NAME, loaded in the order given) runs those modules too, in
turns with the installed ones (A, B, A, B ...: both meet the same machine load), and prints both and
whether their tables are equal (schema, rows, order).
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


def _load_join(paths: str | None):
    """Return the join module: the installed one, or with the files `paths` (comma-separated, each NAME.py
    loaded as xlayer.metrics.NAME, in that order) in place of the installed modules of those names."""
    if paths:
        import importlib.util

        import xlayer  # noqa: F401 - the package first: the modules' own imports need it
        for path in paths.split(","):
            name = "xlayer.metrics." + os.path.splitext(os.path.basename(path))[0]
            spec = importlib.util.spec_from_file_location(name, path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[name] = mod
            spec.loader.exec_module(mod)
    from xlayer.metrics import join as mjoin
    return mjoin


def _digest(tables: dict) -> str:
    """Return a digest of the tables' schemas and contents, in row order."""
    import hashlib

    h = hashlib.sha256()
    for name, t in tables.items():
        h.update(f"{name}:{t.schema}".encode())
        h.update(t.hash_rows(seed=1).to_numpy().tobytes())
    return h.hexdigest()[:16]


def child(bundle: str, spill: str, module: str | None = None) -> None:
    """Run the stages once and print one JSON line: {stage: [wall s, cpu s]}, rows, peak RSS."""
    mjoin = _load_join(module)
    from xlayer.metrics import MODULES, open_timeline

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
    digest = _digest(tables)
    del tables
    w, c = time.perf_counter(), _cpu()
    tl.close()
    out["close"] = [time.perf_counter() - w, _cpu() - c]
    print(json.dumps({"stages": out, "rows": rows, "digest": digest, "rss_open_mb": rss_open,
                      "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def _report(bundle: str, label: str, runs: list[dict]) -> None:
    """Print the least of each stage's times and of the peak RSS over `runs`."""
    print(f"bundle {bundle} ({label}), least of {len(runs)}: rows {runs[0]['rows']}")
    for stage in runs[0]["stages"]:
        wall = min(r["stages"][stage][0] for r in runs)
        cpu = min(r["stages"][stage][1] for r in runs)
        print(f"  {stage:14s} wall {wall:6.2f} s  cpu {cpu:6.2f} s")
    print(f"  peak RSS after open {min(r['rss_open_mb'] for r in runs):.0f} MB, "
          f"at the end {min(r['rss_mb'] for r in runs):.0f} MB")


def main() -> int:
    """Run the benchmark; return the exit code."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bundle", nargs="+")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--spill", choices=["auto", "yes", "no"], default="auto")
    ap.add_argument("--against", metavar="FILE[,FILE]",
                    help="other xlayer.metrics modules (NAME.py each) to time in turns with the installed ones")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--module", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.bundle[0], a.spill, a.module)
        return 0
    against = ",".join(os.path.abspath(f) for f in a.against.split(",")) if a.against else None
    variants = {"installed": None, **({f"against {a.against}": against} if against else {})}
    for bundle in a.bundle:
        runs: dict[str, list[dict]] = {v: [] for v in variants}
        for _ in range(a.repeat):
            for label, module in variants.items():
                cmd = [sys.executable, __file__, bundle, "--child", "--spill", a.spill]
                r = subprocess.run(cmd + (["--module", module] if module else []), capture_output=True, text=True)
                if r.returncode:
                    print(r.stderr[-3000:], file=sys.stderr)
                    return 1
                runs[label].append(json.loads(r.stdout.strip().splitlines()[-1]))
        for label, got in runs.items():
            _report(bundle, label, got)
        if a.against:
            same = len({r["digest"] for got in runs.values() for r in got}) == 1
            print(f"  tables {'identical' if same else 'DIFFERENT'} (schema, rows, order)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
