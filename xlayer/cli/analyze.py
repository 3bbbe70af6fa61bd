"""The `xlayer analyze` command: why did throughput drop, in one readable summary or as JSON."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from xlayer.attribution.drops import SHARED_KEPT, DropConfig
from xlayer.cli.common import add_bundle_argument, add_timeline_options
from xlayer.signals import stop_on_signals
from xlayer.text import clock_text, safe_text
from xlayer.timeline.align import equal_delay_sentence


def summary_text(an: Any, quiet: list[str] | None = None) -> str:
    """Return the analysis as readable text: flows, then incidents ranked with one sentence each.

    `quiet`: with no incident, the lines saying what was seen all the same (`quiet_lines`)."""
    from xlayer.text import safe_text as t

    lines = []
    tags = ", ".join(f"{t(k)}={t(v)}" for k, v in an.tags.items())
    if tags:
        lines.append(f"bundle: {tags}")
    when = _Times(an)
    lines.append(f"reference clock: {t(an.alignment.get('reference'))}{when.header()}")
    # a capture whose clock could not be trusted is said where the reader starts: its times may be off
    for c in an.alignment.get("captures") or []:
        status = c.get("status") or "aligned"
        if status != "aligned":
            unc = c.get("uncertainty_us")
            lines.append(f"  clock of {t(c.get('file'))}: {t(status)}"
                         + (f" (uncertainty {unc:,.0f} us)" if isinstance(unc, (int, float)) else ""))
    path = equal_delay_sentence(an.alignment)
    if path:
        lines.append(f"  {t(path)}")
    lines.append(f"flows ({len(an.flows)}):")
    for f in an.flows:
        st = f" to/from {t(f['station'])}" if f.get("station") else ""
        lines.append(f"  {t(f['flow'])}{st}: {f['goodput_bps'] / 1e6:.2f} Mbit/s goodput at {t(f['vantage'])}, "
                     f"{when.text(f['start'])}-{when.text(f['end'])}")
    if not an.incidents:
        lines.append("no incident: no flow dropped below its steady state and no condition held")
        lines += [f"  {t(q)}" for q in quiet or []]
    else:
        lines.append(f"incidents ({len(an.incidents)}), most certain first:")
    for k, inc in enumerate(an.incidents, 1):
        span = f"{when.text(inc.start_ns / 1e9)}-{when.text(inc.end_ns / 1e9)} ({(inc.end_ns - inc.start_ns) / 1e9:.1f} s)"
        if not inc.findings:
            falls = "; ".join(f"{t(f)} {_fall(inc.drop.get(f))}" for f in inc.flows)
            lines.append(f" {k}. {span} {inc.kind}: no cause found; {falls}")
            continue
        top = inc.findings[0]
        lines.append(f" {k}. {span} {inc.kind}: {top.cause} ({top.confidence:.2f}): {t(top.summary)}")
        others = ", ".join(f"{c.cause} {c.confidence:.2f}" for c in inc.findings[1:])
        if others:
            lines.append(f"    also: {others}")
        for c in inc.findings:
            if c.explained_by is not None:
                lines.append(f"    consequence: {t(c.because)}")
        if top.frames:
            ex = "; ".join(f"{t(fr.capture_file)} #{fr.frame} ({t(fr.what)})" for fr in top.frames[:3])
            lines.append(f"    frames: {ex}")
    for n in an.notes:
        lines.append(f"note: {t(n)}")
    return "\n".join(lines)


def _fall(d: dict | None) -> str:
    """Return how far a dropped flow's goodput fell (its window mean against its steady level), as text."""
    if not d or not d.get("baseline_bps"):
        return "(goodput fell)"
    mean, base = float(d.get("mean_bps") or 0.0), float(d["baseline_bps"])
    if mean <= 0:
        return f"delivered nothing (steady {base / 1e6:.2f} Mbit/s)"
    return f"{mean / 1e6:.2f} of its steady {base / 1e6:.2f} Mbit/s"


class _Times:
    """How the summary writes times: UTC time of day when everything shown is on one date (said once in
    the header), else the date with every time."""

    def __init__(self, an: Any):
        shown = [x for f in an.flows for x in (f.get("start"), f.get("end"))]
        shown += [x / 1e9 for i in an.incidents for x in (i.start_ns, i.end_ns)]
        self.dates = sorted({_date(x) for x in shown if isinstance(x, (int, float))})

    def header(self) -> str:
        """Return what the header line says of the times ('' when no time is shown)."""
        if not self.dates:
            return ""
        return f"; times UTC, {self.dates[0]}" if len(self.dates) == 1 else "; times UTC"

    def text(self, seconds: float | None) -> str:
        """Return one time as the summary shows it."""
        if seconds is None or len(self.dates) <= 1:
            return clock_text(seconds)
        return f"{_date(seconds)} {clock_text(seconds)}"


def _date(seconds: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%d")


MAX_QUIET_FLOWS = 3     # data flows described when there is no incident


def quiet_lines(tl: Any, an: Any, cfg: Any) -> list[str]:
    """Return, when there is no incident, what the data flows went through all the same: packets lost
    between two captures (the `loss` table, at the tightest pair of captures), TCP retransmissions (the
    `retransmissions` table, at the capture that saw most), and why that made no drop."""
    import polars as pl

    flows = [f["flow"] for f in an.flows]
    if an.incidents or not flows:
        return []
    loss = tl.table("loss").filter(pl.col("flow").is_in(flows))
    rt = tl.table("retransmissions").filter(pl.col("flow").is_in(flows))
    kept = (f"goodput never fell below {cfg.threshold:g} x its steady state for {cfg.min_duration_s:g} s or more "
            "(--threshold, --min-duration)")
    out = []
    for flow in flows:
        bits = [b for b in (_lost_text(loss.filter(pl.col("flow") == flow)),
                            _resent_text(rt.filter(pl.col("flow") == flow))) if b]
        if bits:
            out.append(f"{flow}: {'; '.join(bits)}; its {kept}")
    if not out:
        which = "the data flow" if len(flows) == 1 else f"the {len(flows)} data flows"
        both = "between captures and no" if loss.height else "and"
        return [f"seen: no packet of {which} lost {both} TCP retransmission; {kept}"]
    more = len(out) - MAX_QUIET_FLOWS
    return [f"seen: {x}" for x in out[:MAX_QUIET_FLOWS]] + ([f"seen: and {more} more flows"] if more > 0 else [])


def _lost_text(loss: Any) -> str | None:
    """Return the packets one flow lost between the two captures closest around the loss, or None."""
    import polars as pl

    if loss.height == 0 or loss["lost"].sum() == 0:
        return None
    # a capture's place on the path: how many captures saw the flow before it
    rank = loss.group_by("vantage_b").agg(pl.col("vantage_a").n_unique().alias("_r"))
    pairs = (loss.filter(pl.col("lost") > 0)
             .join(rank.rename({"vantage_b": "vantage_a", "_r": "_ra"}), on="vantage_a", how="left")
             .join(rank.rename({"_r": "_rb"}), on="vantage_b", how="left")
             .with_columns(pl.col("_ra").fill_null(0)))
    r = pairs.sort(["_ra", "_rb", "lost"], descending=[True, False, True], nulls_last=True).row(0, named=True)
    periods = f", {r['bursts']:,} loss period{'s' if r['bursts'] != 1 else ''}" if r["bursts"] else ""
    return (f"{r['lost']:,} of {r['sent']:,} packets lost between {r['vantage_a']} and {r['vantage_b']} "
            f"({r['loss_ratio']:.1%}{periods})")


def _resent_text(rt: Any) -> str | None:
    """Return how TCP recovered (its retransmissions at the capture that saw most, by trigger), or None."""
    import polars as pl

    rt = rt.filter(pl.col("class").is_in(["rto", "fast", "spurious"]))
    if rt.height == 0:
        return None
    per = (rt.group_by("capture_file").agg(
        pl.len().alias("n"), (pl.col("trigger") == "fast").sum().alias("fast"),
        pl.col("trigger").is_in(["rto", "tlp"]).sum().alias("timeout"), pl.col("spurious").fill_null(False).sum())
        .sort(["n", "capture_file"], descending=[True, False]).row(0, named=True))
    how = [f"{per['fast']:,} by fast retransmit"] if per["fast"] else []
    how.append(f"{per['timeout']:,} after a timeout" if per["timeout"] else "no timeout")
    if per["spurious"]:
        how.append(f"{per['spurious']:,} spurious")
    return f"TCP resent {per['n']:,} segment{'s' if per['n'] != 1 else ''} ({', '.join(how)})"


def cmd_analyze(args: argparse.Namespace) -> int:
    """Analyze a bundle and print the summary or JSON; return the exit code."""
    from xlayer.attribution.analyze import analyze
    from xlayer.cli.common import open_from_args, require_packets, steps, unread_note

    stop_on_signals()
    cfg = DropConfig(threshold=args.threshold, min_duration_s=args.min_duration, min_rate_bps=args.min_rate,
                     min_flow_duration_s=args.min_flow_duration, window=tuple(args.window) if args.window else None)
    with steps("analyze", args.quiet or args.json) as step:
        tl = open_from_args(args, step)
        require_packets(tl)
        # Every metric table, not only those the causes read: kept in the decode cache, so that `report`
        # and `metrics` after this command read them back instead of computing them again.
        tl.tables(progress=lambda name: step(f"table {name}"))
        an = analyze(tl, cfg, progress=step)
        quiet = [] if args.json else quiet_lines(tl, an, cfg)
    if args.json:
        json.dump(an.as_json(), sys.stdout, indent=2, allow_nan=False, default=str)
        print()
    else:
        print(summary_text(an, quiet))
    note = unread_note(tl)
    if note:
        print(f"xlayer analyze: note: {safe_text(note)}", file=sys.stderr)
    return 0


_UNITS = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9}


def bits_per_s(text: str) -> float:
    """Return a rate given as bit/s, optionally with a k, M or G suffix (100k, 1.5M), as a float."""
    t = text.strip().lower().removesuffix("bit/s").removesuffix("bps").strip()
    unit = t[-1:] if t[-1:] in ("k", "m", "g") else ""
    return _finite_at_least_0(t[:len(t) - len(unit)], _UNITS[unit], text, "a rate in bit/s",
                              " (examples: 50000, 100k, 1.5M)", "a rate")


def seconds_at_least_0(text: str) -> float:
    """Return a duration in seconds, 0 or more."""
    return _finite_at_least_0(text, 1.0, text, "a number of seconds", "", "a duration")


def _finite_at_least_0(number: str, scale: float, text: str, what: str, hint: str, name: str) -> float:
    try:
        v = float(number) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}{hint}") from None
    if not v >= 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"{name} must be 0 or more: {text!r}")
    return v


def register(subparsers: Any) -> None:
    """Add the `analyze` command to the xlayer argument parser; return None."""
    p = subparsers.add_parser(
        "analyze", help="find where throughput dropped and rank the causes, with the evidence",
        description="Align BUNDLE's captures, find windows where a flow's goodput fell well below its own "
        f"steady state, or the data flows' summed goodput below {SHARED_KEPT:.0%} of its own (or a condition that "
        "held all run), and score every cause on every layer's evidence.")
    add_bundle_argument(p)
    p.add_argument("--json", action="store_true",
                   help='print {"incidents": [{start, end, cause, confidence, causes, flows, stations, evidence, '
                   'frames}], "flows": [...], "alignment": {...}, "tags": {...}, "notes": [...]} (times: reference '
                   'epoch seconds; notes: captures read partly, and flows left out of drop detection and why)')
    d = DropConfig()
    p.add_argument("--threshold", type=float, default=d.threshold, metavar="F",
                   help=f"a drop is goodput below F x the flow's steady state (default {d.threshold:g})")
    p.add_argument("--min-duration", type=float, default=d.min_duration_s, metavar="S",
                   help=f"shortest drop, seconds (default {d.min_duration_s:g})")
    p.add_argument("--min-rate", type=bits_per_s, default=d.min_rate_bps, metavar="BITS_PER_S",
                   help="drop detection considers only data flows: flows carrying at least this much transport "
                   f"payload on average, bit/s, k/M suffix allowed (default {d.min_rate_bps / 1e3:g}k); slower flows "
                   "are left out and named in the notes, with their retransmissions")
    p.add_argument("--min-flow-duration", type=seconds_at_least_0, default=d.min_flow_duration_s, metavar="S",
                   help="drop detection considers only data flows lasting at least S seconds from their first to "
                   f"their last packet (default {d.min_flow_duration_s:g}); shorter flows are left out and named in "
                   "the notes")
    p.add_argument("--window", type=float, nargs=2, metavar=("FROM", "TO"),
                   help="analysis window, seconds from the bundle's first packet (study 001 used 50 100)")
    add_timeline_options(p)
    p.set_defaults(func=cmd_analyze)
