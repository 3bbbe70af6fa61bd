"""802.11 MAC layer, vectorized: frame control, addresses by role, sequence, QoS, PN, Block Ack, LLC/SNAP.

Input spans start at the frame control field and end before the FCS (when the radio header said the
frame carries one). Raw 802.11 captures (LINKTYPE 105) come straight here; like tshark's default
(wlan.check_fcs off) we assume they carry no FCS. Offsets are computed once per row from a layout
table indexed by the frame-control bits that decide the header shape, so the hot path has no
per-layout Python loop. The per-frame reference decoder lives in `dot11_frame` (written separately,
the check on this one); management bodies (fixed fields, SSID element) in `dot11_mgmt`.
"""
from __future__ import annotations

import numpy as np

from parsers.columnar.columns import ColumnBuilder
from parsers.columnar.gather import Window, gathered_ahead, u8, ule
from parsers.columnar.span import Span
from parsers.layers.dot11_frame import FRAGMENT_ROOM, frame_dot11
from parsers.layers.dot11_mgmt import decode_mgmt_body, lost, put_hex

__all__ = ["decode_dot11", "decode_plain_body", "frame_dot11", "LINK_DECODERS", "LINK_FRAME_DECODERS"]

# The malformed reasons are shared with the per-frame decoder: both must say the same thing.
from parsers.layers.dot11_frame import (
    R_AMSDU,
    R_BLOCKACK,
    R_HEADER,
    R_IV,
    R_LLC,
    R_MESH,
    R_SNAP,
    R_TOO_LONG,
    R_VERSION,
)

# The largest MPDU any 802.11 PHY carries (VHT/HE/EHT: 11454 octets, FCS included); a record
# claiming more on the wire cannot be one frame.
MAX_MPDU = 11454

_ADDR_AT = (0, 4, 10, 16, 24)       # byte offset of address slot 1..4 (slot 0 = none)
_ROLES = ("wlan_ra", "wlan_ta", "wlan_da", "wlan_sa", "wlan_bssid")


def _layout(code: int) -> tuple[int, tuple[int, int, int, int, int], bool, int, bool]:
    """Return (header length, address slot per role, has sequence control, QoS offset, A-MSDU bit
    meaningful) for a layout code = type | subtype << 2 | DS bits << 6 | order << 8."""
    ftype, sub, ds, order = code & 3, (code >> 2) & 15, (code >> 6) & 3, code >> 8
    if ftype == 0:   # management: DA=addr1, SA=addr2, BSSID=addr3 whatever the DS bits say
        return 24 + 4 * order, (1, 2, 1, 2, 3), True, 0, False
    if ftype == 1:
        if sub in (8, 9, 11, 15, 2, 3, 4, 5):   # BAR, BA, RTS, CF-End+Ack, Trigger, TACK, BRP, NDPA
            return 16, (1, 2, 0, 0, 0), False, 0, False
        if sub == 10:    # PS-Poll: addr1 is the BSSID (tshark shows it as both RA and BSSID)
            return 16, (1, 2, 0, 0, 1), False, 0, False
        if sub == 14:    # CF-End: tshark shows addr2 as the BSSID, no TA
            return 16, (1, 0, 0, 0, 2), False, 0, False
        if sub == 7:     # control wrapper: RA, carried frame control, HT control
            return 16, (1, 0, 0, 0, 0), False, 0, False
        return 10, (1, 0, 0, 0, 0), False, 0, False   # CTS, ACK, extension, reserved
    if ftype == 3:       # extension: DMG beacon (addr1 = BSSID), S1G beacon (addr1 = SA)
        return 10, (1, 0, 0, 1 if sub == 1 else 0, 1 if sub == 0 else 0), False, 0, False
    qos = sub >= 8
    four = ds == 3
    hdr = 24 + 6 * four + 2 * qos + 4 * (qos and order)
    da, sa, bssid = ((1, 2, 3), (3, 2, 1), (1, 3, 2), (3, 4, 0))[ds]
    return hdr, (1, 2, da, sa, bssid), True, (30 if four else 24) if qos else 0, 8 <= sub <= 11


def _tables() -> tuple[np.ndarray, ...]:
    hdr = np.zeros(512, np.int64)
    roles = np.zeros((5, 512), np.int64)
    seq = np.zeros(512, bool)
    qos = np.zeros(512, np.int64)
    amsdu = np.zeros(512, bool)
    for code in range(512):
        h, rl, sq, q, am = _layout(code)
        hdr[code], seq[code], qos[code], amsdu[code] = h, sq, q, am
        roles[:, code] = rl
    return hdr, roles, seq, qos, amsdu


_HDR, _ROLE, _SEQ, _QOS, _AMSDU_OK = _tables()

# Block Ack control "BA type" (bits 1-4) -> offsets from the frame start; -1 = not decoded.
# BlockAck: SSC offset, bitmap offset, bitmap length, bytes that must follow the bitmap.
_BA_SSC = np.full(16, -1, np.int64)
_BA_BM = np.full(16, -1, np.int64)
_BA_LEN = np.zeros(16, np.int64)
_BA_TAIL = np.zeros(16, np.int64)
for _t, _ssc, _bm, _ln, _tail in ((0, 18, 20, 128, 0),    # basic
                                  (1, 18, 20, 8, 1),      # extended compressed (+ RBUFCAP)
                                  (2, 18, 20, 8, 0),      # compressed (length from SSC fragment bits)
                                  (3, 20, 22, 8, 0),      # multi-TID: first TID's record
                                  (6, 18, 26, 8, 0)):     # GCR: SSC, GCR group address, bitmap
    _BA_SSC[_t], _BA_BM[_t], _BA_LEN[_t], _BA_TAIL[_t] = _ssc, _bm, _ln, _tail
_BAR_SSC = np.full(16, -1, np.int64)
_BAR_SSC[[0, 1, 2, 6]] = 18
_BAR_SSC[3] = 20      # multi-TID: per-TID info, then the first TID's SSC


def _empty_span() -> Span:
    z = np.zeros(0, np.int64)
    return Span(z, z, z, z, z, np.zeros(0, bool))


def _pick(mask: np.ndarray):
    """Return an index for the rows where mask is True (a whole-array slice when all are)."""
    return slice(None) if mask.all() else np.flatnonzero(mask)


# Bytes of the MAC header copied per frame: the longest header (4 addresses, QoS, HT control: 36)
# plus LLC/SNAP, and an A-MSDU subframe header or mesh control for most frames.
WINDOW = 64


def decode_dot11(buf: np.ndarray, span: Span, out: ColumnBuilder) -> Span:
    """Decode 802.11 MAC headers; return the rows whose LLC/SNAP payload follows, kind = EtherType."""
    if not len(span):
        return _empty_span()
    rows, s = span.rows, span.start.astype(np.int64, copy=False)
    e = span.end.astype(np.int64, copy=False)
    cl, cut = span.claimed.astype(np.int64, copy=False), span.cut
    # Decoding goes on: the captured bytes themselves may well be consistent.
    out.malformed(rows[cl - s > MAX_MPDU], R_TOO_LONG)

    miss, bad = lost(s + 2, e, cl, cut)
    out.malformed(rows[bad], R_HEADER)
    k = _pick(~miss)
    rows, s, e, cl, cut = rows[k], s[k], e[k], cl[k], cut[k]
    # one gather (made ahead by the walk thread, mostly): every header field below is read from it
    h = Window(buf, s, WINDOW, gathered_ahead(out.ahead, "dot11", rows, s, WINDOW))
    fc0, fl = h.u8(0).astype(np.int64), h.u8(1).astype(np.int64)
    v0 = (fc0 & 3) == 0
    out.malformed(rows[~v0], R_VERSION)
    k = _pick(v0)
    rows, s, e, cl, cut, fc0, fl, h = rows[k], s[k], e[k], cl[k], cut[k], fc0[k], fl[k], h.take(k)
    ftype = (fc0 >> 2) & 3
    sub = fc0 >> 4
    _put_fc(out, rows, ftype, sub, fl)

    avail = e - s
    out.put_where("wlan_duration", rows, h.ule(2, 2), avail >= 4)
    a1 = h.ube(4, 6)
    out.put_where("wlan_ra", rows, a1, avail >= 10)

    code = (fc0 >> 2) | ((fl & 3) << 6) | ((fl >> 7) << 8)
    hdr = _HDR[code]
    miss, bad = lost(s + hdr, e, cl, cut)
    out.malformed(rows[bad], R_HEADER)
    k = _pick(~miss)
    rows, s, e, cl, cut, h = rows[k], s[k], e[k], cl[k], cut[k], h.take(k)
    fl, ftype, sub, code, hdr, a1 = fl[k], ftype[k], sub[k], code[k], hdr[k], a1[k]

    _put_addresses(h, out, rows, code, a1)
    n = len(rows)
    has_seq = _SEQ[code]
    sc = h.ule(22, 2)
    out.put_where("wlan_seq", rows, sc >> 4, has_seq)
    frag = np.where(has_seq, sc & 15, 0)
    out.put_where("wlan_frag", rows, frag, has_seq)
    qoff = _QOS[code]
    qos = qoff > 0
    amsdu = np.zeros(n, bool)
    qc = np.zeros(n, np.uint64)
    if qos.any():
        # the QoS field follows the third address (24) or the fourth (30)
        qc = np.where(qos, np.where(qoff == 30, h.ule(30, 2), h.ule(24, 2)), 0)
        out.put_where("wlan_tid", rows, qc & 15, qos)
        amsdu_ok = _AMSDU_OK[code]
        amsdu = amsdu_ok & ((qc >> 7) & 1).astype(bool)
        out.put_where("wlan_amsdu", rows, amsdu, amsdu_ok)
        if amsdu.any():
            k = np.flatnonzero(amsdu)
            _amsdu_addresses(h.take(k), out, rows[k], fl[k])

    body = s + hdr
    protected = ((fl & 0x40) != 0) & (ftype != 1) & (ftype != 3)
    # The IV, Block Ack and management-body parts are the last ones decoded for their rows, so a
    # read that asks for none of their columns skips them (see columns.PARTS).
    if protected.any() and out.decodes("iv"):
        k = np.flatnonzero(protected)
        _protected(buf, out, rows[k], body[k], e[k], cl[k], cut[k])

    k = np.flatnonzero((ftype == 1) & ((sub == 8) | (sub == 9))) if out.decodes("block_ack") else ()
    if len(k):
        _block_ack(buf, out, rows[k], s[k], e[k], cl[k], cut[k], sub[k])

    k = np.flatnonzero((ftype == 0) & ~protected) if out.decodes("mgmt") else ()
    if len(k):
        decode_mgmt_body(buf, out, rows[k], body[k], e[k], cl[k], cut[k], sub[k])

    # Data with a body: not protected, a subtype that carries data, the first fragment only (later
    # fragments carry no LLC header; tshark with defragmentation off shows them as data).
    k = _pick((ftype == 2) & ~protected & ((sub & 4) == 0) & (frag == 0))
    # A first fragment (More Fragments set) holds only the start of its packet: the rest is in the
    # next fragments, so an IP length past the frame's end is expected there, as after a snap length.
    more = (fl[k] & 0x04) != 0
    cl_k = np.where(more, np.maximum(cl[k], e[k] + FRAGMENT_ROOM), cl[k])
    return _data_body(h.take(k), out, rows[k], hdr[k], e[k], cl_k, cut[k] | more, fl[k], qc[k], qos[k],
                      amsdu[k])


def decode_plain_body(buf: np.ndarray, span: Span, out: ColumnBuilder) -> Span:
    """Decode the bodies of decrypted data frames; return the rows whose LLC/SNAP payload follows.

    `span` covers plaintext 802.11 frames (Protected bit cleared, no security header or MIC) in their
    own buffer, for rows whose header columns the original frame gave already: only the body is read
    (mesh control, A-MSDU subframe, LLC/SNAP), as for an open frame."""
    if not len(span):
        return _empty_span()
    rows, s, e = span.rows, span.start.astype(np.int64, copy=False), span.end.astype(np.int64, copy=False)
    cl, cut = span.claimed.astype(np.int64, copy=False), span.cut
    h = Window(buf, s, WINDOW)
    fc0, fl = h.u8(0).astype(np.int64), h.u8(1).astype(np.int64)
    ftype, sub = (fc0 >> 2) & 3, fc0 >> 4
    code = (fc0 >> 2) | ((fl & 3) << 6) | ((fl >> 7) << 8)
    hdr = _HDR[code]
    qoff = _QOS[code]
    qos = qoff > 0
    qc = np.where(qos, np.where(qoff == 30, h.ule(30, 2), h.ule(24, 2)), 0).astype(np.uint64)
    amsdu = _AMSDU_OK[code] & ((qc >> 7) & 1).astype(bool)
    frag = np.where(_SEQ[code], h.ule(22, 2) & 15, 0)
    # the same rows an open frame's body is walked for (see decode_dot11)
    k = _pick(((fc0 & 3) == 0) & (ftype == 2) & ((sub & 4) == 0) & (frag == 0) & (s + hdr <= e))
    more = (fl[k] & 0x04) != 0
    cl_k = np.where(more, np.maximum(cl[k], e[k] + FRAGMENT_ROOM), cl[k])
    return _data_body(h.take(k), out, rows[k], hdr[k], e[k], cl_k, cut[k] | more, fl[k], qc[k], qos[k],
                      amsdu[k])


def _put_fc(out: ColumnBuilder, rows: np.ndarray, ftype, sub, fl) -> None:
    out.put("wlan_type", rows, ftype)
    out.put("wlan_subtype", rows, sub)
    out.put("wlan_flags", rows, fl)
    for name, bit in (("wlan_to_ds", 0x01), ("wlan_from_ds", 0x02), ("wlan_more_frag", 0x04),
                      ("wlan_retry", 0x08), ("wlan_pwr_mgt", 0x10), ("wlan_more_data", 0x20),
                      ("wlan_protected", 0x40), ("wlan_order", 0x80)):
        if out.wants(name):     # a projected read skips the flags it does not keep
            out.put(name, rows, (fl & bit) != 0)


def _put_addresses(h: Window, out: ColumnBuilder, rows, code, a1) -> None:
    """Write each address role from the slot the layout table names for it."""
    n = len(rows)
    width = _HDR[code]
    slots = np.zeros((5, n), np.uint64)
    slots[1] = a1
    wanted = [(name, role) for name, role in zip(_ROLES[1:], _ROLE[1:]) if out.wants(name)]
    # TA is always slot 2 (or none): a read keeping neither DA, SA nor BSSID reads no further slot
    far = any(name != "wlan_ta" for name, _ in wanted)
    for i in (2, 3, 4) if far else (2,):    # a slot is read only where it lies inside the header
        inside = width >= _ADDR_AT[i] + 6
        if inside.any():
            np.copyto(slots[i], h.ube(_ADDR_AT[i], 6), where=inside)
    flat = slots.reshape(-1)
    col = np.arange(n)
    for name, role in wanted:
        slot = role[code]
        has = slot > 0
        if has.any():
            out.put_where(name, rows, flat[slot * n + col], has)


def _amsdu_addresses(h: Window, out: ColumnBuilder, rows, fl) -> None:
    """A-MSDU headers carry the BSSID where DA (To DS) or SA (From DS) would be; the real ones are
    in the subframes. Like tshark, drop them here (the first subframe's are written later)."""
    ds = fl & 3
    out.clear("wlan_da", rows[(ds & 1) == 1])
    out.clear("wlan_sa", rows[(ds & 2) == 2])
    four = ds == 3
    out.put("wlan_bssid", rows[four], h.ube(16, 6)[four])


def _protected(buf, out: ColumnBuilder, rows, body, e, cl, cut) -> None:
    """Write the CCMP PN / TKIP TSC from the IV of protected frames (WEP: none)."""
    miss, bad = lost(body + 4, e, cl, cut)
    out.malformed(rows[bad], R_IV)
    m = body + 8 <= e
    rows, body = rows[m], body[m]
    iv0, iv1, iv2, iv3 = u8(buf, body), u8(buf, body + 1), u8(buf, body + 2), u8(buf, body + 3)
    ext = (iv3 & 0x20) != 0
    # Without the key management, tell TKIP by its WEPSeed byte, CCMP by its zero reserved byte
    # (TKIP is tried first, as tshark does).
    tkip = ext & (iv1 == ((iv0 | 0x20) & 0x7F))
    ccmp = ext & ~tkip & (iv2 == 0)
    high = ule(buf, body + 4, 4) << np.uint64(16)
    low = np.where(tkip, iv2 | (iv0 << np.uint64(8)), iv0 | (iv1 << np.uint64(8)))
    m = tkip | ccmp
    out.put("wlan_pn", rows[m], (high | low)[m])


def _block_ack(buf, out: ColumnBuilder, rows, s, e, cl, cut, sub) -> None:
    """Write the starting sequence number and bitmap of BlockAck / BlockAckReq frames."""
    if not len(rows):
        return
    miss, bad = lost(s + 18, e, cl, cut)
    out.malformed(rows[bad], R_BLOCKACK)
    k = np.flatnonzero(~miss)
    rows, s, e, cl, cut, sub = rows[k], s[k], e[k], cl[k], cut[k], sub[k]
    ctl = ule(buf, s + 16, 2)
    bat = ((ctl >> 1) & 15).astype(np.int64)
    is_ba = sub == 9
    ssc_at = np.where(is_ba, _BA_SSC[bat], _BAR_SSC[bat])
    has_ssc = (ssc_at >= 0) & (s + ssc_at + 2 <= e)
    ssc = ule(buf, s + np.maximum(ssc_at, 0), 2)
    out.put("wlan_ba_ssn", rows[has_ssc], ssc[has_ssc] >> 4)

    bm_at = _BA_BM[bat]
    bm_len = _BA_LEN[bat]
    # Compressed bitmap length from the SSC fragment subfield B1-B2 (tshark: 0 -> 8, 2 -> 32 bytes,
    # other values: no bitmap; an SSC that was not captured says nothing, so no bitmap either).
    fbits = ((ssc >> 1) & 3).astype(np.int64)
    cbm = np.where(fbits == 0, 8, np.where(fbits == 2, 32, 0))
    bm_len = np.where(bat == 2, np.where(has_ssc, cbm, 0), bm_len)
    has_bm = is_ba & (bm_at >= 0) & (bm_len > 0)
    need = np.where(ssc_at >= 0, s + ssc_at + 2, s + 18)
    need = np.where(has_bm, s + bm_at + bm_len + _BA_TAIL[bat], need)
    # Multi-TID: every TID's record must be there (BAR: 4 bytes each, BA: 12 bytes each).
    ntid = ((ctl >> 12) + 1).astype(np.int64)
    need = np.where(bat == 3, s + 18 + ntid * np.where(is_ba, 12, 4), need)
    miss, bad = lost(need, e, cl, cut)
    out.malformed(rows[bad], R_BLOCKACK)
    has_bm &= s + bm_at + bm_len <= e
    for ln in np.unique(bm_len[has_bm]).tolist():
        k = np.flatnonzero(has_bm & (bm_len == ln))
        put_hex(out, "wlan_ba_bitmap", rows[k], buf, s[k] + bm_at[k], ln)


def _data_body(h: Window, out: ColumnBuilder, rows, at, e, cl, cut, fl, qc, qos, amsdu) -> Span:
    """Walk mesh control, the first A-MSDU subframe header and LLC/SNAP; return the next-layer span.

    `at` is where the body starts in each row's window `h` (the header length)."""
    if not len(rows):
        return _empty_span()
    s = h.pos
    # 802.11s mesh control follows the QoS field of 4-address QoS data whose QoS "mesh control
    # present" bit is set and whose first body byte looks like mesh flags (tshark's test).
    mesh = qos & ~amsdu & ((fl & 3) == 3) & (((qc >> 8) & 1) == 1) & (s + at + 1 <= e)
    keep = np.ones(len(rows), bool)
    if mesh.any():
        mf = h.u8(at)
        mesh &= (mf & 0xFC) == 0
        ae = (mf & 3).astype(np.int64)
        mlen = np.where(mesh, 6 + 6 * ae, 0)
        miss, bad = lost(s + at + mlen, e, cl, cut)
        miss &= mesh
        bad &= mesh
        out.malformed(rows[bad], R_MESH)
        keep = ~miss & ~(mesh & (ae == 3))   # address extension mode 3 is reserved: stop there
        at = at + mlen

    # A-MSDU: decode the first subframe (DA, SA, length; then its LLC/SNAP) as tshark's first
    # occurrence does.
    lim_e, lim_c = e, cl
    if amsdu.any():
        miss, bad = lost(s + at + 14, e, cl, cut)
        out.malformed(rows[bad & amsdu & keep], R_AMSDU)
        keep &= ~(miss & amsdu)
        k = np.flatnonzero(amsdu & keep)
        ds = fl[k] & 3
        hk = h.take(k)
        m = (ds & 1) == 1
        out.put("wlan_da", rows[k[m]], hk.ube(at[k], 6)[m])
        m = (ds & 2) == 2
        out.put("wlan_sa", rows[k[m]], hk.ube(at[k] + 6, 6)[m])
        sub_end = s + at + 14 + h.ube(at + 12, 2).astype(np.int64)
        lim_e = np.where(amsdu, np.minimum(e, sub_end), e)
        lim_c = np.where(amsdu, np.minimum(cl, sub_end), cl)
        at = np.where(amsdu, at + 14, at)

    pos = s + at
    miss, bad = lost(pos + 3, lim_e, lim_c, cut)
    out.malformed(rows[bad & keep], R_LLC)
    keep &= ~miss
    llc = h.ube(at, 8)          # DSAP, SSAP, control, OUI, EtherType in one read
    snap = keep & ((llc >> np.uint64(40)) == 0xAAAA03)
    miss, bad = lost(pos + 8, lim_e, lim_c, cut)
    out.malformed(rows[bad & snap], R_SNAP)
    snap &= ~miss
    oui = (llc >> np.uint64(16)) & np.uint64(0xFFFFFF)
    snap &= (oui == 0) | (oui == 0xF8)   # RFC 1042 and 802.1H bridge-tunnel encapsulation
    k = _pick(snap)
    et = (llc[k] & np.uint64(0xFFFF)).astype(np.int64)
    rk = rows[k]
    out.put("eth_type", rk, et)
    return Span(rk, pos[k] + 8, lim_e[k], lim_c[k], et, cut[k])


LINK_DECODERS = {105: decode_dot11}
LINK_FRAME_DECODERS = {105: frame_dot11}
