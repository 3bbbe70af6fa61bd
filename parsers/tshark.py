"""The tshark backend: Wireshark's dissection (`tshark -T fields`) mapped onto the packet schema.

Slower than the fast path by two orders of magnitude, but it brings what Wireshark has and we do not
(WPA decryption with keys, every protocol). It is also the oracle the conformance tests compare with.
Each column is a list of tshark fields (the first one present wins) and a conversion.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import polars as pl

from parsers.columnar.columns import escape_bytes
from parsers.schema import SACK_DTYPE, SCHEMA

AGG = "\x1f"  # occurrence separator: a byte no field value contains

# Wiretap encapsulation numbers (frame.encap_type) to LINKTYPE_ numbers.
WTAP_TO_LINKTYPE = {1: 1, 7: 101, 15: 0, 20: 105, 21: 119, 23: 127, 24: 163, 25: 113, 97: 192,
                    129: 228, 130: 229, 210: 276}

PREFS = (
    "wlan.check_checksum:TRUE", "ip.defragment:FALSE", "ipv6.defragment:FALSE",
    "wlan.defragment:FALSE", "tcp.relative_sequence_numbers:FALSE", "tcp.analyze_sequence_numbers:FALSE",
    "tcp.desegment_tcp_streams:FALSE", "udp.try_heuristic_first:FALSE",
)


@dataclass(frozen=True)
class Field:
    """How one schema column is read from tshark: fields tried in order, occurrence, conversion."""

    fields: tuple[str, ...]
    conv: str = "int"          # int | hex | float | bool | str | mac | ts | ...
    occurrence: str = "first"  # first | last | count | all


def _f(*fields: str, conv: str = "int", occ: str = "first") -> Field:
    return Field(tuple(fields), conv, occ)


FIELDS: dict[str, Field] = {
    "frame": _f("frame.number"),
    "ts_ns": _f("frame.time_epoch", conv="ts"),
    "caplen": _f("frame.cap_len"),
    "wirelen": _f("frame.len"),
    "linktype": _f("frame.encap_type", conv="wtap"),
    "iface": _f("frame.interface_id"),
    "malformed": _f("_ws.malformed", conv="malformed"),
    "rt_layout": _f("radiotap.present.word", conv="words", occ="all"),
    "rt_len": _f("radiotap.length"),
    "tsft": _f("radiotap.mactime", "wlan_radio.timestamp"),
    "rt_flags": _f("radiotap.flags", conv="hex"),
    "phy_rate_mbps": _f("wlan_radio.data_rate", conv="float"),
    "phy": _f("wlan_radio.phy", conv="phy"),
    "mcs": _f("wlan_radio.11n.mcs_index", "wlan_radio.11ac.mcs", "radiotap.he.data_3.data_mcs"),
    "nss": _f("wlan_radio.11ac.nss"),
    "bw_mhz": _f("wlan_radio.11n.bandwidth", "wlan_radio.11ac.bandwidth", conv="bw"),
    "sgi": _f("wlan_radio.11n.short_gi", "wlan_radio.11ac.short_gi", conv="bool"),
    "he_gi_us": _f("radiotap.he.data_5.gi", conv="he_gi"),
    "freq_mhz": _f("wlan_radio.frequency"),
    "chan_flags": _f("radiotap.channel.flags", "ppi.80211-common.chan.flags", conv="hex"),
    "signal_dbm": _f("radiotap.dbm_antsignal", "wlan_radio.signal_dbm"),
    "noise_dbm": _f("radiotap.dbm_antnoise", "wlan_radio.noise_dbm"),
    "antenna": _f("radiotap.antenna"),
    "rx_flags": _f("radiotap.rxflags", conv="hex"),
    "tx_flags": _f("radiotap.txflags", conv="hex"),
    "data_retries": _f("radiotap.data_retries"),
    "fcs_bad": _f("radiotap.flags.badfcs", "wlan.fcs.status", conv="fcs"),
    "ampdu_ref": _f("radiotap.ampdu.reference"),
    "ampdu_flags": _f("radiotap.ampdu.flags", conv="hex"),
    "rt_timestamp": _f("radiotap.timestamp.ts"),
    "wlan_type": _f("wlan.fc.type"),
    "wlan_subtype": _f("wlan.fc.subtype"),
    "wlan_flags": _f("wlan.flags", conv="hex"),
    "wlan_to_ds": _f("wlan.fc.tods", conv="bool"),
    "wlan_from_ds": _f("wlan.fc.fromds", conv="bool"),
    "wlan_more_frag": _f("wlan.fc.frag", conv="bool"),
    "wlan_retry": _f("wlan.fc.retry", conv="bool"),
    "wlan_pwr_mgt": _f("wlan.fc.pwrmgt", conv="bool"),
    "wlan_more_data": _f("wlan.fc.moredata", conv="bool"),
    "wlan_protected": _f("wlan.fc.protected", conv="bool"),
    "wlan_order": _f("wlan.fc.order", conv="bool"),
    "wlan_duration": _f("wlan.duration"),
    "wlan_ra": _f("wlan.ra", conv="str"),
    "wlan_ta": _f("wlan.ta", conv="str"),
    "wlan_da": _f("wlan.da", conv="str"),
    "wlan_sa": _f("wlan.sa", conv="str"),
    "wlan_bssid": _f("wlan.bssid", conv="str"),
    "wlan_seq": _f("wlan.seq"),
    "wlan_frag": _f("wlan.frag"),
    "wlan_tid": _f("wlan.qos.tid"),
    "wlan_amsdu": _f("wlan.qos.amsdupresent", conv="bool"),
    "wlan_pn": _f("wlan.ccmp.extiv", "wlan.tkip.extiv", conv="hex"),
    # no tshark field: this backend is never given keys (they must not reach another program's argv)
    "wlan_decrypted": _f(conv="bool"), "wlan_mic": _f(conv="str"), "wlan_key": _f(conv="str"),
    "wlan_ssid": _f("wlan.ssid", conv="ssid"),
    "wlan_reason": _f("wlan.fixed.reason_code", conv="hex"),
    "wlan_status": _f("wlan.fixed.status_code", conv="hex"),
    "wlan_ba_ssn": _f("wlan.fixed.ssc.sequence"),
    "wlan_ba_bitmap": _f("wlan.ba.bm", conv="bytes"),
    "eth_src": _f("eth.src", "sll.src.eth", conv="str"),
    "eth_dst": _f("eth.dst", conv="str"),
    "eth_type": _f("vlan.etype", "eth.type", "sll.etype", "sll.ltype", "llc.type", conv="hex", occ="last"),
    "vlan_id": _f("ieee8021ad.id", "vlan.id"),
    "vlan_depth": _f("ieee8021ad.id", "vlan.id", occ="count"),
    "ip_version": _f("ip.version", "ipv6.version"),
    "ip_src": _f("ip.src", "ipv6.src", conv="str"),
    "ip_dst": _f("ip.dst", "ipv6.dst", conv="str"),
    "ip_proto": _f("ip.proto", "ipv6.nxt", "ipv6.hopopts.nxt", "ipv6.routing.nxt", "ipv6.fraghdr.nxt",
                   "ipv6.dstopts.nxt", conv="ip_proto"),
    "ip_id": _f("ip.id", "ipv6.fraghdr.ident", conv="hex"),
    "ip_len": _f("ip.len", "ipv6.plen"),
    "ip_hdr_len": _f("ip.hdr_len"),
    "ip_df": _f("ip.flags.df", conv="bool"),
    "ip_mf": _f("ip.flags.mf", "ipv6.fraghdr.more", conv="bool"),
    "ip_frag_offset": _f("ip.frag_offset", "ipv6.fraghdr.offset", conv="x8"),
    "ip_ttl": _f("ip.ttl", "ipv6.hlim"),
    "ip_dscp": _f("ip.dsfield.dscp", "ipv6.tclass.dscp"),
    "ip_ecn": _f("ip.dsfield.ecn", "ipv6.tclass.ecn"),
    "ip_checksum": _f("ip.checksum", conv="hex"),
    "sport": _f("tcp.srcport", "udp.srcport"),
    "dport": _f("tcp.dstport", "udp.dstport"),
    "tcp_seq": _f("tcp.seq_raw"),
    "tcp_ack": _f("tcp.ack_raw"),
    "tcp_flags": _f("tcp.flags", conv="hex"),
    "tcp_hdr_len": _f("tcp.hdr_len"),
    "tcp_win": _f("tcp.window_size_value"),
    "tcp_len": _f("tcp.len"),
    "tcp_mss": _f("tcp.options.mss_val"),
    "tcp_wscale": _f("tcp.options.wscale.shift"),
    "tcp_sack_perm": _f("tcp.options.sack_perm", conv="present"),
    "tcp_tsval": _f("tcp.options.timestamp.tsval"),
    "tcp_tsecr": _f("tcp.options.timestamp.tsecr"),
    "tcp_sack": _f("tcp.options.sack_le", "tcp.options.sack_re", conv="sack", occ="all"),
    "udp_len": _f("udp.length"),
    "icmp_type": _f("icmp.type", "icmpv6.type"),
    "icmp_code": _f("icmp.code", "icmpv6.code"),
}

_PHY = {1: "legacy", 2: "legacy", 3: "legacy", 4: "legacy", 5: "legacy", 6: "legacy", 7: "ht",
        8: "vht", 11: "he"}
# wlan_radio 11n/11ac bandwidth enumerations (PHDR_802_11_BANDWIDTH_*) to MHz.
_BW = {0: 20, 1: 40, 2: 20, 3: 20, 4: 80, 5: 40, 6: 40, 7: 20, 8: 20, 9: 20, 10: 20, 11: 160,
       12: 80, 13: 80}
for _i in range(14, 30):
    _BW[_i] = 40 if _i < 18 else 20
_HE_GI = {0: 0.8, 1: 1.6, 2: 3.2}


def available() -> bool:
    """Return True if a tshark binary is on PATH."""
    return shutil.which("tshark") is not None


def all_fields() -> list[str]:
    """Return every tshark field the mapping reads, once each."""
    seen: dict[str, None] = {}
    for spec in FIELDS.values():
        for f in spec.fields:
            seen.setdefault(f)
    return list(seen)


def run_fields(path: str | os.PathLike, fields: Sequence[str], prefs: Sequence[str] = PREFS,
               extra_args: Sequence[str] = (), timeout: float | None = None) -> pl.DataFrame:
    """Return tshark's -T fields output for a file as a table of strings (one column per field)."""
    with tempfile.NamedTemporaryFile(suffix=".tsv") as tmp:
        cmd = ["tshark", "-n", "-r", os.fspath(path), "-T", "fields", "-E", "header=y",
               "-E", "separator=/t", "-E", "occurrence=a", "-E", f"aggregator={AGG}", "-E", "quote=n"]
        for p in prefs:
            cmd += ["-o", p]
        for f in fields:
            cmd += ["-e", f]
        cmd += list(extra_args)
        with open(tmp.name, "wb") as out:
            proc = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE, timeout=timeout, check=False)
        if proc.returncode not in (0, 2):
            raise RuntimeError(f"tshark failed on {path}: {proc.stderr.decode(errors='replace').strip()}")
        text = open(tmp.name, "rb").read().decode("utf-8", "backslashreplace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline after the last row, not an empty row
    header = lines[0].split("\t") if lines and lines[0] else list(fields)
    rows = [ln.split("\t") for ln in lines[1:]]
    cols = {h: [r[i] if i < len(r) else "" for r in rows] for i, h in enumerate(header)}
    return pl.DataFrame({f: cols.get(f, [""] * len(rows)) for f in fields}, schema={f: pl.Utf8 for f in fields})


def _pick(raw: pl.DataFrame, spec: Field) -> list:
    out: list = [None] * raw.height
    cols = [raw.get_column(f).to_list() for f in spec.fields if f in raw.columns]
    if spec.conv == "sack":
        le, re_ = cols
        for i, (a, b) in enumerate(zip(le, re_)):
            if a:
                out[i] = [[int(x), int(y)] for x, y in zip(a.split(AGG), b.split(AGG))]
        return out
    for col in cols:
        for i, v in enumerate(col):
            if out[i] is not None or v == "":
                continue
            parts = v.split(AGG)
            if spec.occurrence == "count":
                out[i] = len(parts)
            elif spec.occurrence == "all":
                out[i] = _convert(spec.conv, parts)
            elif spec.occurrence == "last":
                out[i] = _convert(spec.conv, parts[-1])
            else:
                out[i] = _convert(spec.conv, parts[0])
    return out


def _int(v: str) -> int:
    v = v.strip()
    return int(v, 16) if v.lower().startswith("0x") else int(v)


def _convert(conv: str, v):
    if conv == "words":
        return ",".join(f"{int(w, 16):08x}" for w in v)
    if conv == "int":
        return _int(v)
    if conv == "hex":
        return int(v, 16) if not v.lower().startswith("0x") else int(v, 16)
    if conv == "float":
        return float(v)
    if conv in ("bool",):
        return v.strip().lower() in ("1", "true")
    if conv == "present":
        return True
    if conv == "str":
        return v
    if conv == "ts":
        sec, _, frac = v.partition(".")
        neg = sec.startswith("-")
        ns = abs(int(sec)) * 10**9 + int((frac + "000000000")[:9])
        return -ns if neg else ns
    if conv == "wtap":
        return WTAP_TO_LINKTYPE.get(int(v), 0xFFFF)
    if conv == "malformed":
        return "tshark: malformed packet"
    if conv == "phy":
        return _PHY.get(int(v))
    if conv == "bw":
        return _BW.get(int(v))
    if conv == "he_gi":
        return _HE_GI.get(_int(v))
    if conv == "fcs":
        # radiotap.flags.badfcs: 1 = bad; wlan.fcs.status: 0 = bad, 1 = good (first present wins).
        return v.strip().lower() in ("1", "true")
    if conv == "x8":  # both offsets are shown in their 8-byte units; the schema holds bytes
        return _int(v) * 8
    if conv == "ssid":  # tshark 4.0 prints wlan.ssid as hex bytes, and an empty one as <MISSING>
        if v == "<MISSING>":
            return ""
        try:
            return escape_bytes(bytes.fromhex(v.replace(":", "")))
        except ValueError:
            return v
    if conv == "bytes":
        return v.replace(":", "").lower()
    raise ValueError(conv)


def _fcs(raw: pl.DataFrame) -> list:
    flag = raw.get_column("radiotap.flags.badfcs").to_list() if "radiotap.flags.badfcs" in raw.columns \
        else [""] * raw.height
    status = raw.get_column("wlan.fcs.status").to_list()
    out = []
    for f, s in zip(flag, status):
        f = f.split(AGG)[0] if f else ""
        s = s.split(AGG)[0] if s else ""
        if f in ("1", "True"):
            out.append(True)
        elif s != "":
            out.append(s in ("0", "False"))
        elif f != "":
            out.append(False)
        else:
            out.append(None)
    return out


_V6_EXT = {0: "ipv6.hopopts.nxt", 43: "ipv6.routing.nxt", 44: "ipv6.fraghdr.nxt", 60: "ipv6.dstopts.nxt"}


def _ip_proto(raw: pl.DataFrame) -> list:
    """Return the transport protocol: IPv4 proto, or IPv6 next header followed through extensions."""
    v4 = _pick(raw, _f("ip.proto"))
    cols = {f: raw.get_column(f).to_list() for f in ("ipv6.nxt", *_V6_EXT.values()) if f in raw.columns}
    out = []
    for i, p in enumerate(v4):
        if p is not None or not cols.get("ipv6.nxt", [""])[i]:
            out.append(p)
            continue
        nxt = int(cols["ipv6.nxt"][i].split(AGG)[0])
        used: dict[str, int] = {}
        for _ in range(8):
            f = _V6_EXT.get(nxt)
            vals = cols.get(f, [""] * len(v4))[i].split(AGG) if f else [""]
            k = used.get(f, 0) if f else 0
            if f is None or k >= len(vals) or vals[k] == "":
                break
            used[f] = k + 1
            nxt = int(vals[k])
        out.append(nxt)
    return out


def tshark_table(path: str | os.PathLike, columns: Sequence[str] | None = None,
                 extra_args: Sequence[str] = (), timeout: float | None = None) -> pl.DataFrame:
    """Return tshark's dissection of a file as a packet table in the schema (selected columns)."""
    columns = list(columns) if columns is not None else list(SCHEMA)
    fields: dict[str, None] = {"frame.encap_type": None}
    for c in columns:
        for f in FIELDS[c].fields:
            fields.setdefault(f)
    raw = run_fields(path, list(fields), extra_args=extra_args, timeout=timeout)
    data = {}
    for c in columns:
        if c == "fcs_bad":
            data[c] = _fcs(raw)
        elif c == "vlan_depth":
            a = _pick(raw, _f("ieee8021ad.id", occ="count"))
            b = _pick(raw, _f("vlan.id", occ="count"))
            data[c] = [None if x is None and y is None else (x or 0) + (y or 0) for x, y in zip(a, b)]
        elif c == "ip_proto":
            data[c] = _ip_proto(raw)
        elif c == "iface":
            data[c] = [0 if v is None else v for v in _pick(raw, FIELDS[c])]
        elif c == "ip_len":
            v4 = _pick(raw, _f("ip.len"))
            v6 = _pick(raw, _f("ipv6.plen"))
            data[c] = [a if a is not None else (b + 40 if b is not None else None) for a, b in zip(v4, v6)]
        else:
            data[c] = _pick(raw, FIELDS[c])
    schema = {c: SCHEMA[c] for c in columns}
    df = pl.DataFrame(data, schema=schema, strict=False)
    # tshark numbers pcapng custom/journal blocks as frames with no encapsulation: not packet records.
    return df.filter(raw.get_column("frame.encap_type") != "")


def read_with(path: str | os.PathLike, keys: Callable | None = None) -> pl.DataFrame:
    """Return the whole schema for a file from tshark (the `tshark` backend of read_capture)."""
    return tshark_table(path)


__all__ = ["FIELDS", "SACK_DTYPE", "available", "run_fields", "tshark_table", "all_fields", "read_with"]
