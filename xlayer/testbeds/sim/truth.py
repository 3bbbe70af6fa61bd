"""Turn the child's truth logs into truth.json, truth_packets.parquet and truth_attempts.parquet.

Runs in the parent (no ns-3).  Every log row carries true simulation time in ns; truth files give
times on the reference clock (the server's) as epoch ns in Parquet and epoch seconds in JSON:
``reference = EPOCH_BASE + t_sim``.  Packets are joined by the packet id (pid) the child tagged every
IPv4 transmission with; MPDUs on the air are matched to the sniffer's records by (pid, ns-3 packet
uid, fragment number) and time (the latest transmission that started before the record ended).

``truth_packets.parquet``: one row per downlink IPv4 packet seen on the AP's wired side (see
`PACKET_COLUMNS`); ``truth_attempts.parquet``: one row per transmission of one of its MPDUs by the AP
(see `ATTEMPT_COLUMNS`).  Fates:

* ``delivered``: the station's MAC handed it up (MacRx), whatever the AP believed;
* ``failed_after_retry_limit``: the AP gave up after its retry limit (DroppedMpdu, reason retry limit);
* ``dropped_at_ap_queue``: it never left the AP's WifiMacQueue: the queue was full when it arrived
  (ns-3.44 fires no trace for that: the queue length logged at MacTx says so, and the packet never
  reached the air) or its lifetime in the queue expired (``drop_reason`` tells which);
* ``not_forwarded``: it reached the AP's wired side but never its Wi-Fi MAC (ARP pending queue);
  (an AP refusing an MSDU for a station not associated with it: ``dropped_at_ap_queue``, reason
  ``not_associated``);
* ``in_flight_at_end``: still queued or being retransmitted when the simulation stopped.

truth.json (``xlayer_sim_truth: 1``)::

    scenario, summary_text, seed, seconds
    parameters      the scenario's physical setup (xlayer.testbeds.sim.scenarios.Scenario, as run)
    topology        nodes (ip, mac, ns-3 node ids), standard, channel, AP queue, client capture station,
                    ssid (the BSS's SSID in beacons and probe responses), path (the wired link: CSMA,
                    or point-to-point with the scenario's one-way delay), interferers (hidden nodes:
                    positions, transmit power, what they deliver at their station, the AP, the sniffer)
    reference       the reference clock (the server's) and the epoch base
    convention      "reference_time = t - offset_s - skew_ppm*1e-6*(t - anchor_ts)"
    clocks          per capture file: clock, offset_s, skew_ppm, anchor_ts, jitter_us, jitter_max_us,
                    offset_ns/anchor_ns (exact), event (what a timestamp marks); "sniffer.pcap#tsft"
                    is the radiotap TSFT clock (t = TSFT / 1e6)
    flows           name, proto, station, src/dst/ports, start_ts/stop_ts, received_bytes, goodput_mbps
    summary         downlink_packets, delivered, ap_queue_drops, retry_limit_drops, not_forwarded,
                    in_flight_at_end, mpdu_attempts, mpdu_retries, mpdu_retransmissions,
                    sniffer_capture_fraction, tcp_retransmissions, spurious_retransmissions,
                    rto_expirations, spurious_rtos, goodput_mbps
    packets         the Parquet files, their columns, fate counts, a consistency check
    mac             per station: attempts and retries both ways, retry_fraction, mean downlink rate,
                    airtime and its share, rate_timeline (1 s bins); fragments_sent, rts_sent, cts_sent
    tcp             per flow counts; retransmissions [{ts, flow, seq, len, pid, trigger (rto,
                    rto_recovery, fast_recovery, other), spurious, original_ts, original_delivered_ts}];
                    rto_expirations [{ts, flow, rto_s (the timer that expired), backoff, seq, spurious}]
    events          [{kind: flow_start | associated | association_lost | walk_start | walk_stop | interference |
                    hidden_node, ts (and start_ts/end_ts for windows), station, ...}]
    roams           several APs only: [{station, from_ap/to_ap, from_bssid/to_bssid, last_data_ts,
                    association_lost_ts, associated_ts, first_data_ts, gap_s, old_ap_last_tx_ts,
                    packets_lost (and by fate), tcp_retransmissions, rto_expirations}]; their
                    associated/association_lost events carry bssid and ap
    causes          [{cause (field-guide name), role: primary | secondary, start_ts, end_ts, flows,
                    stations, evidence, numbers}]: what an analyzer should attribute, per window
    expect          {holds, detail}: whether the scenario's intended effect showed
    captures        per vantage: file, frames, bytes, snaplen, records_cut_by_snaplen
    run             wall times, TCP sample count, simulator

Every ``*_ts`` is reference epoch seconds.  A spurious retransmission is one whose bytes (same socket,
same sequence number) had been sent before in a packet the station's MAC delivered; a spurious RTO is
one whose retransmission was spurious.  An RTO expiration is recognised where ns-3's
TcpSocketBase::ReTxTimeout doubles the RTO after using up one of its data retries.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

import xlayer.testbeds.sim.clocks as _clocks
from xlayer.testbeds.sim.scenarios import FILES, Scenario

TRUTH_VERSION = 1
BASE = _clocks.EPOCH_BASE_NS

# 802.11 frame control (as ns-3's GetFrameControl returns it: bits 2-3 type, 4-7 subtype)
FC_TYPE = 0x000C
T_DATA, T_CTRL, T_MGMT = 0x08, 0x04, 0x00
ST_RTS, ST_CTS, ST_ACK, ST_BA, ST_BAR = 11, 12, 13, 9, 8
WIFI_MAC_DROP = {0: "queue_full", 1: "lifetime_expired", 2: "retry_limit", 3: "qos_old_packet"}

PACKET_COLUMNS = {
    "pid": "packet id: one per IPv4 transmission (a TCP retransmission is a new packet)",
    "flow": "flow name (scenario) or null",
    "station": "destination station name",
    "proto": "IP protocol: 6 TCP, 17 UDP",
    "src": "IPv4 source", "dst": "IPv4 destination", "sport": "source port", "dport": "destination port",
    "ip_id": "IPv4 identification", "ip_len": "IPv4 total length, bytes",
    "tcp_seq": "raw TCP sequence number (null for UDP)", "payload": "transport payload bytes",
    "tcp_retransmission": "the server's TCP sent these bytes before (a retransmission)",
    "spurious_retransmission": "a retransmission whose earlier transmission was delivered",
    "t_server_ns": "server capture event (transmission start), reference epoch ns",
    "server_frame": "frame number in server.pcap",
    "t_ap_wired_ns": "end of reception on the AP's wired side, reference epoch ns",
    "ap_wired_frame": "frame number in ap_wired.pcap",
    "t_enqueue_ns": "handed to the AP's Wi-Fi MAC (MacTx), reference epoch ns",
    "queue_len_at_enqueue": "packets in the AP's WifiMacQueue when it arrived",
    "queue_max": "the queue's limit in packets",
    "fate": "delivered, dropped_at_ap_queue, failed_after_retry_limit, not_forwarded, in_flight_at_end",
    "drop_reason": "queue_full, lifetime_expired, retry_limit, not_associated (null unless dropped)",
    "t_fate_ns": "delivery to the station's MAC or the drop, reference epoch ns",
    "ap_gave_up": "the AP dropped it after its retry limit (even if the station had received it)",
    "n_attempts": "MPDU transmissions by the AP (all fragments, all retries)",
    "n_retries": "transmissions with the Retry bit set (as the sniffer sees them)",
    "n_retransmissions": "transmissions of a fragment that had been sent before (ns-3 also sets the "
                         "Retry bit on the later fragments of an MSDU once one of them was retried)",
    "n_fragments": "802.11 fragments the MSDU was sent in",
    "n_sniffed": "transmissions the sniffer captured",
    "attempt_rate_mbps": "PHY rate of each transmission, in order",
    "attempt_retry": "Retry bit of each transmission",
    "attempt_sniffed": "whether the sniffer captured each transmission",
    "t_first_tx_ns": "first transmission start, reference epoch ns",
    "t_last_tx_ns": "last transmission start, reference epoch ns",
    "mac_seq": "802.11 sequence number",
    "t_client_ns": "record in the station's own capture (client.pcap), reference epoch ns",
    "client_frame": "frame number in client.pcap (only the station that capture belongs to)",
    "queue_delay_ns": "first transmission start minus enqueue",
}
ATTEMPT_COLUMNS = {
    "pid": "packet id (truth_packets)", "attempt": "0-based transmission index of the packet",
    "frag": "fragment number", "frag_attempt": "0-based transmission index of this fragment",
    "t_tx_ns": "transmission start at the AP, reference epoch ns",
    "dur_ns": "PPDU duration", "rate_mbps": "PHY rate", "mcs": "HT MCS (null for legacy rates)",
    "retry": "Retry bit", "retransmission": "this fragment was sent before (frag_attempt > 0)",
    "more_frag": "More Fragments bit", "mac_seq": "802.11 sequence number",
    "ampdu": "sent in an A-MPDU", "n_mpdu": "MPDUs in the PSDU", "rts": "preceded by an RTS from the AP",
    "station": "receiver station", "sniffed": "the sniffer captured this transmission",
    "sniffer_frame": "frame number in sniffer.pcap", "t_sniffer_ns": "end of reception at the sniffer "
    "(the pcap timestamp's event), reference epoch ns",
    "t_sniffer_first_bit_ns": "first bit at the sniffer (the TSFT's event), reference epoch ns",
}

_LOG_SCHEMAS: dict[str, dict[str, Any]] = {
    "tx": {"ra": pl.UInt64, "pid": pl.Int64, "uid": pl.Int64},
    "sniff": {"pid": pl.Int64, "uid": pl.Int64, "signal_dbm": pl.Float64},
}


# The text columns of the logs; every other column is an integer or a float.
_TEXT_COLUMNS = {"mac": {"kind"}, "tcp": {"kind"}, "sockets": {"src", "dst"}}
# A capture record log's columns (xlsim.cc RECORD_HEADER): wired_server, wired_ap, client.
_RECORD_COLUMNS = ("frame", "t_ns", "pid", "dir", "eth_type", "ip_id", "src", "dst", "proto", "sport", "dport",
                   "seq", "payload", "ip_len", "tcp_flags")


def _read(work: Path, name: str) -> pl.DataFrame:
    """Return log `name` of the run; one that holds no row has its columns, typed (a station that
    received nothing leaves client.csv with its header only)."""
    p = work / "log" / f"{name}.csv"
    if not p.exists() or p.stat().st_size == 0:
        cols = _RECORD_COLUMNS if name in ("wired_server", "wired_ap", "client") else ()
        return pl.DataFrame(schema={c: pl.Int64 for c in cols})
    df = pl.read_csv(p, schema_overrides=_LOG_SCHEMAS.get(name), infer_schema_length=10000)
    if df.height:
        return df
    text = _TEXT_COLUMNS.get(name, set())
    return df.cast({c: pl.String if c in text else pl.Int64 for c in df.columns if c not in text})


def _ip(v: int) -> str:
    return f"{(v >> 24) & 255}.{(v >> 16) & 255}.{(v >> 8) & 255}.{v & 255}"


def _ip_int(s: str) -> int:
    a, b, c, d = (int(x) for x in s.split("."))
    return (a << 24) | (b << 16) | (c << 8) | d


def _mac_int(s: str) -> int:
    return int(s.replace(":", ""), 16)


def _ref(col: str) -> pl.Expr:
    return (pl.col(col) + BASE).alias(col)


def _s(ns: int | float | None) -> float | None:
    """Reference epoch ns -> epoch seconds (for JSON)."""
    return None if ns is None else round(ns / 1e9, 9)


@dataclass
class Context:
    """What a scenario's `causes` hook can ask about the finished run."""

    scenario: Scenario
    truth: dict
    packets: pl.DataFrame
    attempts: pl.DataFrame
    tcp_retx: pl.DataFrame
    rtos: pl.DataFrame
    interferer: pl.DataFrame = field(default_factory=pl.DataFrame)   # PPDUs of the hidden nodes and peers

    @property
    def seconds(self) -> float:
        return self.scenario.seconds

    def ref_s(self, sim_s: float) -> float:
        """Return the reference epoch seconds of simulation time `sim_s`."""
        return round(BASE / 1e9 + sim_s, 9)

    def sim_s(self, ref_s: float) -> float:
        """Return the simulation time of reference epoch seconds `ref_s`."""
        return ref_s - BASE / 1e9

    def goodput_mbps(self, flow: str) -> float | None:
        for f in self.truth["flows"]:
            if f["name"] == flow:
                return f.get("goodput_mbps")
        return None

    def packets_with_fate(self, fate: str) -> list[float]:
        """Return the simulation times (AP wired side) of the packets with `fate`."""
        df = self.packets.filter(pl.col("fate") == fate)
        return [(t - BASE) / 1e9 for t in df.get_column("t_ap_wired_ns").to_list()]

    def retries_between(self, a: float, b: float, station: str | None = None) -> int:
        """Return the AP's retransmissions (Retry bit) that started in [a, b) simulation seconds (to
        `station` only, if given)."""
        lo, hi = BASE + int(a * 1e9), BASE + int(b * 1e9)
        df = self.attempts if station is None else self.attempts.filter(pl.col("station") == station)
        return df.filter(pl.col("retry") & pl.col("t_tx_ns").is_between(lo, hi, closed="left")).height

    def interferer_between(self, a: float, b: float) -> dict[str, Any]:
        """Return the hidden nodes' PPDUs that started in [a, b) (theirs and their peers' ACKs): frames,
        airtime_s and duty (airtime over the window)."""
        if not self.interferer.height or b <= a:
            return {"frames": 0, "airtime_s": 0.0, "duty": 0.0}
        df = self.interferer.filter(pl.col("t_ns").is_between(round(a * 1e9), round(b * 1e9), closed="left"))
        air = int(df.get_column("dur_ns").sum() or 0) / 1e9
        return {"frames": df.height, "airtime_s": round(air, 6), "duty": round(air / (b - a), 4)}

    def rto_times(self) -> list[float]:
        return [(t - BASE) / 1e9 for t in self.rtos.get_column("t_ns").to_list()] if self.rtos.height else []

    def spurious_times(self) -> list[float]:
        if not self.tcp_retx.height:
            return []
        df = self.tcp_retx.filter(pl.col("spurious"))
        return [(t - BASE) / 1e9 for t in df.get_column("t_ns").to_list()]

    def _between(self, df: pl.DataFrame, col: str, a: float, b: float) -> pl.DataFrame:
        return df.filter(pl.col(col).is_between(BASE + round(a * 1e9), BASE + round(b * 1e9), closed="left"))

    def goodput_between(self, flow: str, a: float, b: float) -> float:
        """Return the flow's goodput (Mbit/s) in [a, b) simulation seconds: payload first delivered then."""
        if b <= a:
            return 0.0
        df = self._between(self.packets, "t_fate_ns", a, b).filter(
            (pl.col("flow") == flow) & (pl.col("fate") == "delivered") & ~pl.col("spurious_retransmission"))
        return round(int(df.get_column("payload").sum() or 0) * 8 / (b - a) / 1e6, 4)

    def airtime_between(self, a: float, b: float) -> dict[str, float]:
        """Return each station's share of the AP's downlink data airtime in [a, b) (an A-MPDU counts once)."""
        df = self._between(self.attempts, "t_tx_ns", a, b).unique(["t_tx_ns", "station"]).group_by("station").agg(
            pl.col("dur_ns").sum())
        total = int(df.get_column("dur_ns").sum() or 0)
        # sorted by station: group_by gives its groups in no fixed order
        return {r["station"]: round(r["dur_ns"] / total, 4)
                for r in df.sort("station", nulls_last=True).iter_rows(named=True)} if total else {}

    def rate_between(self, station: str, a: float, b: float) -> float | None:
        """Return the mean PHY rate (Mbit/s) of the AP's transmissions to `station` in [a, b)."""
        df = self._between(self.attempts, "t_tx_ns", a, b).filter(pl.col("station") == station)
        return round(float(df.get_column("rate_mbps").mean()), 3) if df.height else None

    def retry_fraction_between(self, station: str, a: float, b: float) -> float:
        """Return the fraction of the AP's transmissions to `station` in [a, b) with the Retry bit."""
        df = self._between(self.attempts, "t_tx_ns", a, b).filter(pl.col("station") == station)
        return round(float(df.get_column("retry").mean()), 4) if df.height else 0.0

    def drops_between(self, a: float, b: float, fate: str = "dropped_at_ap_queue") -> int:
        """Return how many downlink packets reaching the AP's wired side in [a, b) had `fate`."""
        return self._between(self.packets, "t_ap_wired_ns", a, b).filter(pl.col("fate") == fate).height

    def rate_fall(self, station: str, since: float, ref: tuple[float, float], step: float = 0.5,
                  frac: float = 0.8) -> float | None:
        """Return the start (simulation s) of the first `step`-long bin from `since` on whose median
        downlink PHY rate to `station` is below `frac` of its median in window `ref`, or None."""
        d = self.attempts.filter(pl.col("station") == station)
        base = self._between(d, "t_tx_ns", *ref).get_column("rate_mbps")
        if base.len() == 0:
            return None
        limit = float(base.median()) * frac
        t = since
        while t < self.seconds:
            r = self._between(d, "t_tx_ns", t, t + step).get_column("rate_mbps")
            if r.len() and float(r.median()) < limit:
                return round(t, 6)
            t += step
        return None

    def last_delivered(self, station: str) -> float | None:
        """Return when (simulation s) the last downlink packet to `station` was delivered, or None."""
        df = self.packets.filter((pl.col("station") == station) & (pl.col("fate") == "delivered"))
        return (int(df.get_column("t_fate_ns").max()) - BASE) / 1e9 if df.height else None

    def first_rate_drop(self, station: str) -> float | None:
        """Return when the station's downlink PHY rate first fell below its early median."""
        tl = [b for b in self.truth["mac"]["stations"][station]["rate_timeline"] if b["attempts"] > 0]
        if not tl:
            return None
        first = tl[0]["median_rate_mbps"]
        for b in tl[1:]:
            if b["median_rate_mbps"] < first:
                return self.sim_s(b["start_ts"])
        return None


def build_truth(sc: Scenario, seed: int, cl: dict, result: dict, work: Path, out: Path,
                summaries: dict, wall_s: float) -> dict:
    """Build the truth of a finished run; write the Parquet tables into `out`; return truth.json's dict."""
    nodes = result["nodes"]
    # every AP's node (the roaming world has several; the packet table follows a packet through any)
    ap_nodes = [a["node"] for a in nodes.get("aps", [nodes["ap"]])]
    server_node = nodes["server"]["node"]
    stations = {s["name"]: s for s in nodes["stations"]}
    st_by_node = {s["node"]: s["name"] for s in nodes["stations"]}
    st_by_mac = {_mac_int(s["mac"]): s["name"] for s in nodes["stations"]}
    st_by_ip = {_ip_int(s["ip"]): s["name"] for s in nodes["stations"]}
    client_station = sc.stations[0].name

    ip_tx = _read(work, "ip_tx")
    wired_ap = _read(work, "wired_ap")
    wired_server = _read(work, "wired_server")
    client = _read(work, "client")
    mac = _read(work, "mac")
    tx = _read(work, "tx").with_row_index("tx_row")
    sniff = _read(work, "sniff")
    tcp = _read(work, "tcp")
    socks = _read(work, "sockets")

    # --- flows ---
    flows = []
    flow_of_port = {}
    for f in sc.flows:
        st = stations[f.station]
        flows.append({"name": f.name, "proto": f.proto, "station": f.station, "src": nodes["server"]["ip"],
                      "dst": st["ip"], "dport": f.port, "start_ts": _s(BASE + int(f.start_s * 1e9)),
                      "stop_ts": _s(BASE + int((f.stop_s if f.stop_s is not None else sc.seconds) * 1e9)),
                      **({"rate_bps": f.rate_bps, "size": f.size} if f.proto == "udp" else {})})
        flow_of_port[(_ip_int(st["ip"]), f.port)] = f.name
    sock_flow = {}
    if socks.height:
        for r in socks.iter_rows(named=True):
            name = flow_of_port.get((_ip_int(r["dst"]), r["dport"]))
            sock_flow[r["sock"]] = name
            for fl in flows:
                if fl["name"] == name:
                    fl["sport"] = r["sport"]

    # --- downlink packets seen on the AP's wired side ---
    srv = ip_tx.filter((pl.col("node") == server_node) & pl.col("dst").is_in(list(st_by_ip)))
    seen = wired_ap.filter((pl.col("dir") == 0) & (pl.col("pid") > 0)).select(
        "pid", pl.col("frame").alias("ap_wired_frame"), pl.col("t_ns").alias("t_ap_wired_ns"))
    if len(ap_nodes) > 1:
        # the other APs' wired ports (logged, not in the bundle: no frame number in it); a packet the
        # switch floods to several ports keeps its first arrival
        others = [_read(work, f"wired_ap{i + 1}") for i in range(1, len(ap_nodes))]
        seen = pl.concat([seen.with_columns(pl.col("ap_wired_frame").cast(pl.Int64))] + [
            o.filter((pl.col("dir") == 0) & (pl.col("pid") > 0)).select(
                "pid", pl.lit(None, pl.Int64).alias("ap_wired_frame"), pl.col("t_ns").alias("t_ap_wired_ns"))
            for o in others]).sort("t_ap_wired_ns").unique("pid", keep="first", maintain_order=True)
    pk = srv.join(seen, on="pid", how="inner")
    pk = pk.join(wired_server.filter((pl.col("dir") == 1) & (pl.col("pid") > 0)).select(
        "pid", pl.col("frame").alias("server_frame"), pl.col("t_ns").alias("t_server_ns")), on="pid", how="left")
    dport_flow = pl.DataFrame({"dst": [k[0] for k in flow_of_port], "dport": [k[1] for k in flow_of_port],
                               "flow": list(flow_of_port.values())},
                              schema={"dst": pk.schema["dst"], "dport": pk.schema["dport"], "flow": pl.String})
    pk = pk.join(dport_flow, on=["dst", "dport"], how="left")
    pk = pk.with_columns(pl.col("dst").replace_strict(st_by_ip, default=None, return_dtype=pl.String).alias("station"))

    # --- MAC events at the AP and the stations ---
    def ev(kind: str, node_expr: pl.Expr) -> pl.DataFrame:
        return mac.filter((pl.col("kind") == kind) & node_expr & (pl.col("pid") > 0))

    enq = ev("enq", pl.col("node").is_in(ap_nodes)).group_by("pid").agg(
        pl.col("t_ns").min().alias("t_enqueue_ns"), pl.col("a").first().alias("queue_len_at_enqueue"),
        pl.col("b").first().alias("queue_max"))
    rx = ev("rx", pl.col("node").is_in(list(st_by_node))).group_by("pid").agg(
        pl.col("t_ns").min().alias("t_delivered_ns"))
    macdrop = ev("macdrop", pl.col("node").is_in(ap_nodes)).group_by("pid").agg(
        pl.col("t_ns").min().alias("t_macdrop_ns"), pl.col("a").first().alias("macdrop_reason"))
    qdrop = pl.concat([ev("qdrop", pl.col("node").is_in(ap_nodes)), ev("expired", pl.col("node").is_in(ap_nodes))
                       .with_columns(pl.lit("expired").alias("kind"))]).group_by("pid").agg(
        pl.col("t_ns").min().alias("t_qdrop_ns"), pl.col("kind").first().alias("qdrop_kind"))
    # an AP's MAC refuses an MSDU for a station not associated with it (a station that roamed away)
    txdrop = ev("txdrop", pl.col("node").is_in(ap_nodes)).group_by("pid").agg(pl.col("t_ns").min().alias("t_txdrop_ns"))
    qdrop = qdrop.join(txdrop, on="pid", how="full", coalesce=True).with_columns(
        pl.coalesce("t_qdrop_ns", "t_txdrop_ns").alias("t_qdrop_ns"),
        pl.when(pl.col("qdrop_kind").is_null() & pl.col("t_txdrop_ns").is_not_null()).then(pl.lit("not_associated"))
        .otherwise(pl.col("qdrop_kind")).alias("qdrop_kind")).drop("t_txdrop_ns")

    # --- the air: every MPDU put on the air, matched to the sniffer's records ---
    tx = tx.with_columns(
        ((pl.col("fc") & FC_TYPE) == T_DATA).alias("is_data"),
        (((pl.col("fc") & FC_TYPE) == T_CTRL) & (((pl.col("fc") // 16) & 15) == ST_RTS)).alias("is_rts"),
        (((pl.col("fc") & FC_TYPE) == T_CTRL) & (((pl.col("fc") // 16) & 15) == ST_CTS)).alias("is_cts"),
        (pl.col("retry") == 1).alias("retry"), (pl.col("more_frag") == 1).alias("more_frag"),
        (pl.col("ampdu") == 1).alias("ampdu"))
    sn = sniff.select(pl.col("t_ns").alias("t_sniffer_ns"), pl.col("t_first_ns").alias("t_sniffer_first_bit_ns"),
                      pl.col("frame").alias("sniffer_frame"), "pid", "uid", "frag",
                      pl.col("retry").alias("sniffer_retry")).sort("t_sniffer_ns")
    txs = tx.sort("t_ns")
    matched = sn.join_asof(txs.select("t_ns", "pid", "uid", "frag", "tx_row"), left_on="t_sniffer_ns", check_sortedness=False,
                           right_on="t_ns", by=["pid", "uid", "frag"], strategy="backward")
    matched = matched.filter(pl.col("tx_row").is_not_null()).unique("tx_row", keep="first")
    tx = tx.join(matched.select("tx_row", "sniffer_frame", "t_sniffer_ns", "t_sniffer_first_bit_ns",
                                "sniffer_retry"), on="tx_row", how="left")
    tx = tx.with_columns(pl.col("sniffer_frame").is_not_null().alias("sniffed"))
    # RTS protection: the AP's previous PSDU was an RTS to the same receiver, just before.
    ap_tx = tx.filter(pl.col("node").is_in(ap_nodes)).sort("t_ns")
    rts = ap_tx.filter(pl.col("is_rts")).select(pl.col("t_ns").alias("t_rts"), pl.col("ra").alias("rts_ra"))
    prev_ap = ap_tx.select("t_ns").unique().sort("t_ns").with_columns(pl.col("t_ns").shift(1).alias("t_prev"))
    att = ap_tx.filter(pl.col("is_data") & pl.col("pid").is_in(pk.get_column("pid").implode()))
    att = att.join(prev_ap, on="t_ns", how="left").join(rts, left_on="t_prev", right_on="t_rts", how="left")
    att = att.with_columns(((pl.col("rts_ra") == pl.col("ra")) & pl.col("t_prev").is_not_null())
                           .fill_null(False).alias("rts"))
    att = att.sort(["pid", "t_ns", "frag"]).with_columns(
        pl.int_range(pl.len()).over("pid").alias("attempt"),
        pl.int_range(pl.len()).over(["pid", "frag"]).alias("frag_attempt"),
        (pl.col("rate_bps") / 1e6).alias("rate_mbps"),
        pl.when(pl.col("mcs") >= 0).then(pl.col("mcs")).otherwise(None).alias("mcs"),
        pl.col("ra").replace_strict(st_by_mac, default=None, return_dtype=pl.String).alias("station"),
        pl.col("seq").alias("mac_seq"))
    att = att.with_columns((pl.col("frag_attempt") > 0).alias("retransmission"))
    attempts = att.select(
        "pid", "attempt", "frag", "frag_attempt", _ref("t_ns").alias("t_tx_ns"), "dur_ns", "rate_mbps",
        "mcs", "retry", "retransmission", "more_frag", "mac_seq", "ampdu", "n_mpdu", "rts", "station", "sniffed",
        "sniffer_frame", (pl.col("t_sniffer_ns") + BASE).alias("t_sniffer_ns"),
        (pl.col("t_sniffer_first_bit_ns") + BASE).alias("t_sniffer_first_bit_ns"),
        (pl.col("sniffer_retry") == 1).alias("sniffer_retry"))
    per_pid = attempts.group_by("pid").agg(
        pl.len().alias("n_attempts"), pl.col("retry").sum().alias("n_retries"),
        pl.col("retransmission").sum().alias("n_retransmissions"),
        (pl.col("frag").max() + 1).alias("n_fragments"), pl.col("sniffed").sum().alias("n_sniffed"),
        pl.col("rate_mbps").alias("attempt_rate_mbps"), pl.col("retry").alias("attempt_retry"),
        pl.col("sniffed").alias("attempt_sniffed"), pl.col("t_tx_ns").min().alias("t_first_tx_ns"),
        pl.col("t_tx_ns").max().alias("t_last_tx_ns"), pl.col("mac_seq").first().alias("mac_seq"))

    cli = client.filter((pl.col("dir") == 0) & (pl.col("pid") > 0)).group_by("pid").agg(
        pl.col("frame").first().alias("client_frame"), pl.col("t_ns").first().alias("t_client_ns"))

    pk = (pk.join(enq, on="pid", how="left").join(rx, on="pid", how="left").join(macdrop, on="pid", how="left")
          .join(qdrop, on="pid", how="left").join(per_pid, on="pid", how="left").join(cli, on="pid", how="left"))
    pk = pk.with_columns(pl.col("n_attempts").fill_null(0), pl.col("n_retries").fill_null(0),
                         pl.col("n_retransmissions").fill_null(0),
                         pl.col("n_fragments").fill_null(0), pl.col("n_sniffed").fill_null(0))
    full = pl.col("queue_len_at_enqueue") >= pl.col("queue_max")
    fate = (pl.when(pl.col("t_delivered_ns").is_not_null()).then(pl.lit("delivered"))
            .when(pl.col("macdrop_reason") == 2).then(pl.lit("failed_after_retry_limit"))
            .when(pl.col("macdrop_reason").is_in([0, 1]) | pl.col("t_qdrop_ns").is_not_null())
            .then(pl.lit("dropped_at_ap_queue"))
            .when(pl.col("t_enqueue_ns").is_not_null() & full & (pl.col("n_attempts") == 0))
            .then(pl.lit("dropped_at_ap_queue"))
            .when(pl.col("t_enqueue_ns").is_null()).then(pl.lit("not_forwarded"))
            .otherwise(pl.lit("in_flight_at_end")))
    reason = (pl.when(pl.col("fate") == "failed_after_retry_limit").then(pl.lit("retry_limit"))
              .when(pl.col("fate") != "dropped_at_ap_queue").then(pl.lit(None, pl.String))
              .when((pl.col("macdrop_reason") == 1) | (pl.col("qdrop_kind") == "expired"))
              .then(pl.lit("lifetime_expired"))
              .when(pl.col("qdrop_kind") == "not_associated").then(pl.lit("not_associated"))
              .otherwise(pl.lit("queue_full")))
    pk = pk.with_columns(fate.alias("fate")).with_columns(reason.alias("drop_reason"))
    pk = pk.with_columns(
        pl.when(pl.col("fate") == "delivered").then(pl.col("t_delivered_ns"))
        .when(pl.col("fate") == "failed_after_retry_limit").then(pl.col("t_macdrop_ns"))
        .when(pl.col("fate") == "dropped_at_ap_queue")
        .then(pl.coalesce("t_qdrop_ns", "t_macdrop_ns", "t_enqueue_ns"))
        .otherwise(None).alias("t_fate_ns"),
        (pl.col("macdrop_reason") == 2).fill_null(False).alias("ap_gave_up"))

    # --- TCP: transmissions, retransmissions, spurious ones, RTO expirations ---
    tcp_retx = pl.DataFrame()
    rtos = pl.DataFrame(schema={"t_ns": pl.Int64})
    tcp_truth: dict[str, Any] = {"flows": {}, "retransmissions": [], "rto_expirations": []}
    pk = pk.with_columns(pl.lit(False).alias("tcp_retransmission"), pl.lit(False).alias("spurious_retransmission"))
    if tcp.height:
        sock_tuple = socks.select("sock", pl.col("src").map_elements(_ip_int, return_dtype=pl.Int64).alias("src"),
                                  "sport", pl.col("dst").map_elements(_ip_int, return_dtype=pl.Int64).alias("dst"),
                                  "dport")
        ttx = tcp.filter((pl.col("kind") == "tx") & (pl.col("len") > 0)).join(sock_tuple, on="sock")
        srv_tcp = ip_tx.filter((pl.col("node") == server_node) & (pl.col("proto") == 6)).select(
            "t_ns", "pid", "src", "dst", "sport", "dport", "seq")
        ttx = ttx.join(srv_tcp, on=["t_ns", "src", "dst", "sport", "dport", "seq"], how="left")
        ttx = ttx.join(pk.select("pid", "fate", "t_fate_ns"), on="pid", how="left")
        ttx = ttx.with_columns(pl.col("fate").alias("fate"))
        rto_ev = tcp.filter(pl.col("kind") == "rto").select("t_ns", "sock", pl.col("a").alias("rto_expired_ns"),
                                                           pl.col("b").alias("backoff"))
        cong = tcp.filter(pl.col("kind") == "cong").select("t_ns", "sock", pl.col("b").alias("ca_state")).sort("t_ns")
        retx = ttx.filter(pl.col("retx") == 1).with_row_index("retx_row")
        # an earlier transmission of the same bytes (same socket and sequence number) was delivered
        prior = retx.select("retx_row", "sock", "seq", pl.col("t_ns").alias("t_retx")).join(
            ttx.select("sock", "seq", "t_ns", pl.col("fate").alias("prior_fate"),
                       pl.col("t_fate_ns").alias("prior_t_fate_ns")), on=["sock", "seq"])
        prior = prior.filter(pl.col("t_ns") < pl.col("t_retx")).group_by("retx_row").agg(
            (pl.col("prior_fate") == "delivered").any().alias("spurious"),
            pl.when(pl.col("prior_fate") == "delivered").then(pl.col("prior_t_fate_ns")).min()
            .alias("t_original_delivered_ns"),
            pl.col("t_ns").min().alias("t_original_ns"))
        retx = retx.join(prior, on="retx_row", how="left").with_columns(pl.col("spurious").fill_null(False))
        retx = retx.sort("t_ns").join_asof(cong, on="t_ns", by="sock", strategy="backward", check_sortedness=False)
        retx = retx.join(rto_ev.select("t_ns", "sock", pl.lit(True).alias("at_rto")), on=["t_ns", "sock"],
                         how="left")
        retx = retx.with_columns(
            pl.when(pl.col("at_rto").fill_null(False)).then(pl.lit("rto"))
            .when(pl.col("ca_state") == 4).then(pl.lit("rto_recovery"))
            .when(pl.col("ca_state") == 3).then(pl.lit("fast_recovery"))
            .otherwise(pl.lit("other")).alias("trigger"))
        tcp_retx = retx.with_columns((pl.col("t_ns") + BASE).alias("t_ns"))
        # spurious RTO: the segment the timeout retransmitted had been delivered
        rt = rto_ev.join(retx.filter(pl.col("trigger") == "rto").select("t_ns", "sock", "spurious", "seq"),
                         on=["t_ns", "sock"], how="left")
        rtos = rt.with_columns((pl.col("t_ns") + BASE).alias("t_ns"))
        spurious_pids = retx.filter(pl.col("spurious")).get_column("pid").drop_nulls()
        pk = pk.with_columns(pl.col("pid").is_in(retx.get_column("pid").drop_nulls().implode()).alias("tcp_retransmission"),
                             pl.col("pid").is_in(spurious_pids.implode()).alias("spurious_retransmission"))
        for r in rtos.sort("t_ns").iter_rows(named=True):
            tcp_truth["rto_expirations"].append({
                "ts": _s(r["t_ns"]), "flow": sock_flow.get(r["sock"]), "rto_s": r["rto_expired_ns"] / 1e9,
                "backoff": r["backoff"], "seq": r["seq"], "spurious": bool(r["spurious"])})
        for r in tcp_retx.iter_rows(named=True):
            tcp_truth["retransmissions"].append({
                "ts": _s(r["t_ns"]), "flow": sock_flow.get(r["sock"]), "seq": r["seq"], "len": r["len"],
                "pid": r["pid"], "trigger": r["trigger"], "spurious": bool(r["spurious"]),
                "original_ts": _s(r["t_original_ns"] + BASE if r["t_original_ns"] is not None else None),
                "original_delivered_ts": _s(r["t_original_delivered_ns"] + BASE
                                            if r["t_original_delivered_ns"] is not None else None)})
        for sock, name in sock_flow.items():
            s_tx = ttx.filter(pl.col("sock") == sock)
            s_re = retx.filter(pl.col("sock") == sock)
            tcp_truth["flows"][name or f"socket{sock}"] = {
                "segments_sent": s_tx.height, "retransmissions": s_re.height,
                "spurious_retransmissions": s_re.filter(pl.col("spurious")).height,
                "rto_expirations": rto_ev.filter(pl.col("sock") == sock).height,
                "spurious_rtos": rtos.filter((pl.col("sock") == sock) & pl.col("spurious").fill_null(False)).height,
                "fast_recovery_episodes": cong.filter((pl.col("sock") == sock) & (pl.col("ca_state") == 3)).height}

    # --- finish the packet table ---
    for c in ("t_server_ns", "t_ap_wired_ns", "t_enqueue_ns", "t_fate_ns", "t_client_ns"):
        pk = pk.with_columns(_ref(c))
    pk = pk.with_columns(
        pl.col("src").map_elements(_ip, return_dtype=pl.String), pl.col("dst").map_elements(_ip, return_dtype=pl.String),
        pl.when(pl.col("proto") == 6).then(pl.col("seq")).otherwise(None).alias("tcp_seq"),
        (pl.col("t_first_tx_ns") - pl.col("t_enqueue_ns")).alias("queue_delay_ns"))
    packets = pk.select(list(PACKET_COLUMNS)).sort("t_ap_wired_ns")
    packets.write_parquet(out / "truth_packets.parquet", compression="zstd")
    attempts = attempts.sort(["t_tx_ns", "pid", "frag"])
    attempts.write_parquet(out / "truth_attempts.parquet", compression="zstd")

    # --- MAC statistics per station ---
    data_tx = tx.filter(pl.col("is_data"))
    mac_truth = _mac_stats(sc, data_tx, tx, ap_nodes, st_by_mac, st_by_node, stations)

    # --- events ---
    events = []
    for f in flows:
        events.append({"kind": "flow_start", "ts": f["start_ts"], "flow": f["name"], "station": f["station"]})
    for r in mac.filter(pl.col("kind").is_in(["assoc", "deassoc", "deaf_on", "deaf_off", "walk"])).iter_rows(named=True):
        st = st_by_node.get(r["node"])
        t = _s(r["t_ns"] + BASE)
        if r["kind"] == "assoc":
            events.append({"kind": "associated", "ts": t, "station": st, **_bssid_of(nodes, r["a"])})
        elif r["kind"] == "deassoc":
            events.append({"kind": "association_lost", "ts": t, "station": st, **_bssid_of(nodes, r["a"]),
                           "note": "the station missed MaxMissedBeacons beacons in a row"})
        elif r["kind"] == "walk" and r["a"] == 0 and r["b"] == 0:
            events.append({"kind": "walk_stop", "ts": t, "station": st, "note": "the station stands still"})
        elif r["kind"] == "walk":
            spec = sc.station(st)
            if spec.toward is not None:
                events.append({"kind": "walk_start", "ts": t, "station": st, "speed_mps": spec.speed_mps,
                               "from": [spec.x, spec.y], "to": list(spec.toward),
                               "note": "walks in a straight line from `from` to `to` and stops there"})
                continue
            events.append({"kind": "walk_start", "ts": t, "station": st, "speed_mps": spec.speed_mps,
                           "from_m": round((spec.x ** 2 + spec.y ** 2) ** 0.5, 3),
                           "note": "moves straight away from the AP: distance = from_m + speed_mps * (t - ts)"})
        elif r["kind"] == "deaf_on":
            off = mac.filter((pl.col("kind") == "deaf_off") & (pl.col("node") == r["node"])
                             & (pl.col("t_ns") > r["t_ns"]))
            end = _s(off.get_column("t_ns").min() + BASE) if off.height else None
            events.append({"kind": "interference", "start_ts": t, "end_ts": end, "ts": t, "station": st,
                           "note": "the station decodes nothing (receiver-side interference); the AP "
                                   "and the sniffer hear nothing unusual"})
    events += _hidden_events(sc, result, _read(work, "interferer"))
    events.sort(key=lambda e: e["ts"])

    # --- summary ---
    def fate_n(f: str) -> int:
        return packets.filter(pl.col("fate") == f).height

    spur = tcp_retx.filter(pl.col("spurious")).height if tcp_retx.height else 0
    sink = result.get("sink_rx_bytes", {})
    for f in flows:
        active = (f["stop_ts"] - f["start_ts"])
        f["received_bytes"] = sink.get(f["name"])
        f["goodput_mbps"] = round(sink.get(f["name"], 0) * 8 / active / 1e6, 4) if active > 0 else None
        f["delivered_packets"] = packets.filter((pl.col("flow") == f["name"]) & (pl.col("fate") == "delivered")).height
    n_att = attempts.height
    summary = {
        "downlink_packets": packets.height,
        "delivered": fate_n("delivered"),
        "ap_queue_drops": fate_n("dropped_at_ap_queue"),
        "retry_limit_drops": fate_n("failed_after_retry_limit"),
        "not_forwarded": fate_n("not_forwarded"),
        "in_flight_at_end": fate_n("in_flight_at_end"),
        "mpdu_attempts": n_att,
        "mpdu_retries": int(attempts.get_column("retry").sum()) if n_att else 0,
        "mpdu_retransmissions": int(attempts.get_column("retransmission").sum()) if n_att else 0,
        "sniffer_captured_attempts": int(attempts.get_column("sniffed").sum()) if n_att else 0,
        "sniffer_capture_fraction": round(float(attempts.get_column("sniffed").mean()), 4) if n_att else None,
        "tcp_retransmissions": tcp_retx.height,
        "spurious_retransmissions": spur,
        "rto_expirations": rtos.height,
        "spurious_rtos": rtos.filter(pl.col("spurious").fill_null(False)).height if rtos.height and "spurious" in rtos.columns else 0,
        "goodput_mbps": {f["name"]: f["goodput_mbps"] for f in flows},
    }
    # Consistency: a packet the MAC saw arrive at a full queue must never have been sent.
    inconsistent = packets.filter((pl.col("queue_len_at_enqueue") >= pl.col("queue_max")) & (pl.col("n_attempts") > 0)).height

    truth: dict[str, Any] = {
        "xlayer_sim_truth": TRUTH_VERSION,
        "scenario": sc.name,
        "summary_text": sc.summary,
        "seed": seed,
        "seconds": sc.seconds,
        "parameters": sc.physical(),
        "topology": {
            **nodes,
            "standard": f"802.11{sc.standard}",
            "channel": _channel(sc),
            "path": _path_text(sc),
            "ap_queue": f"the AP's WifiMacQueue ({sc.queue_packets} packets; flow control off, no qdisc above it)",
            "client_capture_station": client_station,
            "ssid": sc.ssid,
        },
        "reference": {"clock": "server", "epoch_base_s": _clocks.EPOCH_BASE_S,
                      "note": "reference time = epoch_base_s + simulation time; every *_ts in this file "
                              "and every *_ns column of the Parquet tables is on it"},
        "convention": _clocks.CONVENTION,
        "clocks": _clock_truth(cl),
        "flows": flows,
        "summary": summary,
        "packets": {"file": "truth_packets.parquet", "rows": packets.height, "key": "pid",
                    "identify_by": ["src", "dst", "proto", "sport", "dport", "ip_id", "tcp_seq"],
                    "columns": PACKET_COLUMNS,
                    "attempts_file": "truth_attempts.parquet", "attempt_rows": attempts.height,
                    "attempt_columns": ATTEMPT_COLUMNS,
                    "fates": {f: fate_n(f) for f in ("delivered", "dropped_at_ap_queue",
                                                      "failed_after_retry_limit", "not_forwarded",
                                                      "in_flight_at_end")},
                    "consistency": {"sent_although_queue_was_full": inconsistent}},
        "mac": mac_truth,
        "tcp": tcp_truth,
        "events": events,
        "causes": [],
        "captures": {v: {"file": s.path.name, "frames": s.frames, "bytes": s.size, "snaplen": s.snaplen,
                         "records_cut_by_snaplen": s.truncated_records} for v, s in summaries.items()},
        "run": {"sim_wall_s": round(result["sim_wall_s"], 3), "wall_s": round(wall_s, 2),
                "tcp_samples": result.get("tcp_samples"), "simulator": "ns-3 3.44 (PyPI ns3)"},
    }
    if nodes.get("interferers"):
        truth["topology"]["interferers"] = nodes["interferers"]
    if len(ap_nodes) > 1:
        truth["roams"] = _roams(nodes, mac, tx, packets, tcp_retx, rtos, sock_flow)
    ctx = Context(sc, truth, packets, attempts, tcp_retx, rtos, _read(work, "interferer"))
    truth["causes"] = sc.causes(ctx) if sc.causes else []
    ok, detail = sc.expect(truth) if sc.expect else (True, "")
    truth["expect"] = {"holds": bool(ok), "detail": detail}
    return truth


def _bssid_of(nodes: dict, bssid: int | None) -> dict:
    """Return {"bssid": ..., "ap": name} for an association event in the several-AP world, else {}."""
    if "aps" not in nodes or bssid is None:
        return {}
    ap = next((a for a in nodes["aps"] if _mac_int(a["bssid"]) == bssid), None)
    return {"bssid": ap["bssid"] if ap else f"{bssid:012x}", "ap": ap["name"] if ap else None}


def _roams(nodes: dict, mac: pl.DataFrame, tx: pl.DataFrame, packets: pl.DataFrame, tcp_retx: pl.DataFrame,
           rtos: pl.DataFrame, sock_flow: dict) -> list[dict]:
    """Return every roam of every station: an association with a BSSID other than its previous one, with
    the last downlink data frame from the old AP before it, the loss and the join, the first data frame
    from the new AP after it, and the packets lost and TCP recoveries in that gap."""
    ap_by_bssid = {_mac_int(a["bssid"]): a for a in nodes["aps"]}
    data = tx.filter(pl.col("is_data") & (pl.col("pid") > 0))
    out = []
    for st in nodes["stations"]:
        ev = mac.filter((pl.col("node") == st["node"]) & pl.col("kind").is_in(["assoc", "deassoc"])).sort("t_ns")
        prev = None
        for r in ev.iter_rows(named=True):
            if r["kind"] != "assoc":
                continue
            if prev is not None and r["a"] != prev and prev in ap_by_bssid and r["a"] in ap_by_bssid:
                out.append(_one_roam(st, ap_by_bssid[prev], ap_by_bssid[r["a"]], r["t_ns"], ev, data, packets,
                                     tcp_retx, rtos))
            prev = r["a"]
    return out


def _one_roam(st: dict, old: dict, new: dict, t_assoc: int, ev: pl.DataFrame, data: pl.DataFrame,
              packets: pl.DataFrame, tcp_retx: pl.DataFrame, rtos: pl.DataFrame) -> dict:
    """Return one roam of station `st` from AP `old` to AP `new` (joined at simulation ns `t_assoc`): the
    time without data runs from the last packet the station received through the old AP to the first
    through the new one."""
    ra = _mac_int(st["mac"])
    ta = BASE + t_assoc
    lost = ev.filter((pl.col("kind") == "deassoc") & (pl.col("t_ns") < t_assoc)).get_column("t_ns")
    mine = packets.filter((pl.col("station") == st["name"]) & (pl.col("fate") == "delivered"))
    last = mine.filter(pl.col("t_fate_ns") < ta).get_column("t_fate_ns").max()
    first = mine.filter(pl.col("t_fate_ns") > ta).get_column("t_fate_ns").min()
    old_tx = data.filter((pl.col("node") == old["node"]) & (pl.col("ra") == ra)).get_column("t_ns")
    lo = last if last is not None else ta
    hi = first if first is not None else ta
    # packets lost around the roam: sent to the station (AP wired side) from a second before its last
    # packet through the old AP until its first through the new one, never delivered
    gone = packets.filter((pl.col("station") == st["name"]) & (pl.col("fate") != "delivered")
                          & pl.col("t_ap_wired_ns").is_between(lo - 10**9, hi))
    retx = tcp_retx.filter(pl.col("t_ns").is_between(lo, hi)).height if tcp_retx.height else 0
    n_rto = rtos.filter(pl.col("t_ns").is_between(lo, hi)).height if rtos.height else 0
    return {"station": st["name"], "from_ap": old["name"], "to_ap": new["name"], "from_bssid": old["bssid"],
            "to_bssid": new["bssid"], "last_data_ts": _s(last),
            "association_lost_ts": _s(BASE + lost.max()) if lost.len() else None,
            "associated_ts": _s(ta), "first_data_ts": _s(first),
            "gap_s": round((first - last) / 1e9, 6) if first is not None and last is not None else None,
            "old_ap_last_tx_ts": _s(BASE + old_tx.max()) if old_tx.len() else None,
            "packets_lost": gone.height,
            "packets_lost_by_fate": {f: n for f, n in gone.group_by("fate").len().sort("fate").iter_rows()},
            "tcp_retransmissions": retx, "rto_expirations": n_rto,
            "note": "last/first data: packets the station's MAC received before/after joining the new AP; "
                    "the old AP does not know the station left and keeps sending to it "
                    "(old_ap_last_tx_ts); the loss is the station's MaxMissedBeacons"}


def _path_text(sc: Scenario) -> str:
    """Return the topology line of truth.json: the wired link as the scenario built it."""
    if sc.aps:
        return (f"server --CSMA 1 Gbit/s-- switch --CSMA-- {len(sc.aps)} APs (bridges, one subnet, SSID "
                f"{sc.ssid!r}, one channel) ~~802.11~~ stations; sniffer at {list(sc.sniffer_position or ())}, "
                f"antenna gain {sc.sniffer_rx_gain_db:g} dB; ap_wired.pcap is {sc.aps[0]['name']}'s port")
    wired = "CSMA 1 Gbit/s" if sc.wired_delay_ms is None else \
        f"point-to-point 1 Gbit/s, {sc.wired_delay_ms:g} ms one way"
    hidden = f"; hidden nodes (ad hoc, outside the BSS): {len(sc.interferers)}" if sc.interferers else ""
    return f"server --{wired}-- AP (routes) ~~802.11~~ stations; sniffer 1.5 m from the AP{hidden}"


def _hidden_events(sc: Scenario, result: dict, log: pl.DataFrame) -> list[dict]:
    """Return one ``hidden_node`` event per interferer: its burst window, the station beside it and
    what it put on the air (its frames and its peer's ACKs)."""
    out = []
    by_name = {h["name"]: h for h in result["nodes"].get("interferers", [])}
    for it in sc.interferers:
        h = by_name.get(it.name, {})
        nodes = [h.get("node"), h.get("peer_node")]
        df = log.filter(pl.col("node").is_in(nodes)) if log.height else log
        air = int(df.get_column("dur_ns").sum() or 0) if df.height else 0
        out.append({"kind": "hidden_node", "ts": _s(BASE + round(it.start_s * 1e9)),
                    "start_ts": _s(BASE + round(it.start_s * 1e9)), "end_ts": _s(BASE + round(it.end_s * 1e9)),
                    "station": it.near, "interferer": it.name, "ppdus": df.height, "airtime_s": round(air / 1e9, 6),
                    "tx_power_dbm": h.get("tx_power_dbm"), "rx_dbm_at_station": h.get("rx_dbm_at_station"),
                    "rx_dbm_at_ap": h.get("rx_dbm_at_ap"),
                    "note": "an ad hoc pair outside the BSS beside the station: the station hears it, the AP "
                            "does not (below preamble detection), so the AP's frames to the station collide there"})
    return out


def _clock_truth(cl: dict) -> dict:

    by_file = {FILES["server"]: cl["server"], FILES["ap_wired"]: cl["ap"], FILES["sniffer"]: cl["sniffer"],
               FILES["client"]: cl["client"], FILES["tcp"]: cl["server"]}
    out = {f: c.truth() for f, c in by_file.items()}
    out[FILES["tcp"]] = dict(out[FILES["tcp"]], jitter_us=0.0, jitter_max_us=0.0,
                             note="sample times are exact on the server clock")
    out[FILES["sniffer"]]["event"] = "end of reception (pcap timestamp)"
    out[FILES["ap_wired"]]["event"] = "end of reception of frames from the server, start of transmission of the AP's own"
    out[FILES["server"]]["event"] = "start of transmission of the server's frames, end of reception of others"
    out[FILES["client"]]["event"] = "delivery by the station's MAC (received), hand-over to the MAC (sent)"
    tsf = cl["sniffer_tsf"].truth()
    tsf["event"] = "first bit of the PPDU at the sniffer"
    tsf["note"] = ("radiotap TSFT of sniffer.pcap: t = TSFT / 1e6 seconds on the sniffer NIC's free-running "
                   "TSF counter (floor to whole µs, no jitter)")
    out[FILES["sniffer"] + "#tsft"] = tsf
    return out


def _mac_stats(sc: Scenario, data_tx: pl.DataFrame, tx: pl.DataFrame, ap_nodes: list[int], st_by_mac: dict,
               st_by_node: dict, stations: dict) -> dict:
    """Per-station retries, rates and airtime, from every MPDU put on the air."""
    out: dict[str, Any] = {"stations": {}}
    psdu = data_tx.unique(["t_ns", "node"])      # one row per data PSDU (airtime counts once)
    total_air = 0
    per: dict[str, dict] = {}
    for mac_i, name in st_by_mac.items():
        node = stations[name]["node"]
        down = data_tx.filter(pl.col("node").is_in(ap_nodes) & (pl.col("ra") == mac_i))
        up = data_tx.filter(pl.col("node") == node)
        air = int(psdu.filter((pl.col("node").is_in(ap_nodes) & (pl.col("ra") == mac_i)) | (pl.col("node") == node))
                  .get_column("dur_ns").sum() or 0)
        total_air += air
        n = down.height + up.height
        retries = int(down.get_column("retry").sum() or 0) + int(up.get_column("retry").sum() or 0)
        timeline = []
        bins = max(1, int(round(sc.seconds)))
        for b in range(bins):
            lo, hi = b * 10**9, (b + 1) * 10**9
            d = down.filter(pl.col("t_ns").is_between(lo, hi, closed="left"))
            rates = d.get_column("rate_bps").to_list()
            timeline.append({"start_ts": round((BASE + lo) / 1e9, 9), "end_ts": round((BASE + hi) / 1e9, 9),
                             "attempts": d.height, "retries": int(d.get_column("retry").sum() or 0),
                             "median_rate_mbps": statistics.median(rates) / 1e6 if rates else None})
        rates = down.get_column("rate_bps")
        per[name] = {
            "mac": stations[name]["mac"], "ip": stations[name]["ip"],
            "downlink_attempts": down.height, "downlink_retries": int(down.get_column("retry").sum() or 0),
            "uplink_attempts": up.height, "uplink_retries": int(up.get_column("retry").sum() or 0),
            "retry_fraction": round(retries / n, 4) if n else 0.0,
            "downlink_mean_rate_mbps": round(float(rates.mean()) / 1e6, 3) if down.height else 0.0,
            "airtime_s": round(air / 1e9, 6),
            "rate_timeline": timeline,
        }
    for name, d in per.items():
        d["airtime_share"] = round(d["airtime_s"] * 1e9 / total_air, 4) if total_air else 0.0
        out["stations"][name] = d
    ap_data = data_tx.filter(pl.col("node").is_in(ap_nodes))
    out["fragments_sent"] = ap_data.filter(pl.col("more_frag") | (pl.col("frag") > 0)).height
    out["rts_sent"] = tx.filter(pl.col("is_rts")).height
    out["cts_sent"] = tx.filter(pl.col("is_cts")).height
    out["data_mpdus_by_ap"] = ap_data.height
    out["note"] = ("counts of MPDUs put on the air (PhyTxPsduBegin), per transmitter; airtime is the "
                   "summed duration of data PPDUs to or from the station; retry_fraction counts data "
                   "MPDUs with the Retry bit, both directions")
    return out


def _channel(sc: Scenario) -> int:
    """Return the BSS's channel number: 1 (2.4 GHz), 36 (HT20) or 42 (the 80 MHz channel over 36-48)."""
    return {"g": 1, "n": 36}.get(sc.standard, 42)


def write_bundle(sc: Scenario, seed: int, truth: dict, out: Path, summaries: dict, result: dict) -> None:
    """Write bundle.json: the captures, each with its own clock (the truth is only in truth.json)."""
    from xlayer.bundle.manifest import Bundle, CaptureEntry, utc_now, write_manifest  # noqa: PLC0415

    chan = _channel(sc)
    # Headers only: the payload bytes say nothing an analyzer uses, and they would be most of the file.
    cut = (f"snaplen {sc.snaplen_wired} (Ethernet, IPv4 and TCP headers with options; payload cut, "
           "wire length kept)")
    note_clock = ("simulated capture clock with its own offset, skew and timestamp jitter "
                  "(xlayer sim); the truth is in truth.json, not here")

    def entry(vantage: str, kind: str, clock: str, notes: str, **kw: Any) -> CaptureEntry:
        s = summaries.get(vantage)
        extra = {}
        if s is not None:
            extra = {"packets": s.frames, "bytes": s.size}
        else:
            extra = {"bytes": (out / FILES[vantage]).stat().st_size}
        return CaptureEntry(kind=kind, vantage=vantage if vantage != "tcp" else "server", file=FILES[vantage],
                            clock=clock, format="pcap" if kind != "tcp_state" else "tcpinfo-jsonl",
                            notes=notes, complete=True, **extra, **kw)

    b = Bundle(
        captures=[
            entry("sniffer", "air", "sniffer",
                  ("passive monitor 1.5 m from the AP" if not sc.aps else
                   f"passive monitor at {list(sc.sniffer_position or ())} m, between the {len(sc.aps)} APs "
                   "(one channel)") + " (radiotap, DLT 127): misses what it cannot decode; "
                  "pcap timestamps at the end of reception; radiotap TSFT is the NIC's own TSF counter "
                  f"(first bit); snaplen {sc.snaplen_air} (radiotap and 802.11 to TCP headers; "
                  "payload and FCS cut, wire length kept)", channel=chan, iface="sim-mon0",
                  extra={"snaplen": sc.snaplen_air}),
            entry("ap_wired", "wired", "ap",
                  "the AP's wired (uplink) port: a downlink packet seen here and never on the air was "
                  "dropped in the AP's queue; the time between the two is its queueing delay; "
                  + cut, iface="sim-ap-eth0", extra={"snaplen": sc.snaplen_wired}),
            entry("server", "wired", "server", "the server's own interface; " + cut, iface="sim-srv-eth0",
                  extra={"snaplen": sc.snaplen_wired}),
            entry("client", "wired", "client",
                  f"station {sc.stations[0].name}'s own view: Ethernet II frames (DLT 1) as a Linux "
                  "managed-mode Wi-Fi interface delivers them (received: when its MAC hands them up; "
                  "sent: when handed to the driver); " + cut, iface="sim-sta-wlan0",
                  extra={"snaplen": sc.snaplen_wired}),
            entry("tcp", "tcp_state", "server", "the server's TCP sockets sampled every 50 ms from ns-3's "
                  "socket state (tcp_info field names and units)", interval_s=sc.sample_interval_s),
        ],
        tags={"sim": sc.name, "access": f"802.11{sc.standard}",
              "transport": "+".join(sorted({f.proto for f in sc.flows})), "seed": str(seed),
              "seconds": f"{sc.seconds:g}", "simulator": "ns-3 3.44", "ssid": sc.ssid},
        created=utc_now(), host="ns-3 simulation",
        clocks={name: {"source": "simulated", "note": note_clock}
                for name in ("server", "ap", "sniffer", "client")},
        extra={"sim": {"scenario": sc.name, "summary": sc.summary, "seed": seed, "truth": "truth.json",
                       "topology": truth["topology"]["path"], "ssid": sc.ssid,
                       "snaplen": {"air": sc.snaplen_air, "wired": sc.snaplen_wired}}},
    )
    b.clocks["server"]["note"] = "the reference clock of this bundle (" + note_clock + ")"
    write_manifest(out, b)


def load_truth(bundle_dir: str | Path) -> dict:
    """Return truth.json of a simulated bundle."""
    return json.loads((Path(bundle_dir) / "truth.json").read_text())
