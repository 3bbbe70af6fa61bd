"""The host TCP state table's schema: every column's name, dtype, unit and meaning, written once.

One row per socket per sample, whatever the source: `ss -tin` text (`parsers.hoststate.ss`), our tcp_info JSON
lines (`parsers.hoststate.tcpinfo`), `iperf3 -J` intervals (`parsers.hoststate.iperf3`) and flent socket stats
(`parsers.hoststate.iperf3.read_flent`).  A column is null where the source did not give the value; ss prints
nothing for most zero-valued counters (`bytes_retrans`, `lost`, `lastsnd` ...), so from ss a null
counter usually means 0 while the socket had tcp_info, and unknown when it had none (TIME-WAIT).

Units are base units, written in the column name where it has one: ``_us`` microseconds, ``_ms``
milliseconds, ``_bps`` bits per second (decimal: 1 Mbps = 1e6 bps), ``bytes`` bytes, ``segments``
MSS-sized segments.  Times are int64 because the kernel keeps them as integer µs or ms; ss prints
``rtt:5.07/0.701`` in ms with ``%g`` and we multiply back: exact below 1 s, and since ``%g`` keeps
6 digits, in 10 µs steps from 1 s and 100 µs steps from 10 s.
Counters are int64 rather than unsigned so that differences between samples never wrap.

Addresses are plain text as Python's ``ipaddress`` prints them: ss's ``[2001:db8::1]`` brackets are
removed and v4-mapped ``::ffff:10.0.0.1`` becomes ``10.0.0.1``; a wildcard is ``*``.  Timestamps are
int64 nanoseconds since the Unix epoch.

Bounded reading: the line readers (ss, tcp_info JSON lines) never hold a line longer than
`MAX_LINE_BYTES`: such a line is skipped while it is read and counted as unreadable (`LINE_TOO_LONG`).
A whole JSON document (iperf3 ``-J`` or ``--json-stream``, flent) is read only up to `MAX_JSON_BYTES`,
and compressed input is decompressed only up to `parsers.formats.containers.decompressed_cap`; past
either, the rest is counted as unreadable rather than read.
"""
from __future__ import annotations

import gzip
import io
import ipaddress
import math
import os
import re
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from decimal import Decimal

import polars as pl

import parsers.schema as _packet_schema
from parsers.formats.containers import CappedReader, DecompressionLimit, decompressed_cap
from parsers.schema import Column

# No host-state line is anywhere near this long (an ss socket with every option is ~2 KB, a tcp_info
# object ~3 KB); a longer one is crafted or corrupt, and holding it whole costs many times its size.
MAX_LINE_BYTES = 1 << 20
# iperf3 -J of an hour of 1 s intervals over 8 streams is ~20 MB, a flent file a few MB decompressed;
# parsing a JSON document takes ~10x its size in memory.
MAX_JSON_BYTES = 64 << 20
LINE_TOO_LONG = f"line longer than {MAX_LINE_BYTES:,} bytes, skipped"


_C = Column
_I = pl.Int64
_F = pl.Float64
_B = pl.Boolean
_S = pl.Utf8

COLUMNS: tuple[Column, ...] = (
    # --- sample identity ---
    _C("ts_ns", _I, "ns", "sample time, ns since the Unix epoch (ss: the sampler's `# <epoch>` line; "
       "null for ss text before the first such line unless the caller gives one)"),
    _C("vantage", _S, "", "where the sample was taken, as named by the caller (e.g. 'server', 'ap-uplink')"),
    _C("source", _S, "", "reader that made the row: ss, tcpinfo, iperf3, flent"),
    _C("line_no", _I, "", "1-based line of the socket's first line (ss), of the JSON object (tcpinfo), "
       "or interval index (iperf3, flent): where to look in the source file"),
    _C("label", _S, "", "the source's own name for the flow (iperf3 'socket 5', flent series name)"),
    # --- socket ---
    _C("src", _S, "", "local address"),
    _C("sport", pl.UInt16, "", "local port"),
    _C("dst", _S, "", "peer address"),
    _C("dport", pl.UInt16, "", "peer port"),
    _C("dev", _S, "", "interface the socket is bound to (ss `addr%dev:port`)"),
    _C("state", _S, "", "TCP state as ss names it: ESTAB, SYN-SENT, SYN-RECV, FIN-WAIT-1, FIN-WAIT-2, "
       "TIME-WAIT, CLOSE-WAIT, LAST-ACK, LISTEN, CLOSING, UNCONN"),
    _C("recv_q", _I, "bytes", "Recv-Q: unread bytes (LISTEN: connections waiting for accept())"),
    _C("send_q", _I, "bytes", "Send-Q: unacknowledged + unsent bytes (LISTEN: the accept backlog)"),
    # --- options and congestion control ---
    _C("cc", _S, "", "congestion control algorithm: cubic, bbr, reno, ..."),
    _C("has_ts", _B, "", "timestamps negotiated (ss prints it only with -o; null when not knowable)"),
    _C("has_sack", _B, "", "SACK negotiated (ss: only with -o)"),
    _C("has_ecn", _B, "", "ECN negotiated (ss: only with -o)"),
    _C("ecnseen", _B, "", "an ECT codepoint was received (ss: only with -o)"),
    _C("fastopen", _B, "", "SYN carried data (TFO) (ss: only with -o)"),
    _C("wscale_snd", pl.UInt8, "", "send window scale shift"),
    _C("wscale_rcv", pl.UInt8, "", "receive window scale shift"),
    # --- timers and RTT ---
    _C("rto_us", _I, "us", "retransmission timeout (ss omits the initial 3 s value: then null)"),
    _C("backoff", _I, "", "RTO exponential backoff count"),
    _C("srtt_us", _I, "us", "smoothed RTT (ss rtt:X/Y, X in ms)"),
    _C("rttvar_us", _I, "us", "RTT mean deviation (ss rtt:X/Y, Y in ms)"),
    _C("minrtt_us", _I, "us", "minimum RTT seen (windowed)"),
    _C("rcv_rtt_us", _I, "us", "receiver-side RTT estimate"),
    _C("ato_us", _I, "us", "delayed-ACK timeout"),
    _C("lastsnd_ms", _I, "ms", "time since the last data sent"),
    _C("lastrcv_ms", _I, "ms", "time since the last data received"),
    _C("lastack_ms", _I, "ms", "time since the last ACK received"),
    # --- sizes and windows ---
    _C("mss", _I, "bytes", "send MSS"),
    _C("pmtu", _I, "bytes", "path MTU"),
    _C("rcvmss", _I, "bytes", "MSS estimated for the peer's sends"),
    _C("advmss", _I, "bytes", "MSS advertised to the peer"),
    _C("cwnd", _I, "segments", "congestion window"),
    _C("ssthresh", _I, "segments", "slow-start threshold (null while 'infinite': ss omits values >= 65535)"),
    _C("snd_cwnd_bytes", _I, "bytes", "congestion window in bytes (iperf3 snd_cwnd = cwnd * mss)"),
    _C("rcv_space", _I, "bytes", "receive-buffer autotuning estimate of the peer's window need"),
    _C("rcv_ssthresh", _I, "bytes", "current window clamp (receive slow-start threshold)"),
    _C("snd_wnd", _I, "bytes", "peer's advertised receive window, scaled"),
    _C("rcv_wnd", _I, "bytes", "our advertised receive window, scaled"),
    _C("notsent", _I, "bytes", "bytes in the send queue not yet sent"),
    # --- counters ---
    _C("bytes_sent", _I, "bytes", "bytes sent including retransmissions"),
    _C("bytes_acked", _I, "bytes", "bytes acknowledged (RFC 4898 tcpEStatsAppHCThruOctetsAcked)"),
    _C("bytes_received", _I, "bytes", "bytes received in order (RFC 4898 tcpEStatsAppHCThruOctetsReceived)"),
    _C("bytes_retrans", _I, "bytes", "bytes retransmitted"),
    _C("segs_out", _I, "segments", "segments sent, including pure ACKs and retransmissions"),
    _C("segs_in", _I, "segments", "segments received"),
    _C("data_segs_out", _I, "segments", "segments sent carrying data"),
    _C("data_segs_in", _I, "segments", "segments received carrying data"),
    _C("retrans_cur", _I, "segments", "retransmitted segments not yet acknowledged (ss retrans:a/b, a)"),
    _C("retrans_total", _I, "segments", "retransmissions over the connection's life (ss retrans:a/b, b)"),
    _C("retransmits_interval", _I, "segments", "retransmissions during the sample interval (iperf3)"),
    _C("lost", _I, "segments", "segments presumed lost and not yet retransmitted"),
    _C("unacked", _I, "segments", "segments in flight (sent, not yet cumulatively acknowledged)"),
    _C("sacked", _I, "segments", "segments selectively acknowledged"),
    _C("fackets", _I, "segments", "forward-acknowledged segments (kernels before 4.15)"),
    _C("reordering", _I, "segments", "reordering degree estimate (ss omits the default 3: then null)"),
    _C("reord_seen", _I, "", "reordering events seen"),
    _C("dsack_dups", _I, "segments", "duplicate segments reported by D-SACK (spurious retransmissions)"),
    _C("rcv_ooopack", _I, "segments", "out-of-order segments received"),
    _C("delivered", _I, "segments", "segments delivered (acked or sacked), including retransmissions"),
    _C("delivered_ce", _I, "segments", "delivered segments that carried ECN CE marks"),
    _C("total_rto", _I, "", "RTO timeouts over the connection's life (tcp_info, kernel >= 6.7)"),
    _C("total_rto_recoveries", _I, "", "RTO recovery episodes (tcp_info, kernel >= 6.7)"),
    _C("total_rto_time_ms", _I, "ms", "time spent in RTO recovery (tcp_info, kernel >= 6.7)"),
    # --- rates ---
    _C("send_bps", _F, "bit/s", "ss: cwnd*mss*8/srtt, the rate the window allows; iperf3/flent: the "
       "application's measured send throughput over the interval"),
    _C("recv_bps", _F, "bit/s", "application receive throughput over the interval (iperf3 receiver, "
       "flent download)"),
    _C("pacing_rate_bps", _F, "bit/s", "current pacing rate"),
    _C("pacing_rate_max_bps", _F, "bit/s", "pacing rate cap (SO_MAX_PACING_RATE), when set"),
    _C("delivery_rate_bps", _F, "bit/s", "most recent delivery-rate sample"),
    _C("app_limited", _B, "", "the delivery-rate sample was application-limited (ss prints the flag "
       "only when true: false when the socket had tcp_info)"),
    _C("interval_bytes", _I, "bytes", "application bytes in the interval (iperf3)"),
    _C("interval_s", _F, "s", "length of the interval the row summarises (iperf3, flent throughput)"),
    # --- limits: who held the sender back ---
    _C("busy_us", _I, "us", "time with data in flight (ss prints whole ms: truncated to 1000 us)"),
    _C("rwnd_limited_us", _I, "us", "busy time limited by the peer's receive window (ss: whole ms)"),
    _C("sndbuf_limited_us", _I, "us", "busy time limited by our send buffer (ss: whole ms)"),
    # --- BBR ---
    _C("bbr_bw_bps", _F, "bit/s", "BBR bottleneck bandwidth estimate"),
    _C("bbr_min_rtt_us", _I, "us", "BBR min RTT estimate (mrtt)"),
    _C("bbr_pacing_gain", _F, "", "BBR pacing gain"),
    _C("bbr_cwnd_gain", _F, "", "BBR cwnd gain"),
    # --- socket memory (ss -m skmem:(...)) ---
    _C("skmem_r", _I, "bytes", "receive queue memory allocated (rmem_alloc)"),
    _C("skmem_rb", _I, "bytes", "receive buffer size (SO_RCVBUF)"),
    _C("skmem_t", _I, "bytes", "transmit memory allocated (wmem_alloc)"),
    _C("skmem_tb", _I, "bytes", "send buffer size (SO_SNDBUF)"),
    _C("skmem_f", _I, "bytes", "forward-allocated memory"),
    _C("skmem_w", _I, "bytes", "send queue memory queued (wmem_queued)"),
    _C("skmem_o", _I, "bytes", "option memory"),
    _C("skmem_bl", _I, "bytes", "backlog queue memory"),
    _C("skmem_d", _I, "", "packets dropped before reaching the socket"),
    # --- leftovers ---
    _C("extra", _S, "", "every token the reader did not recognise, space-joined (ss), or key=value "
       "pairs (JSON sources); null when everything was recognised"),
    _C("malformed", _S, "", "null, or why part of the row could not be read (the raw token is in extra)"),
)

SCHEMA: dict[str, pl.DataType] = {c.name: c.dtype for c in COLUMNS}
NAMES: tuple[str, ...] = tuple(SCHEMA)
BY_NAME: dict[str, Column] = {c.name: c for c in COLUMNS}

# ss prints these TCP state names (iproute2 misc/ss.c sstate_name); tcp_info numbers them 1..12.
TCP_STATES: tuple[str, ...] = (
    "UNKNOWN", "ESTAB", "SYN-SENT", "SYN-RECV", "FIN-WAIT-1", "FIN-WAIT-2", "TIME-WAIT",
    "UNCONN", "CLOSE-WAIT", "LAST-ACK", "LISTEN", "CLOSING", "NEW-SYN-RECV",
)


@dataclass
class ReadStats:
    """What one host-state reader found: every input line is a row, skipped on purpose, or counted as
    malformed (with the first few examples), so nothing is dropped silently."""

    path: str = ""
    source: str = ""
    lines: int = 0              # input lines (or JSON records) seen
    rows: int = 0               # rows produced
    blocks: int = 0             # timestamped blocks (ss sampler format)
    header_lines: int = 0       # ss column headers, skipped
    comment_lines: int = 0      # '#' lines that are not timestamps
    blank_lines: int = 0
    malformed_lines: int = 0    # lines that could not be read at all (no row made)
    malformed_rows: int = 0     # rows made with a `malformed` reason
    untimed_rows: int = 0       # rows with no timestamp (ss text before the first '# <epoch>')
    skipped_sockets: int = 0    # non-TCP sockets in ss output (netid udp, nl, u_str ...), skipped
    reasons: Counter = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)   # "line N: reason: text", first 10
    warnings: list[str] = field(default_factory=list)

    def bad(self, line_no: int, reason: str, text: str = "") -> None:
        """Count one malformed line and keep it as an example if there are few so far."""
        self.malformed_lines += 1
        self.reasons[reason] += 1
        if len(self.examples) < 10:
            self.examples.append(f"line {line_no}: {reason}: {text[:120]!r}")

    def summary(self) -> str | None:
        """Return one line saying what could not be read (counts and main reasons) and the warnings, or
        None when everything was read."""
        bits = []
        if self.malformed_lines:
            n = self.malformed_lines
            top = ", ".join(f"{r} x{k:,}" for r, k in self.reasons.most_common(3))
            bits.append(f"{n:,} unreadable line{'s' if n != 1 else ''} ({top}), {self.rows:,} rows read")
        if self.malformed_rows:
            bits.append(f"{self.malformed_rows:,} of {self.rows:,} rows with unreadable values")
        bits += self.warnings
        return "; ".join(bits) or None

    def as_dict(self) -> dict:
        """Return the counts as plain JSON-able values."""
        d = asdict(self)
        d["reasons"] = dict(self.reasons.most_common())
        return d


class LongLine(str):
    """The decoded first bytes of an input line longer than the reader's limit; the rest of the line
    was skipped unread.  It stands for the whole line, which readers count as unreadable."""


_HEAD = 120   # bytes of a skipped line kept for the examples in ReadStats


def bounded_lines(fh, max_bytes: int | None = None) -> Iterator[bytes | LongLine]:
    """Yield the lines of binary file `fh` (split on b"\\n", newline kept) as bytes, or as a LongLine for
    a line longer than `max_bytes` (default MAX_LINE_BYTES), which is never held whole."""
    limit = MAX_LINE_BYTES if max_bytes is None else max_bytes
    while True:
        line = fh.readline(limit + 1)
        if not line:
            return
        if line.endswith(b"\n") or len(line) <= limit:
            yield line
            continue
        head = line[:_HEAD]
        # skip to the end of the line a bounded piece at a time
        while not line.endswith(b"\n"):
            line = fh.readline(1 << 20)
            if not line:
                break
        yield LongLine(head.decode("utf-8", "replace"))


def open_lines(path: str | os.PathLike, st: ReadStats, max_bytes: int | None = None) -> Iterator[bytes | LongLine]:
    """Yield `bounded_lines` of the file at `path`, decompressing a ``.gz`` one up to its cap; a
    corrupt or over-cap compressed stream ends the lines with one unreadable line (reason in `st`)."""
    name = os.fspath(path)
    if not name.endswith(".gz"):
        with open(name, "rb") as fh:
            yield from bounded_lines(fh, max_bytes)
        return
    with open(name, "rb") as raw:
        cap = decompressed_cap(os.fstat(raw.fileno()).st_size)
        fh = io.BufferedReader(CappedReader(gzip.GzipFile(fileobj=raw), cap, name), 1 << 16)
        n = 0
        try:
            for line in bounded_lines(fh, max_bytes):
                n += 1
                yield line
        except DecompressionLimit as e:
            st.bad(n + 1, f"decompresses to more than {e.cap:,} bytes (a decompression bomb?), rest not read")
        except (EOFError, OSError, zlib.error) as e:
            st.bad(n + 1, "corrupt or cut compressed stream, rest not read", str(e))


def read_document(path: str | os.PathLike, st: ReadStats, max_bytes: int | None = None) -> bytes | bytearray | None:
    """Return the bytes of a whole-document file (gunzipped if it starts with the gzip magic), or None
    when it is longer than `max_bytes` (default MAX_JSON_BYTES) or its compressed stream is corrupt or
    over its cap: then it is counted in `st` as one unreadable line, with the reason."""
    limit = MAX_JSON_BYTES if max_bytes is None else max_bytes
    with open(path, "rb") as fh:
        gzipped = fh.read(2) == b"\x1f\x8b"
        fh.seek(0)
        try:
            if gzipped:
                cap = min(limit, decompressed_cap(os.fstat(fh.fileno()).st_size))
                data = _read_all(CappedReader(gzip.GzipFile(fileobj=fh), cap, os.fspath(path)))
            else:
                data = fh.read(limit + 1)
        except DecompressionLimit as e:
            return _unreadable_document(st, f"decompresses to more than {e.cap:,} bytes (a decompression bomb?), "
                                        "not read", "")
        except (EOFError, OSError, zlib.error) as e:
            return _unreadable_document(st, f"corrupt compressed stream ({e})", "")
    if len(data) > limit:
        return _unreadable_document(st, f"larger than {limit:,} bytes, not read", "")
    return data


def _read_all(src) -> bytearray:
    # grown in place: no second copy of the whole document at the end (io's readall makes one)
    data = bytearray()
    while block := src.read(1 << 20):
        data += block
    return data


def _unreadable_document(st: ReadStats, why: str, text: str) -> None:
    st.bad(1, why, text)


def empty_frame() -> pl.DataFrame:
    """Return a zero-row table with the host TCP state schema."""
    return pl.DataFrame(schema=SCHEMA)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _text(v: str) -> str:
    """Return `v` as valid Unicode: a lone surrogate (a JSON escape such as \\udc80) becomes U+FFFD."""
    if v.isascii():
        return v
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", v)
    return v


def frame_from_rows(rows: list[dict]) -> pl.DataFrame:
    """Return a table in the host state schema from dict rows (missing keys are null)."""
    if not rows:
        return empty_frame()
    # JSON may escape lone surrogates into a string: not text a column can hold
    rows = [{k: (_text(v) if isinstance(v, str) else v) for k, v in r.items()} for r in rows]
    return pl.DataFrame(rows, schema=SCHEMA)


def float_epoch_ns(t: float) -> int | None:
    """Return ns from a float epoch in seconds via its shortest decimal form (no binary rounding
    noise: 1588855606.65 gives ...650000000, not ...650000128), or None if it does not fit int64."""
    try:
        t = float(t)
    except (OverflowError, TypeError, ValueError):
        return None
    if not math.isfinite(t) or abs(t) >= 9.2e9:
        return None
    return int(Decimal(repr(t)) * 1_000_000_000)


def normalize_addr(text: str) -> str:
    """Return an address in plain text form: no [brackets], v4-mapped IPv6 as IPv4, IPv6 compressed.

    Text that is not an IP address (``*``, a host name) comes back unchanged, without brackets.
    """
    a = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    if ":" not in a:
        return a
    zone = ""
    if "%" in a:
        a, zone = a.split("%", 1)
        zone = "%" + zone
    try:
        ip = ipaddress.IPv6Address(a)
    except ValueError:
        return a + zone
    if ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip) + zone


def markdown_table() -> str:
    """Return the host TCP state schema as a Markdown table (for the reference pages)."""
    return _packet_schema.markdown_table(COLUMNS)


if __name__ == "__main__":
    print(markdown_table())
