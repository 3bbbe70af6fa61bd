"""xlayer: passive multi-layer capture and cross-layer analysis of Wi-Fi and wired networks."""
from __future__ import annotations

from parsers import IngestStats, iter_tables, read_capture
from parsers.schema import COLUMNS, SCHEMA

__all__ = ["COLUMNS", "SCHEMA", "IngestStats", "iter_tables", "read_capture"]
__version__ = "0.1.0"
