"""pcapng records: blocks, sections and options checked as Wireshark 4.0's wiretap checks them; packet
blocks (EPB, SPB, obsolete PB) collected by one tight loop and decoded with numpy.

What tshark 4.0.17 does and we follow (each probed with crafted files):
- SHB version must be 1.0 or 1.2; an error in the first SHB or in the IDBs right after it refuses the
  file, any later error ends reading (rows before it are kept).
- block length: >= 12, <= 134348832, equal to the trailing copy; packet blocks have their own minimum
  (EPB/PB 32, SPB 16) and must hold their caplen. We also require a multiple of 4 (the spec does;
  wiretap reads the padding it expects instead).
- an EPB/PB naming an interface not yet described in its section ends reading; so does a caplen above
  wiretap's maximum for the link type, a bad option length (options never overrun their block) and a
  packet option of the wrong size (epb_flags 4, epb_dropcount 8, epb_packetid 8, epb_queue 4 ...).
- SPB: interface 0 of the section, caplen = min(origlen, snaplen) (snaplen 0 = none); the block must
  hold it. It has no time stamp: tshark prints an empty frame.time_epoch; we give ts_ns = 0 and
  RecordChunk.has_ts False.
- custom blocks (0xBAD, 0x40000BAD), systemd journal export (9) and sysdig event blocks are numbered
  frames in tshark but are not packets: they get no row, yet use up a frame number, so that our frame
  numbers stay equal to tshark's.
- time stamps: ticks at if_tsresol (10^-k or 2^-k) converted to ns exactly (floor), plus if_tsoffset.
  tshark 4.0 overflows a 64-bit product for resolutions finer than 10^-10 or 2^-34 and then prints
  wrong fractions; we do not copy that. Values past int64 ns (year 2262) wrap.

Where we part from tshark on purpose: a file may describe at most MAX_INTERFACES interfaces (all
sections together), so that every interface id fits the packet table's `iface` column (UInt16).
One more IDB in the first section refuses the file; later, it ends reading there (the rest is
counted as skipped bytes, with the reason in the stats' error). tshark reads on.
"""
from __future__ import annotations

import ipaddress
import mmap
import struct
import sys
from math import gcd

import numpy as np

from parsers.columnar import accel
from parsers.formats.detect import PCAPNG_BYTE_ORDERS, PCAPNG_MAGIC
from parsers.formats.pcap import max_caplen
from parsers.formats.records import CaptureError, ContainerStats, Interface, RecordChunk, RecordWalker

SHB, IDB, PB, SPB, NRB, ISB, EPB = int.from_bytes(PCAPNG_MAGIC, "little"), 1, 2, 3, 4, 5, 6
SJE, DSB, CB, DCB = 9, 0x0A, 0x00000BAD, 0x40000BAD
MAX_BLOCK = 134348832
BLOCK_NAMES = {SHB: "SHB", IDB: "IDB", PB: "PB", SPB: "SPB", NRB: "NRB", ISB: "ISB", EPB: "EPB",
               SJE: "SJE", DSB: "DSB", CB: "CB", DCB: "DCB"}
_FRAME_BLOCKS = {SJE, CB, DCB, 0x204, 0x216, 0x221}   # non-packet records tshark numbers as frames
_CUSTOM_OPTIONS = {2988, 2989, 19372, 19373}
_PKT_OPTION_SIZE = {2: ("epb_flags", 4), 4: ("epb_dropcount", 8), 5: ("epb_packetid", 8), 6: ("epb_queue", 4)}
_ISB_COUNTERS = {4: "ifrecv", 5: "ifdrop", 6: "filteraccept", 7: "osdrop", 8: "usrdeliv"}
_NS = np.uint64(1_000_000_000)
# Interface ids are global over the file's sections and land in the UInt16 `iface` column.
MAX_INTERFACES = 1 << 16


class _Blocks:
    """Columns of a run of packet blocks (EPB, SPB, PB): one entry per block."""

    btype: np.ndarray
    blen: np.ndarray
    inside: np.ndarray      # the block ends within the file
    ticks: np.ndarray       # uint64 time stamp ticks (garbage for SPBs)
    is_spb: np.ndarray
    mixed: bool             # not all EPBs: per-row fixed sizes and SPB capture lengths
    local: np.ndarray       # interface id within the section
    gl: np.ndarray          # global interface id
    nif: int                # interfaces described so far in the section
    origlen: np.ndarray
    caplen: np.ndarray
    fixed: np.ndarray | int  # block bytes besides the packet data
    head: np.ndarray | int   # offset of the packet data in the block


class _Stop(Exception):
    """The file is damaged here: reading ends with this message."""


class _Limit(_Stop):
    """The file is sound but goes past one of our limits: reading ends with this message."""


class _Ifaces:
    """Per global interface id, what packet blocks need (link type, snaplen, largest caplen, time
    resolution, offset), as arrays grown by doubling: a file that alternates IDBs and packets then
    costs O(1) per block instead of a list rebuilt over all its interfaces at every packet run."""

    _DTYPES = {"linktype": np.int64, "snaplen": np.int64, "maxcap": np.int64, "base": np.int64,
               "exp": np.int64, "offset_ns": np.int64}

    def __init__(self) -> None:
        self.n = 0
        self._cols = {k: np.zeros(8, dtype=t) for k, t in self._DTYPES.items()}

    def add(self, **values: int) -> None:
        """Append one interface's values (every column named)."""
        if self.n == len(self._cols["linktype"]):
            self._cols = {k: np.concatenate([c, np.zeros_like(c)]) for k, c in self._cols.items()}
        for k, c in self._cols.items():
            c[self.n] = values[k]
        self.n += 1

    def col(self, name: str) -> np.ndarray:
        """Return one column over the interfaces described so far ([0] if none, as a default)."""
        return self._cols[name][:self.n] if self.n else np.zeros(1, dtype=np.int64)


class _Cut(Exception):
    """The file ends inside this block."""


def ticks_to_ns(ticks: np.ndarray, base: int, exp: int) -> np.ndarray:
    """Return floor(ticks * 1e9 / base**exp) as int64, exact for any uint64 ticks."""
    t = ticks.astype(np.uint64)
    if base == 10:
        if exp <= 9:
            return (t * np.uint64(10 ** (9 - exp))).view(np.int64)
        if exp - 9 > 19:   # 10**20 > 2**64 > any tick count
            return np.zeros(len(t), dtype=np.int64)
        return (t // np.uint64(10 ** (exp - 9))).view(np.int64)
    if exp < 64:
        secs, rem = t >> np.uint64(exp), t & np.uint64((1 << exp) - 1)
    else:
        secs, rem = np.zeros_like(t), t
    if exp <= 34:   # rem * 1e9 < 2**64
        frac = (rem * _NS) >> np.uint64(exp)
    else:           # split rem in 32-bit halves so that no product overflows
        hi = (rem >> np.uint64(32)) * _NS + (((rem & np.uint64(0xFFFFFFFF)) * _NS) >> np.uint64(32))
        frac = hi >> np.uint64(exp - 32) if exp - 32 < 64 else np.zeros_like(t)
    return (secs * _NS + frac).view(np.int64)


def _pad4(n):
    return (n + 3) & ~3


class PcapngReader(RecordWalker):
    """Walks the blocks of a pcapng file mapped in memory."""

    format = "pcapng"

    def __init__(self, name: str, mm: mmap.mmap, data: np.ndarray, stats: ContainerStats):
        self.name, self.mm, self.data, self.stats = name, mm, data, stats
        self.size = len(mm)
        self.interfaces: list[Interface] = []
        self.names: dict[str, list[str]] = {}
        self.if_stats: dict[int, dict[str, int]] = {}
        self.sections: list[dict[str, str]] = []
        self.next_frame = 1
        self._if = _Ifaces()
        self._sec_base = 0          # global id of the current section's first interface
        self._sec_n = 0             # interfaces described so far in the current section
        self.bo = "<"
        n4 = self.size // 4
        self._u32 = {bo: np.frombuffer(mm, dtype=bo + "u4", count=n4) for bo in "<>"}
        # every 4-aligned 28-byte window as one item: a packet block's fixed part is one fancy-index away
        self._fixed = np.ndarray(shape=(max(n4 - 6, 1),), dtype="V28", buffer=mm, strides=(4,)) \
            if n4 >= 7 else np.zeros(1, dtype="V28")
        mv = memoryview(mm)
        self._mv = mv[:n4 * 4].cast("I") if sys.byteorder == "little" else None
        mv.release()
        self.start = self._first_section()

    def close(self) -> None:
        """Drop the views on the mapping so that it can be closed."""
        if self._mv is not None:
            self._mv.release()
        self._mv, self._u32, self._fixed = None, {}, None

    # ---- opening: like wiretap, the first SHB and the IDBs right after it must be sound
    def _first_section(self) -> int:
        pos = 0
        try:
            pos = self._block(0)
            while self.size - pos >= 8 and self._u32_at(pos) == IDB:
                pos = self._block(pos)
        except _Limit as e:
            raise CaptureError(f"{self.name}: {e}") from None
        except _Stop as e:
            raise CaptureError(f"{self.name}: {e} (tshark refuses the file)") from None
        except _Cut:
            raise CaptureError(f"{self.name}: pcapng file cut short in its first section "
                               f"(block at offset {pos}); tshark refuses it") from None
        return pos

    # ---- walking
    def walk(self, pos: int, stop: int) -> tuple[list[RecordChunk], int, bool]:
        """Return the packets whose block starts in [pos, stop), the next position, and whether it ended."""
        size, pieces = self.size, []
        while pos < stop:
            if pos >= size:
                return pieces, pos, True
            if size - pos < 8:
                self._cut(pos)
                return pieces, pos, True
            offs, nxt = self._loop(pos, min(stop, size - 7))
            if len(offs):
                piece, ended = self._packets(offs)
                if len(piece):
                    pieces.append(piece)
                if ended:
                    return pieces, nxt, True
            pos = nxt
            if pos >= stop or size - pos < 8:
                continue
            try:
                pos = self._block(pos)
            except _Stop as e:
                self._stop(pos, str(e))
                return pieces, pos, True
            except _Cut:
                self._cut(pos)
                return pieces, pos, True
        return pieces, pos, pos >= size

    def _loop(self, pos: int, lim: int) -> tuple[np.ndarray, int]:
        """Return the offsets of consecutive packet blocks from pos (int64), and where they end."""
        if accel.AVAILABLE:
            return accel.pcapng_walk(self.mm, pos, lim, (self.bo == "<") != (sys.byteorder == "little"))
        if self.bo == "<" and self._mv is not None:
            offs, nxt = self._loop_native(pos, lim)
        else:
            offs, nxt = self._loop_struct(pos, lim)
        return np.fromiter(offs, dtype=np.int64, count=len(offs)), nxt

    def _loop_native(self, pos: int, lim: int) -> tuple[list[int], int]:
        # The hot loop: collect packet blocks until another block type, a bad length, stop or EOF.
        mv = self._mv
        offs: list[int] = []
        append = offs.append
        while pos < lim:
            i = pos >> 2
            t = mv[i]
            if t != 6 and t != 3 and t != 2:
                break
            n = mv[i + 1]
            if n < 12 or n & 3:
                break
            append(pos)
            pos += n
        return offs, pos

    def _loop_struct(self, pos: int, lim: int) -> tuple[list[int], int]:
        unpack = struct.Struct(self.bo + "II").unpack_from
        mm = self.mm
        offs: list[int] = []
        append = offs.append
        while pos < lim:
            t, n = unpack(mm, pos)
            if (t != 6 and t != 3 and t != 2) or n < 12 or n & 3:
                break
            append(pos)
            pos += n
        return offs, pos

    def _packets(self, o: np.ndarray) -> tuple[RecordChunk, bool]:
        """Decode and check the packet blocks at offsets o; return the good leading rows and whether it ended."""
        b = self._decode(o)
        n, why = self._first_failure(self._checks(o, b), len(o))
        comments, n, why = self._packet_options(o, b, n, why)
        ended = True
        if why is not None:
            self._stop(o[n], f"record {self.next_frame + n} at offset {o[n]}: {why}")
        elif not b.inside[-1]:
            n = len(o) - 1
            self._cut(o[n])
        else:
            ended = False
        return self._piece(o[:n], b, n, comments), ended

    def _decode(self, o: np.ndarray) -> _Blocks:
        """Return the fixed fields of the packet blocks at o (rows past the end of the file are garbage)."""
        b = _Blocks()
        words = self._fixed[np.minimum(o >> 2, len(self._fixed) - 1)].view(self.bo + "u4").reshape(-1, 7)
        b.btype, b.blen, w2, ts_hi, ts_lo, w5, w6 = words.T.astype(np.int64)
        b.inside = np.ones(len(o), dtype=bool)   # only the last block can run past the end of the file
        b.inside[-1] = o[-1] + b.blen[-1] <= self.size
        b.ticks = (ts_hi.astype(np.uint64) << np.uint64(32)) | ts_lo.astype(np.uint64)
        b.is_spb = b.btype == SPB
        b.mixed = bool(b.is_spb.any() or (b.btype == PB).any())
        b.local, b.origlen, b.caplen, b.fixed, b.head = w2, w6, w5, 32, 28
        if b.mixed:
            is_pb = b.btype == PB   # the PB's interface id is the first u16 of its third word
            pb_iface = (w2 & 0xFFFF) if self.bo == "<" else (w2 >> 16)
            b.local = np.where(b.is_spb, 0, np.where(is_pb, pb_iface, w2))
            b.origlen = np.where(b.is_spb, w2, w6)
            b.fixed, b.head = np.where(b.is_spb, 16, 32), np.where(b.is_spb, 12, 28)
        # a section's interfaces have consecutive global ids; rows naming none get a stand-in id
        # (the checks stop reading at the first of them)
        b.nif = self._sec_n
        b.gl = (self._sec_base + np.clip(b.local, 0, b.nif - 1) if b.nif
                else np.zeros(len(o), dtype=np.int64))
        if b.mixed and b.nif:
            snap = self._if.col("snaplen")[b.gl]
            spb_cap = np.where(snap > 0, np.minimum(b.origlen, snap), b.origlen)
            b.caplen = np.where(b.is_spb, spb_cap, w5)
        return b

    def _checks(self, o: np.ndarray, b: _Blocks) -> list:
        """Return (mask, message) pairs in the order wiretap checks a packet block."""
        u, last = self._u32[self.bo], len(self._u32[self.bo]) - 1
        maxcap = self._if.col("maxcap")
        maxcap = maxcap[b.gl] if len(maxcap) > 1 else maxcap[0]
        trail = u[np.minimum((o + b.blen - 4) >> 2, last)].astype(np.int64)
        inside, blen, caplen, fixed = b.inside, b.blen, b.caplen, b.fixed

        def kind(r: int) -> str:
            return _name(int(b.btype[r]))

        def no_iface(r: int) -> str:
            if b.is_spb[r]:
                return "SPB appeared before any IDB in the section"
            return f"interface {b.local[r]} is not described in this section ({b.nif} interfaces)"

        return [
            (blen > MAX_BLOCK, lambda r: f"total block length {blen[r]} is too large (> {MAX_BLOCK})"),
            (blen < fixed, lambda r: f"total block length {blen[r]} of an {kind(r)} is below its minimum"),
            (blen & 3, lambda r: f"total block length {blen[r]} is not a multiple of 4"),
            (inside & (caplen > blen - fixed),
             lambda r: f"total block length {blen[r]} of an {kind(r)} is too small for {caplen[r]} bytes"),
            (inside & (b.local >= b.nif), no_iface),
            (inside & (caplen > maxcap), lambda r: f"caplen {caplen[r]} is larger than {np.max(maxcap)}"),
            (inside & (trail != blen),
             lambda r: f"block lengths (first {blen[r]} and second {trail[r]}) don't match"),
        ]

    @staticmethod
    def _first_failure(checks, n: int) -> tuple[int, str | None]:
        """Return the first row failing any check (n if none) and the message of the first check failing it."""
        firsts = [int(h[0]) if len(h := np.flatnonzero(mask)) else n for mask, _ in checks]
        first = min(firsts, default=n)
        if first == n:
            return n, None
        return first, next(msg(first) for (_, msg), f in zip(checks, firsts) if f == first)

    def _packet_options(self, o: np.ndarray, b: _Blocks, n: int, why: str | None):
        """Parse the options of the first n packet blocks; return comments by row, the new n and any error."""
        start = b.head + ((b.caplen + 3) & ~3)
        has = np.flatnonzero(b.inside[:n] & (b.blen[:n] - 4 > (start[:n] if np.ndim(start) else start)))
        comments: dict[int, str] = {}
        for r in has.tolist():
            if b.is_spb[r]:
                continue   # an SPB has no options: its padding is not ours to read
            try:
                texts = self._pkt_options(int(o[r] + start[r]), int(o[r] + b.blen[r] - 4))
            except _Stop as e:
                return comments, r, str(e)
            if texts:
                comments[r] = "\n".join(texts)
        return comments, n, why

    def _pkt_options(self, start: int, end: int) -> list[str]:
        texts = []
        for code, val in self._options(start, end):
            if code == 1:
                texts.append(val.decode("utf-8", "replace"))
            elif code in _PKT_OPTION_SIZE and len(val) != _PKT_OPTION_SIZE[code][1]:
                name, want = _PKT_OPTION_SIZE[code]
                raise _Stop(f"packet option {name} has length {len(val)}, not {want}")
            elif code == 7 and (not val or (val[0] in (1, 2) and len(val) != 9)):
                raise _Stop(f"packet option epb_verdict has bad length {len(val)}")
        return texts

    def _piece(self, o: np.ndarray, b: _Blocks, n: int, comments: dict[int, str]) -> RecordChunk:
        gl, ticks = b.gl[:n], b.ticks[:n]
        timed = ~b.is_spb[:n]
        if n and not b.mixed and gl[0] == gl[-1] and gl.min() == gl.max():   # one interface: the usual
            ts = self._ts(ticks, int(gl[0]))
        else:
            ts = np.zeros(n, dtype=np.int64)
            if timed.any():
                ts[timed] = self._ts_many(ticks[timed], gl[timed])
        for t in (EPB, SPB, PB):
            c = int(np.count_nonzero(b.btype[:n] == t))
            if c:
                self.stats.blocks[_name(t)] = self.stats.blocks.get(_name(t), 0) + c
        lt = self._if.col("linktype")
        frame = np.arange(self.next_frame, self.next_frame + n, dtype=np.int64)
        self.next_frame += n
        head = b.head[:n] if b.mixed else b.head
        return RecordChunk(data=self.data, offset=o + head, caplen=b.caplen[:n], wirelen=b.origlen[:n],
                           ts_ns=ts, linktype=lt[gl], iface=gl, frame=frame, comments=comments,
                           has_ts=timed if not timed.all() else None)

    def _ts(self, ticks: np.ndarray, g: int) -> np.ndarray:
        base, exp = int(self._if.col("base")[g]), int(self._if.col("exp")[g])
        return ticks_to_ns(ticks, base, exp) + self._if.col("offset_ns")[g]

    def _ts_many(self, ticks: np.ndarray, gl: np.ndarray) -> np.ndarray:
        """Return the time stamps of rows of several interfaces: one conversion per distinct
        resolution (at most 256), not per interface."""
        key = self._if.col("base")[gl] * 256 + self._if.col("exp")[gl]
        ts = np.empty(len(ticks), dtype=np.int64)
        for k in np.unique(key).tolist():
            sel = key == k
            ts[sel] = ticks_to_ns(ticks[sel], k // 256, k % 256)
        return ts + self._if.col("offset_ns")[gl]

    # ---- one block of any type, off the hot path
    def _u32_at(self, pos: int, bo: str | None = None) -> int:
        return struct.unpack_from((bo or self.bo) + "I", self.mm, pos)[0]

    def _block(self, pos: int) -> int:
        """Read the block at pos (not a packet block); return the position after it."""
        size = self.size
        if size - pos < 8:
            raise _Cut()
        btype = self._u32_at(pos)
        bo = self.bo
        if btype == SHB:
            if size - pos < 12:
                raise _Cut()
            bo = PCAPNG_BYTE_ORDERS.get(bytes(self.mm[pos + 8:pos + 12]))
            if bo is None:
                raise _Stop(f"unknown byte-order magic number 0x{self._u32_at(pos + 8, '>'):08x}")
        blen = self._u32_at(pos + 4, bo)
        if blen < 12 or blen & 3:
            raise _Stop(f"block at offset {pos}: total block length {blen} is "
                        + ("not a multiple of 4" if blen >= 12 else "less than 12"))
        if blen > MAX_BLOCK:
            raise _Stop(f"block at offset {pos}: total block length {blen} is too large (> {MAX_BLOCK})")
        if pos + blen > size:
            raise _Cut()
        body, end = pos + 8, pos + blen - 4
        handler = {SHB: self._shb, IDB: self._idb, NRB: self._nrb, ISB: self._isb}.get(btype)
        try:
            if handler is not None:
                handler(body, end, bo)
            elif btype in (CB, DCB) and blen < 16:
                raise _Stop(f"total block length {blen} of a CB is too small (< 16)")
        except _Stop as e:
            raise type(e)(f"{_name(btype)} at offset {pos}: {e}") from None
        # wiretap compares the trailing length last, after the body was read
        if self._u32_at(end, bo) != blen:
            raise _Stop(f"{_name(btype)} at offset {pos}: total block lengths (first {blen} and second "
                        f"{self._u32_at(end, bo)}) don't match")
        if btype in _FRAME_BLOCKS:
            self.next_frame += 1
        key = _name(btype)
        self.stats.blocks[key] = self.stats.blocks.get(key, 0) + 1
        return pos + blen

    def _shb(self, body: int, end: int, bo: str) -> None:
        if end - body < 16:
            raise _Stop(f"SHB of {end - body + 12} bytes is less than the minimum 28")
        major, minor = struct.unpack_from(bo + "HH", self.mm, body + 4)
        if major != 1 or minor not in (0, 2):
            raise _Stop(f"unknown SHB version {major}.{minor}")
        self.bo = bo
        info = {}
        for code, val in self._options(body + 16, end):
            text = val.decode("utf-8", "replace")
            if code == 1:
                self.stats.comments.append(text)
            elif code in (2, 3, 4):
                info[("hardware", "os", "userappl")[code - 2]] = text
        self.sections.append(info)
        self._sec_base, self._sec_n = len(self.interfaces), 0
        self.stats.sections += 1

    def _idb(self, body: int, end: int, bo: str) -> None:
        if end - body < 8:
            raise _Stop(f"IDB of {end - body + 12} bytes is less than the minimum 20")
        if len(self.interfaces) >= MAX_INTERFACES:
            raise _Limit(f"more than {MAX_INTERFACES} interfaces in the file: xlayer reads at most "
                         f"{MAX_INTERFACES} (interface ids 0-{MAX_INTERFACES - 1})")
        linktype, _reserved, snaplen = struct.unpack_from(bo + "HHI", self.mm, body)
        itf = Interface(linktype=linktype, snaplen=snaplen, tsresol_num=1000, tsresol_den=1,
                        section=self.stats.sections - 1)
        res = (10, 6)
        for code, val in self._options(body + 8, end):
            if code == 2:
                itf.name = val.decode("utf-8", "replace")
            elif code == 3:
                itf.description = val.decode("utf-8", "replace")
            elif code == 9 and len(val) == 1:   # wiretap ignores an if_tsresol of another size
                res = (2, val[0] & 0x7F) if val[0] & 0x80 else (10, val[0])
            elif code == 13 and len(val) == 1:
                itf.fcs_len = val[0]
            elif code == 14 and len(val) == 8:
                itf.tsoffset_s = struct.unpack(bo + "q", val)[0]
        itf.tsresol_num, itf.tsresol_den = _ratio(*res)
        self._if.add(linktype=linktype, snaplen=snaplen, maxcap=max_caplen(linktype), base=res[0],
                     exp=res[1], offset_ns=_wrap64(itf.tsoffset_s * 10**9))
        self._sec_n += 1
        self.interfaces.append(itf)

    def _nrb(self, body: int, end: int, bo: str) -> None:
        p = body
        while True:
            if end - p < 4:
                raise _Stop(f"{end - p} bytes left in the NRB < record header size 4")
            rtype, rlen = struct.unpack_from(bo + "HH", self.mm, p)
            if end - p - 4 < _pad4(rlen):
                raise _Stop(f"{end - p - 4} bytes left in the NRB < record length + padding {_pad4(rlen)}")
            if rtype == 0:
                p += 4 + _pad4(rlen)
                break
            if rtype in (1, 2):
                self._name_record(self.mm[p + 4:p + 4 + rlen], 4 if rtype == 1 else 16)
            p += 4 + _pad4(rlen)
        self._options(p, end)

    def _name_record(self, val: bytes, alen: int) -> None:
        if len(val) < alen:
            version = 4 if alen == 4 else 6
            raise _Stop(f"NRB record length for IPv{version} record {len(val)} < minimum {alen}")
        names = val[alen:]
        if names and names[-1] != 0:
            raise _Stop("NRB record has non-null-terminated host name")
        addr = str(ipaddress.ip_address(val[:alen]))
        have = self.names.setdefault(addr, [])
        for nm in names[:-1].split(b"\0") if names else []:
            text = nm.decode("utf-8", "replace")
            if text and text not in have:
                have.append(text)

    def _isb(self, body: int, end: int, bo: str) -> None:
        if end - body < 12:
            raise _Stop(f"total block length {end - body + 12} of an ISB is too small (< 24)")
        local, hi, lo = struct.unpack_from(bo + "III", self.mm, body)
        opts = self._options(body + 12, end)
        if local >= self._sec_n:
            return   # tshark ignores it too
        g = self._sec_base + local
        rec = self.if_stats.setdefault(g, {})
        rec["ts_ns"] = self._one_ts(g, (hi << 32) | lo)
        for code, val in opts:
            if code in _ISB_COUNTERS and len(val) == 8:
                rec[_ISB_COUNTERS[code]] = struct.unpack(bo + "Q", val)[0]
            elif code in (2, 3) and len(val) == 8:
                h, l_ = struct.unpack(bo + "II", val)
                rec["starttime_ns" if code == 2 else "endtime_ns"] = self._one_ts(g, (h << 32) | l_)

    def _one_ts(self, g: int, ticks: int) -> int:
        return int(self._ts(np.array([ticks], dtype=np.uint64), g)[0])

    def _options(self, p: int, end: int) -> list[tuple[int, bytes]]:
        """Return (code, value) of the options in [p, end); never reads past end."""
        out = []
        bo = self.bo
        while p < end:
            if end - p < 4:
                raise _Stop("not enough data for option header")
            code, olen = struct.unpack_from(bo + "HH", self.mm, p)
            if code == 0:
                break
            if end - p - 4 < _pad4(olen):
                raise _Stop(f"not enough data to handle option of length {olen}")
            if code in _CUSTOM_OPTIONS and olen < 4:
                raise _Stop(f"option length ({olen}) too small for custom option")
            out.append((code, self.mm[p + 4:p + 4 + olen]))
            p += 4 + _pad4(olen)
        return out


def _wrap64(v: int) -> np.int64:
    # a fuzzed if_tsoffset can exceed int64 once in ns: wrap like the rest of the arithmetic
    return np.int64((v + 2**63) % 2**64 - 2**63)


def _name(btype: int) -> str:
    return BLOCK_NAMES.get(btype, f"0x{btype:08x}")


def _ratio(base: int, exp: int) -> tuple[int, int]:
    """Return (num, den) with ns = ticks * num // den for a resolution of base**-exp seconds."""
    num, den = 10**9, base**exp
    g = gcd(num, den)
    return num // g, den // g
