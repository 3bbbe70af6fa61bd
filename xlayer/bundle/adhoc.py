"""A bundle made in memory from capture files named on the command line: `xlayer analyze a.pcap b.pcapng`.

No `bundle.json` and no file is written: the Bundle lives in memory, its directory (`Bundle.path`) is the
deepest directory holding every named file (their real paths, so no symbolic link is met on the way),
and each capture is named by its path below it.  `Bundle.file_path` then checks every file as it does
for a bundle on disk, and nothing but the named files is read.

What each file is comes from its content: pcap and pcapng files (gzipped or not) by their link types --
an 802.11 link type (radiotap, Prism, AVS, PPI, bare 802.11) makes an "air" capture, Ethernet, raw IP,
Linux cooked, loopback and BSD null a "wired" one -- and host TCP state (`ss -tin` text, tcp_info JSON
lines, iperf3 JSON, flent) a "tcp_state" one.  A capture's vantage is its file name without the
capture suffixes, made a valid vantage name and unique; each vantage has its own clock (nothing says
two files were stamped by one).
"""
from __future__ import annotations

import os
import re
import shlex
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from parsers.formats.detect import (
    GZIP_MAGIC,
    HEAD_BYTES,
    PCAPNG_BYTE_ORDERS,
    PCAPNG_MAGIC,
    guess_format_bytes,
    pcap_magic,
)
from xlayer.bundle.manifest import (
    MANIFEST,
    Bundle,
    BundleError,
    CaptureEntry,
    check_bundle,
    open_regular,
)
from xlayer.bundle.tables import guess_format

AIR_LINKTYPES = frozenset({105, 119, 127, 163, 192})            # 802.11, Prism, radiotap, AVS, PPI
WIRED_LINKTYPES = frozenset({0, 1, 12, 14, 101, 108, 113, 228, 229, 276})   # null, Ethernet, raw IP, SLL...
_SUFFIXES = (".gz", ".pcapng", ".pcap", ".cap", ".dump", ".ntar", ".txt", ".log", ".jsonl", ".json")
_NOT_VANTAGE = re.compile(r"[^A-Za-z0-9_.-]+")
_KIND_OPTION = {"air": "--air", "wired": "--wired", "tcp_state": "--tcp-state"}
_KINDS = tuple(_KIND_OPTION)


@dataclass
class AdHocBundle:
    """A bundle of capture files named one by one: the Bundle, and each capture's path as it was given."""

    bundle: Bundle
    given: list[str]        # per capture, in bundle order: the path the user typed

    def announcement(self) -> str:
        """Return the one line saying the files are read as a temporary bundle, and how to keep it."""
        pairs = list(zip(self.bundle.captures, self.given))
        by_kind: dict[str, list[str]] = {}
        for e, g in sorted(pairs, key=lambda p: _KINDS.index(p[0].kind)):
            on = "" if e.clock == e.vantage else f" on the clock of {self._file_of(e.clock)}"
            by_kind.setdefault(e.kind.replace("_", " "), []).append(os.path.basename(g) + on)
        what = "; ".join(f"{k}: {', '.join(names)}" for k, names in by_kind.items())
        n = len(pairs)
        keep = [f"{_KIND_OPTION[e.kind]} {shlex.quote(e.vantage + '=' + g)}" for e, g in pairs]
        keep += [f"--clock {shlex.quote(f'{e.vantage}={e.clock}')}" for e, _ in pairs if e.clock != e.vantage]
        return (f"no bundle given: reading {n} capture{'s' if n != 1 else ''} as a temporary bundle ({what}); "
                f"to keep it: xlayer bundle new DIR {' '.join(keep)}")

    def _file_of(self, clock: str) -> str:
        return next(os.path.basename(g) for e, g in zip(self.bundle.captures, self.given) if e.vantage == clock)

    def title(self) -> str:
        """Return the captures' file names, for a page title."""
        return ", ".join(os.path.basename(g) for g in self.given)


def is_bundle_path(path: str) -> bool:
    """Return True if `path` names a bundle (a directory, or a file called bundle.json), not a capture."""
    return os.path.isdir(path) or os.path.basename(os.path.normpath(path)) == MANIFEST


def adhoc_bundle(paths: Sequence[str]) -> AdHocBundle:
    """Return an in-memory bundle of the capture files `paths`; raise BundleError (one line) naming a bad one."""
    if not paths:
        raise BundleError("no bundle and no capture file given")
    real: list[str] = []
    for p in paths:
        if not os.path.lexists(p):
            raise BundleError(f"{p}: no such file or directory")
        if is_bundle_path(p):
            raise BundleError(f"{p}: a bundle; give one bundle, or capture files without a bundle, not both")
        # real paths: the bundle's directory and every name below it then go through no symbolic link
        r = os.path.realpath(p)
        if r in real:
            raise BundleError(f"{p}: given twice")
        real.append(r)
    root = os.path.commonpath([os.path.dirname(r) for r in real])
    names: set[str] = set()
    captures = []
    for p, r in zip(paths, real):
        kind, fmt = capture_kind(p)
        captures.append(CaptureEntry(kind=kind, vantage=_unique(vantage_name(p), names),
                                     file=os.path.relpath(r, root), format=fmt))
    _host_clocks(captures)
    bundle = Bundle(captures=captures, path=Path(root))
    check_bundle(bundle, "the captures given")
    return AdHocBundle(bundle, list(paths))


def _host_clocks(captures: list[CaptureEntry]) -> None:
    """Put each host-state file on the clock of the one packet capture whose name starts with the same
    word (server-ss.txt, server.pcapng: one host): a state file on a clock of its own cannot be aligned."""
    packets = [c for c in captures if c.is_packets]
    for c in captures:
        if c.is_packets:
            continue
        same = [p for p in packets if _first_word(p.vantage) == _first_word(c.vantage)]
        if len(same) == 1:
            c.clock = same[0].clock


def _first_word(name: str) -> str:
    return re.split(r"[-_.]", name.lower(), maxsplit=1)[0]


def vantage_name(path: str) -> str:
    """Return a valid vantage name from a file name: capture suffixes dropped, other characters made '_'."""
    name = os.path.basename(path)
    lowered = True
    while lowered:
        lowered = False
        for suf in _SUFFIXES:
            if name.lower().endswith(suf) and len(name) > len(suf):
                name, lowered = name[:-len(suf)], True
    name = _NOT_VANTAGE.sub("_", name).lstrip("_.-")[:64]
    return name or "capture"


def _unique(name: str, taken: set[str]) -> str:
    out, n = name, 1
    while out in taken:
        n += 1
        tail = f"-{n}"
        out = name[:64 - len(tail)] + tail
    taken.add(out)
    return out


def capture_kind(path: str) -> tuple[str, str]:
    """Return (kind, format) of a capture file from its content; raise BundleError (one line) if unusable."""
    with open_regular(path) as fh:     # a FIFO or a device is refused without being opened
        try:
            head = fh.read(HEAD_BYTES)
        except OSError as exc:
            raise BundleError(f"{path}: cannot read: {exc.strerror or exc}") from None
    fmt = None
    if head[:2] == GZIP_MAGIC:
        head = _gunzip_head(head)
        if not head:
            raise BundleError(f"{path}: a gzip file that does not decompress (corrupt, or not gzip)")
        fmt = guess_format_bytes(head)
    if fmt is None:
        fmt = _state_format(path)       # everything else, flent's gzipped JSON included
    if fmt is None:
        raise BundleError(f"{path}: cannot tell what it is: not a pcap or pcapng capture (gzipped or not), "
                          "nor ss text, tcp_info JSON lines, iperf3 JSON or flent data")
    if fmt not in ("pcap", "pcapng"):
        return "tcp_state", fmt
    if fmt == "pcap" and pcap_magic(head) is None:
        raise BundleError(f"{path}: a modified (Kuznetzov) pcap file, which xlayer does not read; convert it "
                          "first (editcap -F pcap)")
    return _kind_of_linktypes(path, _linktypes(head, fmt)), fmt


def _gunzip_head(data: bytes) -> bytes:
    """Return the first HEAD_BYTES that a gzip stream starting with `data` unpacks to (b'' if corrupt)."""
    try:
        return zlib.decompressobj(wbits=16 + zlib.MAX_WBITS).decompress(data, HEAD_BYTES)
    except zlib.error:
        return b""


def _state_format(path: str) -> str | None:
    try:
        return guess_format(path)
    except BundleError:
        return None


def _linktypes(head: bytes, fmt: str) -> set[int]:
    """Return the link types the first bytes of a pcap or pcapng file declare (empty if none there)."""
    if fmt == "pcap":
        magic = pcap_magic(head)
        if magic is None or len(head) < 24:
            return set()
        return {struct.unpack_from(f"{magic.byte_order}I", head, 20)[0] & 0xFFFF}
    out: set[int] = set()
    pos, order = 0, "<"
    while pos + 12 <= len(head):
        if head[pos:pos + 4] == PCAPNG_MAGIC:
            order = PCAPNG_BYTE_ORDERS.get(head[pos + 8:pos + 12], order)
        btype, blen = struct.unpack_from(f"{order}II", head, pos)
        if btype == 1 and pos + 10 <= len(head):
            out.add(struct.unpack_from(f"{order}H", head, pos + 8)[0])
        elif btype in (2, 3, 6) and out:
            break       # packets follow their interfaces: those described so far are the capture's
        if blen < 12 or blen % 4:
            break
        pos += blen
    return out


def _kind_of_linktypes(path: str, linktypes: set[int]) -> str:
    from parsers.decode.registry import linktype_name

    named = ", ".join(f"{lt} ({linktype_name(lt)})" for lt in sorted(linktypes))
    air, wired = linktypes & AIR_LINKTYPES, linktypes & WIRED_LINKTYPES
    if not linktypes:
        raise BundleError(f"{path}: no interface described in its first {HEAD_BYTES // 1024} kB: cannot tell an "
                          "air capture from a wired one; make a bundle (xlayer bundle new DIR --air or --wired "
                          "VANTAGE=FILE)")
    if linktypes - AIR_LINKTYPES - WIRED_LINKTYPES:
        raise BundleError(f"{path}: link type {named}: not one xlayer reads (802.11 with or without a radio "
                          "header, Ethernet, raw IP, Linux cooked, loopback)")
    if air and wired:
        raise BundleError(f"{path}: both 802.11 and wired link types ({named}): make a bundle saying which it is "
                          "(xlayer bundle new DIR --air or --wired VANTAGE=FILE)")
    return "air" if air else "wired"


__all__ = ["AIR_LINKTYPES", "WIRED_LINKTYPES", "AdHocBundle", "adhoc_bundle", "capture_kind", "is_bundle_path",
           "vantage_name"]
