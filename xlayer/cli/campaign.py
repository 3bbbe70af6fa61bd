"""The `xlayer campaign` command: run many bundles on Dask into one dataset, summarize it, draw its report."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from xlayer.text import safe_text


def _guard(fn: Any) -> Any:
    """Return `fn` with a CampaignError turned into one line on stderr and exit 2."""
    def run(args: argparse.Namespace) -> int:
        from xlayer.campaign.store import CampaignError

        try:
            return fn(args)
        except CampaignError as exc:
            print(f"xlayer: {safe_text(exc)}", file=sys.stderr)
            return 2
    return run


def cmd_run(args: argparse.Namespace) -> int:
    """Run the campaign; return 0, or 1 if some bundle failed (listed in campaign.json and here)."""
    from xlayer.campaign.run import parse_window, run_campaign
    from xlayer.metrics.export import OutputError
    from xlayer.signals import stop_on_signals, stopped

    stop_on_signals()
    window = parse_window(args.window)
    try:
        res = run_campaign(args.bundles, args.output, scheduler=args.scheduler, workers=args.workers,
                           window=window, progress=not args.quiet)
    except OSError as exc:
        from xlayer.metrics.export import reason

        where = exc.filename if isinstance(exc, OutputError) else args.output
        print(f"xlayer: cannot write {safe_text(where)}: {safe_text(reason(exc))}; campaign.json lists every "
              "bundle finished so far", file=sys.stderr)
        return 1
    except BaseException as exc:
        if not stopped(exc):
            raise
        print(f"xlayer: interrupted; {safe_text(args.output)}/campaign.json lists every bundle finished so far "
              "(run again to go on)", file=sys.stderr)
        return 130
    print(f"campaign {safe_text(args.output)}: {len(res.done)} analyzed, {len(res.skipped)} already done "
          f"(skipped), {len(res.errors)} failed; over the campaign's {res.counts['done']} bundles done: "
          f"{res.counts['malformed_records']:,} malformed records, {res.counts['skipped_bytes']:,} capture bytes "
          "skipped")
    for path, err in sorted(res.errors.items()):
        print(f"  failed: {safe_text(path)}: {safe_text(err)}")
    return 1 if res.errors else 0


def cmd_summary(args: argparse.Namespace) -> int:
    """Print the campaign's statistics per condition (text or JSON); return 0."""
    from xlayer.campaign.summary import Thresholds, summarize, summary_text

    s = summarize(args.campaign, _tags(args.by), Thresholds(args.good, args.bad))
    if args.json:
        json.dump(s, sys.stdout, indent=1, allow_nan=False, default=str)
        print()
    else:
        print(summary_text(s))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """Write the campaign's HTML report; return 0."""
    from pathlib import Path

    from xlayer.campaign.report import write_campaign_report
    from xlayer.campaign.summary import Thresholds
    from xlayer.signals import stop_on_signals, stopped

    stop_on_signals()
    try:
        n = write_campaign_report(args.campaign, Path(args.output), _tags(args.by), Thresholds(args.good, args.bad))
    except OSError as exc:
        from xlayer.metrics.export import reason

        print(f"xlayer: cannot write {safe_text(args.output)}: {safe_text(reason(exc))}", file=sys.stderr)
        return 1
    except BaseException as exc:
        if not stopped(exc):
            raise
        print(f"xlayer: interrupted; {safe_text(args.output)} not written", file=sys.stderr)
        return 130
    print(f"wrote {safe_text(args.output)}: {n} conditions")
    return 0


def _tags(text: str | None) -> list[str]:
    """Return --by TAG,TAG as a list (empty: one condition of every bundle)."""
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def _add_by(p: argparse.ArgumentParser) -> None:
    p.add_argument("--by", metavar="TAG,TAG", default=None,
                   help="the tags that make a service condition (default: all bundles one condition)")
    p.add_argument("--good", type=float, default=100.0, metavar="KB_PER_S",
                   help="class 'good' above this mean goodput, kB/s (default 100; study 003)")
    p.add_argument("--bad", type=float, default=30.0, metavar="KB_PER_S",
                   help="class 'bad' from this up to --good, 'unacceptable' below, kB/s (default 30)")


def register(subparsers: Any) -> None:
    """Add the `campaign` command and its subcommands to the xlayer argument parser; return None."""
    p = subparsers.add_parser(
        "campaign", help="analyze many bundles on Dask into one dataset; statistics per condition; report",
        description="A campaign: many bundles analyzed as Dask tasks into a Parquet dataset partitioned by their "
        "tags (hive style) with campaign.json; statistics per service condition with 95 % confidence intervals "
        "and theory bounds; one HTML report.")
    sub = p.add_subparsers(dest="campaign_cmd", required=True)
    r = sub.add_parser("run", help="analyze every bundle into OUT (re-runs skip bundles already done)",
                       description="Analyze every bundle (a directory with bundle.json; a directory argument is "
                       "searched for bundles) as one Dask task, as `xlayer analyze` does, plus per-layer summaries "
                       "and per-second series; write each result as it lands. A bundle that fails is listed with "
                       "its error. Exit 1 if some bundle failed, 2 on bad arguments, 130 if interrupted.")
    r.add_argument("bundles", nargs="+", metavar="BUNDLE_OR_DIR",
                   help="bundle directories (with bundle.json), or directories searched for them")
    r.add_argument("-o", "--output", required=True, metavar="OUT", help="campaign directory (created)")
    r.add_argument("--scheduler", metavar="ADDRESS", help="an existing Dask scheduler (tcp://HOST:8786); "
                   "default: a local cluster")
    r.add_argument("--workers", type=int, default=None, metavar="N",
                   help="local cluster worker processes, one thread each (default: CPU count)")
    r.add_argument("--window", metavar="A:B", help="analysis window, seconds from each bundle's first packet")
    r.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    r.set_defaults(func=_guard(cmd_run))
    s = sub.add_parser("summary", help="statistics per condition: n, mean, std, confidence interval, median, p5/p95, bounds",
                       description="Per condition (--by tags): n, mean, standard deviation, 95 % confidence "
                       "interval (Student t; 1.96 for n >= 30), median, p5 and p95 of every metric; incidents per "
                       "cause; per-second distributions and CDFs; a class by mean goodput; theory bounds beside "
                       "the measured goodput.")
    s.add_argument("campaign", metavar="OUT", help="campaign directory (xlayer campaign run -o OUT)")
    _add_by(s)
    s.add_argument("--json", action="store_true", help="print the summary as JSON")
    s.set_defaults(func=_guard(cmd_summary))
    rp = sub.add_parser("report", help="write the campaign's HTML report (Bokeh, works offline)")
    rp.add_argument("campaign", metavar="OUT", help="campaign directory")
    rp.add_argument("-o", "--output", required=True, metavar="HTML", help="report file (written whole)")
    _add_by(rp)
    rp.set_defaults(func=_guard(cmd_report))
