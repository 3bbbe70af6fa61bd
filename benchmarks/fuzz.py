#!/usr/bin/env python3
"""Long fuzz run: mutate corpus captures and read each mutant with both decoders.

    python benchmarks/fuzz.py [--inputs 100000] [--jobs 2] [--seed 1]

Counts inputs, refusals (CaptureError), rows, malformed rows; any other exception, any internal-error
reason and any input taking over 20 s is a failure, saved under fuzz-failures/ for replay.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
CORPUS = REPO.parent / "shared" / "corpus"


def _seeds() -> list[Path]:
    out = []
    for sub in ("radiotap", "wired", "pcapng"):
        for p in sorted((CORPUS / sub).rglob("*")):
            if p.suffix in (".pcap", ".pcapng", ".cap", ".dump") and p.stat().st_size < (64 << 10):
                out.append(p)
    return out


def _work(args: tuple[int, int, int]) -> dict:
    from parsers import IngestStats, read_capture
    from tests.helpers.mutate import mutate
    from parsers.formats.records import CaptureError

    start, count, seed = args
    seeds = [p.read_bytes() for p in _seeds()]
    tally = {"inputs": 0, "refused": 0, "rows": 0, "malformed": 0, "failures": []}
    tmp = REPO / "fuzz-work" / f"{os.getpid()}.bin"
    tmp.parent.mkdir(exist_ok=True)
    for i in range(start, start + count):
        rng = random.Random(seed * 1_000_003 + i)
        data = mutate(seeds[rng.randrange(len(seeds))], rng)
        tmp.write_bytes(data)
        tally["inputs"] += 1
        for decoder in ("fast", "reference"):
            st = IngestStats()
            t0 = time.monotonic()
            try:
                read_capture(tmp, decoder=decoder, stats=st)
            except CaptureError:
                tally["refused"] += 1
                continue
            except Exception as exc:  # noqa: BLE001 - the point is to catch anything
                tally["failures"].append((i, decoder, f"{type(exc).__name__}: {exc}", data))
                continue
            if time.monotonic() - t0 > 20:
                tally["failures"].append((i, decoder, "slow (> 20 s)", data))
            bad = [r for r in st.malformed_reasons if r.startswith("internal error")]
            if bad:
                tally["failures"].append((i, decoder, bad[0], data))
            tally["rows"] += st.records
            tally["malformed"] += st.malformed
    tmp.unlink(missing_ok=True)
    return tally


def main() -> int:
    """Run the fuzz campaign and print the counts; return 1 if anything failed."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inputs", type=int, default=100_000)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if not CORPUS.exists():
        print(f"corpus not found at {CORPUS}")
        return 2
    per = -(-a.inputs // (a.jobs * 50))
    tasks = [(s, min(per, a.inputs - s), a.seed) for s in range(0, a.inputs, per)]
    total = {"inputs": 0, "refused": 0, "rows": 0, "malformed": 0, "failures": []}
    t0 = time.time()
    with mp.Pool(a.jobs) as pool:
        for t in pool.imap_unordered(_work, tasks):
            for k in ("inputs", "refused", "rows", "malformed"):
                total[k] += t[k]
            total["failures"] += t["failures"]
            print(f"\r{total['inputs']} inputs, {len(total['failures'])} failures", end="", flush=True)
    print()
    out = REPO / "fuzz-failures"
    for i, dec, msg, data in total["failures"]:
        out.mkdir(exist_ok=True)
        (out / f"input-{i}.bin").write_bytes(data)
        print(f"FAIL input {i} ({dec}): {msg}")
    print(f"inputs: {total['inputs']} (x2 decoders), refused: {total['refused']}, rows: {total['rows']}, "
          f"malformed rows: {total['malformed']}, failures: {len(total['failures'])}, "
          f"{time.time() - t0:.0f} s")
    return 1 if total["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
