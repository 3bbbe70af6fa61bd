"""What made a window's packets late: the `delay` table split by what the AP's transmit line was doing.

A downlink packet's delay is its wired path, its wait in the AP's queue, and its own service
(`xlayer.metrics.delay`).  While it waited, the AP served the packets ahead of it, so its wait is
split by what those packets cost: their retransmissions (`retry`), their further fragments
(`fragments`), the service of one station that takes far more of the line than its packets'
share (`hog`), and plain work, first transmissions and access (`load`).  The packet's own service
adds its own retries and fragments to those parts and the rest to `load`.  RTS the AP sent that no
CTS answered are retry time too (`rts_retry_spans`): a deaf receiver behind RTS/CTS costs the line
its RTS retries, and its data frames, dropped at the retry limit, never show a retransmission.

The hog is the station whose service exceeds what its packets would have cost at the other
stations' typical per-packet service by the most, when that excess is at least `HOG_MIN_SHARE` of
the AP's service time in the window: the line time the other stations lost to it.  The same excess
is counted in airtime (every frame of the station a sniffer saw, both ways, over its packets) and
the larger share counts: the air also holds the slow station's own uplink frames.  The others lost
that time only if they wanted the line meanwhile: the line's idle time in the steps where the hog's
packets were in it comes off the excess (`Hog.lost_share`, `line_busy`).  Whether it is
slow because of its link (its PHY rate a fraction of the others' and its signal weaker: the
performance anomaly) or because its frames are retried on a good link (a deaf or interfered
receiver: MAC retries) is decided from those measured rates and signals.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from xlayer.attribution.causes.base import LEAD_NS, Context, Window
from xlayer.metrics.delay import covered

PARTS = ("wired", "load", "retry", "fragments", "hog")
# an unanswered RTS's cycle: CTS timeout, DIFS and a backoff of at most 1023 slots of 20 us (DSSS), a new RTS
RTS_CYCLE_MAX_NS = 1023 * 20_000 + 1_000_000
HOG_MIN_SHARE = 0.10          # line time the others lost to one station, of the AP's service time
MIN_PACKETS = 10              # a station's packets in the window before its per-packet service counts
LINE_STEP_NS = 100_000_000   # steps in which the line's idle time is weighed against a slow station's (about an RTT)
SLOW_RATE_RATIO = 0.6         # a weak link: its PHY rate at most this share of the others' median ...
WEAK_SIGNAL_DB = 6.0          # ... and its signal this much weaker (when the captures say)


@dataclass
class Hog:
    """The station that took the most line time beyond its packets' share, and why it is slow."""

    station: str
    excess_share: float            # of the AP's service time in the window
    service_share: float
    packet_share: float
    per_packet_ms: float
    others_per_packet_ms: float
    rate_mbps: float | None
    others_rate_mbps: float | None
    signal_db_below: float | None  # its signal below the others' median (dB; None: unknown)
    retry_share: float             # of its own service time
    fragments_share: float
    retry_excess_ms: float = 0.0   # its retry time per packet beyond the others' median (ms)
    fragments_excess_ms: float = 0.0   # the same for its further fragments
    line_busy: float = 1.0         # the AP's line busy, in the window's steps holding its packets (`line_busy`)

    @property
    def lost_share(self) -> float:
        """Return the line time the other stations lost to it, of the AP's busy time (>= 0).

        Its excess is theirs only if they wanted the line meanwhile: the time the line stood idle they
        could have used and did not (their traffic was limited elsewhere), so it comes off the excess."""
        busy = max(self.line_busy, 1e-9)
        return max(0.0, self.excess_share - (1.0 - busy) / busy)

    @property
    def slowed_by_fragments(self) -> bool:
        """Return whether its further fragments, not its retries, are what it spends beyond the others.

        A threshold that splits every station's packets alike costs each of them the same per packet:
        only the part a station pays beyond the others' per-packet cost makes it the hog."""
        return self.fragments_excess_ms > 0 and self.fragments_excess_ms > self.retry_excess_ms

    @property
    def weak_link(self) -> bool:
        """Return whether the station is slow because of its link (low PHY rate, weaker signal)."""
        if self.rate_mbps is None or not self.others_rate_mbps:
            return False
        slow = self.rate_mbps <= SLOW_RATE_RATIO * self.others_rate_mbps
        return slow and (self.signal_db_below is None or self.signal_db_below >= WEAK_SIGNAL_DB)

    def as_numbers(self) -> dict[str, Any]:
        """Return the measured numbers, rounded, for a finding's JSON."""
        out = {**self.__dict__, "lost_share": self.lost_share}
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in out.items()}


@dataclass
class Split:
    """Mean delay per part (ms) of the chosen packets in a window and outside the drop windows."""

    inside: dict[str, float]
    outside: dict[str, float]
    packets: int
    hog: Hog | None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def total_ms(self) -> float:
        return sum(self.inside.values())

    def grew(self, part: str) -> float:
        """Return how much part `part` of the late packets' delay exceeds its mean outside the drops (ms, >= 0)."""
        return max(0.0, self.inside[part] - self.outside.get(part, 0.0))

    def ap_side(self) -> tuple[float, float]:
        """Return the late packets' delay on the AP's side (every part but the wired path) and its mean
        outside the drops (ms)."""
        return (sum(v for k, v in self.inside.items() if k != "wired"),
                sum(v for k, v in self.outside.items() if k != "wired"))

    def served_slower(self, factor: float) -> bool:
        """Return whether the AP took `factor` times longer per packet than outside the drops."""
        svc, svc_out = self.extra.get("service_ms"), self.extra.get("service_outside_ms")
        return bool(svc and svc_out and svc >= factor * svc_out)

    def increase(self, part: str) -> float:
        """Return how much of the late packets' delay part `part` holds beyond its share outside the drops (ms, >= 0).

        The wired path adds to a packet's delay whatever the queue: its growth is the difference.  The AP's
        parts are a share of the line time a packet waited: a longer queue of the same work grows them all
        in proportion, so what changed is the part whose share of that time grew (the late packets waited
        longest by choice, and on a line busy with fragments every longer wait is mostly fragment time).
        """
        if part == "wired" or not self.outside:
            return self.grew(part)
        ap_in, ap_out = self.ap_side()
        if ap_out <= 0:
            return max(0.0, self.inside[part])
        return max(0.0, self.inside[part] - ap_in * self.outside.get(part, 0.0) / ap_out)


def _window(ctx: Context, w: Window) -> pl.DataFrame:
    return ctx.between("delay", w.start_ns - LEAD_NS, w.end_ns)


def _rates(ctx: Context, w: Window) -> dict[str, float]:
    dl = ctx.between("downlink", w.start_ns - LEAD_NS, w.end_ns)
    if dl.height == 0 or "rates_mbps" not in dl.columns:
        return {}
    r = dl.select("station", pl.col("rates_mbps").list.first().alias("r")).drop_nulls()
    return dict(r.group_by("station").agg(pl.col("r").mean()).iter_rows())


def _signals(ctx: Context, w: Window) -> dict[str, float]:
    ss = ctx.between("station_series", w.start_ns - LEAD_NS, w.end_ns, col="bin_start_ns")
    if ss.height == 0:
        return {}
    s = ss.select("station", "signal_dbm").drop_nulls()
    return dict(s.group_by("station").agg(pl.col("signal_dbm").median()).iter_rows())


def line_busy(d: pl.DataFrame, start_ns: int, end_ns: int, station: str | None = None) -> float:
    """Return the share of [start_ns, end_ns) during which the AP held a downlink packet of `d` (from
    its arrival to the end of its last transmission), counted in the `LINE_STEP_NS` steps where
    `station`'s packets were in the line (every step when None); 0 when none.

    Whether the others wanted the line time a slow station took is a matter of the moment: idle
    steps after its traffic ended gave them nothing back while it held the line."""
    d = d.filter(pl.col("ap_ns").is_not_null())
    if d.height == 0 or end_ns <= start_ns:
        return 0.0
    ts = d["ts_ns"].to_numpy().astype(np.int64)
    ends = ts + d["ap_ns"].to_numpy().astype(np.int64)
    edges = np.minimum(np.arange(start_ns, end_ns + LINE_STEP_NS, LINE_STEP_NS, dtype=np.int64), end_ns)
    edges = np.unique(edges)
    busy = np.diff(covered(ts, ends)(edges))
    if station is not None:
        mine = (d["station"] == station).to_numpy()
        if not mine.any():
            return 0.0
        present = np.diff(covered(ts[mine], ends[mine])(edges)) > 0
        busy, span = busy[present], np.diff(edges)[present]
    else:
        span = np.diff(edges)
    return float(busy.sum()) / max(int(span.sum()), 1)


def _excess(used: np.ndarray, n: np.ndarray, total: float) -> np.ndarray:
    """Return per station the time it used beyond its packets at the others' median cost, over `total`."""
    cost = used / n
    return np.array([used[i] - n[i] * float(np.median(np.delete(cost, i))) for i in range(len(used))]) / total


def _air_excess(ctx: Context, w: Window, per: pl.DataFrame) -> np.ndarray | None:
    """Return per station of `per` its airtime beyond what its packets cost the others (share of their air)."""
    ss = ctx.between("station_series", w.start_ns, w.end_ns, col="bin_start_ns")
    if ss.height == 0 or "airtime_ns" not in ss.columns:
        return None
    a = dict(ss.group_by("station").agg(pl.col("airtime_ns").sum()).iter_rows())
    air = np.array([float(a.get(st) or 0.0) for st in per["station"].to_list()])
    n = per["n"].to_numpy().astype(float)
    if (air <= 0).any() or air.sum() <= 0:
        return None
    return _excess(air, n, float(air.sum()))


def _rts_moved(ctx: Context, w: Window, d: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, int]]:
    """Return the window's packets with the unanswered RTS taken out of their service, and per station
    the line time its unanswered RTS held (`unanswered_rts`).

    The AP's line held by RTS to a deaf receiver shows as the access of whichever packet goes out next,
    often another station's: that time is the deaf station's, not the packet's."""
    stations = d["station"].drop_nulls().unique().to_list()
    if not stations:
        return d, {}
    un = unanswered_rts(ctx.between("air_frames", w.start_ns - LEAD_NS, w.end_ns), stations)
    if un.height == 0:
        return d, {}
    f = covered(un["ts_ns"].to_numpy(), un["end_ns"].to_numpy())
    hol = (d["ts_ns"] + d["queue_ns"]).to_numpy().astype(np.int64)
    access = d["access_ns"].fill_null(0).to_numpy().astype(np.int64)
    held = np.clip(f(hol + access) - f(hol), 0, access)
    return d.with_columns(pl.col("service_ns") - pl.Series(held)), held_by_station(un)


def find_hog(ctx: Context, w: Window, d: pl.DataFrame | None = None) -> Hog | None:
    """Return the window's hog station (see the module docstring), or None when no station is one."""
    d = _window(ctx, w) if d is None else d
    if d.height == 0:
        return None
    d, rts_ns = _rts_moved(ctx, w, d)
    per = (d.group_by("station").agg(pl.len().alias("n"), pl.col("service_ns").sum().alias("t"),
                                     pl.col("retry_ns").sum().alias("rt"), pl.col("fragments_ns").sum().alias("fr"))
           .with_columns(pl.col("station").replace_strict(rts_ns, default=0, return_dtype=pl.Int64).alias("_rts"))
           .with_columns(pl.col("t") + pl.col("_rts"), pl.col("rt") + pl.col("_rts"))
           .filter(pl.col("n") >= MIN_PACKETS).sort("station"))
    if per.height < 2:
        return None
    n, t = per["n"].to_numpy().astype(float), per["t"].to_numpy().astype(float)
    total = float(d["service_ns"].sum()) + sum(rts_ns.values())
    if total <= 0:
        return None
    cost = t / n
    excess = _excess(t, n, total)
    air = _air_excess(ctx, w, per)
    if air is not None:
        # the same excess counted in air used (data both ways, retries, ACKs: what a sniffer sees
        # of each station), which also holds when the AP's service spans overlap (fragment bursts
        # interleaved) and counts the slow station's own uplink frames
        excess = np.maximum(excess, air)
    i = int(np.argmax(excess))
    if excess[i] < HOG_MIN_SHARE:
        return None
    st = per["station"][i]
    rates, sig = _rates(ctx, w), _signals(ctx, w)
    others = [s for s in per["station"].to_list() if s != st]
    orates = [rates[s] for s in others if s in rates]
    osig = [sig[s] for s in others if s in sig]
    rt_pp, fr_pp = per["rt"].to_numpy() / n, per["fr"].to_numpy() / n
    return Hog(st, float(excess[i]), float(t[i] / total), float(n[i] / n.sum()), float(cost[i] / 1e6),
               float(np.median(np.delete(cost, i)) / 1e6), rates.get(st), float(np.median(orates)) if orates else None,
               float(np.median(osig) - sig[st]) if st in sig and osig else None,
               float(per["rt"][i] / max(t[i], 1)), float(per["fr"][i] / max(t[i], 1)),
               float(rt_pp[i] - np.median(np.delete(rt_pp, i))) / 1e6,
               float(fr_pp[i] - np.median(np.delete(fr_pp, i))) / 1e6, line_busy(d, w.start_ns, w.end_ns, st))


NO_SPANS = (np.zeros(0, np.int64), np.zeros(0, np.int64))


def unanswered_rts(air: pl.DataFrame, stations: list[str]) -> pl.DataFrame:
    """Return the AP's RTS to `stations` that no CTS answered (ts_ns; end_ns: the AP's next RTS, capped;
    station: the receiver that did not answer).

    An RTS to a receiver that does not answer (deaf, or a collision at it) is sent again after a CTS
    timeout and a doubled backoff, up to the retry limit; the data frame behind it never goes out, so
    this retry time holds the AP's transmit line without showing in any packet's retransmissions.
    Spans are capped at `RTS_CYCLE_MAX_NS`: beyond it the medium was held by others, not by the wait.
    """
    none = pl.DataFrame(schema={"ts_ns": pl.Int64, "end_ns": pl.Int64, "station": pl.Utf8})
    if air.height == 0 or not stations:
        return none
    ctl = air.filter(pl.col("wlan_type") == 1)
    rts = ctl.filter((pl.col("wlan_subtype") == 11) & pl.col("wlan_ra").is_in(stations))
    if rts.height == 0:
        return none
    ap = rts["wlan_ta"].drop_nulls().unique().to_list()
    cts = ctl.filter((pl.col("wlan_subtype") == 12) & pl.col("wlan_ra").is_in(ap))
    ev = pl.concat([rts.select("ts_ns", pl.lit(True).alias("rts"), pl.col("wlan_ra").alias("station")),
                    cts.select("ts_ns", pl.lit(False).alias("rts"), pl.lit(None, pl.Utf8).alias("station"))]).sort("ts_ns")
    ev = ev.with_columns(pl.col("rts").shift(-1).alias("_next_rts"), pl.col("ts_ns").shift(-1).alias("_next"))
    un = ev.filter(pl.col("rts") & pl.col("_next_rts").fill_null(False))
    return un.select(pl.col("ts_ns").cast(pl.Int64),
                     pl.min_horizontal("_next", pl.col("ts_ns") + RTS_CYCLE_MAX_NS).cast(pl.Int64).alias("end_ns"),
                     "station")


def held_by_station(un: pl.DataFrame) -> dict[str, int]:
    """Return per station the line time (ns) the unanswered RTS of `un` (`unanswered_rts`) to it held."""
    per = un.group_by("station").agg((pl.col("end_ns") - pl.col("ts_ns")).sum().alias("ns"))
    return {st: int(ns) for st, ns in per.iter_rows()}


def rts_retry_spans(air: pl.DataFrame, stations: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Return (start, end) ns of the AP's RTS that no CTS answered: each from that RTS to the AP's next
    (`unanswered_rts`)."""
    un = unanswered_rts(air, stations)
    return un["ts_ns"].to_numpy().astype(np.int64), un["end_ns"].to_numpy().astype(np.int64)


def _parts(d: pl.DataFrame, all_d: pl.DataFrame, hog: str | None,
           rts: tuple[np.ndarray, np.ndarray] = NO_SPANS) -> dict[str, np.ndarray]:
    """Return per packet of `d` its delay (ns) per part, its wait split by what the line served
    (`rts`: spans of unanswered RTS, counted as retry time: `rts_retry_spans`)."""
    arrive = d["ts_ns"].to_numpy().astype(np.int64)
    q = d["queue_ns"].to_numpy().astype(np.int64)
    hol = arrive + q
    a = all_d
    a_hol = (a["ts_ns"] + a["queue_ns"]).to_numpy().astype(np.int64)
    a_done = (a["ts_ns"] + a["ap_ns"]).to_numpy().astype(np.int64)
    a_rt = a["retry_ns"].to_numpy().astype(np.int64)
    a_fr = a["fragments_ns"].to_numpy().astype(np.int64)
    first_end = a_done - a_rt - a_fr
    is_hog = (a["station"] == hog).fill_null(False).to_numpy() if hog else np.zeros(a.height, bool)

    def cov(s: np.ndarray, e: np.ndarray, keep: np.ndarray) -> np.ndarray:
        f = covered(s[keep], e[keep])
        return np.clip(f(hol) - f(arrive), 0, q)

    hog_w = cov(a_hol, a_done, is_hog) if hog else np.zeros(len(q), np.int64)
    mine_hog = (d["station"] == hog).fill_null(False).to_numpy() if hog else np.zeros(len(q), bool)
    hog_w = np.where(mine_hog, 0, hog_w)      # the hog's own packets wait behind its others: its own slowness
    keep = (a_rt > 0) & ~is_hog
    rt_w = cov(np.concatenate([a_done - a_rt, rts[0]]), np.concatenate([a_done, rts[1]]),
               np.concatenate([keep, np.ones(len(rts[0]), bool)]))
    fr_w = cov(first_end, first_end + a_fr, (a_fr > 0) & ~is_hog)
    wait_other = np.minimum(rt_w + fr_w + hog_w, q)
    # the packet's own unanswered RTS: the part of its access (head of line to its first data frame) they held
    access = d["access_ns"].to_numpy().astype(np.int64)
    rts_before = covered(*rts)
    own_rts = np.clip(rts_before(hol + access) - rts_before(hol), 0, access)
    own_rt = d["retry_ns"].to_numpy().astype(np.int64) + own_rts
    own_fr = d["fragments_ns"].to_numpy().astype(np.int64)
    own_rest = (d["access_ns"] + d["air_ns"]).to_numpy().astype(np.int64) - own_rts
    retry = rt_w + np.where(mine_hog, 0, own_rt)
    frags = fr_w + np.where(mine_hog, 0, own_fr)
    hogp = hog_w + np.where(mine_hog, own_rt + own_fr + own_rest, 0)
    load = (q - wait_other) + np.where(mine_hog, 0, own_rest)
    wired = d["wired_ns"].fill_null(0).to_numpy().astype(np.int64)
    return {"wired": wired, "load": load, "retry": retry, "fragments": frags, "hog": hogp}


def _steady(ctx: Context, name: str, flows: list[str] | None = None) -> pl.DataFrame:
    """Return the rows of a table in the steady state: outside every drop window and the LEAD_NS
    before each, or outside the drop windows alone when that leaves no packet of `flows`.

    A cause starts before the goodput falls (a hidden node's first collisions, a slow station's first
    frames): a baseline holding that lead would count the cause's own start as usual.  A drop from the
    first steady second has no lead to spare: its baseline is what is left."""
    rows = ctx.outside(name)
    if not ctx.quiet:
        return rows
    kept = rows.filter(pl.all_horizontal([(pl.col("ts_ns") < s - LEAD_NS) | (pl.col("ts_ns") >= s)
                                          for s, _e in ctx.quiet]))
    mine = kept if flows is None else kept.filter(pl.col("flow").is_in(flows))
    return kept if mine.height else rows


def split(ctx: Context, w: Window, flows: list[str], rto_ms: float | None = None) -> Split | None:
    """Return where the flows' slowest packets in the window spent their delay, against outside the drops.

    The packets are those whose delay (wired + AP) reached half the RTO when given, else the slowest
    tenth; in the steady state (`_steady`) every packet of the same flows counts.
    """
    d = _window(ctx, w)
    if d.height == 0 or not flows:
        return None
    mine = d.filter(pl.col("flow").is_in(flows))
    if mine.height == 0:
        return None
    hog = find_hog(ctx, w, d)
    # the packets served while the window's packets waited arrived up to their longest wait before
    served = ctx.between("delay", w.start_ns - LEAD_NS - int(mine["queue_ns"].max() or 0), w.end_ns)
    stations = d["station"].drop_nulls().unique().to_list()
    parts = _parts(mine, served, hog.station if hog else None,
                   rts_retry_spans(ctx.between("air_frames", int(served["ts_ns"].min()), w.end_ns), stations))
    total = sum(parts.values())
    sel = total >= 0.5 * rto_ms * 1e6 if rto_ms else total >= np.quantile(total, 0.9)
    if not sel.any():
        sel = total >= np.quantile(total, 0.9)
    inside = {k: float(v[sel].mean()) / 1e6 for k, v in parts.items()}
    hs = hog.station if hog else None
    # the steady state depends on the flows, the hog and the stations, not on the window: worked out
    # once per analysis for every window that asks
    outside, svc_out = ctx.memo(ctx.steady_key("delaysplit", sorted(flows), hs, sorted(stations, key=str)),
                                lambda: _outside(ctx, flows, hs, stations))
    # how long the line took per packet, in and out: a longer queue of the same work is more packets
    # ahead; the same queue of slower work is what a change on the air made
    svc_in = float(served["service_ns"].mean() or 0.0) / 1e6
    return Split(inside, dict(outside), int(sel.sum()), hog, {"service_ms": svc_in, "service_outside_ms": svc_out})


def _outside(ctx: Context, flows: list[str], hog: str | None, stations: list) -> tuple[dict[str, float], float | None]:
    """Return the flows' mean delay (ms) per part in the steady state, and the line's mean service time
    there (ms; None when the flows have no steady packet)."""
    line = _steady(ctx, "delay", flows)
    out = line.filter(pl.col("flow").is_in(flows))
    if not out.height:
        return {}, None
    po = _parts(out, line, hog, rts_retry_spans(_steady(ctx, "air_frames"), stations))
    return {k: float(v.mean()) / 1e6 for k, v in po.items()}, float(line["service_ns"].mean() or 0.0) / 1e6
