"""EAPOL-Key frames: the 4-way and group-key handshakes per (AP, STA), MIC-checked PTKs, unwrapped GTKs.

A PTK is accepted only when it verifies the MIC of message 2 (so a wrong passphrase yields no key,
and is counted).  The ANonce comes from message 1 or 3, the SNonce, AKM and ciphers from message 2
(its RSNE / WPA element; without one they are guessed from the key descriptor version and every
guess is MIC-checked).  The GTK comes from message 3 or group-key message 1, unwrapped with the KEK
(AES key wrap, RFC 3394; RC4 for descriptor version 1).  A new handshake adds a newer key for the
pair: the decryptor tries keys newest first, so a rekey takes over from its time on.  Every list
kept per pair is bounded, so a capture full of forged EAPOL frames cannot grow memory without end.
"""
from __future__ import annotations

import hashlib
import hmac
from collections import Counter, deque
from dataclasses import dataclass, field

from cryptography.hazmat.decrepit.ciphers.algorithms import ARC4
from cryptography.hazmat.primitives import cmac
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.keywrap import InvalidUnwrap, aes_key_unwrap

from parsers.crypto.keys import AKMS, CIPHER_BY_NAME, CIPHERS, Akm, Key, Ptk, derive_ptk

KI_PAIRWISE, KI_INSTALL, KI_ACK, KI_MIC, KI_SECURE, KI_ENCRYPTED = 0x08, 0x40, 0x80, 0x100, 0x200, 0x1000
MIC_AT = 4 + 77                # MIC offset in the EAPOL frame (EAPOL header + descriptor fields)
KEEP = 4                       # nonces / pending messages / keys remembered per pair
MAX_PAIRS = 4096               # pairs with handshake state (oldest forgotten beyond this)
MAX_M2 = 1 << 16               # message 2s whose outcome is remembered (older ones only counted)
OUI_RSN, OUI_WPA = b"\x00\x0f\xac", b"\x00\x50\xf2"
# SAE and OWE: the PMK comes from the SAE / Diffie-Hellman exchange, never from a passphrase alone.
NO_PASSPHRASE = frozenset({8, 9, 18, 24, 25})
# Guesses when message 2 names no AKM: by key descriptor version.
AKM_GUESS = {1: (2,), 2: (2,), 3: (6,), 0: (8, 18, 20, 12, 11)}


@dataclass
class EapolKey:
    """One EAPOL-Key frame: the fields the handshakes use, and the frame itself for the MIC."""

    raw: bytes              # the EAPOL frame (header + body, as long as its length field says)
    descriptor: int         # 2 = RSN (IEEE 802.11), 254 = WPA
    info: int
    key_len: int
    replay: int
    nonce: bytes
    iv: bytes
    mic: bytes
    data: bytes

    @property
    def version(self) -> int:
        """Return the key descriptor version (key information bits 0-2)."""
        return self.info & 7

    def message(self) -> str:
        """Return the message: 'm1'..'m4' of the 4-way handshake, 'g1'/'g2' of the group-key one."""
        ack, mic = bool(self.info & KI_ACK), bool(self.info & KI_MIC)
        if not self.info & KI_PAIRWISE:
            return "g1" if ack else "g2"
        if ack:
            return "m3" if mic else "m1"
        return "m2" if any(self.nonce) else "m4"


def parse_eapol_key(pdu: bytes) -> EapolKey | None:
    """Return the EAPOL-Key frame at the start of an EAPOL PDU, or None if it is not one (or malformed)."""
    if len(pdu) < 4 or pdu[1] != 3:
        return None
    length = int.from_bytes(pdu[2:4], "big")
    raw = pdu[:4 + length]
    if len(raw) < 4 + length or length < 77 + 16 + 2 or raw[4] not in (2, 254):
        return None
    # The MIC length is the AKM's: take the one whose key data length fills the frame exactly,
    # else a 16-byte MIC with key data inside the frame (some stations pad EAPOL frames).
    for mic_len, exact in ((16, True), (24, True), (16, False)):
        at = MIC_AT + mic_len
        if at + 2 > len(raw):
            continue
        end = at + 2 + int.from_bytes(raw[at:at + 2], "big")
        if end == len(raw) or (not exact and end <= len(raw)):
            b = raw[4:]
            return EapolKey(raw, b[0], int.from_bytes(b[1:3], "big"), int.from_bytes(b[3:5], "big"),
                            int.from_bytes(b[5:13], "big"), b[13:45], b[45:61], raw[MIC_AT:at], raw[at + 2:end])
    return None


def eapol_mic(kck: bytes, akm: Akm, version: int, frame: bytes) -> bytes:
    """Return the MIC of an EAPOL frame (its MIC field zeroed by the caller) for an AKM and descriptor version."""
    kind = akm.mic
    if kind == "by-version":
        kind = {1: "hmac-md5", 2: "hmac-sha1", 3: "cmac"}.get(version, "")
    if kind == "cmac":
        c = cmac.CMAC(algorithms.AES(kck))
        c.update(frame)
        return c.finalize()
    algo = {"hmac-md5": "md5", "hmac-sha1": "sha1", "hmac-sha256": "sha256", "hmac-sha384": "sha384"}.get(kind)
    if algo is None:
        return b""
    return hmac.new(kck, frame, getattr(hashlib, algo)).digest()[:akm.mic_len]


def mic_ok(kck: bytes, akm: Akm, k: EapolKey) -> bool:
    """Return True when the EAPOL-Key frame's MIC verifies under this KCK."""
    if len(k.mic) != akm.mic_len:
        return False
    zeroed = k.raw[:MIC_AT] + bytes(len(k.mic)) + k.raw[MIC_AT + len(k.mic):]
    return hmac.compare_digest(eapol_mic(kck, akm, k.version, zeroed), k.mic)


def suites_of(data: bytes) -> tuple[int | None, int | None, int | None]:
    """Return (group cipher, pairwise cipher, AKM) suite types from the first RSNE / WPA element in key data."""
    p = 0
    while p + 2 <= len(data):
        eid, n = data[p], data[p + 1]
        body = data[p + 2:p + 2 + n]
        if eid == 48 and len(body) >= 2:
            return _suites(body[2:], OUI_RSN)
        if eid == 0xDD and body[:4] == OUI_WPA + b"\x01":
            return _suites(body[6:], OUI_WPA)
        p += 2 + n
    return None, None, None


def _suites(b: bytes, oui: bytes) -> tuple[int | None, int | None, int | None]:
    """Return (group, first pairwise, first AKM) suite types of an RSNE/WPA body after its version."""
    group = b[3] if len(b) >= 4 and b[:3] == oui else None
    pair = akm = None
    if len(b) >= 10:
        n = int.from_bytes(b[4:6], "little")
        if n and b[6:9] == oui:
            pair = b[9]
        q = 6 + 4 * n
        if len(b) >= q + 6 and int.from_bytes(b[q:q + 2], "little") and b[q + 2:q + 5] == oui:
            akm = b[q + 5]
    return group, pair, akm


def unwrap_key_data(k: EapolKey, kek: bytes) -> bytes | None:
    """Return the decrypted key data of an EAPOL-Key frame (AES key wrap, or RC4 for version 1), or None."""
    if k.version == 1:
        rc4 = Cipher(ARC4(k.iv + kek), mode=None).decryptor()
        rc4.update(bytes(256))
        return rc4.update(k.data)
    if len(k.data) < 24 or len(k.data) % 8:
        return None
    try:
        return aes_key_unwrap(kek, k.data)
    except InvalidUnwrap:
        return None


def gtk_kde(plain: bytes) -> tuple[int, bytes] | None:
    """Return (key id, GTK) of the GTK KDE (00-0F-AC type 1) in decrypted key data, else None."""
    p = 0
    while p + 2 <= len(plain):
        eid, n = plain[p], plain[p + 1]
        if eid == 0xDD and n == 0:
            break                      # padding
        body = plain[p + 2:p + 2 + n]
        if eid == 0xDD and len(body) >= 6 and body[:4] == OUI_RSN + b"\x01":
            return body[4] & 3, body[6:]
        p += 2 + n
    return None


@dataclass
class PairKey:
    """A key the decryptor may use: a PTK of an (AP, STA) pair, or a GTK of (AP, key id), or a user TK."""

    key_id: int
    kind: str               # "ptk", "gtk" or "tk"
    cipher: str
    tk: bytes = field(repr=False)
    ap: bytes = b""
    sta: bytes = b""
    group_id: int = -1
    since: int = -1         # frame index where the key was derived
    source: str = ""        # label of the user key it came from
    kck: bytes = field(default=b"", repr=False)
    kek: bytes = field(default=b"", repr=False)
    anonce: bytes = field(default=b"", repr=False)
    akm: int = 0
    group_cipher: str | None = None
    verified: int = 0       # frames whose MIC it verified


@dataclass
class HandshakeCounts:
    """What the handshakes gave: counted, never printed with key material."""

    eapol_key_frames: int = 0
    eapol_malformed: int = 0
    handshakes: int = 0             # distinct message 2 (per pair and SNonce)
    ptks_derived: int = 0
    handshakes_failed: int = 0      # an ANonce was there but no key verified message 2's MIC
    handshakes_incomplete: int = 0  # message 2 without any ANonce (message 1 and 3 missed)
    gtks_unwrapped: int = 0
    gtk_failures: int = 0           # group key data that would not unwrap or held no GTK
    unsupported_akm: int = 0
    needs_pmk: int = 0              # SAE/OWE handshakes tried with passphrases only (give wpa-psk:PMK)


class _Pair:
    """Handshake state of one (AP, STA) pair."""

    def __init__(self) -> None:
        self.anonces: deque[bytes] = deque(maxlen=KEEP)
        self.pending: deque[EapolKey] = deque(maxlen=KEEP)   # message 2s not yet verified
        self.tried: dict[bytes, set[bytes]] = {}             # SNonce -> ANonces tried


class Handshakes:
    """Follows EAPOL-Key frames in capture order and keeps the PTKs and GTKs they prove."""

    def __init__(self, keys: list[Key]):
        self.keys = [k for k in keys if k.pmk() is not None]
        self.counts = HandshakeCounts()
        self.ptks: dict[tuple[bytes, bytes], list[PairKey]] = {}
        self.gtks: dict[tuple[bytes, int], list[PairKey]] = {}
        self.all: list[PairKey] = []
        self._pairs: dict[tuple[bytes, bytes], _Pair] = {}
        self._m2: dict[tuple[bytes, bytes, bytes], str] = {}   # (ap, sta, snonce) -> verified|failed|waiting
        self._m2_forgotten: Counter[str] = Counter()            # outcomes of message 2s evicted from _m2

    def feed(self, pdu: bytes, ra: bytes, ta: bytes, index: int, via: PairKey | None = None) -> None:
        """Take one EAPOL PDU sent from `ta` to `ra` (decrypted with `via`, if it was protected)."""
        k = parse_eapol_key(pdu)
        if k is None:
            if len(pdu) >= 2 and pdu[1] == 3:
                self.counts.eapol_malformed += 1
            return
        self.counts.eapol_key_frames += 1
        msg = k.message()
        ap, sta = (ta, ra) if msg in ("m1", "m3", "g1") else (ra, ta)
        pair = self._pair(ap, sta)
        if msg in ("m1", "m3") and any(k.nonce):
            if k.nonce not in pair.anonces:
                pair.anonces.append(k.nonce)
            for m2 in list(pair.pending):
                self._try(ap, sta, pair, m2, index)
        if msg == "m2":
            self._note_m2((ap, sta, k.nonce))
            if k not in pair.pending:
                pair.pending.append(k)
            self._try(ap, sta, pair, k, index)
        if msg in ("m3", "g1") and k.info & KI_MIC:
            self._group(ap, sta, k, index, via)

    def finish(self) -> HandshakeCounts:
        """Return the counts, with every message 2 seen classed as verified, failed or incomplete."""
        c = self.counts
        states = Counter(self._m2.values()) + self._m2_forgotten
        c.handshakes = sum(states.values())
        c.handshakes_failed = states["failed"]
        c.handshakes_incomplete = states["waiting"]
        return c

    def _note_m2(self, state: tuple[bytes, bytes, bytes]) -> None:
        """Remember a message 2 (bounded: a flood of forged ones is counted, not stored)."""
        if state in self._m2:
            return
        if len(self._m2) >= MAX_M2:
            old = next(iter(self._m2))
            self._m2_forgotten[self._m2.pop(old)] += 1
        self._m2[state] = "waiting"

    def _pair(self, ap: bytes, sta: bytes) -> _Pair:
        p = self._pairs.get((ap, sta))
        if p is None:
            if len(self._pairs) >= MAX_PAIRS:
                self._pairs.pop(next(iter(self._pairs)))
            p = self._pairs[(ap, sta)] = _Pair()
        return p

    def _try(self, ap: bytes, sta: bytes, pair: _Pair, m2: EapolKey, index: int) -> None:
        """Try every key and ANonce on a message 2; keep the PTK whose KCK verifies its MIC."""
        state = (ap, sta, m2.nonce)
        if self._m2.get(state, "verified") == "verified":    # done, or forgotten under a flood
            return
        if m2.nonce not in pair.tried and len(pair.tried) >= 4 * KEEP:
            pair.tried.pop(next(iter(pair.tried)))
        tried = pair.tried.setdefault(m2.nonce, set())
        fresh = [a for a in pair.anonces if a not in tried]
        if not fresh:
            return
        tried.update(fresh)
        group, pairwise, akm_suite = suites_of(m2.data)
        akms = (akm_suite,) if akm_suite is not None else AKM_GUESS.get(m2.version, ())
        akms = tuple(AKMS[a] for a in akms if a in AKMS)
        if not akms:
            self.counts.unsupported_akm += 1
            self._m2[state] = "failed"
            return
        ciphers = _cipher_guess(pairwise, m2)
        keys = [k for k in self.keys if k.kind != "wpa-pwd" or not all(a.suite in NO_PASSPHRASE for a in akms)]
        if not keys and self.keys:
            self.counts.needs_pmk += 1
        for key in keys:
            for anonce in fresh:
                for akm in akms:
                    for cipher in ciphers:
                        ptk = derive_ptk(key.pmk(), ap, sta, anonce, m2.nonce, akm, cipher)
                        if mic_ok(ptk.kck, akm, m2):
                            self._install(ap, sta, ptk, anonce, akm, group, key, index)
                            self._m2[state] = "verified"
                            pair.pending = deque((m for m in pair.pending if m.nonce != m2.nonce), maxlen=KEEP)
                            return
        self._m2[state] = "failed"

    def _install(self, ap: bytes, sta: bytes, ptk: Ptk, anonce: bytes, akm: Akm, group: int | None,
                 key: Key, index: int) -> None:
        """Add a PTK for the pair (newest last; older ones kept for frames still under them)."""
        gname = CIPHERS.get(group, (None,))[0] if group is not None else None
        pk = PairKey(len(self.all), "ptk", ptk.cipher, ptk.tk, ap, sta, since=index, source=key.label,
                     kck=ptk.kck, kek=ptk.kek, anonce=anonce, akm=akm.suite, group_cipher=gname)
        self.all.append(pk)
        self.counts.ptks_derived += 1
        lst = self.ptks.setdefault((ap, sta), [])
        lst.append(pk)
        del lst[:-KEEP]

    def _group(self, ap: bytes, sta: bytes, k: EapolKey, index: int, via: PairKey | None) -> None:
        """Unwrap the GTK of message 3 or group message 1 with the KEK of the pair's PTK."""
        if k.message() == "m3" and (k.descriptor == 254 or not k.info & KI_ENCRYPTED):
            return                          # a WPA message 3 carries the WPA element, not the GTK
        ptks = self.ptks.get((ap, sta), [])
        if k.message() == "m3":
            ptks = [p for p in ptks if p.anonce == k.nonce]
        elif via is not None and via.kind == "ptk":
            ptks = [via]
        if not ptks or not k.data:
            return
        ptk = ptks[-1]
        if not ap_mic_ok(ptk, k):
            self.counts.gtk_failures += 1
            return
        found = self._gtk_of(k, ptk)
        if found is None:
            self.counts.gtk_failures += 1
            return
        gid, gtk = found
        cipher = ptk.group_cipher or _group_cipher_by_len(len(gtk), ptk.cipher)
        if cipher is None or cipher not in CIPHER_BY_NAME or len(gtk) < _tk_len(cipher):
            self.counts.gtk_failures += 1
            return
        lst = self.gtks.setdefault((ap, gid), [])
        if lst and lst[-1].tk == gtk[:len(lst[-1].tk)]:
            return                                   # a retransmission of the same GTK
        gk = PairKey(len(self.all), "gtk", cipher, gtk[:_tk_len(cipher)], ap, b"", gid, index, ptk.source)
        self.all.append(gk)
        self.counts.gtks_unwrapped += 1
        lst.append(gk)
        del lst[:-KEEP]

    def _gtk_of(self, k: EapolKey, ptk: PairKey) -> tuple[int, bytes] | None:
        """Return (key id, GTK) carried by an RSN message 3 / group message 1 or a WPA group message 1."""
        if k.descriptor == 254:            # WPA: the key data is the bare GTK, key id in bits 4-5
            if k.message() != "g1":
                return None
            plain = unwrap_key_data(k, ptk.kek)
            return None if plain is None else ((k.info >> 4) & 3, plain[:k.key_len or len(plain)])
        if not k.info & KI_ENCRYPTED:
            return None
        plain = unwrap_key_data(k, ptk.kek)
        return None if plain is None else gtk_kde(plain)


def ap_mic_ok(ptk: PairKey, k: EapolKey) -> bool:
    """Return True when a message from the AP verifies under the PTK's KCK (its AKM decides the MIC)."""
    return mic_ok(ptk.kck, AKMS[ptk.akm], k)


def _tk_len(cipher: str) -> int:
    return CIPHER_BY_NAME[cipher][1]


def _group_cipher_by_len(n: int, pairwise: str) -> str | None:
    """Return the group cipher a GTK of n bytes implies when no RSNE named it."""
    if n == 32:
        return "TKIP" if pairwise in ("TKIP", "CCMP-128") else pairwise
    if n == 16:
        return "CCMP-128" if pairwise == "TKIP" else pairwise
    return None


def _cipher_guess(pairwise: int | None, m2: EapolKey) -> tuple[str, ...]:
    """Return the pairwise cipher(s) to try: the RSNE's, else by descriptor version."""
    if pairwise in CIPHERS:
        return (CIPHERS[pairwise][0],)
    if m2.version == 1:
        return ("TKIP",)
    return ("CCMP-128", "GCMP-128", "CCMP-256", "GCMP-256")
