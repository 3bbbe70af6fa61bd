"""`ss -tin` text to the host TCP state table (schema in `parsers.hoststate.common`).

What is read
------------
Output of iproute2's ``ss`` with ``-t -i`` (any of ``-n -o -e -m -p -a -l -H -O --tos`` too), as
versions 4.x to 6.x print it:

* a header line (``State Recv-Q Send-Q Local Address:Port Peer Address:Port Process``; 6.x glues
  ``Port`` and ``Process`` together when writing to a file); repeated headers are skipped;
* per socket a line ``STATE RECV-Q SEND-Q LOCAL PEER [first-line tokens]`` (a ``Netid`` column when
  several socket types are shown, no State column when the filter names a single state), then one or
  more tab-indented continuation lines of ``key:value`` / ``key value`` tokens; with ``-O`` all of it
  is on the socket line;
* blocks each preceded by ``# <epoch seconds>`` (``xlayer.acquire.sampler``'s format, up to ns digits, read
  exactly, no float rounding); flent's ``Time: <epoch>`` and ``---`` separators are also accepted.

Rates are printed three ways over the versions, all decimal: 4.x ``%.1fM``/``%.1fK`` (``231.7Mbps``),
5.x+ without ``-n`` ``%.3g`` with ``k``/``K``/``M``/``G``/``T`` (``9.92Mbps``, ``55Gbps``,
``1e+03kbps``), and 5.x+ with ``-n`` plain ``%.0f`` (``231711235bps``).  All become bit/s floats.

Decisions
---------
* Socket lines before the first timestamp line get ``ts_ns`` = the ``ts_ns`` argument, by default
  None (null), and are counted in ``stats.untimed_rows``.  A file's mtime is the time of its *last*
  write, so guessing from it would be wrong for all but the last block.
* Tokens that are not recognised go, in order and space-joined, to ``extra``; a recognised key whose
  value cannot be read goes to ``extra`` too and the row's ``malformed`` says why.  Lines that are
  neither header, timestamp, comment, socket nor continuation are counted in ``stats`` (with the
  first few as examples).  Nothing raises on bad text.
* A line longer than ``common.MAX_LINE_BYTES`` is skipped while it is read (never held whole) and
  counted as unreadable; if it continues a socket, that socket's row is marked malformed too.  A
  ``.gz`` file is decompressed only up to its cap (``containers.decompressed_cap``).
* ss omits zero counters, ``ssthresh`` while infinite, ``rto`` while at its initial 3 s and
  ``reordering`` when 3: those are null here (the text says nothing); `fill_unprinted_zeros` turns the
  counters of sockets that had tcp_info into zeros when that is what the analysis wants.
* Option flags (``ts sack ecn ecnseen fastopen``) are printed only with ``-o``: a row showing any of
  them has the others False; a row showing none has them null.
"""
from __future__ import annotations

import math
import os
import re
import socket
from collections.abc import Iterable, Iterator

import polars as pl

from parsers.hoststate.common import (LINE_TOO_LONG, MAX_LINE_BYTES, TCP_STATES, LongLine, ReadStats, frame_from_rows,
                                      normalize_addr, open_lines)

_STATES = frozenset(TCP_STATES)
_NETIDS = frozenset(("tcp", "mptcp", "udp", "raw", "dccp", "sctp", "u_str", "u_dgr", "u_seq", "nl",
                     "p_raw", "p_dgr", "tipc", "v_str", "v_dgr", "xdp"))
_TS_RE = re.compile(r"^(?:#|Time:)\s*(\d{1,12})(?:\.(\d+))?\s*$")
_INT_RE = re.compile(r"^-?\d{1,18}$")
_NUM_RE = re.compile(r"^\d{1,15}(?:\.\d*)?(?:[eE][+-]?\d{1,3})?$")
_RATE_RE = re.compile(r"^(\d{1,20}(?:\.\d*)?(?:[eE][+-]?\d{1,3})?)([kKMGT]?)bps$")
_RATE_MULT = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_MS_PCT_RE = re.compile(r"^(\d{1,18})ms(?:\([0-9.]+%\))?$")
_CC_RE = re.compile(r"^[a-z][a-z0-9_]*(?:-[a-z0-9_]+)*$")

# key:N where N is an integer in the column's unit already
_INT_KEYS = {
    "cwnd": "cwnd", "ssthresh": "ssthresh", "mss": "mss", "pmtu": "pmtu", "rcvmss": "rcvmss",
    "advmss": "advmss", "bytes_sent": "bytes_sent", "bytes_acked": "bytes_acked",
    "bytes_received": "bytes_received", "bytes_retrans": "bytes_retrans", "segs_out": "segs_out",
    "segs_in": "segs_in", "data_segs_out": "data_segs_out", "data_segs_in": "data_segs_in",
    "lastsnd": "lastsnd_ms", "lastrcv": "lastrcv_ms", "lastack": "lastack_ms",
    "delivered": "delivered", "delivered_ce": "delivered_ce", "unacked": "unacked", "lost": "lost",
    "sacked": "sacked", "dsack_dups": "dsack_dups", "fackets": "fackets", "reordering": "reordering",
    "reord_seen": "reord_seen", "rcv_space": "rcv_space", "rcv_ssthresh": "rcv_ssthresh",
    "notsent": "notsent", "rcv_ooopack": "rcv_ooopack", "snd_wnd": "snd_wnd", "rcv_wnd": "rcv_wnd",
    "backoff": "backoff",
}
# key:X with X in ms printed with %g, stored as integer us
_MS_KEYS = {"rto": "rto_us", "ato": "ato_us", "minrtt": "minrtt_us", "rcv_rtt": "rcv_rtt_us"}
# key:Nms[(p%)] printed as whole ms, stored as us
_MS_INT_KEYS = {"busy": "busy_us", "rwnd_limited": "rwnd_limited_us",
                "sndbuf_limited": "sndbuf_limited_us"}
_FLAGS = {"ts": "has_ts", "sack": "has_sack", "ecn": "has_ecn", "ecnseen": "ecnseen",
          "fastopen": "fastopen", "app_limited": "app_limited"}
_OPTION_FLAGS = ("has_ts", "has_sack", "has_ecn", "ecnseen", "fastopen")
_RATE_WORDS = {"send": "send_bps", "pacing_rate": "pacing_rate_bps", "delivery_rate": "delivery_rate_bps"}
_NOT_CC = frozenset(("bidir", "fallback", "remote_key"))
_SKMEM = frozenset(("r", "rb", "t", "tb", "f", "w", "o", "bl", "d"))
_INT64_MAX = 2**63 - 1
_KEYS = frozenset(_INT_KEYS) | frozenset(_MS_KEYS) | frozenset(_MS_INT_KEYS) | {
    "rtt", "retrans", "wscale", "bbr", "skmem"}

# Counters ss leaves out when zero (`if (s->x) out(...)` in misc/ss.c tcp_stats_print).
ZERO_OMITTED = (
    "bytes_sent", "bytes_retrans", "bytes_acked", "bytes_received", "segs_out", "segs_in",
    "data_segs_out", "data_segs_in", "lastsnd_ms", "lastrcv_ms", "lastack_ms", "delivered",
    "delivered_ce", "unacked", "retrans_cur", "retrans_total", "lost", "sacked", "dsack_dups",
    "reord_seen", "notsent", "rcv_ooopack", "busy_us", "rwnd_limited_us", "sndbuf_limited_us",
    "backoff",
)


def epoch_ns(int_part: str, frac: str | None) -> int:
    """Return integer ns from the two digit strings of a decimal epoch (fraction cut at 9 digits)."""
    return int(int_part) * 1_000_000_000 + int((frac or "")[:9].ljust(9, "0"))


def parse_rate(text: str) -> float | None:
    """Return bit/s from an ss rate such as ``231.7Mbps``, ``9.92Mbps``, ``1e+03kbps``, or None."""
    m = _RATE_RE.match(text)
    if m is None:
        return None
    v = float(m.group(1)) * _RATE_MULT[m.group(2)]
    return v if math.isfinite(v) else None


def _ms_to_us(text: str) -> int | None:
    if _NUM_RE.match(text) is None:
        return None
    v = float(text) * 1000.0
    # ss prints kernel integer-us values divided by 1000 with %g: round back to the integer
    return int(round(v)) if math.isfinite(v) and v <= _INT64_MAX else None


def _int(text: str) -> int | None:
    if text.isascii() and text.isdigit() and len(text) <= 18:  # the common case, without a regex
        return int(text)
    if _INT_RE.match(text) is None:
        return None
    return int(text)


def _whole_ms_to_us(text: str) -> int | None:
    m = _MS_PCT_RE.match(text)
    return None if m is None else int(m.group(1)) * 1000


# key -> (column, conversion of the value; None = malformed) for every key:value that fills one column
_VALUE_KEYS = {**{k: (c, _int) for k, c in _INT_KEYS.items()},
               **{k: (c, _ms_to_us) for k, c in _MS_KEYS.items()},
               **{k: (c, _whole_ms_to_us) for k, c in _MS_INT_KEYS.items()}}


def split_endpoint(text: str) -> tuple[str, int | None, str | None] | None:
    """Return (address, port, device) from ss's ``addr[%dev]:port``, or None if it has no port.

    Handles ``10.0.0.1:22``, ``[2001:db8::1]:22``, ``[::ffff:10.0.0.1]:22``, ``*:*``, 4.x's
    unbracketed ``:::22`` and ``::ffff:10.0.0.1:22``, and ``[fe80::1]%eth0:22``.  A port that is a
    service name (ss without -n) is looked up in the services database; unknown names give None.
    """
    host, sep, port_s = text.rpartition(":")
    if not sep or not host:
        return None
    dev = None
    if "%" in host and not host.endswith("]"):
        host, _, dev = host.partition("%")
    if port_s == "*":
        port = None
    elif port_s.isascii() and port_s.isdigit() and len(port_s) <= 5 and int(port_s) <= 65535:
        port = int(port_s)
    else:
        try:
            port = socket.getservbyname(port_s, "tcp")
        except (OSError, UnicodeError, ValueError):
            return None
    return normalize_addr(host), port, dev


def _tokens(text: str) -> list[str]:
    toks = text.split()
    if "(" not in text:
        return toks
    # keep parenthesised groups whole: users:(("a b",pid=1,fd=3)) has spaces inside
    out: list[str] = []
    buf: list[str] | None = None
    depth = 0
    for t in toks:
        d = t.count("(") - t.count(")") if "(" in t or ")" in t else 0
        if buf is None:
            if d > 0:
                buf, depth = [t], d
            else:
                out.append(t)
        else:
            buf.append(t)
            depth += d
            if depth <= 0:
                out.append(" ".join(buf))
                buf = None
    if buf is not None:  # never closed: take the plain tokens rather than swallow the line
        out.extend(buf)
    return out


class _Row:
    __slots__ = ("d", "extra", "bad")

    def __init__(self, d: dict):
        self.d = d
        self.extra: list[str] = []
        self.bad: list[str] = []

    def fail(self, reason: str, *raw: str) -> None:
        self.bad.append(reason)
        self.extra.extend(raw)

    def finish(self) -> dict:
        d = self.d
        if any(d.get(f) for f in _OPTION_FLAGS):
            for f in _OPTION_FLAGS:
                d.setdefault(f, False)
        if "app_limited" not in d and ("cc" in d or "cwnd" in d or "srtt_us" in d):
            d["app_limited"] = False
        if self.extra:
            d["extra"] = " ".join(self.extra)
        if self.bad:
            d["malformed"] = "; ".join(self.bad)
        return d


_BBR_VALUES = {"bw": ("bbr_bw_bps", parse_rate), "mrtt": ("bbr_min_rtt_us", _ms_to_us)}


def _bbr(row: _Row, tok: str, inner: str) -> None:
    unknown = []
    d = row.d
    for item in inner.split(","):
        k, sep, v = item.partition(":")
        spec = _BBR_VALUES.get(k) if sep else None
        if spec is not None:
            col, conv = spec
            x = conv(v)
            if x is None:
                row.bad.append(f"bad bbr {k} {v!r}")
                unknown.append(item)
            else:
                d[col] = x
        elif k in ("pacing_gain", "cwnd_gain") and sep and _NUM_RE.match(v):
            d["bbr_" + k] = float(v)
        else:
            unknown.append(item)
    if unknown:
        row.extra.append("bbr:(" + ",".join(unknown) + ")")


def _skmem(row: _Row, inner: str) -> None:
    unknown = []
    for item in inner.split(","):
        m = re.match(r"^([a-z]+)(\d{1,18})$", item)
        if m and m.group(1) in _SKMEM:
            row.d["skmem_" + m.group(1)] = int(m.group(2))
        else:
            unknown.append(item)
    if unknown:
        row.extra.append("skmem:(" + ",".join(unknown) + ")")


def _info_tokens(row: _Row, toks: list[str]) -> None:
    d = row.d
    i, n = 0, len(toks)
    while i < n:
        tok = toks[i]
        i += 1
        key, sep, val = tok.partition(":")
        if not sep:
            col = _FLAGS.get(tok)
            if col is not None:
                d[col] = True
            elif tok in _RATE_WORDS:
                nxt = toks[i] if i < n else ""
                main, _, cap = nxt.partition("/")
                rate = parse_rate(main)
                if rate is None:
                    row.fail(f"{tok} without a rate", tok)
                    continue
                i += 1
                d[_RATE_WORDS[tok]] = rate
                if cap:
                    capv = parse_rate(cap)
                    if capv is None or tok != "pacing_rate":
                        row.fail(f"bad {tok} cap {cap!r}", "/" + cap)
                    else:
                        d["pacing_rate_max_bps"] = capv
            elif "cc" not in d and _CC_RE.match(tok) and tok not in _NOT_CC:
                d["cc"] = tok
            else:
                row.extra.append(tok)
            continue
        if not val and key not in _KEYS:
            # `version: 1.3` style (kTLS): the value is the next token, keep both
            row.extra.append(tok)
            if key and i < n:
                row.extra.append(toks[i])
                i += 1
            continue
        spec = _VALUE_KEYS.get(key)
        if spec is not None:
            col, conv = spec
            v = conv(val)
            if v is None:
                row.fail(f"bad {key} {val!r}", tok)
            else:
                d[col] = v
            continue
        if key == "rtt":
            a, _, b = val.partition("/")
            sa, sb = _ms_to_us(a), _ms_to_us(b)
            if sa is None or sb is None:
                row.fail(f"bad rtt {val!r}", tok)
            else:
                d["srtt_us"], d["rttvar_us"] = sa, sb
        elif key in ("retrans", "wscale"):
            a, s2, b = val.replace(",", "/").partition("/")
            va, vb = _int(a), _int(b)
            if not s2 or va is None or vb is None or (key == "wscale" and not (0 <= va <= 255 and 0 <= vb <= 255)):
                row.fail(f"bad {key} {val!r}", tok)
            elif key == "retrans":
                d["retrans_cur"], d["retrans_total"] = va, vb
            else:
                d["wscale_snd"], d["wscale_rcv"] = va, vb
        elif key in ("bbr", "skmem") and val.startswith("(") and val.endswith(")"):
            if key == "bbr":
                _bbr(row, tok, val[1:-1])
            else:
                _skmem(row, val[1:-1])
        else:
            row.extra.append(tok)


def _socket_line(toks: list[str], line_no: int, base: dict) -> _Row | None:
    i = 0
    netid = None
    if len(toks) > 1 and toks[0] in _NETIDS and (toks[1] in _STATES or (toks[1].isascii() and toks[1].isdigit())):
        netid = toks[0]
        i = 1
    state = None
    if i < len(toks) and toks[i] in _STATES:
        state = toks[i]
        i += 1
    if len(toks) < i + 4:
        return None
    rq, sq = _int(toks[i]), _int(toks[i + 1])
    local, peer = split_endpoint(toks[i + 2]), split_endpoint(toks[i + 3])
    if rq is None or sq is None or local is None or peer is None:
        return None
    d = dict(base)
    d.update(line_no=line_no, state=state, recv_q=rq, send_q=sq, src=local[0], sport=local[1],
             dst=peer[0], dport=peer[1])
    if local[2]:
        d["dev"] = local[2]
    row = _Row(d)
    if netid is not None and netid != "tcp":
        row.extra.append(netid)
    _info_tokens(row, toks[i + 4:])
    return row


def _is_path(path_or_text: str | os.PathLike | bytes) -> bool:
    if isinstance(path_or_text, os.PathLike):
        return True
    return isinstance(path_or_text, str) and "\n" not in path_or_text and os.path.isfile(path_or_text)


def _file_lines(path: str, st: ReadStats) -> Iterator[str]:
    # binary lines split on b"\n" only, like str.split("\n"): line numbers mean the same
    for raw in open_lines(path, st):
        yield raw if type(raw) is LongLine else raw.decode("utf-8", "replace")


def _text_lines(text: str) -> list[str]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    # the text is in memory already, but reading a huge line would take many times its size again
    return [LongLine(ln[:120]) if len(ln) > MAX_LINE_BYTES else ln for ln in lines]


def parse_ss_lines(lines: Iterable[str], vantage: str, ts_ns: int | None = None,
                   stats: ReadStats | None = None) -> list[dict]:
    """Return one dict row per socket from lines of ss text (see the module docstring)."""
    st = stats if stats is not None else ReadStats()
    st.source = "ss"
    rows: list[dict] = []
    cur: _Row | None = None
    now = ts_ns
    base = {"vantage": vantage, "source": "ss", "ts_ns": now}

    def flush() -> None:
        nonlocal cur
        if cur is not None:
            r = cur.finish()
            if r.get("ts_ns") is None:
                st.untimed_rows += 1
            if r.get("malformed"):
                st.malformed_rows += 1
            rows.append(r)
            cur = None

    skipping = False  # inside a non-TCP socket's lines
    for line_no, raw in enumerate(lines, 1):
        st.lines += 1
        if type(raw) is LongLine:
            st.bad(line_no, LINE_TOO_LONG, raw)
            if raw[:1] in ("\t", " "):
                if cur is not None:    # the socket's row lacks what that line said
                    cur.fail(LINE_TOO_LONG)
            else:
                flush()
                skipping = False
            continue
        line = raw.rstrip("\r\n")
        if skipping and line[:1] in ("\t", " "):
            continue
        skipping = False
        if line[:1] in ("\t", " ") and cur is not None:
            # continuation of the current socket (an all-blank one is a TIME-WAIT socket's)
            if line.strip():
                _info_tokens(cur, _tokens(line))
            continue
        s = line.strip()
        if not s:
            st.blank_lines += 1
            continue
        if s[0] == "#" or s.startswith("Time:"):
            flush()
            m = _TS_RE.match(s)
            if m is not None and int(m.group(1)) < 9_000_000_000:
                now = epoch_ns(m.group(1), m.group(2))
                base = {"vantage": vantage, "source": "ss", "ts_ns": now}
                st.blocks += 1
            elif m is not None:
                st.bad(line_no, "timestamp out of range", line)
            else:
                st.comment_lines += 1
            continue
        if s == "---":
            flush()
            st.comment_lines += 1
            continue
        toks = _tokens(s)
        if "Recv-Q" in toks and "Send-Q" in toks:
            flush()
            st.header_lines += 1
            continue
        if line[:1] in ("\t", " "):
            st.bad(line_no, "continuation line without a socket line", line)
            continue
        flush()
        if toks[0] in _NETIDS and toks[0] not in ("tcp", "mptcp"):
            st.skipped_sockets += 1
            skipping = True
            continue
        row = _socket_line(toks, line_no, base)
        if row is None:
            st.bad(line_no, "not an ss socket line", line)
            continue
        cur = row
    flush()
    st.rows += len(rows)
    return rows


def read_ss(path_or_text: str | os.PathLike | bytes, vantage: str, *, ts_ns: int | None = None,
            stats: ReadStats | None = None) -> pl.DataFrame:
    """Return the host TCP state table of `ss -tin` / `ss -tinO` text, one row per socket per block.

    `path_or_text`: a path (str or PathLike; ``.gz`` is decompressed, up to its cap), or the text
    itself (a str with a newline, or bytes).  Lines longer than ``MAX_LINE_BYTES`` are skipped unread.  `ts_ns` times the sockets printed before the first ``# <epoch>``
    line (default: null).  Counts of what was read, skipped and malformed go to `stats`.
    """
    st = stats if stats is not None else ReadStats()
    if _is_path(path_or_text):
        st.path = os.fspath(path_or_text)
        lines: Iterable[str] = _file_lines(st.path, st)
    elif isinstance(path_or_text, bytes):
        lines = _text_lines(path_or_text.decode("utf-8", "replace"))
    else:
        lines = _text_lines(path_or_text)
    return frame_from_rows(parse_ss_lines(lines, vantage, ts_ns, st))


def fill_unprinted_zeros(df: pl.DataFrame) -> pl.DataFrame:
    """Return `df` with the counters ss omits when zero set to 0 (and reordering to 3) on ss rows
    of sockets that had tcp_info (cc known); other rows are left as they are.

    ss cannot tell "zero" from "this kernel does not report it", so only use this when the kernel
    that produced the text had the fields (bytes_sent, dsack_dups ... need 4.19+, rcv_ooopack 5.4+).
    """
    had_info = (pl.col("source") == "ss") & pl.col("cc").is_not_null()
    exprs = [pl.when(had_info & pl.col(c).is_null()).then(0).otherwise(pl.col(c)).cast(df.schema[c]).alias(c)
             for c in ZERO_OMITTED]
    exprs.append(pl.when(had_info & pl.col("reordering").is_null()).then(3)
                 .otherwise(pl.col("reordering")).cast(df.schema["reordering"]).alias("reordering"))
    return df.with_columns(exprs)
