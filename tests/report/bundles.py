"""Bundles the report tests build in a temporary folder: crafted captures and variants of a shipped sample.

Every capture is written here (classic pcap, Ethernet or a copy of a sample with its stamps moved),
so a test owns its input and nothing outside its tmp_path is touched.
"""
from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

from tests.helpers.common import REPO

SAMPLES = REPO / "samples"
_PCAP_HDR = struct.Struct("<IHHiIII")
_REC_HDR = struct.Struct("<IIII")


def tcp_frame(src: str, dst: str, sport: int, dport: int, seq: int, ack: int, flags: int,
              payload: bytes = b"", ip_id: int = 1) -> bytes:
    """Return an Ethernet II frame carrying one IPv4 TCP segment (checksums left zero)."""
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, 5 << 4, flags, 65535, 0, 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), ip_id & 0xFFFF, 0, 64, 6, 0,
                     bytes(int(x) for x in src.split(".")), bytes(int(x) for x in dst.split(".")))
    return b"\x00\x11\x22\x33\x44\x55\x66\x77\x88\x99\xaa\xbb\x08\x00" + ip + tcp


def write_pcap(path: Path, packets: list[tuple[float, bytes]]) -> Path:
    """Write (epoch seconds, Ethernet frame) records as a microsecond pcap in time order; return the path."""
    out = [_PCAP_HDR.pack(0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    for t, frame in sorted(packets, key=lambda p: p[0]):
        sec = int(t)
        usec = min(int(round((t - sec) * 1e6)), 999_999)
        out.append(_REC_HDR.pack(sec, usec, len(frame), len(frame)) + frame)
    path.write_bytes(b"".join(out))
    return path


def write_manifest(folder: Path, captures: list[dict]) -> Path:
    """Write bundle.json listing `captures`; return the folder."""
    (folder / "bundle.json").write_text(json.dumps({"xlayer_bundle": 1, "captures": captures}))
    return folder


def gap_bundle(folder: Path, t0: float = 1_600_000_000.0) -> Path:
    """Return a one-capture bundle whose bulk flow idles 30 s mid-way and whose sparse flow sends every ~20 s."""
    folder.mkdir(parents=True, exist_ok=True)
    a, b = "10.0.0.1", "10.0.0.2"
    pk, seq = [], 1000
    for start, count in ((0.0, 40), (31.0, 40)):       # a bulk flow, 30 s idle between its two bursts
        for i in range(count):
            t = t0 + start + i * 0.05
            pk.append((t, tcp_frame(a, b, 40000, 80, seq, 1, 0x18, b"x" * 1000, ip_id=len(pk))))
            seq += 1000
            pk.append((t + 0.01, tcp_frame(b, a, 80, 40000, 1, seq, 0x10, ip_id=len(pk))))
    for k, at in enumerate((0.5, 15.0, 40.0, 60.0)):   # one packet per burst, gaps of 14.5 to 25 s
        pk.append((t0 + at, tcp_frame(a, b, 40001, 81, 1 + 100 * k, 1, 0x18, b"y" * 100, ip_id=500 + k)))
    write_pcap(folder / "srv.pcap", pk)
    return write_manifest(folder, [{"kind": "wired", "vantage": "server", "file": "srv.pcap", "clock": "server",
                                    "format": "pcap"}])


def single_packet_bundle(folder: Path, t0: float = 1_600_000_000.0) -> Path:
    """Return a one-capture bundle of single-packet flows (one data segment each, no reply)."""
    folder.mkdir(parents=True, exist_ok=True)
    pk = [(t0 + 0.3 * i, tcp_frame("10.0.0.1", "10.0.0.2", 41000 + i, 80, 1, 1, 0x18, b"z" * (200 + i), ip_id=i))
          for i in range(5)]
    write_pcap(folder / "one.pcap", pk)
    return write_manifest(folder, [{"kind": "wired", "vantage": "client", "file": "one.pcap", "clock": "client",
                                    "format": "pcap"}])


def shift_pcap(path: Path, seconds: int) -> int:
    """Move every record of a classic pcap by whole seconds, in place; return the records moved."""
    data = bytearray(path.read_bytes())
    magic = struct.unpack_from("<I", data, 0)[0]
    if magic not in (0xA1B2C3D4, 0xA1B23C4D):
        raise ValueError(f"{path}: not a little-endian classic pcap")
    pos, n = _PCAP_HDR.size, 0
    while pos + _REC_HDR.size <= len(data):
        sec, frac, incl, orig = _REC_HDR.unpack_from(data, pos)
        struct.pack_into("<I", data, pos, sec + seconds)
        pos += _REC_HDR.size + incl
        n += 1
    path.write_bytes(bytes(data))
    return n


def sample_subset(name: str, folder: Path, keep: list[str] | None = None) -> Path:
    """Return a copy of samples/`name` in folder whose manifest lists only the capture files in `keep`."""
    src = SAMPLES / name
    folder.mkdir(parents=True, exist_ok=True)
    man = json.loads((src / "bundle.json").read_text())
    caps = [c for c in man["captures"] if keep is None or c["file"] in keep]
    for c in caps:
        shutil.copy(src / c["file"], folder / c["file"])
    man["captures"] = caps
    (folder / "bundle.json").write_text(json.dumps(man))
    return folder


def hours_apart(folder: Path, hours: int = 3) -> Path:
    """Return a copy of sim-udp_overflow whose client capture is stamped `hours` later than the rest."""
    sample_subset("sim-udp_overflow", folder)
    assert shift_pcap(folder / "client.pcap", hours * 3600) > 100
    return folder


def unrelated_hours_apart(folder: Path, hours: int = 5) -> Path:
    """Return a bundle of two captures on different clocks sharing no packet, `hours` apart (no alignment)."""
    gap_bundle(folder / "_a")
    single_packet_bundle(folder / "_b", t0=1_600_000_000.0 + hours * 3600)
    shutil.move(str(folder / "_a" / "srv.pcap"), folder / "srv.pcap")
    shutil.move(str(folder / "_b" / "one.pcap"), folder / "one.pcap")
    shutil.rmtree(folder / "_a")
    shutil.rmtree(folder / "_b")
    return write_manifest(folder, [
        {"kind": "wired", "vantage": "server", "file": "srv.pcap", "clock": "server", "format": "pcap"},
        {"kind": "wired", "vantage": "client", "file": "one.pcap", "clock": "client", "format": "pcap"}])
