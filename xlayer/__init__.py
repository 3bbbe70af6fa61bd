"""xlayer: passive multi-layer capture and cross-layer analysis of Wi-Fi and wired networks."""
from __future__ import annotations

import os as _os

# polars' allocator keeps freed pages for 10 s by default: on captures larger than memory that
# idle memory doubles the peak.  Returned at once instead: even 100 ms of freed pages, on the
# working tables of a million-row capture, added some 130 MB to the peak (only if polars is not
# loaded yet, and a value the user set wins).
_os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:0,muzzy_decay_ms:0")

from parsers import CaptureError, IngestStats, iter_tables, read_capture
from parsers.schema import COLUMNS, SCHEMA

from xlayer.bundle.manifest import Bundle, BundleError, CaptureEntry, open_bundle
from xlayer.timeline.open import Timeline, open_timeline

__all__ = ["COLUMNS", "SCHEMA", "Bundle", "BundleError", "CaptureEntry", "CaptureError", "IngestStats",
           "Timeline", "iter_tables", "open_bundle", "open_timeline", "read_capture"]
__version__ = "0.1.0"
