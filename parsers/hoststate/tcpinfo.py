"""tcp_info JSON lines to the host TCP state table (schema in `parsers.hoststate.common`).

The format (ours; any tool that can call ``getsockopt(TCP_INFO)`` or read ``INET_DIAG_INFO`` can
write it): UTF-8 text, one JSON object per line, one object per socket per sample.  Blank lines and
lines starting with ``#`` are skipped.  Keys:

``ts_ns``       sample time, integer ns since the Unix epoch; or
``ts``          the same in seconds: a number, or a decimal string read exactly (``"1718000000.123456789"``)
``src`` ``sport`` ``dst`` ``dport``
                the socket's 4-tuple, local side first (addresses as text, ports as integers)
``state``       ss's state name (``"ESTAB"``) or the kernel's ``tcpi_state`` number (1 = ESTABLISHED)
``cc``          congestion control name (``TCP_CONGESTION``)
``label``       optional free-form flow name
``tcpi_*``      fields of Linux ``struct tcp_info`` (include/uapi/linux/tcp.h) under their kernel
                names, in the kernel's units: µs for times (``tcpi_rtt``, ``tcpi_rto``, ``tcpi_min_rtt``,
                ``tcpi_busy_time`` ...), ms for ``tcpi_last_*`` and ``tcpi_total_rto_time``, bytes/s
                for ``tcpi_pacing_rate``, ``tcpi_max_pacing_rate`` and ``tcpi_delivery_rate``,
                segments for ``tcpi_snd_cwnd`` ...  The ``tcpi_`` prefix may be left out.
``bbr_bw``      (or ``bbr_bw_lo``/``bbr_bw_hi``) bytes/s, ``bbr_min_rtt`` µs, ``bbr_pacing_gain`` and
                ``bbr_cwnd_gain`` as the kernel gives them (fixed point, 256 = 1.0): struct tcp_bbr_info
``skmem``       optional list ``[r, rb, t, tb, f, w, o, bl, d]`` (SK_MEMINFO_* order)

Example::

    {"ts_ns": 1718000000123456789, "src": "10.0.0.1", "sport": 40000, "dst": "10.0.0.2", "dport": 5201,
     "state": 1, "cc": "cubic", "tcpi_snd_cwnd": 10, "tcpi_rtt": 5070, "tcpi_rttvar": 701,
     "tcpi_rto": 208000, "tcpi_snd_mss": 1448, "tcpi_total_retrans": 3, "tcpi_delivery_rate": 2500000}

Mapping follows what ss does with the same numbers, so rows from both readers compare: rates are
multiplied by 8 (bytes/s -> bit/s), ``~0`` "unset" values of pacing rates and ``tcpi_min_rtt`` are
null, ``tcpi_snd_ssthresh`` = 0x7fffffff (infinite) is null, ``send_bps`` is derived as ss derives
it (cwnd * mss * 8 / srtt), and the ``tcpi_options`` bits give the option flags and window scales.
Keys we do not map (``tcpi_ca_state``, ``tcpi_probes``, ``tcpi_retransmits`` ...) go to ``extra`` as
``key=value``; a value of the wrong type goes there too and sets ``malformed``.  A line that is not
a JSON object is counted in the stats, never raised; so is a line longer than
``common.MAX_LINE_BYTES``, which is skipped while it is read (never held whole).
"""
from __future__ import annotations

import json
import math
import os
import re

import polars as pl

from parsers.hoststate.common import (BY_NAME, LINE_TOO_LONG, TCP_STATES, LongLine, ReadStats, float_epoch_ns,
                                      frame_from_rows, normalize_addr, open_lines)

_U32_UNSET = 0xFFFFFFFF
_U64_UNSET = 0xFFFFFFFFFFFFFFFF
_INFINITE_SSTHRESH = 0x7FFFFFFF
_TS_STR = re.compile(r"^\s*(\d{1,12})(?:\.(\d+))?\s*$")

# tcp_info field (without tcpi_) -> (column, factor); factor 8 turns bytes/s into bit/s
_FIELDS: dict[str, tuple[str, int]] = {
    "backoff": ("backoff", 1), "rto": ("rto_us", 1), "ato": ("ato_us", 1), "snd_mss": ("mss", 1),
    "rcv_mss": ("rcvmss", 1), "unacked": ("unacked", 1), "sacked": ("sacked", 1),
    "lost": ("lost", 1), "retrans": ("retrans_cur", 1), "fackets": ("fackets", 1),
    "last_data_sent": ("lastsnd_ms", 1), "last_data_recv": ("lastrcv_ms", 1),
    "last_ack_recv": ("lastack_ms", 1), "pmtu": ("pmtu", 1), "rcv_ssthresh": ("rcv_ssthresh", 1),
    "rtt": ("srtt_us", 1), "rttvar": ("rttvar_us", 1), "snd_ssthresh": ("ssthresh", 1),
    "snd_cwnd": ("cwnd", 1), "advmss": ("advmss", 1), "reordering": ("reordering", 1),
    "rcv_rtt": ("rcv_rtt_us", 1), "rcv_space": ("rcv_space", 1),
    "total_retrans": ("retrans_total", 1), "pacing_rate": ("pacing_rate_bps", 8),
    "max_pacing_rate": ("pacing_rate_max_bps", 8), "bytes_acked": ("bytes_acked", 1),
    "bytes_received": ("bytes_received", 1), "segs_out": ("segs_out", 1),
    "segs_in": ("segs_in", 1), "notsent_bytes": ("notsent", 1), "min_rtt": ("minrtt_us", 1),
    "data_segs_in": ("data_segs_in", 1), "data_segs_out": ("data_segs_out", 1),
    "delivery_rate": ("delivery_rate_bps", 8), "busy_time": ("busy_us", 1),
    "rwnd_limited": ("rwnd_limited_us", 1), "sndbuf_limited": ("sndbuf_limited_us", 1),
    "delivered": ("delivered", 1), "delivered_ce": ("delivered_ce", 1),
    "bytes_sent": ("bytes_sent", 1), "bytes_retrans": ("bytes_retrans", 1),
    "dsack_dups": ("dsack_dups", 1), "reord_seen": ("reord_seen", 1),
    "rcv_ooopack": ("rcv_ooopack", 1), "snd_wnd": ("snd_wnd", 1), "rcv_wnd": ("rcv_wnd", 1),
    "total_rto": ("total_rto", 1), "total_rto_recoveries": ("total_rto_recoveries", 1),
    "total_rto_time": ("total_rto_time_ms", 1),
}
_UNSET_IS_NULL = {"pacing_rate": _U64_UNSET, "max_pacing_rate": _U64_UNSET, "min_rtt": _U32_UNSET,
                  "snd_ssthresh": _INFINITE_SSTHRESH}
# TCPI_OPT_* bits (include/uapi/linux/tcp.h)
_OPT_BITS = (("has_ts", 1), ("has_sack", 2), ("has_ecn", 8), ("ecnseen", 16), ("fastopen", 32))
_OPT_WSCALE = 4
_SKMEM_ORDER = ("r", "rb", "t", "tb", "f", "w", "o", "bl", "d")
_IDENT = frozenset(("ts", "ts_ns", "src", "sport", "dst", "dport", "state", "cc", "label"))


def _as_int(v, limit: int = 2**63 - 1) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, float) and math.isfinite(v) and v == int(v):
        v = int(v)  # JSON writers often give integers as 10.0
    if isinstance(v, int) and -limit <= v <= limit:
        return v
    return None


def _ts_ns(obj: dict) -> tuple[int | None, str | None]:
    if "ts_ns" in obj:
        v = _as_int(obj["ts_ns"])
        return (v, None) if v is not None else (None, f"bad ts_ns {obj['ts_ns']!r}")
    if "ts" in obj:
        v = obj["ts"]
        if isinstance(v, str):
            m = _TS_STR.match(v)
            if m and len(m.group(1)) <= 10 and int(m.group(1)) < 9_000_000_000:
                return int(m.group(1)) * 10**9 + int((m.group(2) or "")[:9].ljust(9, "0")), None
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 9_000_000_000:
            # a float epoch carries ~0.1 us; that is what the writer chose to give us
            ns = float_epoch_ns(v)
            if ns is not None:
                return ns, None
        return None, f"bad ts {v!r}"
    return None, "no ts"


def _port(v) -> int | None:
    p = _as_int(v)
    return p if p is not None and 0 <= p <= 65535 else None


def tcpinfo_row(obj: dict, vantage: str, line_no: int | None = None) -> dict:
    """Return one host-state row (a dict of column values) from one tcp_info JSON object."""
    d: dict = {"vantage": vantage, "source": "tcpinfo", "line_no": line_no}
    extra: list[str] = []
    bad: list[str] = []

    def reject(key, value, why):
        bad.append(why)
        extra.append(f"{key}={json.dumps(value, separators=(',', ':'))}")

    ts, why = _ts_ns(obj)
    d["ts_ns"] = ts
    if why and why != "no ts":
        reject("ts_ns" if "ts_ns" in obj else "ts", obj.get("ts_ns", obj.get("ts")), why)
    for key in ("src", "dst"):
        if key in obj:
            if isinstance(obj[key], str):
                d[key] = normalize_addr(obj[key])
            else:
                reject(key, obj[key], f"bad {key}")
    for key in ("sport", "dport"):
        if key in obj and obj[key] is not None:
            p = _port(obj[key])
            if p is None:
                reject(key, obj[key], f"bad {key}")
            d[key] = p
    for key in ("cc", "label"):
        if key in obj and obj[key] is not None:
            if isinstance(obj[key], str):
                d[key] = obj[key]
            else:
                reject(key, obj[key], f"bad {key}")
    state = obj.get("state", obj.get("tcpi_state"))
    if state is not None:
        n = _as_int(state)
        if isinstance(state, str) and state in TCP_STATES:
            d["state"] = state
        elif n is not None and 0 <= n < len(TCP_STATES):
            d["state"] = TCP_STATES[n]
        else:
            reject("state", state, "bad state")

    options = None
    bbr_lo = bbr_hi = None
    for key, value in obj.items():
        if key in _IDENT or key == "tcpi_state":
            continue
        name = key[5:] if key.startswith("tcpi_") else key
        if name in _FIELDS:
            col, factor = _FIELDS[name]
            v = _as_int(value, _U64_UNSET)
            if v is not None and _UNSET_IS_NULL.get(name) == v:
                continue
            if v is None or v < 0 or v * factor > 2**63 - 1:
                reject(key, value, f"bad {key}")
                continue
            d[col] = float(v * factor) if BY_NAME[col].dtype == pl.Float64 else v * factor
        elif name == "options":
            options = _as_int(value)
            if options is None:
                reject(key, value, f"bad {key}")
        elif name in ("snd_wscale", "rcv_wscale"):
            v = _as_int(value)
            if v is None or not 0 <= v <= 255:
                reject(key, value, f"bad {key}")
            else:
                d["wscale_" + name[:3]] = v
        elif name == "delivery_rate_app_limited":
            d["app_limited"] = bool(value)
        elif name in ("bbr_bw", "bbr_bw_lo", "bbr_bw_hi", "bbr_min_rtt", "bbr_pacing_gain",
                      "bbr_cwnd_gain"):
            v = _as_int(value, 2**62)
            if v is None or v < 0:
                reject(key, value, f"bad {key}")
            elif name == "bbr_bw":
                d["bbr_bw_bps"] = float(v * 8)
            elif name == "bbr_bw_lo":
                bbr_lo = v
            elif name == "bbr_bw_hi":
                bbr_hi = v
            elif name == "bbr_min_rtt":
                d["bbr_min_rtt_us"] = v
            else:
                d[name] = v / 256.0
        elif name == "skmem":
            if isinstance(value, list) and all(_as_int(x) is not None for x in value):
                for k, x in zip(_SKMEM_ORDER, value):
                    d["skmem_" + k] = _as_int(x)
            else:
                reject(key, value, "bad skmem")
        else:
            extra.append(f"{key}={json.dumps(value, separators=(',', ':'))}")
    if bbr_lo is not None or bbr_hi is not None:
        d["bbr_bw_bps"] = float((((bbr_hi or 0) & _U32_UNSET) << 32 | ((bbr_lo or 0) & _U32_UNSET)) * 8)
    if options is not None:
        for col, bit in _OPT_BITS:
            d[col] = bool(options & bit)
        if not options & _OPT_WSCALE:
            d.pop("wscale_snd", None)
            d.pop("wscale_rcv", None)
    cwnd, mss, rtt = d.get("cwnd"), d.get("mss"), d.get("srtt_us")
    if cwnd and mss and rtt:
        d["send_bps"] = cwnd * mss * 8e6 / rtt
    if extra:
        d["extra"] = " ".join(extra)
    if bad:
        d["malformed"] = "; ".join(bad)
    return d


def read_tcpinfo_jsonl(path: str | os.PathLike, vantage: str, *,
                       stats: ReadStats | None = None) -> pl.DataFrame:
    """Return the host TCP state table of a tcp_info JSON-lines file (``.gz`` decompressed up to its
    cap), one row per object."""
    st = stats if stats is not None else ReadStats()
    st.source, st.path = "tcpinfo", os.fspath(path)
    rows = []
    for line_no, raw in enumerate(open_lines(path, st), 1):
        st.lines += 1
        if type(raw) is LongLine:
            st.bad(line_no, LINE_TOO_LONG, raw)
            continue
        text = raw.decode("utf-8", "replace").strip()
        if not text:
            st.blank_lines += 1
            continue
        if text.startswith("#"):
            st.comment_lines += 1
            continue
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError):
            st.bad(line_no, "not JSON", text)
            continue
        if not isinstance(obj, dict):
            st.bad(line_no, "not a JSON object", text)
            continue
        row = tcpinfo_row(obj, vantage, line_no)
        if row.get("ts_ns") is None:
            st.untimed_rows += 1
        if row.get("malformed"):
            st.malformed_rows += 1
        rows.append(row)
    st.rows += len(rows)
    return frame_from_rows(rows)


def write_tcpinfo_jsonl(rows: list[dict], path: str | os.PathLike) -> None:
    """Write tcp_info objects (as `tcpinfo_row` reads them) one per line to `path`."""
    with open(path, "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r, separators=(",", ":")) + "\n")
