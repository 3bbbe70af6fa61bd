"""The decryptor: frames in capture order in, plaintext 802.11 frames and per-frame verdicts out.

Frames are bare 802.11 frames (no radio header, no FCS) with their length on the air (so a frame
cut by the snap length is known).  Unprotected EAPOL-Key frames feed the handshakes; a protected
data or management frame is tried with the keys that fit its addresses (the pair's PTKs newest
first, or the transmitter's GTK for its key id, then any user TK) and is decrypted only when one
verifies its MIC; a cut frame is decrypted with the pair's last key that verified a frame (its
prefix, marked unverified).  Protected EAPOL frames (rekeys, group-key handshakes) are fed to the
handshakes once decrypted.  The loop is per frame (the cipher objects are built once per key): it is
the reference; parsers.crypto.batch gives the same verdicts for many frames at once (the decoders use it).
"""
from __future__ import annotations

import os
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from parsers.crypto.ccmp import CCMP_HDR, MIC_LEN, FrameCipher, key_id_of
from parsers.crypto.eapol import HandshakeCounts, Handshakes, PairKey
from parsers.crypto.frames import (
    LLC_EAPOL,
    Header,
    dot11_records,
    eapol_after,
    eapol_body,
    parse_header,
)
from parsers.crypto.keys import Key
from parsers.crypto.tkip import TRAILER, TkipCipher

R_SHORT = "protected frame shorter than its security header"
R_WEP = "WEP-protected (not decrypted)"
R_NO_KEY = "no key"
R_MIC = "MIC failure"
R_NOT_DOT11 = "not an 802.11 frame"


@dataclass
class DecryptCounts:
    """Per-run counts: frames, what was decrypted, and why the rest was not (no key material)."""

    frames: int = 0
    not_dot11: int = 0              # records with no 802.11 frame (bad radio header, other link type)
    protected: int = 0
    decrypted: int = 0
    mic_verified: int = 0
    mic_unverified: int = 0         # cut by the snap length: prefix decrypted, MIC not checked
    mic_failures: int = 0           # keys derived for the frame's pair/group did not verify it: not decoded
    no_key: int = 0
    wep: int = 0
    too_short: int = 0
    internal_errors: int = 0        # frames a bug in this package failed on (counted, never raised)
    fcs_stripped: int = 0           # frames that verified only once a trailing FCS was removed
    handshakes: HandshakeCounts = field(default_factory=HandshakeCounts)

    def as_dict(self) -> dict:
        """Return the counts as a flat dict (handshake counts prefixed ``hs_``)."""
        d = asdict(self)
        hs = d.pop("handshakes")
        d.update({f"hs_{k}": v for k, v in hs.items()})
        return d


@dataclass
class DecryptResult:
    """Per input frame: plaintext 802.11 frame or None, and columns; plus the counts and the keys used."""

    plaintext: list[bytes | None]
    decrypted: np.ndarray           # bool
    key_id: np.ndarray              # int32, -1 = none; index into `keys`
    key_kind: list[str | None]      # "ptk", "gtk", "tk"
    mic_ok: list[bool | None]       # True verified, False failed, None unverified / not tried
    reason: list[str | None]        # why a protected frame was not decrypted
    counts: DecryptCounts
    keys: list[dict]                # one per key_id: kind, cipher, ap, sta, group_id, since, source (no secrets)

    def columns(self) -> dict[str, list]:
        """Return the per-frame columns as lists (for a polars/pandas table)."""
        return {"decrypted": self.decrypted.tolist(), "key_id": self.key_id.tolist(), "key_kind": self.key_kind,
                "mic_ok": self.mic_ok, "reason": self.reason}


@dataclass
class FrameOut:
    """What the decryptor says about one frame."""

    plaintext: bytes | None = None
    key: PairKey | None = None
    mic_ok: bool | None = None
    reason: str | None = None


class Decryptor:
    """Decrypts frames fed in capture order, following the handshakes it sees."""

    def __init__(self, keys: Sequence[Key]):
        self.hs = Handshakes(list(keys))
        self.counts = DecryptCounts(handshakes=self.hs.counts)
        self._ciphers: dict[int, FrameCipher | TkipCipher] = {}
        self._last_good: dict[tuple[bytes, bytes], PairKey] = {}
        self._user_tks: list[PairKey] = []
        self._ecbs: dict = {}           # key id -> AES-ECB context, for the columnar path (parsers.crypto.batch)
        for k in keys:
            tk = k.tk()
            if tk is not None:
                for cipher in (("CCMP-128", "GCMP-128") if len(tk) == 16 else ("CCMP-256", "GCMP-256", "TKIP")):
                    self._user_tks.append(self._user_key(k, tk, cipher))

    def frame(self, index: int, f: bytes | None, wire_len: int | None = None, why: str | None = None) -> FrameOut:
        """Return the verdict on one frame (f None: a record with no 802.11 frame, for reason `why`)."""
        try:
            return self._frame(index, f, wire_len, why)
        except Exception as exc:  # noqa: BLE001 - a capture is untrusted: a bug here must not end the run
            self.counts.internal_errors += 1
            return FrameOut(reason=f"internal error in decryption: {type(exc).__name__}")

    def _frame(self, index: int, f: bytes | None, wire_len: int | None, why: str | None) -> FrameOut:
        c = self.counts
        c.frames += 1
        if f is None:
            c.not_dot11 += 1
            return FrameOut(reason=why or R_NOT_DOT11)
        if len(f) < 24 or not _worth_parsing(f):
            return FrameOut()
        h = parse_header(f)
        if h is None:
            return FrameOut()
        if not h.protected:
            pdu = eapol_body(h, f)
            if pdu is not None:
                self.hs.feed(pdu, h.a1, h.a2, index)
            return FrameOut()
        return self._protected(index, h, f, max(wire_len or 0, len(f)))

    def result_keys(self) -> list[dict]:
        """Return a description of every key used or derived, by key_id (addresses, never key bytes)."""
        out = []
        for k in self.hs.all:
            out.append({"key_id": k.key_id, "kind": k.kind, "cipher": k.cipher, "ap": _mac(k.ap),
                        "sta": _mac(k.sta), "group_id": k.group_id, "since": k.since, "source": k.source,
                        "frames_verified": k.verified})
        return out

    def _user_key(self, k: Key, tk: bytes, cipher: str) -> PairKey:
        pk = PairKey(len(self.hs.all), "tk", cipher, tk, source=k.label)
        self.hs.all.append(pk)      # key ids are shared with derived keys
        return pk

    def _protected(self, index: int, h: Header, f: bytes, wire_len: int) -> FrameOut:
        c = self.counts
        c.protected += 1
        if len(f) < h.hdr_len + CCMP_HDR:
            c.too_short += 1
            return FrameOut(reason=R_SHORT)
        sec = f[h.hdr_len:h.hdr_len + CCMP_HDR]
        if not sec[3] & 0x20:
            c.wep += 1
            return FrameOut(reason=R_WEP)
        cands = self._candidates(h, key_id_of(sec))
        if not cands:
            c.no_key += 1
            return FrameOut(reason=R_NO_KEY)
        if len(f) < wire_len:
            return self._cut(index, h, f, wire_len, cands)
        out = self._verified(index, h, f, cands)
        if out is None and len(f) > h.hdr_len + CCMP_HDR + 4 and _has_fcs(f):
            # Raw 802.11, Prism and AVS headers do not say whether an FCS follows; a trailer that is
            # the CRC-32 of the frame is one (a chance match is 1 in 2^32), so try without it.
            out = self._verified(index, h, f[:-4], cands)
            c.fcs_stripped += out is not None
        if out is None and all(k.kind == "tk" for k in cands):
            c.no_key += 1               # a user TK fits any frame: not verifying means not its key
            return FrameOut(reason=R_NO_KEY)
        if out is None:
            c.mic_failures += 1
            return FrameOut(mic_ok=False, reason=R_MIC)
        return out

    def _verified(self, index: int, h: Header, f: bytes, cands: list[PairKey]) -> FrameOut | None:
        """Return the frame decrypted by the first candidate key that verifies its MIC, else None."""
        for key in cands:
            if len(f) < h.hdr_len + CCMP_HDR + _trailer(key.cipher):
                continue
            plain, ok = self._cipher(key).decrypt(h, f, len(f))
            if ok:
                key.verified += 1
                if key.kind == "ptk":
                    self._last_good[(key.ap, key.sta)] = key
                self.counts.decrypted += 1
                self.counts.mic_verified += 1
                return self._done(index, h, f, plain, key, True)
        return None

    def _cut(self, index: int, h: Header, f: bytes, wire_len: int, cands: list[PairKey]) -> FrameOut:
        """Decrypt the captured prefix of a frame cut by the snap length with the most trusted key."""
        key = next((k for k in cands if k.kind == "ptk" and self._last_good.get((k.ap, k.sta)) is k), cands[0])
        plain, _ = self._cipher(key).decrypt(h, f, wire_len)
        self.counts.decrypted += 1
        self.counts.mic_unverified += 1
        return self._done(index, h, f, plain or b"", key, None)

    def _done(self, index: int, h: Header, f: bytes, plain: bytes, key: PairKey, ok: bool | None) -> FrameOut:
        """Return the plaintext frame (Protected bit cleared); feed a decrypted EAPOL frame to the handshakes."""
        out = bytes((f[0], f[1] & 0xBF)) + f[2:h.hdr_len] + plain
        if ok and h.ftype == 2 and not h.subtype & 4:
            pdu = eapol_after(out, h.hdr_len)
            if pdu is not None:
                self.hs.feed(pdu, h.a1, h.a2, index, via=key)
        return FrameOut(out, key, ok)

    def _candidates(self, h: Header, key_id: int) -> list[PairKey]:
        """Return the keys that may protect a frame: PTKs of its pair or GTKs of its sender, then user TKs."""
        return self._candidates_for(h.group, h.a1, h.a2, key_id)

    def _candidates_for(self, group: bool, a1: bytes, a2: bytes, key_id: int) -> list[PairKey]:
        """Return the candidate keys of a frame from its group bit, A1, A2 and key id (see _candidates)."""
        hs = self.hs
        if group:
            found = list(reversed(hs.gtks.get((a2, key_id), [])))
        else:
            found = list(reversed(hs.ptks.get((a2, a1), []))) + list(reversed(hs.ptks.get((a1, a2), [])))
        return found + self._user_tks

    def _cipher(self, key: PairKey) -> FrameCipher | TkipCipher:
        c = self._ciphers.get(key.key_id)
        if c is None:
            c = TkipCipher(key.tk, key.ap) if key.cipher == "TKIP" else FrameCipher(key.tk, key.cipher)
            self._ciphers[key.key_id] = c
        return c


def _worth_parsing(f: bytes) -> bool:
    """Return True for a protected data/management frame or a data frame with an EAPOL LLC/SNAP header
    (a cheap byte test: most frames of a capture are neither)."""
    ftype = f[0] & 0x0C
    if ftype == 0x04 or ftype == 0x0C:          # control, extension: never protected
        return False
    return bool(f[1] & 0x40) or (ftype == 0x08 and f.find(LLC_EAPOL, 24, 48) >= 0)


def _has_fcs(f: bytes) -> bool:
    """Return True when the last 4 bytes are the CRC-32 (FCS) of the rest of the frame."""
    return zlib.crc32(f[:-4]).to_bytes(4, "little") == f[-4:]


def _trailer(cipher: str) -> int:
    return TRAILER if cipher == "TKIP" else MIC_LEN[cipher]


def _mac(b: bytes) -> str:
    return ":".join(f"{x:02x}" for x in b)


def decrypt_frames(frames: Sequence[bytes | None] | tuple[np.ndarray, np.ndarray, np.ndarray],
                   keys: Sequence[Key], wire_lengths: Sequence[int] | None = None) -> DecryptResult:
    """Return the DecryptResult of bare 802.11 frames in capture order (or a (buffer, offsets, lengths) triple).

    wire_lengths: each frame's length on the air without FCS (longer than the frame when the snap
    length cut it); by default every frame is whole.
    """
    if isinstance(frames, tuple):
        buf, offs, lens = frames
        mv = memoryview(np.ascontiguousarray(buf, dtype=np.uint8))
        frames = [bytes(mv[o:o + n]) for o, n in zip(np.asarray(offs).tolist(), np.asarray(lens).tolist())]
    wl = [None] * len(frames) if wire_lengths is None else list(wire_lengths)
    return _run(keys, ((i, f, w, None) for i, (f, w) in enumerate(zip(frames, wl))))


def decrypt_capture(path: str | os.PathLike, keys: Sequence[Key]) -> DecryptResult:
    """Return the DecryptResult of every record of a pcap/pcapng capture (DLT 105, 127, 119, 163, 192)."""
    return _run(keys, ((r.index, r.frame, r.wire_len, r.skipped) for r in dot11_records(path)))


def _run(keys: Sequence[Key], items: Iterable[tuple[int, bytes | None, int | None, str | None]]) -> DecryptResult:
    """Return the result of feeding items (index, frame, wire length, why no frame) to one Decryptor."""
    d = Decryptor(keys)
    outs = [d.frame(i, f, w, why) for i, f, w, why in items]
    d.hs.finish()
    return DecryptResult(
        plaintext=[o.plaintext for o in outs],
        decrypted=np.fromiter((o.plaintext is not None for o in outs), bool, len(outs)),
        key_id=np.fromiter((o.key.key_id if o.key is not None else -1 for o in outs), np.int32, len(outs)),
        key_kind=[o.key.kind if o.key is not None else None for o in outs],
        mic_ok=[o.mic_ok for o in outs], reason=[o.reason for o in outs],
        counts=d.counts, keys=d.result_keys())
