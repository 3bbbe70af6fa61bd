"""802.11 MAC layer, per frame: the reference decoder (plain Python, one frame at a time).

Written apart from the vectorized `dot11` module, which it checks: same rules, separate code.
dpkt's ieee80211 module is not used: it raises on frames tshark decodes (short control frames,
+HTC, 4-address QoS), has no mesh control or A-MSDU handling and would need wrapping everywhere.
"""
from __future__ import annotations

from parsers.columnar.columns import escape_bytes

FRAGMENT_ROOM = 65535     # bytes a first 802.11 fragment's packet may continue past its frame

R_HEADER = "dot11: frame shorter than its header"
R_VERSION = "dot11: unsupported protocol version"
R_IV = "dot11: protected frame shorter than its IV"
R_BLOCKACK = "dot11: block ack shorter than its fields"
R_MESH = "dot11: mesh control overruns the frame"
R_AMSDU = "dot11: A-MSDU subframe header truncated"
R_LLC = "dot11: LLC header truncated"
R_SNAP = "dot11: LLC/SNAP header truncated"
R_FIXED = "dot11: management body shorter than its mandatory fields"
R_ELEMENT = "dot11: information element overruns the frame"
R_TOO_LONG = "dot11: longer than the largest 802.11 MPDU"
MAX_MPDU = 11454                            # octets, FCS included (VHT/HE/EHT)

_FLAG_NAMES = ("wlan_to_ds", "wlan_from_ds", "wlan_more_frag", "wlan_retry", "wlan_pwr_mgt",
               "wlan_more_data", "wlan_protected", "wlan_order")
# Management subtype -> bytes of fixed fields before the elements (action: the category).
_MGMT_FIXED = {0: 4, 1: 6, 2: 10, 3: 6, 4: 0, 5: 12, 8: 12, 9: 0, 10: 2, 11: 6, 12: 2, 13: 1, 14: 1}
# Subtypes that must carry elements after the fixed fields (at least one element header).
_MGMT_WITH_ELEMENTS = (0, 1, 2, 3, 5, 8)


class _Frame:
    """One frame's bytes and limits, with the 'is this missing, and is that malformed' rule."""

    def __init__(self, data: bytes, end: int, claimed: int, cut: bool, row: dict):
        self.data, self.end, self.claimed, self.cut, self.row = data, end, claimed, cut, row

    def has(self, upto: int, end: int | None = None) -> bool:
        return upto <= (self.end if end is None else end)

    def need(self, upto: int, reason: str, end: int | None = None, claimed: int | None = None) -> bool:
        """True if bytes up to `upto` are captured; else mark malformed unless the snap length explains it."""
        end = self.end if end is None else end
        claimed = self.claimed if claimed is None else claimed
        if upto <= end:
            return True
        if not self.cut or upto > claimed:
            self.row.setdefault("malformed", reason)
        return False

    def le(self, at: int, n: int) -> int:
        return int.from_bytes(self.data[at:at + n], "little")

    def be(self, at: int, n: int) -> int:
        return int.from_bytes(self.data[at:at + n], "big")

    def mac(self, at: int) -> str:
        return self.data[at:at + 6].hex(":")


def frame_dot11(data: bytes, start: int, end: int, claimed: int, cut: bool, row: dict
                ) -> tuple[int, int, int, int] | None:
    """Decode one 802.11 frame into row; return (EtherType, start, end, claimed) of an LLC/SNAP payload."""
    f = _Frame(data, min(end, len(data)), claimed, cut, row)
    s = start
    if claimed - s > MAX_MPDU:
        row.setdefault("malformed", R_TOO_LONG)   # the record's length is impossible; decode on
    if not f.need(s + 2, R_HEADER):
        return None
    fc0, flags = data[s], data[s + 1]
    if fc0 & 3:
        row.setdefault("malformed", R_VERSION)
        return None
    ftype, sub = (fc0 >> 2) & 3, fc0 >> 4
    row["wlan_type"], row["wlan_subtype"], row["wlan_flags"] = ftype, sub, flags
    for bit, name in enumerate(_FLAG_NAMES):
        row[name] = bool(flags >> bit & 1)
    if f.has(s + 4):
        row["wlan_duration"] = f.le(s + 2, 2)
    if f.has(s + 10):
        row["wlan_ra"] = f.mac(s + 4)
    if ftype == 0:
        return _management(f, s, sub, flags)
    if ftype == 1:
        _control(f, s, sub)
        return None
    if ftype == 2:
        return _data(f, s, sub, flags)
    if f.need(s + 10, R_HEADER):   # extension frames: DMG beacon, S1G beacon, ...
        if sub == 0:
            row["wlan_bssid"] = f.mac(s + 4)
        elif sub == 1:
            row["wlan_sa"] = f.mac(s + 4)
    return None


def _seq(f: _Frame, s: int) -> int:
    sc = f.le(s + 22, 2)
    f.row["wlan_seq"], f.row["wlan_frag"] = sc >> 4, sc & 15
    return sc & 15


def _management(f: _Frame, s: int, sub: int, flags: int) -> None:
    htc = 4 if flags & 0x80 else 0
    body = s + 24 + htc
    if not f.need(body, R_HEADER):
        return None
    row = f.row
    row["wlan_ta"], row["wlan_da"], row["wlan_sa"] = f.mac(s + 10), f.mac(s + 4), f.mac(s + 10)
    row["wlan_bssid"] = f.mac(s + 16)
    _seq(f, s)
    if flags & 0x40:
        _iv(f, body)
        return None
    fixed = _MGMT_FIXED.get(sub)
    if fixed is None:
        return None
    f.need(body + fixed + (2 if sub in _MGMT_WITH_ELEMENTS else 0), R_FIXED)
    if not f.has(body + fixed):
        return None
    if sub in (10, 12):
        row["wlan_reason"] = f.le(body, 2)
    elif sub == 11:
        row["wlan_status"] = f.le(body + 4, 2)
    elif sub in (1, 3):
        row["wlan_status"] = f.le(body + 2, 2)
    elif sub in (0, 2, 4, 5, 8):
        ssid = _find_ssid(f, body + fixed)
        if ssid is not None:
            row["wlan_ssid"] = escape_bytes(ssid)
    return None


def _find_ssid(f: _Frame, pos: int) -> bytes | None:
    """Return the first SSID element's bytes; the walk ends at the frame end (each step moves on)."""
    while pos < f.end:
        if not f.need(pos + 2, R_ELEMENT):
            return None
        tag, ln = f.data[pos], f.data[pos + 1]
        if not f.need(pos + 2 + ln, R_ELEMENT):
            return None
        if tag == 0:
            return f.data[pos + 2:pos + 2 + ln]
        pos += 2 + ln
    return None


def _iv(f: _Frame, body: int) -> None:
    """Read the CCMP packet number or TKIP sequence counter from a protected frame's IV."""
    if not f.need(body + 4, R_IV) or not f.has(body + 8):
        return
    iv = f.data[body:body + 8]
    if not iv[3] & 0x20:
        return                              # WEP: no extended IV, no packet number
    upper = int.from_bytes(iv[4:8], "little") << 16
    if iv[1] == (iv[0] | 0x20) & 0x7F:       # TKIP: TSC1, WEPSeed, TSC0, key id, TSC2..TSC5
        f.row["wlan_pn"] = upper | iv[0] << 8 | iv[2]
    elif iv[2] == 0:                        # CCMP: PN0, PN1, reserved, key id, PN2..PN5
        f.row["wlan_pn"] = upper | iv[1] << 8 | iv[0]


def _control(f: _Frame, s: int, sub: int) -> None:
    row = f.row
    if sub in (12, 13, 6, 0, 1):            # CTS, ACK, control frame extension, reserved: RA only
        f.need(s + 10, R_HEADER)
        return
    if not f.need(s + 16, R_HEADER):
        return
    if sub == 7:                            # control wrapper: only the RA is shown
        return
    if sub == 14:                           # CF-End: addr2 is the BSSID
        row["wlan_bssid"] = f.mac(s + 10)
        return
    row["wlan_ta"] = f.mac(s + 10)
    if sub == 10:                           # PS-Poll: addr1 is the BSSID
        row["wlan_bssid"] = f.mac(s + 4)
    elif sub in (8, 9):
        _block_ack(f, s, sub == 9)


def _block_ack(f: _Frame, s: int, is_ba: bool) -> None:
    if not f.need(s + 18, R_BLOCKACK):
        return
    ctl = f.le(s + 16, 2)
    kind = ctl >> 1 & 15
    ntid = (ctl >> 12) + 1
    if kind == 3:                           # multi-TID: per-TID info, then SSC (and bitmap)
        ssc_at, bm_at, bm_len = s + 20, s + 22, 8
        need = s + 18 + ntid * (12 if is_ba else 4)
    elif kind in (0, 1, 2, 6):
        ssc_at = s + 18
        bm_at = s + (26 if kind == 6 else 20)
        bm_len = 128 if kind == 0 else 8
        need = ssc_at + 2
    else:
        return
    ssc = None
    if f.has(ssc_at + 2):
        ssc = f.le(ssc_at, 2)
        f.row["wlan_ba_ssn"] = ssc >> 4
    if is_ba:
        if kind == 2:
            if ssc is None:
                bm_len = 0
            else:
                bm_len = {0: 8, 2: 32}.get(ssc >> 1 & 3, 0)
        if bm_len and kind != 3:
            need = bm_at + bm_len + (1 if kind == 1 else 0)
        if bm_len and f.has(bm_at + bm_len):
            f.row["wlan_ba_bitmap"] = f.data[bm_at:bm_at + bm_len].hex()
    f.need(need, R_BLOCKACK)


def _data(f: _Frame, s: int, sub: int, flags: int) -> tuple[int, int, int, int] | None:
    ds = flags & 3
    qos = sub >= 8
    pos = s + (30 if ds == 3 else 24)
    qc_at = pos
    if qos:
        pos += 2
        if flags & 0x80:
            pos += 4                        # +HTC: HT Control field after QoS control
    if not f.need(pos, R_HEADER):
        return None
    row = f.row
    a1, a2, a3 = f.mac(s + 4), f.mac(s + 10), f.mac(s + 16)
    row["wlan_ta"] = a2
    if ds == 0:
        row["wlan_da"], row["wlan_sa"], row["wlan_bssid"] = a1, a2, a3
    elif ds == 1:
        row["wlan_bssid"], row["wlan_sa"], row["wlan_da"] = a1, a2, a3
    elif ds == 2:
        row["wlan_da"], row["wlan_bssid"], row["wlan_sa"] = a1, a2, a3
    else:
        row["wlan_da"], row["wlan_sa"] = a3, f.mac(s + 24)
    frag = _seq(f, s)
    qc = 0
    amsdu = False
    if qos:
        qc = f.le(qc_at, 2)
        row["wlan_tid"] = qc & 15
        if sub <= 11:
            amsdu = bool(qc & 0x80)
            row["wlan_amsdu"] = amsdu
        if amsdu:
            # The A-MSDU header's address 3 (and 4) is the BSSID; DA (To DS) and SA (From DS) are
            # only in the subframes: taken from the first one below, as tshark shows them.
            if ds & 1:
                row.pop("wlan_da", None)
            if ds & 2:
                row.pop("wlan_sa", None)
            if ds == 3:
                row["wlan_bssid"] = a3
    if flags & 0x40:
        _iv(f, pos)
        return None
    if sub & 4 or frag:
        return None                         # no data, or a later fragment: no LLC header here
    end, claimed = f.end, f.claimed
    if flags & 0x04:
        # a first fragment: its packet continues in the next fragments (as past a snap length)
        claimed = max(claimed, end + FRAGMENT_ROOM)
        f.cut = True
    if qos and not amsdu and ds == 3 and qc & 0x100 and pos < end and not f.data[pos] & 0xFC:
        ae = f.data[pos] & 3                # 802.11s mesh control: flags, TTL, seq, extra addresses
        if not f.need(pos + 6 + 6 * ae, R_MESH) or ae == 3:
            return None
        pos += 6 + 6 * ae
    if amsdu:
        if not f.need(pos + 14, R_AMSDU):
            return None
        if ds & 1:
            row["wlan_da"] = f.mac(pos)
        if ds & 2:
            row["wlan_sa"] = f.mac(pos + 6)
        sub_end = pos + 14 + f.be(pos + 12, 2)
        end, claimed = min(end, sub_end), min(claimed, sub_end)
        pos += 14
    if not f.need(pos + 3, R_LLC, end, claimed):
        return None
    if f.data[pos:pos + 3] != b"\xaa\xaa\x03":
        return None
    if not f.need(pos + 8, R_SNAP, end, claimed):
        return None
    if f.data[pos + 3:pos + 6] not in (b"\x00\x00\x00", b"\x00\x00\xf8"):
        return None
    etype = f.be(pos + 6, 2)
    row["eth_type"] = etype
    return etype, pos + 8, end, claimed
