"""The shipped ns-3 samples (samples/sim-*): present, small, readable, their truth true to their captures.

`samples/make_samples.py` regenerates them; these tests check what is committed: every sample is a
bundle of at most 5 MB whose truth.json counts exactly the records its captures hold (frames, bytes,
snaplen, records cut by it) and whose scenario showed its effect; the baseline sample's beacons carry
the hostile SSID ``<script>alert(1)</script>`` as the parsers read it.  One sample is regenerated to
check that the script is deterministic (byte-identical captures), skipped without ns-3.
"""
from __future__ import annotations

import importlib.util
import json
import sys

import polars as pl
import pytest

from tests.helpers.common import REPO

SAMPLES_DIR = REPO / "samples"
HAVE_NS3 = importlib.util.find_spec("ns") is not None


def _load_make_samples():
    spec = importlib.util.spec_from_file_location("make_samples", SAMPLES_DIR / "make_samples.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod          # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)
    return mod


MS = _load_make_samples()
NAMES = [s.name for s in MS.SAMPLES]
VANTAGE_OF = {"sniffer.pcap": "sniffer", "ap_wired.pcap": "ap_wired", "server.pcap": "server",
              "client.pcap": "client"}
# The determinism check regenerates the shortest run.
DETERMINISM_SAMPLE = "sim-fragmentation"


def _truth(name: str) -> dict:
    return json.loads((SAMPLES_DIR / name / "truth.json").read_text())


def test_every_phenomenon_has_a_sample():
    scen = {s.name: s.scenario for s in MS.SAMPLES}
    assert scen == {"sim-baseline": "steady", **{f"sim-{n}": n for n in (
        "performance_anomaly", "udp_overflow", "fragmentation", "rts_cts", "delay_spike", "walkaway")}}
    assert [s.ssid for s in MS.SAMPLES if s.ssid] == ["<script>alert(1)</script>"]


@pytest.mark.parametrize("name", NAMES)
def test_sample_is_a_small_bundle_whose_effect_showed(name):
    import xlayer

    d = SAMPLES_DIR / name
    assert (d / "bundle.json").is_file(), f"{d} missing: run python samples/make_samples.py"
    size = MS.bundle_bytes(d)
    assert 100_000 < size <= 5_000_000, f"{name}: {size} bytes"
    assert not any(p.name.startswith(".") for p in d.iterdir()), "work files left in the sample"
    b = xlayer.open_bundle(d)
    files = {c.file for c in b.captures}
    assert files == {"sniffer.pcap", "ap_wired.pcap", "server.pcap", "client.pcap", "server-tcp.jsonl"}
    truth = _truth(name)
    assert truth["scenario"] == next(s.scenario for s in MS.SAMPLES if s.name == name)
    assert truth["expect"]["holds"], truth["expect"]["detail"]
    assert truth["seed"] == next(s.seed for s in MS.SAMPLES if s.name == name)
    # every cause window lies inside the run and after the traffic started
    first = min(f["start_ts"] for f in truth["flows"])
    end = truth["reference"]["epoch_base_s"] + truth["seconds"]
    for c in truth["causes"]:
        assert first - 1e-6 <= c["start_ts"] < c["end_ts"] <= end + 1e-6, c
    if name == "sim-baseline":
        assert truth["causes"] == []
    else:
        assert any(c["role"] == "primary" for c in truth["causes"])


@pytest.mark.parametrize("name", NAMES)
def test_truth_counts_what_the_captures_hold(name):
    import parsers
    from xlayer.testbeds.sim.pcapfile import count_pcap

    d = SAMPLES_DIR / name
    truth = _truth(name)
    manifest = json.loads((d / "bundle.json").read_text())
    by_file = {c["file"]: c for c in manifest["captures"]}
    assert set(truth["captures"]) == set(VANTAGE_OF.values())
    for f, vantage in VANTAGE_OF.items():
        t = truth["captures"][vantage]
        s = count_pcap(d / f)
        assert (t["file"], t["frames"], t["bytes"], t["snaplen"], t["records_cut_by_snaplen"]) == \
            (f, s.frames, s.size, s.snaplen, s.truncated_records)
        assert by_file[f]["packets"] == s.frames and by_file[f]["bytes"] == s.size
        assert by_file[f]["snaplen"] == s.snaplen == truth["parameters"]["snaplen_air" if vantage == "sniffer"
                                                                       else "snaplen_wired"]
        assert s.truncated_records > 0          # payloads are cut: headers only
        df = parsers.read_capture(d / f, columns=["wlan_type"] if vantage == "sniffer" else ["ip_src"])
        assert df.height == s.frames
        if not (name == "sim-fragmentation" and vantage == "sniffer"):   # first fragments: see test_sim
            assert df.get_column("malformed").drop_nulls().len() == 0, f
    pk = pl.read_parquet(d / "truth_packets.parquet")
    at = pl.read_parquet(d / "truth_attempts.parquet")
    assert pk.height == truth["packets"]["rows"] == truth["summary"]["downlink_packets"]
    assert at.height == truth["packets"]["attempt_rows"] == truth["summary"]["mpdu_attempts"]
    assert sum(truth["packets"]["fates"].values()) == pk.height
    for fate, n in truth["packets"]["fates"].items():
        assert pk.filter(pl.col("fate") == fate).height == n
    # frame numbers the truth cites exist in the captures
    assert pk.get_column("ap_wired_frame").max() <= truth["captures"]["ap_wired"]["frames"]
    assert pk.get_column("server_frame").drop_nulls().max() <= truth["captures"]["server"]["frames"]
    assert at.get_column("sniffer_frame").drop_nulls().max() <= truth["captures"]["sniffer"]["frames"]
    lines = (d / "server-tcp.jsonl").read_text().splitlines()
    assert len(lines) == truth["run"]["tcp_samples"] > 0


def test_baseline_sample_beacons_carry_the_hostile_ssid():
    import parsers

    hostile = "<script>alert(1)</script>"
    d = SAMPLES_DIR / "sim-baseline"
    truth = _truth("sim-baseline")
    assert truth["topology"]["ssid"] == truth["parameters"]["ssid"] == hostile
    df = parsers.read_capture(d / "sniffer.pcap", columns=["wlan_type", "wlan_subtype", "wlan_ssid", "wlan_ta"])
    beacons = df.filter((pl.col("wlan_type") == 0) & (pl.col("wlan_subtype") == 8))
    assert beacons.height >= truth["seconds"] / 0.1024 - 2          # one every 102.4 ms
    assert beacons.get_column("wlan_ssid").unique().to_list() == [hostile]
    assert beacons.get_column("wlan_ta").unique().to_list() == [truth["topology"]["ap"]["bssid"]]
    # the other samples carry a plain SSID
    other = parsers.read_capture(SAMPLES_DIR / "sim-rts_cts" / "sniffer.pcap",
                                 columns=["wlan_type", "wlan_subtype", "wlan_ssid"])
    assert other.filter(pl.col("wlan_subtype") == 8)["wlan_ssid"].unique().to_list() == ["xlayer-sim"]


@pytest.mark.skipif(not HAVE_NS3, reason="ns-3 Python bindings not installed (pip install ns3)")
def test_make_samples_regenerates_a_sample_byte_for_byte(tmp_path):
    from xlayer.testbeds.sim import SimError

    try:
        code = MS.main(["--only", DETERMINISM_SAMPLE, "--out", str(tmp_path)])
    except SimError as exc:
        if exc.ns3_missing:
            pytest.skip(f"ns-3 cannot be imported: {exc}")
        raise
    assert code == 0
    new, old = tmp_path / DETERMINISM_SAMPLE, SAMPLES_DIR / DETERMINISM_SAMPLE
    for f in (*VANTAGE_OF, "server-tcp.jsonl"):
        assert (new / f).read_bytes() == (old / f).read_bytes(), f
    a, b = _truth(DETERMINISM_SAMPLE), json.loads((new / "truth.json").read_text())
    for k in ("summary", "captures", "causes", "clocks", "events"):
        assert a[k] == b[k], k
