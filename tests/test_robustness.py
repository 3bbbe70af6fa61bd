"""Hostile input: the corpus's malformed files and mutated corpus files never surface a traceback."""
from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parsers import IngestStats, read_capture
from parsers.formats.records import CaptureError
from tests.helpers.common import CORPUS, REPO, capture_files, corpus_or_skip, deadline
from tests.helpers.mutate import mutate

MALFORMED = [f for f in capture_files() if "/malformed/" in f]
# Kept in malformed/ but well-formed: the first crashed another tool (tshark flags nothing in it
# either); the second holds frames cut by a 68-byte snap length, which is normal capture practice:
# columns past the cut are null, and nothing in the file contradicts itself.
WELL_FORMED = {"radiotap/malformed/aircrack-ng__floatingpoint_exception.pcap",
               "wired/malformed/zeek__tcp_truncated-header.pcap"}
SEEDS = [f for f in capture_files(include_malformed=False)
         if (CORPUS / f).exists() and (CORPUS / f).stat().st_size < 64 << 10] if CORPUS.exists() else []


def check_file(path, decoder: str) -> IngestStats | None:
    """Read a file; return its stats, or None if it was refused with a CaptureError naming it."""
    st = IngestStats()
    try:
        df = read_capture(path, decoder=decoder, stats=st)
    except CaptureError as exc:
        assert os.path.basename(path) in str(exc)
        return None
    assert df.height == st.records == st.decoded + st.malformed
    internal = [r for r in st.malformed_reasons if r.startswith("internal error")]
    assert not internal, f"decoder bug surfaced on {path}: {internal}"
    return st


@pytest.mark.parametrize("rel", MALFORMED)
@pytest.mark.parametrize("decoder", ["fast", "reference"])
def test_malformed_corpus_file(rel: str, decoder: str) -> None:
    corpus_or_skip()
    with deadline(30):
        st = check_file(CORPUS / rel, decoder)
    if st is not None and rel not in WELL_FORMED:
        # Something was wrong with each of these files: it must show in the counts.
        assert st.malformed or st.error or st.truncated_tail or st.warnings or st.skipped_bytes, \
            f"{rel}: read as if nothing were wrong"


@pytest.mark.parametrize("rel", MALFORMED)
def test_malformed_cli_no_traceback(rel: str) -> None:
    corpus_or_skip()
    proc = subprocess.run([sys.executable, "-m", "xlayer", "info", str(CORPUS / rel)],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert "Traceback" not in proc.stderr
    assert proc.returncode in (0, 2), proc.stderr
    if proc.returncode == 2:
        assert len(proc.stderr.strip().splitlines()) == 1 and os.path.basename(rel) in proc.stderr


@settings(max_examples=int(os.environ.get("XLAYER_FUZZ_INPUTS", "300")), deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck), database=None)
@given(seed_index=st.integers(min_value=0, max_value=10**6), mut_seed=st.integers(min_value=0))
def test_mutated_corpus_files(seed_index: int, mut_seed: int) -> None:
    """A short fuzz run (benchmarks/fuzz.py runs the long one): mutated corpus files, both decoders."""
    corpus_or_skip()
    assert SEEDS
    rel = SEEDS[seed_index % len(SEEDS)]
    data = mutate((CORPUS / rel).read_bytes(), random.Random(mut_seed))
    with tempfile.TemporaryDirectory() as d:
        target = os.path.join(d, os.path.basename(rel))
        with open(target, "wb") as fh:
            fh.write(data)
        for decoder in ("fast", "reference"):
            with deadline(20):
                check_file(target, decoder)
