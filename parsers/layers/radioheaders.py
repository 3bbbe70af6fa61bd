"""The other radio pseudo-headers: PPI (LINKTYPE 192), Prism (119) and AVS (163), as tshark reads them.

PPI: version, flags (0x01: fields padded to 4 bytes), length (LE), DLT of what follows (105 =
802.11; anything else is not decoded), then fields of (type, length).  802.11-Common (type 2, 20
bytes): TSFT (tshark shows it only when non-zero; flag 0x02 means milliseconds, scaled to us), flags
(0x01 FCS at end, 0x04 FCS invalid), rate (500 kb/s, 0 = none), channel frequency (0 = none) and
flags, FHSS, dBm signal and noise (0 and -128 = none).  802.11n MAC (3, 12 bytes) and MAC+PHY (4,
48 bytes): flags (0x02 40 MHz, 0x04 short GI, 0x10 part of an A-MPDU), A-MPDU id (ampdu_ref when
0x10), and for MAC+PHY the MCS.  A later 802.11-Common field clears the HT information, as in tshark.
Other lengths for these three types are malformed.  Columns as for radiotap (see ``radiotap``):
phy ``ht`` when a MAC or MAC+PHY field is present, else the channel-flags / rate rule.

Prism: a 144-byte header (msgcode 0x41 or 0x44 in either byte order; the byte order follows the
msgcode), device name, and ten DID items (did, status, length, 32-bit value) recognised by DID
value, 0x000N0044 or 0x0000N041 (N = 1 hosttime .. 10 frmlen), status 0 = supplied; a later item
of the same DID wins.  As tshark: tsft = mactime, signal_dbm = the RSSI item cast to int8, rate =
rate x 0.5 Mb/s, no frequency (Prism gives a channel number only) and no noise.  A DLT 119 record
that starts with an AVS cookie is an AVS header; one with no recognisable msgcode is a bare 802.11
frame (tshark does the same).

AVS (wlan-ng "capture header", big-endian): cookie 0x8021100v (v = 1 or 2), header length (>= 64),
mactime, hosttime, phytype, channel, data rate (100 kb/s), antenna, priority, SSI type (2 = dBm),
SSI signal, SSI noise, preamble, encoding (v2 adds sequence, drops, receiver address).  tsft =
mactime; rate = data rate / 10 (0 = none); signal/noise in dBm when SSI type is 2; antenna;
freq_mhz from the channel as tshark computes it (phytype 7/8 = 5 GHz: 5000 + 5 x channel;
otherwise 2.4 GHz channels 1-14; a value above 255 is already a frequency; FHSS has none).
No FCS is assumed after Prism or AVS headers (fcs_bad null).
"""
from __future__ import annotations

import struct

import numpy as np

from parsers.layers import phyrate
from parsers.columnar.columns import ColumnBuilder
from parsers.layers.fcs import crc_ok
from parsers.columnar.gather import ube, ule
from parsers.layers.radiotap import (DMG_MHZ, chan_flags_phy, decode_radiotap, dot11_payload, fcs_trailer,
                                     frame_radiotap, header_missing, legacy_rate_phy, put_phy, _gather,
                                     _put_text, _CHAN_HT, _CHAN_IGNORED, _CHAN_LEGACY)
from parsers.columnar.span import KIND_DOT11, Span, concat

PPI_HEADER = 8
PPI_COMMON, PPI_MAC, PPI_MACPHY = 2, 3, 4
PPI_FIELD_LEN = {PPI_COMMON: 20, PPI_MAC: 12, PPI_MACPHY: 48}
PPI_DLT_DOT11 = 105
MAX_FAST_PPI_FIELDS = 16
PRISM_HEADER = 144
PRISM_MSGCODES = (0x41, 0x44)
PRISM_DIDS = {1: "hosttime", 2: "mactime", 3: "channel", 4: "rssi", 5: "sq", 6: "signal",
              7: "noise", 8: "rate", 9: "istx", 10: "frmlen"}
AVS_COOKIES = (0x80211001, 0x80211002)
AVS_MIN_HEADER = 64

R_PPI_SHORT = "ppi: frame shorter than the PPI header"
R_PPI_LEN8 = "ppi: header length < 8"
R_PPI_LONG = "ppi: header longer than the frame"
R_PPI_FIELD = "ppi: field runs past header length"
R_PPI_FIELD_LEN = "ppi: 802.11 field with an invalid length"
R_PPI_FCS = "ppi: frame shorter than its FCS"
R_PRISM_SHORT = "prism: frame shorter than the Prism header"
R_AVS_SHORT = "avs: frame shorter than the AVS header"
R_AVS_VERSION = "avs: unknown header version"
R_AVS_LEN = "avs: header length < 64"
R_AVS_LONG = "avs: header longer than the frame"


def _empty(span: Span) -> Span:
    return span.take(np.zeros(len(span), bool))


def _s8(v: int) -> int:
    v &= 0xFF
    return v - 256 if v >= 128 else v


def avs_freq(phytype: int, channel: int) -> int | None:
    """Return the frequency tshark derives from an AVS phytype and channel, or None."""
    if phytype == 1:
        return None
    if channel > 255:
        return channel if channel <= 0xFFFF else None
    if phytype in (7, 8):
        return 5000 + 5 * channel if channel <= 200 else None
    if channel == 14:
        return 2484
    return 2407 + 5 * channel if 1 <= channel <= 13 else None


# ==================================================================================================
# PPI
# ==================================================================================================
def frame_ppi(data: bytes, start: int, end: int, claimed: int, cut: bool,
              row: dict) -> tuple[int, int, int, int] | None:
    """Decode one PPI header into `row`; return the 802.11 frame behind it, if its DLT is 105."""
    avail = end - start
    if header_missing(row, avail, PPI_HEADER, cut, R_PPI_SHORT):
        return None
    hb = bytes(data[start:end])
    _ver, pflags, plen, dlt = struct.unpack_from("<BBHI", hb)
    if plen < PPI_HEADER:
        row.setdefault("malformed", R_PPI_LEN8)
        return None
    if header_missing(row, avail, plen, cut, R_PPI_LONG):
        return None
    st: dict = {"phy_ht": False, "ht": None, "common": None, "ampdu": None}
    pos = PPI_HEADER
    bad = None
    while pos + 4 <= plen:
        ftype, flen = struct.unpack_from("<HH", hb, pos)
        body = pos + 4
        if body + flen > plen:
            bad = R_PPI_FIELD
            break
        want = PPI_FIELD_LEN.get(ftype)
        if want is not None and flen != want:
            bad = R_PPI_FIELD_LEN
            break
        if ftype == PPI_COMMON:
            st["common"] = struct.unpack_from("<QHHHHBBbb", hb, body)
            st["ht"] = None
        elif ftype in (PPI_MAC, PPI_MACPHY):
            mflags, ampdu = struct.unpack_from("<II", hb, body)
            st["phy_ht"] = True
            st["ht"] = (bool(mflags & 0x02), bool(mflags & 0x04),
                        hb[body + 9] if ftype == PPI_MACPHY else None)
            if mflags & 0x10:
                st["ampdu"] = ampdu
        pos = body + flen
        if pflags & 0x01:
            pos += -pos % 4
    _ppi_row(st, row)
    common = st["common"]
    if bad is not None:
        if common is not None:
            row["fcs_bad"] = bool(common[1] & 0x04)
        row.setdefault("malformed", bad)
        return None
    nstart, nend, nclaimed, crc_bad = start + plen, end, claimed, False
    if common is not None and common[1] & 0x01:
        trailer = fcs_trailer(data, nstart, end, claimed, cut)
        if trailer is None:
            row["fcs_bad"] = bool(common[1] & 0x04)
            row.setdefault("malformed", R_PPI_FCS)
            return None
        nend, nclaimed, crc_bad = trailer
    if common is not None:
        row["fcs_bad"] = bool(common[1] & 0x04) or crc_bad
    return dot11_payload(nstart, nend, nclaimed) if dlt == PPI_DLT_DOT11 else None


def _ppi_row(st: dict, row: dict) -> None:
    """Set the columns of one PPI header from its parsed state."""
    common, ht = st["common"], st["ht"]
    freq = rate_raw = None
    if common is not None:
        tsft, cflags, rate_raw, freq, chflags, _hs, _hp, sig, noise = common
        if tsft:
            row["tsft"] = (tsft * 1000) & 0xFFFFFFFFFFFFFFFF if cflags & 0x02 else tsft
        row["chan_flags"] = chflags
        if freq:
            row["freq_mhz"] = freq
        if sig not in (0, -128):
            row["signal_dbm"] = sig
        if noise not in (0, -128):
            row["noise_dbm"] = noise
    if st["ampdu"] is not None:
        row["ampdu_ref"] = st["ampdu"]
    legacy = rate_raw * 0.5 if rate_raw else None
    dmg = freq is not None and DMG_MHZ[0] <= freq <= DMG_MHZ[1]
    rate = None
    if dmg:
        phy = None
    elif st["phy_ht"]:
        phy = "ht"
        if ht is not None:
            bw40, sgi, mcs = ht
            row["bw_mhz"] = 40 if bw40 else 20
            row["sgi"] = sgi
            if mcs is not None:
                row["mcs"] = mcs
                nss = phyrate.ht_nss(mcs)
                if nss is not None:
                    row["nss"] = nss
                rate = phyrate.ht_rate(mcs, bw40, sgi)
    else:
        phy = chan_flags_phy(common[4]) if common is not None else None
        if phy is None:
            phy = legacy_rate_phy(rate_raw or None, bool(freq))
    put_phy(row, phy, legacy if rate is None else rate)


def decode_ppi(buf: np.ndarray, span: Span, out: ColumnBuilder) -> Span:
    """Decode PPI headers; return the 802.11 frames behind those whose DLT is 105."""
    rows, start, end, cut = span.rows, span.start, span.end, span.cut
    avail = end - start
    short = avail < PPI_HEADER
    out.malformed(rows[short & ~cut], R_PPI_SHORT)
    idx = np.flatnonzero(~short)
    if not len(idx):
        return _empty(span)
    hdr = _gather(buf, start[idx], PPI_HEADER).view(
        np.dtype([("ver", "u1"), ("flags", "u1"), ("len", "<u2"), ("dlt", "<u4")]))
    plen = hdr["len"].astype(np.int64)
    aligned = (hdr["flags"] & 0x01).astype(np.int64)
    dlt = hdr["dlt"].astype(np.int64)
    b8 = plen < PPI_HEADER
    out.malformed(rows[idx[b8]], R_PPI_LEN8)
    long_ = ~b8 & (plen > avail[idx])
    out.malformed(rows[idx[long_ & ~cut[idx]]], R_PPI_LONG)
    keep = ~(b8 | long_)
    idx, plen, aligned, dlt = idx[keep], plen[keep], aligned[keep], dlt[keep]

    n = len(idx)
    types = np.full((n, MAX_FAST_PPI_FIELDS), -1, dtype=np.int64)
    lens = np.zeros((n, MAX_FAST_PPI_FIELDS), dtype=np.int64)
    pos = np.full(n, PPI_HEADER, dtype=np.int64)
    ok = np.ones(n, bool)
    active = np.flatnonzero(pos + 4 <= plen)
    for k in range(MAX_FAST_PPI_FIELDS):
        if not len(active):
            break
        at = start[idx[active]] + pos[active]
        t = ule(buf, at, 2).astype(np.int64)
        ln = ule(buf, at + 2, 2).astype(np.int64)
        fits = pos[active] + 4 + ln <= plen[active]
        want = np.select([t == PPI_COMMON, t == PPI_MAC, t == PPI_MACPHY], [20, 12, 48], -1)
        good = fits & ((want < 0) | (ln == want))
        ok[active[~good]] = False        # malformed: the reference decoder says which way
        active = active[good]
        types[active, k], lens[active, k] = t[good], ln[good]
        p = pos[active] + 4 + lens[active, k]
        pos[active] = p + aligned[active] * (-p % 4)
        active = active[pos[active] + 4 <= plen[active]]
    ok[active] = False                    # more fields than the fast path takes
    out.defer(rows[idx[~ok]])
    idx, plen, aligned, dlt, types, lens = (a[ok] for a in (idx, plen, aligned, dlt, types, lens))
    if not len(idx):
        return _empty(span)
    sig = np.concatenate([aligned[:, None], types, lens], axis=1)
    flat = np.ascontiguousarray(sig).view(np.dtype((np.void, sig.shape[1] * 8))).ravel()
    _, first, inv = np.unique(flat, return_index=True, return_inverse=True)
    parts = []
    for g_id, r0 in enumerate(first.tolist()):
        g = np.flatnonzero(inv == g_id)
        parts += _ppi_group(buf, span, out, idx[g], plen[g], dlt[g], sig[r0])
    if not parts:
        return _empty(span)
    return Span(*(np.concatenate([p[i] for p in parts]) for i in range(6)))


def _ppi_group(buf, span: Span, out: ColumnBuilder, idx: np.ndarray, plen: np.ndarray,
               dlt: np.ndarray, sig: np.ndarray) -> list:
    """Decode PPI rows sharing one field layout."""
    k = MAX_FAST_PPI_FIELDS
    aligned, types, lens = int(sig[0]), sig[1:1 + k].tolist(), sig[1 + k:].tolist()
    off = PPI_HEADER
    common_at = None                  # body offset of the last 802.11-Common field
    ht_src = None                     # body offset and type of the MAC field whose HT info stands
    mac_fields = []                   # body offsets of every MAC / MAC+PHY field, in order
    for t, ln in zip(types, lens):
        if t < 0:
            break
        if t == PPI_COMMON:
            common_at, ht_src = off + 4, None
        elif t in (PPI_MAC, PPI_MACPHY):
            ht_src = (off + 4, t)
            mac_fields.append(off + 4)
        off += 4 + ln
        off += aligned * (-off % 4)
    phy_ht = bool(mac_fields)
    names, fmts, offs = [], [], []

    def add(name: str, fmt: str, at: int) -> None:
        names.append(name)
        fmts.append(fmt)
        offs.append(at)
    if common_at is not None:
        for name, fmt, rel in (("tsft", "<u8", 0), ("cflags", "<u2", 8), ("rate", "<u2", 10),
                               ("freq", "<u2", 12), ("chflags", "<u2", 14), ("sig", "i1", 18),
                               ("noise", "i1", 19)):
            add(name, fmt, common_at + rel)
    # A-MPDU id: the last MAC / MAC+PHY field with the aggregate flag wins (later fields override).
    for j, o in enumerate(mac_fields):
        add(f"mflags{j}", "<u4", o)
        add(f"ampdu{j}", "<u4", o + 4)
    if ht_src is not None:
        add("htflags", "<u4", ht_src[0])
        if ht_src[1] == PPI_MACPHY:
            add("mcs", "u1", ht_src[0] + 9)
    rows = span.rows[idx]
    width = max(int(plen.min()), PPI_HEADER)
    width = max([width] + [o + {"<u8": 8, "<u4": 4, "<u2": 2, "u1": 1, "i1": 1}[f]
                           for o, f in zip(offs, fmts)])
    rec = _gather(buf, span.start[idx], width).view(
        np.dtype({"names": names or ["_"], "formats": fmts or ["u1"], "offsets": offs or [0],
                  "itemsize": width}))
    n = len(idx)
    freq = None
    rate = np.full(n, np.nan)
    cflags = None
    if common_at is not None:
        tsft = rec["tsft"].astype(np.uint64)
        cflags = rec["cflags"].astype(np.int64)
        tsft = np.where(cflags & 0x02 != 0, tsft * np.uint64(1000), tsft)
        sel = tsft != 0
        out.put("tsft", rows[sel], tsft[sel])
        out.put("chan_flags", rows, rec["chflags"])
        freq = rec["freq"].astype(np.int64)
        sel = freq != 0
        out.put("freq_mhz", rows[sel], freq[sel])
        for src, col in (("sig", "signal_dbm"), ("noise", "noise_dbm")):
            v = rec[src].astype(np.int64)
            sel = (v != 0) & (v != -128)
            out.put(col, rows[sel], v[sel])
        r = rec["rate"].astype(np.int64)
        rate = np.where(r != 0, r * 0.5, np.nan)
    ampdu = np.full(n, -1, dtype=np.int64)
    for j in range(len(mac_fields)):
        agg = rec[f"mflags{j}"] & 0x10 != 0
        ampdu = np.where(agg, rec[f"ampdu{j}"].astype(np.int64), ampdu)
    sel = ampdu >= 0
    out.put("ampdu_ref", rows[sel], ampdu[sel])
    dmg = np.zeros(n, bool) if freq is None else (freq >= DMG_MHZ[0]) & (freq <= DMG_MHZ[1])
    live = ~dmg
    phy = np.full(n, None, dtype=object)
    if phy_ht:
        phy[live] = "ht"
        if ht_src is not None:
            hf = rec["htflags"].astype(np.int64)
            bw40, sgi = hf & 0x02 != 0, hf & 0x04 != 0
            out.put("bw_mhz", rows[live], np.where(bw40[live], 40, 20))
            out.put("sgi", rows[live], sgi[live])
            if "mcs" in names:
                mcs = rec["mcs"].astype(np.int64)
                out.put("mcs", rows[live], mcs[live])
                nss, nok = phyrate.ht_nss_v(mcs)
                out.put("nss", rows[live & nok], nss[live & nok])
                hr, hok = phyrate.ht_rate_v(mcs, bw40, sgi)
                rate = np.where(live & hok, hr, rate)
    else:
        got = np.zeros(n, bool)
        if common_at is not None:
            f = rec["chflags"].astype(np.int64) & ~_CHAN_IGNORED
            leg = np.isin(f, list(_CHAN_LEGACY))
            ht = np.isin(f, list(_CHAN_HT))
            phy[leg] = "legacy"
            phy[ht] = "ht"
            got = leg | ht
            r = rec["rate"].astype(np.int64)
            leg = (np.isin(r, list(phyrate.CCK_RATES))
                   | ((freq != 0) & np.isin(r, list(phyrate.OFDM_RATES)))) & ~got
            phy[leg] = "legacy"
        phy[dmg] = None
    has = ~np.isnan(rate)
    out.put("phy_rate_mbps", rows[has], rate[has])
    for name in ("legacy", "ht"):
        sel = phy == name
        if sel.any():
            _put_text(out, "phy", rows[sel], name)
    # FCS and the 802.11 frame behind the header
    nstart = span.start[idx] + plen
    end, claimed, cut = span.end[idx], span.claimed[idx], span.cut[idx]
    keep = dlt == PPI_DLT_DOT11
    if cflags is not None:
        bad = cflags & 0x04 != 0
        fcs = cflags & 0x01 != 0
        short = fcs & (claimed - nstart < 4)
        out.malformed(rows[short & ~cut], R_PPI_FCS)
        keep &= ~(short & ~cut)
        check = np.flatnonzero(fcs & ~cut & ~short)
        if len(check):
            bad[check] |= ~crc_ok(buf, nstart[check], claimed[check])
        out.put("fcs_bad", rows, bad)
        claimed = np.where(fcs, claimed - 4, claimed)
        end = np.minimum(end, claimed)
    keep &= end > nstart
    k = np.flatnonzero(keep)
    if not len(k):
        return []
    return [(rows[k], nstart[k], end[k], claimed[k], np.full(len(k), KIND_DOT11, np.int64), cut[k])]


# ==================================================================================================
# Prism (and what else hides behind LINKTYPE 119)
# ==================================================================================================
def frame_prism(data: bytes, start: int, end: int, claimed: int, cut: bool,
                row: dict) -> tuple[int, int, int, int] | None:
    """Decode one Prism (or AVS, or bare 802.11) record of LINKTYPE 119 into `row`."""
    avail = end - start
    if avail >= 4 and int.from_bytes(data[start:start + 4], "big") in AVS_COOKIES:
        return frame_avs(data, start, end, claimed, cut, row)
    order = None
    if avail >= 4:
        if int.from_bytes(data[start:start + 4], "little") in PRISM_MSGCODES:
            order = "<"
        elif int.from_bytes(data[start:start + 4], "big") in PRISM_MSGCODES:
            order = ">"
    if order is None:           # no Prism header: a bare 802.11 frame, as tshark reads it
        return dot11_payload(start, end, claimed)
    if header_missing(row, avail, PRISM_HEADER, cut, R_PRISM_SHORT):
        return None
    got: dict[str, int] = {}
    for i in range(10):
        did, status, _ln, value = struct.unpack_from(order + "IHHI", data, start + 24 + 12 * i)
        if did & 0xFFFF == 0x0044:
            code = did >> 16
        elif did & 0xFFF == 0x041 and did < 0x10000:
            code = did >> 12
        else:
            continue
        if code in PRISM_DIDS and status == 0:
            got[PRISM_DIDS[code]] = value
    if "mactime" in got:
        row["tsft"] = got["mactime"]
    if "rssi" in got:
        row["signal_dbm"] = _s8(got["rssi"])
    if "rate" in got:
        r = got["rate"] & 0xFFFF
        row["phy_rate_mbps"] = r * 0.5
        if r in phyrate.CCK_RATES or r in phyrate.OFDM_RATES:
            row["phy"] = "legacy"
    return dot11_payload(start + PRISM_HEADER, end, claimed)


def decode_prism(buf: np.ndarray, span: Span, out: ColumnBuilder) -> Span:
    """Decode LINKTYPE 119 records: Prism headers, AVS headers, or bare 802.11 frames."""
    rows, start, end, cut = span.rows, span.start, span.end, span.cut
    avail = end - start
    has4 = avail >= 4
    le = np.where(has4, ule(buf, start, 4), 0)
    be = np.where(has4, ube(buf, start, 4), 0)
    avs = has4 & np.isin(be, AVS_COOKIES)
    pr_le = has4 & ~avs & np.isin(le, PRISM_MSGCODES)
    pr_be = has4 & ~avs & ~pr_le & np.isin(be, PRISM_MSGCODES)
    raw = ~(avs | pr_le | pr_be) & (avail > 0)
    parts = [span.take(raw).moved(span.start[raw], kind=np.full(int(raw.sum()), KIND_DOT11, np.int64))]
    if avs.any():
        parts.append(decode_avs(buf, span.take(avs), out))
    prism = pr_le | pr_be
    short = prism & (avail < PRISM_HEADER)
    out.malformed(rows[short & ~cut], R_PRISM_SHORT)
    sel = np.flatnonzero(prism & ~short)
    if len(sel):
        parts.append(_prism_rows(buf, span, out, sel, pr_le[sel]))
    return concat([p for p in parts if len(p)])


def _prism_rows(buf, span: Span, out: ColumnBuilder, sel: np.ndarray, little: np.ndarray) -> Span:
    rows, base = span.rows[sel], span.start[sel]
    n = len(sel)
    vals = {"mactime": None, "rssi": None, "rate": None}
    want = {2: "mactime", 4: "rssi", 8: "rate"}
    have = {k: np.zeros(n, bool) for k in vals}
    val = {k: np.zeros(n, np.int64) for k in vals}
    for i in range(10):
        at = base + 24 + 12 * i
        did = np.where(little, ule(buf, at, 4), ube(buf, at, 4)).astype(np.int64)
        status = np.where(little, ule(buf, at + 4, 2), ube(buf, at + 4, 2))
        value = np.where(little, ule(buf, at + 8, 4), ube(buf, at + 8, 4)).astype(np.int64)
        code = np.where(did & 0xFFFF == 0x0044, did >> 16,
                        np.where((did & 0xFFF == 0x041) & (did < 0x10000), did >> 12, 0))
        for c, name in want.items():
            hit = (code == c) & (status == 0)
            val[name] = np.where(hit, value, val[name])
            have[name] |= hit
    h = have["mactime"]
    out.put("tsft", rows[h], val["mactime"][h])
    h = have["rssi"]
    s = val["rssi"] & 0xFF
    out.put("signal_dbm", rows[h], np.where(s >= 128, s - 256, s)[h])
    h = have["rate"]
    r = val["rate"] & 0xFFFF
    out.put("phy_rate_mbps", rows[h], r[h] * 0.5)
    leg = h & (np.isin(r, list(phyrate.CCK_RATES)) | np.isin(r, list(phyrate.OFDM_RATES)))
    if leg.any():
        _put_text(out, "phy", rows[leg], "legacy")
    nstart = base + PRISM_HEADER
    sub = span.take(np.isin(np.arange(len(span)), sel))
    # sub keeps span order; sel is sorted, so sub rows line up with `sel`
    keep = sub.end > nstart
    s2 = sub.moved(nstart, kind=np.full(n, KIND_DOT11, np.int64))
    return s2.take(keep)


# ==================================================================================================
# AVS
# ==================================================================================================
def frame_avs(data: bytes, start: int, end: int, claimed: int, cut: bool,
              row: dict) -> tuple[int, int, int, int] | None:
    """Decode one AVS capture header into `row`; return the 802.11 frame behind it."""
    avail = end - start
    if header_missing(row, avail, 8, cut, R_AVS_SHORT):
        return None
    cookie, hlen = struct.unpack_from(">II", data, start)
    if cookie not in AVS_COOKIES:
        row.setdefault("malformed", R_AVS_VERSION)
        return None
    if hlen < AVS_MIN_HEADER:
        row.setdefault("malformed", R_AVS_LEN)
        return None
    if header_missing(row, avail, hlen, cut, R_AVS_LONG):
        return None
    (mactime, _host, phytype, channel, datarate, antenna, _prio, ssi_type, ssi_signal,
     ssi_noise) = struct.unpack_from(">QQIIIIIIii", data, start + 8)
    row["tsft"] = mactime
    if datarate:
        row["phy_rate_mbps"] = datarate / 10
    if antenna <= 0xFF:
        row["antenna"] = antenna
    if ssi_type == 2:
        row["signal_dbm"] = _s8(ssi_signal)
        row["noise_dbm"] = _s8(ssi_noise)
    freq = avs_freq(phytype, channel)
    if freq is not None:
        row["freq_mhz"] = freq
    if 1 <= phytype <= 9:
        row["phy"] = "legacy"
    return dot11_payload(start + hlen, end, claimed)


def decode_avs(buf: np.ndarray, span: Span, out: ColumnBuilder) -> Span:
    """Decode AVS capture headers; return the 802.11 frames behind them."""
    rows, start, end, cut = span.rows, span.start, span.end, span.cut
    avail = end - start
    short = avail < 8
    out.malformed(rows[short & ~cut], R_AVS_SHORT)
    ok = ~short
    cookie = np.where(ok, ube(buf, start, 4), 0)
    hlen = np.where(ok, ube(buf, start + 4, 4), 0).astype(np.int64)
    badv = ok & ~np.isin(cookie, AVS_COOKIES)
    out.malformed(rows[badv], R_AVS_VERSION)
    ok &= ~badv
    badl = ok & (hlen < AVS_MIN_HEADER)
    out.malformed(rows[badl], R_AVS_LEN)
    ok &= ~badl
    long_ = ok & (hlen > avail)
    out.malformed(rows[long_ & ~cut], R_AVS_LONG)
    ok &= ~long_
    sel = np.flatnonzero(ok)
    if not len(sel):
        return _empty(span)
    rec = _gather(buf, start[sel], AVS_MIN_HEADER).view(np.dtype(
        {"names": ["mactime", "phytype", "channel", "rate", "antenna", "ssi_type", "sig", "noise"],
         "formats": [">u8", ">u4", ">u4", ">u4", ">u4", ">u4", ">i4", ">i4"],
         "offsets": [8, 24, 28, 32, 36, 44, 48, 52], "itemsize": AVS_MIN_HEADER}))
    r = rows[sel]
    out.put("tsft", r, rec["mactime"])
    rate = rec["rate"].astype(np.int64)
    h = rate != 0
    out.put("phy_rate_mbps", r[h], rate[h] / 10)
    ant = rec["antenna"].astype(np.int64)
    h = ant <= 0xFF
    out.put("antenna", r[h], ant[h])
    h = rec["ssi_type"] == 2
    for src, col in (("sig", "signal_dbm"), ("noise", "noise_dbm")):
        v = rec[src].astype(np.int64) & 0xFF
        out.put(col, r[h], np.where(v >= 128, v - 256, v)[h])
    pt = rec["phytype"].astype(np.int64)
    ch = rec["channel"].astype(np.int64)
    freq = np.full(len(sel), -1, dtype=np.int64)
    bg = ~np.isin(pt, (1, 7, 8))
    freq = np.where(bg & (ch >= 1) & (ch <= 13), 2407 + 5 * ch, freq)
    freq = np.where(bg & (ch == 14), 2484, freq)
    freq = np.where(np.isin(pt, (7, 8)) & (ch <= 200), 5000 + 5 * ch, freq)
    freq = np.where((pt != 1) & (ch > 255), np.where(ch <= 0xFFFF, ch, -1), freq)
    h = freq >= 0
    out.put("freq_mhz", r[h], freq[h])
    leg = (pt >= 1) & (pt <= 9)
    if leg.any():
        _put_text(out, "phy", r[leg], "legacy")
    sub = span.take(ok)
    nstart = sub.start + hlen[sel]
    keep = sub.end > nstart
    return sub.moved(nstart, kind=np.full(len(sel), KIND_DOT11, np.int64)).take(keep)


LINK_DECODERS = {127: decode_radiotap, 192: decode_ppi, 119: decode_prism, 163: decode_avs}
LINK_FRAME_DECODERS = {127: frame_radiotap, 192: frame_ppi, 119: frame_prism, 163: frame_avs}
