"""Synthetic captures for tests that need size or control: Ethernet/IPv4/UDP frames written with numpy."""
from __future__ import annotations

import struct

import numpy as np


def udp_frame(i: int, payload: int = 18) -> bytes:
    """Return one Ethernet/IPv4/UDP frame whose IP id and UDP source port are derived from i."""
    eth = bytes.fromhex("020000000002" "020000000001" "0800")
    ip_len = 20 + 8 + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, ip_len, i & 0xFFFF, 0x4000, 64, 17, 0,
                     bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
    udp = struct.pack("!HHHH", 1024 + (i % 50000), 9, 8 + payload, 0)
    return eth + ip + udp + bytes(payload)


def write_udp_pcap(path, n: int, t0_ns: int = 1_700_000_000_000_000_000, step_ns: int = 10_000) -> int:
    """Write n UDP frames as a microsecond pcap (IP ids and ports vary); return the file size."""
    frame = np.frombuffer(udp_frame(0), dtype=np.uint8)
    flen = len(frame)
    rec = 16 + flen
    buf = np.zeros((n, rec), dtype=np.uint8)
    ts = t0_ns + np.arange(n, dtype=np.int64) * step_ns
    hdr = np.zeros((n, 4), dtype="<u4")
    hdr[:, 0] = ts // 1_000_000_000
    hdr[:, 1] = (ts % 1_000_000_000) // 1000
    hdr[:, 2] = flen
    hdr[:, 3] = flen
    buf[:, :16] = hdr.view(np.uint8).reshape(n, 16)
    buf[:, 16:] = frame
    ids = np.arange(n, dtype=np.uint32)
    buf[:, 16 + 18] = (ids >> 8) & 0xFF
    buf[:, 16 + 19] = ids & 0xFF
    port = 1024 + (ids % 50000)
    buf[:, 16 + 34] = (port >> 8) & 0xFF
    buf[:, 16 + 35] = port & 0xFF
    with open(path, "wb") as fh:
        fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        fh.write(buf.tobytes())
    return 24 + n * rec
