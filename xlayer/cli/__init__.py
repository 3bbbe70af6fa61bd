"""The `xlayer` command line: one module per command, each with `register(subparsers)`.

`COMMANDS` is the registry, in the order `xlayer --help` lists them; adding a command is one module
here and one entry in the list.
"""
from xlayer.cli import (
    align,
    analyze,
    bundle,
    cache,
    campaign,
    capture,
    ingest,
    lab,
    metrics,
    report,
    sim,
)

COMMANDS = (ingest, bundle, capture, lab, sim, align, metrics, analyze, report, cache, campaign)

__all__ = ["COMMANDS"]
