"""Throughput-tool JSON to the host TCP state table (schema in `parsers.hoststate.common`): ``iperf3 -J``
results and flent data files (whose per-flow socket stats flent took from ``ss``).

iperf3
------
One row per stream per interval.  ``ts_ns`` is the end of the interval: the test's start time plus
the interval's ``end`` (seconds since the test started).  iperf3 records the start only to the whole
second (``start.timestamp.timesecs``); iperf 3.0's cookie also holds microseconds, used when its
seconds agree.  Relative times are exact but the anchor is uncertain by up to 1 s, so pass `t0_ns`
when a better anchor is known (e.g. the first data packet of the flow in a capture).

Columns: the 4-tuple from ``start.connected`` (local side as src), ``snd_cwnd`` -> ``snd_cwnd_bytes``
and, when it is a whole number of ``tcp_mss``/``tcp_mss_default`` segments, ``cwnd`` and ``mss``;
``rtt``/``rttvar`` (µs) -> ``srtt_us``/``rttvar_us``; ``retransmits`` -> ``retransmits_interval``;
``snd_wnd``, ``pmtu``; ``bytes`` -> ``interval_bytes``; ``seconds`` -> ``interval_s``;
``bits_per_second`` -> ``send_bps`` on the sending side and ``recv_bps`` on the receiving side (from
the stream's ``sender`` flag, or for iperf before 3.7 from the role and ``reverse``); the congestion
control from ``end.sender_tcp_congestion``/``receiver_tcp_congestion``.  ``label`` is
``socket N``.  Other stream keys go to ``extra``.  Also read: ``--json-stream`` output (3.17+, one
event per line) and several ``-J`` results concatenated in one file.

flent
-----
flent's ``SsRunner`` parses ss text itself and stores, per sample of each flow, ``tcp_cwnd``
(segments), ``tcp_rtt`` and ``tcp_rtt_var`` (ms), ``tcp_pacing_rate`` and ``tcp_delivery_rate``
(Mbit/s, flent divides ss's rates down) and, for BBR, ``tcp_bbr_bw`` (Mbit/s), ``tcp_bbr_mrtt`` (ms)
and the two gains.  Those become one row per sample of ``raw_values``; netperf's own throughput
samples of the same flow (``val`` in Mbit/s over ``dur`` s) become rows with ``send_bps`` (upload,
TCP_STREAM) or ``recv_bps`` (download, TCP_MAERTS) and ``interval_s``.  ``label`` is the series
name, ``cc`` and ``mss`` come from the series metadata, src/dst from the test's source and target
addresses; flent does not record ports.  The end-of-run tcp_info netperf reports (``TCPI_*`` in
``SERIES_META``) has no time of its own and is not turned into rows.

Both read their file as one JSON document, so a file larger than ``common.MAX_JSON_BYTES`` (after
decompression, itself capped: ``containers.decompressed_cap``) is not read: it is counted as one
unreadable line, with the reason.
"""
from __future__ import annotations

import ipaddress
import json
import math
import os
import re

import polars as pl

from parsers.hoststate.common import ReadStats, float_epoch_ns, frame_from_rows, normalize_addr, read_document

_STREAM_KEYS = {"socket", "start", "end", "seconds", "bytes", "bits_per_second", "retransmits",
                "snd_cwnd", "snd_wnd", "rtt", "rttvar", "pmtu", "omitted", "sender"}
_COOKIE_TIME = re.compile(r"\.(\d{9,11})\.(\d{6})\.")


def _num(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except OverflowError:  # JSON integers have no size limit
        return None
    return f if math.isfinite(f) else None


def _int(v) -> int | None:
    f = _num(v)
    return int(f) if f is not None and f == int(f) and abs(f) < 2**62 else None


def _load_json_objects(text: str, st: ReadStats) -> list[dict]:
    # -J writes one object; runs appended to one file give several; --json-stream one event a line
    dec = json.JSONDecoder()
    objs, i, n = [], 0, len(text)
    while i < n:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            break
        try:
            obj, i = dec.raw_decode(text, i)
        except (RecursionError, ValueError) as e:
            why = getattr(e, "msg", "nested too deeply")
            st.bad(text.count("\n", 0, i) + 1, f"not JSON ({why})", text[i:i + 80])
            break
        if isinstance(obj, dict):
            objs.append(obj)
        else:
            st.bad(text.count("\n", 0, i) + 1, "not a JSON object", str(obj)[:80])
    return objs


def _group_stream_events(objs: list[dict]) -> list[dict]:
    # --json-stream: {"event": "start"|"interval"|"end", "data": {...}} -> one -J shaped result
    if not objs or not all("event" in o for o in objs):
        return objs
    results, cur = [], None
    for o in objs:
        ev, data = o.get("event"), o.get("data")
        if ev == "start" and isinstance(data, dict):
            cur = {"start": data, "intervals": [], "end": {}}
            results.append(cur)
        elif cur is not None and ev == "interval" and isinstance(data, dict):
            cur["intervals"].append(data)
        elif cur is not None and ev == "end" and isinstance(data, dict):
            cur["end"] = data
    return results


def _t0_ns(start: dict) -> int | None:
    ts = start.get("timestamp") if isinstance(start.get("timestamp"), dict) else {}
    secs = _int(ts.get("timesecs"))
    if secs is None or not 0 <= secs < 9_000_000_000:
        return None
    cookie = start.get("cookie")
    if isinstance(cookie, str):
        m = _COOKIE_TIME.search(cookie)
        if m and abs(int(m.group(1)) - secs) <= 1:
            return int(m.group(1)) * 10**9 + int(m.group(2)) * 1000
    return secs * 10**9


def _iperf3_rows(result: dict, vantage: str, t0_ns: int | None, st: ReadStats) -> list[dict]:
    start = result.get("start") if isinstance(result.get("start"), dict) else {}
    intervals = result.get("intervals") if isinstance(result.get("intervals"), list) else []
    end = result.get("end") if isinstance(result.get("end"), dict) else {}
    if result.get("error"):
        st.warnings.append(f"iperf3 error: {result['error']}")
    t0 = t0_ns if t0_ns is not None else _t0_ns(start)
    if t0 is None:
        st.warnings.append("no start.timestamp.timesecs: ts_ns is null")
    sockets = {}
    connected = start.get("connected")
    for c in connected if isinstance(connected, list) else []:
        if isinstance(c, dict) and _int(c.get("socket")) is not None:
            sockets[_int(c["socket"])] = c
    test = start.get("test_start") if isinstance(start.get("test_start"), dict) else {}
    is_server = "accepted_connection" in start and "connecting_to" not in start
    reverse = bool(test.get("reverse"))
    local_sends = reverse if is_server else not reverse
    mss = _int(start.get("tcp_mss")) or _int(start.get("tcp_mss_default"))
    snd_cc = end.get("sender_tcp_congestion") if isinstance(end.get("sender_tcp_congestion"), str) else None
    rcv_cc = end.get("receiver_tcp_congestion") if isinstance(end.get("receiver_tcp_congestion"), str) else None

    rows = []
    for idx, iv in enumerate(intervals, 1):
        streams = iv.get("streams") if isinstance(iv, dict) else None
        if not isinstance(streams, list):
            st.bad(idx, "interval without streams", str(iv)[:80])
            continue
        for s in streams:
            st.lines += 1
            if not isinstance(s, dict):
                st.bad(idx, "stream is not an object", str(s)[:80])
                continue
            d: dict = {"vantage": vantage, "source": "iperf3", "line_no": idx,
                       "label": f"socket {s.get('socket')}"}
            bad, extra = [], []
            sock = _int(s.get("socket"))
            c = sockets.get(sock) if sock is not None else None
            if c is not None:
                for col, key in (("src", "local_host"), ("dst", "remote_host")):
                    if isinstance(c.get(key), str):
                        d[col] = normalize_addr(c[key])
                for col, key in (("sport", "local_port"), ("dport", "remote_port")):
                    p = _int(c.get(key))
                    if p is not None and 0 <= p <= 65535:
                        d[col] = p
            sender = s.get("sender") if isinstance(s.get("sender"), bool) else local_sends
            d["cc"] = snd_cc if sender else rcv_cc
            end_s = _num(s.get("end"))
            end_ns = float_epoch_ns(end_s) if end_s is not None else None
            if end_ns is None:
                bad.append("no interval end")
            elif t0 is not None and abs(t0 + end_ns) < 2**63:
                d["ts_ns"] = t0 + end_ns
            bps = _num(s.get("bits_per_second"))
            if bps is not None:
                d["send_bps" if sender else "recv_bps"] = bps
            d["interval_s"] = _num(s.get("seconds"))
            d["interval_bytes"] = _int(s.get("bytes"))
            d["retransmits_interval"] = _int(s.get("retransmits"))
            d["srtt_us"] = _int(s.get("rtt"))
            d["rttvar_us"] = _int(s.get("rttvar"))
            d["pmtu"] = _int(s.get("pmtu"))
            d["snd_wnd"] = _int(s.get("snd_wnd"))
            cw = _int(s.get("snd_cwnd"))
            d["snd_cwnd_bytes"] = cw
            if cw is not None and mss and cw % mss == 0:
                # snd_cwnd is tcpi_snd_cwnd * tcpi_snd_mss; only divide back when the MSS fits exactly
                d["cwnd"], d["mss"] = cw // mss, mss
            for k, v in s.items():
                if k not in _STREAM_KEYS:
                    extra.append(f"{k}={json.dumps(v, separators=(',', ':'))}")
            if s.get("omitted") is True:
                extra.append("omitted=true")
            if extra:
                d["extra"] = " ".join(extra)
            if bad:
                d["malformed"] = "; ".join(bad)
                st.malformed_rows += 1
            if d.get("ts_ns") is None:
                st.untimed_rows += 1
            rows.append(d)
    return rows


def read_iperf3_json(path: str | os.PathLike, vantage: str, *, t0_ns: int | None = None,
                     stats: ReadStats | None = None) -> pl.DataFrame:
    """Return the host TCP state table of an ``iperf3 -J`` result, one row per stream per interval."""
    st = stats if stats is not None else ReadStats()
    st.source, st.path = "iperf3", os.fspath(path)
    raw = read_document(path, st)
    if raw is None:
        return frame_from_rows([])
    text = raw.decode("utf-8", "replace")
    del raw
    rows: list[dict] = []
    for result in _group_stream_events(_load_json_objects(text, st)):
        rows.extend(_iperf3_rows(result, vantage, t0_ns, st))
    st.rows += len(rows)
    return frame_from_rows(rows)


# flent per-sample key -> (column, factor): rates Mbit/s -> bit/s, times ms -> us
_FLENT_KEYS = {
    "tcp_cwnd": ("cwnd", None), "tcp_rtt": ("srtt_us", 1000), "tcp_rtt_var": ("rttvar_us", 1000),
    "tcp_pacing_rate": ("pacing_rate_bps", 1e6), "tcp_delivery_rate": ("delivery_rate_bps", 1e6),
    "tcp_bbr_bw": ("bbr_bw_bps", 1e6), "tcp_bbr_mrtt": ("bbr_min_rtt_us", 1000),
    "tcp_bbr_pacing_gain": ("bbr_pacing_gain", 1.0), "tcp_bbr_cwnd_gain": ("bbr_cwnd_gain", 1.0),
}


def _ip_or_none(v) -> str | None:
    if not isinstance(v, str):
        return None
    try:
        ipaddress.ip_address(v.strip("[]"))
    except ValueError:
        return None
    return normalize_addr(v)


def _flent_direction(name: str, meta: dict) -> str | None:
    cmd = meta.get("COMMAND") if isinstance(meta.get("COMMAND"), str) else ""
    if "TCP_STREAM" in cmd or "upload" in name.lower():
        return "send_bps"
    if "TCP_MAERTS" in cmd or "download" in name.lower():
        return "recv_bps"
    return None


def read_flent(path: str | os.PathLike, vantage: str, *, stats: ReadStats | None = None) -> pl.DataFrame:
    """Return the host TCP state table of a flent data file (``.flent.gz`` or plain JSON)."""
    st = stats if stats is not None else ReadStats()
    st.source, st.path = "flent", os.fspath(path)
    raw = read_document(path, st)
    if raw is None:
        return frame_from_rows([])
    try:
        data = json.loads(raw.decode("utf-8", "replace"))
    except (RecursionError, ValueError) as e:
        st.bad(1, f"not a flent data file ({e})")
        return frame_from_rows([])
    if not isinstance(data, dict):
        st.bad(1, "not a flent data file (top level is not an object)")
        return frame_from_rows([])
    md = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    series_meta = md.get("SERIES_META") if isinstance(md.get("SERIES_META"), dict) else {}
    egress = md.get("EGRESS_INFO") if isinstance(md.get("EGRESS_INFO"), dict) else {}
    src = _ip_or_none(egress.get("src"))
    dst = _ip_or_none(egress.get("target")) or _ip_or_none(md.get("HOST"))
    raw_values = data.get("raw_values") if isinstance(data.get("raw_values"), dict) else {}
    rows = []
    for name, samples in raw_values.items():
        if not isinstance(samples, list):
            continue
        meta = series_meta.get(name) if isinstance(series_meta.get(name), dict) else {}
        tcp_series = meta.get("RUNNER") == "NetperfDemoRunner" or any(
            isinstance(s, dict) and any(k in _FLENT_KEYS for k in s) for s in samples[:50])
        if not tcp_series:
            continue
        direction = _flent_direction(name, meta)
        units = meta.get("UNITS")
        cc = meta.get("CONG_CONTROL") if isinstance(meta.get("CONG_CONTROL"), str) else None
        mss = _int(meta.get("TCP_MSS"))
        for idx, s in enumerate(samples, 1):
            st.lines += 1
            if not isinstance(s, dict):
                st.bad(idx, f"{name}: sample is not an object", str(s)[:80])
                continue
            t = _num(s.get("t"))
            t = t if t is not None and float_epoch_ns(t) is not None else None
            d: dict = {"vantage": vantage, "source": "flent", "line_no": idx, "label": name,
                       "src": src, "dst": dst, "cc": cc, "mss": mss,
                       "ts_ns": float_epoch_ns(t) if t is not None else None}
            got, bad = False, []
            for key, (col, factor) in _FLENT_KEYS.items():
                if key not in s:
                    continue
                v = _num(s[key])
                scaled = v * (factor or 1) if v is not None else None
                if scaled is None or v < 0 or not math.isfinite(scaled) or scaled >= 2**62:
                    bad.append(f"bad {key}")
                    continue
                got = True
                d[col] = int(round(scaled)) if factor is None or col.endswith("_us") else scaled
            val = _num(s.get("val"))
            if val is not None and direction is not None and units in (None, "Mbits/s") \
                    and math.isfinite(val * 1e6):
                d[direction] = val * 1e6
                d["interval_s"] = _num(s.get("dur"))
                got = True
            if not got and not bad:
                continue
            if bad:
                d["malformed"] = "; ".join(bad)
                st.malformed_rows += 1
            if d["ts_ns"] is None:
                st.untimed_rows += 1
            rows.append(d)
    if not rows:
        st.warnings.append("no TCP flow samples with socket stats or throughput in this file")
    st.rows += len(rows)
    return frame_from_rows(rows)
