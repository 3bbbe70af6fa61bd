"""xlayer: passive multi-layer capture and cross-layer analysis of Wi-Fi and wired networks."""
from __future__ import annotations

from parsers import CaptureError, IngestStats, iter_tables, read_capture
from parsers.schema import COLUMNS, SCHEMA

from .bundle import Bundle, BundleError, CaptureEntry, open_bundle

__all__ = ["COLUMNS", "SCHEMA", "Bundle", "BundleError", "CaptureEntry", "CaptureError", "IngestStats",
           "iter_tables", "open_bundle", "read_capture"]
__version__ = "0.1.0"
