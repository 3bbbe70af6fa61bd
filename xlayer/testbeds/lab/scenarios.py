"""The lab's scenarios: bottleneck queue, flows, injected events, and the effect each must show.

All share one path: a 10 Mbit/s tbf on the router's egress toward the client (the AP's downlink queue,
roughly an 802.11g cell's TCP capacity, and small enough that short runs give small captures) and a
cubic TCP download with a 128 KB receive buffer.  Each scenario changes one thing:

* baseline -- a 256 KB queue (~200 ms at 10 Mbit/s) that the clamped window cannot fill: no drops.
* queue_overflow -- a 10-packet queue (15 kB) the same download overflows: tail drops, fast
  retransmits.
* delay_spike -- a 4 MB queue, the download paced at 6 Mbit/s, and for 1.2 s the bottleneck
  stalls (8 kbit/s: a full packet takes 1.5 s, so only the bucket's two packets pass): the head of
  the queue waits longer than the RTO (>= 200 ms + RTT) without any loss, so the sender times out
  spuriously (TCPLossUndo / TCPSpuriousRTOs rise, tc drops stay 0).  What fires the RTO is a
  sudden gap in ACKs longer than the RTO, as MAC retransmissions make.  A gentler drop does not do
  it reliably: at 200 kbit/s ACKs keep trickling in and each RTT sample grows the RTO with them,
  and at 48 kbit/s (one packet per 252 ms) the first gap beats an RTO of 200 ms + RTT only while
  the RTT stays under ~50 ms, which a busy machine's scheduling breaks.
* udp_flood -- the baseline plus an unresponsive 15 Mbit/s UDP stream through the same queue (study
  001's "good TCP + bad UDP" case): the queue stays full, TCP gets well under half its baseline.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from xlayer.testbeds.lab.traffic import TCP_PORT, UDP_PORT, Flow

RATE_BPS = 10_000_000
BURST_BYTES = 3_000          # two full frames: the bucket must hold at least one MTU
TCP_WINDOW = 128 * 1024


@dataclass
class Spike:
    """A temporary change of the bottleneck rate: `at_s` after the transfers start, for `for_s`."""

    at_s: float
    for_s: float
    rate_bps: int


@dataclass
class Scenario:
    """One lab experiment: queue, flows, events, defaults, and the check its truth must pass."""

    name: str
    summary: str
    limit_bytes: int
    flows: list[Flow]
    check: Callable[[dict[str, Any]], tuple[bool, str]]
    rate_bps: int = RATE_BPS
    burst_bytes: int = BURST_BYTES
    spikes: list[Spike] = field(default_factory=list)
    default_seconds: float = 10.0
    min_seconds: float = 2.0

    def parameters(self) -> dict[str, Any]:
        """Return the scenario's parameters as JSON-able data."""
        return {"bottleneck": {"qdisc": "tbf", "rate_bps": self.rate_bps, "burst_bytes": self.burst_bytes,
                               "limit_bytes": self.limit_bytes,
                               "limit_ms_at_rate": round(self.limit_bytes * 8 / self.rate_bps * 1000, 1)},
                "flows": [vars(f) for f in self.flows],
                "spikes": [vars(s) for s in self.spikes]}


def tcp_flow(rate_bps: int | None = None) -> Flow:
    """Return the scenarios' TCP download (cubic, 128 KB receive buffer), optionally paced."""
    return Flow("tcp", "tcp", TCP_PORT, rate_bps=rate_bps, window_bytes=TCP_WINDOW)


def _tcp_goodput(truth: dict[str, Any]) -> float:
    return next((t.get("goodput_bps") or 0.0 for t in truth["transfers"] if t["proto"] == "tcp"), 0.0)


def _check_baseline(truth: dict[str, Any]) -> tuple[bool, str]:
    s = truth["summary"]
    ok = s["tc_drops"] == 0 and _tcp_goodput(truth) > 0.8 * RATE_BPS
    return ok, f"tc drops {s['tc_drops']} (want 0), TCP goodput {_tcp_goodput(truth) / 1e6:.2f} Mbit/s (want > 8)"


def _check_overflow(truth: dict[str, Any]) -> tuple[bool, str]:
    s = truth["summary"]
    return s["tc_drops"] > 0, f"tc drops {s['tc_drops']} (want > 0)"


def _check_spike(truth: dict[str, Any]) -> tuple[bool, str]:
    s = truth["summary"]
    ok = (s["TCPSpuriousRTOs"] > 0 or s["TCPLossUndo"] > 0) and s["tc_drops"] == 0
    return ok, (f"server TCPSpuriousRTOs {s['TCPSpuriousRTOs']}, TCPLossUndo {s['TCPLossUndo']} "
                f"(want one > 0), TCPTimeouts {s['TCPTimeouts']}, tc drops {s['tc_drops']} (want 0)")


def _check_flood(truth: dict[str, Any]) -> tuple[bool, str]:
    g = _tcp_goodput(truth)
    # a baseline run reaches ~95 % of the rate, so half the rate is a little above half the baseline
    return g < 0.5 * RATE_BPS, f"TCP goodput {g / 1e6:.2f} Mbit/s (want < {0.5 * RATE_BPS / 1e6:g})"


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("baseline", "TCP download through a 10 Mbit/s AP queue it cannot overflow: no drops, "
             "no timeouts", limit_bytes=256_000, flows=[tcp_flow()], check=_check_baseline),
    Scenario("queue_overflow", "the same download into a 10-packet AP queue: tail drops and fast "
             "retransmits", limit_bytes=15_000, flows=[tcp_flow()], check=_check_overflow),
    Scenario("delay_spike", "6 Mbit/s download; the link stalls for 1.2 s over a deep queue: "
             "spurious RTOs, no loss", limit_bytes=4_000_000, flows=[tcp_flow(6_000_000)],
             spikes=[Spike(at_s=1.5, for_s=1.2, rate_bps=8_000)], check=_check_spike,
             min_seconds=4.0),
    Scenario("udp_flood", "the baseline download beside an unresponsive 15 Mbit/s UDP stream in the "
             "same queue: TCP starves", limit_bytes=256_000,
             flows=[tcp_flow(), Flow("udp", "udp", UDP_PORT, rate_bps=15_000_000)], check=_check_flood),
)}
