"""The `random` scenario: a setup and 0-2 injected causes drawn from the seed (issue 11).

`build(seconds, seed, standard)` with a standard ("g", "n", "ac", "ax"; `xlayer sim random --standard`)
runs the same draw there through `scenarios.for_standard` (distances that keep each link's SNR, the
same kind of rate manager, UDP offered rates scaled with the lowest PHY rate, a hidden node on ac/ax a
VHT/HE pair on the BSS's 80 MHz channel offering the same share of the air) and a receive window for
that standard's path; a draw with fragmentation cannot run off 802.11g (ns-3 3.44 aborts).

`draw(seed)` picks, with a `random.Random` of its own (nothing else in the run moves it), what the
ns-3 world of `world.py` can build: 1-6 stations at 2-120 m, 802.11g or n, Minstrel or a constant
rate, an AP queue of 50-1000 packets, a wired (server <-> AP) one-way delay of 1-80 ms, and 0-2 causes
the fixed scenarios know how to write truth for, or a hidden node.  `build(seconds, seed)` turns the
draw into a `Scenario` whose ``causes`` hook writes truth with the same `_cause` helper as the fixed
scenarios, so `xlayer.attribution.truthcheck` scores it.

At most one cause is an *event* (it starts during the run): ``performance_anomaly`` (a far station's
TCP download starts), ``udp_overflow`` (an unresponsive UDP stream to a far station starts),
``delay_spike`` (a station is deaf for 0.6-1.2 s behind a reliable MAC), ``walkaway`` (a station
walks away until it loses the association) or ``hidden_node`` (an ad hoc 802.11g pair outside the
BSS, beside one station, transmits for 0.6-2 s: broadcast frames at a constant 6-54 Mbit/s, or
unicast frames to its peer under Minstrel; the AP cannot hear it, so its frames to that station
collide there: truth ``mac_retries`` on that station over the burst, ``spurious_rto`` if timeouts
follow); at most one is a *MAC setting* for the whole run: ``fragmentation`` (threshold 256-1000 B)
or ``rts_cts`` (threshold 0-1000 B).  No cause: a steady run.

Constraints that keep the truth honest (what the draw will not produce):

- The stations that carry no cause stand where the rate in use works without help (g: 2-20 m, n:
  2-12 m) and start together, so a run without a cause has nothing an analyzer should name.
- The far stations (105-120 m), fragmentation, the delay spike, the walk and the hidden node are
  802.11g only (ns-3 3.44 aborts on fragmentation with aggregation, a missed Block Ack freezes the AP
  queue, and the interferer is 802.11g); the far stations and the walk need Minstrel (a constant rate
  has no performance anomaly and no range), the delay spike a constant rate (as the fixed scenario:
  Minstrel would add rate changes).
- The hidden node's victim stands 15-20 m from the AP, the interferer 0.5 m beyond it (its peer 0.5 m
  further) at a transmit power that makes it 0-3 dB weaker than the AP there: at the AP (and the
  sniffer beside it) it arrives at about -95 dBm or less, below preamble detection (-90 dBm), so the
  AP never defers to it (truth.json's topology gives the powers).  The other stations stand within
  10 m and at least 90 degrees away from the victim, so they do not hear it: the retries are the
  victim's.  It transmits only in its burst, and its frames are never the AP's BSS (ad hoc).  It is
  never drawn with RTS/CTS (the victim's CTS silences it: a trial run's victim kept a retry fraction
  of 0.00 through the burst); with fragmentation it may be.
- The TCP receive window fills the path at its round trip (twice the wired delay plus 5 ms, at 30
  Mbit/s on g and 100 on n; at least ns-3's 128 KiB), but the windows of all flows together fit in
  the AP queue with a fifth spare (a smaller receive buffer when the queue is small), so no queue
  drop happens without the UDP cause, except after spurious timeouts (the servers resend whole
  windows while the originals still wait in the queue): the truth then names ``ap_queue_overflow``
  as a secondary cause.  The send buffer is at least the receive window.
- The receivers delay ACKs at most 40 ms, as Linux does (ns-3's 200 ms equals the 200 ms RTO floor: a
  lone segment's delayed ACK then times the sender out, and a steady run has RTOs).
- The wired link of a random run is point-to-point at 1 Gbit/s with the drawn delay (the fixed
  scenarios keep CSMA with 500 ns: a CSMA channel stays busy for its whole delay); its captures are
  written as Ethernet II, as a host's capture on that link shows them.
"""
from __future__ import annotations

import math
import random
from typing import Any

from xlayer.testbeds.sim.scenarios import (
    Flow,
    Interferer,
    Scenario,
    Station,
    _cause,
    _steady_expect,
    _summary,
    for_standard,
    scenario,
    spurious_without_loss,
    walk_causes,
    walked_away,
)

EVENT_CAUSES = ("performance_anomaly", "udp_overflow", "delay_spike", "walkaway", "hidden_node")
MAC_CAUSES = ("fragmentation", "rts_cts")
CAUSE_KINDS = EVENT_CAUSES + MAC_CAUSES

MAX_STATIONS = 6
GOOD_MAX_M = {"g": 20.0, "n": 12.0}
FAR_M = (105.0, 120.0)
QUEUE = (50, 1000)
RATES_G = ("ErpOfdmRate12Mbps", "ErpOfdmRate18Mbps", "ErpOfdmRate24Mbps", "ErpOfdmRate36Mbps",
           "ErpOfdmRate54Mbps")
RATES_N = ("HtMcs3", "HtMcs4", "HtMcs5", "HtMcs6", "HtMcs7")
SEGMENT = 1448
DEFAULT_RCV_BUF = 131072
# Traffic starts later than the fixed scenarios' 0.5 s: with several stations some associate only
# after a few beacons, and a SYN to a station not yet associated is dropped by the AP and resent
# after ns-3's 3 s connection timeout (the flow would not start within the run).
TRAFFIC_START_S = 1.0
WALK_PATH_LOSS = 4.0     # as the fixed walkaway: the rate falls within seconds at 8-12 m/s
WALK_LOST_M = 65.0       # past about 62 m the station stops hearing beacons (exponent 4)
WIRED_DELAY_MS = (1.0, 80.0)   # one way, server <-> AP
# What one station's TCP download can carry at most (with its MAC overhead): the receive window
# that fills the path is this rate times the round trip.
LINK_BPS = {"g": 30e6, "n": 100e6, "ac": 300e6, "ax": 400e6}
WIFI_RTT_S = 0.005
# The hidden node's victim stands 15-20 m from the AP (the interferer, 0.5 m beyond it and as loud
# there as the AP, then reaches the AP at -95 dBm or less: below preamble detection, about -90 dBm),
# the other stations within 10 m and at least 90 degrees away from it (they do not hear it either).
HIDDEN_VICTIM_M = (15.0, 20.0)
HIDDEN_OTHERS_MAX_M = 10.0
HIDDEN_FOR_S = (0.6, 2.0)
HIDDEN_MODES = ("ErpOfdmRate6Mbps", "ErpOfdmRate12Mbps", "ErpOfdmRate24Mbps", "ErpOfdmRate54Mbps")


# The receivers delay an ACK at most 40 ms, as Linux does (its delayed-ACK floor, TCP_ATO_MIN): ns-3's
# default, 200 ms, equals the RTO floor, so a lone segment's delayed ACK made the sender time out
# (steady trial runs had 1-22 RTOs and no cause).
DEL_ACK_MS = 40.0


def _r(x: float, nd: int = 2) -> float:
    return round(x, nd)


def draw(seed: int) -> dict[str, Any]:
    """Return the parameters of seed `seed`'s random scenario (plain JSON-able values, no ns-3)."""
    rng = random.Random(f"xlayer-random-scenario-{int(seed)}")
    n_causes = rng.choice((0, 1, 1, 2))
    event = mac = None
    if n_causes == 2:
        event, mac = rng.choice(EVENT_CAUSES), rng.choice(MAC_CAUSES)
    elif n_causes == 1:
        kind = rng.choice(CAUSE_KINDS)
        event, mac = (kind, None) if kind in EVENT_CAUSES else (None, kind)
    if event == "hidden_node" and mac == "rts_cts":
        mac = "fragmentation"      # RTS/CTS cures the hidden node: the victim's CTS silences it
    causes = [c for c in (event, mac) if c]

    g_only = event is not None or mac == "fragmentation"
    standard = "g" if g_only else rng.choice(("g", "n"))
    if event in ("performance_anomaly", "udp_overflow", "walkaway"):
        rate_manager = "minstrel"
    elif event == "delay_spike":
        rate_manager = "constant"
    else:       # hidden_node too: the AP's retries at a constant rate or while Minstrel steps down
        rate_manager = rng.choice(("minstrel", "constant"))
    if rate_manager == "minstrel" and standard == "n":
        rate_manager = "minstrel_ht"
    data_mode = rng.choice(RATES_G if standard == "g" else RATES_N) if rate_manager == "constant" else None

    far = event in ("performance_anomaly", "udp_overflow")
    own = far or event == "walkaway"       # the cause brings its own station
    n_sta = rng.randint(2 if far else 1, MAX_STATIONS)
    n_good = n_sta - 1 if own else n_sta
    good_max = 10.0 if event == "walkaway" else HIDDEN_OTHERS_MAX_M if event == "hidden_node" \
        else GOOD_MAX_M[standard]
    good = []
    for _ in range(n_good):
        d, a = rng.uniform(2.0, good_max), rng.uniform(0.0, 2 * math.pi)
        good.append({"distance_m": _r(d), "angle_deg": _r(math.degrees(a), 1)})

    p: dict[str, Any] = {
        "seed": int(seed), "causes": causes, "standard": standard, "rate_manager": rate_manager,
        "data_mode": data_mode, "good_stations": good,
        "event_at_s": _r(rng.uniform(2.0, 3.0)), "after_s": _r(rng.uniform(2.0, 2.5)),
        "steady_s": _r(rng.uniform(3.5, 4.5)),
    }
    if far:
        p["far_m"] = _r(rng.uniform(*FAR_M))
    if event == "udp_overflow":
        p["udp_bps"] = rng.randrange(12_000_000, 18_000_001, 500_000)
        p["queue_packets"] = rng.randint(QUEUE[0], 300)
    else:
        p["queue_packets"] = rng.randint(*QUEUE)
    if event == "delay_spike":
        p["deaf_station"] = rng.randrange(n_good)
        p["deaf_for_s"] = _r(rng.uniform(0.6, 1.2))
    if event == "walkaway":
        p["walk_from_m"] = _r(rng.uniform(8.0, 14.0))
        p["walk_speed_mps"] = _r(rng.uniform(8.0, 12.0))
        p["walk_at_s"] = 2.0
    if mac == "fragmentation":
        p["frag_threshold"] = rng.randrange(256, 1001, 2)
    if mac == "rts_cts":
        p["rts_threshold"] = rng.randint(0, 1000)
    if event == "hidden_node":
        _draw_hidden(rng, p)
    p["wired_delay_ms"] = _r(rng.uniform(*WIRED_DELAY_MS))
    return p


def _draw_hidden(rng: random.Random, p: dict[str, Any]) -> None:
    """Draw the hidden node of `p` into it: the victim (moved out to 15-20 m, the others turned away
    from it) and the interferer's burst, rate and load."""
    good = p["good_stations"]
    v = rng.randrange(len(good))
    good[v]["distance_m"] = _r(rng.uniform(*HIDDEN_VICTIM_M))
    va = good[v]["angle_deg"]
    for i, gs in enumerate(good):
        if i != v and abs((gs["angle_deg"] - va + 180.0) % 360.0 - 180.0) < 90.0:
            gs["angle_deg"] = _r((gs["angle_deg"] + 180.0) % 360.0, 1)
    rm = rng.choice(("constant", "minstrel"))
    h = {"station": v, "for_s": _r(rng.uniform(*HIDDEN_FOR_S)), "rate_manager": rm,
         "data_mode": rng.choice(HIDDEN_MODES) if rm == "constant" else None,
         "offered_duty": _r(rng.uniform(0.3, 0.9)), "size": rng.randrange(500, 1501, 4),
         "sinr_db": _r(rng.uniform(0.0, 3.0))}
    # frames a second that would take the offered share of the air (Minstrel: as if at 24 Mbit/s)
    mbps = int(h["data_mode"][len("ErpOfdmRate"):-len("Mbps")]) if h["data_mode"] else 24
    h["packets_per_s"] = round(h["offered_duty"] / ofdm_airtime_s(h["size"], mbps), 1)
    p["hidden"] = h


def ofdm_airtime_s(payload: int, mbps: int) -> float:
    """Return the air time of an ERP-OFDM data frame carrying `payload` bytes (LLC/SNAP, a 24-byte
    header and the FCS around it) at `mbps`: preamble, SIGNAL, data symbols and signal extension."""
    bits = 16 + 8 * (payload + 8 + 24 + 4) + 6
    return (20 + 4 * math.ceil(bits / (4 * mbps)) + 6) / 1e6


def default_seconds(p: dict[str, Any]) -> float:
    """Return the simulated length the draw `p` needs to show its causes (and a steady stretch after)."""
    ev = next((c for c in p["causes"] if c in EVENT_CAUSES), None)
    if ev == "walkaway":
        return _r(p["walk_at_s"] + (WALK_LOST_M - p["walk_from_m"]) / p["walk_speed_mps"] + 1.5)
    if ev == "delay_spike":
        return _r(p["event_at_s"] + p["deaf_for_s"] + p["after_s"])
    if ev == "hidden_node":
        return _r(p["event_at_s"] + p["hidden"]["for_s"] + p["after_s"])
    if ev is not None:
        return _r(p["event_at_s"] + p["after_s"])
    return p["steady_s"]


def describe(p: dict[str, Any]) -> str:
    """Return one line saying what the draw `p` is."""
    rate = p["data_mode"] or p["rate_manager"]
    n = len(p["good_stations"]) + (1 if "far_m" in p or "walk_from_m" in p else 0)
    causes = ", ".join(p["causes"]) or "no cause (steady)"
    return (f"seed {p['seed']}: 802.11{p['standard']} {rate}, {n} station(s), AP queue {p['queue_packets']} "
            f"packets, wired delay {p['wired_delay_ms']:g} ms; {causes}")


@scenario("random", "a setup and 0-2 injected causes drawn from the seed: 1-6 stations at 2-120 m, "
          "802.11g or n, Minstrel or a constant rate, AP queue 50-1000 packets, wired delay 1-80 ms; causes "
          "among performance_anomaly, udp_overflow, delay_spike, walkaway, hidden_node, fragmentation, "
          "rts_cts (issue 11)",
          0.0, seeded=True)
def build(seconds: float | None, seed: int, standard: str | None = None) -> Scenario:
    """Return seed `seed`'s random scenario for `seconds` of simulated time (None: what it needs), on
    `standard` if given (the draw moved there by `scenarios.for_standard`), else on the drawn one."""
    sc = _build(seconds, seed)
    if standard is None or standard == sc.standard:
        return sc
    p = draw(seed)
    sc = for_standard(sc, standard)
    # the receive window that fills the new standard's path (the draw's queue still caps it)
    rcv = rcv_buffer({**p, "standard": standard}, sum(f.proto == "tcp" for f in sc.flows))
    sc.tcp_rcv_buf, sc.tcp_snd_buf = rcv, max(DEFAULT_RCV_BUF, rcv)
    sc.summary += f" (drawn on 802.11{p['standard']}, run on 802.11{standard})"
    return sc


def _build(seconds: float | None, seed: int) -> Scenario:
    """Return seed `seed`'s random scenario on the drawn standard."""
    p = draw(seed)
    secs = float(seconds) if seconds is not None else default_seconds(p)
    causes = p["causes"]
    ev = next((c for c in causes if c in EVENT_CAUSES), None)
    at = min(p["event_at_s"], max(secs / 2, TRAFFIC_START_S + 0.5))   # a short run: the event sooner

    stations = []
    flows = []
    for i, gs in enumerate(p["good_stations"]):
        a = math.radians(gs["angle_deg"])
        st = Station(f"sta{i}", _r(gs["distance_m"] * math.cos(a), 3), _r(gs["distance_m"] * math.sin(a), 3))
        stations.append(st)
        flows.append(Flow(f"tcp{i}", "tcp", st.name, 5001 + i, TRAFFIC_START_S))
    good_flows = [f.name for f in flows]

    extra: dict[str, Any] = {}
    if ev == "performance_anomaly":
        stations.append(Station("sta_slow", 0.0, p["far_m"]))
        flows.append(Flow("tcp_slow", "tcp", "sta_slow", 5101, at))
    elif ev == "udp_overflow":
        stations.append(Station("sta_far", 0.0, p["far_m"]))
        flows.append(Flow("udp_far", "udp", "sta_far", 6001, at, rate_bps=p["udp_bps"], size=1400))
        extra["fading_m"] = 3.0
    elif ev == "delay_spike":
        st = stations[p["deaf_station"]]
        st.deaf = [(at, _r(at + p["deaf_for_s"], 6))]
        # a reliable MAC, as the fixed delay_spike scenario
        extra.update(frame_retry_limit=65535, max_missed_beacons=1000)
    elif ev == "walkaway":
        walk_at = min(p["walk_at_s"], max(secs / 4, TRAFFIC_START_S + 0.5))
        st = Station("sta_walk", p["walk_from_m"], 0.0, walk_at_s=walk_at, speed_mps=p["walk_speed_mps"])
        stations.insert(0, st)
        flows.insert(0, Flow("tcp_walk", "tcp", "sta_walk", 5100, TRAFFIC_START_S))
        extra.update(path_loss_exponent=WALK_PATH_LOSS, fading_m=3.0)
    elif ev == "hidden_node":
        h = p["hidden"]
        extra["interferers"] = [Interferer(
            "hidden0", f"sta{h['station']}", at, _r(min(at + h["for_s"], secs), 6), sinr_db=h["sinr_db"],
            rate_manager=h["rate_manager"], data_mode=h["data_mode"], packets_per_s=h["packets_per_s"],
            size=h["size"])]
    if "frag_threshold" in p:
        extra["frag_threshold"] = p["frag_threshold"]
    if "rts_threshold" in p:
        extra["rts_threshold"] = p["rts_threshold"]

    rcv_buf = rcv_buffer(p, sum(f.proto == "tcp" for f in flows))

    control = None
    if p["data_mode"]:
        control = p["data_mode"] if p["standard"] == "g" else "OfdmRate24Mbps"

    hooks = _Hooks(p, ev, at, good_flows)
    return Scenario(
        name="random", summary=describe(p), seconds=secs, stations=stations, flows=flows,
        standard=p["standard"], rate_manager=p["rate_manager"], data_mode=p["data_mode"],
        control_mode=control, queue_packets=p["queue_packets"], tcp_rcv_buf=rcv_buf,
        tcp_snd_buf=max(DEFAULT_RCV_BUF, rcv_buf), wired_delay_ms=p["wired_delay_ms"],
        del_ack_timeout_ms=DEL_ACK_MS, expect=hooks.expect, causes=hooks.causes, **extra)


def rcv_buffer(p: dict[str, Any], n_tcp: int) -> int:
    """Return the TCP receive buffer (bytes) of draw `p` with `n_tcp` TCP flows: what fills the path at
    its round trip (at least ns-3's 128 KiB), capped so every window together fits in the AP queue with
    a fifth spare (no queue drop without the UDP stream)."""
    rtt = 2 * p["wired_delay_ms"] / 1000 + WIFI_RTT_S
    want = max(DEFAULT_RCV_BUF, math.ceil(LINK_BPS[p["standard"]] * rtt / 8 / SEGMENT) * SEGMENT)
    per_flow = int(0.8 * p["queue_packets"] / max(1, n_tcp))
    return want if per_flow * SEGMENT >= want else max(4, per_flow) * SEGMENT


class _Hooks:
    """The truth hooks of one draw: `causes(ctx)` (the same `_cause` as the fixed scenarios) and
    `expect(truth)` (every injected cause showed; a steady run: no queue drop and no RTO)."""

    def __init__(self, p: dict[str, Any], ev: str | None, at: float, good_flows: list[str]) -> None:
        self.p, self.ev, self.at, self.good_flows = p, ev, at, good_flows

    # --- causes ---

    def causes(self, ctx) -> list[dict]:
        """Return the truth causes, each tagged `injected` with what was injected to make it (the event,
        "fragmentation", "rts_cts"): causes of one injection form a chain, of two are two events."""
        out: list[dict] = []
        if self.ev:
            out += [{**c, "injected": self.ev} for c in getattr(self, f"_c_{self.ev}")(ctx)]
        if "frag_threshold" in self.p:
            out.append({**_cause(ctx, "fragmentation", TRAFFIC_START_S, None,
                                 evidence=f"every data MSDU is sent as fragments of at most "
                                          f"{self.p['frag_threshold']} bytes, each with its own header, ACK "
                                          "and backoff",
                                 numbers={"fragmentation_threshold": self.p["frag_threshold"]}),
                        "injected": "fragmentation"})
        if "rts_threshold" in self.p:
            out.append({**_cause(ctx, "rts_overhead", TRAFFIC_START_S, None,
                                 evidence="an RTS/CTS exchange precedes every data frame longer than "
                                          f"{self.p['rts_threshold']} bytes",
                                 numbers={"rts_cts_threshold": self.p["rts_threshold"]}),
                        "injected": "rts_cts"})
        if not self.ev and ("frag_threshold" in self.p or "rts_threshold" in self.p):
            # the longer exchanges delay packets in the shared AP queue: name any timeouts
            tag = "fragmentation" if "frag_threshold" in self.p else "rts_cts"
            out += [{**c, "injected": tag} for c in self._spurious_after(
                ctx, TRAFFIC_START_S, "packets wait in the AP queue behind the longer exchanges past the RTO")]
        return out + self._late_drops(ctx, out)

    @staticmethod
    def _late_drops(ctx, out: list[dict]) -> list[dict]:
        """Name AP queue drops no cause above explains: the windows fit in the queue, but after a
        spurious timeout a sender resends its window while the originals still wait there."""
        drops = ctx.packets_with_fate("dropped_at_ap_queue")
        if not drops or any(c["cause"] == "ap_queue_overflow" for c in out):
            return []
        return [_cause(ctx, "ap_queue_overflow", min(drops), min(max(drops) + 0.001, ctx.seconds), role="secondary",
                       evidence="after the timeouts the servers resend whole windows while the originals still "
                                "wait in the AP queue: the copies overflow it",
                       numbers={"dropped": len(drops), "queue_packets": ctx.scenario.queue_packets,
                                "rto_expirations": len(ctx.rto_times())})]

    def _before(self) -> tuple[float, float]:
        return (TRAFFIC_START_S + 0.25, self.at)

    def _station_goodput(self, ctx, station: str, a: float, b: float) -> float:
        flows = [f.name for f in ctx.scenario.flows if f.station == station and f.name in self.good_flows]
        return round(sum(ctx.goodput_between(f, a, b) for f in flows), 4)

    def _good_goodput(self, ctx, a: float, b: float) -> float:
        return round(sum(ctx.goodput_between(f, a, b) for f in self.good_flows), 4)

    def _c_performance_anomaly(self, ctx) -> list[dict]:
        at, before = self.at, self._before()
        share = ctx.airtime_between(at, ctx.seconds)
        retry = ctx.retry_fraction_between("sta_slow", at, ctx.seconds)
        nums = {"airtime_share": share,
                "downlink_mean_rate_mbps": {"sta0": ctx.rate_between("sta0", at, ctx.seconds),
                                            "sta_slow": ctx.rate_between("sta_slow", at, ctx.seconds)},
                "good_goodput_mbps_before": self._good_goodput(ctx, *before),
                "good_goodput_mbps_during": self._good_goodput(ctx, at, ctx.seconds),
                "slow_goodput_mbps": ctx.goodput_between("tcp_slow", at, ctx.seconds),
                "slow_retry_fraction": retry}
        out = [_cause(ctx, "performance_anomaly", at, None,
                      evidence="once the far station transmits, its frames at a low PHY rate take most of "
                               "the airtime, so the good stations' goodput falls", numbers=nums)]
        if retry > 0.1:
            out.append(_cause(ctx, "mac_retries", at, None, role="secondary", flows=["tcp_slow"],
                              stations=["sta_slow"], evidence="the slow station's frames need retransmissions",
                              numbers={"retry_fraction": retry}))
        out += self._spurious_after(ctx, at, "packets queued behind the slow station's frames wait longer "
                                             "than the RTO: timeouts of packets that were delivered")
        return out

    def _spurious_after(self, ctx, at: float, evidence: str, role: str = "secondary") -> list[dict]:
        rtos = [t for t in ctx.rto_times() if t >= at]
        if not rtos:
            return []
        spur = [t for t in ctx.spurious_times() if t >= at]
        return [_cause(ctx, "spurious_rto", min(rtos), max(rtos + spur), role=role, evidence=evidence,
                       numbers={"rto_expirations": len(rtos), "spurious_retransmissions": len(spur)})]

    def _c_udp_overflow(self, ctx) -> list[dict]:
        at, before = self.at, self._before()
        drops = ctx.packets_with_fate("dropped_at_ap_queue")
        if not drops:
            return []
        return [
            _cause(ctx, "ap_queue_overflow", min(drops), max(drops),
                   evidence="downlink packets seen on the AP's wired side never reach the air: the "
                            "unresponsive UDP stream keeps the AP queue full",
                   numbers={"dropped": len(drops), "queue_packets": ctx.scenario.queue_packets,
                            "udp_offered_mbps": self.p["udp_bps"] / 1e6,
                            "udp_goodput_mbps": ctx.goodput_between("udp_far", at, ctx.seconds),
                            "tcp_goodput_mbps_before": self._good_goodput(ctx, *before),
                            "tcp_goodput_mbps_during": self._good_goodput(ctx, at, ctx.seconds)}),
            _cause(ctx, "performance_anomaly", at, None, role="secondary",
                   evidence="the far station's low PHY rate takes most of the airtime",
                   numbers={"airtime_share": ctx.airtime_between(at, ctx.seconds)}),
        ]

    def _c_delay_spike(self, ctx) -> list[dict]:
        at, end = self.at, self.at + self.p["deaf_for_s"]
        deaf = f"sta{self.p['deaf_station']}"
        out = [_cause(ctx, "mac_retries", at, end,
                      evidence=f"the AP retransmits the head-of-line frame to {deaf} for the whole burst "
                               "(the station decodes nothing; the other stations' frames wait behind it)",
                      numbers={"retries_in_window": ctx.retries_between(at, end), "deaf_station": deaf})]
        rtos, spur = ctx.rto_times(), ctx.spurious_times()
        if rtos:
            # a consequence: the retries held the packets past the RTO (the root is mac_retries)
            out.append(_cause(ctx, "spurious_rto", min(rtos), max(rtos + spur), role="secondary",
                              evidence="the server's RTO fires while the originals wait in the AP's MAC; "
                                       "they are delivered, so the retransmissions are spurious",
                              numbers={"rto_expirations": len(rtos), "spurious_retransmissions": len(spur)}))
        return out

    def _c_hidden_node(self, ctx) -> list[dict]:
        it = ctx.scenario.interferers[0]
        at, end, victim = it.start_s, it.end_s, it.near
        before = self._before()
        air = ctx.interferer_between(at, end)
        others = {s.name: ctx.retries_between(at, end, s.name) for s in ctx.scenario.stations if s.name != victim}
        nums = {"station": victim, "interferer_frames": air["frames"], "interferer_airtime_s": air["airtime_s"],
                "interferer_duty": air["duty"], "retries_in_window": ctx.retries_between(at, end, victim),
                "retries_in_window_other_stations": others,
                "retry_fraction_before": ctx.retry_fraction_between(victim, *before),
                "retry_fraction_during": ctx.retry_fraction_between(victim, at, end),
                "goodput_mbps_before": self._good_goodput(ctx, *before),
                "goodput_mbps_during": self._good_goodput(ctx, at, end),
                "victim_goodput_mbps_before": self._station_goodput(ctx, victim, *before),
                "victim_goodput_mbps_during": self._station_goodput(ctx, victim, at, end)}
        out = [_cause(ctx, "mac_retries", at, end, stations=[victim],
                      evidence=f"a hidden node beside {victim} (outside the BSS; the AP cannot hear it, so "
                               "does not defer) transmits for the burst: the AP's frames to that station "
                               "collide there and are retried; the other stations' frames wait behind them "
                               "in the AP queue",
                      numbers=nums)]
        out += self._spurious_after(ctx, at, "frames to the hidden node's victim are retried for the burst and "
                                             "the AP queue waits behind them past the RTO")
        return out

    def _c_walkaway(self, ctx) -> list[dict]:
        walk_at = ctx.scenario.station("sta_walk").walk_at_s
        out, fall = walk_causes(ctx, "sta_walk", "tcp_walk", walk_at)
        if fall is not None and self.good_flows:
            drop, end, t_lost = fall
            # before the handoff entry, where the fixed scenario's order puts the secondary causes
            out.insert(2, _cause(ctx, "performance_anomaly", drop, t_lost, role="secondary",
                                 evidence="the walking station's frames at falling rates take the other "
                                          "stations' airtime",
                                 numbers={"airtime_share": ctx.airtime_between(drop, end)}))
        out += self._spurious_after(ctx, walk_at, "frames to the walking station at falling rates and their "
                                                  "retries hold the shared AP queue past the RTO")
        return out

    # --- expect ---

    def expect(self, truth: dict) -> tuple[bool, str]:
        checks: list[tuple[bool, str]] = []
        silent = [f["name"] for f in truth["flows"] if not f.get("goodput_mbps")]
        checks.append((not silent, f"flows that delivered nothing: {silent or 'none'}"))
        if not self.p["causes"]:
            checks.append(_steady_expect(truth))
        if self.ev:
            checks.append(getattr(self, f"_e_{self.ev}")(truth))
        if "frag_threshold" in self.p:
            n = truth["mac"]["fragments_sent"]
            checks.append((n > 0, f"{n} fragments with More Fragments set sent by the AP (want > 0)"))
        if "rts_threshold" in self.p:
            n = truth["mac"]["rts_sent"]
            checks.append((n > 0, f"{n} RTS frames sent (want > 0)"))
        return all(ok for ok, _ in checks), "; ".join(d for _, d in checks)

    @staticmethod
    def _primary(truth: dict, cause: str) -> dict | None:
        return next((c for c in truth["causes"] if c["cause"] == cause and c["role"] == "primary"), None)

    def _e_performance_anomaly(self, truth: dict) -> tuple[bool, str]:
        c = self._primary(truth, "performance_anomaly")
        if c is None:
            return False, "no performance_anomaly cause"
        n = c["numbers"]
        rate, share = n["downlink_mean_rate_mbps"], n["airtime_share"]
        g0, g1 = n["good_goodput_mbps_before"], n["good_goodput_mbps_during"]
        slow_share = share.get("sta_slow", 0.0)
        # A station as fast as the others would take 1/(k+1) of k good stations' goodput; the slow
        # one must take clearly more (one good station: below half, as the fixed scenario).
        k = len(self.good_flows)
        frac = 0.5 if k == 1 else round(0.8 * k / (k + 1), 3)
        ok = (rate["sta_slow"] is not None and rate["sta0"] is not None and rate["sta_slow"] < rate["sta0"] / 2
              and slow_share > 1.0 / (k + 1) and g1 < g0 * frac)
        return ok, (f"mean downlink PHY rate sta0 {rate['sta0']} vs slow {rate['sta_slow']} Mbit/s; slow "
                    f"airtime share {slow_share:.2f}; good stations' goodput {g0:.1f} -> {g1:.1f} Mbit/s "
                    f"(want < {frac:g} of before)")

    def _e_udp_overflow(self, truth: dict) -> tuple[bool, str]:
        s = _summary(truth)
        c = self._primary(truth, "ap_queue_overflow")
        g0 = c["numbers"]["tcp_goodput_mbps_before"] if c else 0.0
        g1 = c["numbers"]["tcp_goodput_mbps_during"] if c else 0.0
        ok = s["ap_queue_drops"] > 0 and g1 < g0 / 2
        return ok, (f"{s['ap_queue_drops']} AP queue drops (want > 0); TCP goodput {g0:.1f} -> {g1:.1f} "
                    "Mbit/s once the UDP stream starts (want < half)")

    def _e_delay_spike(self, truth: dict) -> tuple[bool, str]:
        return spurious_without_loss(truth)

    def _e_hidden_node(self, truth: dict) -> tuple[bool, str]:
        c = self._primary(truth, "mac_retries")
        if c is None:
            return False, "no mac_retries cause"
        n = c["numbers"]
        f0, f1 = n["retry_fraction_before"], n["retry_fraction_during"]
        # well above before: at least a tenth of the frames more, and at least twice the fraction; and a
        # fall to explain: the victim lost at least a quarter of its goodput over the burst (a burst its
        # MAC rode out leaves nothing for a diagnosis to find)
        g0, g1 = n["victim_goodput_mbps_before"], n["victim_goodput_mbps_during"]
        ok = n["interferer_frames"] > 0 and f1 >= f0 + 0.1 and f1 >= 2 * f0 and g1 < 0.75 * g0
        return ok, (f"retry fraction of {n['station']}'s downlink {f0:.2f} -> {f1:.2f} during the hidden node's "
                    f"burst (want +0.1 and x2); its goodput {g0:.1f} -> {g1:.1f} Mbit/s (want < 3/4 of it); "
                    f"interferer duty {n['interferer_duty']:.2f}, {n['interferer_frames']} frames")

    def _e_walkaway(self, truth: dict) -> tuple[bool, str]:
        return walked_away(truth, "sta_walk", "walking station's ")
