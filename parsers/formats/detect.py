"""What format a file is in, from its first bytes: the one table of capture magic numbers, and host-state text.

Pure on bytes.  `PCAP_MAGICS` (classic pcap, both byte orders, micro- and nanosecond stamps, and the
modified-pcap variant), `PCAPNG_MAGIC` and `PCAPNG_BYTE_ORDERS` are what every reader and writer of
xlayer checks against (`pcap_magic` for the pcap files we read record by record).
"""
from __future__ import annotations

import json
import re
import zlib
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple


class PcapMagic(NamedTuple):
    """What the first four bytes of a classic pcap file say."""

    byte_order: str         # "<" or ">": the order of every header field in the file
    nanosecond: bool        # time stamp fractions in ns (else us)
    modified: bool = False  # Kuznetzov's modified pcap (24-byte record headers): recognised, not read


PCAP_MAGICS = {
    b"\xd4\xc3\xb2\xa1": PcapMagic("<", False), b"\xa1\xb2\xc3\xd4": PcapMagic(">", False),
    b"\x4d\x3c\xb2\xa1": PcapMagic("<", True), b"\xa1\xb2\x3c\x4d": PcapMagic(">", True),
    b"\x34\xcd\xb2\xa1": PcapMagic("<", False, True), b"\xa1\xb2\xcd\x34": PcapMagic(">", False, True),
}
PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"    # the section header block's type: the same in either byte order
PCAPNG_BYTE_ORDERS = {b"\x4d\x3c\x2b\x1a": "<", b"\x1a\x2b\x3c\x4d": ">"}   # its byte-order magic
GZIP_MAGIC = b"\x1f\x8b"
_SS_HEADER = re.compile(rb"^(Netid\s+)?State\s+Recv-Q\s+Send-Q", re.M)
_SS_STAMP = re.compile(rb"^#\s*\d{9,}(\.\d+)?\s*$", re.M)
# `ss -tinH` prints no header: a socket line starts with a state name and the two queue sizes.
_SS_SOCKET = re.compile(rb"^(ESTAB|SYN-SENT|SYN-RECV|FIN-WAIT-[12]|TIME-WAIT|CLOSE-WAIT|LAST-ACK|LISTEN|"
                        rb"CLOSING|UNCONN|NEW-SYN-RECV)\s+\d+\s+\d+\s")
HEAD_BYTES = 64 << 10      # what a caller reads to decide
WHOLE_MAX = 256 << 20   # iperf3 and flent results are far smaller; anything bigger is not one


def pcap_magic(head: bytes) -> PcapMagic | None:
    """Return what the magic number of a classic pcap file starting with `head` says, or None if it is
    not one whose records we read (another format, or modified pcap)."""
    magic = PCAP_MAGICS.get(bytes(head[:4]))
    return None if magic is None or magic.modified else magic


def guess_format_bytes(head: bytes, whole: Callable[[], bytes] | None = None) -> str | None:
    """Return the format a file starting with `head` is in, or None; `whole` gives all bytes if needed."""
    if head[:4] in PCAP_MAGICS:
        return "pcap"
    if head[:4] == PCAPNG_MAGIC:
        return "pcapng"
    if head[:2] == GZIP_MAGIC:
        # A gzipped capture is read as its capture format (the readers unpack gzip as they go); flent
        # stores its results as gzipped JSON.  Look inside rather than trust the name.
        try:
            inner = _gunzip_capped(head, 8)
        except zlib.error:
            return None
        if inner[:4] in PCAP_MAGICS:
            return "pcap"
        if inner[:4] == PCAPNG_MAGIC:
            return "pcapng"
        try:
            inner = _gunzip_capped(whole() if whole is not None else head, WHOLE_MAX)
        except zlib.error:
            return None
        return "flent" if _json_kind(inner) == "flent" else None
    # tcp_info JSON lines may open with '#' comment lines; ss text with '# <epoch>' stamps.
    first = next((ln.strip() for ln in head.splitlines()
                  if ln.strip() and not ln.lstrip().startswith(b"#")), b"")
    if first.startswith(b"{"):
        try:
            obj = json.loads(first)
        except ValueError:
            obj = None   # a JSON document spread over lines (iperf3 -J), or a line longer than head
        if isinstance(obj, dict):
            kind = _object_kind(obj)
            if kind is not None:
                return kind
            if _looks_like_tcpinfo(obj):
                return "tcpinfo-jsonl"
        return _json_kind(whole() if whole is not None else head)
    if _SS_HEADER.search(head) or _SS_STAMP.search(head) or _SS_SOCKET.match(first):
        return "ss"
    return None


def _gunzip_capped(data: bytes, limit: int) -> bytes:
    # A bounded inflate: a small hostile .gz must not expand into all of memory just to be guessed.
    d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    return d.decompress(data, limit)


def _looks_like_tcpinfo(obj: dict[str, Any]) -> bool:
    if any(str(k).startswith("tcpi_") for k in _keys_deep(obj)):
        return True
    # parsers.hoststate.tcpinfo allows the tcpi_ prefix to be left out; a timestamp plus a socket still says it.
    return ("ts_ns" in obj or "ts" in obj) and any(k in obj for k in ("sport", "dport", "state"))


def _keys_deep(obj: Any, depth: int = 0) -> Iterator[str]:
    # tcp_info may be nested one level down ({"ts": .., "tcp_info": {"tcpi_rtt": ..}}).
    if isinstance(obj, dict) and depth < 3:
        for k, v in obj.items():
            yield k
            yield from _keys_deep(v, depth + 1)


def _json_kind(data: bytes) -> str | None:
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return _object_kind(obj) if isinstance(obj, dict) else None


def _object_kind(obj: dict[str, Any]) -> str | None:
    if "start" in obj and "intervals" in obj:
        return "iperf3-json"
    if "metadata" in obj and ("raw_values" in obj or "results" in obj or "x_values" in obj):
        return "flent"
    return None
