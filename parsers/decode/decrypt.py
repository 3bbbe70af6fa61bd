"""Decryption for the decoders: one ChunkDecryptor per capture, fed each chunk's records in capture order.

The decoders may decode chunks on several threads, out of order; the handshakes must be seen before the
data frames they protect.  So the reader runs `ChunkDecryptor.chunk` on every chunk in file order, before
handing the chunk to a decoder: it returns the plaintext of that chunk's protected frames only (memory
stays per chunk), and both decoders take those plaintexts down the same LLC/SNAP -> IP -> transport path
as an open frame.  Records that can be neither a protected frame nor an EAPOL frame are skipped with a
vectorized byte test (most records of a capture); the bare 802.11 frames of the rest are found with
numpy for raw 802.11 and the common radiotap headers (per record otherwise); unprotected data frames
(EAPOL) go through the per-frame Decryptor in order, and the protected frames between two of them are
decrypted at once by parsers.crypto.batch (per frame when they are few).  The result is a PlainChunk:
a {row: Plain} mapping for per-row readers, whose columns a columnar reader takes as they are.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from parsers.columnar import accel
from parsers.crypto.batch import CUT, FAIL, NONE, OK, Protected, decrypt_protected
from parsers.crypto.ccmp import CCMP_HDR, MIC_LEN, rows_at
from parsers.crypto.decrypt import Decryptor
from parsers.crypto.frames import DOT11_LINKTYPES, LLC_EAPOL, Dot11Record, _record
from parsers.crypto.keys import Key
from parsers.crypto.tkip import TRAILER
from parsers.formats.records import RecordChunk
from parsers.layers.radiotap import FLAG_FCS_AT_END, fcs_trailer

# Columns the decryption adds to the packet table (declared in parsers.schema).
DECRYPT_COLUMNS = ("wlan_decrypted", "wlan_mic", "wlan_key")
_RADIOTAP = 127
_RAW = 105
_EAPOL = np.frombuffer(LLC_EAPOL, np.uint8)
MIC_TEXTS = ("ok", "unverified", "failed")      # wlan_mic by outcome - 1 (OK, CUT, FAIL; NONE: null)
KEY_KINDS = ("ptk", "gtk", "tk")                # wlan_key: the kind of key, never key material
MIN_BATCH = 16      # fewer protected frames between two EAPOL frames go the per-frame way (cheaper)


@dataclass(slots=True)        # not frozen: built once per protected frame, and frozen ones build slowly
class Plain:
    """What decryption says about one protected record: its plaintext 802.11 frame (Protected bit cleared,
    no security header or MIC) or None, its length on the air, and the verdict."""

    frame: bytes | None
    claimed: int            # the plaintext frame's length on the air (more than len(frame) when cut)
    key: str | None         # "ptk", "gtk" or "tk": the kind of key, never key material
    mic: str | None         # "ok", "unverified" (cut by the snap length), "failed", or None (not tried)

    @property
    def cut(self) -> bool:
        """Return True when the snap length cut the frame (its captured prefix was decrypted)."""
        return self.frame is not None and self.claimed > len(self.frame)

    def columns(self) -> dict:
        """Return the decryption columns of this record as {column: value}."""
        return {"wlan_decrypted": self.frame is not None, "wlan_mic": self.mic, "wlan_key": self.key}


class PlainChunk(Mapping):
    """{chunk row: Plain} of one chunk's protected records, held as columns (Plain objects are made only
    when asked for). A columnar consumer reads `rows` (sorted), `decrypted`, the verdict texts as codes
    (`mic_code` into MIC_TEXTS, `key_code` into KEY_KINDS; -1 null) or as object arrays (`mic`, `key`),
    and the plaintext frames `buf[start:end]` with their lengths on the air `claimed`."""

    def __init__(self, rows: np.ndarray, decrypted: np.ndarray, mic_code: np.ndarray, key_code: np.ndarray,
                 buf: np.ndarray, start: np.ndarray, end: np.ndarray, claimed: np.ndarray):
        self.rows, self.decrypted, self.mic_code, self.key_code = rows, decrypted, mic_code, key_code
        self.buf, self.start, self.end, self.claimed = buf, start, end, claimed
        self._made: dict[int, Plain] | None = None

    @property
    def mic(self) -> np.ndarray:
        """Return the wlan_mic text of every row (object array, None where null)."""
        return np.array([*MIC_TEXTS, None], object)[self.mic_code]

    @property
    def key(self) -> np.ndarray:
        """Return the wlan_key text (kind of key) of every row (object array, None where null)."""
        return np.array([*KEY_KINDS, None], object)[self.key_code]

    def _plains(self) -> dict[int, Plain]:
        """Return every row's Plain (made once, on the first per-row access)."""
        if self._made is None:
            data = self.buf.tobytes() if len(self.buf) else b""
            frames = [data[a:b] if dec else None for a, b, dec in
                      zip(self.start.tolist(), self.end.tolist(), self.decrypted.tolist())]
            self._made = dict(zip(self.rows.tolist(), map(Plain, frames, self.claimed.tolist(), self.key.tolist(),
                                                          self.mic.tolist())))
        return self._made

    def __getitem__(self, row: int) -> Plain:
        return self._plains()[row]

    def __contains__(self, row) -> bool:
        return row in self._plains()

    def __iter__(self):
        return iter(self.rows.tolist())

    def __len__(self) -> int:
        return len(self.rows)


class ChunkDecryptor:
    """Decrypts a capture chunk by chunk, in file order; keeps only key state between chunks."""

    def __init__(self, keys: Sequence[Key]):
        self._dec = Decryptor(keys)
        self.fallbacks = 0          # runs of frames the columnar path left to the per-frame one (a bug)

    def chunk(self, chunk: RecordChunk) -> PlainChunk:
        """Return {chunk row: Plain} for the chunk's protected 802.11 frames (after feeding its EAPOL frames)."""
        d = self._dec
        rows, where = _candidates_located(chunk)
        d.counts.frames += len(chunk) - len(rows)   # records not worth a look are counted as seen
        buf, rows, s, ln, wire = self._frames(chunk, rows, where)
        head = rows_at(buf, s, 2)
        fc0, fc1 = head[:, 0].astype(np.int64), head[:, 1].astype(np.int64)
        ftype = (fc0 >> 2) & 3
        prot = (ln >= 24) & ((fc0 & 3) == 0) & ((ftype == 0) | (ftype == 2)) & ((fc1 & 0x40) != 0)
        prot[prot] = ln[prot] >= _hdr_len(ftype[prot], fc0[prot], fc1[prot])
        ordered = ~prot & (ln >= 24) & (ftype == 2)      # unprotected data: may feed the handshakes
        d.counts.frames += int((~prot & ~ordered).sum())
        pr = np.flatnonzero(prot)
        p = Protected(buf, s[pr], ln[pr], wire[pr], chunk.frame[rows[pr]] - 1)
        extra: list[int] = []
        done = 0
        for o in np.flatnonzero(ordered).tolist():
            cut = int(np.searchsorted(pr, o))
            self._protected(p, done, cut)
            done = cut
            f = buf[s[o]:s[o] + ln[o]].tobytes()
            if self._dec.frame(int(chunk.frame[rows[o]]) - 1, f, int(wire[o])).reason is not None:
                extra.append(int(rows[o]))        # an internal error: listed, not decoded
        self._protected(p, done, len(p))
        p.write_headers()
        return _plain_chunk(p, rows[pr], np.array(extra, np.int64), d)

    def _frames(self, chunk: RecordChunk, rows: np.ndarray, where: tuple | None = None):
        """Return (buffer, rows, start, captured length, length on the air) of the rows' bare 802.11 frames
        (`where`: locate(chunk, rows), when the caller has it); records without one are counted
        (not_dot11) and left out."""
        s, end, wire, ok = locate(chunk, rows) if where is None else where
        if ok.all():
            return chunk.data, rows, s, end - s, wire
        parts, keep, at, starts, lens, wires = [], [], 0, [], [], []
        data = chunk.data
        for i, r in enumerate(rows.tolist()):
            if ok[i]:
                f = data[s[i]:end[i]].tobytes()
                w = int(wire[i])
            else:
                o, cl = int(chunk.offset[r]), int(chunk.caplen[r])
                rec = bare_record(int(chunk.frame[r]) - 1, data[o:o + cl].tobytes(), max(int(chunk.wirelen[r]), cl),
                                  int(chunk.linktype[r]) & 0xFFFF)
                if rec.frame is None:
                    self._dec.frame(rec.index, None, rec.wire_len, rec.skipped)
                    continue
                f, w = rec.frame, rec.wire_len
            parts.append(f)
            keep.append(r)
            starts.append(at)
            lens.append(len(f))
            wires.append(max(w, len(f)))
            at += len(f)
        buf = np.frombuffer(b"".join(parts), np.uint8) if parts else np.zeros(0, np.uint8)
        return (buf, np.array(keep, np.int64), np.array(starts, np.int64), np.array(lens, np.int64),
                np.array(wires, np.int64))

    def _protected(self, p: Protected, lo: int, hi: int) -> None:
        """Decrypt protected frames lo..hi-1 (no EAPOL frame between them): columnar when there are enough."""
        d = self._dec
        if hi - lo >= MIN_BATCH:
            d.counts.frames += hi - lo
            got = decrypt_protected(d, p, lo, hi)
            if got == hi:
                return
            self.fallbacks += 1
            d.counts.frames -= hi - got
            lo = got
        for i in range(lo, hi):
            _one(d, p, i)

    def summary(self) -> dict:
        """Return the decryption counts (handshakes, keys derived, decrypted, MIC failures, no key...)."""
        self._dec.hs.finish()
        d = self._dec.counts.as_dict()
        d["keys_derived"] = sum(1 for k in self._dec.hs.all if k.kind != "tk")
        return d


def _one(d: Decryptor, p: Protected, i: int) -> None:
    """Decrypt protected frame i of p with the per-frame Decryptor (short runs, and the columnar path's fallback)."""
    got = d.frame(int(p.index[i]), p.frame_bytes(i), int(p.wire[i]))
    p.outcome[i], p.key[i], p.plen[i] = NONE, -1, 0
    if got.plaintext is not None:
        body = got.plaintext[int(p.hdr[i]):]
        at = int(p.body_row[i]) * 16
        p.out.reshape(-1)[at:at + len(body)] = np.frombuffer(body, np.uint8)
        p.plen[i] = len(body)
        p.outcome[i], p.key[i] = (OK if got.mic_ok else CUT), got.key.key_id
    elif got.mic_ok is False:
        p.outcome[i] = FAIL


def _plain_chunk(p: Protected, rows: np.ndarray, extra: np.ndarray, d: Decryptor) -> PlainChunk:
    """Return the PlainChunk of a chunk's decrypted frames (and of records an internal error left undecoded)."""
    if len(extra):
        all_rows = np.concatenate([rows.astype(np.int64), extra])
        order = np.argsort(all_rows, kind="stable")
        all_rows = all_rows[order]
        outcome = np.concatenate([p.outcome, np.zeros(len(extra), np.int8)])[order]
        key = np.concatenate([p.key, np.full(len(extra), -1, np.int32)])[order]
        start = np.concatenate([p.start, np.zeros(len(extra), np.int64)])[order]
        end = np.concatenate([p.end, np.zeros(len(extra), np.int64)])[order]
        wire = np.concatenate([p.wire, np.zeros(len(extra), np.int64)])[order]
    else:   # the usual case: the protected rows are in order already (no concatenation, no sort)
        all_rows, outcome, key, start, end, wire = rows.astype(np.int64), p.outcome, p.key, p.start, p.end, p.wire
    decrypted = (outcome == OK) | (outcome == CUT)
    kinds = [k.kind for k in d.hs.all]
    trailer = np.array([TRAILER if k.cipher == "TKIP" else MIC_LEN[k.cipher] for k in d.hs.all] or [0], np.int64)
    claimed = np.where(decrypted, end - start, 0)
    cut = outcome == CUT
    claimed[cut] = np.maximum(claimed[cut], wire[cut] - CCMP_HDR - trailer[key[cut]])
    kind_code = np.array([KEY_KINDS.index(k) for k in kinds] + [-1], np.int64)
    key_code = kind_code[np.where(decrypted, key, len(kinds))]
    return PlainChunk(all_rows, decrypted, outcome.astype(np.int64) - 1, key_code, p.out.reshape(-1), start,
                      end, claimed)


def _hdr_len(ftype: np.ndarray, fc0: np.ndarray, fc1: np.ndarray) -> np.ndarray:
    """Return the MAC header length of data/management frames (as parse_header)."""
    data = ftype == 2
    four = data & ((fc1 & 3) == 3)
    qos = data & (((fc0 >> 4) & 8) != 0)
    order = (fc1 & 0x80) != 0
    return np.where(data, 24 + 6 * four + 2 * qos + 4 * (qos & order), 24 + 4 * order)


def locate(chunk: RecordChunk, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return (start, end, length on the air, found) of the rows' bare 802.11 frames in chunk.data, as
    bare_record finds them for raw 802.11 and the common radiotap headers; found is False where
    bare_record must judge the record itself."""
    data = chunk.data
    off = chunk.offset[rows].astype(np.int64)
    cl = chunk.caplen[rows].astype(np.int64)
    wl = chunk.wirelen[rows].astype(np.int64)
    lt = chunk.linktype[rows].astype(np.int64) & 0xFFFF
    claimed = np.maximum(wl, cl)
    start, end, wire = off.copy(), off + cl, claimed.copy()
    found = lt == _RAW
    rt = np.flatnonzero((lt == _RADIOTAP) & (cl >= 8))
    if len(rt):
        h = rows_at(data, off[rt], 64)
        c = cl[rt]
        it_len = h[:, 2:4].copy().view("<u2").reshape(-1).astype(np.int64)
        w0 = h[:, 4:8].copy().view("<u4").reshape(-1).astype(np.int64)
        good = h[:, 0] == 0
        at = np.full(len(rt), 4, np.int64)
        ext = (w0 >> 31) & 1 == 1
        for _ in range(12):                 # extended presence words (more: the per-record path)
            if not ext.any():
                break
            at = np.where(ext, at + 4, at)
            good &= ~ext | (at + 4 <= c)
            word = h[np.arange(len(rt)), np.minimum(at + 3, 63)]
            ext = ext & good & ((word >> 7) & 1 == 1)
        good &= ~ext & (at + 4 <= 64)
        at = at + 4
        good &= (it_len >= at) & (it_len <= c) & ((w0 & (1 << 26)) == 0)
        at = np.where(w0 & 1, (at + 7) // 8 * 8 + 8, at)
        flags = np.where((w0 & 2 != 0) & (at < it_len), h[np.arange(len(rt)), np.minimum(at, 63)], 0)
        good &= ~((w0 & 2 != 0) & (at < it_len) & (at > 63))
        e, cm = c.copy(), claimed[rt].copy()
        fcs = (flags & FLAG_FCS_AT_END) != 0
        cutr = c < wl[rt]
        good &= ~(fcs & (cm - it_len < 4) & ~cutr)
        e = np.where(fcs, np.minimum(e, cm - 4), e)
        cm = np.where(fcs, cm - 4, cm)
        good &= e > it_len
        start[rt], end[rt], wire[rt] = off[rt] + it_len, off[rt] + e, cm - it_len
        found[rt] = good
    return start, end, wire, found


def bare_record(index: int, raw: bytes, wirelen: int, linktype: int) -> Dot11Record:
    """Return a record as its bare 802.11 frame (as parsers.crypto.frames does), reading only the radiotap
    fields that decide it (length, Flags) on the common path; any other header goes the full way."""
    if linktype != _RADIOTAP or len(raw) < 8 or raw[0] != 0:
        return _record(index, raw, wirelen, linktype)
    it_len = int.from_bytes(raw[2:4], "little")
    w0 = int.from_bytes(raw[4:8], "little")
    at = 4
    while int.from_bytes(raw[at:at + 4], "little") & (1 << 31):
        at += 4
        if at + 4 > len(raw):
            return _record(index, raw, wirelen, linktype)
    at += 4
    # a PSDU-less PPDU, or a header the full walk must judge: not the common path
    if it_len < at or it_len > len(raw) or w0 & (1 << 26):
        return _record(index, raw, wirelen, linktype)
    if w0 & 1:                       # TSFT: 8 bytes, aligned to 8 from the header's start
        at = (at + 7) // 8 * 8 + 8
    flags = raw[at] if w0 & 2 and at < it_len else 0
    end, claimed, cut = len(raw), max(wirelen, len(raw)), len(raw) < wirelen
    if flags & FLAG_FCS_AT_END:
        trailer = fcs_trailer(raw, it_len, end, claimed, cut)
        if trailer is None:
            return _record(index, raw, wirelen, linktype)
        end, claimed, _ = trailer
    if end <= it_len:
        return _record(index, raw, wirelen, linktype)
    return Dot11Record(index, raw[it_len:end], claimed - it_len)


def _plain(got, wire_len: int) -> Plain:
    """Return the Plain of one Decryptor verdict on a protected frame."""
    if got.plaintext is None:
        return Plain(None, 0, None, "failed" if got.mic_ok is False else None)
    if got.mic_ok:
        return Plain(got.plaintext, len(got.plaintext), got.key.kind, "ok")
    cipher = got.key.cipher
    trailer = TRAILER if cipher == "TKIP" else MIC_LEN[cipher]
    # cut: the frame on the air was its header, the security header, the body and the MIC (or TKIP trailer)
    return Plain(got.plaintext, max(len(got.plaintext), wire_len - CCMP_HDR - trailer), got.key.kind, "unverified")


_OTHER_DOT11 = tuple(t for t in DOT11_LINKTYPES if t not in (_RAW, _RADIOTAP))


def _candidates_located(chunk: RecordChunk) -> tuple[np.ndarray, tuple | None]:
    """Return candidates(chunk) and, from the compiled pass that finds both, locate(chunk, candidates)
    (None without it)."""
    if not accel.AVAILABLE or not len(chunk) or not len(chunk.data) or not chunk.data.flags.c_contiguous:
        return candidates(chunk), None
    cand, start, end, wire, found = accel.dot11_locate(chunk.data, chunk.offset, chunk.caplen, chunk.wirelen,
                                                       chunk.linktype, _OTHER_DOT11)
    rows = np.flatnonzero(cand)
    return rows, (start[rows], end[rows], wire[rows], found[rows])


def candidates(chunk: RecordChunk) -> np.ndarray:
    """Return the rows that may hold a protected data/management frame or an EAPOL frame (a superset).

    Radiotap and raw 802.11 records are tested on their bytes; records of the other 802.11 link types
    (Prism, AVS, PPI) are all candidates (their radio headers are read per frame)."""
    n = len(chunk)
    if not n:
        return np.zeros(0, np.int64)
    lt = chunk.linktype.astype(np.int64)
    off = chunk.offset.astype(np.int64)
    end = off + chunk.caplen.astype(np.int64)
    data = chunk.data
    top = len(data) - 1
    start = np.full(n, -1, np.int64)
    raw = lt == _RAW
    start[raw] = off[raw]
    rt = (lt == _RADIOTAP) & (end - off >= 4)
    if rt.any():
        o = off[rt]
        it_len = data[np.minimum(o + 2, top)].astype(np.int64) | (data[np.minimum(o + 3, top)].astype(np.int64) << 8)
        start[rt] = o + it_len
    ok = (start >= 0) & (start + 24 <= end)
    s = np.where(ok, start, 0)
    fc0 = data[np.minimum(s, top)].astype(np.int64)
    fc1 = data[np.minimum(s + 1, top)].astype(np.int64)
    ftype = fc0 & 0x0C
    framed = ok & (ftype != 0x04) & (ftype != 0x0C)
    cand = framed & ((fc1 & 0x40) != 0)
    data_rows = np.flatnonzero(framed & ~cand & (ftype == 0x08))
    if len(data_rows):
        cand[data_rows[_eapol_within(data, s[data_rows], end[data_rows])]] = True
    other = np.isin(lt, _OTHER_DOT11)
    return np.flatnonzero(cand | other)


def _eapol_within(data: np.ndarray, s: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Return a mask of the frames (starting at s) with the EAPOL LLC/SNAP header within bytes 24..48."""
    at = s[:, None] + np.arange(24, 48)
    inside = at < end[:, None]
    win = data[np.minimum(at, len(data) - 1)]
    found = np.zeros(len(s), bool)
    for o in range(0, 24 - len(_EAPOL) + 1):
        found |= (win[:, o:o + len(_EAPOL)] == _EAPOL).all(axis=1) & inside[:, o + len(_EAPOL) - 1]
    return found
