"""The simulated experiments: one function each, registered by name.

A scenario function takes the simulated duration (seconds, or None for its default) and returns a
`Scenario`: the physical setup the child process builds in ns-3 (stations, flows, MAC and TCP
settings, injected events), plus two plain-Python hooks the parent runs on the finished truth:
``expect`` (did the intended effect show?) and ``causes`` (the attribution an analyzer should
produce, per time window, in the field guide's cause names).  Adding a scenario is writing one
function with the `scenario` decorator.

Topology (every scenario)::

    server ==CSMA 1 Gb/s== AP ~~802.11g/n/ac/ax~~ stations       sniffer: passive, 1.5 m from the AP
    10.10.1.1    10.10.1.2 | 10.10.2.1          10.10.2.2, .3 ...

The ``roam`` scenario (field `Scenario.aps`) builds another world instead: two APs bridged onto one LAN
behind a learning switch (one subnet, one SSID, one channel), the server on a third switch port::

    server ==CSMA== switch ==CSMA== AP1 (bridge) ~~802.11g~~ stations ~~ AP2 (bridge) ==CSMA== switch
    10.10.2.1                                     10.10.2.2, .3 ...      sniffer: beside AP2, 15 dB antenna

The AP's Wi-Fi MAC queue is its only queue (flow control off).  Downlink flows go server -> station;
uplink flows (`Flow.uplink`, UDP, the `saturation` scenarios) station -> server.
Any scenario can run on another standard (`get_scenario(..., standard=)`, `for_standard`): ac is VHT
80 MHz and ax HE 80 MHz at 5 GHz, with ns-3's A-MPDU and Block Ack.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

# The bundle's files, by vantage: what a scenario's run writes.
FILES = {
    "sniffer": "sniffer.pcap",
    "ap_wired": "ap_wired.pcap",
    "server": "server.pcap",
    "client": "client.pcap",
    "tcp": "server-tcp.jsonl",
}

CAUSES = ("mac_retries", "rate_change", "performance_anomaly", "ap_queue_overflow", "spurious_rto",
          "fragmentation", "rts_overhead", "interference", "host_limited", "handoff")


DEFAULT_SSID = "xlayer-sim"
SSID_MAX_BYTES = 32


def check_ssid(ssid: str) -> str:
    """Return `ssid` if 802.11 can carry it (1..32 bytes of UTF-8, no NUL), else raise ValueError."""
    n = len(ssid.encode("utf-8"))
    if not 1 <= n <= SSID_MAX_BYTES or "\x00" in ssid:
        raise ValueError(f"an SSID is 1 to {SSID_MAX_BYTES} bytes without NUL; got {n} bytes: {ssid!r}")
    return ssid


@dataclass
class Station:
    """A client: where it stands (metres from the AP), whether it walks away, when it goes deaf."""

    name: str
    x: float
    y: float = 0.0
    walk_at_s: float | None = None   # starts moving away from the AP at this time ...
    speed_mps: float = 0.0           # ... at this speed, straight away from the AP
    deaf: list[tuple[float, float]] = field(default_factory=list)  # [start, end) it decodes nothing
    toward: tuple[float, float] | None = None   # walks toward this point (several APs' world) instead


@dataclass
class Flow:
    """One transfer from the server to a station (downlink), or from the station to the server (`uplink`)."""

    name: str
    proto: str                 # "tcp" (bulk) or "udp" (constant bit rate)
    station: str
    port: int
    start_s: float
    stop_s: float | None = None  # None: until the end
    rate_bps: int | None = None  # UDP
    size: int = 1400             # UDP payload bytes
    uplink: bool = False         # station -> server (UDP only; the truth's packet fates cover downlink only)

    def __post_init__(self) -> None:
        if self.uplink and self.proto != "udp":
            raise ValueError(f"flow {self.name!r}: uplink flows are UDP only")


@dataclass
class Interferer:
    """A hidden node: a transmitter outside the BSS (ad hoc, the BSS's channel) standing `offset_m` beyond station
    `near`, sending frames to its own peer from `start_s` to `end_s`, at a transmit power that makes its
    signal at that station about as strong as the AP's (`sinr_db` below it) and too weak at the AP to
    be detected (the AP does not defer to it)."""

    name: str
    near: str                        # the victim station
    start_s: float
    end_s: float
    offset_m: float = 0.5            # beyond the station, straight away from the AP; the peer 0.5 m further
    sinr_db: float = 0.0             # the AP's signal minus the interferer's at the victim station
    rate_manager: str = "constant"   # "constant": broadcast frames at data_mode (no ACK, no backoff
    #                                  growth); "minstrel": unicast to the peer, ACKed, Minstrel's rate
    data_mode: str | None = "ErpOfdmRate24Mbps"
    packets_per_s: float = 1000.0    # offered frames (more than the air carries: it sends whenever it may)
    size: int = 1000                 # frame payload bytes


_OPTIONAL = ("wired_delay_ms", "interferers", "aps", "sniffer_position", "sniffer_rx_gain_db")
# Left out of the setup when None (0 is a setting): ns-3's defaults apply.
_OPTIONAL_NONE = ("del_ack_timeout_ms", "rto_granularity_ms", "bar_after_missed_ba", "max_ampdu_bytes")


@dataclass
class Scenario:
    """Everything that determines one simulated run (with the seed)."""

    name: str
    summary: str
    seconds: float
    stations: list[Station]
    flows: list[Flow]
    standard: str = "g"                  # "g" (2.4 GHz, ERP-OFDM/DSSS), "n" (5 GHz, HT20), "ac" (VHT80), "ax" (HE80)
    rate_manager: str = "minstrel"       # "minstrel", "minstrel_ht", "ideal", "constant"
    data_mode: str | None = None         # constant rate: an ns-3 WifiMode name
    control_mode: str | None = None
    queue_packets: int = 500             # WifiMacQueue::MaxSize (ns-3 default 500p)
    queue_max_delay_ms: float = 10_000   # WifiMacQueue::MaxDelay (ns-3 default 500 ms)
    frag_threshold: int | None = None
    rts_threshold: int | None = None
    frame_retry_limit: int | None = None  # WifiMac::FrameRetryLimit (ns-3 default 7)
    max_missed_beacons: int | None = None  # StaWifiMac::MaxMissedBeacons (ns-3 default 10)
    path_loss_exponent: float = 3.0
    min_rssi_dbm: float = -95.0          # preamble detection floor (ns-3 default -82 dBm)
    fading_m: float = 0.0                # Nakagami m (0: no fading)
    tcp_cc: str = "ns3::TcpCubic"
    min_rto_ms: float = 200.0            # Linux's floor (ns-3's default is 1 s)
    tcp_rcv_buf: int = 131072
    tcp_snd_buf: int = 131072
    # TcpSocket::DelAckTimeout; None: ns-3's default, 200 ms (the fixed scenarios, as they were)
    del_ack_timeout_ms: float | None = None
    # TcpSocketBase::ClockGranularity G in ns-3's RTO = max(min_rto, srtt + max(G, 4 rttvar)); None: 1 ms
    rto_granularity_ms: float | None = None
    # QosTxop::UseExplicitBarAfterMissedBlockAck; None: ns-3's default (True: a Block Ack Request first)
    bar_after_missed_ba: bool | None = None
    max_ampdu_bytes: int | None = None   # every device's WifiMac::BE_MaxAmpduSize; None: ns-3's (65535 on n)
    segment_size: int = 1448             # + 32 B TCP header with timestamps = 1500 B IP packets
    snaplen_air: int = 160               # radiotap + 802.11 + LLC + IPv4 + TCP with options
    snaplen_wired: int = 96              # Ethernet + IPv4 + TCP with options (as xlayer lab)
    sample_interval_s: float = 0.05
    ssid: str = DEFAULT_SSID             # the BSS's SSID in beacons and probe responses (<= 32 bytes)
    # None: CSMA at 1 Gbit/s with a 500 ns delay (the fixed scenarios); else a 1 Gbit/s point-to-point
    # link with this one-way delay (a CSMA channel stays busy for the whole delay: no long delays there)
    wired_delay_ms: float | None = None
    interferers: list[Interferer] = field(default_factory=list)   # hidden nodes outside the BSS
    # Several APs (the roaming world, xlayer.testbeds.sim.world._simulate_aps): [{name, x, y}], bridged
    # onto one LAN behind a switch, same SSID and channel; empty: the one routed AP at the origin.
    aps: list[dict] = field(default_factory=list)
    sniffer_position: tuple[float, float] | None = None   # several APs only (one AP: 1.5 m from it)
    sniffer_rx_gain_db: float = 0.0      # several APs only: the monitor's antenna gain (hears both BSSs)
    expect: Callable[[dict], tuple[bool, str]] | None = None
    causes: Callable[[Any], list[dict]] | None = None

    def __post_init__(self) -> None:
        check_ssid(self.ssid)

    def physical(self) -> dict:
        """Return the JSON-able setup the child builds (everything but the Python hooks)."""
        d = asdict(self)
        d.pop("expect")
        d.pop("causes")
        # Left out when unused, so the fixed scenarios' truth parameters stay as they were.
        for k in _OPTIONAL:
            if not d[k]:
                d.pop(k)
        for k in _OPTIONAL_NONE:
            if d[k] is None:
                d.pop(k)
        for f in d["flows"]:
            if not f["uplink"]:
                f.pop("uplink")
        for st in d["stations"]:
            if st["toward"] is None:
                st.pop("toward")
        return d

    def station(self, name: str) -> Station:
        """Return the station called `name`."""
        for s in self.stations:
            if s.name == name:
                return s
        raise KeyError(name)


@dataclass(frozen=True)
class ScenarioDef:
    """A registered scenario: its builder and one-line description.

    A `seeded` scenario is drawn from the run's seed: its builder is ``fn(seconds, seed)`` with
    seconds None for the length the draw needs (`default_seconds` is then 0).  A scenario with
    `default_stations` takes ``fn(seconds, stations=N)`` (`xlayer sim --stations N`); a `g_only` one runs
    on 802.11g alone (its model parameters are ERP-OFDM's).
    """

    name: str
    summary: str
    default_seconds: float
    build: Callable[..., Scenario]
    seeded: bool = False
    default_stations: int | None = None
    g_only: bool = False


SCENARIOS: dict[str, ScenarioDef] = {}


def scenario(name: str, summary: str, seconds: float, *, seeded: bool = False,
             stations: int | None = None, g_only: bool = False) -> Callable:
    """Register `fn(seconds) -> Scenario` (seeded: `fn(seconds | None, seed) -> Scenario`; with a default
    number of `stations`: `fn(seconds, stations=N)`) under `name` (decorator)."""
    def deco(fn: Callable[..., Scenario]) -> Callable[..., Scenario]:
        SCENARIOS[name] = ScenarioDef(name, summary, seconds, fn, seeded, stations, g_only)
        return fn
    return deco


def get_scenario(name: str, seconds: float | None = None, seed: int | None = None,
                 standard: str | None = None, stations: int | None = None) -> Scenario:
    """Return scenario `name` built for `seconds` of simulated time (its default if None).

    `seed` is the run's seed: a seeded scenario (``random``) is drawn from it (seed 1 if None: pass
    the run's seed, as `xlayer sim` does), the others ignore it.  `standard` ("g", "n", "ac", "ax"):
    run it on that standard (`for_standard`); None: the one the scenario (or the draw) chooses.
    `stations`: how many stations, for the scenarios that take a number (``saturation``); KeyError for
    the others.
    """
    if name not in SCENARIOS:
        raise KeyError(f"unknown scenario {name!r} (known: {', '.join(SCENARIOS)})")
    if standard is not None and standard not in STANDARDS:
        raise KeyError(f"unknown standard {standard!r} (known: {', '.join(STANDARDS)})")
    d = SCENARIOS[name]
    if stations is not None or d.default_stations is not None:
        return _with_stations(d, seconds, stations, standard)
    if d.seeded:
        kw = {"standard": standard} if standard is not None else {}
        sc = d.build(float(seconds) if seconds is not None else None, 1 if seed is None else int(seed), **kw)
        sc.name, sc.summary = name, sc.summary or d.summary     # the summary says what was drawn
        return sc
    sc = d.build(float(seconds) if seconds is not None else d.default_seconds)
    sc.name, sc.summary = name, d.summary
    if standard is not None and standard != sc.standard:
        sc = for_standard(sc, standard)
        sc.summary += f" (run on 802.11{standard})"
    return sc


STANDARDS = ("g", "n", "ac", "ax")


def _with_stations(d: ScenarioDef, seconds: float | None, stations: int | None, standard: str | None) -> Scenario:
    """Return scenario `d` built with `stations` stations (its default if None); KeyError if it takes no number."""
    if d.default_stations is None:
        raise KeyError(f"scenario {d.name!r} has a fixed set of stations (--stations is for "
                       f"{', '.join(n for n, x in SCENARIOS.items() if x.default_stations is not None)})")
    n = d.default_stations if stations is None else int(stations)
    if not 1 <= n <= SATURATION_MAX_STATIONS:
        raise KeyError(f"scenario {d.name!r} takes 1 to {SATURATION_MAX_STATIONS} stations, not {n}")
    if d.g_only and standard is not None and standard != "g":
        raise KeyError(f"scenario {d.name!r} runs on 802.11g only (its model parameters are ERP-OFDM's)")
    sc = d.build(float(seconds) if seconds is not None else d.default_seconds, stations=n)
    # a saturation run always says how many; another scenario only when not its usual number
    many = d.g_only or n != d.default_stations
    sc.name, sc.summary = d.name, d.summary + (f" ({n} station{'s' if n != 1 else ''})" if many else "")
    if standard is not None and standard != sc.standard:
        sc = for_standard(sc, standard)
        sc.summary += f" (run on 802.11{standard})"
    return sc


class UnsupportedStandard(KeyError):
    """A scenario cannot run on the standard asked for (args[0] says why)."""
_MCS_PREFIX = {"n": "HtMcs", "ac": "VhtMcs", "ax": "HeMcs"}
# The lowest data rate (Mbit/s): ERP-OFDM 6, HT20 MCS 0 short GI 7.2, VHT80 MCS 0 29.3, HE80 MCS 0 at
# ns-3's default GI (3.2 µs) 30.6
LOWEST_MBPS = {"g": 6.0, "n": 7.2, "ac": 29.25, "ax": 30.6}
# ERP-OFDM rate -> the HT/VHT/HE MCS of the same modulation and coding (24 Mbit/s: 16-QAM 1/2, MCS 3)
_ERP_MCS = {6: 0, 9: 0, 12: 1, 18: 2, 24: 3, 36: 4, 48: 5, 54: 6}
_MCS_ERP = {0: 6, 1: 12, 2: 18, 3: 24, 4: 36, 5: 48, 6: 54, 7: 54}


def _mode_for(mode: str | None, std: str) -> str | None:
    """Return the ns-3 WifiMode on `std` with the modulation and coding of `mode` (None stays None)."""
    if mode is None:
        return None
    if mode.startswith(("ErpOfdmRate", "OfdmRate")):
        mbps = int(mode.split("Rate")[1].removesuffix("Mbps"))
        mcs = _ERP_MCS.get(mbps, 0)
    else:
        mcs = int(mode.split("Mcs")[1])
    if std == "g":
        return f"ErpOfdmRate{_MCS_ERP[min(mcs, 7)]}Mbps"
    return f"{_MCS_PREFIX[std]}{min(mcs, 7)}"


def for_standard(sc: Scenario, std: str) -> Scenario:
    """Return `sc` moved to standard `std`: stations at the distances that keep their SNR (the
    hidden node's victims stay, see below), rate manager and constant modes of the same kind."""
    from xlayer.testbeds.sim.world import distance_scale  # noqa: PLC0415 - plain math, no ns-3

    if sc.frag_threshold is not None and std != "g":
        # ns-3 3.44 asserts in WifiMacQueue ("currentItem->IsQueued()") half a second in, even with
        # BE_MaxAmpduSize and BE_MaxAmsduSize 0 (tried): fragmentation runs on 802.11g only
        raise UnsupportedStandard(f"scenario {sc.name or 'random'!r} fragments MSDUs, which ns-3 3.44 cannot "
                                  f"simulate on 802.11{std} (it aborts in its MAC queue): 802.11g only")
    if sc.aps:
        raise UnsupportedStandard(f"scenario {sc.name!r} places its APs, sniffer and walk for 802.11{sc.standard} only")
    f = distance_scale(sc.standard, std, sc.path_loss_exponent)
    # A hidden node's victim keeps its distance: the interferer, as loud there as the AP, must stay
    # below the AP's preamble detection, which the 5 GHz reference loss only makes easier; the
    # victim's own link at 15-20 m keeps 18 dB of SNR or more at 80 MHz.
    victims = {it.near for it in sc.interferers}
    stations = [Station(st.name, st.x if st.name in victims else round(st.x * f, 3),
                        st.y if st.name in victims else round(st.y * f, 3), st.walk_at_s, st.speed_mps,
                        list(st.deaf)) for st in sc.stations]
    if sc.rate_manager == "constant":
        rm = "constant"
    elif std == "g":
        rm = "minstrel"
    elif std == "ax":
        rm = "ideal"          # ns-3 3.44's MinstrelHt aborts on HE ("does not support HE rates")
    else:
        rm = "minstrel_ht"
    data = _mode_for(sc.data_mode, std)
    control = sc.control_mode if std == "g" else None
    if sc.control_mode is not None and std != "g":
        control = "OfdmRate24Mbps"   # non-HT control responses at 5 GHz (no ERP there)
    elif sc.control_mode is not None:
        control = _mode_for(sc.control_mode, "g")
    # An unresponsive UDP stream overflows the AP queue only if it offers more than its (far) station's
    # lowest rate carries: 6 Mbit/s on g, about 5 times that at 80 MHz; scale the offered rate alike.
    k = LOWEST_MBPS[std] / LOWEST_MBPS[sc.standard]
    flows = [replace(fl, rate_bps=int(round(fl.rate_bps * k))) if fl.proto == "udp" and fl.rate_bps else fl
             for fl in sc.flows]
    return replace(sc, standard=std, stations=stations, flows=flows, rate_manager=rm, data_mode=data,
                   control_mode=control, interferers=[_interferer_for(it, sc.standard, std) for it in sc.interferers])


MINSTREL_ASSUMED = "ErpOfdmRate24Mbps"   # a Minstrel interferer's frames are counted at this rate


def frame_airtime_s(size: int, mode: str, std: str) -> float:
    """Return the air time of a non-aggregated data frame of `size` payload bytes at ns-3 mode `mode` on
    `std` (LLC/SNAP, the MAC header and FCS around it; VHT/HE: 80 MHz, one stream, ns-3's default GI)."""
    from xlayer.timeline.airtime import ppdu_duration_ns, table_ndbps  # noqa: PLC0415 - plain math

    if mode.startswith(("Vht", "He")):
        phy = "vht" if mode.startswith("Vht") else "he"
        mcs = int(mode.split("Mcs")[1])
        nd = table_ndbps(np.array([phy]), np.array([mcs]), np.array([1]), np.array([80]))
        tsym = 4.0 if phy == "vht" else 16.0
        mbps, ext, hdr = nd / tsym, False, 26
    else:
        phy, mbps, ext, hdr = "ofdm", np.array([float(mode.split("Rate")[1].removesuffix("Mbps"))]), std == "g", 24
        nd = None
    ns_ = ppdu_duration_ns(np.array([size + 8 + hdr + 4.0]), mbps, np.array([phy]), np.array([1]), np.array([False]),
                           np.array([False]), np.array([3.2]), np.array([ext]), ndbps=nd)
    return float(ns_[0]) / 1e9


def _interferer_for(it: Interferer, old: str, std: str) -> Interferer:
    """Return hidden node `it` moved from `old` to `std`: on ac/ax a VHT/HE pair on the BSS's 80 MHz channel
    (`world._interferer`) at the MCS of its rate, offering the same share of the air (frames a second
    scaled by the frames' air time)."""
    if std not in ("ac", "ax"):
        return it
    mode = _mode_for(it.data_mode, std) if it.data_mode else None
    t_old = frame_airtime_s(it.size, it.data_mode or MINSTREL_ASSUMED, old)
    t_new = frame_airtime_s(it.size, mode or _mode_for(MINSTREL_ASSUMED, std), std)
    return replace(it, data_mode=mode, packets_per_s=round(it.packets_per_s * t_old / t_new, 1))


def list_scenarios() -> list[tuple[str, str]]:
    """Return (name, summary) of every registered scenario."""
    return [(d.name, d.summary) for d in SCENARIOS.values()]


# ------------------------------------------------------------------------------------------------
# helpers for expectations and causes (they read the truth the parent built; see xlayer.testbeds.sim.truth)

TRAFFIC_START_S = 0.5


def _window(ctx, start_s: float, end_s: float | None = None) -> dict:
    return {"start_ts": ctx.ref_s(start_s), "end_ts": ctx.ref_s(ctx.seconds if end_s is None else end_s)}


def _cause(ctx, cause: str, start_s: float, end_s: float | None, *, role: str = "primary",
           flows: list[str] | None = None, stations: list[str] | None = None, evidence: str = "",
           numbers: dict | None = None) -> dict:
    assert cause in CAUSES, cause
    d = {"cause": cause, "role": role, **_window(ctx, start_s, end_s),
         "flows": flows if flows is not None else [f.name for f in ctx.scenario.flows],
         "stations": stations if stations is not None else [s.name for s in ctx.scenario.stations],
         "evidence": evidence}
    if numbers:
        d["numbers"] = numbers
    return d


def _summary(truth: dict) -> dict:
    return truth["summary"]


# ------------------------------------------------------------------------------------------------
# the scenarios

def _steady_expect(truth: dict) -> tuple[bool, str]:
    s = _summary(truth)
    ok = s["ap_queue_drops"] == 0 and s["rto_expirations"] == 0 and s["delivered"] > 0
    return ok, (f"{s['ap_queue_drops']} AP queue drops (want 0), {s['rto_expirations']} RTOs "
                f"(want 0), {s['delivered']} packets delivered")


BASELINE_RADIUS_M = 5.0
# Several stations: Linux's TCP timers and Linux's (ath9k's) aggregation, where ns-3's defaults differ.
# With ns-3's, four stations' downloads stalled for good one after the other (issue 15: 818 k air frames
# in 135 s and no more in 175 s, 2,650 RTOs, all spurious).  Every station's TCP ACKs contend with the AP
# and the other stations (five busy transmitters): now and then a station's uplink A-MPDU and then its
# Block Ack Requests collide, its contention window doubles and counts down only in the idle slots
# between the others' 5.3 ms A-MPDUs, and its ACKs wait 0.2-1 s.  The server's RTO fires, cwnd falls to
# one segment, and the receiver holds the ACK of a lone segment for ns-3's 200 ms delayed-ACK timer, so
# the 200 ms RTO fires again first, every time: cwnd stays 1, about 8 packets a second, for good.
# Linux acknowledges a lone segment after TCP_DELACK_MIN, 40 ms, and floors the RTO's variance term
# rather than the RTO (RTO = srtt + max(200 ms, 4 rttvar): ns-3's ClockGranularity is that floor).
# ath9k retransmits a missed Block Ack's MPDUs in its next A-MPDU, sending a Block Ack Request only for
# MPDUs it drops (ns-3 first sends a BAR: one more frame to collide and back off), and caps an
# aggregate at 4 ms of air (max_4ms_framelen; 36,000 bytes at MCS 7 short GI), so a waiting station's
# backoff counts down more often.  Measured over 150 s of four stations (seed 1): RTOs 2,650 (ns-3's
# defaults), 30 (timers), 25 (+ retries), 15 (+ 4 ms); every one spurious, and the flow recovers.
# One station keeps ns-3's defaults: its bundles stay as they were.  (The byte cap is 802.11n's 4 ms;
# `for_standard` keeps it, about 1 ms at 80 MHz on ac and ax.)
_SEVERAL_STATIONS = {"del_ack_timeout_ms": 40.0, "rto_granularity_ms": 200.0, "bar_after_missed_ba": False,
                     "max_ampdu_bytes": 36_000}


@scenario("baseline", "one good 802.11n station (MinstrelHt, A-MPDU) at 5 m, one TCP download: "
          "nothing to attribute (--stations N: N such stations on a 5 m circle, a download each)", 3.0,
          stations=1)
def baseline(seconds: float, stations: int = 1) -> Scenario:
    sts = [Station(f"sta{i}", round(BASELINE_RADIUS_M * math.cos(2 * math.pi * i / stations), 3),
                   round(BASELINE_RADIUS_M * math.sin(2 * math.pi * i / stations), 3)) for i in range(stations)]
    return Scenario(
        name="baseline", summary="", seconds=seconds, standard="n", rate_manager="minstrel_ht",
        stations=sts, flows=[Flow(f"tcp{i}", "tcp", s.name, 5001 + i, TRAFFIC_START_S) for i, s in enumerate(sts)],
        **(_SEVERAL_STATIONS if stations > 1 else {}),
        expect=_steady_expect, causes=lambda ctx: [])


@scenario("steady", "802.11g, one station 5 m from the AP at a constant 24 Mbit/s, one TCP download: "
          "level goodput, nothing to attribute (shipped as samples/sim-baseline, not the `baseline` "
          "scenario)", 3.5)
def steady(seconds: float) -> Scenario:
    # The baseline for samples: `baseline` (MinstrelHt on 802.11n) keeps climbing for a second or
    # two and moves about 5,000 packets a second (9 MB in 3 s); a constant legacy rate keeps the
    # goodput level (about 15 Mbit/s, within 2 % per 250 ms) and the bundle near 3 MB.
    return Scenario(
        name="steady", summary="", seconds=seconds, rate_manager="constant",
        data_mode="ErpOfdmRate24Mbps", control_mode="ErpOfdmRate24Mbps",
        stations=[Station("sta0", 5.0, 0.0)],
        flows=[Flow("tcp0", "tcp", "sta0", 5001, TRAFFIC_START_S)],
        expect=_steady_expect, causes=lambda ctx: [])


PA_SLOW_START_S, PA_SLOW_Y_M = 1.5, 140.0


@scenario("performance_anomaly", "802.11g: a good station (5 m) downloads alone, then a far, slow "
          "station (140 m, Minstrel at about 12 Mbit/s) starts its own TCP download: the slow "
          "station's airtime drags the good one's goodput down to about its own (study 001)", 4.0)
def performance_anomaly(seconds: float) -> Scenario:
    # The good station runs alone for a second first: the drop when the slow one starts is what an
    # analyzer looks for (goodput well below the flow's own baseline).
    slow_at = min(PA_SLOW_START_S, seconds / 2)
    before = (TRAFFIC_START_S + 0.25, slow_at)   # after slow start, before the slow station

    def causes(ctx) -> list[dict]:
        share = ctx.airtime_between(slow_at, ctx.seconds)
        retry = ctx.retry_fraction_between("sta_slow", slow_at, ctx.seconds)
        nums = {"airtime_share": share,
                "downlink_mean_rate_mbps": {n: ctx.rate_between(n, slow_at, ctx.seconds)
                                            for n in ("sta_good", "sta_slow")},
                "goodput_mbps_before": {"tcp_good": ctx.goodput_between("tcp_good", *before)},
                "goodput_mbps_during": {f: ctx.goodput_between(f, slow_at, ctx.seconds)
                                        for f in ("tcp_good", "tcp_slow")},
                "slow_retry_fraction": retry}
        out = [_cause(ctx, "performance_anomaly", slow_at, None,
                      evidence="once the far station transmits, its frames at a low PHY rate take most "
                               "of the airtime, so the good station's goodput falls to about the slow "
                               "one's",
                      numbers=nums)]
        if retry > 0.1:
            out.append(_cause(ctx, "mac_retries", slow_at, None, role="secondary",
                              flows=["tcp_slow"], stations=["sta_slow"],
                              evidence="the slow station's frames need retransmissions",
                              numbers={"retry_fraction": retry}))
        # While Minstrel still sends to the new station at its lowest rates, the good flow's packets
        # wait behind those long frames in the shared AP queue, longer than its RTO: say so.
        rtos = [t for t in ctx.rto_times() if t >= slow_at]
        if rtos:
            spur = [t for t in ctx.spurious_times() if t >= slow_at]
            out.append(_cause(ctx, "spurious_rto", min(rtos), max(rtos + spur), role="secondary",
                              evidence="packets queued behind the slow station's frames wait longer than "
                                       "the RTO: timeouts of packets that were delivered",
                              numbers={"rto_expirations": len(rtos), "spurious_retransmissions": len(spur)}))
        return out

    def expect(truth: dict) -> tuple[bool, str]:
        c = next((c for c in truth["causes"] if c["cause"] == "performance_anomaly"), None)
        if c is None:
            return False, "no performance_anomaly cause"
        n = c["numbers"]
        rate, share = n["downlink_mean_rate_mbps"], n["airtime_share"]
        g0, g1 = n["goodput_mbps_before"]["tcp_good"], n["goodput_mbps_during"]["tcp_good"]
        ok = (rate["sta_slow"] is not None and rate["sta_good"] is not None
              and rate["sta_slow"] < rate["sta_good"] / 2
              and share.get("sta_slow", 0) > share.get("sta_good", 0) and g1 < g0 / 2)
        return ok, (f"with the slow station: mean downlink PHY rate good {rate['sta_good']} vs slow "
                    f"{rate['sta_slow']} Mbit/s; airtime share good {share.get('sta_good', 0):.2f} vs slow "
                    f"{share.get('sta_slow', 0):.2f}; good goodput {g0:.1f} -> {g1:.1f} Mbit/s (want < half)")

    return Scenario(
        # No fading: the far link is clean at its (low) rate, so both stations get about the same
        # number of frames through and the slow one's long frames take the airtime.
        name="performance_anomaly", summary="", seconds=seconds, fading_m=0.0,
        stations=[Station("sta_good", 5.0, 0.0), Station("sta_slow", 0.0, PA_SLOW_Y_M)],
        flows=[Flow("tcp_good", "tcp", "sta_good", 5001, TRAFFIC_START_S),
               Flow("tcp_slow", "tcp", "sta_slow", 5002, slow_at)],
        expect=expect, causes=causes)


UO_UDP_START_S, UO_UDP_BPS = 1.5, 8_000_000


@scenario("udp_overflow", "802.11g: a good station's TCP download runs alone, then an unresponsive "
          "8 Mbit/s UDP stream to a far station (125 m) exceeds that station's airtime-limited "
          "capacity: the shared AP queue overflows and the TCP flow starves (study 001)", 4.0)
def udp_overflow(seconds: float) -> Scenario:
    udp_at = min(UO_UDP_START_S, seconds / 2)
    before = (TRAFFIC_START_S + 0.25, udp_at)

    def causes(ctx) -> list[dict]:
        drops = ctx.packets_with_fate("dropped_at_ap_queue")
        if not drops:
            return []
        t0, t1 = min(drops), max(drops)
        g0, g1 = ctx.goodput_between("tcp_good", *before), ctx.goodput_between("tcp_good", udp_at, ctx.seconds)
        return [
            _cause(ctx, "ap_queue_overflow", t0, t1,
                   evidence="downlink packets seen on the AP's wired side never reach the air: the "
                            "unresponsive UDP stream keeps the AP queue full",
                   numbers={"dropped": len(drops), "queue_packets": ctx.scenario.queue_packets,
                            "udp_offered_mbps": UO_UDP_BPS / 1e6,
                            "udp_goodput_mbps": ctx.goodput_between("udp_far", udp_at, ctx.seconds),
                            "tcp_goodput_mbps_before": g0, "tcp_goodput_mbps_during": g1}),
            _cause(ctx, "performance_anomaly", udp_at, None, role="secondary",
                   evidence="the far station's low PHY rate takes most of the airtime",
                   numbers={"airtime_share": ctx.airtime_between(udp_at, ctx.seconds)}),
        ]

    def expect(truth: dict) -> tuple[bool, str]:
        s = _summary(truth)
        c = next((c for c in truth["causes"] if c["cause"] == "ap_queue_overflow"), None)
        g0 = c["numbers"]["tcp_goodput_mbps_before"] if c else 0.0
        g1 = c["numbers"]["tcp_goodput_mbps_during"] if c else 0.0
        ok = s["ap_queue_drops"] > 0 and g1 < g0 / 2
        return ok, (f"{s['ap_queue_drops']} AP queue drops (want > 0); TCP goodput {g0:.1f} -> {g1:.1f} "
                    "Mbit/s once the UDP stream starts (want < half)")

    return Scenario(
        name="udp_overflow", summary="", seconds=seconds, fading_m=3.0, queue_packets=100,
        stations=[Station("sta_good", 5.0, 0.0), Station("sta_far", 0.0, 125.0)],
        flows=[Flow("tcp_good", "tcp", "sta_good", 5001, TRAFFIC_START_S),
               Flow("udp_far", "udp", "sta_far", 6001, udp_at, rate_bps=UO_UDP_BPS, size=1400)],
        expect=expect, causes=causes)


def _mac_overhead(name: str, seconds: float, counter: str, counted: str, cause: str, evidence: str,
                  numbers: dict, **mac: int) -> Scenario:
    """One station 5 m from the AP, one TCP download, and one MAC setting (`mac`, Scenario fields) that
    adds overhead to every data frame: the effect shows if the truth's ``mac[counter]`` is above zero,
    and `cause` holds from the start of the traffic to the end."""
    def expect(truth: dict) -> tuple[bool, str]:
        n = truth["mac"][counter]
        return n > 0, f"{n} {counted} (want > 0)"

    return Scenario(
        name=name, summary="", seconds=seconds, **mac,
        stations=[Station("sta0", 5.0, 0.0)],
        flows=[Flow("tcp0", "tcp", "sta0", 5001, TRAFFIC_START_S)],
        expect=expect,
        causes=lambda ctx: [_cause(ctx, cause, TRAFFIC_START_S, None, evidence=evidence, numbers=numbers)])


@scenario("fragmentation", "802.11g, one station, TCP download, FragmentationThreshold 256: every "
          "data MPDU goes out in fragments (study 002)", 2.25)
def fragmentation(seconds: float) -> Scenario:
    return _mac_overhead("fragmentation", seconds, "fragments_sent",
                         "fragments with More Fragments set sent by the AP", "fragmentation",
                         "every data MSDU is sent as 256-byte fragments, each with its own header, ACK "
                         "and backoff", {"fragmentation_threshold": 256}, frag_threshold=256)


@scenario("rts_cts", "802.11g, one station, TCP download, RtsCtsThreshold 0: an RTS/CTS exchange "
          "before every data frame (study 002)", 5.0)
def rts_cts(seconds: float) -> Scenario:
    return _mac_overhead("rts_cts", seconds, "rts_sent", "RTS frames sent", "rts_overhead",
                         "an RTS/CTS exchange precedes every data frame", {"rts_cts_threshold": 0},
                         rts_threshold=0)


DEAF_AT_S, DEAF_FOR_S = 2.0, 0.9


def spurious_without_loss(truth: dict) -> tuple[bool, str]:
    """Return whether a delay spike showed: timeouts and spurious retransmissions, nothing dropped."""
    s = _summary(truth)
    ok = s["rto_expirations"] > 0 and s["spurious_retransmissions"] > 0 and s["ap_queue_drops"] == 0 \
        and s["retry_limit_drops"] == 0
    return ok, (f"{s['rto_expirations']} RTOs, {s['spurious_retransmissions']} spurious "
                f"retransmissions (want > 0), {s['ap_queue_drops']} queue drops and "
                f"{s['retry_limit_drops']} retry-limit drops (want 0)")


@scenario("delay_spike", "802.11g constant 24 Mbit/s, one station, TCP download; the station "
          "decodes nothing for 0.9 s and the AP's MAC retries the head frame until it gets through "
          "(a reliable MAC): no loss, but delay above the RTO: spurious timeouts (study 003)", 4.5)
def delay_spike(seconds: float) -> Scenario:
    # Steady traffic for about 1.3 s before the spike and 1.8 s after it (at the default length): an
    # analyzer needs the flow's own level on both sides to see the drop.
    at = min(DEAF_AT_S, max(1.0, seconds / 2 - DEAF_FOR_S / 2))

    def causes(ctx) -> list[dict]:
        out = [_cause(ctx, "mac_retries", at, at + DEAF_FOR_S,
                      evidence="the AP retransmits the head-of-line frame for the whole burst "
                               "(receiver-side interference at the station: the sniffer sees clean "
                               "frames with the retry bit and no ACKs)",
                      numbers={"retries_in_window": ctx.retries_between(at, at + DEAF_FOR_S)})]
        rtos = ctx.rto_times()
        spur = ctx.spurious_times()
        if rtos:
            # a consequence: the retries held the packets past the RTO (the root is mac_retries)
            out.append(_cause(ctx, "spurious_rto", min(rtos), max(rtos + spur), role="secondary",
                              evidence="the server's RTO fires while the originals wait in the AP's "
                                       "MAC; they are delivered, so the retransmissions are spurious",
                              numbers={"rto_expirations": len(rtos),
                                       "spurious_retransmissions": len(spur)}))
        return out

    return Scenario(
        # 24 rather than 54 Mbit/s: the same spike at about 60 % of the packets (a smaller sample).
        name="delay_spike", summary="", seconds=seconds, rate_manager="constant",
        data_mode="ErpOfdmRate24Mbps", control_mode="ErpOfdmRate24Mbps",
        # A reliable MAC (study 003's ARLAN): retry until it gets through (65535 is ns-3's
        # maximum), and no disassociation for beacons missed while deaf (10 x 102.4 ms by default).
        frame_retry_limit=65535, max_missed_beacons=1000,
        stations=[Station("sta0", 5.0, 0.0, deaf=[(at, at + DEAF_FOR_S)])],
        flows=[Flow("tcp0", "tcp", "sta0", 5001, TRAFFIC_START_S)],
        expect=spurious_without_loss, causes=causes)


WALK_AT_S, WALK_FROM_M, WALK_SPEED = 1.5, 12.0, 10.0


def _association_lost(truth: dict, station: str) -> list[dict]:
    """Return the station's association_lost events (an event naming no station is the only station's)."""
    return [e for e in truth["events"] if e["kind"] == "association_lost" and e.get("station", station) == station]


def walked_away(truth: dict, station: str, whose: str = "") -> tuple[bool, str]:
    """Return whether a walk-away showed: the station's downlink PHY rate fell and its association was lost."""
    lost = _association_lost(truth, station)
    tl = [b for b in truth["mac"]["stations"][station]["rate_timeline"] if b["attempts"] > 0]
    fell = len(tl) >= 2 and tl[-1]["median_rate_mbps"] < tl[0]["median_rate_mbps"]
    return bool(lost) and fell, (f"association lost: {bool(lost)}; {whose}downlink PHY rate "
                                 f"{tl[0]['median_rate_mbps'] if tl else None} -> "
                                 f"{tl[-1]['median_rate_mbps'] if tl else None} Mbit/s")


def walk_causes(ctx, station: str, flow: str, walk_at: float) -> tuple[list[dict], tuple | None]:
    """Return the truth causes of a station walking away from its AP (a rate change and retries while its
    rate falls, then the handoff once the link delivers nothing) and the fall's (start, end, handoff start)
    in simulated seconds (None if the rate did not fall before the handoff).

    The handoff starts at the last packet delivered to the station when that comes before the association
    is lost (as in `roam`): the station stops answering before it stops hearing beacons, sent at the
    lowest rate (at 80 MHz, 6 dB of bandwidth and more below data's), and what the AP sends it from then on
    is lost, whichever rate it takes."""
    lost = _association_lost(ctx.truth, station)
    t_lost = ctx.sim_s(lost[0]["ts"]) if lost else None
    dead = ctx.last_delivered(station) if t_lost is not None else None
    t_gone = min(t_lost, dead) if dead is not None else t_lost
    ref = (TRAFFIC_START_S + 0.25, walk_at)
    who = {"flows": [flow], "stations": [station]}
    # the first half second after the walk starts whose median PHY rate is below 80 % of the
    # rate while standing still
    drop = ctx.rate_fall(station, walk_at, ref)
    out, fall = [], None
    if drop is not None and (t_gone is None or drop < t_gone):
        end = t_gone if t_gone is not None else ctx.seconds
        fall = (drop, end, t_gone)
        nums = {"rate_mbps_before": ctx.rate_between(station, *ref),
                "rate_mbps_during": ctx.rate_between(station, drop, end),
                "goodput_mbps_before": ctx.goodput_between(flow, *ref),
                "goodput_mbps_during": ctx.goodput_between(flow, drop, end)}
        out.append(_cause(ctx, "rate_change", drop, t_gone, **who,
                          evidence="Minstrel lowers the PHY rate as the path loss grows", numbers=nums))
        out.append(_cause(ctx, "mac_retries", drop, t_gone, role="secondary", **who,
                          evidence="frames to the walking station need more attempts",
                          numbers={"retry_fraction_before": ctx.retry_fraction_between(station, *ref),
                                   "retry_fraction_during": ctx.retry_fraction_between(station, drop, end)}))
    if t_lost is not None:
        out.append(_cause(ctx, "handoff", t_gone, None, **who,
                          evidence="the link delivers nothing to the station, which then stops hearing beacons "
                                   "and drops the association",
                          numbers={"last_delivered_s": round(dead, 6) if dead is not None else None,
                                   "association_lost_s": round(t_lost, 6)}))
    return out, fall


@scenario("walkaway", "802.11g Minstrel, indoor path loss (exponent 4): one station downloads at "
          "12 m for a second, then moves away from the AP at 10 m/s until the rate falls and the "
          "association is lost (study 004)", 7.5)
def walkaway(seconds: float) -> Scenario:
    # A second at full rate first (the flow's own level), then the walk: the rate falls from about
    # 3 s, the association is lost at about 6.5 s (past 55 m), and a second of silence follows.
    walk_at = min(WALK_AT_S, seconds / 4)

    def expect(truth: dict) -> tuple[bool, str]:
        return walked_away(truth, "sta0")

    def causes(ctx) -> list[dict]:
        return walk_causes(ctx, "sta0", "tcp0", walk_at)[0]

    return Scenario(
        name="walkaway", summary="", seconds=seconds, fading_m=3.0, path_loss_exponent=4.0,
        stations=[Station("sta0", WALK_FROM_M, 0.0, walk_at_s=walk_at, speed_mps=WALK_SPEED)],
        flows=[Flow("tcp0", "tcp", "sta0", 5001, TRAFFIC_START_S)],
        expect=expect, causes=causes)


ROAM_AP2_M = 75.0            # AP2 on the x axis, this far from AP1 (at the origin); the same channel
ROAM_FROM_M = 20.0          # the walker starts here (AP2, 55 m away, barely heard: it joins AP1) ...
ROAM_TO_M = 72.0            # ... and stops here, 3 m before AP2: AP1 (-98 dBm there) is lost on the way
# Between the APs, near AP2, where the station joins it: AP1 (60 m away, hidden from the station by then)
# keeps retrying frames to the station that left, and the station's join must stand 30 dB above those
# (ns-3's receiver has no frame capture: a frame is lost to a stronger one that overlaps it).
ROAM_SNIFFER = (60.0, 4.0)
ROAM_SNIFFER_GAIN_DB = 15.0
ROAM_UDP_BPS = 500_000      # each static station's light download: traffic in both BSSs


def roam_facts(truth: dict, station: str) -> dict | None:
    """Return the station's first roam in the truth (``truth["roams"]``), or None."""
    return next((r for r in truth.get("roams", []) if r["station"] == station), None)


@scenario("roam", "802.11g Minstrel, indoor path loss (exponent 4): two APs 75 m apart on one channel, one "
          "SSID, bridged onto one LAN; a station downloads 20 m from AP1, walks to AP2, loses AP1's beacons "
          "on the way and joins AP2 with the same address (a roam: time without data, packets lost); a "
          "static station on each AP receives a light UDP stream", 10.0)
def roam(seconds: float) -> Scenario:
    # The walk is timed to the run: a second at the start's rate first (the reference of the rate
    # fall), at the stop by half the run (AP1 is lost near it: 10 missed beacons after they stop
    # coming), the rest data through AP2.
    walk_at = min(WALK_AT_S, round(seconds / 4, 3))
    speed = round((ROAM_TO_M - ROAM_FROM_M) / max(0.5 * seconds - walk_at, 0.5), 3)

    def expect(truth: dict) -> tuple[bool, str]:
        r = roam_facts(truth, "sta_walk")
        if r is None:
            return False, "the walking station never joined another AP"
        ok = r["first_data_ts"] is not None and r["from_bssid"] != r["to_bssid"]
        return ok, (f"sta_walk roamed from {r['from_bssid']} to {r['to_bssid']}; data again via the new AP "
                    f"after {r['gap_s']} s without (want data again)")

    def causes(ctx) -> list[dict]:
        out = [c for c in walk_causes(ctx, "sta_walk", "tcp_walk", walk_at)[0] if c["cause"] != "handoff"]
        r = roam_facts(ctx.truth, "sta_walk")
        if r is None:
            return out
        start = ctx.sim_s(r["last_data_ts"]) if r["last_data_ts"] is not None else ctx.sim_s(r["association_lost_ts"])
        end = ctx.sim_s(r["first_data_ts"]) if r["first_data_ts"] is not None else None
        # as in walkaway, the rate fall ends where the handoff begins (there: the association's loss; here
        # the last packet through AP1, before it: nothing arrives while the station still clings to AP1)
        for c in out:
            c["end_ts"] = min(c["end_ts"], ctx.ref_s(start))
        nums = {k: r[k] for k in ("from_bssid", "to_bssid", "gap_s", "last_data_ts", "association_lost_ts",
                                  "associated_ts", "first_data_ts", "packets_lost", "tcp_retransmissions",
                                  "rto_expirations")}
        out.append(_cause(ctx, "handoff", start, end, flows=["tcp_walk"], stations=["sta_walk"],
                          evidence=f"the station loses AP {r['from_bssid']}'s beacons, scans and joins AP "
                                   f"{r['to_bssid']} (same SSID, same address): no data between its last "
                                   "packet through the old AP and its first through the new one; the old "
                                   "AP keeps retrying frames to it until the switch learns where it went",
                          numbers=nums))
        return out

    return Scenario(
        name="roam", summary="", seconds=seconds, fading_m=3.0, path_loss_exponent=4.0,
        aps=[{"name": "ap1", "x": 0.0, "y": 0.0}, {"name": "ap2", "x": ROAM_AP2_M, "y": 0.0}],
        sniffer_position=ROAM_SNIFFER, sniffer_rx_gain_db=ROAM_SNIFFER_GAIN_DB,
        stations=[Station("sta_walk", ROAM_FROM_M, 0.0, walk_at_s=walk_at, speed_mps=speed,
                          toward=(ROAM_TO_M, 0.0)),
                  Station("sta_ap1", 0.0, -6.0), Station("sta_ap2", ROAM_AP2_M, 6.0)],
        flows=[Flow("tcp_walk", "tcp", "sta_walk", 5001, TRAFFIC_START_S),
               Flow("udp_ap1", "udp", "sta_ap1", 6001, TRAFFIC_START_S, rate_bps=ROAM_UDP_BPS, size=1000),
               Flow("udp_ap2", "udp", "sta_ap2", 6002, TRAFFIC_START_S, rate_bps=ROAM_UDP_BPS, size=1000)],
        expect=expect, causes=causes)


# Saturation (theory beside measurement): n stations in range of each other and of the AP, each sending
# UDP uplink at a fixed rate as fast as its MAC lets it.  The PHY/MAC parameters ns-3 uses here, which
# xlayer.campaign.theory's phy_for("g", 54) states: ERP-OFDM 54 Mbit/s data, ACK/RTS/CTS at 24 Mbit/s
# (RTS by ControlMode; ACK and CTS at the highest basic rate not above the frame they answer), slot 9 us
# (short slot: every station is ERP), SIFS 10 us + 6 us signal extension, DIFS 28 us, CWmin 15, CWmax
# 1023, 1472-byte UDP payloads (1500-byte IP packets).  Beacons (every 102.4 ms) are the only other
# frames: static ARP, passive scanning, nothing flows downlink.
SATURATION_MAX_STATIONS = 50
SATURATION_MODE, SATURATION_CONTROL = "ErpOfdmRate54Mbps", "ErpOfdmRate24Mbps"
SATURATION_START_S = 1.0          # every station has associated by then (first beacon + association)
SATURATION_PAYLOAD = 1472
# More than the whole channel carries at 54 Mbit/s (about 30 Mbit/s for one station), shared among
# the stations: each station's 500-packet queue fills within a few tens of ms and stays full.
SATURATION_OFFERED_BPS = 64_000_000
SATURATION_RADIUS_M = 3.0


def _saturation(seconds: float, stations: int, rts: bool) -> Scenario:
    """Return the saturation setup: `stations` stations on a 3 m circle around the AP, UDP uplink each."""
    sts = [Station(f"sta{i}", round(SATURATION_RADIUS_M * math.cos(2 * math.pi * i / stations), 3),
                   round(SATURATION_RADIUS_M * math.sin(2 * math.pi * i / stations), 3))
           for i in range(stations)]
    start = min(SATURATION_START_S, seconds / 2)
    per_station = SATURATION_OFFERED_BPS // stations
    flows = [Flow(f"udp{i}", "udp", s.name, 6001 + i, start, rate_bps=per_station, size=SATURATION_PAYLOAD,
                  uplink=True) for i, s in enumerate(sts)]

    def expect(truth: dict) -> tuple[bool, str]:
        got = truth["summary"]["goodput_mbps"]
        total = sum(v or 0.0 for v in got.values())
        ok = all((v or 0.0) > 0 for v in got.values()) and total < SATURATION_OFFERED_BPS / 1e6
        return ok, (f"{len(got)} saturated uplink flows, total goodput {total:.2f} Mbit/s (want every flow "
                    f"> 0 and the total below the {SATURATION_OFFERED_BPS / 1e6:g} Mbit/s offered)")

    return Scenario(
        name="", summary="", seconds=seconds, standard="g", rate_manager="constant",
        data_mode=SATURATION_MODE, control_mode=SATURATION_CONTROL, rts_threshold=0 if rts else None,
        fading_m=0.0, stations=sts, flows=flows, expect=expect, causes=lambda ctx: [])


@scenario("saturation", "802.11g 54 Mbit/s, N stations (--stations, default 5) 3 m from the AP, each "
          "sending saturated UDP uplink (basic access): Bianchi's DCF saturation setting, for comparing "
          "measured throughput with xlayer.campaign.theory", 5.0, stations=5, g_only=True)
def saturation(seconds: float, stations: int = 5) -> Scenario:
    return _saturation(seconds, stations, rts=False)


@scenario("saturation_rts", "as saturation, with an RTS/CTS exchange before every data frame "
          "(RtsCtsThreshold 0)", 5.0, stations=5, g_only=True)
def saturation_rts(seconds: float, stations: int = 5) -> Scenario:
    return _saturation(seconds, stations, rts=True)
