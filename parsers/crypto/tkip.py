"""TKIP (IEEE 802.11 12.5.2): per-packet key mixing, RC4 decryption, ICV and Michael MIC.

TKIP header: TSC1, WEP seed, TSC0, key id | ExtIV, TSC2..TSC5.  The 16-byte RC4 key comes from the
two-phase mixing of the TK, the transmitter address and the 48-bit TSC.  The plaintext ends in the
8-byte Michael MIC (over DA, SA, priority and the MSDU) and the 4-byte ICV (CRC-32).  A whole,
unfragmented frame is verified by both; a fragment by its ICV only (the Michael MIC spans the MSDU);
a frame cut by the snap length decrypts its captured prefix (RC4 is a stream cipher), unverified.
The 32-byte TK is TK(16) || Michael key AP->STA (8) || Michael key STA->AP (8).
"""
from __future__ import annotations

import struct
import zlib

from cryptography.hazmat.decrepit.ciphers.algorithms import ARC4
from cryptography.hazmat.primitives.ciphers import Cipher

from parsers.crypto.frames import Header

TKIP_HDR = 8
TRAILER = 8 + 4          # Michael MIC + ICV
_M16 = 0xFFFF
_M32 = 0xFFFFFFFF


def _aes_sbox() -> list[int]:
    """Return the AES S-box (multiplicative inverse in GF(2^8) then the affine map)."""
    sbox = [0x63] * 256
    p = q = 1
    while True:
        p = (p ^ (p << 1) ^ (0x1B if p & 0x80 else 0)) & 0xFF          # p * 3
        q ^= q << 1
        q ^= q << 2
        q ^= q << 4
        q &= 0xFF
        if q & 0x80:
            q ^= 0x09                                                  # q / 3
        rot = [((q << k) | (q >> (8 - k))) & 0xFF for k in range(1, 5)]
        sbox[p] = q ^ rot[0] ^ rot[1] ^ rot[2] ^ rot[3] ^ 0x63
        if p == 1:
            return sbox


def _tkip_sbox() -> tuple[list[int], list[int]]:
    """Return TKIP's two 16-bit S-box tables (IEEE 802.11 12.5.2.5.3), built from the AES S-box."""
    lo = []
    for s in _aes_sbox():
        x2 = ((s << 1) ^ (0x1B if s & 0x80 else 0)) & 0xFF
        lo.append(x2 << 8 | (x2 ^ s))
    return lo, [((v & 0xFF) << 8) | (v >> 8) for v in lo]


_T0, _T1 = _tkip_sbox()


def _s(v: int) -> int:
    return _T0[v & 0xFF] ^ _T1[v >> 8]


def _mk16(hi: int, lo: int) -> int:
    return hi << 8 | lo


def _rotr1(v: int) -> int:
    return ((v >> 1) | (v << 15)) & _M16


def phase1(tk: bytes, ta: bytes, iv32: int) -> list[int]:
    """Return the TTAK (five 16-bit words) of phase 1 key mixing."""
    p = [iv32 & _M16, iv32 >> 16, _mk16(ta[1], ta[0]), _mk16(ta[3], ta[2]), _mk16(ta[5], ta[4])]
    for i in range(8):
        j = 2 * (i & 1)
        p[0] = (p[0] + _s(p[4] ^ _mk16(tk[1 + j], tk[0 + j]))) & _M16
        p[1] = (p[1] + _s(p[0] ^ _mk16(tk[5 + j], tk[4 + j]))) & _M16
        p[2] = (p[2] + _s(p[1] ^ _mk16(tk[9 + j], tk[8 + j]))) & _M16
        p[3] = (p[3] + _s(p[2] ^ _mk16(tk[13 + j], tk[12 + j]))) & _M16
        p[4] = (p[4] + _s(p[3] ^ _mk16(tk[1 + j], tk[0 + j])) + i) & _M16
    return p


def phase2(ttak: list[int], tk: bytes, iv16: int) -> bytes:
    """Return the 16-byte RC4 key (WEP seed) of phase 2 key mixing."""
    k = [_mk16(tk[2 * i + 1], tk[2 * i]) for i in range(8)]
    p = list(ttak) + [(ttak[4] + iv16) & _M16]
    for i in range(6):
        p[i] = (p[i] + _s(p[i - 1 if i else 5] ^ k[i])) & _M16
    p[0] = (p[0] + _rotr1(p[5] ^ k[6])) & _M16
    p[1] = (p[1] + _rotr1(p[0] ^ k[7])) & _M16
    for i in range(2, 6):
        p[i] = (p[i] + _rotr1(p[i - 1])) & _M16
    hi, lo = iv16 >> 8, iv16 & 0xFF
    head = bytes((hi, (hi | 0x20) & 0x7F, lo, ((p[5] ^ k[0]) >> 1) & 0xFF))
    return head + struct.pack("<6H", *p)


def michael(key: bytes, data: bytes) -> bytes:
    """Return the 8-byte Michael MIC of data under a 64-bit key."""
    left, right = struct.unpack("<II", key)
    padded = data + b"\x5a" + bytes(4 + (-(len(data) + 5)) % 4)
    for (m,) in struct.iter_unpack("<I", padded):
        left ^= m
        right ^= ((left << 17) | (left >> 15)) & _M32
        left = (left + right) & _M32
        right ^= ((left & 0xFF00FF00) >> 8) | ((left & 0x00FF00FF) << 8)
        left = (left + right) & _M32
        right ^= ((left << 3) | (left >> 29)) & _M32
        left = (left + right) & _M32
        right ^= ((left >> 2) | (left << 30)) & _M32
        left = (left + right) & _M32
    return struct.pack("<II", left, right)


def da_sa(h: Header) -> tuple[bytes, bytes]:
    """Return (DA, SA) of a data frame from its DS bits."""
    ds = h.flags & 3
    if ds == 0:
        return h.a1, h.a2
    if ds == 1:
        return h.a3, h.a2
    if ds == 2:
        return h.a1, h.a3
    return h.a3, h.a4 or b""


class TkipCipher:
    """One TKIP key (PTK or GTK part, 32 bytes) ready to decrypt frames; `ap` picks the Michael key by direction."""

    name = "TKIP"

    def __init__(self, tk: bytes, ap: bytes = b""):
        self._tk, self._ap = tk[:16], ap
        self._mic_tx, self._mic_rx = tk[16:24], tk[24:32]
        self._ttak: dict[tuple[bytes, int], list[int]] = {}

    def __repr__(self) -> str:
        return "<TkipCipher>"

    def decrypt(self, h: Header, f: bytes, wire_len: int) -> tuple[bytes | None, bool | None]:
        """Return (MSDU body, verdict) as FrameCipher.decrypt does (None, False) on a bad ICV or MIC."""
        t = f[h.hdr_len:h.hdr_len + TKIP_HDR]
        iv16, iv32 = t[0] << 8 | t[2], int.from_bytes(t[4:8], "little")
        rc4 = Cipher(ARC4(phase2(self._phase1(h.a2, iv32), self._tk, iv16)), mode=None).decryptor()
        clear = rc4.update(f[h.hdr_len + TKIP_HDR:])
        if len(f) < wire_len:
            return clear[:max(wire_len - h.hdr_len - TKIP_HDR - TRAILER, 0)], None
        if len(clear) < 4 or zlib.crc32(clear[:-4]).to_bytes(4, "little") != clear[-4:]:
            return None, False
        fragment = bool(h.flags & 0x04) or bool(f[22] & 0x0F)
        if fragment:
            return clear[:-4], True
        if len(clear) < TRAILER:
            return None, False
        msdu, mic = clear[:-TRAILER], clear[-TRAILER:-4]
        da, sa = da_sa(h)
        key = self._mic_tx if (not self._ap or h.a2 == self._ap) else self._mic_rx
        if michael(key, da + sa + bytes((h.tid, 0, 0, 0)) + msdu) != mic:
            return None, False
        return msdu, True

    def _phase1(self, ta: bytes, iv32: int) -> list[int]:
        """Return the TTAK for (TA, IV32), cached: it changes once every 65536 frames."""
        k = (ta, iv32)
        ttak = self._ttak.get(k)
        if ttak is None:
            if len(self._ttak) > 64:
                self._ttak.clear()
            ttak = self._ttak[k] = phase1(self._tk, ta, iv32)
        return ttak
