"""The `xlayer report` command: a bundle's analysis as one self-contained HTML page (xlayer.report.page)."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from xlayer.bundle.manifest import BundleError
from xlayer.cli.common import add_bundle_argument, add_timeline_options
from xlayer.signals import stop_on_signals, stopped


def cmd_report(args: argparse.Namespace) -> int:
    """Analyze a bundle and write its HTML report; return the exit code."""
    from xlayer.attribution.analyze import analyze
    from xlayer.cli.common import open_from_args, require_packets, steps
    from xlayer.cli.metrics import os_error_text
    from xlayer.report.page import build_report
    from xlayer.text import safe_text

    stop_on_signals()
    before = _identity(args.output)
    try:
        with steps("report", args.quiet) as step:
            tl = open_from_args(args, step)
            kinds = {e.kind for e in tl.bundle.captures}
            if kinds != {"tcp_state"}:      # host TCP state alone still has its cwnd and RTO panels
                require_packets(tl)
            step("metric tables")
            tl.tables(progress=lambda name: step(f"table {name}"))
            step("analysis")
            analysis = analyze(tl)
            rep = build_report(tl, analysis, args.output, title=args.title, progress=step)
    except BundleError as exc:
        print(f"xlayer: {safe_text(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"xlayer: {os_error_text(exc, args)}; {_left(args.output, before)}", file=sys.stderr)
        return 1
    except BaseException as exc:
        if not stopped(exc):
            raise
        print(f"xlayer: interrupted; {_left(args.output, before)}", file=sys.stderr)
        return 130
    n = len(analysis.incidents)
    print(f"wrote {safe_text(rep.path)} ({rep.size_bytes / 1e6:.1f} MB): {len(rep.panels)} panels, "
          f"{n} incident{'s' if n != 1 else ''}")
    for title, why in rep.omitted.items():
        print(f"  left out: {title}: {safe_text(why)}")
    return 0


def _identity(path: str) -> tuple[int, int, int] | None:
    """Return what tells one file at `path` from another written there later (None: no file)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns


def _left(path: str, before: tuple[int, int, int] | None) -> str:
    """Return, in words, what a failed or interrupted run left at `path` (the page is renamed in whole)."""
    from xlayer.text import safe_text

    now = _identity(path)
    if now is not None and now != before:
        return f"{safe_text(path)} was written"
    return f"no report written ({safe_text(path)} {'unchanged' if now is not None else 'not created'})"


def register(subparsers: Any) -> None:
    """Add the `report` command to the xlayer argument parser; return None."""
    p = subparsers.add_parser(
        "report", help="write a self-contained HTML page: every layer on one time axis, incidents shaded",
        description="Read BUNDLE, align its clocks, find the incidents (as `xlayer analyze`), and write one "
        "HTML page that works offline: goodput, station PHY rate/retries/airtime/RSSI, AP sojourn and drops, "
        "TCP retransmissions, host cwnd/srtt/rto beside the one-way delay, on linked time axes with the "
        "incident windows shaded, plus tables of incidents, flows, clock alignment and the bundle's tags.")
    add_bundle_argument(p)
    p.add_argument("-o", "--output", metavar="FILE", default="report.html", help="page to write (default report.html)")
    p.add_argument("--title", help="page title (default: the bundle's directory name)")
    add_timeline_options(p)
    p.set_defaults(func=cmd_report)
