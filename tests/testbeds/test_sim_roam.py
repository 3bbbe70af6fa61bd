"""Issue 14 item 4: the `roam` scenario: two APs on one channel, one SSID, a station walking from one to the other.

ONE short run (ROAM_SECONDS simulated seconds, about 20 s of CPU; the walk is timed to the run, so AP1
is lost at about half of it) read back three ways: the sniffer capture holds both BSSs, `xlayer metrics` puts the walking
station under both BSSIDs, and `xlayer analyze --json` ranks `handoff` first on the roam, naming both.
"""
from __future__ import annotations

import json
import subprocess
import sys

import polars as pl
import pytest

import parsers
from tests.helpers.common import REPO
from xlayer.testbeds.sim import get_scenario, ns3_available
from xlayer.testbeds.sim.scenarios import UnsupportedStandard

ROAM_SECONDS = 7.0


def _xlayer(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xlayer", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=900, check=False)


@pytest.fixture(scope="module")
def roam(tmp_path_factory):
    ok, why = ns3_available()
    if not ok:
        pytest.skip(why)
    out = tmp_path_factory.mktemp("sim-roam") / "bundle"
    p = _xlayer("sim", "roam", "--seconds", f"{ROAM_SECONDS:g}", "-o", str(out))
    assert p.returncode == 0, p.stderr[-3000:]
    truth = json.loads((out / "truth.json").read_text())
    return out, truth


def test_scenario_places_two_aps_and_stays_on_g():
    sc = get_scenario("roam", 4.0)
    d = sc.physical()
    assert [a["name"] for a in d["aps"]] == ["ap1", "ap2"] and d["aps"][0]["x"] != d["aps"][1]["x"]
    walker = d["stations"][0]
    # it walks from near AP1 to near AP2 (along the line between them)
    (x1, y1), (x2, y2) = ((a["x"], a["y"]) for a in d["aps"])
    tx, ty = walker["toward"]
    assert walker["walk_at_s"] is not None and walker["speed_mps"] > 0
    assert abs(walker["x"] - x1) < abs(walker["x"] - x2) and abs(tx - x2) < abs(tx - x1) and y1 == y2 == ty
    # the one-AP scenarios keep their parameters as they were (no new keys)
    base = get_scenario("walkaway", 4.0).physical()
    assert not {"aps", "sniffer_position", "sniffer_rx_gain_db"} & set(base)
    assert all("toward" not in st for st in base["stations"])
    with pytest.raises(UnsupportedStandard):
        get_scenario("roam", 4.0, standard="ac")


def test_truth_has_the_roam(roam):
    _, truth = roam
    assert truth["expect"]["holds"], truth["expect"]["detail"]
    aps = truth["topology"]["aps"]
    b1, b2 = aps[0]["bssid"], aps[1]["bssid"]
    assert b1 != b2
    (r,) = [r for r in truth["roams"] if r["station"] == "sta_walk"]
    assert (r["from_bssid"], r["to_bssid"]) == (b1, b2)
    assert r["last_data_ts"] < r["association_lost_ts"] < r["associated_ts"] < r["first_data_ts"]
    assert r["gap_s"] > 0.5           # MaxMissedBeacons (10 x 102.4 ms) at least, then the scan and join
    # the static stations never roam
    assert {r["station"] for r in truth["roams"]} == {"sta_walk"}
    (h,) = [c for c in truth["causes"] if c["cause"] == "handoff"]
    assert h["role"] == "primary" and h["stations"] == ["sta_walk"]
    assert (h["numbers"]["from_bssid"], h["numbers"]["to_bssid"]) == (b1, b2)
    assert h["start_ts"] == pytest.approx(r["last_data_ts"]) and h["end_ts"] == pytest.approx(r["first_data_ts"])
    # as in walkaway: the rate falls while the station walks away from AP1, up to the handoff
    (rc,) = [c for c in truth["causes"] if c["cause"] == "rate_change"]
    assert rc["start_ts"] < rc["end_ts"] <= h["start_ts"]
    # packets to the walker went through both APs: the packet table follows them through AP2's port
    pk = pl.read_parquet(roam[0] / "truth_packets.parquet").filter(pl.col("station") == "sta_walk")
    late = pk.filter(pl.col("t_ap_wired_ns") > int(r["first_data_ts"] * 1e9))
    assert late.height > 100 and late["ap_wired_frame"].null_count() == late.height
    assert (late["fate"] == "delivered").mean() > 0.8


def test_sniffer_capture_holds_both_bss(roam):
    out, truth = roam
    b1, b2 = (a["bssid"] for a in truth["topology"]["aps"])
    walker = truth["topology"]["stations"][0]["mac"]
    air = parsers.read_capture(out / "sniffer.pcap")
    beacons = air.filter((pl.col("wlan_type") == 0) & (pl.col("wlan_subtype") == 8))
    assert set(beacons["wlan_bssid"].unique().to_list()) == {b1, b2}
    # the walker's association with AP2: its request and AP2's response, both on the air
    assoc = air.filter((pl.col("wlan_type") == 0) & pl.col("wlan_subtype").is_in([0, 1, 2, 3])
                       & (pl.col("wlan_bssid") == b2))
    assert assoc.filter(pl.col("wlan_sa") == walker).height >= 1
    assert assoc.filter(pl.col("wlan_da") == walker).height >= 1
    data = air.filter((pl.col("wlan_type") == 2) & pl.col("ip_len").is_not_null() & (pl.col("wlan_da") == walker))
    assert set(data["wlan_bssid"].unique().to_list()) == {b1, b2}


def test_metrics_station_tables_per_bss(roam, tmp_path):
    out, truth = roam
    b1, b2 = (a["bssid"] for a in truth["topology"]["aps"])
    macs = {s["name"]: s["mac"] for s in truth["topology"]["stations"]}
    p = _xlayer("metrics", str(out), "-o", str(tmp_path / "m"), "--tables", "stations", "-q")
    assert p.returncode == 0, p.stderr[-2000:]
    st = pl.read_parquet(tmp_path / "m" / "stations.parquet")
    bss = {s: set(st.filter(pl.col("station") == m)["bssid"].to_list()) for s, m in macs.items()}
    assert bss["sta_walk"] == {b1, b2}
    assert bss["sta_ap1"] == {b1} and bss["sta_ap2"] == {b2}


def test_analyze_ranks_handoff_first_on_the_roam(roam):
    out, truth = roam
    b1, b2 = (a["bssid"] for a in truth["topology"]["aps"])
    walker = truth["topology"]["stations"][0]["mac"]
    (r,) = truth["roams"]
    p = _xlayer("analyze", str(out), "--json", "-q")
    assert p.returncode == 0, p.stderr[-2000:]
    incs = json.loads(p.stdout)["incidents"]
    # the best-ranked incident within the roam (from the station's last packet through AP1 to its first
    # through AP2, as ns-3 traced them) is a handoff
    during = [i for i in incs if i["start"] <= r["first_data_ts"] and i["end"] >= r["last_data_ts"]]
    assert during, [(i["start"], i["end"], i["cause"]) for i in incs]
    inc = during[0]
    assert inc["cause"] == "handoff" and inc["causes"][0]["cause"] == "handoff", inc["causes"]
    ev = inc["evidence"]["handoff"]
    assert walker in ev["stations"]
    (n,) = [n for n in ev["numbers"]["roams"] if n["to_bssid"] == b2]
    assert n["from_bssid"] == b1 and n["station"] == walker
    assert f"from AP {b1} to AP {b2}" in ev["summary"]
    # its time without data overlaps the truth's (last packet through AP1 .. first through AP2)
    assert n["last_ts_ns"] / 1e9 < r["first_data_ts"] and n["first_ts_ns"] / 1e9 > r["last_data_ts"]
    # the station's join to AP2 is among its evidence frames, from the sniffer capture
    assert {"assoc_req", "assoc_resp"} <= {j["event"] for j in n["joins"]}
