"""xlayer: passive multi-layer capture and cross-layer analysis of Wi-Fi and wired networks.

Why did throughput drop?  xlayer reads a bundle of captures from several vantage points (monitor-mode
802.11 radiotap sniffers, wired pcaps, host TCP state samples), puts them on one clock, joins the same
packet across captures and layers, computes per-layer metric tables, finds the windows where a flow's
throughput dropped and ranks their causes with the evidence behind them.

    import xlayer
    b = xlayer.open_bundle("samples/sim-udp_overflow")   # the manifest, validated
    tl = xlayer.open_timeline(b)                         # decoded once, aligned; cached between runs
    tl.flows()                                           # any metric table by name (polars)
    an = xlayer.analyze(tl)                              # incidents, ranked causes, evidence
    print(an.as_json()["incidents"][0]["cause"])

The package follows the data: `parsers` (formats to tables) -> `xlayer.bundle` -> `xlayer.timeline`
(decode, align, cache) -> `xlayer.metrics` -> `xlayer.attribution` -> `xlayer.report`, with the
command line in `xlayer.cli` and capture and test beds in `xlayer.acquire` and `xlayer.testbeds`.
"""
from __future__ import annotations

import os as _os

# polars' allocator keeps freed pages for 10 s by default: on captures larger than memory that
# idle memory doubles the peak.  Returned at once, though, every page of a table freed and made again
# a moment later faults back in: the whole pipeline with analyze on a 1.05 M-frame bundle took 84.6 s
# of CPU and peaked at 1165 MB with no delay, 56.6 s and 1425 MB with 300 ms (only if polars is not
# loaded yet, and a value the user set wins).  Muzzy pages (given back with MADV_FREE) still count in
# RSS until the kernel runs short: with no muzzy delay the decayed pages leave at once, which took the
# same pipeline's peak from a median of 1080 MB to 1009 MB (4 runs each) at no cost in CPU time.
_os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:300,muzzy_decay_ms:0")

# name -> module it lives in; imported on first use, so that `import xlayer.signals` (the first thing
# every command does) does not pull in polars and the decoders.
_LAZY = {
    "CaptureError": "parsers", "IngestStats": "parsers", "iter_tables": "parsers", "read_capture": "parsers",
    "COLUMNS": "parsers.schema", "SCHEMA": "parsers.schema",
    "Bundle": "xlayer.bundle", "BundleError": "xlayer.bundle", "CaptureEntry": "xlayer.bundle",
    "open_bundle": "xlayer.bundle",
    "Timeline": "xlayer.timeline", "open_timeline": "xlayer.metrics",
    "analyze": "xlayer.attribution.analyze", "Analysis": "xlayer.attribution.incidents",
    "build_report": "xlayer.report",
}
__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name: str):
    if name == "__version__":
        # looked up on first use: reading the installed packages' metadata costs ~40 ms of every start
        from xlayer.text import package_version

        return package_version()
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'xlayer' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(mod), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | {"__version__"})
