"""A spurious timeout whose wait was mostly on the ACK path says so: data reached the station on the air,
then the station sent nothing of the connection (random seeds 582, 734 and 770: a station's uplink
stalled for ~180 ms after quick deliveries, and xlayer named only a one-way delay of 50 ms against a
200 ms RTO).  The claim is read off the air capture; the station's own capture must agree with it."""
from __future__ import annotations

import polars as pl

from tests.helpers.common import REPO
from xlayer.attribution.causes import spurious_rto
from xlayer.attribution.causes.base import Context
from xlayer.attribution.drops import DropConfig
from xlayer.metrics import open_timeline
from xlayer.timeline.flowkey import reverse_flow

MS = 1_000_000
S = 1_000_000_000


def test_reverse_flow() -> None:
    assert reverse_flow("tcp 10.0.0.1:5001>10.0.0.2:49152") == "tcp 10.0.0.2:49152>10.0.0.1:5001"
    assert reverse_flow("udp [2001:db8::1]:53>[2001:db8::2]:5353") == "udp [2001:db8::2]:5353>[2001:db8::1]:53"
    assert reverse_flow(reverse_flow("icmp 10.0.0.1>10.0.0.2")) == "icmp 10.0.0.1>10.0.0.2"


def test_the_silence_read_off_the_air_is_the_stations_own() -> None:
    """sim-performance_anomaly: the good station's last segment before the timeout reached it 195 ms after
    the original left; its ACK then waited ~200 ms (ns-3's delayed-ACK timer equals its least RTO)."""
    tl = open_timeline(REPO / "samples" / "sim-performance_anomaly")
    rt = tl.table("retransmissions").filter(pl.col("spurious") & (pl.col("trigger") == "rto")
                                            & (pl.col("capture_file") == "server.pcap")).sort("ts_ns")
    held = spurious_rto.acks_held(Context(tl, DropConfig()), rt, 200.0)
    assert held is not None and held["until_retransmission"]
    first = rt.row(0, named=True)
    wait = first["ts_ns"] - first["original_ts_ns"]
    assert held["held_ms"] * MS >= spurious_rto.ACK_HELD_SHARE * wait
    assert abs(held["down_ms"] + held["held_ms"] - wait / MS) < 1.0
    # the station's own capture (client.pcap, its MAC's view) sent nothing of the connection in that time
    t_d = first["original_ts_ns"] + int(held["down_ms"] * MS)
    own = tl.packets("client.pcap", columns=["ts_ns", "flow"])
    sent = own.filter((pl.col("flow") == reverse_flow(held["flow_data"]))
                      & pl.col("ts_ns").is_between(t_d + MS, t_d + int(held["held_ms"] * MS) - MS))
    assert sent.height == 0
    before = own.filter((pl.col("flow") == reverse_flow(held["flow_data"]))
                        & pl.col("ts_ns").is_between(t_d - 50 * MS, t_d))
    assert before.height > 0         # it was ACKing until then: the silence is not a capture gap


class _Tables:
    def __init__(self, **t: pl.DataFrame) -> None:
        self.t = t

    def table(self, name: str) -> pl.DataFrame:
        return self.t[name]


def _ctx(ack_every_ms: float | None) -> tuple[Context, pl.DataFrame]:
    flow = "tcp 10.0.0.1:5001>10.0.0.2:40000"
    # data delivered on the air every 2 ms for 40 ms after the original left; the RTO fires at 220 ms
    down = pl.DataFrame({"capture_file": "ap.pcap", "frame": list(range(1, 21)), "ts_ns": [S + 2 * k * MS for k in range(20)],
                         "flow": flow, "station": "02:00:00:00:00:01", "fate": "delivered",
                         "last_air_ts_ns": [S + (20 + 2 * k) * MS for k in range(20)]})
    acks = [] if ack_every_ms is None else [S + int(t * MS) for t in range(21, 400, int(ack_every_ms))]
    up = pl.DataFrame({"ts_ns": acks, "first_air_ts_ns": acks, "flow": reverse_flow(flow)},
                      schema={"ts_ns": pl.Int64, "first_air_ts_ns": pl.Int64, "flow": pl.String})
    sp = pl.DataFrame({"capture_file": ["ap.pcap"], "frame": [99], "ts_ns": [S + 220 * MS], "flow": [flow],
                       "original_ts_ns": [S], "original_frame": [1]})
    return Context(_Tables(downlink=down, uplink=up), DropConfig()), sp


def test_no_claim_while_the_station_kept_acking() -> None:
    ctx, sp = _ctx(ack_every_ms=5)
    assert spurious_rto.acks_held(ctx, sp, 200.0) is None


def test_a_station_silent_after_the_data_reached_it() -> None:
    ctx, sp = _ctx(ack_every_ms=None)
    held = spurious_rto.acks_held(ctx, sp, 200.0)
    assert held is not None and held["until_retransmission"]
    # the longest silence: from the first data that reached it to the retransmission
    assert held["down_ms"] == 20.0 and held["held_ms"] == 200.0
