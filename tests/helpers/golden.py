"""Digests of what the shipped samples give: `xlayer analyze --json` and every `xlayer metrics` table.

A refactoring must leave both unchanged; tests/test_golden.py compares a fresh run with the digests
kept in tests/golden/samples.json.  A change meant to alter results regenerates them on purpose:
`python -m tests.helpers.golden --write` (and says why in its commit).
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import polars as pl

from xlayer.metrics.export import without_utc_times

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "samples"
GOLDEN = REPO / "tests" / "golden" / "samples.json"


def sample_dirs() -> list[Path]:
    """Return every shipped sample bundle directory, sorted by name."""
    return sorted(p.parent for p in SAMPLES.glob("*/bundle.json"))


def _xlayer(*args: str, cache: str) -> str:
    r = subprocess.run([sys.executable, "-m", "xlayer", *args], capture_output=True, text=True,
                       env={**os.environ, "XLAYER_CACHE_DIR": cache}, cwd=REPO, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"xlayer {' '.join(args)} exited {r.returncode}: {r.stderr[-2000:]}")
    return r.stdout


def table_digest(df: pl.DataFrame) -> str:
    """Return a digest of a table's schema and rows, independent of row order."""
    h = hashlib.sha256()
    h.update(json.dumps([[n, str(t)] for n, t in df.schema.items()]).encode())
    lines = sorted(df.write_ndjson().splitlines()) if df.height else []
    for ln in lines:
        h.update(ln.encode())
        h.update(b"\n")
    return f"{df.height}:{h.hexdigest()[:32]}"


def digests(bundle: Path) -> dict:
    """Return {"analyze": the JSON analyze prints, "tables": {name: digest}} for one bundle."""
    with tempfile.TemporaryDirectory(prefix="xlayer-golden-") as tmp:
        cache = str(Path(tmp) / "cache")
        an = json.loads(_xlayer("analyze", str(bundle), "--json", "-q", cache=cache))
        out = Path(tmp) / "metrics"
        _xlayer("metrics", str(bundle), "-o", str(out), "-q", cache=cache)
        # the UTC twins of the time columns are left out: they repeat the recorded Int64 values
        tables = {p.stem: table_digest(without_utc_times(p.stem, pl.read_parquet(p)))
                  for p in sorted(out.glob("*.parquet"))}
    return {"analyze": an, "tables": tables}


def main(argv: list[str]) -> int:
    """Print (or with --write, store) the digests of every shipped sample; return the exit code."""
    got = {b.name: digests(b) for b in sample_dirs()}
    if "--write" in argv:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        print(f"wrote {GOLDEN.relative_to(REPO)} ({len(got)} samples)")
    else:
        print(json.dumps(got, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
