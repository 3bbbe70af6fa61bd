"""pytest set-up for the whole suite: hypothesis runs a fixed set of examples under CI.

Shared helpers (the corpus, tshark, cached ns-3 bundles, deadlines) live in tests/helpers/.
"""
from __future__ import annotations

import os
import tempfile

from hypothesis import settings

# The decode cache of every command a test runs goes to a directory of this run's own, not the user's.
os.environ.setdefault("XLAYER_CACHE_DIR", tempfile.mkdtemp(prefix="xlayer-test-cache-"))

# CI runs a fixed set of examples (a red run must mean a change broke something); local runs explore.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")


def pytest_sessionfinish(session, exitstatus):  # noqa: ARG001 - pytest hook signature
    """Remove this run's decode cache (only the directory this file made; by the controller, once the
    workers that share it are done)."""
    import shutil

    if hasattr(session.config, "workerinput"):
        return

    d = os.environ.get("XLAYER_CACHE_DIR", "")
    if os.path.basename(d).startswith("xlayer-test-cache-"):
        shutil.rmtree(d, ignore_errors=True)
