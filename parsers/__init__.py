"""Capture formats to columnar tables: pcap/pcapng, radiotap/802.11, Ethernet/IP/TCP, into polars.

`read_capture(path)` returns a whole file as one polars table in the schema of `parsers.schema`;
`iter_tables(path)` streams it in chunks with bounded memory. Imports nothing from `xlayer`.
"""
from __future__ import annotations

import os as _os

# polars' allocator keeps freed pages for 10 s by default: on captures larger than memory that
# idle memory doubles the peak.  Returned within 100 ms instead (only if polars is not loaded yet,
# and a value the user set wins).
_os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:100,muzzy_decay_ms:100")

_LAZY = {
    "IngestStats": "decode.ingest", "iter_tables": "decode.ingest", "read_capture": "decode.ingest",
    "CaptureError": "formats.records",
    "read_ss": "hoststate.ss", "read_tcpinfo_jsonl": "hoststate.tcpinfo", "read_iperf3_json": "hoststate.iperf3",
    "read_flent": "hoststate.iperf3",
}


def __getattr__(name: str):
    # Lazy, so that `import parsers.schema` does not pull in every decoder.
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'parsers' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{mod}", __name__), name)


__all__ = sorted(_LAZY)
