"""What produces what: the causes as a graph, and a window's findings put root first by measured delay.

The graph (issue 11; study 003's finding: MAC retransmissions push IP delay above the RTO):

    retransmissions on the air  <- mac_retries, interference (corrupted or unheard frames are resent)
    one station holding the AP  <- performance_anomaly (a weak link: low PHY rate, retries)
    further fragments           <- fragmentation
    queueing behind plain work  <- ap_queue_overflow (a full queue)
    any of them, or the wired path -> delay above the RTO -> spurious_rto (nothing was lost)
    rate_change (a weakening link) -> performance_anomaly, mac_retries of that station
    mac_retries on a link whose signal held -> rate_change (rate adaptation answers the failures)
    performance_anomaly (a weak link) -> mac_retries of the slow station; with responsive flows,
        ap_queue_overflow (the slow service fills the queue)
    mac_retries of a slow station that held the line before the drop too -> performance_anomaly, when
        its retries grew in the drop and made most of the growth of its time per packet (what changed)
    an unresponsive stream offered past its station's intake -> ap_queue_overflow -> performance_anomaly
        when that station is the slow one
    spurious_rto -> ap_queue_overflow, when the queue dropped nothing until the timeouts' copies of
        packets still queued reached it
    rate_change (a weakening link), mac_retries of a station (twice its usual share) -> handoff, when
        that station lost its association and joined the same AP again (a rejoin: it missed the beacons)

A `spurious_rto` finding is a consequence when the delay of the timed-out flows' packets shows what
made it.  `xlayer.attribution.causes.delaysplit` splits each packet's delay (the `delay` table) by
what the AP's transmit line was doing while it waited and while it was sent: retransmissions,
further fragments, one hog station's service, plain work, and the wired path before the AP.  The
AP's parts are compared as shares of the time the late packets waited (a longer queue of the same
work grows them all alike; the wired path adds whatever the queue).  The part whose share grew the
most against the steady state (outside the drop windows and the half second before each: a cause
starts before the goodput falls) is what changed; it is the root when the late packets' delay
reached half the RTO and that part made at least `ROOT_MIN_SHARE` of the growth (`root_cause`:
plain queueing behind normally served packets is a root only as a full queue).  The finding of
that cause takes the consequence's rank and the consequence follows it, saying why
(when the growth is only a longer queue, the most confident delay maker found in the window is the
root: the split cannot separate it, but the graph has the timeouts downstream of it)
(`explained_by`, `because`).  When no cause module scored that root in the window (its own signs
were too weak to see on their own), the measured split is the evidence and the root's finding is
made from it, provided that part also grew by `ROOT_MIN_SHARE` of the rise of the late packets' delay
on the AP's side in ms or the AP served each packet `SLOWER_SERVICE` times more slowly (`_carries_rise`:
a share that grew inside a tenfold longer queue served as fast as before is not what pushed the delay
past the RTO); otherwise the timeouts stay a root, the split in their evidence, and a queue that grew
at an unchanged service per packet is named as such (`_queue_grew`).  Nothing is decided by which
causes are named, only by these measured quantities: with no air capture, or with delay made on the
wired path, the spurious timeouts stay a root.

A station whose PHY rate the `rate_change` finding measured falling is slow and retried because its
link weakened: its `performance_anomaly` and `mac_retries` findings follow the rate change
(`_after_rate_change`), and a timeout chain through them starts at the rate change.  A fall on a link
that did not weaken (signal as before, fewer retries at the new rate: the old rate was never carried)
leads nothing: the station was as slow before it.  A fall on a link whose signal held while its
frames were retried more is rate adaptation answering failures made elsewhere (a hidden node, an
interferer): it follows the `mac_retries` finding of that station.
"""
from __future__ import annotations

from typing import Any

import polars as pl

from xlayer.attribution.causes import (
    delaysplit,
    fragmentation,
    mac_retries,
    performance_anomaly,
)
from xlayer.attribution.causes.base import LEAD_NS, Context, Window
from xlayer.attribution.incidents import CauseFinding

ROOT_MIN_RTO_SHARE = 0.5        # the late packets' delay reached this share of the RTO
SLOWER_SERVICE = 1.2            # the line's time per packet grew by this factor: the air changed
ROOT_MIN_SHARE = 0.3            # the part made at least this share of the late packets' delay increase
FLOOD_RATIO = 1.1               # offered over what the station took in: an unresponsive stream fills the queue
LABEL = {"retry": "MAC retry time", "fragments": "fragment time", "hog": "time the AP served one station",
         "load": "AP queue sojourn", "wired": "wired path delay"}


def _rto_ms(f: CauseFinding) -> float | None:
    rto = f.numbers.get("host_rto_ms") or f.numbers.get("rto_estimate_ms")
    return float(rto) if rto else None


def root_cause(sp: delaysplit.Split, found: dict[str, CauseFinding]) -> tuple[str, str] | None:
    """Return (cause, delay part) of the root the split shows, or None (the wired path, or plain queueing).

    Plain queueing behind normally served packets is a root only as a full queue
    (`ap_queue_overflow` found); otherwise the cause part (retries, fragments, a hog) that grew the
    most is, when it made `ROOT_MIN_SHARE` of the increase of the late packets' delay.  A station
    holding the line on a good link is slow because its MAC keeps trying (its data or its RTS unanswered:
    a deaf or interfered receiver), unless its further fragments are what it spends beyond the others
    per packet (`Hog.slowed_by_fragments`: a threshold that fragments everyone's packets alike is not
    what makes one station slower).
    """
    part = max(("hog", "retry", "fragments"), key=sp.increase)
    if "ap_queue_overflow" in found and sp.increase("load") >= sp.increase(part):
        return "ap_queue_overflow", "load"
    grew = sum(sp.increase(k) for k in delaysplit.PARTS)
    if sp.increase(part) <= 0 or sp.increase(part) < ROOT_MIN_SHARE * grew:
        return None
    if part == "hog" and sp.hog is not None:
        h = sp.hog
        if h.weak_link:
            return performance_anomaly.NAME, part
        if h.slowed_by_fragments:
            return fragmentation.NAME, part
        return ("interference" if "interference" in found else mac_retries.NAME), part
    if part == "retry":
        return ("interference" if "interference" in found else mac_retries.NAME), part
    return fragmentation.NAME, part


DELAY_MAKERS = ("mac_retries", "interference", "performance_anomaly", "ap_queue_overflow", "fragmentation",
                "rts_overhead", "rate_change")


def _strongest_maker(sp: delaysplit.Split, found: list[CauseFinding], late: list[str]) -> tuple[str, str] | None:
    """Return (cause, "load") of the most confident delay maker found in the window, when the split
    names no part but the late packets' delay grew on the AP's side (not on the wired path) while the
    AP took `SLOWER_SERVICE` times longer per packet than outside the drops, or, at the same service
    per packet, when the maker's stations include those of the late packets (`late`).

    Spurious timeouts need a delay above the RTO, and the graph has them downstream of every delay
    maker: when the growth shows only as a longer queue (packets ahead served more slowly by a
    change the split does not separate, such as rate adaptation reacting to collisions), the cause
    found in the window is the better root than the timeouts themselves.  A standing queue already
    near the RTO times out on a small rise: the window's mean then barely moves, and a maker acting
    on the late packets' own station is what tipped them over."""
    if max(delaysplit.PARTS, key=sp.grew) == "wired" or sp.grew("load") <= 0:
        return None
    makers = [f for f in found if f.cause in DELAY_MAKERS]
    if not sp.served_slower(SLOWER_SERVICE):
        # the same work per packet: more packets ahead (load), unless a maker acted on the late packets
        makers = [f for f in makers if set(f.stations) & set(late)]
    if not makers:
        return None
    return max(makers, key=lambda f: f.confidence).cause, "load"


_MAKERS = {performance_anomaly.NAME: performance_anomaly, mac_retries.NAME: mac_retries,
           fragmentation.NAME: fragmentation}


OWN_FINDING_SHARE = 0.5         # the other stations' retries alone make this share of the finding: a root of their own
RATE_FOLLOWERS = ("performance_anomaly", "mac_retries")   # a station whose rate fell is slow and retried


def _after_rate_change(found: list[CauseFinding]) -> list[CauseFinding]:
    """Return the findings with `rate_change` ahead of the slowness and retries of the stations whose
    rate it measured falling (a weakening link: rate adaptation steps down, frames are retried, and the
    slower frames hold the air; the rate fall is what changed)."""
    rc = next((f for f in found if f.cause == "rate_change"), None)
    if rc is None:
        return found
    if rc.numbers.get("answering_retries"):
        mr = next((f for f in found if f.cause == mac_retries.NAME and set(f.stations) & set(rc.stations)), None)
        if mr is None or rc.explained_by is not None:
            return found
        return _pair(found, mr, rc, f"rate_change because rate adaptation stepped down answering the MAC "
                                    f"retries on a link whose signal held: {mr.summary}")
    if rc.numbers.get("link_weakened") is False:
        return found
    fell = set(rc.stations)
    led = [f for f in found if f.cause in RATE_FOLLOWERS and f.explained_by is None and set(f.stations) & fell]
    if not led:
        return found
    for f in led:
        f.explained_by = rc.cause
        f.because = (f"{f.cause} because the PHY rate of {', '.join(sorted(set(f.stations) & fell))} fell: "
                     f"{rc.summary}")
    first = min(found.index(f) for f in [rc, *led])
    rest = [f for f in found if f is not rc and f not in led]
    at = sum(1 for f in found[:first] if f is not rc and f not in led)
    return rest[:at] + [rc, *led] + rest[at:]


def _slow_station(f: CauseFinding) -> str | None:
    """Return the slow station a `performance_anomaly` finding names."""
    hog = f.numbers.get("hog")
    if isinstance(hog, dict) and hog.get("station"):
        return str(hog["station"])
    st = f.numbers.get("stations")
    return str(st[0]["station"]) if isinstance(st, list) and st and isinstance(st[0], dict) else None


RETRIES_MADE_RISE = 0.5         # retry time made this share of the slow station's rise in time per packet


def _retried_more_on_slow_link(ctx: Context, w: Window, found: list[CauseFinding]) -> list[CauseFinding]:
    """Return the findings with `mac_retries` ahead of the performance anomaly in a drop when the slow
    station held the AP's line before the drop too and what changed is its retries: its time per packet
    on the line grew `SLOWER_SERVICE` times against outside the drops, retry time making
    RETRIES_MADE_RISE of the growth.

    A slow link that was there all along is part of the baseline the goodput fell from (as a condition
    that held before a drop is, `analyze._apart`); a hidden node or a burst of interference at that
    station then retries its frames, and the anomaly's hold on the line grows because of them."""
    pa = next((f for f in found if f.cause == performance_anomaly.NAME and f.explained_by is None), None)
    mr = next((f for f in found if f.cause == mac_retries.NAME and f.explained_by is None), None)
    hog = pa.numbers.get("hog") if pa is not None else None
    if w.kind != "drop" or mr is None or not isinstance(hog, dict) or not hog.get("per_packet_ms"):
        return found
    slow = str(hog["station"])
    out = ctx.outside("delay").filter(pl.col("station") == slow)
    if out.height < delaysplit.MIN_PACKETS:
        return found                # the slow station was not there before: its arrival is what changed
    c_out, r_out = float(out["service_ns"].mean()) / 1e6, float(out["retry_ns"].mean()) / 1e6
    c_in = float(hog["per_packet_ms"])
    r_in = float(hog.get("retry_share") or 0.0) * c_in
    if c_in < SLOWER_SERVICE * c_out or r_in - r_out < RETRIES_MADE_RISE * (c_in - c_out):
        return found
    return _pair(found, mr, pa, f"performance_anomaly because {slow}'s frames were retried more: its time on "
                                f"the AP's line per packet grew from {c_out:.2f} ms outside the drops to {c_in:.2f} "
                                f"ms, {r_in - r_out:.2f} ms of it retry time, on a link as slow before the drop")


def _after_weak_link(ctx: Context, w: Window, found: list[CauseFinding]) -> list[CauseFinding]:
    """Return the findings with `mac_retries` after the performance anomaly when the window's retries
    are the slow station's (without its frames they make no finding, or one under OWN_FINDING_SHARE
    of it: a burst or two of the others' frames colliding on a busy air): a weak link's low rate and
    lost frames are one condition, and what the other stations lose is its air, retries included.
    When the anomaly itself follows another root (an unresponsive stream to the slow station kept the
    queue full), the retries follow the anomaly, below that root."""
    pa = next((f for f in found if f.cause == performance_anomaly.NAME), None)
    mr = next((f for f in found if f.cause == mac_retries.NAME and f.explained_by is None), None)
    slow = _slow_station(pa) if pa is not None else None
    if mr is None or slow is None or pa.explained_by == mr.cause:
        return found
    if mac_retries.without(ctx, w, slow) >= max(mac_retries.MIN_CONF, OWN_FINDING_SHARE * mr.confidence):
        return found            # the other stations' retries are a finding of their own
    because = (f"mac_retries because {slow} is on a weak link: without its frames the window's retries are not "
               f"above usual; {pa.summary}")
    if pa.explained_by is None:
        return _pair(found, pa, mr, because)
    # the anomaly is itself a consequence (a flood to the slow station filled the queue): its station's
    # retries follow it, below its own root
    mr.explained_by, mr.because = pa.cause, because
    return _after(found, pa, mr)


def _after(found: list[CauseFinding], root: CauseFinding, cons: CauseFinding) -> list[CauseFinding]:
    """Return the findings with `cons` moved to right after `root`, the others in their order."""
    rest = [f for f in found if f is not cons]
    at = rest.index(root) + 1
    return rest[:at] + [cons] + rest[at:]


def _pair(found: list[CauseFinding], root: CauseFinding, cons: CauseFinding, because: str) -> list[CauseFinding]:
    """Return the findings with `cons` explained by `root` (a finding or one made from measurements),
    the two placed where the higher one was."""
    cons.explained_by, cons.because = root.cause, because
    first = min(found.index(cons), found.index(root) if root in found else len(found))
    rest = [f for f in found if f is not root and f is not cons]
    at = sum(1 for f in found[:first] if f is not root and f is not cons)
    return rest[:at] + [root, cons] + rest[at:]


def _queue_and_slow_station(found: list[CauseFinding]) -> list[CauseFinding]:
    """Return the findings with the AP queue overflow and the performance anomaly in causal order.

    A queue overflows when packets arrive faster than the AP sends them.  An unresponsive stream
    offered faster than its station takes in keeps the queue full by itself: the overflow is the
    root, and when that station is the slow one, its hold on the air follows from the flood.  With
    no such stream (responsive TCP backs off), the queue filled because the slow station's frames
    slowed the AP's service: the anomaly is the root, the overflow its consequence."""
    pa = next((f for f in found if f.cause == performance_anomaly.NAME and f.explained_by is None), None)
    qo = next((f for f in found if f.cause == "ap_queue_overflow" and f.explained_by is None), None)
    slow = _slow_station(pa) if pa is not None else None
    if qo is None or slow is None:
        return found
    floods = [u for u in qo.numbers.get("udp") or []
              if u.get("offered_bps", 0.0) > FLOOD_RATIO * u.get("station_delivered_bps", 0.0)]
    if any(u.get("station") == slow for u in floods):
        u = next(u for u in floods if u.get("station") == slow)
        return _pair(found, qo, pa, f"performance_anomaly because an unresponsive stream ({u['flow']}) offered "
                                    f"{u['offered_bps'] / 1e6:.1f} Mbit/s at the AP's wired side to {slow}, which "
                                    f"was delivered {u['station_delivered_bps'] / 1e6:.1f} Mbit/s in all: the AP's "
                                    f"queue stayed full of its packets")
    if floods:
        return found            # a flood to another station: two roots
    return _pair(found, pa, qo, f"ap_queue_overflow because {slow}'s slow frames held the AP's transmit line while "
                                f"responsive flows kept arriving: {pa.summary}")


REJOIN_RETRIED = 2.0             # a station retried this many times its usual share was failing


def _retried_more(f: CauseFinding, stations: set[str]) -> bool:
    """Return whether one of `stations` had its frames retried `REJOIN_RETRIED` times the usual share in a
    `mac_retries` finding (the window's stations are all named there, the failing ones by their numbers)."""
    usual = f.numbers.get("retry_fraction_outside")
    if usual is None:
        return False
    return any(p.get("station") in stations and p.get("attempts")
               and p["retries"] / p["attempts"] >= REJOIN_RETRIED * max(float(usual), 0.01)
               for p in f.numbers.get("per_station") or [])


def _rejoin_after_link_trouble(found: list[CauseFinding]) -> list[CauseFinding]:
    """Return the findings with a rejoin (`handoff` of a station that lost its association and joined the same
    AP again) after its station's weakening link or MAC retries: a station misses the beacons its link fails
    to carry, and its association lapses.  A roam or a deauthentication is a decision, not a consequence."""
    ho = next((f for f in found if f.cause == "handoff" and f.explained_by is None and f.numbers.get("rejoins")),
              None)
    if ho is None:
        return found
    away = set(ho.stations)
    for f in found:
        if f is ho or set(f.stations).isdisjoint(away):
            continue
        if f.cause == "rate_change" and f.numbers.get("link_weakened") is not False:
            what = "weakening link"
        elif f.cause == mac_retries.NAME and _retried_more(f, away):
            what = "link whose frames failed"
        else:
            continue
        ho.explained_by = f.cause
        who = sorted(away & set(f.stations))
        lost = "its association" if len(who) == 1 else "their associations"
        ho.because = f"handoff because {', '.join(who)} lost {lost} on a {what}: {f.summary}"
        return _after(found, f, ho)
    return found


def explain(ctx: Context, w: Window, found: list[CauseFinding]) -> list[CauseFinding]:
    """Return the findings with each consequence placed right after the root the measurements show made it."""
    found = _queue_and_slow_station(_overflow_after_timeouts(ctx, w, _explain_timeouts(ctx, w, found)))
    found = _after_weak_link(ctx, w, _retried_more_on_slow_link(ctx, w, found))
    return _rejoin_after_link_trouble(_after_rate_change(found))


def _explain_timeouts(ctx: Context, w: Window, found: list[CauseFinding]) -> list[CauseFinding]:
    """Return the findings with `spurious_rto` after the finding whose delay part made the timeouts."""
    by = {f.cause: f for f in found}
    sp = by.get("spurious_rto")
    rto = _rto_ms(sp) if sp is not None else None
    if sp is None or rto is None:
        return found
    s = delaysplit.split(ctx, w, sp.flows or w.flows, rto)
    if s is None or s.total_ms < ROOT_MIN_RTO_SHARE * rto:
        return found
    rc = root_cause(s, by)
    if rc is not None and rc[0] not in by and not _carries_rise(s, rc[1]):
        rc = None           # the split alone, and too small a part of the rise to have made the timeouts
    if rc is None:
        rc = _strongest_maker(s, found, sp.stations or w.stations)
        if rc is None:
            _queue_grew(sp, s)
            return found
    name, part = rc
    root = by.get(name)
    if root is None:
        maker = _MAKERS.get(name)
        root = maker.from_delay(ctx, w, s, sp.confidence) if maker is not None else None
        if root is None:
            return found
    if part == "load" and root.cause != "ap_queue_overflow":
        because = (f"spurious RTOs after the delay grew while {root.cause} held: the late packets waited "
                   f"{s.inside['load']:.0f} ms in the AP queue ({s.outside.get('load', 0.0):.0f} ms outside "
                   f"the drops) of {s.total_ms:.0f} ms (RTO {rto:.0f} ms), a queue of packets served more "
                   f"slowly than the parts can separate")
    else:
        because = (f"spurious RTOs because {root.cause} pushed delay past the RTO: {LABEL[part]} "
                   f"{s.inside[part] / s.total_ms:.0%} of the delay of the late packets (mean {s.total_ms:.0f} "
                   f"ms, {s.inside[part]:.0f} ms of it, {s.outside.get(part, 0.0):.0f} ms outside the drops; "
                   f"RTO {rto:.0f} ms)")
    _with_split(sp, s)
    return _pair(found, root, sp, because)


def _overflow_after_timeouts(ctx: Context, w: Window, found: list[CauseFinding]) -> list[CauseFinding]:
    """Return the findings with `ap_queue_overflow` right after `spurious_rto` when the AP's queue dropped
    nothing until the spurious timeouts' copies reached it, and more copies reached it before its first
    drop than it dropped.

    After a spurious timeout the sender resends its whole window while the originals still wait in the
    AP's queue: the copies double the queue, and it overflows.  The drops are then the timeouts'
    consequence, not the cause of the delay: a queue that overflowed first (a flood, slow start's
    overshoot) dropped before any copy came."""
    qo = next((f for f in found if f.cause == "ap_queue_overflow" and f.explained_by is None), None)
    sp = next((f for f in found if f.cause == "spurious_rto"), None)
    if qo is None or sp is None or sp.explained_by == qo.cause:
        return found
    s, e = w.start_ns - LEAD_NS, w.end_ns
    drops = ctx.between("downlink", s, e).filter(pl.col("fate") == "dropped_at_ap")
    if drops.height == 0:
        return found
    caps = drops["capture_file"].unique().implode()
    copies = ctx.table("retransmissions").filter(pl.col("capture_file").is_in(caps) & pl.col("spurious").fill_null(False)
                                                 & (pl.col("ts_ns") >= s) & (pl.col("ts_ns") < e))["ts_ns"]
    first_drop = int(drops["ts_ns"].min())
    before = int((copies < first_drop).sum())
    if before == 0 or before < drops.height:
        return found
    qo.explained_by = sp.cause
    qo.because = (f"ap_queue_overflow because the spurious timeouts' copies filled the AP's queue: {before:,} "
                  f"retransmitted packets whose originals were not lost reached it before its first drop, "
                  f"{(first_drop - int(copies.min())) / 1e9:.2f} s after the first copy ({drops.height:,} drops)")
    return _after(found, sp, qo)


def _with_split(f: CauseFinding, sp: delaysplit.Split) -> None:
    """Put the late packets' delay split into a `spurious_rto` finding's numbers."""
    f.numbers = {**f.numbers, "delay_ms": {k: round(v, 3) for k, v in sp.inside.items()},
                 "delay_outside_ms": {k: round(v, 3) for k, v in sp.outside.items()}, "late_packets": sp.packets}


def _carries_rise(sp: delaysplit.Split, part: str) -> bool:
    """Return whether part `part` can have made the rise of the late packets' delay on the AP's side: it
    grew by at least ROOT_MIN_SHARE of that rise in ms, or the AP took SLOWER_SERVICE times longer per
    packet than outside the drops.

    A root that no cause module found in the window rests on the split alone.  Its share of the line
    time growing (`root_cause`) is then not enough: a queue that grew tenfold while the AP served each
    packet as fast as before (the flows' own windows filling a large buffer) also makes a small part's
    share grow, and "the retries pushed the delay past the RTO" would be false by its own numbers (18 ms
    of a 408 ms rise).  A line held by retries does build a queue of plain work behind it, which the
    late packets then wait out with few retries in their own wait; but then the line served each
    packet more slowly, which is what the service time shows."""
    ap_in, ap_out = sp.ap_side()
    return sp.grew(part) >= ROOT_MIN_SHARE * max(ap_in - ap_out, 0.0) or sp.served_slower(SLOWER_SERVICE)


def _queue_grew(f: CauseFinding, sp: delaysplit.Split) -> None:
    """Add the delay split to a `spurious_rto` finding that stays a root, and say so in its summary when
    the late packets' delay grew as AP queue sojourn at the same service per packet: more packets queued
    (the flows' own windows), not a slower air."""
    _with_split(f, sp)
    if max(delaysplit.PARTS, key=sp.grew) != "load" or sp.served_slower(SLOWER_SERVICE):
        return
    svc, svc_out = sp.extra.get("service_ms"), sp.extra.get("service_outside_ms")
    if not svc or not svc_out:
        return
    f.summary += (f"; the late packets waited {sp.inside['load']:.0f} ms in the AP queue "
                  f"({sp.outside.get('load', 0.0):.0f} ms outside the drops) of {sp.total_ms:.0f} ms, "
                  f"served at {svc:.2f} ms a packet ({svc_out:.2f} ms outside): more packets queued, the air no slower")


def chain(found: list[CauseFinding]) -> dict[str, Any]:
    """Return {"root": cause, "consequences": [{cause, because}]} of ordered findings."""
    roots = [f for f in found if f.explained_by is None]
    return {"root": roots[0].cause if roots else None,
            "consequences": [{"cause": f.cause, "explained_by": f.explained_by, "because": f.because}
                             for f in found if f.explained_by is not None]}
