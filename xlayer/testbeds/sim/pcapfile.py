"""Checks on the classic pcap files the simulator writes (shared with benchmarks/make_ns3_capture.py)."""
from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

from parsers.formats.detect import pcap_magic

# Pcap global header: magic, version, thiszone, sigfigs, snaplen, linktype.
PCAP_GLOBAL = struct.Struct("<IHHiIII")
PCAP_RECORD = struct.Struct("<IIII")


@dataclass(frozen=True)
class PcapSummary:
    """Record count and shape of one classic pcap file."""

    path: Path
    linktype: int
    frames: int
    size: int
    first_ts: float
    last_ts: float
    snaplen: int = 0
    truncated_records: int = 0   # records cut by the snaplen (caplen < wirelen)


def count_pcap(path: Path) -> PcapSummary:
    """Walk the record headers of a classic little-endian pcap file; raise ValueError if truncated."""
    path = Path(path)
    size = path.stat().st_size
    if size < PCAP_GLOBAL.size:
        raise ValueError(f"{path}: too short for a pcap header")
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        magic, _vmaj, _vmin, _tz, _sig, snaplen, linktype = PCAP_GLOBAL.unpack_from(data, 0)
        kind = pcap_magic(data[:4])
        if kind is None or kind.byte_order != "<":
            raise ValueError(f"{path}: not a little-endian classic pcap (magic {magic:#x})")
        scale = 1e-9 if kind.nanosecond else 1e-6
        unpack = PCAP_RECORD.unpack_from
        off = PCAP_GLOBAL.size
        n = cut = 0
        first_ts = last_ts = 0.0
        while off + PCAP_RECORD.size <= size:
            sec, frac, incl, orig = unpack(data, off)
            last_ts = sec + frac * scale
            if n == 0:
                first_ts = last_ts
            cut += incl < orig
            off += PCAP_RECORD.size + incl
            n += 1
    # A record that runs past the end means the writer was not flushed: the file is unusable.
    if off != size:
        raise ValueError(f"{path}: truncated final record ({size - off} bytes left over)")
    return PcapSummary(path, linktype, n, size, first_ts, last_ts, snaplen, cut)
