"""pytest set-up for the whole suite: hypothesis runs a fixed set of examples under CI.

Shared helpers (the corpus, tshark, cached ns-3 bundles, deadlines) live in tests/helpers/.
"""
from __future__ import annotations

import os

from hypothesis import settings

# CI runs a fixed set of examples (a red run must mean a change broke something); local runs explore.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")
