"""CCMP-128/256 and GCMP-128/256 (IEEE 802.11 12.5.3, 12.5.5): nonce and AAD from the MAC header, decryption.

AAD: frame control with, for data frames, subtype bits 4-6 masked; Retry, Power Management and
More Data masked; Protected set; Order masked in QoS data frames (their HT Control is not in the
AAD); A1-A3; sequence control with the sequence number masked (fragment number kept); A4 when
present; QoS Control with only the TID kept.  CCM nonce: flags (TID, 0x10 for management frames)
|| A2 || PN5..PN0; GCM nonce: A2 || PN5..PN0.  A frame cut by the snap length has no MIC to check:
its captured prefix is decrypted with the same counter blocks (AES-CTR) and left unverified.
"""
from __future__ import annotations

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESCCM, AESGCM

from parsers.crypto.frames import Header

CCMP_HDR = 8
MIC_LEN = {"CCMP-128": 8, "CCMP-256": 16, "GCMP-128": 16, "GCMP-256": 16}


def pn_of(hdr8: bytes) -> bytes:
    """Return the 6-byte PN (PN5 first) of a CCMP/GCMP header."""
    return bytes((hdr8[7], hdr8[6], hdr8[5], hdr8[4], hdr8[1], hdr8[0]))


def key_id_of(hdr8: bytes) -> int:
    """Return the Key ID (0-3) of a CCMP/GCMP/TKIP header."""
    return hdr8[3] >> 6


def aad_of(h: Header, f: bytes) -> bytes:
    """Return the AAD of a protected data or management frame."""
    fc0 = f[0] & 0x8F if h.ftype == 2 else f[0]
    fc1 = (f[1] & 0xC7) | 0x40
    if h.qos_at:
        fc1 &= 0x7F
    parts = [bytes((fc0, fc1)), f[4:22], bytes((f[22] & 0x0F, 0))]
    if h.a4 is not None:
        parts.append(h.a4)
    if h.qos_at:
        parts.append(bytes((h.tid, 0)))
    return b"".join(parts)


def nonce_of(h: Header, pn: bytes, gcm: bool) -> bytes:
    """Return the CCM (13-byte) or GCM (12-byte) nonce of a frame."""
    if gcm:
        return h.a2 + pn
    flags = 0x10 if h.ftype == 0 else h.tid
    return bytes((flags,)) + h.a2 + pn


class FrameCipher:
    """One temporal key ready for CCMP or GCMP frames (the cipher objects are built once per key)."""

    def __init__(self, tk: bytes, cipher: str):
        self.name, self.gcm, self.mic_len = cipher, cipher.startswith("GCMP"), MIC_LEN[cipher]
        self._aead = AESGCM(tk) if self.gcm else AESCCM(tk, tag_length=self.mic_len)
        # The counter blocks of a cut frame, encrypted in one call: a CTR context per frame costs more
        # than the AES work itself (most frames of a header-only capture are cut).
        self._ecb = Cipher(algorithms.AES(tk), modes.ECB()).encryptor()

    def __repr__(self) -> str:
        return f"<FrameCipher {self.name}>"

    def decrypt(self, h: Header, f: bytes, wire_len: int) -> tuple[bytes | None, bool | None]:
        """Return (plaintext body, MIC verdict): (body, True), (None, False) on a bad MIC, or
        (captured prefix, None) for a frame cut by the snap length.  The caller checks the length."""
        ccmp = f[h.hdr_len:h.hdr_len + CCMP_HDR]
        nonce = nonce_of(h, pn_of(ccmp), self.gcm)
        body = f[h.hdr_len + CCMP_HDR:]
        if len(f) >= wire_len:
            try:
                return self._aead.decrypt(nonce, body, aad_of(h, f)), True
            except InvalidTag:
                return None, False
        payload = wire_len - h.hdr_len - CCMP_HDR - self.mic_len
        return self._ctr(nonce, body[:max(payload, 0)]), None

    def _ctr(self, nonce: bytes, data: bytes) -> bytes:
        """Return data decrypted with the counter blocks the AEAD uses for the payload."""
        if not data:
            return b""
        n = (len(data) + 15) // 16
        if self.gcm:        # GCM: nonce || 32-bit counter, the payload from 2
            blocks = b"".join(nonce + (2 + i).to_bytes(4, "big") for i in range(n))
        else:               # CCM (L = 2): flags 1 || nonce || 16-bit counter, the payload from 1
            head = b"\x01" + nonce
            blocks = b"".join(head + (1 + i).to_bytes(2, "big") for i in range(n))
        stream = self._ecb.update(blocks)
        k = len(data)
        return (int.from_bytes(data, "big") ^ int.from_bytes(stream[:k], "big")).to_bytes(k, "big")
