"""`xlayer info` on a capture with 802.11 frames: networks, channels, frame types, protected share, stations."""
from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import polars as pl

from tests.helpers.common import REPO
from tests.helpers.pcapgen import write_udp_pcap
from xlayer.cli import wifi
from xlayer.cli.wifi import WifiSummary, channel_of

BSS_A, BSS_B = "02:aa:00:00:00:01", "02:bb:00:00:00:02"
STA_1, STA_2 = "02:00:00:00:00:11", "02:00:00:00:00:22"
# An SSID that would clear the terminal and ring the bell if printed as it is.
HOSTILE_SSID = b"\x1b[2Jevil\x07net"


def _mac(s: str) -> bytes:
    return bytes.fromhex(s.replace(":", ""))


def _radiotap(freq: int) -> bytes:
    # present: Flags (bit 1, u8) and Channel (bit 3: u16 MHz, u16 flags, 2-aligned) -> 14 bytes
    return struct.pack("<BBHI", 0, 0, 14, 0b1010) + struct.pack("<BxHH", 0, freq, 0x00A0)


def _beacon(bssid: str, ssid: bytes) -> bytes:
    hdr = struct.pack("<BBH", 0x80, 0, 0) + b"\xff" * 6 + _mac(bssid) + _mac(bssid) + struct.pack("<H", 0)
    return hdr + struct.pack("<QHH", 0, 100, 0x0411) + bytes([0, len(ssid)]) + ssid


def _data(to_ds: bool, bssid: str, sta: str, protected: bool = False) -> bytes:
    flags = (0x01 if to_ds else 0x02) | (0x40 if protected else 0)
    a1, a2 = (bssid, sta) if to_ds else (sta, bssid)
    hdr = struct.pack("<BBH", 0x08, flags, 44) + _mac(a1) + _mac(a2) + _mac("02:00:00:00:99:99") + struct.pack("<H", 16)
    body = (bytes(8) + b"\x00" * 24) if protected else (b"\xaa\xaa\x03\x00\x00\x00\x08\x06" + bytes(28))
    return hdr + body


def _ack(ra: str) -> bytes:
    return struct.pack("<BBH", 0xD4, 0, 0) + _mac(ra)


def _write(path: Path, frames: list[tuple[int, bytes]]) -> Path:
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 127))
        for i, (freq, frame) in enumerate(frames):
            rec = _radiotap(freq) + frame
            f.write(struct.pack("<IIII", 1_700_000_000 + i, 0, len(rec), len(rec)) + rec)
    return path


def _capture(tmp_path: Path) -> Path:
    frames = [(2437, _beacon(BSS_A, HOSTILE_SSID)), (2437, _beacon(BSS_A, HOSTILE_SSID)),
              (5180, _beacon(BSS_B, b"plain")),
              (2437, _data(True, BSS_A, STA_1)), (2437, _ack(STA_1)),
              (2437, _data(False, BSS_A, STA_1, protected=True)), (2437, _ack(BSS_A)),
              (5180, _data(True, BSS_B, STA_2)), (5180, _ack(STA_2))]
    return _write(tmp_path / "air.pcap", frames)


def _info(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xlayer", "info", *args], capture_output=True, text=True, check=False,
                          timeout=120, cwd=REPO)


def test_text_summary_of_crafted_air_capture(tmp_path: Path) -> None:
    p = _info(str(_capture(tmp_path)))
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "\x1b" not in out and "\x07" not in out                  # nothing from the capture reaches the terminal raw
    lines = out.splitlines()
    w = lines[lines.index("802.11:"):]
    assert "  frames: 9 (management 3, control 3, data 3)" in w
    assert "  protected: 1 of 3 data frames (33.3 %)" in w
    assert "  SSIDs: 2" in w
    assert '    "\\x1b[2Jevil\\x07net": 2 frames' in w
    assert '    "plain": 1 frame' in w
    assert "  BSSIDs: 2" in w
    assert f"    {BSS_A}, 2437 MHz (channel 6): 4 frames" in w
    assert f"    {BSS_B}, 5180 MHz (channel 36): 2 frames" in w
    assert "  channels: 2" in w
    assert "    2437 MHz (channel 6): 6 frames" in w and "    5180 MHz (channel 36): 3 frames" in w
    assert "  stations: 2" in w
    assert f"    {STA_1}: 2 frames" in w and f"    {STA_2}: 1 frame" in w
    assert "time span: 2023-11-14 22:13:20.000000 UTC .. 2023-11-14 22:13:28.000000 UTC (8.000000 s)" in out


def test_json_summary(tmp_path: Path) -> None:
    p = _info(str(_capture(tmp_path)), "--json")
    assert p.returncode == 0, p.stderr
    assert "\x1b" not in p.stdout                                      # JSON escapes control characters
    w = json.loads(p.stdout)["wifi"]
    assert w["frames"] == 9 and w["frame_types"] == {"management": 3, "control": 3, "data": 3}
    assert w["protected_data_frames"] == 1 and w["protected_share"] == 1 / 3
    # as the decoder gives it (control bytes as \xNN text, as in the packet table)
    assert w["ssids"] == [{"ssid": r"\x1b[2Jevil\x07net", "frames": 2}, {"ssid": "plain", "frames": 1}]
    assert w["bssids"] == [{"bssid": BSS_A, "frames": 4, "freq_mhz": [2437]},
                           {"bssid": BSS_B, "frames": 2, "freq_mhz": [5180]}]
    assert {(c["channel"], c["frames"]) for c in w["channels"]} == {(6, 6), (36, 3)}
    assert w["stations"] == [{"mac": STA_1, "frames": 2}, {"mac": STA_2, "frames": 1}]


def test_wired_capture_has_no_wifi_section(tmp_path: Path) -> None:
    f = tmp_path / "wired.pcap"
    write_udp_pcap(f, 50)
    p = _info(str(f))
    assert p.returncode == 0, p.stderr
    assert "802.11:" not in p.stdout and "UTC" in p.stdout
    assert json.loads(_info(str(f), "--json").stdout)["wifi"] is None


def test_distinct_entries_are_bounded(monkeypatch) -> None:
    # A capture naming a new station in every frame: the lists stop growing, the frames are still counted.
    monkeypatch.setattr(wifi, "MAX_KEYS", 5)
    n = 40
    macs = [f"02:00:00:00:{i // 256:02x}:{i % 256:02x}" for i in range(n)]
    df = pl.DataFrame({"wlan_type": [2] * n, "wlan_protected": [False] * n, "wlan_ssid": [None] * n,
                       "wlan_bssid": [BSS_A] * n, "wlan_to_ds": [True] * n, "wlan_from_ds": [False] * n,
                       "wlan_ta": macs, "wlan_ra": [BSS_A] * n, "freq_mhz": [2412] * n, "fcs_bad": [False] * n},
                      schema_overrides={"wlan_type": pl.UInt8, "freq_mhz": pl.UInt16, "wlan_ssid": pl.String})
    s = WifiSummary()
    s.add(df[:20])
    s.add(df[20:])
    assert len(s.stations.counts) == 5 and sum(s.stations.counts.values()) + s.stations.others == n
    text = "\n".join(s.lines())
    assert "  stations: 40 (at most)" in text and "... and up to 35 more" in text
    assert s.as_dict()["not_listed"]["stations"] == {"keys": 35, "frames": 35}


def test_channel_numbers() -> None:
    freqs = (2412, 2472, 2484, 5180, 5825, 5955, 60480, 2400)
    assert [channel_of(f) for f in freqs] == [1, 13, 14, 36, 165, 1, 2, None]


def test_utc_labels_of_info_and_bundle_show() -> None:
    from xlayer.text import iso_label, utc_label

    assert utc_label(1_700_000_000_123_456_789) == "2023-11-14 22:13:20.123456 UTC"
    assert utc_label(1_700_000_000_123_456_789, 9) == "2023-11-14 22:13:20.123456789 UTC"
    assert utc_label(1_700_000_000_999_999_999, 0) == "2023-11-14 22:13:20 UTC"     # cut, never rounded up
    assert utc_label(None) == "-"
    assert utc_label(10**30) == f"{10**30} ns since the epoch"                      # no calendar year: no traceback
    assert iso_label("2026-11-21T10:09:28.567776Z") == "2026-11-21 10:09:28.567776 UTC"
    assert iso_label("2026-11-21T12:09:28+02:00") == "2026-11-21 10:09:28 UTC"
    assert iso_label("2026-11-21T10:09:28") is None and iso_label("\x1b[2J") is None and iso_label(5) is None
