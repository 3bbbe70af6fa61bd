"""CCMP-128/256 and GCMP-128/256 (IEEE 802.11 12.5.3, 12.5.5): nonce and AAD from the MAC header, decryption.

AAD: frame control with, for data frames, subtype bits 4-6 masked; Retry, Power Management and
More Data masked; Protected set; Order masked in QoS data frames (their HT Control is not in the
AAD); A1-A3; sequence control with the sequence number masked (fragment number kept); A4 when
present; QoS Control with only the TID kept.  CCM nonce: flags (TID, 0x10 for management frames)
|| A2 || PN5..PN0; GCM nonce: A2 || PN5..PN0.  A frame cut by the snap length has no MIC to check:
its captured prefix is decrypted with the same counter blocks (AES-CTR) and left unverified.
"""
from __future__ import annotations

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESCCM, AESGCM

from parsers.columnar import accel
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



# Columnar CCMP/GCMP: the frames of one key at once.  Counter blocks of every frame are built in one
# numpy buffer and encrypted by one AES-ECB call; the CBC-MAC is sequential within a frame but runs
# across frames, one ECB call per block position (frames sorted by block count, so the running ones
# are a prefix).  Bodies are handled as 16-byte rows, never byte by byte.  The results equal AESCCM's
# and the per-frame CTR's (tests/parsers/test_ccmp_batch.py compares them).
B0_FLAGS = {8: 0x59, 16: 0x79}      # Adata | (M-2)/2 << 3 | L-1, for L = 2
_TAIL_MASK = (np.arange(16)[None, :] < np.arange(17)[:, None]).astype(np.uint8) * 0xFF   # [k]: k bytes kept


def ecb_of(tk: bytes):
    """Return an AES-ECB encryptor of the key (its update runs in C over many blocks at once)."""
    return Cipher(algorithms.AES(tk), modes.ECB()).encryptor()


def aes_blocks(ecb, blocks: np.ndarray) -> np.ndarray:
    """Return the (n, 16) uint8 blocks encrypted with the ECB context (read-only)."""
    if not len(blocks):
        return np.zeros((0, 16), np.uint8)
    return np.frombuffer(ecb.update(np.ascontiguousarray(blocks).tobytes()), np.uint8).reshape(-1, 16)


def ranges(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Return the flat int64 positions of the ranges [start, start + len) one after another."""
    lens = np.asarray(lens, np.int64)
    total = int(lens.sum())
    if not total:
        return np.zeros(0, np.int64)
    first = np.cumsum(lens) - lens
    return np.arange(total, dtype=np.int64) + np.repeat(np.asarray(starts, np.int64) - first, lens)


def rows_at(buf: np.ndarray, starts: np.ndarray, width: int = 16) -> np.ndarray:
    """Return the (n, width) bytes of buf from each start (bytes past the buffer's end read as 0)."""
    starts = np.asarray(starts, np.int64)
    n, size = len(starts), len(buf)
    if size < width:
        at = starts[:, None] + np.arange(width)
        return np.where(at < size, buf[np.minimum(at, max(size - 1, 0))] if size else 0, 0).astype(np.uint8)
    if buf.strides[0] != 1:
        buf = np.ascontiguousarray(buf)
    # one item of `width` bytes at every byte offset: a gather copies each row with one memcpy
    win = np.ndarray(shape=(size - width + 1,), dtype=np.dtype(f"V{width}"), buffer=buf, strides=(1,))
    over = starts > size - width
    if not over.any():
        return win[starts].view(np.uint8).reshape(n, width)
    out = np.empty((n, width), np.uint8)
    out[~over] = win[starts[~over]].view(np.uint8).reshape(-1, width)
    at = starts[over][:, None] + np.arange(width)
    out[over] = np.where(at < size, buf[np.minimum(at, size - 1)], 0)
    return out


def counter_blocks(prefix: np.ndarray, first: np.ndarray | int, count: np.ndarray, width: int,
                   within: np.ndarray | None = None) -> np.ndarray:
    """Return count[i] blocks per frame: its prefix then a big-endian counter (width bytes) from first
    (`within`: ranges(0, count), when the caller has it)."""
    count = np.asarray(count, np.int64)
    out = np.empty((len(prefix), 16), np.uint8)
    out[:, :16 - width] = prefix
    out = np.repeat(out, count, axis=0)
    ctr = ranges(np.zeros(len(count), np.int64), count) if within is None else within.copy()
    ctr += (np.repeat(np.asarray(first, np.int64), count) if np.ndim(first) else first)
    out.view(f">u{width}")[:, 16 // width - 1] = ctr
    return out


def body_rows(buf: np.ndarray, at: np.ndarray, nb: np.ndarray, within: np.ndarray | None = None) -> np.ndarray:
    """Return the nb[i] 16-byte rows from buf[at[i]] of every frame, one after another."""
    nb = np.asarray(nb, np.int64)
    if within is None:
        within = ranges(np.zeros(len(nb), np.int64), nb)
    return rows_at(buf, np.repeat(np.asarray(at, np.int64), nb) + 16 * within)


def clear_tails(rows: np.ndarray, nb: np.ndarray, plen: np.ndarray) -> None:
    """Zero the bytes past each frame's length in its last row (in place)."""
    rem = np.asarray(plen, np.int64) % 16
    cut = (rem > 0) & (nb > 0)
    if cut.any():
        last = (np.cumsum(nb) - 1)[cut]
        rows[last] &= _TAIL_MASK[rem[cut]]


def ctr_open(ecb, prefix: np.ndarray, first: int, width: int, buf: np.ndarray, at: np.ndarray,
             plen: np.ndarray, zero_tails: bool = True, dest: np.ndarray | None = None,
             dest_row: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Return (rows per frame, plaintext rows one after another) of the bytes buf[at:at+plen] of every
    frame XORed with its counter-mode key stream (counters from `first`); the bytes past each length
    are zero, or (numpy path only) left as they are without zero_tails.  With `dest`, the rows of
    frame i are written to dest[dest_row[i]:] ((rows, 16) array) instead; the compiled path then
    returns None for the rows."""
    nb = (np.asarray(plen, np.int64) + 15) // 16
    if accel.AVAILABLE and (dest is None or (dest.flags.c_contiguous and dest.flags.writeable)):
        # counter blocks, AES and the XOR-and-scatter in three passes (numpy took seven)
        firsts = np.broadcast_to(np.asarray(first, np.int64), nb.shape)
        stream = ecb.update(accel.ctr_blocks(prefix, width, firsts, nb)) if len(nb) else b""
        own = dest is None
        if own:
            dest, dest_row = np.empty((int(nb.sum()), 16), np.uint8), np.cumsum(nb) - nb
        accel.ctr_xor(np.ascontiguousarray(buf), at, plen, stream, dest, dest_row)
        return nb, (dest if own else None)
    within = ranges(np.zeros(len(nb), np.int64), nb)
    plain = body_rows(buf, at, nb, within)
    plain ^= aes_blocks(ecb, counter_blocks(prefix, first, nb, width, within))
    if zero_tails:
        clear_tails(plain, nb, plen)
    if dest is not None:
        dest[np.repeat(np.asarray(dest_row, np.int64), nb) + within] = plain
    return nb, plain


def ccm_prefix(nonce: np.ndarray) -> np.ndarray:
    """Return the 14 bytes before the CCM counter (flags L-1, nonce) of each (n, 13) nonce."""
    out = np.empty((len(nonce), 14), np.uint8)
    out[:, 0] = 1
    out[:, 1:] = nonce
    return out


def ccm_open_batch(ecb, mic_len: int, buf: np.ndarray, prefix: np.ndarray, aad: np.ndarray, at: np.ndarray,
                   plen: np.ndarray, dest: np.ndarray | None = None, dest_row: np.ndarray | None = None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Return (MIC verified, rows per frame, plaintext rows) of CCM frames whose ciphertext is
    buf[at:at+plen] followed by the MIC; `prefix` is ccm_prefix(nonce), `aad` (n, 32) the 2-byte AAD
    length, the AAD, zeros.  With `dest`, the plaintext rows (the bytes past each length zero) are
    written to dest[dest_row[i]:] instead, whether the MIC verifies or not, and None is returned for them."""
    n = len(plen)
    plen = np.asarray(plen, np.int64)
    nb, padded = ctr_open(ecb, prefix, 1, 2, buf, at, plen, dest=dest, dest_row=dest_row)
    src, row0 = (padded, np.cumsum(nb) - nb) if dest is None else (dest, np.asarray(dest_row, np.int64))
    s0 = aes_blocks(ecb, counter_blocks(prefix, 0, np.ones(n, np.int64), 2))
    b0 = np.empty((n, 16), np.uint8)
    b0[:, 0] = B0_FLAGS[mic_len]
    b0[:, 1:14] = prefix[:, 1:]
    b0[:, 14] = plen >> 8
    b0[:, 15] = plen & 0xFF
    order = np.argsort(-nb, kind="stable")
    x = aes_blocks(ecb, b0[order])
    x = aes_blocks(ecb, x ^ aad[order, :16])
    x = aes_blocks(ecb, x ^ aad[order, 16:]).copy()
    nb_o, boff_o = nb[order], row0[order]
    running = n - np.searchsorted(nb_o[::-1], np.arange(int(nb_o[0]) if n else 0), side="right")
    for j, k in enumerate(running.tolist()):
        x[:k] = aes_blocks(ecb, x[:k] ^ src[boff_o[:k] + j])
    tag = np.empty_like(x)
    tag[order] = x
    mic = rows_at(buf, np.asarray(at, np.int64) + plen, mic_len)
    ok = ((tag[:, :mic_len] ^ s0[:, :mic_len]) == mic).all(axis=1)
    return ok, nb, (padded if dest is None else None)
