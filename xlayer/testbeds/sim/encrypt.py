"""WPA2-PSK for simulated air captures: the open BSS ns-3 simulates, as a sniffer of a WPA2 network sees it.

`encrypt_air_capture(path, passphrase, ssid, seed)` rewrites a radiotap (DLT 127) pcap in place (a temp
file in the same directory, then a rename):

* after each successful association of a station (its association response, before its first data
  frame) a 4-way handshake appears: EAPOL-Key M1..M4 as data frames (LLC/SNAP 0x888E, QoS TID 7 when
  the pair uses QoS data) each followed by its ACK, AKM 2 (PSK), CCMP-128, key descriptor version 2
  (HMAC-SHA1 MICs with the KCK), the GTK in M3 wrapped under the KEK (AES key wrap);
* every data frame of the BSS that carries a payload is CCMP-protected: unicast with the pair's TK
  (key id 0), group-addressed from the AP with the GTK (key id 1); an 8-byte CCMP header with a PN that
  counts per transmitter (a MAC retry repeats the PN of the attempt it repeats), the 8-byte MIC, the
  FCS recomputed when the radiotap Flags say one follows; the record's wire length grows by 16 and the
  file's snap length is applied after encryption;
* beacons, probe responses and (re)association requests of the BSS carry an RSN element (version 1,
  group CCMP, pairwise CCMP, AKM PSK), and the Privacy bit of their capability field is set.

Null / QoS-null data frames (no payload) stay as they are, as do frames of other networks (the hidden
nodes' ad hoc pairs) and the radiotap header of every ns-3 record.  The nonces and the GTK are derived
from the seed (the GTK from the PMK too), so one seed and one passphrase give the same bytes.  No ns-3
record moves in time: the truth stays what ns-3 traced; the records added shift the record numbers,
and `EncryptResult.frame_map` says where each record went.  The passphrase and every key stay in this
module's locals: nothing here prints, logs or returns them.
"""
from __future__ import annotations

import hashlib
import mmap
import os
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from cryptography.hazmat.primitives.ciphers.aead import AESCCM
from cryptography.hazmat.primitives.keywrap import aes_key_wrap

from parsers.crypto.ccmp import aad_of, nonce_of
from parsers.crypto.eapol import (
    KI_ACK,
    KI_ENCRYPTED,
    KI_INSTALL,
    KI_MIC,
    KI_PAIRWISE,
    KI_SECURE,
    MIC_AT,
    eapol_mic,
)
from parsers.crypto.frames import LLC_EAPOL, parse_header
from parsers.crypto.keys import AKMS, Ptk, derive_ptk, pmk_from_passphrase, prf_sha1
from parsers.formats.detect import pcap_magic
from xlayer.testbeds.sim.pcapfile import PCAP_GLOBAL, PCAP_RECORD

LINKTYPE_RADIOTAP = 127
AKM_PSK = AKMS[2]
KEY_VERSION = 2                     # HMAC-SHA1 MIC, AES key wrap
CCMP_OVERHEAD = 16                  # 8-byte CCMP header + 8-byte MIC
GTK_ID = 1
RSN_IE = bytes.fromhex("3014" "0100" "000fac04" "0100" "000fac04" "0100" "000fac02" "0000")
INFO_M1 = KI_PAIRWISE | KI_ACK | KEY_VERSION
INFO_M2 = KI_PAIRWISE | KI_MIC | KEY_VERSION
INFO_M3 = KI_PAIRWISE | KI_INSTALL | KI_ACK | KI_MIC | KI_SECURE | KI_ENCRYPTED | KEY_VERSION
INFO_M4 = KI_PAIRWISE | KI_MIC | KI_SECURE | KEY_VERSION
# Handshake timing: M1 1 ms after the association response, then one message every 300 us; each
# message's ACK a SIFS plus an ACK's airtime after its end.
HS_DELAY_NS, HS_STEP_NS, HS_ACK_NS = 1_000_000, 300_000, 60_000
HS_ROOM_NS = HS_DELAY_NS + 4 * HS_STEP_NS
FALLBACK_STEP_NS = 100_000
# A retry repeats the PN of an earlier attempt only when that attempt is recent: an MSDU lives at most
# ~0.5 s in ns-3's queues, and its sequence number comes back only after 4096 more MSDUs of the pair.
RETRY_WINDOW_NS, RETRY_PN_SPAN = 500_000_000, 4096
EAPOL_TID = 7                       # EAPOL frames go out as voice, as Linux sends them
DURATION_US = 44                    # SIFS + an ACK at 6 Mbit/s
# (fixed-field length before the elements, capability offset) by management subtype
MGMT_LAYOUT = {0: (4, 0), 2: (10, 0), 5: (12, 10), 8: (12, 10), 1: (6, 0), 3: (6, 0)}
RSN_FRAMES = (0, 2, 5, 8)           # (re)association requests, probe responses, beacons
# Elements that come before the RSN element in beacons, probe responses and association requests
# (IEEE 802.11 table 9-27 order): SSID, rates, DS, CF, TIM, IBSS, country, power, ..., ERP, ext rates.
BEFORE_RSN = frozenset({0, 1, 2, 3, 4, 5, 6, 7, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 50})


def check_passphrase(passphrase: str) -> bytes:
    """Return the passphrase as bytes; raise ValueError (never quoting it) unless 8-63 printable ASCII."""
    raw = passphrase.encode("utf-8", "surrogateescape")
    if not 8 <= len(raw) <= 63 or any(not 32 <= c <= 126 for c in raw):
        raise ValueError("a WPA passphrase is 8 to 63 printable ASCII characters")
    return raw


# --------------------------------------------------------------------------------------------------
# pure functions: keys, EAPOL-Key frames, 802.11 frames


def derived_nonce(kind: bytes, seed: int, ap: bytes, sta: bytes, n: int) -> bytes:
    """Return a 32-byte handshake nonce (ANonce / SNonce) fixed by the seed, the pair and the handshake count."""
    return hashlib.sha256(b"xlayer-sim " + kind + seed.to_bytes(8, "big") + ap + sta + n.to_bytes(4, "big")).digest()


def group_key(pmk: bytes, ap: bytes, seed: int) -> bytes:
    """Return the AP's 16-byte GTK (from the PMK, so the seed alone does not give it away)."""
    return prf_sha1(pmk, b"xlayer-sim group key", ap + seed.to_bytes(8, "big"), 16)


def eapol_key(info: int, key_len: int, replay: int, nonce: bytes, rsc: int, data: bytes,
              kck: bytes | None = None) -> bytes:
    """Return an EAPOL-Key PDU (802.1X-2004 header, RSN descriptor), its MIC computed with `kck` if given."""
    body = (b"\x02" + info.to_bytes(2, "big") + key_len.to_bytes(2, "big") + replay.to_bytes(8, "big")
            + nonce + bytes(16) + rsc.to_bytes(8, "little") + bytes(8) + bytes(16)
            + len(data).to_bytes(2, "big") + data)
    pdu = b"\x02\x03" + len(body).to_bytes(2, "big") + body
    if kck is None:
        return pdu
    mic = eapol_mic(kck, AKM_PSK, KEY_VERSION, pdu)
    return pdu[:MIC_AT] + mic + pdu[MIC_AT + len(mic):]


def wrap_key_data(kek: bytes, data: bytes) -> bytes:
    """Return key data padded (0xDD then zeros, to a multiple of 8 and at least 16 bytes) and AES-key-wrapped."""
    if len(data) % 8 or len(data) < 16:
        pad = max(16, (len(data) + 1 + 7) // 8 * 8) - len(data)
        data += b"\xdd" + bytes(pad - 1)
    return aes_key_wrap(kek, data)


def four_way(pmk: bytes, ap: bytes, sta: bytes, anonce: bytes, snonce: bytes, gtk: bytes, gtk_rsc: int,
             replay: int) -> tuple[list[bytes], Ptk]:
    """Return the EAPOL PDUs of messages 1..4 of a WPA2-PSK CCMP handshake, and its PTK."""
    ptk = derive_ptk(pmk, ap, sta, anonce, snonce, AKM_PSK, "CCMP-128")
    gtk_kde = b"\xdd" + bytes((6 + len(gtk),)) + b"\x00\x0f\xac\x01" + bytes((GTK_ID, 0)) + gtk
    m1 = eapol_key(INFO_M1, 16, replay, anonce, 0, b"")
    m2 = eapol_key(INFO_M2, 0, replay, snonce, 0, RSN_IE, ptk.kck)
    m3 = eapol_key(INFO_M3, 16, replay + 1, anonce, gtk_rsc, wrap_key_data(ptk.kek, RSN_IE + gtk_kde), ptk.kck)
    m4 = eapol_key(INFO_M4, 0, replay + 1, bytes(32), 0, b"", ptk.kck)
    return [m1, m2, m3, m4], ptk


def data_frame(ap: bytes, sta: bytes, from_ap: bool, seq: int, qos: bool, body: bytes) -> bytes:
    """Return an unprotected data frame (no FCS) between an AP and a station carrying `body`."""
    fc = (b"\x88" if qos else b"\x08") + (b"\x02" if from_ap else b"\x01")
    a1, a2 = (sta, ap) if from_ap else (ap, sta)
    hdr = fc + DURATION_US.to_bytes(2, "little") + a1 + a2 + ap + ((seq & 0xFFF) << 4).to_bytes(2, "little")
    return hdr + (bytes((EAPOL_TID, 0)) if qos else b"") + body


def ack_frame(ra: bytes) -> bytes:
    """Return an ACK frame (no FCS) to `ra`."""
    return b"\xd4\x00\x00\x00" + ra


def ccmp_header(pn: int, key_id: int) -> bytes:
    """Return the 8-byte CCMP header of a PN (48 bits) and key id (Ext IV set)."""
    p = pn.to_bytes(6, "little")
    return bytes((p[0], p[1], 0, 0x20 | (key_id << 6))) + p[2:6]


def protect(f: bytes, body_on_air: int, aead: AESCCM, pn: int, key_id: int) -> bytes:
    """Return data frame `f` (no FCS) CCMP-protected under PN `pn`: Protected bit, CCMP header, ciphertext, MIC.

    `body_on_air` is the frame body's length on the air; when the capture holds less (cut by the snap
    length) only the ciphertext of the captured prefix is returned (and no MIC)."""
    h = parse_header(f)
    if h is None:
        raise ValueError("not a data frame")
    g = bytes((f[0], f[1] | 0x40)) + f[2:h.hdr_len]
    nonce = nonce_of(h, pn.to_bytes(6, "big"), False)
    body = f[h.hdr_len:]
    have = len(body)
    if have < body_on_air:
        # CCM encrypts the payload in counter mode: the ciphertext of a prefix depends on that prefix
        # only, so the unknown rest may be anything (zeros); the MIC it gives is past the snap length.
        body += bytes(body_on_air - have)
    sealed = aead.encrypt(nonce, body, aad_of(h, g))
    return g + ccmp_header(pn, key_id) + (sealed if have >= body_on_air else sealed[:have])


def with_rsn(f: bytes, subtype: int, add_ie: bool) -> tuple[bytes, int]:
    """Return (management frame with the Privacy bit set and, if add_ie, the RSN element inserted, bytes added).

    `f` may be cut by the snap length: the element goes where the captured elements say it belongs;
    when that place is past what was captured, the frame grows on the air only (0 bytes in `f`)."""
    fixed, cap_at = MGMT_LAYOUT[subtype]
    body = 24 + 4 * bool(f[1] & 0x80)         # +HT Control when Order is set
    out = bytearray(f)
    if len(out) > body + cap_at:
        out[body + cap_at] |= 0x10
    if not add_ie:
        return bytes(out), 0
    p = body + fixed
    while p + 2 <= len(f) and f[p] in BEFORE_RSN:
        p += 2 + f[p + 1]
    if p > len(f) or (p + 2 > len(f) and p != len(f)):
        return bytes(out), 0                  # the place is not captured
    return bytes(out[:p]) + RSN_IE + bytes(out[p:]), len(RSN_IE)


def fcs(f: bytes) -> bytes:
    """Return the FCS (CRC-32, little-endian) of an 802.11 frame."""
    return zlib.crc32(f).to_bytes(4, "little")


@dataclass(frozen=True)
class Radiotap:
    """What a rewrite needs of one radiotap header: its bytes, FCS flag, TSFT offset and value, rate."""

    raw: bytes
    fcs: bool
    tsft_at: int            # -1 when absent
    tsft: int
    rate_500k: int          # legacy Rate field, 0 when absent
    pad: bool               # Flags "data pad": the 802.11 header is padded to 32 bits


def radiotap(raw: bytes) -> Radiotap | None:
    """Return the leading fields (TSFT, Flags, Rate) of a radiotap header, or None if malformed."""
    if len(raw) < 8 or raw[0] != 0:
        return None
    it_len = int.from_bytes(raw[2:4], "little")
    present = int.from_bytes(raw[4:8], "little")
    at = 8
    word = present
    while word & (1 << 31):
        if at + 4 > min(it_len, len(raw)):
            return None
        word = int.from_bytes(raw[at:at + 4], "little")
        at += 4
    tsft_at, tsft, flags, rate = -1, 0, 0, 0
    if present & 1:
        at = (at + 7) // 8 * 8
        tsft_at, tsft = at, int.from_bytes(raw[at:at + 8], "little")
        at += 8
    if present & 2:
        flags = raw[at] if at < it_len else 0
        at += 1
    if present & 4:
        rate = raw[at] if at < it_len else 0
    if it_len > len(raw) or at > it_len:
        return None
    return Radiotap(bytes(raw[:it_len]), bool(flags & 0x10), tsft_at, tsft, rate, bool(flags & 0x20))


# --------------------------------------------------------------------------------------------------
# the capture: index, plan, rewrite


@dataclass
class EncryptCounts:
    """What the rewrite did (no key material)."""

    records_in: int = 0
    records_out: int = 0
    handshakes: int = 0
    records_added: int = 0          # EAPOL-Key frames and their ACKs
    encrypted_unicast: int = 0
    encrypted_group: int = 0
    retries_same_pn: int = 0        # retries that repeated the PN of the attempt they repeat
    rsn_added: int = 0              # management frames that got an RSN element
    left_clear: int = 0             # data frames with a payload of the BSS left unprotected (padded headers)

    def as_dict(self) -> dict:
        """Return the counts as a dict."""
        return dict(self.__dict__)


@dataclass
class EncryptResult:
    """The counts, and frame_map[i] = the new 1-based record number of old record i + 1."""

    counts: EncryptCounts
    frame_map: np.ndarray = field(repr=False)


@dataclass
class _Index:
    """Per record of a classic pcap: offsets, lengths, time (ns), 802.11 fields (columns)."""

    off: np.ndarray
    incl: np.ndarray
    orig: np.ndarray
    ts: np.ndarray
    f0: np.ndarray          # offset of the 802.11 frame in the file (-1: none)
    fc0: np.ndarray
    fc1: np.ndarray
    a1: np.ndarray          # addresses as integers (0 when not captured)
    a2: np.ndarray


@dataclass(frozen=True)
class _Insert:
    """One record to add: where (before old record `pos`), when, what (built when written)."""

    pos: int
    ts: int
    hs: int                 # handshake number
    msg: int                # 0..3 EAPOL message, 4..7 the ACK of message msg - 4


@dataclass
class _Handshake:
    """One 4-way handshake to add: the pair, its count, the frame format and the radiotap templates."""

    ap: bytes
    sta: bytes
    n: int                  # the pair's handshake count (0 for the first)
    qos: bool
    ap_tpl: int             # record whose radiotap the AP's frames copy
    sta_tpl: int


def _index(buf: np.ndarray, size: int, nanos: bool) -> _Index:
    """Return the index of every record of a classic little-endian pcap held in buf."""
    offs, incls, origs, secs, fracs = [], [], [], [], []
    unpack = PCAP_RECORD.unpack_from
    off = PCAP_GLOBAL.size
    while off + PCAP_RECORD.size <= size:
        sec, frac, incl, orig = unpack(buf, off)
        offs.append(off)
        incls.append(incl)
        origs.append(orig)
        secs.append(sec)
        fracs.append(frac)
        off += PCAP_RECORD.size + incl
    if off != size:
        raise ValueError("truncated final record")
    o = np.asarray(offs, np.int64)
    incl = np.asarray(incls, np.int64)
    ts = np.asarray(secs, np.int64) * 1_000_000_000 + np.asarray(fracs, np.int64) * (1 if nanos else 1000)
    p = o + PCAP_RECORD.size
    top = len(buf) - 1
    rt_len = np.where(incl >= 4, buf[np.minimum(p + 2, top)].astype(np.int64)
                      | (buf[np.minimum(p + 3, top)].astype(np.int64) << 8), 1 << 30)
    ok = incl >= rt_len + 10
    f0 = np.where(ok, p + rt_len, -1)
    s = np.where(ok, f0, 0)
    fc0 = np.where(ok, buf[np.minimum(s, top)], 0xFF).astype(np.int64)
    fc1 = np.where(ok, buf[np.minimum(s + 1, top)], 0).astype(np.int64)

    def addr(at: int) -> np.ndarray:
        have = incl - rt_len >= at + 6
        idx = np.minimum(s[:, None] + at + np.arange(6), top)
        v = (buf[idx].astype(np.int64) << (8 * np.arange(5, -1, -1))).sum(axis=1)
        return np.where(ok & have, v, 0)

    return _Index(o, incl, np.asarray(origs, np.int64), ts, f0, fc0, fc1, addr(4), addr(10))


def _mac(v: int) -> bytes:
    return int(v).to_bytes(6, "big")


def _plan(buf: np.ndarray, ix: _Index, ssid: bytes) -> tuple[set[int], list[_Handshake], list[_Insert], np.ndarray]:
    """Return (the APs, the handshakes, the records to insert, the data frames' mask) of a capture."""
    ftype, sub = (ix.fc0 >> 2) & 3, ix.fc0 >> 4
    mgmt = (ftype == 0) & (ix.f0 >= 0)
    aps: set[int] = set()
    for i in np.flatnonzero(mgmt & ((sub == 8) | (sub == 5))).tolist():
        f = bytes(buf[ix.f0[i]:ix.off[i] + PCAP_RECORD.size + ix.incl[i]])
        if f[36:38] == bytes((0, len(ssid))) and f[38:38 + len(ssid)] == ssid:
            aps.add(int(ix.a2[i]))
    assocs = []
    for i in np.flatnonzero(mgmt & ((sub == 1) | (sub == 3))).tolist():
        st = bytes(buf[ix.f0[i] + 26:ix.f0[i] + 28])
        if len(st) == 2 and st == b"\x00\x00":
            aps.add(int(ix.a2[i]))
            assocs.append(i)
    ap_arr = np.fromiter(aps, np.int64, len(aps))
    ds = ix.fc1 & 3
    data = ((ftype == 2) & ((ix.fc0 & 0x40) == 0) & ((ix.fc1 & 0x40) == 0) & (ix.f0 >= 0)
            & (ix.incl - (ix.f0 - ix.off - PCAP_RECORD.size) >= 24))
    to_ap = data & (ds == 1) & np.isin(ix.a1, ap_arr)
    from_ap = data & (ds == 2) & np.isin(ix.a2, ap_arr)
    ap_of = np.where(to_ap, ix.a1, ix.a2)
    sta_of = np.where(to_ap, ix.a2, ix.a1)
    unicast = to_ap | (from_ap & ((sta_of >> 40) & 1 == 0))
    handshakes: list[_Handshake] = []
    inserts: list[_Insert] = []
    n = len(ix.off)
    pairs = {(int(a), int(s)) for a, s in zip(ap_of[unicast].tolist(), sta_of[unicast].tolist())}
    pairs |= {(int(ix.a2[i]), int(ix.a1[i])) for i in assocs}
    acks = _ack_template(ix) is not None
    any_qos = bool((ix.fc0[data] & 0x80).any()) if data.any() else True
    for ap, sta in sorted(pairs):
        rows = np.flatnonzero(unicast & (ap_of == ap) & (sta_of == sta))
        mine = [i for i in assocs if ix.a2[i] == ap and ix.a1[i] == sta]
        # EAPOL frames as QoS data when the pair's data frames are (802.11n), else plain data (802.11g)
        qos = bool((ix.fc0[rows] & 0x80).any()) if len(rows) else any_qos
        for k, (a, d) in enumerate(_anchors(mine, rows, n)):
            hs = _Handshake(_mac(ap), _mac(sta), k, qos, *_templates(ix, mgmt, a, d, ap, sta))
            inserts += _place(ix.ts, len(handshakes), a, d, n, acks)
            handshakes.append(hs)
    inserts.sort(key=lambda r: (r.pos, r.ts, r.hs, r.msg))
    return aps, handshakes, inserts, to_ap | from_ap


def _anchors(assocs: list[int], rows: np.ndarray, n: int) -> Iterator[tuple[int | None, int]]:
    """Yield (association record or None, first data record after it or n): one handshake each.

    An association followed by another before any data frame is superseded by the later one; data
    frames of a pair before any captured association get a handshake just before the first of them."""
    if len(rows) and (not assocs or rows[0] < assocs[0]):
        yield None, int(rows[0])
    for j, a in enumerate(assocs):
        k = int(np.searchsorted(rows, a, side="right"))
        d = int(rows[k]) if k < len(rows) else n
        if j + 1 < len(assocs) and assocs[j + 1] < d:
            continue
        yield a, d


def _templates(ix: _Index, mgmt: np.ndarray, a: int | None, d: int, ap: int, sta: int) -> tuple[int, int]:
    """Return the records whose radiotap headers the AP's and the station's inserted frames copy."""
    def first(mask: np.ndarray) -> int | None:
        hit = np.flatnonzero(mask)
        return int(hit[0]) if len(hit) else None

    ap_tpl = a if a is not None else first(mgmt & (ix.a2 == ap))
    if ap_tpl is None:
        ap_tpl = first(ix.a2 == ap)
    sta_tpl = first(mgmt & (ix.a2 == sta) & (ix.a1 == ap))
    if sta_tpl is None:
        sta_tpl = first(ix.a2 == sta)
    ap_tpl = ap_tpl if ap_tpl is not None else (sta_tpl if sta_tpl is not None else d)
    return ap_tpl, sta_tpl if sta_tpl is not None else ap_tpl


def _place(ts: np.ndarray, hs: int, a: int | None, d: int, n: int, acks: bool) -> list[_Insert]:
    """Return the records of handshake `hs` (M1, ACK, ..., M4, ACK; no ACKs without an ACK to copy the
    radiotap header of) placed between association a and data frame d."""
    t_d = int(ts[d]) if d < n else None
    t_a = int(ts[a]) if a is not None else None
    if t_a is not None and (t_d is None or t_d - t_a > HS_ROOM_NS):
        step, t0 = HS_STEP_NS, t_a + HS_DELAY_NS
    else:
        # No room between the association and the first data frame (or no association captured):
        # the handshake goes just before the data frame, closer together, and never moves a frame
        # ns-3 traced: the truth's times stay the capture's times.
        step = FALLBACK_STEP_NS if t_a is None else min(FALLBACK_STEP_NS, max(t_d - t_a, 0) // 9)
        t0 = t_d - 4 * step
    ack = min(HS_ACK_NS, step // 2)
    lo = a + 1 if a is not None else 0
    out = []
    for m in range(4):
        for t, msg in ((t0 + m * step, m), (t0 + m * step + ack, 4 + m))[:1 + acks]:
            pos = d - int(np.count_nonzero(ts[lo:d] > t))
            out.append(_Insert(max(pos, lo), t, hs, msg))
    return out


class _Writer:
    """Writes records to the temp file, copying runs of untouched records in one piece."""

    def __init__(self, fh, mm, nanos: bool, snaplen: int):
        self.fh, self.mm, self.nanos, self.snaplen = fh, mm, nanos, snaplen
        self.copy_from = -1
        self.copy_to = -1
        self.records = 0

    def keep(self, start: int, end: int) -> None:
        if self.copy_to != start:
            self.flush()
            self.copy_from = start
        self.copy_to = end
        self.records += 1

    def flush(self) -> None:
        if self.copy_to > self.copy_from >= 0:
            self.fh.write(self.mm[self.copy_from:self.copy_to])
        self.copy_from = self.copy_to = -1

    def record(self, ts: int, data: bytes, orig: int, snap: bool = True) -> None:
        self.flush()
        incl = min(len(data), orig, self.snaplen) if self.snaplen and snap else min(len(data), orig)
        sec, rest = divmod(ts, 1_000_000_000)
        self.fh.write(PCAP_RECORD.pack(sec, rest if self.nanos else rest // 1000, incl, orig))
        self.fh.write(data[:incl])
        self.records += 1


class _Rewriter:
    """The per-record pass: handshakes written where planned, management and data frames rewritten."""

    def __init__(self, mm, ix: _Index, pmk: bytes, seed: int, aps: set[int], counts: EncryptCounts):
        self.mm, self.ix, self.pmk, self.seed, self.aps = mm, ix, pmk, seed, aps
        self.ack_tpl = _ack_template(ix)
        self.c = counts
        self.gtk = {ap: group_key(pmk, _mac(ap), seed) for ap in aps}
        self.ptk: dict[tuple[bytes, bytes], bytes] = {}        # (ap, sta) -> TK
        self.aead: dict[bytes, AESCCM] = {}
        self.pn: dict[bytes, int] = {}                          # transmitter -> last PN used
        self.sent: dict[tuple, tuple[int, int]] = {}            # (ta, ra, qos, tid, seq, frag) -> (pn, ts)
        self.eapol_seq: dict[tuple[bytes, bytes], int] = {}
        self.frames: dict[int, list[tuple[bytes, int]]] = {}    # handshake -> its 4 (frame, transmitter tpl)

    def raw(self, i: int) -> bytes:
        o = int(self.ix.off[i]) + PCAP_RECORD.size
        return bytes(self.mm[o:o + int(self.ix.incl[i])])

    def inserted(self, hs: _Handshake, ins: _Insert) -> tuple[bytes, int]:
        """Return (record bytes, wire length) of an inserted EAPOL frame or ACK."""
        frames = self.frames.get(ins.hs)
        if frames is None:
            frames = self.frames[ins.hs] = self._handshake(hs)
        m = ins.msg % 4
        f, tpl = frames[m]
        if ins.msg >= 4:
            # the ACK goes back to the message's transmitter
            f, tpl = ack_frame(hs.ap if m in (0, 2) else hs.sta), self.ack_tpl
        rt = radiotap(self.raw(tpl))
        if rt is None:
            raise ValueError(f"record {tpl + 1}: a radiotap header to copy is malformed")
        rec = _retime(rt, int(self.ix.ts[tpl]), ins.ts, len(f) - (int(self.ix.orig[tpl]) - len(rt.raw)
                                                                    - 4 * rt.fcs)) + f
        if rt.fcs:
            rec += fcs(f)
        return rec, len(rec)

    def _handshake(self, hs: _Handshake) -> list[tuple[bytes, int]]:
        ap, sta = hs.ap, hs.sta
        anonce = derived_nonce(b"ANonce", self.seed, ap, sta, hs.n)
        snonce = derived_nonce(b"SNonce", self.seed, ap, sta, hs.n)
        gtk = self.gtk.get(int.from_bytes(ap, "big")) or group_key(self.pmk, ap, self.seed)
        pdus, ptk = four_way(self.pmk, ap, sta, anonce, snonce, gtk, self.pn.get(ap, 0) + 1, 2 * hs.n + 1)
        self.ptk[(ap, sta)] = ptk.tk
        self.c.handshakes += 1
        out = []
        for m, pdu in enumerate(pdus):
            from_ap = m in (0, 2)
            key = (ap, sta) if from_ap else (sta, ap)
            seq = self.eapol_seq.get(key, 0)
            self.eapol_seq[key] = seq + 1
            out.append((data_frame(ap, sta, from_ap, seq, hs.qos, LLC_EAPOL + pdu), hs.ap_tpl if from_ap else hs.sta_tpl))
        return out

    def mgmt(self, i: int) -> tuple[bytes, int] | None:
        """Return (record bytes, wire length) of a management frame of the BSS with RSN, or None to keep it."""
        ix = self.ix
        sub = int(ix.fc0[i]) >> 4
        ours = int(ix.a1[i] if sub in (0, 2) else ix.a2[i]) in self.aps
        if sub not in MGMT_LAYOUT or not ours:
            return None
        raw = self.raw(i)
        rt = radiotap(raw)
        if rt is None:
            return None
        f, orig, whole = _frame_of(raw, rt, int(ix.orig[i]))
        # the element lengthens the frame on the air even where the snap length leaves it out
        new, _ = with_rsn(f, sub, sub in RSN_FRAMES)
        added = len(RSN_IE) if sub in RSN_FRAMES else 0
        self.c.rsn_added += bool(added)
        if whole and rt.fcs:
            new += fcs(new)
        return raw[:len(rt.raw)] + new, orig + added

    def data(self, i: int) -> tuple[bytes, int] | None:
        """Return (record bytes, wire length) of a data frame of the BSS protected, or None to keep it."""
        ix = self.ix
        raw = self.raw(i)
        rt = radiotap(raw)
        if rt is None or rt.pad:
            self.c.left_clear += 1
            return None
        to_ap = int(ix.fc1[i]) & 3 == 1
        ap, ra, ta = _mac(ix.a1[i] if to_ap else ix.a2[i]), _mac(ix.a1[i]), _mac(ix.a2[i])
        group = bool(ra[0] & 1)
        tk = self.gtk.get(int.from_bytes(ap, "big")) if group else self.ptk.get((ap, ra if not to_ap else ta))
        if tk is None:
            self.c.left_clear += 1
            return None
        f, orig, whole = _frame_of(raw, rt, int(ix.orig[i]))
        h = parse_header(f)
        if h is None:
            self.c.left_clear += 1
            return None
        pn = self._pn(i, f, h, ta, ra)
        aead = self.aead.get(tk)
        if aead is None:
            aead = self.aead[tk] = AESCCM(tk, tag_length=8)
        body_on_air = orig - len(rt.raw) - 4 * rt.fcs - h.hdr_len
        new = protect(f, body_on_air, aead, pn, GTK_ID if group else 0)
        if whole and rt.fcs:
            new += fcs(new)
        if group:
            self.c.encrypted_group += 1
        else:
            self.c.encrypted_unicast += 1
        return raw[:len(rt.raw)] + new, orig + CCMP_OVERHEAD

    def _pn(self, i: int, f: bytes, h, ta: bytes, ra: bytes) -> int:
        """Return the PN of a frame: the next of its transmitter, or a recent attempt's when it is a retry."""
        ts = int(self.ix.ts[i])
        key = (ta, ra, h.qos_at != 0, h.tid, f[22] >> 4 | f[23] << 4, f[22] & 0x0F)
        last = self.pn.get(ta, 0)
        if f[1] & 0x08:
            prev = self.sent.get(key)
            if prev is not None and ts - prev[1] <= RETRY_WINDOW_NS and last - prev[0] < RETRY_PN_SPAN:
                self.c.retries_same_pn += 1
                return prev[0]
        pn = self.pn[ta] = last + 1
        self.sent[key] = (pn, ts)
        return pn


def _frame_of(raw: bytes, rt: Radiotap, orig: int) -> tuple[bytes, int, bool]:
    """Return (the captured 802.11 frame without FCS, the record's wire length, whether it is whole)."""
    whole = len(raw) >= orig
    end = len(raw) - 4 * rt.fcs if whole else min(len(raw), orig - 4 * rt.fcs)
    return raw[len(rt.raw):end], orig, whole


def _ack_template(ix: _Index) -> int | None:
    """Return the ACK record whose radiotap header the inserted ACKs copy (the first one), or None."""
    hit = np.flatnonzero(ix.fc0 == 0xD4)
    return int(hit[0]) if len(hit) else None


def _retime(rt: Radiotap, t_tpl: int, t_new: int, extra_bytes: int) -> bytes:
    """Return a template's radiotap header with its TSFT (first bit) moved to a frame ending at t_new."""
    if rt.tsft_at < 0:
        return rt.raw
    air_us = extra_bytes * 16 // rt.rate_500k if rt.rate_500k else 0     # 8 bits / (rate * 0.5 Mbit/s)
    tsft = (rt.tsft + (t_new - t_tpl) // 1000 - air_us) & ((1 << 64) - 1)
    return rt.raw[:rt.tsft_at] + tsft.to_bytes(8, "little") + rt.raw[rt.tsft_at + 8:]


def encrypt_air_capture(path: str | os.PathLike, passphrase: bytes, ssid: bytes, seed: int) -> EncryptResult:
    """Rewrite a simulated radiotap pcap in place as its WPA2-PSK network's sniffer sees it; return the counts.

    Raise ValueError if the file is not a little-endian classic pcap of radiotap records."""
    path = Path(path)
    pmk = pmk_from_passphrase(passphrase, ssid)
    with open(path, "rb") as src, mmap.mmap(src.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        return _encrypt_mapped(path, mm, pmk, ssid, seed)


def _encrypt_mapped(path: Path, mm: mmap.mmap, pmk: bytes, ssid: bytes, seed: int) -> EncryptResult:
    """Return the result of rewriting the mapped capture at `path` (the views on mm end with this call)."""
    magic, _vmaj, _vmin, _tz, _sig, snaplen, linktype = PCAP_GLOBAL.unpack_from(mm, 0)
    kind = pcap_magic(mm[:4])
    if kind is None or kind.byte_order != "<" or linktype != LINKTYPE_RADIOTAP:
        raise ValueError(f"{path.name}: not a little-endian radiotap pcap")
    buf = np.frombuffer(mm, np.uint8)
    ix = _index(buf, len(mm), kind.nanosecond)
    counts = EncryptCounts(records_in=len(ix.off))
    aps, handshakes, inserts, data = _plan(buf, ix, ssid)
    del buf
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb", buffering=1 << 20) as out:
            out.write(mm[:PCAP_GLOBAL.size])
            w = _Writer(out, mm, kind.nanosecond, snaplen)
            _rewrite(w, _Rewriter(mm, ix, pmk, seed, aps, counts), ix, handshakes, inserts, data)
            w.flush()
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    counts.records_out = w.records
    counts.records_added = counts.records_out - counts.records_in
    pos = np.asarray([r.pos for r in inserts], np.int64)
    old = np.arange(len(ix.off), dtype=np.int64)
    return EncryptResult(counts, old + 1 + np.searchsorted(pos, old, side="right"))


def _rewrite(w: _Writer, rw: _Rewriter, ix: _Index, handshakes: list[_Handshake], inserts: list[_Insert],
             data: np.ndarray) -> None:
    """Write every record in order: the inserted ones before the record they precede."""
    mgmt = ((ix.fc0 >> 2) & 3 == 0) & (ix.f0 >= 0)
    touched = np.flatnonzero(mgmt | data)
    q = 0
    n = len(ix.off)
    stops = sorted(set(touched.tolist()) | {r.pos for r in inserts} | {n})
    at = 0
    for i in stops:
        if i > at:      # untouched records: one copy
            w.keep(int(ix.off[at]), int(ix.off[i - 1]) + PCAP_RECORD.size + int(ix.incl[i - 1]))
            w.records += i - at - 1
        while q < len(inserts) and inserts[q].pos == i:
            rec, orig = rw.inserted(handshakes[inserts[q].hs], inserts[q])
            # EAPOL-Key frames stay whole, past the snap length: a capture cut inside its handshakes
            # could never be decrypted (a sniffer meant for it keeps them, e.g. tcpdump's snaplen
            # raised for EAPOL); they are a few hundred bytes per association.
            w.record(inserts[q].ts, rec, orig, snap=False)
            q += 1
        if i >= n:
            break
        got = None
        if data[i]:
            got = rw.data(i)
        elif mgmt[i]:
            got = rw.mgmt(i)
        if got is None:
            w.keep(int(ix.off[i]), int(ix.off[i]) + PCAP_RECORD.size + int(ix.incl[i]))
        else:
            w.record(int(ix.ts[i]), *got)
        at = i + 1


def remap_frame_log(csv_path: str | os.PathLike, frame_map: np.ndarray) -> None:
    """Rewrite the first column (1-based record numbers) of a CSV log through frame_map, atomically."""
    p = Path(csv_path)
    lines = p.read_text().splitlines(keepends=True)
    out = lines[:1]
    for ln in lines[1:]:
        head, sep, rest = ln.partition(",")
        out.append(f"{frame_map[int(head) - 1]}{sep}{rest}" if head.strip() else ln)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.writelines(out)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


__all__ = ["EncryptCounts", "EncryptResult", "check_passphrase", "encrypt_air_capture", "four_way", "protect",
           "remap_frame_log", "with_rsn"]
