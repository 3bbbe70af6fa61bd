"""The cross-layer join on protected traffic without keys: MPDUs paired with the AP's wired packets by
size, FIFO order and time (xlayer.metrics.join, "protected traffic without keys").  Run with -s to see
the measured numbers."""
from __future__ import annotations

import json
from typing import Any

import polars as pl
import pytest

import xlayer.timeline.match as mm
from parsers.schema import SCHEMA, empty_frame
from tests.helpers.common import sim_bundle
from xlayer.metrics import open_timeline
from xlayer.metrics.join import (
    CIPHER_OVERHEADS,
    _protected_len,
    analyse_air,
    join_timeline,
    learn_protected,
    protected_down,
)

# What a decoder cannot read in a protected frame without its key: everything past the cipher header.
_PAST_THE_CIPHER = list(dict.fromkeys(
    [c for c, _ in mm.IP_KEY] + ["ip_ttl", "ip_dscp", "ip_hdr_len", "ip_df", "ip_ecn", "ip_checksum", "ip_frag_offset",
                                 "tcp_ack", "tcp_hdr_len", "tcp_win", "tcp_len", "tcp_tsecr", "tcp_mss", "tcp_wscale",
                                 "tcp_sack_perm", "tcp_sack", "eth_type", "flow", "conn", "dir", "wlan_decrypted"]))
CCMP = CIPHER_OVERHEADS["ccmp"]


class ProtectedView:
    """A timeline whose air captures show what a decoder has for a protected frame without keys.

    Every data frame carrying a payload gets the Protected bit, a CCMP packet number (a retry repeats
    its MPDU's), a wire length grown by the CCMP header and MIC (16 bytes), and no IP or transport
    columns.  Wired captures are left as they are.  Everything else is the real timeline's.
    """

    def __init__(self, tl: Any) -> None:
        self._tl = tl

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tl, name)

    def packets(self, which: Any = None, columns: list[str] | None = None) -> pl.DataFrame:
        df = self._tl.packets(which, columns)
        if self._tl._entry(which).kind != "air":
            return df
        data = ((pl.col("wlan_type") == 2) & ((pl.col("wlan_subtype").cast(pl.Int32) & 4) == 0)).fill_null(False)
        mpdu = ["wlan_ta", "wlan_ra", "wlan_tid", "wlan_seq", "wlan_frag"]
        # a new PN for each first transmission of the transmitter; a retry takes its MPDU's
        first = data & ~pl.col("wlan_retry").fill_null(False)
        pn = (pl.when(first).then(first.cast(pl.UInt64).cum_sum().over("wlan_ta", order_by="frame"))
              .forward_fill().over(mpdu, order_by="frame"))
        return df.with_columns(
            *[pl.when(data).then(None).otherwise(pl.col(c)).alias(c) for c in _PAST_THE_CIPHER if c in df.columns],
            pl.when(data).then(True).otherwise(pl.col("wlan_protected")).alias("wlan_protected"),
            pl.when(data).then(pn).alias("wlan_pn"),
            pl.when(data).then(pl.col("wirelen") + CCMP).otherwise(pl.col("wirelen")).alias("wirelen"))


_CACHE: dict[str, tuple[dict[str, pl.DataFrame], dict[str, pl.DataFrame]]] = {}


def _both(scenario: str) -> tuple[pl.DataFrame, dict[str, pl.DataFrame], dict[str, pl.DataFrame]]:
    b = sim_bundle(scenario, 1)
    if scenario not in _CACHE:
        tl = open_timeline(b)
        _CACHE[scenario] = (join_timeline(tl), join_timeline(ProtectedView(tl)))
    return pl.read_parquet(b / "truth_packets.parquet"), *_CACHE[scenario]


def _decidable(j: pl.DataFrame) -> pl.DataFrame:
    """Return the packets not after the last delivery to their station (as in test_join: later ones cannot be
    told from packets still queued when the captures stopped)."""
    last = j.filter(pl.col("fate") == "delivered").group_by("station").agg(pl.col("t_ap_wired_ns").max().alias("_l"))
    return j.join(last, on="station", how="left").filter(pl.col("t_ap_wired_ns") <= pl.col("_l")).drop("_l")


def _prec_rec(j: pl.DataFrame, truth_fate: str, fate: str) -> tuple[float, float, int]:
    t, p = j["fate"] == truth_fate, j["fate_x"] == fate
    hit = int((t & p).sum())
    return hit / max(int(p.sum()), 1), hit / max(int(t.sum()), 1), int(t.sum())


def test_keyless_fates_match_truth_and_the_open_join():
    truth, open_, keyless = _both("udp_overflow")
    down = keyless["downlink"]
    assert down.height == truth.height, "every wired packet to a protected station gets a row"
    j = _decidable(truth.join(down, left_on="ap_wired_frame", right_on="frame", how="left", suffix="_x"))
    counts = dict(down.group_by("match").len().iter_rows())
    print(f"\nkeyless udp_overflow: matches {counts}")
    for tf, f in (("delivered", "delivered"), ("dropped_at_ap_queue", "dropped_at_ap")):
        p, r, n = _prec_rec(j, tf, f)
        print(f"  {f}: truth {n}, precision {p:.4f}, recall {r:.4f}")
        assert n > 100
        assert p >= 0.95 and r >= 0.95
    both = open_["downlink"].select("frame", "fate", "first_air_frame").join(
        down.select("frame", "fate", "first_air_frame", "match"), on="frame", suffix="_k")
    same = (both["fate"] == both["fate_k"]).mean()
    print(f"  fate as with the IP headers: {same:.4f} of {both.height}")
    assert both.height == open_["downlink"].height and same >= 0.95
    # nothing matched by key, and the protected rows say so
    assert "key" not in counts and counts.get("size_order", 0) > 1000 and counts.get("ambiguous", 0) > 0
    paired = both.filter(pl.col("first_air_frame").is_not_null() & pl.col("first_air_frame_k").is_not_null())
    exact = paired.group_by("match").agg((pl.col("first_air_frame") == pl.col("first_air_frame_k")).mean().alias("x"))
    exact = dict(exact.iter_rows())
    print(f"  the same MPDU as the open join: {exact}")
    # a size_order pair is the open join's pair; an ambiguous one says it may not be
    assert exact["size_order"] >= 0.99
    conf = down.group_by("match").agg(pl.col("match_confidence").max().alias("hi"), pl.col("match_confidence").min())
    conf = {m: (hi, lo) for m, hi, lo in conf.iter_rows()}
    assert conf["size_order"] == (1.0, 1.0) and conf["ambiguous"][0] < 1.0
    assert open_["downlink"]["match"].drop_nulls().unique().to_list() == ["key"]


def test_keyless_uplink_and_attempts_as_the_open_join():
    _, open_, keyless = _both("udp_overflow")
    up = open_["uplink"].select("frame", "fate", "first_air_frame").join(
        keyless["uplink"].select("frame", "fate", "first_air_frame", "match"), on="frame", suffix="_k")
    same = ((up["fate"] == up["fate_k"]) & (up["first_air_frame"] == up["first_air_frame_k"])).mean()
    print(f"\nuplink: same fate and MPDU {same:.4f} of {up.height}")
    assert up.height > 500 and same >= 0.95
    # attempts per packet: the keyless join counts the same transmissions for the packets both paired alike
    d = open_["downlink"].join(keyless["downlink"], on="frame", suffix="_k").filter(
        pl.col("first_air_frame") == pl.col("first_air_frame_k"))
    assert d.height > 1000
    assert (d["n_attempts"] == d["n_attempts_k"]).all() and (d["n_retries"] == d["n_retries_k"]).all()
    # the view's frames are 16 bytes longer: the transmission start, their end less their airtime, moves by
    # the airtime of 16 bytes at the frame's rate (rounded up to whole OFDM symbols)
    longer = 16 * 8 * 1000 / d["rates_mbps"].list.first() + 8000
    assert ((d["sojourn_ns"] - d["sojourn_ns_k"]).abs() <= longer).all()


# ---------------------------------------------------------------------------------------------
# crafted captures

AP, STA = "02:00:00:00:00:01", "02:00:00:00:00:02"
T0 = 1_700_000_000_000_000_000
RT = 18          # radiotap header of the crafted records (FCS flag set: the FCS is in the record)
MS = 1_000_000


def _air(frames: list[dict]) -> pl.DataFrame:
    """Return an air capture's packet table: a beacon (the sniffer was listening before the wired packets
    came), then each protected QoS data frame to STA followed by its ACK."""
    rows = [{"frame": 1, "ts_ns": T0 - MS, "wirelen": RT + 60, "rt_len": RT, "rt_flags": 0x10, "linktype": 127,
             "phy": "legacy", "phy_rate_mbps": 6.0, "wlan_type": 0, "wlan_subtype": 8, "wlan_ra": "ff:ff:ff:ff:ff:ff",
             "wlan_ta": AP, "wlan_seq": 100}]
    n = 1
    for f in frames:
        n += 1
        mpdu = 26 + f["oh"] + 8 + f["ip_len"] + 4            # QoS header, cipher, LLC/SNAP, IP, FCS
        rows.append({"frame": n, "ts_ns": T0 + f["t"], "wirelen": RT + mpdu, "rt_len": RT, "rt_flags": 0x10,
                     "linktype": 127, "phy": "legacy", "phy_rate_mbps": 24.0, "wlan_type": 2, "wlan_subtype": 8,
                     "wlan_from_ds": True, "wlan_to_ds": False, "wlan_ra": STA, "wlan_da": STA, "wlan_ta": AP,
                     "wlan_sa": AP, "wlan_seq": f["seq"], "wlan_frag": 0, "wlan_tid": 0, "wlan_order": False,
                     "wlan_retry": f.get("retry", False), "wlan_more_frag": False, "wlan_protected": True,
                     "wlan_pn": f["pn"]})
        if f.get("acked", True):
            n += 1
            rows.append({"frame": n, "ts_ns": T0 + f["t"] + 60_000, "wirelen": RT + 14, "rt_len": RT, "rt_flags": 0x10,
                         "linktype": 127, "phy": "legacy", "phy_rate_mbps": 24.0, "wlan_type": 1, "wlan_subtype": 13,
                         "wlan_ra": AP})
    # in the packet schema, every column a decoder gives (those the frames do not have are null)
    return pl.concat([empty_frame(), pl.DataFrame(rows, infer_schema_length=None)], how="diagonal_relaxed").select(
        [pl.col(c).cast(t) for c, t in SCHEMA.items()]).with_columns(pl.lit(None, pl.Utf8).alias("flow"))  # (the timeline's)


def _wired(packets: list[tuple[int, int]]) -> pl.DataFrame:
    """Return the AP's wired packets to STA's address: (time, IP length)."""
    return pl.DataFrame({"_w": list(range(len(packets))), "ts_ns": [T0 + t for t, _ in packets],
                         "station": [STA] * len(packets), "ip_len": [n for _, n in packets],
                         "ip_dscp": [0] * len(packets)},
                        schema={"_w": pl.UInt32, "ts_ns": pl.Int64, "station": pl.Utf8, "ip_len": pl.UInt32,
                                "ip_dscp": pl.UInt8})


def _analysed(air: pl.DataFrame, overhead: int) -> dict[str, pl.DataFrame]:
    a = analyse_air(air, "air.pcap")
    a["groups"] = a["groups"].with_columns(_protected_len(pl.lit(overhead)).alias("_plen"))
    return a


def test_equal_lengths_beside_a_drop_are_ambiguous():
    # three packets of one length in a burst, two MPDUs; the queue empties; a fourth packet, a third MPDU:
    # one of the burst was dropped, and which one the sizes cannot say
    wired = _wired([(0, 1000), (100_000, 1000), (200_000, 1000), (50 * MS, 1000)])
    air = _air([{"t": 10 * MS, "seq": 0, "pn": 1, "oh": CCMP, "ip_len": 1000},
                {"t": 12 * MS, "seq": 1, "pn": 2, "oh": CCMP, "ip_len": 1000},
                {"t": 52 * MS, "seq": 2, "pn": 3, "oh": CCMP, "ip_len": 1000}])
    a = _analysed(air, CCMP)
    p = protected_down(wired, a).join(a["groups"].select("gid", "mac_seq"), on="gid").sort("mac_seq")
    assert p["mac_seq"].to_list() == [0, 1, 2]
    # the burst's two that were sent: each could be either of two packets
    assert p["match"].to_list() == ["ambiguous", "ambiguous", "size_order"]
    assert p["match_confidence"].to_list() == [0.5, 0.5, 1.0]
    # the late packet is the third MPDU's (not the burst's last, which would have waited 50 ms with the AP idle)
    assert p.filter(pl.col("mac_seq") == 2)["_w"].item() == 3
    assert set(p["_w"].to_list()) & {0, 1, 2} and len(set(p["_w"].to_list())) == 3


def test_retry_repeats_the_pn_and_a_new_pn_is_a_new_mpdu():
    air = _air([{"t": 1 * MS, "seq": 7, "pn": 40, "oh": CCMP, "ip_len": 500, "acked": False},
                {"t": 2 * MS, "seq": 7, "pn": 40, "oh": CCMP, "ip_len": 500, "retry": True},
                # the same sequence number 5 ms later with another PN: not a retry but another MPDU
                {"t": 7 * MS, "seq": 7, "pn": 41, "oh": CCMP, "ip_len": 500}])
    g = analyse_air(air, "air.pcap")["groups"].sort("first_air_frame")
    assert g.height == 2
    assert g["n_attempts"].to_list() == [2, 1] and g["n_retries"].to_list() == [1, 0]
    assert g["pn"].to_list() == [40, 41] and g["acked_by"].to_list() == ["ack", "ack"]


@pytest.mark.parametrize("cipher", ["ccmp", "tkip", "gcmp256"])
def test_cipher_overhead_learnt_from_sizes(cipher):
    oh = CIPHER_OVERHEADS[cipher]
    lengths = [120, 640, 1200, 88, 1500, 333] * 4
    wired = _wired([(i * 20 * MS, n) for i, n in enumerate(lengths)])
    air = _air([{"t": i * 20 * MS + 3 * MS, "seq": i, "pn": i + 1, "oh": oh, "ip_len": n}
                for i, n in enumerate(lengths)])
    a = analyse_air(air, "air.pcap")
    w = wired.with_columns(pl.lit("10.0.0.9").alias("ip_dst"), pl.lit("192.0.2.1").alias("ip_src"))
    learnt, ohs = learn_protected(w, a["groups"], pl.DataFrame(schema={"station": pl.Utf8, "ip": pl.Utf8}))
    assert ohs.rows() == [(STA, oh)]
    assert learnt.rows() == [(STA, "10.0.0.9", "size")]
    a["groups"] = a["groups"].with_columns(_protected_len(pl.lit(oh)).alias("_plen"))
    assert sorted(a["groups"]["_plen"].to_list()) == sorted(lengths)
    p = protected_down(wired, a).join(a["groups"].select("gid", "mac_seq"), on="gid")
    assert p.height == len(lengths) and (p["match"] == "size_order").all()
    assert (p["_w"].cast(pl.Int64) == p["mac_seq"].cast(pl.Int64)).all()


def test_a_station_bridged_on_the_wired_side_is_known_by_its_mac():
    air = _air([{"t": 3 * MS, "seq": 0, "pn": 1, "oh": CCMP, "ip_len": 1400}])
    a = analyse_air(air, "air.pcap")
    w = _wired([(0, 100)]).with_columns(pl.lit("10.0.0.7").alias("ip_dst"), pl.lit("192.0.2.1").alias("ip_src"),
                                        pl.lit(STA).alias("eth_dst"), pl.lit("02:00:00:00:00:99").alias("eth_src"))
    learnt, _ = learn_protected(w, a["groups"], pl.DataFrame(schema={"station": pl.Utf8, "ip": pl.Utf8}))
    assert learnt.rows() == [(STA, "10.0.0.7", "ethernet")]


def test_analysis_notes_count_the_size_and_order_matches():
    from types import SimpleNamespace

    from xlayer.metrics.join import match_notes

    _, open_, keyless = _both("udp_overflow")
    air = sim_bundle("udp_overflow", 1) / "sniffer.pcap"
    # the join's tables, as a timeline with one air capture hands them over
    assert match_notes(SimpleNamespace(table=open_.__getitem__, entries=lambda kind: [air])) == []
    (line,) = match_notes(SimpleNamespace(table=keyless.__getitem__, entries=lambda kind: [air]))
    n = {m: int(keyless["downlink"].filter(pl.col("match") == m).height + keyless["uplink"].filter(
        pl.col("match") == m).height) for m in ("size_order", "ambiguous")}
    assert f"{n['size_order']:,} size_order" in line and f"{n['ambiguous']:,} ambiguous" in line
    assert f"{n['size_order'] + n['ambiguous']:,} packets" in line


# ---------------------------------------------------------------------------------------------
# a real WPA2 capture (xlayer sim --encrypt): without keys, and with them

_PASS = "join-protected-test"        # a test network's passphrase, nobody's secret


def _wpa2_bundle(scenario: str) -> Any:
    """Return the directory of `scenario` (seed 1) simulated with a WPA2 air capture, made once per machine."""
    return sim_bundle(scenario, 1, encrypt=_PASS)


def test_real_wpa2_capture_without_keys_and_with_them():
    from parsers.crypto import parse_key

    b = _wpa2_bundle("udp_overflow")
    truth = pl.read_parquet(b / "truth_packets.parquet")
    nokey = join_timeline(open_timeline(b, cache=False))
    ssid = json.loads((b / "truth.json").read_text())["topology"]["ssid"]
    keyed = join_timeline(open_timeline(b, cache=False, keys=[parse_key(f"wpa-pwd:{_PASS}:{ssid}")]))
    down = nokey["downlink"]
    counts = dict(down.group_by("match").len().iter_rows())
    assert "key" not in counts and counts.get("size_order", 0) > 1000
    j = _decidable(truth.join(down, left_on="ap_wired_frame", right_on="frame", how="left", suffix="_x"))
    print(f"\nWPA2 udp_overflow without keys: matches {counts}")
    for tf, f in (("delivered", "delivered"), ("dropped_at_ap_queue", "dropped_at_ap")):
        p, r, n = _prec_rec(j, tf, f)
        print(f"  {f}: truth {n}, precision {p:.4f}, recall {r:.4f}")
        assert n > 100 and p >= 0.95 and r >= 0.95
    # with the passphrase every packet is matched by key, as in the open bundle of the same seed
    open_ = _both("udp_overflow")[1]
    assert dict(keyed["downlink"].group_by("match").len().iter_rows()) == dict(
        open_["downlink"].group_by("match").len().iter_rows())
    for name in ("downlink", "uplink"):
        cols = ["frame", "fate", "n_attempts", "n_retries", "acked_by"]
        a = open_[name].select(cols).sort("frame")
        k = keyed[name].select(cols).sort("frame")
        assert a.equals(k), f"{name}: with keys the join differs from the open bundle's"
