"""`xlayer sim --standard ac|ax`: VHT80 / HE80 runs with A-MPDU and Block Ack, read back by xlayer and tshark.

One short run (2 simulated seconds of the `baseline` scenario) per standard; each takes 20-30 s of CPU.
"""
from __future__ import annotations

import json
import subprocess
import sys

import polars as pl
import pytest

import parsers
from tests.helpers.common import REPO, tshark_or_skip
from xlayer.testbeds.sim import get_scenario, ns3_available
from xlayer.testbeds.sim.scenarios import UnsupportedStandard
from xlayer.testbeds.sim.world import distance_scale
from xlayer.timeline.airtime import airtime

PHY = {"ac": "vht", "ax": "he"}
# ns-3 3.44's traced PPDU durations against the standard's (xlayer.timeline.airtime): no VHT-SIG-B in
# VHT SU PPDUs (4 µs), every HE-LTF 8 µs where GI 3.2 µs (ns-3's default) takes the 4x one (16 µs)
NS3_SHORTER_NS = {"ac": 4_000, "ax": 8_000}


@pytest.fixture(scope="module", params=["ac", "ax"])
def run(request, tmp_path_factory):
    ok, why = ns3_available()
    if not ok:
        pytest.skip(why)
    std = request.param
    out = tmp_path_factory.mktemp(f"sim-{std}") / "bundle"
    p = subprocess.run([sys.executable, "-m", "xlayer", "sim", "baseline", "--standard", std, "--seconds", "2",
                        "-o", str(out)], cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    return std, out


def test_truth_and_bundle_name_the_standard(run):
    std, b = run
    truth = json.loads((b / "truth.json").read_text())
    assert truth["topology"]["standard"] == f"802.11{std}" and truth["topology"]["channel"] == 42
    assert truth["parameters"]["standard"] == std
    # MAC retries in A-MPDUs are per MPDU (Block Ack): counted, and every packet's fate known
    s = truth["summary"]
    assert s["delivered"] > 10_000 and s["mpdu_retries"] > 0
    att = pl.read_parquet(b / "truth_attempts.parquet")
    assert att.filter(pl.col("ampdu")).height > 0.9 * att.height
    assert att.filter(pl.col("retry")).height > 0


def test_sniffer_has_ampdus_and_block_acks(run):
    std, b = run
    air = parsers.read_capture(b / "sniffer.pcap")
    data = air.filter((pl.col("wlan_type") == 2) & pl.col("ip_len").is_not_null())
    assert data.height > 10_000
    assert (data["phy"] == PHY[std]).all() and data["bw_mhz"].is_in([20, 40, 80]).all()
    # Minstrel-HT (ac) also samples 20 and 40 MHz; most frames go at 80
    assert (data["bw_mhz"] == 80).mean() > 0.5
    per = data.filter(pl.col("ampdu_ref").is_not_null()).group_by("ampdu_ref").len()["len"]
    assert per.len() > 100 and per.median() >= 8          # several MPDUs per A-MPDU
    block_acks = air.filter((pl.col("wlan_type") == 1) & (pl.col("wlan_subtype") == 9))
    assert block_acks.height > 0.5 * per.len()
    # the Block Ack has an airtime of its own (a non-HT control frame)
    assert airtime(block_acks)["ppdu_ns"].null_count() == 0


def test_reader_agrees_with_tshark(run):
    std, b = run
    tshark = tshark_or_skip()
    fields = {"ac": ["radiotap.vht.mcs.0", "radiotap.vht.bw", "radiotap.vht.nss.0"],
              "ax": ["radiotap.he.data_3.data_mcs", "radiotap.he.data_5.data_bw_ru_allocation",
                     "radiotap.he.data_6.nsts"]}[std]
    cmd = [tshark, "-r", str(b / "sniffer.pcap"), "-c", "20000", "-T", "fields", "-e", "frame.number"]
    for f in fields:
        cmd += ["-e", f]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True)
    theirs = {}
    for line in p.stdout.splitlines():
        parts = line.split("\t")
        if len(parts) == 4 and all(parts[1:]):
            theirs[int(parts[0])] = tuple(int(x, 0) for x in parts[1:])
    assert len(theirs) > 5_000
    # radiotap bandwidth codes for 80 MHz: VHT 4, HE data5 2
    width = {"ac": {4: 80, 1: 40, 0: 20}, "ax": {2: 80, 1: 40, 0: 20}}[std]
    ours = parsers.read_capture(b / "sniffer.pcap").filter(pl.col("frame").is_in(list(theirs)))
    assert ours.height == len(theirs)
    for fr, mcs, nss, bw in ours.select("frame", "mcs", "nss", "bw_mhz").iter_rows():
        t = theirs[fr]
        assert (mcs, nss, bw) == (t[0], t[2], width.get(t[1])), fr


def test_ampdu_airtime_against_ns3(run):
    """Every whole A-MPDU's airtime (one preamble, all subframes) equals ns-3's traced duration plus exactly
    the preamble parts ns-3 leaves out: the data symbols agree to the nanosecond."""
    std, b = run
    air = parsers.read_capture(b / "sniffer.pcap")
    ours = air.select("frame").with_columns(airtime(air).get_column("ppdu_ns"))
    att = pl.read_parquet(b / "truth_attempts.parquet").filter(pl.col("sniffed"))
    whole = att.group_by("t_tx_ns").agg((pl.len() == pl.col("n_mpdu").first()).alias("whole"))
    j = att.join(whole, on="t_tx_ns").filter(pl.col("whole")).join(ours, left_on="sniffer_frame", right_on="frame")
    assert j.filter(pl.col("n_mpdu") >= 16).height > 10_000
    diff = (j["ppdu_ns"] - j["dur_ns"]).value_counts().sort("count", descending=True)
    assert diff.height == 1 and diff[0, 0] == NS3_SHORTER_NS[std], diff


def test_analyze_exits_0(run):
    _, b = run
    p = subprocess.run([sys.executable, "-m", "xlayer", "analyze", str(b), "--json"], cwd=REPO,
                       capture_output=True, text=True, timeout=600, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout)["flows"]


def test_distances_keep_the_snr():
    # g -> ac at exponent 3: 46.6777 - 40.05 = 6.6277 dB (reference loss at 1 m, 5 vs 2.4 GHz) + 6.0206 dB
    # (20 -> 80 MHz noise) = 12.6483 dB, taken out of 30 log10(d)
    assert distance_scale("g", "ac", 3.0) == pytest.approx(10 ** (-12.6483 / 30), rel=1e-4)
    assert distance_scale("n", "ax", 4.0) == pytest.approx(10 ** (-6.0206 / 40), rel=1e-4)
    sc = get_scenario("performance_anomaly", standard="ac")
    slow = sc.station("sta_slow")
    assert sc.standard == "ac" and sc.rate_manager == "minstrel_ht"
    assert 50 < slow.y < 55            # 140 m at 2.4 GHz / 20 MHz -> 53 m at 5 GHz / 80 MHz
    assert get_scenario("baseline", standard="ax").rate_manager == "ideal"
    assert get_scenario("delay_spike", standard="ac").data_mode == "VhtMcs3"    # 24 Mbit/s: 16-QAM 1/2
    # the default is the scenario's own standard, untouched
    assert get_scenario("random", seed=903).physical() == get_scenario("random", seed=903, standard=None).physical()


def test_fragmentation_refused_on_ac():
    with pytest.raises(UnsupportedStandard, match="fragments MSDUs"):
        get_scenario("fragmentation", standard="ac")


@pytest.mark.parametrize("std", ["ac", "ax"])
def test_a_hidden_node_moves_to_the_bss_channel_offering_the_same_air(std):
    from xlayer.testbeds.sim.random_scenario import build, ofdm_airtime_s
    from xlayer.testbeds.sim.scenarios import MINSTREL_ASSUMED, Interferer, _interferer_for, frame_airtime_s

    # a broadcast interferer at 36 Mbit/s (64-QAM 3/4: MCS 4) and a Minstrel one, counted at 24 Mbit/s
    bc = Interferer("h", "sta0", 1.0, 2.0, data_mode="ErpOfdmRate36Mbps", packets_per_s=1500.0, size=1000)
    mi = Interferer("h", "sta0", 1.0, 2.0, rate_manager="minstrel", data_mode=None, packets_per_s=2000.0, size=600)
    nb, nm = _interferer_for(bc, "g", std), _interferer_for(mi, "g", std)
    assert nb.data_mode == ("VhtMcs4" if std == "ac" else "HeMcs4") and nm.data_mode is None
    assert frame_airtime_s(1000, "ErpOfdmRate36Mbps", "g") == pytest.approx(ofdm_airtime_s(1000, 36))
    # the share of the air each offers is kept: frames a second x a frame's air time
    for old, new, mode in ((bc, nb, bc.data_mode), (mi, nm, MINSTREL_ASSUMED)):
        duty = old.packets_per_s * frame_airtime_s(old.size, mode, "g")
        new_mode = new.data_mode or ("VhtMcs3" if std == "ac" else "HeMcs3")
        assert new.packets_per_s * frame_airtime_s(new.size, new_mode, std) == pytest.approx(duty, rel=1e-3)
        assert new.packets_per_s > 2 * old.packets_per_s      # an 80 MHz frame is far shorter
    # n keeps its 802.11a interferer as drawn; a drawn hidden node moves with its scenario
    assert _interferer_for(bc, "g", "n") == bc
    (it,) = build(None, 933, std).interferers
    (it_g,) = build(None, 933).interferers
    assert it.near == it_g.near and it.packets_per_s > it_g.packets_per_s
