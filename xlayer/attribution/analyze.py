"""Why did throughput drop: incidents from the timeline, each cause scored on every layer's evidence.

1. Drop detection (`xlayer.attribution.drops`): per data flow, windows where goodput fell well below the flow's
   own steady state, merged across flows that drop together.  Flows below the data-flow thresholds
   (`DropConfig.min_rate_bps`, `min_flow_duration_s`) are left out, and the notes say which and why:
   each one with TCP retransmissions on its own line with its numbers, the others named (a few) and
   counted; with no data flow at all, one line says why (no IP packet, or every flow below them).
2. Windows the causes see by themselves (`propose` in a cause module): conditions that hold for a
   whole run (the performance anomaly, RTS/CTS always on, a fragmentation threshold) and events that
   start an incident (a station losing its association).  An event cuts the drop windows it falls
   in, and the part after it joins the event's window.  Windows that overlap by half of the shorter
   one are one incident.
3. Every registered cause (`xlayer.attribution.causes`) scores every incident; a finding about flows other
   than those that dropped is weighted down by the share of the dropping flows it touches
   (x (0.5 + 0.5 share)); findings under `MIN_CONFIDENCE` are left out, the rest ranked by confidence,
   then put root first (`xlayer.attribution.causality`): a consequence whose delay the measurements
   show another finding made ranks right after it and says why.  An incident nothing explains is
   kept, cause None.
4. A drop whose root cause measures its own episode (``episode`` in the cause module: MAC retries
   that rose before the goodput fell and went on after it, a slow station's traffic that began before
   the others' goodput gave way, a walking station's rate that fell before its goodput did) is widened
   to it, never into a neighbouring drop or event: the incident shows when the cause began, not only
   its symptom.  So is a condition's window that took in a drop: its root is that drop's root too.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import polars as pl

from xlayer.attribution.causality import explain
from xlayer.attribution.causes import causes
from xlayer.attribution.causes.base import NS, Context, Window
from xlayer.attribution.drops import (
    SHARED_KEPT,
    DropConfig,
    aggregate_kept,
    data_flows,
    find_drops,
    flow_goodput,
    left_out,
    merge_windows,
    path_drops,
    warmups,
)
from xlayer.attribution.incidents import Analysis, CauseFinding, Incident
from xlayer.metrics import open_timeline
from xlayer.metrics.join import match_notes, stand_in_notes
from xlayer.text import iso_ns
from xlayer.timeline import Timeline
from xlayer.timeline.open import read_notes

MIN_CONFIDENCE = 0.2


def _overlap(a: Window, b: Window) -> int:
    return max(0, min(a.end_ns, b.end_ns) - max(a.start_ns, b.start_ns))


def _union(a: Window, b: Window) -> Window:
    kind = a.kind if a.kind != "drop" else b.kind
    return Window(min(a.start_ns, b.start_ns), max(a.end_ns, b.end_ns),
                  sorted(set(a.flows) | set(b.flows)), sorted(set(a.stations) | set(b.stations)), kind,
                  a.proposer or b.proposer, {**a.drop, **b.drop})


def _cut(windows: list[Window], events: list[Window]) -> list[Window]:
    """Return drop windows cut at event starts, the part after an event joined to that event's window."""
    out = list(windows)
    for ev in events:
        nxt = []
        for w in out:
            if w.start_ns < ev.start_ns < w.end_ns:
                nxt.append(Window(w.start_ns, ev.start_ns, w.flows, w.stations, w.kind, w.proposer, w.drop))
                nxt.append(Window(ev.start_ns, w.end_ns, w.flows, w.stations, w.kind, w.proposer, w.drop))
            else:
                nxt.append(w)
        out = nxt
    merged_events = list(events)
    keep = []
    for w in out:
        for i, ev in enumerate(merged_events):
            if _overlap(w, ev) >= 0.5 * (w.end_ns - w.start_ns):
                merged_events[i] = _union(ev, w)
                merged_events[i].start_ns = ev.start_ns      # the event, not the drop, starts it
                break
        else:
            keep.append(w)
    return keep + merged_events


def _apart(a: Window, b: Window, gap_ns: int) -> bool:
    """Return whether a drop and a condition that held since before it (or two conditions, one
    starting inside the other) stay two windows.

    A condition proposed as sustained (RTS/CTS, fragmentation, a slow station) that already held
    `gap_ns` before a drop began was part of the baseline the drop fell from: it does not explain
    the fall, which is a question of its own (a walk, a hidden node inside a whole-run condition)."""
    kinds = {a.kind, b.kind}
    if kinds == {"sustained"}:
        # two conditions, the second starting while the first held: each is its own span (a slow
        # station arriving in a network that fragments everything is a change of its own)
        first, later = sorted((a, b), key=lambda w: w.start_ns)
        return a.proposer != b.proposer and first.start_ns < later.start_ns - gap_ns
    if kinds != {"drop", "sustained"}:
        return False
    drop, cond = (a, b) if a.kind == "drop" else (b, a)
    return cond.start_ns < drop.start_ns - gap_ns


def _merge(windows: list[Window], gap_ns: int = 0) -> list[Window]:
    """Return windows with those overlapping by half of the shorter one merged (events stay apart, and
    drops from conditions that held before them: `_apart`)."""
    ws = sorted(windows, key=lambda w: w.start_ns)
    changed = True
    while changed:
        changed = False
        for i in range(len(ws)):
            for j in range(i + 1, len(ws)):
                a, b = ws[i], ws[j]
                if ("event" in (a.kind, b.kind) and a.kind != b.kind) or _apart(a, b, gap_ns):
                    continue
                shorter = min(a.end_ns - a.start_ns, b.end_ns - b.start_ns)
                if shorter > 0 and _overlap(a, b) >= 0.5 * shorter:
                    ws[i] = _union(a, b)
                    del ws[j]
                    changed = True
                    break
            if changed:
                break
    return ws


def _score(ctx: Context, mods: list, w: Window) -> list[CauseFinding]:
    """Return the causes found in a window, ranked root first."""
    found = []
    for m in mods:
        f = m.score(ctx, w)
        if f is None:
            continue
        if w.drop and f.flows:
            # evidence about flows that did not drop explains less of the window
            touched = len(set(f.flows) & set(w.drop)) / len(w.drop)
            f.confidence *= 0.5 + 0.5 * touched
        if f.confidence >= MIN_CONFIDENCE:
            found.append(f)
        ctx.release()
    # An event window is the event's consequence: the cause that saw the event ranks first
    # (a station that lost its association also shows falling rates and retries after it).  A
    # condition's window is the span it held: its cause ranks first there, and what else changed
    # inside the span has drop windows of its own.
    found.sort(key=lambda f: (not (w.kind != "drop" and f.cause == w.proposer), -f.confidence))
    return explain(ctx, w, found)


def _root(found: list[CauseFinding]) -> str | None:
    return next((f.cause for f in found if f.explained_by is None), None)


def _join_same_root(scored: list[tuple[Window, list[CauseFinding]]], score: Callable[[Window], list[CauseFinding]],
                    gap_ns: int) -> list[tuple[Window, list[CauseFinding]]]:
    """Return the scored windows with those that overlap (or nearly: `gap_ns`) and have the same root
    cause joined into one and scored again: one cause's story told once, not cut where a drop and a
    condition's span met (events stay apart)."""
    out = sorted(scored, key=lambda x: x[0].start_ns)
    changed = True
    while changed:
        changed = False
        for i in range(len(out) - 1):
            (a, fa), (b, fb) = out[i], out[i + 1]
            if "event" in (a.kind, b.kind) or b.start_ns > a.end_ns + gap_ns:
                continue
            if _root(fa) is None or _root(fa) != _root(fb):
                continue
            u = _union(a, b)
            out[i:i + 2] = [(u, score(u))]
            changed = True
            break
    return out


def _with_episodes(ctx: Context, scored: list[tuple[Window, list[CauseFinding]]]) -> list[tuple[Window, list[CauseFinding]]]:
    """Return the scored windows with each drop widened to its root cause's episode, where the cause
    measures one (``episode(ctx, window, finding)`` in its module): the cause began before the goodput
    fell and may outlast the drop.  A window never grows into a neighbouring drop or event window."""
    by_name = {m.NAME: m for m in causes()}
    spans = sorted((w.start_ns, w.end_ns) for w, _ in scored if w.kind != "sustained")
    out = []
    for w, found in scored:
        root = next((f for f in found if f.explained_by is None), None)
        mod = by_name.get(root.cause) if root is not None else None
        # a condition's window that took in a drop is that drop's too: its root's episode counts
        dropped = w.kind == "drop" or bool(w.drop)
        ep = mod.episode(ctx, w, root) if dropped and mod is not None and hasattr(mod, "episode") else None
        if ep is None:
            out.append((w, found))
            continue
        before = max([e for s, e in spans if e <= w.start_ns] or [ep[0]])
        after = min([s for s, e in spans if s >= w.end_ns and (s, e) != (w.start_ns, w.end_ns)] or [ep[1]])
        start, end = min(w.start_ns, max(ep[0], before)), max(w.end_ns, min(ep[1], after))
        if (start, end) != (w.start_ns, w.end_ns):
            root.numbers["episode"] = [start / NS, end / NS]
            if start < w.start_ns:
                root.summary += (f"; it began {(w.start_ns - start) / NS:.1f} s before "
                                 + ("the goodput fell" if w.kind == "drop" else "the condition's window"))
            w = Window(start, end, w.flows, w.stations, w.kind, w.proposer, w.drop)
        out.append((w, found))
    return out


def sharing(w: Window, g: pl.DataFrame, cfg: DropConfig) -> str | None:
    """Return the note saying a drop window is flows sharing the path (the data flows' summed goodput
    `g` kept SHARED_KEPT of its steady state), or None when it is not.

    TCP flows sharing a path trade their shares: one backs off, the others take it.  A flow that
    delivered nothing in the window stalled (a lost association, timers backing off): the others took
    the air it left, and the stall stays an incident even when no cause is found for it."""
    if w.kind != "drop" or any(not (d.get("mean_bps") or 0.0) > 0.0 for d in w.drop.values()):
        return None
    kept = aggregate_kept(g, w.start_ns, w.end_ns, cfg)
    if kept is None or kept < SHARED_KEPT:
        return None
    return (f"{', '.join(sorted(w.drop))}: goodput fell for {w.seconds:.1f} s from {iso_ns(w.start_ns)} while "
            f"the data flows together kept {kept:.0%} of their steady goodput: flows sharing the path, not a "
            "drop (no incident)")


def analyze(tl: Timeline | str | os.PathLike, cfg: DropConfig | None = None,
            progress: Callable[[str], None] | None = None) -> Analysis:
    """Return the incidents of a bundle (or its timeline), each with its ranked causes and evidence."""
    cfg = cfg or DropConfig()
    if not isinstance(tl, Timeline):
        tl = open_timeline(tl, progress=progress)
    ctx = Context(tl, cfg)
    say = progress or (lambda _s: None)
    say("finding drops")
    chosen = data_flows(tl.table("flows"), cfg)
    g = flow_goodput(tl.table("flow_series"), chosen, cfg, tl.table("flows"))
    span = None
    if cfg.window is not None:
        t0 = ctx.span[0]
        span = (t0 + int(cfg.window[0] * NS), t0 + int(cfg.window[1] * NS))
    warm = warmups(ctx.table("rtt"), cfg)
    drops = pl.concat([find_drops(g, cfg, span, warm), path_drops(g, cfg, span, warm)])
    windows = []
    for s, e, d in merge_windows(drops, int(cfg.merge_gap_s * NS)):
        flows = d["flow"].unique(maintain_order=True).to_list()
        info = {r["flow"]: {"baseline_bps": r["baseline_bps"], "mean_bps": r["mean_bps"]} for r in d.iter_rows(named=True)}
        windows.append(Window(s, e, flows, ctx.stations_of(flows), "drop", None, info))
    ctx.quiet = [(w.start_ns, w.end_ns) for w in windows]
    mods = causes()
    proposed: list[Window] = []
    for m in mods:
        if hasattr(m, "propose"):
            say(f"conditions: {m.NAME}")
            proposed += m.propose(ctx)
            ctx.release()
    if span is not None:
        proposed = [w for w in proposed if w.end_ns > span[0] and w.start_ns < span[1]]
    events = [w for w in proposed if w.kind == "event"]
    sustained = [w for w in proposed if w.kind != "event"]
    windows = _merge(_cut(windows, _merge(events)) + sustained, int(cfg.merge_gap_s * NS))
    say(f"scoring {len(mods)} causes")
    scored = _join_same_root([(w, _score(ctx, mods, w)) for w in windows], lambda w: _score(ctx, mods, w),
                             int(cfg.merge_gap_s * NS))
    scored = _with_episodes(ctx, scored)
    ctx.release()
    incidents = []
    shared: list[str] = []
    for w, found in scored:
        note = sharing(w, g, cfg) if not found else None
        if note is not None:
            shared.append(note)
            continue
        flows = w.flows or sorted({x for f in found for x in f.flows})
        stations = w.stations or sorted({x for f in found for x in f.stations})
        incidents.append(Incident(w.start_ns, w.end_ns, w.kind, flows, stations, w.drop, found))
    incidents.sort(key=lambda i: (-i.confidence, i.start_ns))
    return Analysis(incidents, _flow_summary(ctx, chosen, g), tl.alignment.as_json(), dict(tl.bundle.tags),
                    [f"{f}: {err}" for f, err in tl.errors.items()] + read_notes(tl) + capture_loss_notes(tl)
                    + match_notes(tl) + stand_in_notes(tl) + flow_notes(tl, chosen, cfg) + shared, left_out(tl.table("flows"), cfg).to_dicts())


CAPTURE_LOSS_NOTE = 0.01   # a sniffer that missed this share of MPDUs is said: its counts are short


def capture_loss_notes(tl: Timeline) -> list[str]:
    """Return one line per air capture that missed at least CAPTURE_LOSS_NOTE of the MPDUs sent (`capture_loss`)."""
    if not tl.entries("air"):
        return []
    cl = tl.table("capture_loss").filter(pl.col("direction") == "all")
    out = []
    for r in cl.sort("capture_file").iter_rows(named=True):
        inferred, missed = int(r["mpdus_inferred"] or 0), int(r["mpdus_missed"] or 0)
        if inferred and missed / inferred >= CAPTURE_LOSS_NOTE:
            out.append(f"{r['capture_file']}: the sniffer missed {missed:,} of {inferred:,} data MPDUs "
                       f"({missed / inferred:.1%}, by sequence-number gaps): retries, airtime and attempts read "
                       f"from it are undercounted, and a missed frame's fate is inferred")
    return out


MAX_NAMED = 3            # left-out flows named in a note (the rest counted)
MAX_RETX_LINES = 10      # left-out flows with retransmissions given a line each


def _bps(x: float | None) -> str:
    """Return a rate as text with a readable unit."""
    if x is None or x != x:
        return "? bit/s"
    if x >= 1e6:
        return f"{x / 1e6:.2f} Mbit/s"
    if x >= 1e3:
        return f"{x / 1e3:.1f} kbit/s"
    return f"{x:.0f} bit/s"


def _limit(x: float) -> str:
    """Return a threshold rate as short text (100 kbit/s, not 100.0 kbit/s)."""
    if x >= 1e6:
        return f"{x / 1e6:g} Mbit/s"
    if x >= 1e3:
        return f"{x / 1e3:g} kbit/s"
    return f"{x:g} bit/s"


def _reason(r: dict[str, Any], cfg: DropConfig) -> str:
    """Return why a flow was left out of drop detection, with its numbers."""
    if r["reason"] == "no_payload":
        return "no payload: not a data flow"
    if r["rate_bps"] is None:
        amount = f"{r['payload_bytes']:,} B of payload at one instant"
    else:
        amount = f"{_bps(r['rate_bps'])} over {r['duration_s']:.2f} s"
    rate = f"below --min-rate {_limit(cfg.min_rate_bps)}"
    short = f"shorter than --min-flow-duration {cfg.min_flow_duration_s:g} s"
    why = {"too_short": short, "below_rate_and_too_short": f"{rate} and {short}"}.get(r["reason"], rate)
    return f"{amount}: {why}"


_ADVICE = {"below_rate": "lower --min-rate to consider it", "too_short": "lower --min-flow-duration to consider it",
           "below_rate_and_too_short": "lower --min-rate and --min-flow-duration to consider it"}


def _retransmissions_per_flow(rt: pl.DataFrame) -> pl.DataFrame:
    """Return per flow the retransmissions at the capture that saw most: n, spurious, spurious after a timeout."""
    if rt.height == 0:
        return pl.DataFrame(schema={"flow": pl.String, "vantage": pl.String, "n": pl.UInt32,
                                    "spurious": pl.UInt32, "spurious_timeouts": pl.UInt32})
    rt = rt.filter(pl.col("class").is_in(["rto", "fast", "spurious"]))
    sp = pl.col("spurious").fill_null(False)
    per = rt.group_by("flow", "capture_file").agg(
        pl.col("vantage").first(), pl.len().alias("n"), sp.sum().cast(pl.UInt32).alias("spurious"),
        (sp & pl.col("trigger").is_in(["rto", "tlp"])).sum().cast(pl.UInt32).alias("spurious_timeouts"))
    return (per.sort(["flow", "n", "capture_file"], descending=[False, True, False])
            .group_by("flow", maintain_order=True).first().drop("capture_file"))


def _no_ip_note(tl: Timeline) -> str:
    """Return the line saying that no capture carried an IP packet (with the air's data frames, if any)."""
    text = "no flow for drop detection: no capture carried IP packets"
    try:
        air = tl.table("air_frames")
    except Exception:  # noqa: BLE001 - a bundle without air captures may have no such table
        return text
    n = air.filter(pl.col("wlan_type") == 2).height if air.height else 0
    if not n:
        return text
    prot = _protected_data_frames(tl)
    if not prot:
        why = "not IP" if prot == 0 else "protected, or not IP"
        return text + f" ({n:,} 802.11 data frame{'s' if n != 1 else ''} on the air, none readable as IP: {why})"
    # without keys a WPA network's traffic is seen only as sizes and times
    rest = f"; the other {n - prot:,} not IP" if n > prot else ""
    keyed = any(getattr(st, "decryption", None) for st in getattr(tl, "read_stats", {}).values())
    why = ("and the keys given decrypted none of them (wrong passphrase or SSID, or no 4-way handshake "
           "captured before them: see the decryption counts)" if keyed else
           "and no keys were given: give them with --wpa-pwd PASSPHRASE:SSID (or --keys FILE) to decrypt")
    return text + (f" ({n:,} 802.11 data frame{'s' if n != 1 else ''} on the air, none readable as IP: {prot:,} "
                   f"{'were' if prot != 1 else 'was'} protected (WPA/WEP) {why}{rest})")


def _protected_data_frames(tl: Timeline) -> int | None:
    """Return how many 802.11 data frames of the air captures were protected (None: not known here)."""
    if not hasattr(tl, "entries"):
        return None
    return sum(tl.packets(e, ["wlan_type", "wlan_protected"])
               .filter((pl.col("wlan_type") == 2) & pl.col("wlan_protected").fill_null(False)).height
               for e in tl.entries("air"))


def flow_notes(tl: Timeline, chosen: pl.DataFrame, cfg: DropConfig) -> list[str]:
    """Return the lines saying which flows drop detection left out and why (see the module doc)."""
    flows = tl.table("flows")
    if flows.height == 0:
        return [_no_ip_note(tl)]
    out = left_out(flows, cfg)
    if out.height == 0:
        return []
    retx = _retransmissions_per_flow(tl.table("retransmissions"))
    out = out.join(retx, on="flow", how="left", suffix="_rt").with_columns(pl.col("n").fill_null(0))
    lines = []
    with_rt = out.filter(pl.col("n") > 0).sort(["n", "flow"], descending=[True, False])
    for r in with_rt.head(MAX_RETX_LINES).iter_rows(named=True):
        n = r["n"]
        what = f"{n} TCP retransmission{'s' if n != 1 else ''}"
        if r["spurious"]:
            t = r["spurious_timeouts"]
            what += f" ({r['spurious']} spurious" + (f", {t} after a timeout)" if t else ")")
        advice = _ADVICE.get(r["reason"])
        lines.append(f"left out of drop detection: {r['flow']} ({_reason(r, cfg)}), though it has {what} at "
                     f"{r['vantage_rt']}" + (f"; {advice}" if advice else ""))
    if with_rt.height > MAX_RETX_LINES:
        lines.append(f"left out of drop detection: {with_rt.height - MAX_RETX_LINES} more flows with TCP "
                     "retransmissions")
    rest = out.filter((pl.col("n") == 0) & (pl.col("reason") != "no_payload"))
    named = "; ".join(f"{r['flow']} ({_reason(r, cfg)})" for r in rest.head(MAX_NAMED).iter_rows(named=True))
    if rest.height > MAX_NAMED:
        named += f"; and {rest.height - MAX_NAMED} more"
    if chosen.height == 0:
        total = flows["flow"].n_unique()
        bare = out.filter((pl.col("n") == 0) & (pl.col("reason") == "no_payload")).height
        text = f"no flow for drop detection: {total} flow{'s' if total != 1 else ''} seen, "
        if (out["reason"] == "no_payload").all():
            text += "none carried transport payload" if total != 1 else "without transport payload"
        else:
            text += (f"{'all ' if total != 1 else ''}below --min-rate {_limit(cfg.min_rate_bps)} or shorter than "
                     f"--min-flow-duration {cfg.min_flow_duration_s:g} s (lower them to consider these flows)")
        bits = [named] if named else []
        if with_rt.height:
            bits.append(f"{with_rt.height} with TCP retransmissions (below)")
        if bare:
            bits.append(f"{bare} without payload")
        lines.insert(0, text + (": " + "; ".join(bits) if bits else ""))
    elif rest.height:
        lines.append(f"left out of drop detection ({rest.height} flow{'s' if rest.height != 1 else ''} "
                     f"below --min-rate or --min-flow-duration): {named}")
    return lines


def _flow_summary(ctx: Context, chosen: pl.DataFrame, g: pl.DataFrame) -> list[dict[str, Any]]:
    """Return one summary per data flow: where its goodput was read, mean goodput, station."""
    flows = ctx.table("flows")
    out = []
    for r in chosen.iter_rows(named=True):
        f = flows.filter((pl.col("flow") == r["flow"]) & (pl.col("capture_file") == r["capture_file"])).row(0, named=True)
        out.append({"flow": r["flow"], "vantage": r["vantage"], "capture_file": r["capture_file"],
                    "station": ctx.flow_station.get(r["flow"]), "start": f["first_ts_ns"] / NS,
                    "end": f["last_ts_ns"] / NS, "goodput_bps": f["goodput_bps"], "packets": f["packets"]})
    return out
