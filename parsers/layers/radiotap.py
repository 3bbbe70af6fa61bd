"""Radiotap (LINKTYPE 127): every field by its radiotap.org name, and the columns we keep.

Header: it_version (0), it_pad, it_len (LE u16, whole header), then presence words (LE u32) while
bit 31 (Ext) is set, then the fields in bit order, each aligned to its natural alignment relative to
the start of the header.  Bit 29 switches the next word to the radiotap namespace (index reset to 0;
drivers repeat it once per antenna), bit 30 to a vendor namespace (OUI, sub-namespace and skip_length
aligned to 2, then skip_length bytes of vendor data).  A bit this parser does not know in the
radiotap namespace (an Ext word of the radiotap namespace holds only undefined bits) makes later
offsets unknowable: parsing stops there, as tshark and the radiotap library do, and the 802.11 frame
still starts at it_len.  Bit 28 (TLV) makes the rest of the header a list of TLVs.

Columns (first occurrence in header order, so per-antenna namespaces never override the main one):

* rt_len: it_len, for every record whose bytes 2-3 are captured, malformed ones included (tshark's
  ``radiotap.length``): where the 802.11 frame starts, padding after the fields included.
* tsft, rt_flags, chan_flags, signal_dbm, noise_dbm, antenna, rx_flags, tx_flags, data_retries,
  ampdu_ref, ampdu_flags, rt_timestamp: the radiotap fields of those names.  signal_dbm is the first
  dBm antenna signal (tshark's first ``radiotap.dbm_antsignal``; ``wlan_radio.signal_dbm`` shows the
  LAST one instead, i.e. the last per-antenna value).
* freq_mhz: XChannel's frequency if present, else Channel's (tshark's ``wlan_radio.frequency``).
* phy / mcs / nss / bw_mhz / sgi / he_gi_us / phy_rate_mbps: from the PHY field of highest bit
  present (HE 23 > VHT 21 > MCS 19), as tshark lets the last one win.  HT: mcs when "MCS index known",
  nss from the MCS index, bw_mhz 40 for bandwidth 1 else 20 (20L/20U are 20 MHz PPDUs), sgi when
  "GI known".  VHT: the first user with NSS != 0; bw_mhz is the PPDU width of the bandwidth code.
  HE: mcs (data3) when known, nss = data6 NSTS (space-time streams; tshark's rate uses it), bw_mhz
  for data5 bandwidth 0-3 (null for an RU allocation), he_gi_us and sgi (GI 0.8 us) when known.
  The rate is the HT/VHT/HE rate when computable (see ``phyrate``), else the legacy Rate field
  (500 kb/s units, any value, as tshark).  Legacy frames (no MCS/VHT/HE field): mcs, nss, bw_mhz,
  sgi and he_gi_us are null (tshark shows none; half/quarter-rate channels remain in chan_flags).
  phy is tshark's ``wlan_radio.phy`` class: ``he``/``vht``/``ht`` for those fields (or XChannel HT
  flags), ``legacy`` when the channel flags name an 802.11 FHSS/DSSS/b/a/g channel or the rate is a
  CCK rate (or an OFDM rate with a known channel frequency), else null.  A 60 GHz channel (802.11ad
  DMG, 57-71 GHz) has phy null and no HT/VHT/HE columns, as tshark shows none.
* fcs_bad: True if the Flags field says "failed FCS check" (0x40) or the FCS at the end (Flags 0x10)
  does not match the CRC-32 of the frame; False if Flags is present otherwise; null without Flags.
  The CRC is checked whenever the frame and its FCS are captured (tshark leaves it unverified for an
  unknown 802.11 protocol version; we do not).
"""
from __future__ import annotations

import struct
import zlib

import numpy as np

from parsers.columnar import accel
from parsers.layers import phyrate
from parsers.columnar.columns import ColumnBuilder
from parsers.layers.fcs import crc_ok
from parsers.columnar.gather import gathered_ahead, rows_bytes, ule
from parsers.columnar.span import KIND_DOT11, Span, in_row_order

# bit -> (radiotap.org name, alignment, size) in the radiotap namespace.
FIELDS: dict[int, tuple[str, int, int]] = {
    0: ("TSFT", 8, 8),
    1: ("Flags", 1, 1),
    2: ("Rate", 1, 1),
    3: ("Channel", 2, 4),
    4: ("FHSS", 2, 2),
    5: ("Antenna signal", 1, 1),
    6: ("Antenna noise", 1, 1),
    7: ("Lock quality", 2, 2),
    8: ("TX attenuation", 2, 2),
    9: ("dB TX attenuation", 2, 2),
    10: ("dBm TX power", 1, 1),
    11: ("Antenna", 1, 1),
    12: ("dB antenna signal", 1, 1),
    13: ("dB antenna noise", 1, 1),
    14: ("RX flags", 2, 2),
    15: ("TX flags", 2, 2),
    16: ("RTS retries", 1, 1),
    17: ("data retries", 1, 1),
    18: ("XChannel", 4, 8),
    19: ("MCS", 1, 3),
    20: ("A-MPDU status", 4, 8),
    21: ("VHT", 2, 12),
    22: ("timestamp", 8, 12),
    23: ("HE", 2, 12),
    24: ("HE-MU", 2, 12),
    25: ("HE-MU-other-user", 2, 6),
    26: ("0-length-PSDU", 1, 1),
    27: ("L-SIG", 2, 4),
}
BIT_TLV, BIT_RADIOTAP_NS, BIT_VENDOR_NS, BIT_EXT = 28, 29, 30, 31
VENDOR_HEADER = 6            # OUI(3), sub-namespace(1), skip_length(2), aligned to 2
MAX_FAST_WORDS = 8           # headers with more presence words go to the reference decoder

FLAG_FCS_AT_END = 0x10
FLAG_BAD_FCS = 0x40
DMG_MHZ = (57000, 71000)     # 802.11ad channels: tshark shows PHY "DMG" and no HT rate

R_SHORT = "radiotap: frame shorter than the radiotap header"
R_VERSION = "radiotap: unsupported version"
R_LEN8 = "radiotap: header length < 8"
R_LONG = "radiotap: header longer than the frame"
R_BITMAP = "radiotap: presence bitmap runs past header length"
R_FIELD = "radiotap: field runs past header length"
R_VENDOR = "radiotap: vendor namespace runs past header length"
R_TLV = "radiotap: TLV runs past header length"
R_FCS = "radiotap: frame shorter than its FCS"

# Channel/XChannel flags (masked) that tshark maps to a PHY: 802.11 FHSS, DSSS, b, g, pure g,
# 108G, a, turbo a -> legacy; a or g with one XChannel HT flag -> ht.
_CHAN_IGNORED = 0x0200 | 0x0008 | 0x1000        # passive, 900 MHz, GSM do not change the PHY
_CHAN_LEGACY = frozenset({0x0880, 0x0080, 0x00A0, 0x00C0, 0x00D0, 0x0480, 0x0140, 0x0150})
_CHAN_HT = frozenset({ht | base for ht in (0x10000, 0x20000, 0x40000) for base in (0x0140, 0x0480)})


def chan_flags_phy(flags: int) -> str | None:
    """Return 'legacy' or 'ht' for channel flags tshark maps to a PHY, else None."""
    f = flags & ~_CHAN_IGNORED
    if f in _CHAN_LEGACY:
        return "legacy"
    if f in _CHAN_HT:
        return "ht"
    return None


def legacy_rate_phy(rate: int | None, freq_known: bool) -> str | None:
    """Return 'legacy' if tshark infers an 802.11b/a/g PHY from a Rate value (500 kb/s units)."""
    if rate is None:
        return None
    if rate in phyrate.CCK_RATES or (freq_known and rate in phyrate.OFDM_RATES):
        return "legacy"
    return None


# ==================================================================================================
# Per-frame walker: every field by radiotap.org name (reference decoder, `xlayer info`, tests)
# ==================================================================================================
def _u16(b: bytes, o: int) -> int:
    return b[o] | b[o + 1] << 8


def _value(name: str, raw: bytes):
    """Return a field's value: an int, or a dict of its parts (units as radiotap.org defines)."""
    if name == "TSFT":
        return struct.unpack("<Q", raw)[0]
    if name in ("Antenna signal", "Antenna noise", "dBm TX power"):
        return struct.unpack("<b", raw)[0]
    if name == "Channel":
        f, fl = struct.unpack("<HH", raw)
        return {"freq": f, "flags": fl}
    if name == "FHSS":
        return {"hop_set": raw[0], "hop_pattern": raw[1]}
    if name == "XChannel":
        fl, f, ch, mp = struct.unpack("<IHBB", raw)
        return {"flags": fl, "freq": f, "channel": ch, "maxpower": mp}
    if name == "MCS":
        return {"known": raw[0], "flags": raw[1], "mcs": raw[2]}
    if name == "A-MPDU status":
        ref, fl, crc, res = struct.unpack("<IHBB", raw)
        return {"reference": ref, "flags": fl, "delimiter_crc": crc, "reserved": res}
    if name == "VHT":
        known, fl, bw = struct.unpack_from("<HBB", raw)
        coding, gid, paid = struct.unpack_from("<BBH", raw, 8)
        return {"known": known, "flags": fl, "bandwidth": bw, "mcs_nss": list(raw[4:8]),
                "coding": coding, "group_id": gid, "partial_aid": paid}
    if name == "timestamp":
        ts, acc, unit, fl = struct.unpack("<QHBB", raw)
        return {"timestamp": ts, "accuracy": acc, "unit_position": unit, "flags": fl}
    if name == "HE":
        return dict(zip(("data1", "data2", "data3", "data4", "data5", "data6"), struct.unpack("<6H", raw)))
    if name == "HE-MU":
        f1, f2 = struct.unpack_from("<HH", raw)
        return {"flags1": f1, "flags2": f2, "RU_channel1": list(raw[4:8]), "RU_channel2": list(raw[8:12])}
    if name == "HE-MU-other-user":
        p1, p2, pos, known = struct.unpack("<HHBB", raw)
        return {"per_user_1": p1, "per_user_2": p2, "per_user_position": pos, "per_user_known": known}
    if name == "L-SIG":
        d1, d2 = struct.unpack("<HH", raw)
        return {"data1": d1, "data2": d2}
    return int.from_bytes(raw, "little")


def radiotap_fields(header: bytes, overrides: dict[int, tuple[str, int, int]] | None = None,
                    vendor_namespaces: dict[tuple[int, int], dict[int, tuple[int, int]]] | None = None
                    ) -> dict[str, object]:
    """Return every field of a radiotap header by radiotap.org name, and how the walk ended.

    Keys: ``version``, ``pad``, ``length`` (it_len), ``present`` (presence words), then each field
    name of the radiotap namespace with its FIRST value (``TSFT``, ``Flags``, ``Rate`` in 500 kb/s,
    ``Channel`` {freq, flags}, ...), ``fields`` (every field in header order as
    (namespace number, name, value)), ``namespaces`` (one dict per namespace: radiotap ones with their
    ``fields``, vendor ones with ``oui``, ``subns``, ``skip_length``, ``data``), ``tlvs`` (list of
    {type, length, data} when bit 28 is set), ``stopped_at`` (the undefined radiotap bit that ended
    the walk, or None), ``truncated`` (the bytes ended before it_len) and ``malformed`` (a reason, or
    None).  ``overrides`` redefines radiotap bits as {bit: (name, align, size)};
    ``vendor_namespaces`` defines vendor fields as {(oui, subns): {bit: (align, size)}} (their values
    are then raw bytes under ``fields`` of that namespace).
    """
    out: dict[str, object] = {"version": None, "pad": None, "length": None, "present": [],
                              "fields": [], "namespaces": [], "tlvs": None, "stopped_at": None,
                              "truncated": False, "malformed": None}
    hb = bytes(header)
    n = len(hb)
    if n < 8:
        out["malformed"] = R_SHORT
        return out
    out["version"], out["pad"], it_len = hb[0], hb[1], _u16(hb, 2)
    out["length"] = it_len
    if hb[0] != 0:
        out["malformed"] = R_VERSION
        return out
    if it_len < 8:
        out["malformed"] = R_LEN8
        return out
    if it_len > n:
        out["malformed"] = R_LONG
        out["truncated"] = True
    limit = min(it_len, n)
    words: list[int] = []
    p = 4
    while True:
        if p + 4 > it_len:
            out["malformed"] = R_BITMAP
            break
        if p + 4 > limit:
            break
        w = struct.unpack_from("<I", hb, p)[0]
        words.append(w)
        p += 4
        if not w >> BIT_EXT & 1:
            break
    out["present"] = words
    if out["malformed"] == R_BITMAP or not words or words[-1] >> BIT_EXT & 1:
        return out
    _walk(hb, p, it_len, limit, words, out, overrides or {}, vendor_namespaces or {})
    return out


def _walk(hb: bytes, pos: int, it_len: int, limit: int, words: list[int], out: dict,
          overrides: dict, vendor_ns: dict) -> None:
    """Walk the fields of the presence words; fill `out` (see radiotap_fields)."""
    namespaces: list[dict] = out["namespaces"]  # type: ignore[assignment]
    ordered: list = out["fields"]  # type: ignore[assignment]
    ns: dict = {"namespace": "radiotap", "fields": {}}
    namespaces.append(ns)
    ns_i = 0                      # index of `ns` in namespaces
    in_vendor = False
    vendor_def: dict | None = None
    vendor_end = 0
    word_in_ns = 0

    def align(x: int, a: int) -> int:
        return (x + a - 1) // a * a

    for w in words:
        switch: dict | None = None
        switch_i = ns_i
        bits = w & 0x7FFFFFFF
        if in_vendor and vendor_def is None:
            bits &= 1 << BIT_RADIOTAP_NS | 1 << BIT_VENDOR_NS   # a skipped namespace: only switches
        while bits:
            low = bits & -bits
            bits ^= low
            bit = low.bit_length() - 1
            if bit == BIT_RADIOTAP_NS:
                if in_vendor:
                    pos = max(pos, vendor_end)
                switch = {"namespace": "radiotap", "fields": {}}
                namespaces.append(switch)
                switch_i = len(namespaces) - 1
                continue
            if bit == BIT_VENDOR_NS:
                if in_vendor:
                    pos = max(pos, vendor_end)
                pos = align(pos, 2)
                if pos + VENDOR_HEADER > it_len:
                    out["malformed"] = R_VENDOR
                    return
                if pos + VENDOR_HEADER > limit:
                    return
                oui = hb[pos] << 16 | hb[pos + 1] << 8 | hb[pos + 2]
                subns, skip = hb[pos + 3], _u16(hb, pos + 4)
                vendor_end = pos + VENDOR_HEADER + skip
                if vendor_end > it_len:
                    out["malformed"] = R_VENDOR
                    return
                switch = {"namespace": "vendor", "oui": oui, "subns": subns, "skip_length": skip,
                          "data": hb[pos + VENDOR_HEADER:min(vendor_end, limit)], "fields": {}}
                namespaces.append(switch)
                switch_i = len(namespaces) - 1
                ordered.append((switch_i, "Vendor Namespace",
                                {k: switch[k] for k in ("oui", "subns", "skip_length", "data")}))
                vendor_def = vendor_ns.get((oui, subns))
                pos = pos + VENDOR_HEADER if vendor_def is not None else vendor_end
                continue
            index = word_in_ns * 32 + bit
            if in_vendor:
                if vendor_def is None:
                    continue
                spec = vendor_def.get(index)
                if spec is None:     # unknown field of a known vendor namespace: skip the rest of it
                    vendor_def = None
                    pos = vendor_end
                    continue
                pos = align(pos, spec[0])
                if pos + spec[1] > vendor_end:
                    out["malformed"] = R_VENDOR
                    return
                if pos + spec[1] > limit:
                    return
                ns["fields"][index] = hb[pos:pos + spec[1]]
                ordered.append((ns_i, index, hb[pos:pos + spec[1]]))
                pos += spec[1]
                continue
            if index == BIT_TLV and index not in overrides:
                _tlvs(hb, align(pos, 4), it_len, limit, out, ns_i)
                return
            spec = overrides.get(index) or FIELDS.get(index)
            if spec is None:
                out["stopped_at"] = index
                return
            name, a, size = spec
            pos = align(pos, a)
            if pos + size > it_len:
                out["malformed"] = R_FIELD
                return
            if pos + size > limit:
                return
            value = _value(name, hb[pos:pos + size]) if index not in overrides \
                else int.from_bytes(hb[pos:pos + size], "little")
            pos += size
            ns["fields"].setdefault(name, value)
            ordered.append((ns_i, name, value))
            if name not in out:
                out[name] = value
        if switch is not None:
            ns, ns_i = switch, switch_i
            in_vendor = ns["namespace"] == "vendor"
            word_in_ns = 0
        else:
            word_in_ns += 1


def _tlvs(hb: bytes, pos: int, it_len: int, limit: int, out: dict, ns_i: int) -> None:
    """Read the TLV list that fills the header from `pos` to it_len (bit 28).

    A TLV whose type is a radiotap field number and whose length is that field's size is that
    field (tshark decodes it so), recorded after the fields of the presence words.
    """
    items = []
    out["tlvs"] = items
    while pos + 4 <= it_len:
        if pos + 4 > limit:
            return
        t, ln = _u16(hb, pos), _u16(hb, pos + 2)
        if pos + 4 + ln > it_len:
            out["malformed"] = R_TLV
            return
        data = hb[pos + 4:min(pos + 4 + ln, limit)]
        items.append({"type": t, "length": ln, "data": data})
        spec = FIELDS.get(t)
        if spec is not None and ln == spec[2] == len(data):
            value = _value(spec[0], data)
            out["namespaces"][ns_i]["fields"].setdefault(spec[0], value)
            out["fields"].append((ns_i, spec[0], value))
            out.setdefault(spec[0], value)
        pos += 4 + (ln + 3) // 4 * 4
    if pos < it_len:
        out["malformed"] = R_TLV


# ==================================================================================================
# Per-frame decoder (reference)
# ==================================================================================================
def fcs_crc_ok(frame_and_fcs: bytes) -> bool:
    """Return True if the last 4 bytes are the CRC-32 (little-endian) of the bytes before them."""
    return zlib.crc32(frame_and_fcs[:-4]) == int.from_bytes(frame_and_fcs[-4:], "little")


def header_missing(row: dict, avail: int, need: int, cut: bool, reason: str) -> bool:
    """Return True if fewer than `need` header bytes are captured (malformed unless the snap length cut
    them)."""
    if avail >= need:
        return False
    if not cut:
        row.setdefault("malformed", reason)
    return True


def fcs_trailer(data: bytes, nstart: int, end: int, claimed: int, cut: bool) -> tuple[int, int, bool] | None:
    """Return (end, claimed, CRC bad) of an 802.11 frame at nstart without its 4-byte FCS, or None if
    the frame is shorter than its FCS (and not cut by the snap length). A cut FCS is not checked."""
    if claimed - nstart < 4 and not cut:
        return None
    nclaimed = claimed - 4
    crc_bad = not cut and claimed - nstart >= 4 and not fcs_crc_ok(bytes(data[nstart:claimed]))
    return min(end, nclaimed), nclaimed, crc_bad


def dot11_payload(nstart: int, end: int, claimed: int) -> tuple[int, int, int, int] | None:
    """Return the 802.11 frame at nstart as (kind, start, end, claimed), or None if none of it is captured."""
    return (KIND_DOT11, nstart, end, claimed) if end > nstart else None


def frame_radiotap(data: bytes, start: int, end: int, claimed: int, cut: bool,
                   row: dict) -> tuple[int, int, int, int] | None:
    """Decode one radiotap header into `row`; return the 802.11 frame's (kind, start, end, claimed)."""
    avail = end - start
    if avail >= 4:      # it_len, whatever else is wrong with the header (as tshark's radiotap.length)
        row["rt_len"] = _u16(data, start + 2)
    if header_missing(row, avail, 8, cut, R_SHORT):
        return None
    hb = bytes(data[start:end])
    it_len = _u16(hb, 2)
    if hb[0] != 0:
        row.setdefault("malformed", R_VERSION)
        return None
    if it_len < 8:
        row.setdefault("malformed", R_LEN8)
        return None
    if it_len > avail and not cut:
        row.setdefault("malformed", R_LONG)
        return None
    info = radiotap_fields(hb)
    _row_columns(info, row)
    bad = info["malformed"]
    if bad is not None and bad != R_LONG:
        row.setdefault("malformed", bad)
        return None
    if it_len > avail or "0-length-PSDU" in info:
        return None             # no PSDU: whatever follows the header is not an 802.11 frame
    flags = info.get("Flags")
    nstart = start + it_len
    nend, nclaimed, crc_bad = end, claimed, False
    if isinstance(flags, int) and flags & FLAG_FCS_AT_END:
        trailer = fcs_trailer(data, nstart, end, claimed, cut)
        if trailer is None:
            row.setdefault("malformed", R_FCS)
            row["fcs_bad"] = bool(flags & FLAG_BAD_FCS)
            return None
        nend, nclaimed, crc_bad = trailer
    if isinstance(flags, int):
        row["fcs_bad"] = bool(flags & FLAG_BAD_FCS) or crc_bad
    return dot11_payload(nstart, nend, nclaimed)


def _row_columns(info: dict, row: dict) -> None:
    """Set the schema columns of one row from a radiotap_fields() result."""
    words = info["present"]
    if words:
        row["rt_layout"] = ",".join(f"{w:08x}" for w in words)
    simple = {"TSFT": "tsft", "Flags": "rt_flags", "Antenna signal": "signal_dbm",
              "Antenna noise": "noise_dbm", "Antenna": "antenna", "RX flags": "rx_flags",
              "TX flags": "tx_flags", "data retries": "data_retries"}
    for name, col in simple.items():
        if name in info:
            row[col] = info[name]
    chan, xchan = info.get("Channel"), info.get("XChannel")
    if chan is not None:
        row["chan_flags"] = chan["flags"]
    freq = xchan["freq"] if xchan is not None else (chan["freq"] if chan is not None else None)
    if freq is not None:
        row["freq_mhz"] = freq
    if "A-MPDU status" in info:
        row["ampdu_ref"] = info["A-MPDU status"]["reference"]
        row["ampdu_flags"] = info["A-MPDU status"]["flags"]
    if "timestamp" in info:
        row["rt_timestamp"] = info["timestamp"]["timestamp"]
    rate_raw = info.get("Rate")
    legacy = rate_raw * 0.5 if rate_raw is not None else None
    phy, rate = None, None
    if freq is not None and DMG_MHZ[0] <= freq <= DMG_MHZ[1]:
        rate = legacy
    elif "HE" in info:
        phy, rate = "he", _he_columns(info["HE"], row)
    elif "VHT" in info:
        phy, rate = "vht", _vht_columns(info["VHT"], row)
    elif "MCS" in info:
        phy, rate = "ht", _ht_columns(info["MCS"], row)
    else:
        phy = None
        if xchan is not None:
            phy = chan_flags_phy(xchan["flags"])
        if phy is None and chan is not None:
            phy = chan_flags_phy(chan["flags"])
        if phy is None:
            phy = legacy_rate_phy(rate_raw, bool(freq))
    put_phy(row, phy, legacy if rate is None else rate)


def put_phy(row: dict, phy: str | None, rate: float | None) -> None:
    """Set the phy class and the rate (Mb/s) of one row, each if known."""
    if phy is not None:
        row["phy"] = phy
    if rate is not None:
        row["phy_rate_mbps"] = rate


def _ht_columns(m: dict, row: dict) -> float | None:
    known, flags, idx = m["known"], m["flags"], m["mcs"]
    if known & 0x02:
        row["mcs"] = idx
        nss = phyrate.ht_nss(idx)
        if nss is not None:
            row["nss"] = nss
    if known & 0x01:
        row["bw_mhz"] = 40 if flags & 0x03 == 1 else 20
    if known & 0x04:
        row["sgi"] = bool(flags & 0x04)
    if known & 0x07 == 0x07:
        return phyrate.ht_rate(idx, flags & 0x03 == 1, bool(flags & 0x04))
    return None


def _vht_columns(v: dict, row: dict) -> float | None:
    known, flags, code = v["known"], v["flags"], v["bandwidth"] & 0x1F
    sgi_known, bw_known = bool(known & 0x0004), bool(known & 0x0040)
    if sgi_known:
        row["sgi"] = bool(flags & 0x04)
    w = phyrate.vht_width_index(code) if bw_known else None
    if w is not None:
        row["bw_mhz"] = phyrate.VHT_WIDTH_MHZ[w]
    for mn in v["mcs_nss"]:
        if mn & 0x0F:
            row["mcs"], row["nss"] = mn >> 4, mn & 0x0F
            if sgi_known and bw_known:
                return phyrate.vht_rate(mn >> 4, mn & 0x0F, code, bool(flags & 0x04))
            return None
    return None


def _he_columns(h: dict, row: dict) -> float | None:
    d1, d2, d3, d5, d6 = h["data1"], h["data2"], h["data3"], h["data5"], h["data6"]
    mcs = (d3 >> 8) & 0x0F if d1 & 0x0020 else None
    bwru = d5 & 0x0F if d1 & 0x4000 else None
    gi = (d5 >> 4) & 0x03 if d2 & 0x0002 else None
    nsts = d6 & 0x0F
    if mcs is not None:
        row["mcs"] = mcs
    if nsts:
        row["nss"] = nsts
    if bwru is not None and bwru < 4:
        row["bw_mhz"] = phyrate.HE_WIDTH_MHZ[bwru]
    if gi is not None and gi < 3:
        row["he_gi_us"] = phyrate.HE_GI_US[gi]
        row["sgi"] = gi == 0
    if mcs is not None and bwru is not None and gi is not None:
        return phyrate.he_rate(nsts, mcs, bwru, gi)
    return None


# ==================================================================================================
# Vectorized decoder (fast path)
# ==================================================================================================
# What the fast path reads of each field: (column key, offset in the field, numpy format).
_PARTS: dict[str, tuple[tuple[str, int, str], ...]] = {
    "TSFT": (("tsft", 0, "<u8"),),
    "Flags": (("flags", 0, "u1"),),
    "Rate": (("rate", 0, "u1"),),
    "Channel": (("ch_freq", 0, "<u2"), ("ch_flags", 2, "<u2")),
    "Antenna signal": (("signal", 0, "i1"),),
    "Antenna noise": (("noise", 0, "i1"),),
    "Antenna": (("antenna", 0, "u1"),),
    "RX flags": (("rx", 0, "<u2"),),
    "TX flags": (("tx", 0, "<u2"),),
    "data retries": (("retries", 0, "u1"),),
    "XChannel": (("x_flags", 0, "<u4"), ("x_freq", 4, "<u2")),
    "MCS": (("mcs_known", 0, "u1"), ("mcs_flags", 1, "u1"), ("mcs_index", 2, "u1")),
    "A-MPDU status": (("ampdu_ref", 0, "<u4"), ("ampdu_flags", 4, "<u2")),
    "VHT": (("vht_known", 0, "<u2"), ("vht_flags", 2, "u1"), ("vht_bw", 3, "u1"),
            ("vht_mn0", 4, "u1"), ("vht_mn1", 5, "u1"), ("vht_mn2", 6, "u1"), ("vht_mn3", 7, "u1")),
    "timestamp": (("ts", 0, "<u8"),),
    "HE": (("he1", 0, "<u2"), ("he2", 2, "<u2"), ("he3", 4, "<u2"), ("he5", 8, "<u2"),
           ("he6", 10, "<u2")),
}
_DIRECT = {"tsft": "tsft", "flags": "rt_flags", "ch_flags": "chan_flags", "signal": "signal_dbm",
           "noise": "noise_dbm", "antenna": "antenna", "rx": "rx_flags", "tx": "tx_flags",
           "retries": "data_retries", "ampdu_ref": "ampdu_ref", "ampdu_flags": "ampdu_flags",
           "ts": "rt_timestamp"}


class _Layout:
    """Where a presence-word signature puts each field (offsets from the header start)."""

    __slots__ = ("fields", "end", "defer", "need_skip", "dtype")

    def __init__(self) -> None:
        self.fields: dict[str, int] = {}
        self.end = 8
        self.defer = False
        self.need_skip: int | None = None
        self.dtype: np.dtype | None = None


_LAYOUTS: dict[tuple[tuple[int, ...], tuple[int, ...]], _Layout] = {}


def _layout(words: tuple[int, ...], skips: tuple[int, ...]) -> _Layout:
    """Return the field offsets of a presence-word signature (vendor skip lengths given so far)."""
    key = (words, skips)
    lay = _LAYOUTS.get(key)
    if lay is None:
        lay = _compute_layout(words, skips)
        if len(_LAYOUTS) > 4096:
            _LAYOUTS.clear()
        _LAYOUTS[key] = lay
    return lay


def _compute_layout(words: tuple[int, ...], skips: tuple[int, ...]) -> _Layout:
    lay = _Layout()
    off = 4 + 4 * len(words)
    lay.end = off
    vendor = False
    base = 0                      # field index of bit 0 of the current word in its namespace
    used = 0                      # vendor skip lengths consumed
    for w in words:
        nxt = None                # namespace of the next word: "rt", "vendor" or None (same one)
        for bit in range(31):
            if not w >> bit & 1:
                continue
            if bit == BIT_RADIOTAP_NS:
                nxt = "rt"
            elif bit == BIT_VENDOR_NS:
                off += -off % 2
                if used == len(skips):
                    lay.need_skip = off
                    return lay
                off += VENDOR_HEADER + skips[used]
                used += 1
                lay.end = max(lay.end, off)
                nxt = "vendor"
            elif vendor:
                continue
            elif base + bit == BIT_TLV:
                lay.defer = True
                return lay
            elif base + bit in FIELDS:
                name, align, size = FIELDS[base + bit]
                off += -off % align
                lay.fields.setdefault(name, off)
                off += size
                lay.end = max(lay.end, off)
            else:                 # undefined radiotap bit: later offsets are unknowable
                _finish(lay)
                return lay
        if nxt is None:
            base += 32
        else:
            vendor, base = nxt == "vendor", 0
    _finish(lay)
    return lay


def _finish(lay: _Layout) -> None:
    names, formats, offsets = [], [], []
    for name, off in lay.fields.items():
        for key, rel, fmt in _PARTS.get(name, ()):
            names.append(key)
            formats.append(fmt)
            offsets.append(off + rel)
    lay.dtype = np.dtype({"names": names, "formats": formats, "offsets": offsets,
                          "itemsize": max(lay.end, 8)})


def _gather(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """Return the `width` bytes at each position as one void record per row (one copy)."""
    view = np.ndarray((len(buf) - width + 1,), dtype=np.dtype((np.void, width)), buffer=buf,
                      strides=(1,))
    return view[pos]


def _put_text(out: ColumnBuilder, name: str, rows: np.ndarray, text: str) -> None:
    """Set a string column to one value at many rows."""
    bulk = getattr(out, "put_text", None)
    if bulk is not None:
        bulk(name, rows, text)
        return
    out._obj.setdefault(name, {}).update(dict.fromkeys(rows.tolist(), text))  # noqa: SLF001


def _fcs_ok(buf: np.ndarray, out: ColumnBuilder, rows: np.ndarray, first: np.ndarray,
            end: np.ndarray) -> np.ndarray:
    """Return, per row, whether buf[first:end] ends with the right FCS; verdicts the walk helper
    already reached for exactly these bytes are taken, the others computed here."""
    done = out.fcs_verdicts
    if done is None:
        return crc_ok(buf, first, end)
    pre_first, pre_end, pre_ok = done
    same = (pre_first[rows] == first) & (pre_end[rows] == end)
    if same.all():
        return pre_ok[rows]
    ok = pre_ok[rows] & same
    rest = np.flatnonzero(~same)
    ok[rest] = crc_ok(buf, first[rest], end[rest])
    return ok


LINKTYPE = 127
_HDR = np.dtype([("ver", "u1"), ("pad", "u1"), ("len", "<u2"), ("w0", "<u4")])
HEAD = 64         # header bytes copied per frame up front (enough for the usual layouts' fields)
_PHY_NAMES = (None, "legacy", "ht", "vht", "he")
_LEGACY_FLAGS = np.array(sorted(_CHAN_LEGACY), dtype=np.int64)
_HT_FLAGS = np.array(sorted(_CHAN_HT), dtype=np.int64)
_CCK = np.array(sorted(phyrate.CCK_RATES), dtype=np.int64)
_OFDM = np.array(sorted(phyrate.OFDM_RATES), dtype=np.int64)


def _pick(a: np.ndarray, idx: np.ndarray | None) -> np.ndarray:
    """Return a[idx], or a itself when idx is None (all rows: no copy)."""
    return a if idx is None else a[idx]


def decode_radiotap(buf: np.ndarray, span: Span, out: ColumnBuilder) -> Span:
    """Decode radiotap headers; return the 802.11 frames behind them (kind KIND_DOT11)."""
    n = len(span)
    rows, start, end, cut = span.rows, span.start, span.end, span.cut
    avail = end - start
    ok8 = avail >= 8
    if not ok8.all():
        out.malformed(rows[~ok8 & ~cut], R_SHORT)
    # One gather of each header's first bytes: the fixed part here, most layouts' fields later.
    head = gathered_ahead(out.ahead, "radiotap", rows, start, HEAD)
    if head is None:
        head = rows_bytes(buf, start, HEAD)
    hdr = np.ndarray((n,), dtype=_HDR, buffer=head, strides=(HEAD,)) if n else np.zeros(0, _HDR)
    it_len = hdr["len"].astype(np.int64)
    w0 = hdr["w0"]
    _put_rt_len(out, rows, avail, it_len)
    good = ok8 & (hdr["ver"] == 0) & (it_len >= 8) & (it_len <= avail)
    idx = None
    if not good.all():
        bad_ver = ok8 & (hdr["ver"] != 0)
        out.malformed(rows[bad_ver], R_VERSION)
        bad_len = ok8 & ~bad_ver & (it_len < 8)
        out.malformed(rows[bad_len], R_LEN8)
        long_ = ok8 & ~bad_ver & ~bad_len & (it_len > avail)
        out.malformed(rows[long_ & ~cut], R_LONG)
        out.defer(rows[long_ & cut])
        idx = np.flatnonzero(good)
        it_len, w0 = it_len[idx], w0[idx]
    words, ok = _presence_words(buf, _pick(start, idx), it_len, w0)
    if ok is not None:
        out.defer(_pick(rows, idx)[~ok])
        keep = np.flatnonzero(ok)
        idx = keep if idx is None else idx[keep]
        it_len, words = it_len[keep], words[keep]
    parts = []
    for sig, g in _signatures(words):
        gidx = idx if g is None else (g if idx is None else idx[g])
        parts += _decode_group(buf, span, out, gidx, _pick(it_len, g), sig, (), head)
    if not parts:
        return span.take(np.zeros(n, bool))
    if len(parts) == 1:
        return Span(*parts[0])
    return in_row_order(Span(*(np.concatenate([p[i] for p in parts]) for i in range(6))))


def _put_rt_len(out: ColumnBuilder, rows: np.ndarray, avail: np.ndarray, it_len: np.ndarray) -> None:
    """Write rt_len (it_len) of every row whose bytes 2-3 were captured, malformed or not."""
    # Per record, as tshark shows radiotap.length: the 802.11 frame starts at it_len, which drivers
    # pad past the end of the fields, so the layout alone does not give it.
    if not out.wants("rt_len"):
        return
    has = avail >= 4
    if has.all():
        out.put("rt_len", rows, it_len)
    elif has.any():
        out.put("rt_len", rows[has], it_len[has])


def gather_ahead(buf: np.ndarray, offset: np.ndarray, linktype: np.ndarray, width: int) -> dict:
    """Return the bytes decode_radiotap and then the 802.11 decoder gather first, for records of
    link type radiotap: {"radiotap": (offset, HEAD bytes there), "dot11": (offset + it_len, `width`
    bytes there)}; empty for other link types. Decoders use a matrix only where their own positions
    equal these (gather.gathered_ahead), so a wrong guess costs time, never a value."""
    if not len(offset) or not (linktype == LINKTYPE).all():
        return {}
    start = offset.astype(np.int64, copy=False)
    if accel.AVAILABLE:     # the same bytes, the second gather served from cache
        head, after, nxt = accel.gather_ahead(buf, start, HEAD, width)
        return {"radiotap": (start, head), "dot11": (after, nxt)}
    head = rows_bytes(buf, start, HEAD)
    after = start + (head[:, 2].astype(np.int64) | head[:, 3].astype(np.int64) << 8)
    return {"radiotap": (start, head), "dot11": (after, rows_bytes(buf, after, width))}


def _presence_words(buf: np.ndarray, pos: np.ndarray, it_len: np.ndarray,
                    w0: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Return (n, k) presence words (zero-padded) and which rows the fast path takes (None: all)."""
    active = np.flatnonzero(w0 >> BIT_EXT)
    if not len(active):
        return w0[:, None], None
    n = len(pos)
    words = np.zeros((n, MAX_FAST_WORDS), dtype=np.uint32)
    words[:, 0] = w0
    ok = np.ones(n, dtype=bool)
    k = 1
    while len(active) and k < MAX_FAST_WORDS:
        fits = 8 + 4 * k <= it_len[active]
        ok[active[~fits]] = False           # bitmap past it_len: the reference decoder says why
        active = active[fits]
        wk = ule(buf, pos[active] + 4 + 4 * k, 4).astype(np.uint32)
        words[active, k] = wk
        active = active[(wk >> BIT_EXT).astype(bool)]
        k += 1
    ok[active] = False                       # more words than the fast path takes
    return words[:, :k], (None if ok.all() else ok)


def _signatures(words: np.ndarray):
    """Yield (presence-word tuple, row indices or None for all rows) per distinct signature."""
    n, k = words.shape
    if n == 0:
        return
    if k == 1:
        key = words[:, 0]
    elif k == 2:
        key = words[:, 0].astype(np.uint64) | words[:, 1].astype(np.uint64) << np.uint64(32)
    else:
        key = None
    first = key == key[0] if key is not None else (words == words[0]).all(axis=1)
    if first.all():
        yield _sig_tuple(words[0]), None
        return
    rem = np.arange(n)
    sel = first
    peeled = 0
    while len(rem):
        if peeled >= 32:        # many signatures (a fuzzed file): sort once instead of peeling
            flat = np.ascontiguousarray(words[rem]).view(np.dtype((np.void, 4 * k))).ravel()
            _, inv = np.unique(flat, return_inverse=True)
            order = np.argsort(inv, kind="stable")
            bounds = np.flatnonzero(np.diff(inv[order])) + 1
            for g in np.split(rem[order], bounds):
                yield _sig_tuple(words[g[0]]), np.sort(g)
            return
        yield _sig_tuple(words[rem[0]]), rem[sel]
        rem = rem[~sel]
        peeled += 1
        if len(rem):
            r0 = rem[0]
            sel = key[rem] == key[r0] if key is not None else (words[rem] == words[r0]).all(axis=1)


def _sig_tuple(w: np.ndarray) -> tuple[int, ...]:
    """Return the presence words of a zero-padded row, up to the last one."""
    vals = [int(x) for x in w]
    n = 1
    while n < len(vals) and vals[n - 1] >> BIT_EXT & 1:
        n += 1
    return tuple(vals[:n])


def _decode_group(buf: np.ndarray, span: Span, out: ColumnBuilder, idx: np.ndarray | None,
                  it_len: np.ndarray, words: tuple[int, ...], skips: tuple[int, ...],
                  head: np.ndarray) -> list:
    """Decode rows sharing one signature (idx into span, None = all; head: the span's first HEAD
    bytes per row); return next-span parts."""
    lay = _layout(words, skips)
    if lay.defer:
        out.defer(_pick(span.rows, idx))
        return []
    if lay.need_skip is not None:
        if idx is None:
            idx = np.arange(len(span))
        at = lay.need_skip
        fits = at + VENDOR_HEADER <= it_len
        out.defer(span.rows[idx[~fits]])
        idx, it_len = idx[fits], it_len[fits]
        skip = ule(buf, span.start[idx] + at + 4, 2).astype(np.int64)
        res = []
        for v in np.unique(skip).tolist():
            g = skip == v
            res += _decode_group(buf, span, out, idx[g], it_len[g], words, skips + (int(v),), head)
        return res
    clean = it_len >= lay.end
    if not clean.all():
        if idx is None:
            idx = np.arange(len(span))
        out.defer(span.rows[idx[~clean]])
        idx, it_len = idx[clean], it_len[clean]
        if not len(idx):
            return []
    rows = _pick(span.rows, idx)
    start = _pick(span.start, idx)
    if lay.dtype.itemsize <= HEAD:
        # the group's rows of the byte matrix, then a record view: indexing the structured array
        # itself copies field by field, ~5x slower
        sub = head if idx is None else head[idx]
        rec = np.ndarray((len(sub),), dtype=lay.dtype, buffer=sub, strides=(HEAD,))
    else:
        rec = _gather(buf, start, lay.dtype.itemsize).view(lay.dtype)
    _put_text(out, "rt_layout", rows, ",".join(f"{w:08x}" for w in words))
    cols = {name: rec[name] for name in lay.dtype.names}
    for key, col in _DIRECT.items():
        if key in cols:
            out.put(col, rows, cols[key])
    _put_phy(out, rows, cols)
    parts = _next_span(buf, span, out, idx, rows, start + it_len, cols.get("flags"))
    return [] if "0-length-PSDU" in lay.fields else parts


def _put_phy(out: ColumnBuilder, rows: np.ndarray, c: dict) -> None:
    """Write freq_mhz, phy and the HT/VHT/HE columns and rate of one signature group."""
    n = len(rows)
    freq = c["x_freq"] if "x_freq" in c else c.get("ch_freq")
    if freq is not None:
        out.put("freq_mhz", rows, freq)
        dmg = (freq >= DMG_MHZ[0]) & (freq <= DMG_MHZ[1])
        live = ~dmg if dmg.any() else None
    else:
        dmg, live = None, None
    rate = c["rate"] * 0.5 if "rate" in c else None
    if "he1" in c:
        rate, code = _he_v(out, rows, c, live, rate), 4
    elif "vht_known" in c:
        rate, code = _vht_v(out, rows, c, live, rate), 3
    elif "mcs_known" in c:
        rate, code = _ht_v(out, rows, c, live, rate), 2
    else:
        code = _legacy_phy(c, freq, n)
    if rate is not None:
        has = ~np.isnan(rate)
        if has.all():
            out.put("phy_rate_mbps", rows, rate)
        else:
            out.put("phy_rate_mbps", rows[has], rate[has])
    if isinstance(code, int):
        if live is None:
            _put_text(out, "phy", rows, _PHY_NAMES[code])
        else:
            _put_text(out, "phy", rows[live], _PHY_NAMES[code])
        return
    if dmg is not None:
        code[dmg] = 0
    for v in np.unique(code).tolist():
        if v:
            _put_text(out, "phy", rows[code == v], _PHY_NAMES[v])


def _legacy_phy(c: dict, freq: np.ndarray | None, n: int) -> np.ndarray:
    """Return per-row PHY codes (0 none, 1 legacy, 2 ht) from channel flags and the Rate field."""
    code = np.zeros(n, dtype=np.int8)
    for fkey in ("x_flags", "ch_flags"):
        if fkey in c:
            f = c[fkey].astype(np.int64) & ~_CHAN_IGNORED
            unset = code == 0
            code[unset & np.isin(f, _LEGACY_FLAGS)] = 1
            code[unset & np.isin(f, _HT_FLAGS)] = 2
    if "rate" in c:
        r = c["rate"].astype(np.int64)
        leg = np.isin(r, _CCK)
        if freq is not None:
            leg |= (freq != 0) & np.isin(r, _OFDM)
        code[(code == 0) & leg] = 1
    return code


def _restrict(live: np.ndarray | None, mask: np.ndarray) -> np.ndarray:
    return mask if live is None else mask & live


def _put_masked(out: ColumnBuilder, name: str, rows: np.ndarray, values, mask: np.ndarray) -> None:
    if mask.all():
        out.put(name, rows, values)
    elif mask.any():
        out.put(name, rows[mask], values[mask] if isinstance(values, np.ndarray) else values)


def _fallback(rate: np.ndarray | None, new: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Return the computed rate where ok, else the legacy rate (NaN where neither)."""
    base = rate if rate is not None else np.nan
    return np.where(ok, new, base)


def _ht_v(out, rows, c, live, rate):
    known, flags, mcs = c["mcs_known"], c["mcs_flags"], c["mcs_index"].astype(np.int64)
    has_idx = _restrict(live, known & 0x02 != 0)
    _put_masked(out, "mcs", rows, mcs, has_idx)
    nss, nok = phyrate.ht_nss_v(mcs)
    _put_masked(out, "nss", rows, nss, has_idx & nok)
    bw40 = flags & 0x03 == 1
    _put_masked(out, "bw_mhz", rows, np.where(bw40, 40, 20), _restrict(live, known & 0x01 != 0))
    sgi = flags & 0x04 != 0
    _put_masked(out, "sgi", rows, sgi, _restrict(live, known & 0x04 != 0))
    r, ok = phyrate.ht_rate_v(mcs, bw40, sgi)
    return _fallback(rate, r, _restrict(live, (known & 0x07 == 0x07) & ok))


def _vht_v(out, rows, c, live, rate):
    known, flags = c["vht_known"], c["vht_flags"]
    code = (c["vht_bw"] & 0x1F).astype(np.int64)
    sgi_k = _restrict(live, known & 0x0004 != 0)
    bw_k = _restrict(live, known & 0x0040 != 0)
    sgi = flags & 0x04 != 0
    _put_masked(out, "sgi", rows, sgi, sgi_k)
    w, wok = phyrate.vht_width_index_v(code)
    _put_masked(out, "bw_mhz", rows, np.array(phyrate.VHT_WIDTH_MHZ)[w], bw_k & wok)
    mn = np.zeros(len(rows), dtype=np.int64)
    for k in ("vht_mn3", "vht_mn2", "vht_mn1", "vht_mn0"):     # first user with NSS != 0 wins
        v = c[k].astype(np.int64)
        mn = np.where(v & 0x0F != 0, v, mn)
    user = _restrict(live, mn & 0x0F != 0)
    mcs, nss = mn >> 4, mn & 0x0F
    _put_masked(out, "mcs", rows, mcs, user)
    _put_masked(out, "nss", rows, nss, user)
    r, ok = phyrate.vht_rate_v(mcs, nss, code, sgi)
    return _fallback(rate, r, user & sgi_k & bw_k & ok)


def _he_v(out, rows, c, live, rate):
    d1, d2, d3, d5, d6 = (c[k].astype(np.int64) for k in ("he1", "he2", "he3", "he5", "he6"))
    mcs_k = _restrict(live, d1 & 0x0020 != 0)
    bw_k = _restrict(live, d1 & 0x4000 != 0)
    gi_k = _restrict(live, d2 & 0x0002 != 0)
    mcs, bwru, gi, nsts = (d3 >> 8) & 0x0F, d5 & 0x0F, (d5 >> 4) & 0x03, d6 & 0x0F
    _put_masked(out, "mcs", rows, mcs, mcs_k)
    _put_masked(out, "nss", rows, nsts, _restrict(live, nsts != 0))
    _put_masked(out, "bw_mhz", rows, np.array([20, 40, 80, 160] + [0] * 12)[bwru], bw_k & (bwru < 4))
    gsel = gi_k & (gi < 3)
    _put_masked(out, "he_gi_us", rows, np.array(phyrate.HE_GI_US + (0.0,))[gi], gsel)
    _put_masked(out, "sgi", rows, gi == 0, gsel)
    r, ok = phyrate.he_rate_v(nsts, mcs, bwru, gi)
    return _fallback(rate, r, mcs_k & bw_k & gi_k & ok)


def _next_span(buf, span: Span, out: ColumnBuilder, idx: np.ndarray | None, rows: np.ndarray,
               nstart: np.ndarray, flags: np.ndarray | None) -> list:
    """Set fcs_bad; return the 802.11 frames behind the headers as span parts."""
    end, claimed, cut = _pick(span.end, idx), _pick(span.claimed, idx), _pick(span.cut, idx)
    keep = None
    if flags is not None:
        bad = flags & FLAG_BAD_FCS != 0
        fcs = flags & FLAG_FCS_AT_END != 0
        if fcs.any():
            short = fcs & (claimed - nstart < 4)
            if short.any():
                out.malformed(rows[short & ~cut], R_FCS)
                keep = ~(short & ~cut)
            # the CRC only changes fcs_bad: a read that does not ask for it skips the check
            check = np.flatnonzero(fcs & ~cut & ~short) if out.decodes("fcs") else ()
            if len(check):
                bad[check] |= ~_fcs_ok(buf, out, rows[check], nstart[check], claimed[check])
            claimed = np.where(fcs, claimed - 4, claimed)
            end = np.minimum(end, claimed)
        out.put("fcs_bad", rows, bad)
    has = end > nstart
    if not has.all():
        keep = has if keep is None else keep & has
    kind = np.full(len(rows), KIND_DOT11, np.int64)
    if keep is None:
        return [(rows, nstart, end, claimed, kind, cut)]
    k = np.flatnonzero(keep)
    if not len(k):
        return []
    return [(rows[k], nstart[k], end[k], claimed[k], kind[k], cut[k])]


LINK_DECODERS = {LINKTYPE: decode_radiotap}
LINK_FRAME_DECODERS = {LINKTYPE: frame_radiotap}
