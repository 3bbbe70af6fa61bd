"""Regenerate the shipped ns-3 sample bundles (samples/sim-*) and check them.

    python samples/make_samples.py                 # every ns-3 sample, into samples/
    python samples/make_samples.py --only sim-udp_overflow --out /tmp/s

Each sample is one `xlayer sim` scenario at its default length with a fixed seed, so the same ns-3
gives byte-identical captures; sim-<scenario> except sim-baseline, which is scenario `steady` (a
constant 802.11g rate: level goodput in a small bundle).  After writing a sample the script checks that the bundle is at most
5 MB and that the scenario's intended effect showed (truth.json ``expect.holds``), prints the sizes
per file, and exits 1 if any check failed.  The lab bundles (samples/lab-*, real Linux TCP in network
namespaces) come from ``sudo xlayer lab``; this script only reports their sizes.

The baseline sample's SSID is ``<script>alert(1)</script>``: whatever shows capture text (a report, a
notebook) must print it as text.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a clone without installing

MAX_BYTES = 5_000_000
HOSTILE_SSID = "<script>alert(1)</script>"


@dataclass(frozen=True)
class Sample:
    """One shipped ns-3 sample: the scenario (at its default length), the seed, the SSID."""

    name: str
    scenario: str
    seed: int = 1
    ssid: str | None = None      # None: the scenario's own


SAMPLES: tuple[Sample, ...] = (
    Sample("sim-baseline", "steady", ssid=HOSTILE_SSID),     # level goodput: no incident to find
    Sample("sim-performance_anomaly", "performance_anomaly"),
    Sample("sim-udp_overflow", "udp_overflow"),
    Sample("sim-fragmentation", "fragmentation"),
    Sample("sim-rts_cts", "rts_cts"),
    Sample("sim-delay_spike", "delay_spike"),
    Sample("sim-walkaway", "walkaway"),
)


def bundle_bytes(d: Path) -> int:
    """Return the bytes of every file in bundle directory `d` (hidden work files excluded)."""
    return sum(f.stat().st_size for f in d.rglob("*") if f.is_file() and not f.relative_to(d).parts[0].startswith("."))


def make(sample: Sample, out_root: Path, log=print) -> dict:
    """Simulate `sample` into out_root/<name>; return its truth."""
    from xlayer.testbeds.sim import get_scenario, run_scenario

    sc = get_scenario(sample.scenario)
    if sample.ssid is not None:
        sc.ssid = sample.ssid
    out = out_root / sample.name
    if out.exists():
        shutil.rmtree(out)
    return run_scenario(sample.scenario, out, seed=sample.seed, scenario=sc,
                        log=lambda m: log(f"  {sample.name}: {m}"))


def check(sample_dir: Path, truth: dict) -> list[str]:
    """Return what is wrong with a written sample (empty: nothing)."""
    problems = []
    n = bundle_bytes(sample_dir)
    if n > MAX_BYTES:
        problems.append(f"{sample_dir.name}: {n / 1e6:.2f} MB > {MAX_BYTES / 1e6:g} MB")
    if not truth["expect"]["holds"]:
        problems.append(f"{sample_dir.name}: the intended effect did not show: {truth['expect']['detail']}")
    return problems


def describe(sample_dir: Path) -> str:
    """Return one line per file with its size, and the total."""
    files = sorted(f for f in sample_dir.iterdir() if f.is_file())
    parts = ", ".join(f"{f.name} {f.stat().st_size / 1e6:.2f}" for f in files)
    return f"{sample_dir.name:26s} {bundle_bytes(sample_dir) / 1e6:5.2f} MB  ({parts})"


def main(argv: list[str] | None = None) -> int:
    """Regenerate and check the samples named (all by default); return the exit code."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", action="append", metavar="NAME", choices=[s.name for s in SAMPLES],
                   help="regenerate only this sample (repeatable)")
    p.add_argument("--out", type=Path, default=HERE, help="where the sample directories go (default: samples/)")
    args = p.parse_args(argv)

    from xlayer.testbeds.sim import ns3_available

    ok, why = ns3_available()
    if not ok:
        print(f"make_samples: {why}", file=sys.stderr)
        return 2
    chosen = [s for s in SAMPLES if not args.only or s.name in args.only]
    args.out.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    for s in chosen:
        t0 = time.monotonic()
        print(f"{s.name}: scenario {s.scenario}, seed {s.seed}" + (f", SSID {s.ssid!r}" if s.ssid else ""),
              flush=True)
        truth = make(s, args.out)
        problems += check(args.out / s.name, truth)
        causes = "; ".join(f"{c['cause']} ({c['role']}) {c['start_ts'] - 1.7e9:.2f}-{c['end_ts'] - 1.7e9:.2f} s"
                           for c in truth["causes"]) or "none"
        print(f"  {time.monotonic() - t0:.0f} s; expect: {truth['expect']['detail']}\n  causes: {causes}",
              flush=True)
    print("\nsizes (MB):")
    for s in chosen:
        print("  " + describe(args.out / s.name))
    for lab in sorted(HERE.glob("lab-*")):
        if (lab / "bundle.json").exists():
            print("  " + describe(lab))
            if bundle_bytes(lab) > MAX_BYTES:
                problems.append(f"{lab.name}: {bundle_bytes(lab) / 1e6:.2f} MB > {MAX_BYTES / 1e6:g} MB")
    for msg in problems:
        print(f"make_samples: {msg}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
