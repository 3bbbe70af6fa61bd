"""Every shipped sample gives the `analyze --json` and metric tables kept in tests/golden/samples.json.

The redesign moved code, not results: this compares a fresh run of each sample with the outputs
recorded before it.  A change meant to alter results rewrites them with
`python -m tests.helpers.golden --write` and says why in its commit.
"""
from __future__ import annotations

import json

import pytest

from tests.helpers.golden import GOLDEN, digests, sample_dirs

KEPT = json.loads(GOLDEN.read_text()) if GOLDEN.is_file() else {}


@pytest.mark.parametrize("bundle", sample_dirs(), ids=lambda p: p.name)
def test_sample_outputs_unchanged(bundle):
    assert bundle.name in KEPT, f"no recorded outputs for {bundle.name}: python -m tests.helpers.golden --write"
    got = digests(bundle)
    want = KEPT[bundle.name]
    assert got["tables"] == want["tables"]
    assert got["analyze"] == want["analyze"]
