"""Simulated experiments with ground truth: ns-3 scenarios written as xlayer bundles.

``run_scenario("udp_overflow", "runs/uo", seed=1)`` builds the scenario in ns-3 (in a child process),
captures it at four vantages (a passive radiotap sniffer, the AP's wired port, the server, a
station's own interface) plus the server's TCP state, each capture on its own simulated clock, and
writes a bundle (``bundle.json``) with ``truth.json`` beside it: the clocks, the fate of every downlink
packet and every transmission of it on the air, TCP retransmissions and timeouts, injected events and
the causes an analyzer should name.  Needs the PyPI package ``ns3`` (3.44).

Layout: `scenarios` (the experiments, one function each), `world` (ns-3 side, child process),
`native` (C++ capture writers and truth recorders), `clocks` (clock model and truth convention),
`truth` (logs -> truth.json and Parquet tables), `run` (orchestration), `pcapfile` (pcap checks).
"""
from __future__ import annotations

# The seeded scenario `random` registers itself (it builds on scenarios.py's helpers).
from xlayer.testbeds.sim import random_scenario  # noqa: F401
from xlayer.testbeds.sim.clocks import (
    CONVENTION,
    EPOCH_BASE_S,
    Clock,
    to_reference_ns,
    to_reference_s,
)
from xlayer.testbeds.sim.run import SimError, run_scenario
from xlayer.testbeds.sim.scenarios import (
    FILES,
    SCENARIOS,
    Flow,
    Scenario,
    Station,
    get_scenario,
    list_scenarios,
    scenario,
)


def ns3_available() -> tuple[bool, str]:
    """Return (True, version) if ns-3's Python bindings can be found, else (False, why not)."""
    import importlib.util

    if importlib.util.find_spec("ns") is None:
        return False, "the PyPI package ns3 is not installed (pip install ns3)"
    try:
        from importlib.metadata import version

        return True, version("ns3")
    except Exception:  # noqa: BLE001 - metadata is optional
        return True, "unknown"


__all__ = ["CONVENTION", "EPOCH_BASE_S", "FILES", "SCENARIOS", "Clock", "Flow", "Scenario", "SimError",
           "Station", "get_scenario", "list_scenarios", "ns3_available", "run_scenario", "scenario",
           "to_reference_ns", "to_reference_s"]
