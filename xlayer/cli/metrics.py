"""The `xlayer metrics` command: a bundle's metric tables, on the reference clock, as Parquet."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from xlayer.bundle.manifest import BundleError
from xlayer.cli.common import add_bundle_argument, add_timeline_options
from xlayer.signals import stop_on_signals, stopped

HOST_ONLY = {"host_state"}      # tables read from host-state files alone (no packet capture needed)


def cmd_metrics(args: argparse.Namespace) -> int:
    """Compute and write the metric tables of a bundle; return the exit code."""
    from xlayer.cli.common import open_from_args, require_packets, steps
    from xlayer.metrics import table_names
    from xlayer.metrics.export import Written, write_metrics
    from xlayer.text import safe_text

    if args.list:
        from xlayer.metrics.export import table_doc

        for name in table_names():
            print(f"{name}: {table_doc(name)['row']}")
        return 0
    if not args.bundle or not args.output:
        print("xlayer: metrics: BUNDLE and -o/--output DIR are required", file=sys.stderr)
        return 2
    stop_on_signals()
    names = args.tables.split(",") if args.tables else None
    written = Written()
    try:
        with steps("metrics", args.quiet) as step:
            tl = open_from_args(args, step)
            if names is None or set(names) - HOST_ONLY:
                require_packets(tl)          # host-state tables alone need no packet capture
            man = write_metrics(tl, args.output, names, progress=step, written=written)
    except (BundleError, KeyError) as exc:
        print(f"xlayer: {safe_text(exc.args[0] if isinstance(exc, KeyError) else exc)}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"xlayer: {os_error_text(exc, args)}; {_left(args.output, written)}", file=sys.stderr)
        return 1
    except BaseException as exc:
        if not stopped(exc):
            raise
        print(f"xlayer: interrupted; {_left(args.output, written)}", file=sys.stderr)
        return 130
    for name, t in man["tables"].items():
        print(f"{name:18s} {t['rows']:>9d} rows  {t['file']}")
    for f, err in man["read_errors"].items():
        print(f"warning: {safe_text(f)}: {safe_text(err)}", file=sys.stderr)
    print(f"wrote {len(man['tables'])} tables to {safe_text(args.output)} (reference clock: "
          f"{safe_text(man['alignment']['reference'])})")
    return 0


def _left(out: str, written: Any) -> str:
    """Return what a failed or interrupted run left in the output directory, in words."""
    from xlayer.text import safe_text

    if not written.manifest:
        return f"nothing written to {safe_text(out)}"
    n = len(written.tables)
    if not n:
        return f"{safe_text(out)}/metrics.json lists no tables (complete: false)"
    return (f"{safe_text(out)}/metrics.json lists the {n} table{'s' if n != 1 else ''} written before it "
            "(complete: false)")


def os_error_text(exc: OSError, args: argparse.Namespace) -> str:
    """Return one line saying which directory could not be written (or which file read) and why.

    An OutputError names the output's directory; any other error came from reading the bundle or from
    the scratch files beside it: the decode cache, or with --no-cache the temporary directory.
    """
    import errno
    import os
    import tempfile

    from xlayer.metrics.export import OutputError, reason
    from xlayer.text import safe_text

    why = safe_text(reason(exc))
    if isinstance(exc, OutputError):
        return f"cannot write {safe_text(exc.filename)}: {why}"
    if exc.filename is not None:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return f"cannot write {safe_text(os.path.dirname(str(exc.filename)) or '.')}: {why}"
        return f"{safe_text(exc.filename)}: {why}"
    if getattr(args, "no_cache", False):
        where = f"the temporary directory {tempfile.gettempdir()} (TMPDIR)"
    else:
        from xlayer.timeline.cache import cache_root

        where = f"the decode cache {cache_root()} (XLAYER_CACHE_DIR)"
    return f"cannot write {safe_text(where)}: {why}"


def register(subparsers: Any) -> None:
    """Add the `metrics` command to the xlayer argument parser; return None."""
    p = subparsers.add_parser(
        "metrics", help="write a bundle's per-layer metric tables (flows, TCP events, stations, join) as Parquet",
        description="Read every capture of BUNDLE, put it on the reference clock (as `xlayer align`), and write "
        "each metric table to DIR/NAME.parquet with DIR/metrics.json documenting every column. "
        "`--list` names the tables.")
    add_bundle_argument(p, optional=True)
    p.add_argument("-o", "--output", metavar="DIR", help="directory to write (created if missing)")
    p.add_argument("--tables", metavar="A,B", help="only these tables (default: all)")
    p.add_argument("--list", action="store_true", help="list the tables and what a row of each is")
    add_timeline_options(p)
    p.set_defaults(func=cmd_metrics)
