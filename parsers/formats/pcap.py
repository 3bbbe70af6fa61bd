"""pcap (libpcap savefile) records: the file header checked as Wireshark 4.0's wiretap checks it, then
one tight loop over record headers and numpy for everything else.

What wiretap 4.0 does and we follow (each checked against tshark 4.0.17):
- major version < 2 is refused; any other version is read (2.4 is normal; others get a warning).
  Versions before 2.3 wrote (orig_len, incl_len) in that order; 2.3 files may have either order, and the
  smaller value is the captured length.
- link-type field: bits 16-25 must be zero (else refused); bit 26 says bits 28-31 hold the FCS length
  in 16-bit words; the LINKTYPE is the low 16 bits. `thiszone` is ignored.
- a record whose caplen exceeds wiretap's maximum for the link type (262144, 8 MiB for EBHSCR,
  128 MiB for D-Bus and USB) ends reading with an error; caplen > wirelen and caplen > snaplen are read.
- a record cut short by the end of the file is not a frame.
Not followed: wiretap's guessing among non-standard record layouts (Nokia, SuSE 6.3, AIX ...), and its
refusal of link types it does not know (we read them, with a warning).
"""
from __future__ import annotations

import mmap
import struct
import sys

import numpy as np

from parsers.columnar import accel
from parsers.formats.detect import pcap_magic
from parsers.formats.records import CaptureError, ContainerStats, Interface, RecordChunk, RecordWalker

FILE_HEADER = 24
RECORD_HEADER = 16
STANDARD_MAX_CAPLEN = 262144
_LARGE_MAX_CAPLEN = {231: 128 << 20,                                    # D-Bus
                     186: 128 << 20, 189: 128 << 20, 220: 128 << 20,   # USB (FreeBSD, Linux, Linux mmapped)
                     249: 128 << 20, 266: 128 << 20,                   # USBPcap, USB Darwin
                     279: 8 << 20}                                     # EBHSCR
# LINKTYPEs that tshark 4.0.17 opens in a pcap file (probed one by one over 0..1023).
_WIRETAP_LINKTYPES = (
    (0, 3), (6, 14), (16, 16), (18, 19), (32, 32), (50, 51), (99, 101), (104, 109), (112, 114),
    (117, 119), (121, 123), (127, 131), (133, 133), (135, 144), (147, 163), (165, 165), (167, 167),
    (169, 173), (177, 181), (183, 184), (186, 190), (192, 192), (195, 197), (199, 204), (209, 215),
    (220, 220), (224, 231), (235, 237), (239, 243), (245, 245), (248, 256), (258, 260), (264, 264),
    (266, 266), (268, 268), (270, 276), (279, 280), (283, 283), (287, 288), (290, 290), (292, 295))

_STANDARD, _SWAPPED, _EITHER = 0, 1, 2   # order of the two length fields in record headers


def max_caplen(linktype: int) -> int:
    """Return wiretap 4.0's largest acceptable captured length for a link type."""
    return _LARGE_MAX_CAPLEN.get(linktype, STANDARD_MAX_CAPLEN)


def wiretap_knows(linktype: int) -> bool:
    """Return True if tshark 4.0 opens pcap files of this link type."""
    return any(a <= linktype <= b for a, b in _WIRETAP_LINKTYPES)


class PcapReader(RecordWalker):
    """Walks the records of a pcap file mapped in memory."""

    format = "pcap"

    def __init__(self, name: str, mm: mmap.mmap, data: np.ndarray, stats: ContainerStats):
        self.name, self.mm, self.data, self.stats = name, mm, data, stats
        self.size = len(mm)
        self.names: dict[str, list[str]] = {}
        self.if_stats: dict[int, dict[str, int]] = {}
        self.sections: list[dict[str, str]] = []
        self.interfaces = [self._read_header()]
        self.maxcap = max_caplen(self.interfaces[0].linktype)
        self.frac_ns = 1 if self.nanosecond else 1000
        self.start = FILE_HEADER
        self.next_frame = 1
        # every 16-byte window of the file as one item: a record header is one fancy-index away
        self._hdr = np.ndarray(shape=(self.size - RECORD_HEADER + 1,), dtype="V16", buffer=mm, strides=(1,))
        self._fast = self.bo == "<" and self.lengths == _STANDARD and sys.byteorder == "little"
        self._swap = (self.bo == "<") != (sys.byteorder == "little")
        mv = memoryview(mm)
        # four u32 views starting 8 bytes (the caplen field) past each alignment: for a header at pos,
        # its caplen is self._mv[pos & 3][pos >> 2]
        self._mv = [mv[k + 8:k + 8 + (self.size - k - 8) // 4 * 4].cast("I") for k in range(4)] \
            if self._fast else []
        mv.release()

    def _read_header(self) -> Interface:
        if self.size < FILE_HEADER:
            raise CaptureError(f"{self.name}: too short for a pcap file header ({self.size} of 24 bytes)")
        magic = pcap_magic(self.mm[:4])
        if magic is None:
            raise CaptureError(f"{self.name}: not a pcap file we read (magic {bytes(self.mm[:4]).hex()})")
        self.bo, self.nanosecond = magic.byte_order, magic.nanosecond
        major, minor, zone, _sigfigs, snaplen, network = struct.unpack_from(self.bo + "HHiIII", self.mm, 4)
        if major < 2:
            raise CaptureError(f"{self.name}: pcap major version {major} unsupported (tshark refuses it)")
        if network & 0x03FF0000:
            raise CaptureError(f"{self.name}: pcap link-type reserved bits not zero (0x{network:08x}); "
                               "tshark refuses it")
        version = (major, minor)
        self.lengths = _SWAPPED if version < (2, 3) else _EITHER if version == (2, 3) else _STANDARD
        if version != (2, 4):
            self.stats.warnings.append(f"unusual pcap version {major}.{minor} (read as tshark does)")
        if zone:
            self.stats.warnings.append(f"pcap thiszone={zone} ignored, as tshark does")
        linktype = network & 0xFFFF
        if not wiretap_knows(linktype):
            self.stats.warnings.append(f"link type {linktype} is unknown to tshark 4.0 (which refuses the file)")
        # Bit 26 says the FCS length (bits 28-31, in 16-bit words) is known; stored in bits like if_fcslen.
        fcs = (network >> 28) * 16 if network & 0x04000000 else None
        if network >> 16 and fcs is None:
            self.stats.warnings.append(f"pcap link-type field 0x{network:08x} has FCS-length bits without the "
                                       f"'FCS length present' bit; read as link type {linktype}, FCS unknown")
        return Interface(linktype=linktype, snaplen=snaplen, tsresol_num=1 if self.nanosecond else 1000,
                         tsresol_den=1, fcs_len=fcs)

    def close(self) -> None:
        """Drop the views on the mapping so that it can be closed."""
        for v in self._mv:
            v.release()
        self._mv, self._hdr = [], None

    def walk(self, pos: int, stop: int) -> tuple[list[RecordChunk], int, bool]:
        """Return the records whose header starts in [pos, stop), the next position, and whether it ended."""
        size = self.size
        lim = min(stop, size - RECORD_HEADER + 1)
        if accel.AVAILABLE:
            o, heads, nxt = accel.pcap_walk(self.mm, pos, lim, self._swap, self.lengths)
        else:
            offs, nxt = self._loop_fast(pos, lim) if self._fast else self._loop_struct(pos, lim)
            o = np.fromiter(offs, dtype=np.int64, count=len(offs))
            heads = self._hdr[o]
        sec, frac, caplen, wirelen = self._fields(heads)
        n, done = len(o), False
        bad = np.flatnonzero(caplen > self.maxcap)
        if len(bad):
            n, done = int(bad[0]), True
            self._stop(o[n], f"record {self.next_frame + n} at offset {o[n]}: caplen {caplen[n]} exceeds "
                             f"the maximum {self.maxcap} for link type {self.interfaces[0].linktype}")
        elif n and o[-1] + RECORD_HEADER + caplen[-1] > size:
            n, done = n - 1, True
            self._cut(o[-1])
        elif nxt > size - RECORD_HEADER:
            done = True
            if nxt < size:
                self._cut(nxt)
        piece = self._piece(o[:n], sec[:n], frac[:n], caplen[:n], wirelen[:n])
        return ([piece] if n else []), nxt, done

    def _loop_fast(self, pos: int, lim: int) -> tuple[list[int], int]:
        # The hot loop: caplen is a native u32 read through one of four casts, chosen by alignment.
        views = self._mv
        offs: list[int] = []
        append = offs.append
        while pos < lim:
            append(pos)
            pos += 16 + views[pos & 3][pos >> 2]
        return offs, pos

    def _loop_struct(self, pos: int, lim: int) -> tuple[list[int], int]:
        unpack = struct.Struct(self.bo + "II").unpack_from
        mm, mode = self.mm, self.lengths
        offs: list[int] = []
        append = offs.append
        while pos < lim:
            append(pos)
            a, b = unpack(mm, pos + 8)
            pos += 16 + (a if mode == _STANDARD else b if mode == _SWAPPED else min(a, b))
        return offs, pos

    def _fields(self, heads: np.ndarray) -> tuple[np.ndarray, ...]:
        """Return ts_sec, ts_frac, caplen, wirelen (int64) of record headers (16 bytes each)."""
        sec, frac, a, b = np.ascontiguousarray(heads).view(self.bo + "u4").reshape(-1, 4).T.astype(np.int64)
        if self.lengths == _SWAPPED:
            a, b = b, a
        elif self.lengths == _EITHER:
            a, b = np.minimum(a, b), np.maximum(a, b)
        return sec, frac, a, b

    def _piece(self, o, sec, frac, caplen, wirelen) -> RecordChunk:
        n = len(o)
        frame = np.arange(self.next_frame, self.next_frame + n, dtype=np.int64)
        self.next_frame += n
        return RecordChunk(data=self.data, offset=o + RECORD_HEADER, caplen=caplen, wirelen=wirelen,
                           ts_ns=sec * 1_000_000_000 + frac * self.frac_ns,
                           linktype=np.full(n, self.interfaces[0].linktype, dtype=np.int64),
                           iface=np.zeros(n, dtype=np.int64), frame=frame)
