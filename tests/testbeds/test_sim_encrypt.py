"""`xlayer sim ... --encrypt PASSPHRASE`: the sniffer capture as a WPA2-PSK network's sniffer sees it.

Oracles: the open run of the same seed (frame for frame, through the record map the rewrite returns),
the native decryptor (`parsers.read_capture(keys=...)`) and tshark decrypting with the same key.
Two short sims here (baseline 3 s encrypted and open, delay_spike encrypted); delay_spike's open
bundle is the shared cached one.
"""
from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from parsers import read_capture
from parsers.crypto import parse_key
from parsers.crypto.keys import pmk_from_passphrase
from tests.helpers.common import REPO, sim_bundle, tshark_or_skip
from xlayer.testbeds.sim import ns3_available, run_scenario
from xlayer.testbeds.sim.encrypt import RSN_IE, check_passphrase, encrypt_air_capture

PASS = "Coherer-Induction-7"
SSID = "xlayer-sim"
KEY = f"{PASS}:{SSID}"
SNAPLEN = 160
COLS = ["ip_src", "ip_dst", "ip_len", "ip_id", "ip_proto", "sport", "dport", "tcp_seq", "tcp_ack", "tcp_flags",
        "wlan_type", "wlan_subtype", "wlan_ra", "wlan_ta", "wlan_seq", "wlan_retry", "ts_ns", "tsft"]

needs_ns3 = pytest.mark.skipif(not ns3_available()[0], reason="ns-3 (PyPI ns3) is not installed")


def _sim_cli(scenario: str, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xlayer", "sim", scenario, "-o", str(out), "--encrypt", PASS,
                           *extra], capture_output=True, text=True, timeout=900, cwd=REPO)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """The baseline (3 s, seed 1) encrypted through the CLI, and open, with the record map between them."""
    if not ns3_available()[0]:
        pytest.skip("ns-3 (PyPI ns3) is not installed")
    d = tmp_path_factory.mktemp("enc")
    enc, opn = d / "enc", d / "open"
    cli = _sim_cli("baseline", enc, "--seconds", "3")
    assert cli.returncode == 0, cli.stderr[-2000:]
    run_scenario("baseline", opn, seed=1, seconds=3)
    # the same rewrite on the open capture gives the same bytes, and says where each record went
    again = d / "again.pcap"
    shutil.copy(opn / "sniffer.pcap", again)
    res = encrypt_air_capture(again, PASS.encode(), SSID.encode(), 1)
    return {"enc": enc, "open": opn, "cli": cli, "again": again, "map": res.frame_map, "counts": res.counts}


def test_rewrite_is_deterministic_and_counted(runs) -> None:
    assert runs["again"].read_bytes() == (runs["enc"] / "sniffer.pcap").read_bytes()
    c = runs["counts"]
    assert c.handshakes == 1 and c.records_added == 8          # M1..M4 and their ACKs, one station
    assert c.encrypted_unicast > 10_000 and c.encrypted_group >= 1 and c.left_clear == 0
    b = json.loads((runs["enc"] / "bundle.json").read_text())
    air = [x for x in b["captures"] if x["kind"] == "air"]
    assert [x["encrypted"] for x in air] == ["wpa2-psk"] and "--wpa-pwd" in air[0]["notes"]
    assert all("encrypted" not in x for x in b["captures"] if x["kind"] != "air")
    assert air[0]["packets"] == c.records_out
    # the hosts' own captures see their traffic in clear: untouched
    for f in ("client.pcap", "server.pcap", "ap_wired.pcap"):
        assert (runs["enc"] / f).read_bytes() == (runs["open"] / f).read_bytes()


def test_no_cleartext_without_keys(runs) -> None:
    t = read_capture(runs["enc"] / "sniffer.pcap")
    data = t.filter((pl.col("wlan_type") == 2) & (pl.col("wlan_subtype") & 4 == 0))
    eapol = data.filter(~pl.col("wlan_protected"))
    assert eapol.height == 4                                     # only the handshake's EAPOL-Key frames
    assert data.filter(pl.col("wlan_protected")).height > 10_000
    assert t.get_column("ip_src").null_count() == t.height
    # beacons advertise WPA2: Privacy bit and the RSN element (as tshark would show them)
    raw = (runs["enc"] / "sniffer.pcap").read_bytes()
    assert raw.count(bytes.fromhex("30140100000fac040100000fac040100000fac020000")) >= 10


def test_keys_decrypt_every_data_frame_as_the_open_run(runs) -> None:
    opn = read_capture(runs["open"] / "sniffer.pcap")
    enc = read_capture(runs["enc"] / "sniffer.pcap", keys=[parse_key(f"wpa-pwd:{KEY}")])
    prot = enc.filter(pl.col("wlan_protected"))
    assert prot.height > 10_000 and prot.get_column("wlan_decrypted").all()
    whole = prot.filter(pl.col("caplen") == pl.col("wirelen"))
    cut = prot.filter(pl.col("caplen") < pl.col("wirelen"))
    assert whole.height > 1000 and (whole.get_column("wlan_mic") == "ok").all()
    assert cut.height > 1000 and (cut.get_column("wlan_mic") == "unverified").all()   # no MIC captured
    m = pl.DataFrame({"frame_open": np.arange(1, opn.height + 1), "frame": runs["map"]})
    assert enc.height == opn.height + 8
    j = (m.join(enc.select(["frame", "caplen", "wirelen", *COLS]), on="frame")
         .join(opn.select(["frame", "caplen", "wirelen", *COLS]).rename({"frame": "frame_open"}), on="frame_open",
               suffix="_open"))
    assert j.height == opn.height
    assert j.get_column("ip_src").drop_nulls().len() > 10_000
    for c in COLS:
        bad = j.filter(~pl.col(c).eq_missing(pl.col(f"{c}_open")))
        assert bad.height == 0, (c, bad.head(3))
    # lengths: CCMP header and MIC on the air, the snap length applied after encryption
    grown = j.filter(pl.col("frame").is_in(prot.get_column("frame").implode()))
    assert (grown.get_column("wirelen") == grown.get_column("wirelen_open") + 16).all()
    assert (grown.get_column("caplen") == np.minimum(grown.get_column("wirelen").to_numpy(), SNAPLEN)).all()
    # truth follows the records: its sniffer_frame names the same transmission in the new file
    ta = pl.read_parquet(runs["enc"] / "truth_attempts.parquet").get_column("sniffer_frame").drop_nulls()
    to = pl.read_parquet(runs["open"] / "truth_attempts.parquet").get_column("sniffer_frame").drop_nulls()
    assert ta.len() > 1000 and ta.to_list() == runs["map"][to.to_numpy().astype(np.int64) - 1].tolist()


def test_pns_per_transmitter_and_retries(runs) -> None:
    t = read_capture(runs["enc"] / "sniffer.pcap").filter(pl.col("wlan_protected")).select(
        "frame", "ts_ns", "wlan_ta", "wlan_ra", "wlan_tid", "wlan_seq", "wlan_frag", "wlan_retry", "wlan_pn")
    assert t.get_column("wlan_pn").null_count() == 0
    for (ta,), g in t.group_by("wlan_ta"):
        first = g.filter(~pl.col("wlan_retry")).sort("frame").get_column("wlan_pn").to_numpy()
        assert len(first) and (np.diff(first) > 0).all(), ta        # a new MPDU: the next PN
    # a retry repeats the PN of the first attempt of the same MPDU: the latest one with its sequence
    # number, if recent (numbers wrap: the same one 1.6 s earlier was another MPDU, its retry missed)
    key = ["wlan_ta", "wlan_ra", "wlan_tid", "wlan_seq", "wlan_frag"]
    t = t.with_columns(pl.col("wlan_tid").fill_null(-1)).sort("frame")
    firsts = t.filter(~pl.col("wlan_retry")).select("frame", pl.col("ts_ns").alias("t0"), *key,
                                                     pl.col("wlan_pn").alias("pn0"))
    retried = t.filter(pl.col("wlan_retry")).join_asof(firsts, on="frame", by=key, strategy="backward",
                                                       check_sortedness=False)
    retried = retried.filter(pl.col("pn0").is_not_null() & (pl.col("ts_ns") - pl.col("t0") < 200_000_000))
    assert retried.height > 100
    assert (retried.get_column("wlan_pn") == retried.get_column("pn0")).all()


def test_tshark_decrypts_the_same_frames(runs) -> None:
    path = runs["enc"] / "sniffer.pcap"
    out = subprocess.run(
        [tshark_or_skip(), "-n", "-r", str(path), "-o", "wlan.enable_decryption:TRUE",
         "-o", f'uat:80211_keys:"wpa-pwd","{KEY}"', "-Y", "wlan.fc.protected == 1 && llc",
         "-T", "fields", "-e", "frame.number", "-e", "ip.len"],
        capture_output=True, text=True, timeout=300, check=True).stdout
    theirs = {int(ln.split("\t")[0]): ln.split("\t")[1] for ln in out.splitlines() if ln.strip()}
    ours = read_capture(path, keys=[parse_key(f"wpa-pwd:{KEY}")]).filter(pl.col("wlan_mic") == "ok")
    # tshark decrypts only frames whose MIC is captured: ours verified by their MIC
    assert len(theirs) > 1000 and set(theirs) == set(ours.get_column("frame").to_list())
    ip = ours.filter(pl.col("ip_len").is_not_null())
    assert {f: str(n) for f, n in zip(ip["frame"].to_list(), ip["ip_len"].to_list())} == \
        {f: n for f, n in theirs.items() if n}


def test_passphrase_is_stored_nowhere(runs) -> None:
    needles = [PASS.encode(), pmk_from_passphrase(PASS.encode(), SSID.encode())]
    needles.append(needles[1].hex().encode())
    files = [p for p in runs["enc"].rglob("*") if p.is_file()]
    assert len(files) >= 8
    for p in files:
        data = p.read_bytes()
        assert not any(n in data for n in needles), p.name
    assert PASS not in runs["cli"].stdout + runs["cli"].stderr


@needs_ns3
def test_bad_passphrase_is_one_line_and_exit_2(tmp_path) -> None:
    for bad in ("short", "x" * 64, "non-ascii-\u00e9-passphrase"):
        r = subprocess.run([sys.executable, "-m", "xlayer", "sim", "baseline", "-o", str(tmp_path / "b"),
                            "--seconds", "1", "--encrypt", bad], capture_output=True, text=True, timeout=120,
                           cwd=REPO)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert bad not in r.stderr and "passphrase" in r.stderr
        assert not (tmp_path / "b").exists()


def _incidents(args: list[str]) -> list[tuple]:
    r = subprocess.run([sys.executable, "-m", "xlayer", "analyze", *args, "--json"], capture_output=True,
                       text=True, timeout=600, cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    return [(i["start"], i["end"], i["cause"], [c["cause"] for c in i["causes"]], i["flows"], i["stations"])
            for i in json.loads(r.stdout)["incidents"]]


@needs_ns3
def test_analyze_with_keys_equals_the_open_bundle(tmp_path) -> None:
    opn = sim_bundle("delay_spike", 1)
    cli = _sim_cli("delay_spike", tmp_path / "enc")
    assert cli.returncode == 0, cli.stderr[-2000:]
    want = _incidents([str(opn)])
    assert want and want[0][2] == "mac_retries"
    assert _incidents([str(tmp_path / "enc"), "--wpa-pwd", KEY]) == want


# --------------------------------------------------------------------------------------------------
# a crafted capture (no ns-3): the cases a short sim may not show

AP, STA1, STA2 = bytes.fromhex("020000000004"), bytes.fromhex("020000000003"), bytes.fromhex("020000000005")
T0 = 1_700_000_000 * 10**9
CRAFT_SNAP = 200


def _rt(tsft: int) -> bytes:
    """Radiotap: TSFT, Flags (FCS at end), Rate 6 Mbit/s (18 bytes)."""
    return struct.pack("<BBHI", 0, 0, 18, 0x7) + struct.pack("<Q", tsft) + bytes((0x10, 12))


def _ipv4_udp(i: int, size: int) -> bytes:
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, size, 1000 + i, 0, 64, 17, 0, bytes((10, 0, 0, 1)),
                     bytes((10, 0, 0, 2 + i % 2)))
    return ip + struct.pack(">HHHH", 5000, 6000 + i, size - 20, 0) + bytes(size - 28)


def _data(ds: int, a1: bytes, a2: bytes, a3: bytes, seq: int, body: bytes, retry: bool = False,
          sub: int = 8) -> bytes:
    fc = bytes(((sub << 4) | 0x08, ds | (0x08 if retry else 0)))
    return fc + b"\x2c\x00" + a1 + a2 + a3 + (seq << 4).to_bytes(2, "little") + (b"\x00\x00" if sub & 8 else b"") + body


def _beacon() -> bytes:
    ies = b"\x00\x0axlayer-sim" + b"\x01\x02\x8c\x12" + b"\x0c\x04\x00\x00\x00\x00"
    return b"\x80\x00\x00\x00" + b"\xff" * 6 + AP + AP + b"\x00\x00" + bytes(8) + b"\x64\x00\x01\x00" + ies


def _craft(path: Path) -> list[tuple[int, bytes, int]]:
    """Write the crafted capture; return its records as (time ns, 802.11 frame without FCS, wire length)."""
    llc = b"\xaa\xaa\x03\x00\x00\x00\x08\x00"
    big = _data(2, STA1, AP, AP, 3, llc + _ipv4_udp(3, 1400))
    frames = [
        (T0 + 500_000_000, b"\xd4\x00\x00\x00" + AP),                                  # ACK (a template)
        (T0 + 900_000_000, _beacon()),
        (T0 + 1_000_000_000, b"\x10\x00\x2c\x00" + STA1 + AP + AP + b"\x10\x00"
         + b"\x01\x00\x00\x00\x01\xc0" + b"\x01\x02\x8c\x12"),                   # association response
        # no room before the first data frame (0.5 ms): the handshake goes just before it
        (T0 + 1_000_500_000, _data(2, STA1, AP, AP, 1, llc + _ipv4_udp(1, 100))),
        (T0 + 1_000_600_000, _data(2, STA1, AP, AP, 1, llc + _ipv4_udp(1, 100), retry=True)),
        (T0 + 1_000_700_000, _data(2, b"\xff" * 6, AP, AP, 2, llc + _ipv4_udp(2, 60))),  # group
        (T0 + 1_000_800_000, big),                                                         # cut by the snaplen
        # a station whose association the sniffer missed: a handshake just before its first frame
        (T0 + 1_500_000_000, _data(1, AP, STA2, AP, 7, llc + _ipv4_udp(4, 80))),
        (T0 + 1_600_000_000, _data(1, AP, STA1, AP, 9, b"", sub=12)),                     # QoS null
        (T0 + 1_700_000_000, _data(0, STA2, STA1, bytes(6), 5, llc + _ipv4_udp(5, 80))),  # not the BSS's
    ]
    with open(path, "wb") as fh:
        fh.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, CRAFT_SNAP, 127))
        for t, f in frames:
            rec = _rt(t // 1000) + f + zlib.crc32(f).to_bytes(4, "little")
            cap = rec[:CRAFT_SNAP]
            fh.write(struct.pack("<IIII", t // 10**9, t % 10**9, len(cap), len(rec)) + cap)
    return [(t, f, len(f)) for t, f in frames]


def test_crafted_capture(tmp_path) -> None:
    path = tmp_path / "air.pcap"
    src = _craft(path)
    before = read_capture(path)
    res = encrypt_air_capture(path, PASS.encode(), SSID.encode(), 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["air.pcap"]          # no temp file left
    c = res.counts
    assert (c.handshakes, c.records_added, c.encrypted_unicast, c.encrypted_group) == (2, 16, 4, 1)
    assert c.retries_same_pn == 1 and c.rsn_added == 1
    fm = res.frame_map
    assert fm.tolist() == [1, 2, 3, 12, 13, 14, 15, 24, 25, 26]
    t = read_capture(path, keys=[parse_key(f"wpa-pwd:{KEY}")])
    assert t.height == len(src) + 16
    # handshake 1 between the association response and the first data frame, in time order
    hs = t.filter(pl.col("frame").is_between(4, 11)).get_column("ts_ns").to_list()
    assert src[2][0] < hs[0] and hs == sorted(hs) and hs[-1] < src[3][0]
    assert t.filter(pl.col("frame").is_between(16, 23)).get_column("ts_ns").max() < src[7][0]
    prot = t.filter(pl.col("wlan_protected"))
    assert sorted(prot.get_column("frame").to_list()) == [12, 13, 14, 15, 24]
    assert prot.get_column("wlan_decrypted").all()
    assert dict(zip(prot["frame"].to_list(), prot["wlan_mic"].to_list())) == \
        {12: "ok", 13: "ok", 14: "ok", 15: "unverified", 24: "ok"}
    assert dict(zip(prot["frame"].to_list(), prot["wlan_key"].to_list()))[14] == "gtk"
    pn = dict(zip(t["frame"].to_list(), t["wlan_pn"].to_list()))
    assert pn[12] == pn[13] and pn[14] == pn[12] + 1 and pn[15] == pn[14] + 1      # one counter for the AP
    assert pn[24] == 1                                                             # STA2's own counter
    cols = ["ip_src", "ip_dst", "ip_len", "ip_id", "sport", "dport", "wlan_seq", "wlan_retry", "ts_ns"]
    got = t.filter(pl.col("frame").is_in(fm.tolist())).sort("frame").select(cols)
    assert got.equals(before.sort("frame").select(cols))
    # lengths: +16 on the air, the snap length applied after encryption; FCS right on whole frames
    wl = dict(zip(t["frame"].to_list(), zip(t["caplen"].to_list(), t["wirelen"].to_list())))
    for old, new in zip(range(1, len(src) + 1), fm.tolist()):
        ow = before.filter(pl.col("frame") == old)["wirelen"][0]
        grow = 16 if new in (12, 13, 14, 15, 24) else 22 if new == 2 else 0
        assert wl[new] == (min(ow + grow, CRAFT_SNAP), ow + grow), (old, new)
    assert (t.filter(pl.col("caplen") == pl.col("wirelen")).get_column("fcs_bad") == False).all()  # noqa: E712
    # the beacon: Privacy bit, RSN element before the EDCA element
    raw = path.read_bytes()
    at = raw.index(RSN_IE)
    assert raw[at + len(RSN_IE)] == 0x0C and raw[at - 4 - 12 - 2] & 0x10      # after SSID and rates
    # the null frame and the other network's frame are as they were
    for _, f, _ in src[8:]:
        assert f in raw


def test_not_radiotap_or_bad_passphrase_is_refused(tmp_path) -> None:
    p = tmp_path / "eth.pcap"
    data = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    p.write_bytes(data)
    with pytest.raises(ValueError, match="radiotap"):
        encrypt_air_capture(p, PASS.encode(), SSID.encode(), 1)
    assert p.read_bytes() == data and [x.name for x in tmp_path.iterdir()] == ["eth.pcap"]
    for bad in ("seven77", "x" * 64, "tab\there-is-bad"):
        with pytest.raises(ValueError) as e:
            check_passphrase(bad)
        assert bad not in str(e.value)
    assert check_passphrase("eight888") == b"eight888"
