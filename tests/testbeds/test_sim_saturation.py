"""The `saturation` scenarios (Bianchi's setting): n stations, saturated UDP uplink, chosen with --stations.

Pure Python (no ns-3): the scenario's setup, the --stations option and its refusals, and that the other
scenarios' parameters (hence their bundles) do not change.  The ns-3 run against the model is in
tests/campaign/test_theory.py.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from xlayer.testbeds.sim.scenarios import (
    SATURATION_MAX_STATIONS,
    SATURATION_OFFERED_BPS,
    SCENARIOS,
    Flow,
    get_scenario,
)


@pytest.mark.parametrize("name", ["saturation", "saturation_rts"])
def test_saturation_setup(name):
    sc = get_scenario(name, 4.0, stations=7)
    assert sc.name == name and sc.seconds == 4.0 and "(7 stations)" in sc.summary
    assert len(sc.stations) == 7 and len(sc.flows) == 7
    assert {f.station for f in sc.flows} == {s.name for s in sc.stations}
    assert all(f.uplink and f.proto == "udp" for f in sc.flows)
    # every station in range of the AP and of each other (no hidden nodes): within 3 m of the AP
    assert all(math.hypot(s.x, s.y) == pytest.approx(3.0, abs=0.01) for s in sc.stations)
    # together they offer more than the 54 Mbit/s channel carries
    assert sum(f.rate_bps for f in sc.flows) > 54e6 * 0.9 and SATURATION_OFFERED_BPS > 54e6
    assert (sc.standard, sc.rate_manager, sc.data_mode, sc.control_mode) == (
        "g", "constant", "ErpOfdmRate54Mbps", "ErpOfdmRate24Mbps")
    assert sc.rts_threshold == (0 if name == "saturation_rts" else None)
    phys = json.loads(json.dumps(sc.physical()))
    assert all(f["uplink"] is True for f in phys["flows"])
    assert len(get_scenario(name).stations) == 5 == SCENARIOS[name].default_stations


def test_other_scenarios_keep_their_parameters():
    # Their truth.json "parameters" (and bundles) must not grow an "uplink" key.
    for name in SCENARIOS:
        if not SCENARIOS[name].g_only:
            sc = get_scenario(name, 2.0)
            assert all("uplink" not in f for f in sc.physical()["flows"]), name


@pytest.mark.parametrize(("kw", "match"), [
    ({"name": "steady", "stations": 3}, "fixed set of stations"),
    ({"name": "saturation", "stations": 0}, "1 to"),
    ({"name": "saturation", "stations": SATURATION_MAX_STATIONS + 1}, "1 to"),
    ({"name": "saturation", "standard": "n"}, "802.11g only"),
])
def test_station_count_refusals(kw, match):
    name = kw.pop("name")
    with pytest.raises(KeyError, match=match):
        get_scenario(name, 2.0, **kw)


def test_uplink_flows_are_udp_only():
    with pytest.raises(ValueError, match="UDP only"):
        Flow("t", "tcp", "sta0", 5001, 0.5, uplink=True)


def test_cli_stations_option(tmp_path):
    bad = subprocess.run([sys.executable, "-m", "xlayer", "sim", "steady", "--stations", "3", "-o",
                          str(tmp_path / "b")], capture_output=True, text=True, timeout=120)
    if "ns3" in bad.stderr and "not installed" in bad.stderr:
        pytest.skip("ns-3 not installed: `xlayer sim` stops before reading the scenario")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "fixed set of stations" in bad.stderr
    assert not (tmp_path / "b").exists()
    listed = subprocess.run([sys.executable, "-m", "xlayer", "sim", "--list"], capture_output=True, text=True,
                            timeout=120)
    assert listed.returncode == 0 and "saturation_rts" in listed.stdout and "--stations" in listed.stdout


def test_baseline_takes_a_number_of_stations():
    """`baseline` is one station at 5 m unless asked for more; N stations stand on a 5 m circle, each with
    its own download, and the scenario still runs on any standard."""
    one, plain = get_scenario("baseline", 2.0), get_scenario("baseline", 2.0, stations=1)
    assert one.physical() == plain.physical() and one.summary == plain.summary == SCENARIOS["baseline"].summary
    assert [(s.name, s.x, s.y) for s in one.stations] == [("sta0", 5.0, 0.0)]
    four = get_scenario("baseline", 2.0, stations=4)
    assert [s.name for s in four.stations] == ["sta0", "sta1", "sta2", "sta3"]
    assert all(abs(math.hypot(s.x, s.y) - 5.0) < 1e-3 for s in four.stations)
    assert sorted((f.station, f.port, f.proto) for f in four.flows) == [
        (f"sta{i}", 5001 + i, "tcp") for i in range(4)]
    assert "(4 stations)" in four.summary and four.standard == "n"
    assert get_scenario("baseline", 2.0, stations=4, standard="ac").standard == "ac"
