"""Issue 14 item 4: per-BSS station tables on crafted captures holding two BSSs."""
from __future__ import annotations

import polars as pl
import pytest

import parsers
from tests.helpers.wifigen import MS, Air
from xlayer.metrics.stations import station_tables

A, B = "02:00:00:00:0a:01", "02:00:00:00:0b:01"
STA, STAY_A, STAY_B = "02:00:00:00:00:01", "02:00:00:00:00:02", "02:00:00:00:00:03"


def _tables(tmp_path, air: Air) -> dict[str, pl.DataFrame]:
    return station_tables(parsers.read_capture(air.write(tmp_path / "air.pcap")), "air.pcap", bin_ns=100_000_000)


def _roaming() -> Air:
    """Two BSSs; STA takes 100 frames from A, reassociates with B, then 50 from B; STAY_A stays with A."""
    air = Air()
    air.beacons(A, "net", 0, 2.0)
    air.beacons(B, "net", 0.05, 2.0)
    air.stream(A, STA, 0.0, 1.0)                 # 100 frames, the last at 0.99 s
    air.reassociate(1.1, STA, A, B)
    air.stream(B, STA, 1.302, 1.8)               # 50 frames
    air.stream(A, STAY_A, 0.005, 1.9)
    air.probe_response(0.503, B, STA, "net")      # B answers STA's scan while STA is with A
    return air


def test_a_station_in_two_bsss_has_a_row_in_each(tmp_path):
    t = _tables(tmp_path, _roaming())
    st = t["stations"].filter(pl.col("station") == STA).sort("first_ts_ns")
    assert st["bssid"].to_list() == [A, B]
    a, b = st.rows(named=True)
    # data and their ACKs per BSS; the probe response from B while with A counts in A's row,
    # the authentication/reassociation exchange (2 frames each way) in B's
    assert (a["data_frames"], a["frames_down"], a["frames_up"]) == (100, 101, 100)
    assert (b["data_frames"], b["frames_down"], b["frames_up"]) == (50, 52, 52)
    assert a["last_ts_ns"] < b["first_ts_ns"]
    assert b["first_ts_ns"] - a["first_ts_ns"] == 1_100_000_000     # B's row starts at the auth request
    # the station's rows sum to the station's counts; shares add up over every row
    assert t["stations"]["data_airtime_share"].sum() == pytest.approx(1.0)
    stay = t["stations"].filter(pl.col("station") == STAY_A)
    assert stay.height == 1 and stay["bssid"][0] == A and stay["data_frames"][0] == 190


def test_station_series_names_the_bss_of_each_bin(tmp_path):
    ss = _tables(tmp_path, _roaming())["station_series"].filter(pl.col("station") == STA).sort("bin_start_ns")
    # one row per bin (the per-bin panels are unchanged), the BSS of the bin's data
    assert ss.select("bin_start_ns").is_duplicated().sum() == 0
    t0 = ss["bin_start_ns"][0]
    by_bin = {round((b - t0) / 1e8): bss for b, bss in zip(ss["bin_start_ns"], ss["bssid"])}
    assert all(by_bin[i] == A for i in range(10))
    assert by_bin[11] == B                      # only the reassociation in that bin: the frames' BSS
    assert all(by_bin[i] == B for i in range(13, 18))


def test_bssid_change_gives_the_gap(tmp_path):
    ev = _tables(tmp_path, _roaming())["mgmt_events"]
    ch = ev.filter(pl.col("event") == "bssid_change").row(0, named=True)
    assert (ch["station"], ch["prev_bssid"], ch["bssid"]) == (STA, A, B)
    assert abs(ch["gap_ns"] - 312 * MS * 1e9) < 2_000         # 0.99 s -> 1.302 s (pcap microsecond stamps)
    assert ev.filter(pl.col("event") == "reassoc_resp")["status"].to_list() == [0]


def test_two_bsss_with_stations_that_stay(tmp_path):
    air = Air()
    air.beacons(A, "one", 0, 1.0)
    air.beacons(B, "two", 0.05, 1.0)
    air.stream(A, STAY_A, 0.0, 0.9)
    air.stream(B, STAY_B, 0.003, 0.6)
    t = _tables(tmp_path, air)
    rows = t["stations"].select("station", "bssid", "data_frames").rows()
    assert rows == [(STAY_A, A, 90), (STAY_B, B, 60)]
    assert t["mgmt_events"].filter(pl.col("event") == "bssid_change").height == 0
    ss = t["station_series"]
    assert ss.filter(pl.col("station") == STAY_A)["bssid"].unique().to_list() == [A]
    assert ss.filter(pl.col("station") == STAY_B)["bssid"].unique().to_list() == [B]
