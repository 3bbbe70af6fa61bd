"""The `xlayer analyze` command: why did throughput drop, in one readable summary or as JSON."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from xlayer.cli.common import add_timeline_options
from xlayer.signals import stop_on_signals
from xlayer.text import clock_text


def summary_text(an: Any) -> str:
    """Return the analysis as readable text: flows, then incidents ranked with one sentence each."""
    from xlayer.text import safe_text as t

    lines = []
    tags = ", ".join(f"{t(k)}={t(v)}" for k, v in an.tags.items())
    if tags:
        lines.append(f"bundle: {tags}")
    lines.append(f"reference clock: {t(an.alignment.get('reference'))}")
    lines.append(f"flows ({len(an.flows)}):")
    for f in an.flows:
        st = f" to/from {t(f['station'])}" if f.get("station") else ""
        lines.append(f"  {t(f['flow'])}{st}: {f['goodput_bps'] / 1e6:.2f} Mbit/s goodput at {t(f['vantage'])}, "
                     f"{clock_text(f['start'])}-{clock_text(f['end'])}")
    if not an.incidents:
        lines.append("no incident: no flow dropped below its steady state and no condition held")
    else:
        lines.append(f"incidents ({len(an.incidents)}), most certain first:")
    for k, inc in enumerate(an.incidents, 1):
        span = f"{clock_text(inc.start_ns / 1e9)}-{clock_text(inc.end_ns / 1e9)} ({(inc.end_ns - inc.start_ns) / 1e9:.1f} s)"
        if not inc.findings:
            lines.append(f" {k}. {span} {inc.kind}: no cause found; flows {t(', '.join(inc.flows))}")
            continue
        top = inc.findings[0]
        lines.append(f" {k}. {span} {inc.kind}: {top.cause} ({top.confidence:.2f}): {t(top.summary)}")
        others = ", ".join(f"{c.cause} {c.confidence:.2f}" for c in inc.findings[1:])
        if others:
            lines.append(f"    also: {others}")
        if top.frames:
            ex = "; ".join(f"{t(fr.capture_file)} #{fr.frame} ({t(fr.what)})" for fr in top.frames[:3])
            lines.append(f"    frames: {ex}")
    for n in an.notes:
        lines.append(f"note: {t(n)}")
    return "\n".join(lines)


def cmd_analyze(args: argparse.Namespace) -> int:
    """Analyze a bundle and print the summary or JSON; return the exit code."""
    from xlayer.attribution.analyze import analyze
    from xlayer.attribution.drops import DropConfig
    from xlayer.cli.common import open_from_args, steps

    stop_on_signals()
    cfg = DropConfig(threshold=args.threshold, min_duration_s=args.min_duration,
                     window=tuple(args.window) if args.window else None)
    with steps("analyze", args.quiet or args.json) as step:
        tl = open_from_args(args, step)
        # Every metric table, not only those the causes read: kept in the decode cache, so that `report`
        # and `metrics` after this command read them back instead of computing them again.
        tl.tables(progress=lambda name: step(f"table {name}"))
        an = analyze(tl, cfg, progress=step)
    if args.json:
        json.dump(an.as_json(), sys.stdout, indent=2, allow_nan=False, default=str)
        print()
    else:
        print(summary_text(an))
    return 0


def register(subparsers: Any) -> None:
    """Add the `analyze` command to the xlayer argument parser; return None."""
    p = subparsers.add_parser(
        "analyze", help="find where throughput dropped and rank the causes, with the evidence",
        description="Align BUNDLE's captures, find windows where a flow's goodput fell well below its own "
        "steady state (or a condition that held all run), and score every cause on every layer's evidence.")
    p.add_argument("bundle", metavar="BUNDLE", help="bundle directory (or its bundle.json)")
    p.add_argument("--json", action="store_true",
                   help='print {"incidents": [{start, end, cause, confidence, causes, flows, stations, evidence, '
                   'frames}], "flows": [...], "alignment": {...}} (times: reference epoch seconds)')
    p.add_argument("--threshold", type=float, default=0.5, metavar="F",
                   help="a drop is goodput below F x the flow's steady state (default 0.5)")
    p.add_argument("--min-duration", type=float, default=0.3, metavar="S", help="shortest drop, seconds (default 0.3)")
    p.add_argument("--window", type=float, nargs=2, metavar=("FROM", "TO"),
                   help="analysis window, seconds from the bundle's first packet (study 001 used 50 100)")
    add_timeline_options(p)
    p.set_defaults(func=cmd_analyze)
