"""Per-station metrics and airtime against hand-computed PPDU durations, ns-3's truth and tshark."""
from __future__ import annotations

import json
import math
import subprocess

import numpy as np
import polars as pl
import pytest

import parsers
from tests.helpers.common import corpus_or_skip, sim_bundle, tshark_or_skip
from xlayer.metrics.stations import MGMT, STATIONS, TABLES, station_tables
from xlayer.timeline.airtime import airtime, ppdu_duration_ns


def _truth(bundle) -> dict:
    return json.loads((bundle / "truth.json").read_text())


def _by_mac(stations: pl.DataFrame, truth: dict) -> dict[str, dict]:
    """Return {truth station name: our stations row} joined on the MAC address."""
    rows = {r["station"]: r for r in stations.iter_rows(named=True)}
    return {name: rows[s["mac"]] for name, s in truth["mac"]["stations"].items()}


@pytest.fixture(scope="module")
def timelines():
    from xlayer.metrics import open_timeline

    cache: dict = {}

    def get(scenario: str):
        if scenario not in cache:
            b = sim_bundle(scenario, 1)
            cache[scenario] = (b, open_timeline(b), _truth(b))
        return cache[scenario]
    return get


# --- airtime -------------------------------------------------------------------------------------

def _one(nbytes, rate, phy="legacy", nss=1, short=False, sgi=False, g24=False) -> float:
    return float(ppdu_duration_ns(np.array([nbytes], float), np.array([rate], float), np.array([phy]),
                                  np.array([nss]), np.array([short]), np.array([sgi]), np.array([np.nan]),
                                  np.array([g24]))[0]) / 1000.0


def test_airtime_formulas_by_hand():
    # IEEE 802.11-2016 16.3.4 (HR/DSSS TXTIME = PLCP preamble + header + ceil(8 L / rate)):
    # a 14-byte ACK at 1 Mbit/s, long preamble: 192 + 112 = 304 us.
    assert _one(14, 1.0) == 304.0
    # 1500 bytes at 11 Mbit/s, short preamble: 96 + ceil(12000 / 11) = 96 + 1091 us.
    assert _one(1500, 11.0, short=True) == 1187.0
    # 17.4.3 (OFDM TXTIME = 16 + 4 + 4 ceil((16 + 8 L + 6) / N_DBPS)), 54 Mbit/s: N_DBPS = 216:
    # 1500 B -> ceil(12022 / 216) = 56 symbols -> 244 us; 18.5.2 ERP at 2.4 GHz adds 6 us of signal extension.
    assert _one(1500, 54.0) == 244.0
    assert _one(1500, 54.0, g24=True) == 250.0
    # 19.4.3 HT mixed format, 1 stream: 16 + 4 + 8 + 4 + 4 = 36 us preamble; MCS 7 (N_DBPS 260):
    # 1538 B -> ceil(12326 / 260) = 48 symbols: 4 us each with the long GI, 3.6 us with the short one.
    assert _one(1538, 65.0, "ht") == 228.0
    assert math.isclose(_one(1538, 72.2, "ht", sgi=True), 36 + 48 * 3.6)
    # Two streams: two HT-LTFs.
    assert _one(1538, 130.0, "ht", nss=2) == 40.0 + 4 * math.ceil(12326 / 520)


def test_airtime_equals_ns3_durations():
    """Our PPDU duration of every sniffed AP transmission equals ns-3's own (802.11g and 802.11n, A-MPDUs)."""
    for scenario in ("performance_anomaly", "walkaway", "fragmentation", "baseline"):
        b = sim_bundle(scenario, 1)
        air = parsers.read_capture(b / "sniffer.pcap")
        ours = air.select("frame").with_columns(airtime(air).get_column("ppdu_ns"))
        att = pl.read_parquet(b / "truth_attempts.parquet").filter(pl.col("sniffed"))
        # An A-MPDU's duration needs all its subframes: keep PPDUs the sniffer captured whole.
        whole = att.group_by("t_tx_ns").agg((pl.len() == pl.col("n_mpdu").first()).alias("whole"))
        att = att.join(whole, on="t_tx_ns")
        j = att.join(ours, left_on="sniffer_frame", right_on="frame")
        assert j.height == att.height > 1000
        assert att.filter(~pl.col("whole")).height <= 0.01 * att.height
        err = (j.filter(pl.col("whole"))["ppdu_ns"] - j.filter(pl.col("whole"))["dur_ns"]).abs()
        assert err.max() <= 1000, (scenario, err.max())
        if scenario == "baseline":
            assert j.filter(pl.col("ampdu")).height > 1000    # the HT A-MPDU path was exercised


# --- sims against truth ---------------------------------------------------------------------------

def test_performance_anomaly(timelines):
    b, tl, truth = timelines("performance_anomaly")
    st = tl.table("stations")
    assert st.columns == [c.name for c in STATIONS]
    ours = _by_mac(st, truth)
    for name, t in truth["mac"]["stations"].items():
        o = ours[name]
        assert o["bssid"] == truth["topology"]["ap"]["bssid"]
        # The sniffer stands by the AP: it hears every AP transmission.
        assert abs(o["retry_fraction_down"] - t["downlink_retries"] / t["downlink_attempts"]) < 0.02, name
        assert abs(o["rate_mean_down_mbps"] / t["downlink_mean_rate_mbps"] - 1) < 0.05, name
        assert abs(o["data_airtime_share"] - t["airtime_share"]) < 0.03, name
        assert abs(o["data_airtime_ns"] / (t["airtime_s"] * 1e9) - 1) < 0.03, name
        assert o["failed_mpdus"] == 0
        assert o["fragments_per_msdu_down"] == 1.0 and o["rts"] == 0
    good, slow = ours["sta_good"], ours["sta_slow"]
    assert abs(good["retry_fraction"] - truth["mac"]["stations"]["sta_good"]["retry_fraction"]) < 0.02
    # The far station's failed uplink transmissions are as undecodable at the sniffer as at the AP:
    # the both-way retry fraction is a lower bound there, and the missing transmissions are flagged.
    t_slow = truth["mac"]["stations"]["sta_slow"]
    assert slow["retry_fraction"] <= t_slow["retry_fraction"] + 0.005
    unseen = t_slow["downlink_attempts"] + t_slow["uplink_attempts"] - slow["data_frames"]
    # unseen_tx_min is a lower bound (retries whose earlier attempts the sniffer never heard): it must
    # flag some of them and never more than truth's count
    assert 0 < slow["unseen_tx_min"] <= unseen
    assert slow["signal_dbm_median"] < good["signal_dbm_median"] - 20
    t_good = truth["mac"]["stations"]["sta_good"]
    assert (slow["data_airtime_share"] > good["data_airtime_share"]) == (t_slow["airtime_share"] > t_good["airtime_share"])
    # The series adds up to the totals.
    ser = tl.table("station_series")
    tot = ser.group_by("station").agg(pl.col("airtime_ns").sum(), pl.col("frames").sum())
    chk = st.join(tot, on="station", suffix="_s")
    assert (chk["airtime_ns"] == chk["airtime_ns_s"]).all()
    assert (chk["frames_down"] + chk["frames_up"] == chk["frames"]).all()
    assert (ser["bin_start_ns"] % tl.bin_ns == 0).all()
    assert ser["airtime_share"].max() <= 1.0
    mg = tl.table("mgmt_events")
    assert sorted(mg.filter(pl.col("event") == "assoc_resp")["station"].to_list()) == sorted(
        s["mac"] for s in truth["mac"]["stations"].values())
    assert (mg.filter(pl.col("event") == "assoc_resp")["status"] == 0).all()


def test_fragmentation_and_rts_cts():
    b = sim_bundle("fragmentation", 1)
    st = station_tables(parsers.read_capture(b / "sniffer.pcap"), "sniffer.pcap")["stations"].row(0, named=True)
    pk = pl.read_parquet(b / "truth_packets.parquet").filter(pl.col("n_sniffed") > 0)
    want = pk["n_fragments"].mean()
    assert want > 5
    assert abs(st["fragments_per_msdu_down"] / want - 1) < 0.02
    assert st["fragments_per_msdu_up"] == 1.0                 # TCP ACKs fit under the threshold
    truth = _truth(b)["mac"]["stations"]["sta0"]
    assert abs(st["retry_fraction"] - truth["retry_fraction"]) < 0.02
    assert abs(st["rate_mean_down_mbps"] / truth["downlink_mean_rate_mbps"] - 1) < 0.05

    b = sim_bundle("rts_cts", 1)
    st = station_tables(parsers.read_capture(b / "sniffer.pcap"), "sniffer.pcap")["stations"].row(0, named=True)
    mac = _truth(b)["mac"]
    assert 0.97 <= st["rts_ratio"] <= 1.1
    assert abs(st["rts"] / mac["rts_sent"] - 1) < 0.05
    assert abs(st["cts"] / mac["cts_sent"] - 1) < 0.01


def test_walkaway_rate_falls_and_association_is_lost(timelines):
    b, tl, truth = timelines("walkaway")
    sta = truth["mac"]["stations"]["sta0"]
    st = tl.table("stations").row(0, named=True)
    assert st["station"] == sta["mac"]
    assert abs(st["rate_mean_down_mbps"] / sta["downlink_mean_rate_mbps"] - 1) < 0.05
    assert abs(st["retry_fraction_down"] - sta["downlink_retries"] / sta["downlink_attempts"]) < 0.02
    rc = tl.table("rate_changes").filter(pl.col("direction") == "down").sort("ts_ns")
    assert rc.height >= 5
    # Minstrel climbs to 54 Mbit/s near the AP, then steps down as the station walks away.
    assert rc["to_mbps"][0] == 54 and rc["to_mbps"][-1] <= 18
    late = rc.filter(pl.col("ts_ns") > rc["ts_ns"][0])
    assert (late["to_mbps"] < late["from_mbps"]).sum() >= (late["to_mbps"] > late["from_mbps"]).sum()
    # Per second of truth, the median of our 100 ms means follows ns-3's median downlink rate.
    ser = tl.table("station_series").with_columns((pl.col("bin_start_ns") // 10**9 * 10**9).alias("sec"))
    per_s = dict(ser.group_by("sec").agg(pl.col("phy_rate_mbps").median()).iter_rows())
    checked = 0
    for binv in sta["rate_timeline"]:
        if binv["attempts"] >= 200:
            ours = per_s[round(binv["start_ts"] * 1e9)]
            assert abs(ours / binv["median_rate_mbps"] - 1) < 0.2, binv
            checked += 1
    assert checked >= 6
    # ns-3 drops the association silently (no deauthentication): the AP's MPDUs fail after the retry limit.
    lost_ns = round([e for e in truth["events"] if e["kind"] == "association_lost"][0]["ts"] * 1e9)
    gave_up = pl.read_parquet(b / "truth_packets.parquet")["ap_gave_up"].sum()
    assert 0.5 * gave_up <= st["failed_mpdus_down"] <= 1.5 * gave_up
    assert not tl.table("mgmt_events").filter(pl.col("event").is_in(["deauth", "disassoc"])).height
    up = tl.packets("sniffer").filter((pl.col("wlan_type") == 2) & (pl.col("wlan_ta") == sta["mac"]))
    assert up["ts_ns"].max() < lost_ns


def test_udp_overflow_failed_mpdus(timelines):
    b, tl, truth = timelines("udp_overflow")
    ours = _by_mac(tl.table("stations"), truth)
    gave_up = pl.read_parquet(b / "truth_packets.parquet").group_by("station").agg(pl.col("ap_gave_up").sum())
    gave_up = dict(gave_up.iter_rows())
    for name, t in truth["mac"]["stations"].items():
        o = ours[name]
        assert abs(o["retry_fraction_down"] - t["downlink_retries"] / t["downlink_attempts"]) < 0.02
        assert abs(o["rate_mean_down_mbps"] / t["downlink_mean_rate_mbps"] - 1) < 0.05
        assert abs(o["data_airtime_share"] - t["airtime_share"]) < 0.03
        # a failure is called only after FAIL_MIN_ATTEMPTS transmissions were heard: a lower-bound estimate
        assert o["failed_mpdus_down"] <= gave_up.get(name, 0) + 2, (name, o["failed_mpdus_down"], gave_up)
        assert o["failed_mpdus_down"] >= 0.3 * gave_up.get(name, 0) - 1, (name, o["failed_mpdus_down"], gave_up)


# --- synthetic and corpus ---------------------------------------------------------------------------

def _frames(rows: list[tuple]) -> pl.DataFrame:
    cols = ("frame", "ts_ns", "wlan_type", "wlan_subtype", "wlan_ta", "wlan_ra", "wlan_bssid", "wlan_from_ds",
            "wlan_to_ds", "wlan_seq", "wlan_retry", "phy_rate_mbps")
    df = pl.DataFrame(rows, schema=cols, orient="row")
    return df.with_columns(pl.lit(100, pl.UInt32).alias("wirelen"), pl.lit(0, pl.UInt8).alias("wlan_frag"),
                           pl.col("wlan_type").cast(pl.UInt8), pl.col("wlan_subtype").cast(pl.UInt8),
                           pl.col("wlan_seq").cast(pl.UInt16), pl.lit(105, pl.UInt16).alias("linktype"))


def test_bssid_change_and_empty():
    sta, ap1, ap2 = "02:00:00:00:00:01", "02:00:00:00:00:a1", "02:00:00:00:00:a2"
    rows = [(i + 1, 1_000_000 * i, 2, 0, ap1, sta, ap1, True, False, i, False, 24.0) for i in range(5)]
    rows += [(6 + i, 10_000_000 + 1_000_000 * i, 2, 0, sta, ap2, ap2, False, True, i, False, 54.0) for i in range(5)]
    t = station_tables(_frames(rows), "x.pcap")
    ev = t["mgmt_events"]
    assert ev.rows() == [("x.pcap", 6, 10_000_000, sta, ap2, "up", "bssid_change", None, None, ap1, 5, 6_000_000)]
    # one row per BSS (issue 14 item 4)
    st1, st2 = t["stations"].rows(named=True)
    assert [(r["station"], r["bssid"], r["frames_down"], r["frames_up"], r["data_mpdus"]) for r in (st1, st2)] == [
        (sta, ap1, 5, 0, 5), (sta, ap2, 0, 5, 5)]
    # ACK-less unicast data never retried: not failed; rates per direction.
    assert st1["failed_mpdus"] == st2["failed_mpdus"] == 0
    assert st1["rate_mean_down_mbps"] == 24.0 and st2["rate_mean_up_mbps"] == 54.0
    empty = station_tables(parsers.schema.empty_frame(), "e.pcap")
    assert set(empty) == set(TABLES) and all(df.height == 0 for df in empty.values())
    assert empty["mgmt_events"].columns == [c.name for c in MGMT]


@pytest.mark.parametrize("rel", ["radiotap/pyrit__wpapsk-virgin_broadband.dump",
                                 "radiotap/aircrack-ng__wpa2-psk-linksys.cap",
                                 "radiotap/wireshark__wpa-Induction.pcap"])
def test_mgmt_events_match_tshark(rel):
    """Every (de)association/authentication frame, with its reason and status codes, as tshark reads them."""
    path = corpus_or_skip() / rel
    tshark = tshark_or_skip()
    if not path.is_file():
        pytest.skip(f"{rel} not in the corpus")
    ev = station_tables(parsers.read_capture(path), rel)["mgmt_events"].filter(pl.col("event") != "bssid_change")
    out = subprocess.run(
        [tshark, "-r", str(path), "-Y",
         "wlan.fc.type == 0 && (wlan.fc.subtype <= 3 || (wlan.fc.subtype >= 10 && wlan.fc.subtype <= 12))",
         "-T", "fields", "-e", "frame.number", "-e", "wlan.fc.subtype", "-e", "wlan.fixed.reason_code",
         "-e", "wlan.fixed.status_code", "-e", "wlan.bssid"], capture_output=True, text=True, check=True).stdout
    names = {0: "assoc_req", 1: "assoc_resp", 2: "reassoc_req", 3: "reassoc_resp", 10: "disassoc", 11: "auth",
             12: "deauth"}
    want = []
    for line in out.splitlines():
        frame, sub, reason, status, bssid = line.split("\t")
        want.append((int(frame), names[int(sub)], int(reason, 16) if reason else None,
                     int(status, 16) if status else None, bssid))
    got = ev.select("frame", "event", "reason", "status", "bssid").rows()
    assert len(want) >= 5
    assert got == want
    if "pyrit" in rel:
        assert sum(1 for w in want if w[1] == "deauth") > 500


# --- issue 11: CTS-to-self (item 2), fractions without a denominator (item 6) ---------------------------

def test_cts_to_self_is_not_a_cts_answering_an_rts():
    """A CTS answers an RTS only as the next record after an RTS from the station it is addressed to,
    within CTS_WINDOW_NS; any other CTS is a CTS-to-self, counted apart for the station it names."""
    sta, ap = "02:00:00:00:00:01", "02:00:00:00:00:a1"
    rows, t = [], 0
    for i in range(4):                     # uplink data protected by an RTS/CTS exchange
        rows += [(11, sta, ap, None, t), (12, None, sta, None, t + 300_000), (0, sta, ap, True, t + 600_000),
                 (13, None, sta, None, t + 900_000)]
        t += 10_000_000
    for i in range(3):                     # a retry after a CTS-to-self right behind the station's own frame
        rows += [(0, sta, ap, True, t), (12, None, sta, None, t + 400_000), (0, sta, ap, True, t + 700_000),
                 (13, None, sta, None, t + 900_000)]
        t += 10_000_000
    rows += [(11, sta, ap, None, t), (12, None, sta, None, t + 2_000_000)]   # too late to answer it
    rows += [(12, None, ap, None, t + 5_000_000), (0, ap, sta, False, t + 5_300_000)]  # the AP's CTS-to-self
    frames = [(k + 1, ts, 1 if sub else 2, sub, ta, ra, ap, ds is False, ds is True, k, False, 24.0)
              for k, (sub, ta, ra, ds, ts) in enumerate(rows)]
    st = station_tables(_frames(frames), "x.pcap")["stations"].row(0, named=True)
    assert (st["station"], st["rts"], st["cts"], st["cts_to_self"]) == (sta, 5, 4, 4)
    # the CTS-to-self frames concern no AP-station exchange: only the 4 CTS answers are AP -> station
    # frames besides the ACKs (7) and the AP's data frame (1)
    assert st["frames_down"] == 4 + 7 + 1


def test_cts_to_self_on_a_capture():
    """wpa-Induction.pcap ("13 CTS, 0 RTS" before the fix): every CTS is a CTS-to-self, as tshark shows."""
    path = corpus_or_skip() / "radiotap/wireshark__wpa-Induction.pcap"
    tshark = tshark_or_skip()
    st = station_tables(parsers.read_capture(path), "wpa-Induction.pcap")["stations"].row(0, named=True)
    out = subprocess.run([tshark, "-r", str(path), "-o", "wlan.check_checksum:TRUE", "-T", "fields",
                          "-e", "wlan.fc.type_subtype", "-e", "wlan.ta", "-e", "wlan.ra", "-e", "wlan.fcs.status"],
                         capture_output=True, text=True, check=True).stdout
    prev, own = None, 0
    for line in out.splitlines():
        sub, ta, ra, fcs = line.split("\t")
        if sub == "0x001c" and ra == st["station"] and fcs == "1":
            assert not (prev and prev[0] == "0x001b" and prev[1] == ra)     # no RTS before any of them
            own += 1
        if sub:
            prev = (sub, ta)
    assert own == 109
    assert (st["rts"], st["cts"], st["cts_to_self"], st["rts_ratio"]) == (0, 0, own, 0.0)


@pytest.mark.parametrize("rel", ["radiotap/aircrack-ng__n-02.cap", "radiotap/pyrit__wpa2psk-2WIRE972.dump",
                                 "radiotap/wireshark__wpa-Induction.pcap", "radiotap/libtrace__10_packets_radiotap.pcap"])
def test_fractions_without_denominator_are_null_not_nan(rel):
    """retry_fraction, rts_ratio (and every other fraction) of a station without data frames is null."""
    path = corpus_or_skip() / rel
    tabs = station_tables(parsers.read_capture(path), rel)
    for name in ("stations", "station_series"):
        df = tabs[name]
        nan = [c for c, t in df.schema.items() if t.is_float() and df[c].is_nan().any()]
        assert not nan, (name, nan)
    st = tabs["stations"]
    none = st.filter(pl.col("data_frames") == 0)
    assert none["retry_fraction"].null_count() == none["rts_ratio"].null_count() == none.height
    if "n-02" in rel:
        assert none.height == 4             # were NaN before issue 11
    some = st.filter(pl.col("data_frames") > 0)
    assert some["retry_fraction"].null_count() == 0 and some["rts_ratio"].null_count() == 0
    ser = tabs["station_series"]
    assert (ser.filter(pl.col("data_frames") == 0)["retry_fraction"].null_count()
            == ser.filter(pl.col("data_frames") == 0).height)


def test_fractions_without_denominator_synthetic():
    """A station seen only in management and control frames: data_frames 0, fractions null."""
    sta, ap = "02:00:00:00:00:01", "02:00:00:00:00:a1"
    rows = [(1, 0, 0, 8, ap, "ff:ff:ff:ff:ff:ff", ap, False, False, 0, False, 1.0),
            (2, 1_000_000, 0, 11, sta, ap, ap, False, False, 1, False, 1.0),
            (3, 1_200_000, 1, 13, None, sta, None, None, None, None, False, 1.0),
            (4, 2_000_000, 0, 11, ap, sta, ap, False, False, 2, False, 1.0)]
    t = station_tables(_frames(rows), "x.pcap")
    st = t["stations"].row(0, named=True)
    assert st["station"] == sta and st["data_frames"] == 0
    assert st["retry_fraction"] is None and st["rts_ratio"] is None
    assert st["retry_fraction_down"] is None and st["retry_fraction_up"] is None
    assert st["fcs_bad_rate"] == 0.0
    assert t["station_series"]["retry_fraction"].to_list() == [None]


def test_stations_read_every_column_the_airtime_formula_reads():
    # Without its MCS and bandwidth a VHT/HE PPDU's N_DBPS comes from the rounded rate: HE MCS 11 80 MHz
    # GI 0.8 is 8166.67 bits a symbol, radiotap's 600.5 Mbit/s x 13.6 us gives 8167, and an A-MPDU of
    # 102084 bytes takes 101 symbols by the table, 100 by the rate: the stations' airtime would not be
    # the join's.
    from xlayer.metrics.stations import NEEDS
    from xlayer.timeline.airtime import COLUMNS
    assert set(COLUMNS) <= set(NEEDS)
    mpdus = [1538] * 66 + [176]                 # subframes 66 x 1544 + 180 = 102084 bytes
    n = len(mpdus)
    df = pl.DataFrame({
        "wirelen": [40 + m for m in mpdus], "linktype": [127] * n, "rt_len": [40] * n, "rt_flags": [0x10] * n,
        "phy_rate_mbps": [600.5] * n, "phy": ["he"] * n, "mcs": [11] * n, "nss": [1] * n, "bw_mhz": [80] * n,
        "he_gi_us": [0.8] * n, "freq_mhz": [5210] * n, "ampdu_ref": [3] * n,
        "ampdu_flags": [0x04] * (n - 1) + [0x0C], "wlan_type": [2] * n, "wlan_subtype": [8] * n,
        "wlan_seq": list(range(n)), "wlan_to_ds": [False] * n, "wlan_from_ds": [True] * n,
        "wlan_order": [False] * n, "wlan_amsdu": [False] * n, "sgi": [False] * n, "ip_len": [m - 38 for m in mpdus],
        "fcs_bad": [False] * n,
    }, schema_overrides={"ampdu_ref": pl.UInt32, "he_gi_us": pl.Float32, "mcs": pl.UInt8, "nss": pl.UInt8,
                         "bw_mhz": pl.UInt16, "rt_len": pl.UInt16, "rt_flags": pl.UInt8, "ampdu_flags": pl.UInt16,
                         "wlan_type": pl.UInt8, "wlan_subtype": pl.UInt8, "wlan_seq": pl.UInt16})
    a = airtime(df)
    assert a["ppdu_bytes"][0] == 102084
    # HE SU preamble with 1 HE-LTF of 6.4 + 0.8 us: 36 + 7.2 = 43.2 us
    assert a["ppdu_ns"][0] == round((43.2 + 101 * 13.6) * 1000)
    assert airtime(df.drop("mcs", "bw_mhz"))["ppdu_ns"][0] == round((43.2 + 100 * 13.6) * 1000)
