"""Columnar decryption: the protected frames between two EAPOL frames, all at once, with Decryptor.frame's verdicts.

`decrypt_protected(d, frames, lo, hi)` gives frames lo..hi-1 of a `Protected` batch (bare protected
802.11 frames in capture order, no EAPOL frame between them) the outcome, key and plaintext the
per-frame `Decryptor.frame` would give, and updates the Decryptor's counts and key state the same way.
Header fields, nonces and AADs are read for every frame at once; each key's frames are decrypted by
the columnar CCMP code of `ccmp` (TKIP, whole GCMP frames and frames over 64 KiB go through the
per-frame ciphers).  A key is tried on the frames whose candidate list has it at that place, round by
round, which is the per-frame order; a decrypted EAPOL frame is fed to the handshakes in order, and
when that adds a key the frames after it are solved again.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np

from parsers.columnar import accel
from parsers.crypto.ccmp import (
    CCMP_HDR,
    MIC_LEN,
    ccm_open_batch,
    ccm_prefix,
    ctr_open,
    ecb_of,
    ranges,
    rows_at,
)
from parsers.crypto.frames import LLC_EAPOL, parse_header
from parsers.crypto.tkip import TRAILER

NONE, OK, CUT, FAIL = 0, 1, 2, 3        # outcome: no plaintext (reason), MIC verified, cut (prefix), MIC failure
HEAD = 48                               # header bytes read per frame: MAC header (<= 36) + security header
_LLC_U8 = np.frombuffer(LLC_EAPOL[:8], "<u8")[0]
_CCM_MAX = 0xFFFF                       # CCM with L = 2 carries at most this many bytes (longer: per frame)


@dataclass(eq=False)
class Protected:
    """Bare protected 802.11 frames (in `buf`, capture order) and, once decrypted, their verdicts.

    Plaintext frames are written to `out` ((rows, 16) bytes): frame i's body starts at row body_row[i],
    its header right before it, so it is out.reshape(-1)[start[i]:end[i]]."""

    buf: np.ndarray
    s: np.ndarray               # frame start in buf
    ln: np.ndarray              # captured bytes
    wire: np.ndarray            # bytes on the air (>= ln; more when the snap length cut the frame)
    index: np.ndarray           # capture record index (0-based), for the handshakes
    head: np.ndarray = field(init=False)
    out: np.ndarray = field(init=False)
    committed: int = field(init=False, default=0)     # frames before this one have their verdicts counted

    def __post_init__(self) -> None:
        n = len(self.s)
        self.s, self.ln, self.wire = (np.asarray(a, np.int64) for a in (self.s, self.ln, self.wire))
        self.index = np.asarray(self.index, np.int64)
        if accel.AVAILABLE and n and self.buf.flags.c_contiguous:
            self._fields_compiled()
        else:
            self._fields(n)
        self.prefix = ccm_prefix(self.nonce)
        self.combo, self.combo_first = _combos(self.head, self.group, self.kid)
        self.body_cap = np.maximum(self.ln - self.hdr - CCMP_HDR, 0)
        hb = (self.hdr + 15) // 16
        rows = hb + (self.body_cap + 15) // 16
        self.body_row = np.cumsum(rows) - rows + hb
        self.out = np.zeros((int(rows.sum()), 16), np.uint8)
        self.outcome = np.zeros(n, np.int8)
        self.key = np.full(n, -1, np.int32)
        self.plen = np.zeros(n, np.int64)
        self.stripped = np.zeros(n, bool)
        self.internal = np.zeros(n, bool)
        self.no_key = np.zeros(n, bool)
        self.short = self.ln < self.hdr + CCMP_HDR
        self.wep = ~self.short & ~self.ext_iv

    def _fields(self, n: int) -> None:
        """Read every frame's first HEAD bytes (head), header fields and CCM nonce."""
        h = self.head = rows_at(self.buf, self.s, HEAD)
        fc0, fc1 = h[:, 0].astype(np.int64), h[:, 1].astype(np.int64)
        self.ftype, self.sub, self.fc1 = (fc0 >> 2) & 3, fc0 >> 4, fc1
        data = self.ftype == 2
        self.four = data & ((fc1 & 3) == 3)
        self.qos = data & ((self.sub & 8) != 0)
        order = (fc1 & 0x80) != 0
        self.hdr = np.where(data, 24 + 6 * self.four + 2 * self.qos + 4 * (self.qos & order), 24 + 4 * order)
        qos_at = np.where(self.four, 30, 24)
        self.tid = np.where(self.qos, h[np.arange(n), np.minimum(qos_at, HEAD - 1)] & 0x0F, 0).astype(np.int64)
        sec = rows_at(self.buf, self.s + self.hdr, CCMP_HDR)
        self.kid = (sec[:, 3] >> 6).astype(np.int64)
        self.ext_iv = (sec[:, 3] & 0x20) != 0
        self.group = (h[:, 4] & 1) != 0
        self.nonce = np.empty((n, 13), np.uint8)
        self.nonce[:, 0] = np.where(self.ftype == 0, 0x10, self.tid)
        self.nonce[:, 1:7] = h[:, 10:16]
        self.nonce[:, 7:] = sec[:, [7, 6, 5, 4, 1, 0]]

    def _fields_compiled(self) -> None:
        """_fields in one compiled pass (the same arrays)."""
        self.head, f, self.nonce = accel.protected_fields(self.buf, self.s, HEAD)
        self.ftype, self.sub, self.fc1, self.hdr, self.tid, self.kid = f[:6]
        bits = f[7]
        self.four, self.qos = (bits & 1) != 0, (bits & 2) != 0
        self.ext_iv, self.group = (bits & 4) != 0, (bits & 8) != 0

    def __len__(self) -> int:
        return len(self.s)

    @property
    def start(self) -> np.ndarray:
        """Return where each plaintext frame starts in out.reshape(-1)."""
        return self.body_row * 16 - self.hdr

    @property
    def end(self) -> np.ndarray:
        """Return where each plaintext frame ends in out.reshape(-1)."""
        return self.body_row * 16 + self.plen

    def frame_bytes(self, i: int, trim: int = 0) -> bytes:
        """Return frame i's captured bytes (without its last `trim`)."""
        s = int(self.s[i])
        return self.buf[s:s + int(self.ln[i]) - trim].tobytes()

    def aad_of(self, rows: np.ndarray) -> np.ndarray:
        """Return the (len(rows), 32) AAD blocks of frames rows (see _aad): only whole frames need one."""
        fc1 = self.fc1[rows]
        return _aad(self.head[rows], self.ftype[rows] == 2, fc1, self.four[rows], self.qos[rows], self.tid[rows])

    def write_headers(self) -> None:
        """Write the header (Protected bit cleared) before the body of every frame with a plaintext."""
        has = np.flatnonzero((self.outcome == OK) | (self.outcome == CUT))
        if accel.AVAILABLE:
            accel.put_headers(self.head.reshape(-1), has * HEAD, self.hdr[has], self.out.reshape(-1),
                              self.body_row[has] * 16)
            return
        hdr = self.hdr[has]
        for h in np.unique(hdr).tolist():
            rows = has[hdr == h]
            hb = (h + 15) // 16                 # the header's own rows, right before the body
            block = np.zeros((len(rows), hb * 16), np.uint8)
            block[:, hb * 16 - h:] = self.head[rows, :h]
            block[:, hb * 16 - h + 1] &= 0xBF
            self.out[(self.body_row[rows] - hb)[:, None] + np.arange(hb)] = block.reshape(len(rows), hb, 16)


def _aad(h: np.ndarray, data: np.ndarray, fc1: np.ndarray, four: np.ndarray, qos: np.ndarray,
         tid: np.ndarray) -> np.ndarray:
    """Return (n, 32): the 2-byte AAD length, the AAD (as ccmp.aad_of builds it), zeros."""
    n = len(h)
    a = np.zeros((n, 32), np.uint8)
    a[:, 2] = np.where(data, h[:, 0] & 0x8F, h[:, 0])
    a[:, 3] = np.where(qos, ((fc1 & 0xC7) | 0x40) & 0x7F, (fc1 & 0xC7) | 0x40)
    a[:, 4:22] = h[:, 4:22]
    a[:, 22] = h[:, 22] & 0x0F
    a[four, 24:30] = h[four, 24:30]
    q = np.where(four, 30, 24)
    a[np.flatnonzero(qos), q[qos]] = tid[qos]
    a[:, 1] = 22 + 6 * four + 2 * qos
    return a


def _mac(h: np.ndarray, at: int) -> np.ndarray:
    """Return the 6-byte addresses at column `at` of each row as uint64 (little-endian: only equality matters)."""
    v = np.zeros((len(h), 8), np.uint8)
    v[:, :6] = h[:, at:at + 6]
    return v.view("<u8").reshape(-1)


def _combos(h: np.ndarray, group: np.ndarray, kid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return (combo id per frame, first frame of each combo): frames of one combo have the same candidate
    keys (unicast: the same A1 and A2; group: the same A2 and key id)."""
    n = len(h)
    if not n:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    a1 = np.where(group, (np.uint64(1) << np.uint64(63)) | kid.astype(np.uint64), _mac(h, 4))
    a2 = _mac(h, 10)
    # runs of one combo are common: factorize the run heads only
    heads = np.concatenate(([0], np.flatnonzero((a1[1:] != a1[:-1]) | (a2[1:] != a2[:-1])) + 1))
    u2, i2 = np.unique(a2[heads], return_inverse=True)
    _, i1 = np.unique(a1[heads], return_inverse=True)
    _, first, inv = np.unique(i1.reshape(-1) * len(u2) + i2.reshape(-1), return_index=True, return_inverse=True)
    run = np.diff(np.append(heads, n))
    return np.repeat(inv.reshape(-1), run).astype(np.int64), heads[first]


def groups(values: np.ndarray, items: np.ndarray):
    """Yield (value, items with that value) for each distinct value (items in their order)."""
    if not len(items):
        return
    if values.min() >= 0 and values.max() < 4096:
        present = np.flatnonzero(np.bincount(values))
        if len(present) <= 8:          # a few keys or combos: masks beat a sort
            for v in present.tolist():
                yield v, items[values == v]
            return
    order = np.argsort(values, kind="stable")
    v = values[order]
    cuts = np.flatnonzero(v[1:] != v[:-1]) + 1
    for part in np.split(order, cuts):
        yield values[part[0]].item(), items[part]


def decrypt_protected(d, p: Protected, lo: int, hi: int) -> int:
    """Decrypt frames lo..hi-1 of p as Decryptor.frame would one by one, updating d's counts and key state;
    return hi, or the first frame left undone if this code failed (the caller decrypts those per frame)."""
    p.committed = lo
    while p.committed < hi:
        try:
            _step(d, p, p.committed, hi)
        except Exception:  # noqa: BLE001 - the frames not committed yet go the per-frame way
            return p.committed
    return hi


def _step(d, p: Protected, pos: int, hi: int) -> None:
    """Solve frames pos..hi-1 and commit them up to the first decrypted EAPOL frame that adds a key
    (the frames after it have other candidates)."""
    idx = np.arange(pos, hi)
    _solve(d, p, idx)
    start = pos
    for e in _eapol_rows(p, idx).tolist():
        _commit(d, p, np.arange(start, e + 1))
        before = len(d.hs.all)
        _feed(d, p, e)
        start = e + 1
        if len(d.hs.all) != before:
            return
    _commit(d, p, np.arange(start, hi))


def _eapol_rows(p: Protected, idx: np.ndarray) -> np.ndarray:
    """Return the frames of idx decrypted with a verified MIC whose body is an EAPOL LLC/SNAP header."""
    ok = idx[(p.outcome[idx] == OK) & (p.ftype[idx] == 2) & ((p.sub[idx] & 4) == 0) & (p.plen[idx] >= 8)]
    if not len(ok):
        return ok
    # the first 8 body bytes of each frame as one little-endian integer: one gather, one compare
    first = p.out.view("<u8")[p.body_row[ok], 0]
    return ok[first == _LLC_U8]


def _feed(d, p: Protected, i: int) -> None:
    """Feed a decrypted EAPOL frame to the handshakes (as Decryptor._done does)."""
    flat = p.out.reshape(-1)
    at = int(p.body_row[i]) * 16
    pdu = flat[at + 8:at + int(p.plen[i])].tobytes()
    h = p.head[i]
    try:
        d.hs.feed(pdu, h[4:10].tobytes(), h[10:16].tobytes(), int(p.index[i]), via=d.hs.all[int(p.key[i])])
    except Exception:  # noqa: BLE001 - as Decryptor.frame: a bug here is counted, the frame not decoded
        d.counts.internal_errors += 1
        p.outcome[i] = NONE


def _commit(d, p: Protected, idx: np.ndarray) -> None:
    """Add frames idx's verdicts to d's counts, keys' verified counts and last verified key per pair."""
    if not len(idx):
        return
    p.committed = int(idx[-1]) + 1      # first, so a failure below never has these frames decrypted twice
    c, out = d.counts, p.outcome[idx]
    c.protected += len(idx)
    c.too_short += int(p.short[idx].sum())
    c.wep += int(p.wep[idx].sum())
    c.no_key += int(p.no_key[idx].sum())
    c.internal_errors += int(p.internal[idx].sum())
    ok = idx[out == OK]
    c.mic_failures += int((out == FAIL).sum())
    c.mic_verified += len(ok)
    c.mic_unverified += int((out == CUT).sum())
    c.decrypted += len(ok) + int((out == CUT).sum())
    c.fcs_stripped += int(p.stripped[ok].sum())
    if not len(ok):
        return
    keys = p.key[ok]
    counts = np.bincount(keys)
    for k in np.flatnonzero(counts).tolist():
        d.hs.all[k].verified += int(counts[k])
    pair_id, pairs = _key_pairs(d)
    pid = pair_id[keys]
    ptk = np.flatnonzero(pid >= 0)
    if len(ptk):      # the last frame verified per pair: Decryptor._last_good
        rev = ptk[::-1]
        _, first = np.unique(pid[rev], return_index=True)
        for j in rev[first].tolist():
            key = d.hs.all[int(keys[j])]
            d._last_good[(key.ap, key.sta)] = key


def _key_pairs(d) -> tuple[np.ndarray, list[tuple[bytes, bytes]]]:
    """Return (pair id per key id, -1 unless a PTK; the pairs (AP, STA) by id)."""
    ids: dict[tuple[bytes, bytes], int] = {}
    pid = np.array([ids.setdefault((k.ap, k.sta), len(ids)) if k.kind == "ptk" else -1 for k in d.hs.all] or [-1],
                   np.int64)
    return pid, list(ids)


def _solve(d, p: Protected, idx: np.ndarray) -> None:
    """Set outcome, key and plaintext of frames idx under d's present keys (d is not changed)."""
    p.outcome[idx], p.key[idx], p.plen[idx] = NONE, -1, 0
    p.stripped[idx] = p.internal[idx] = p.no_key[idx] = False
    rest = idx[~p.short[idx] & ~p.wep[idx]]
    if not len(rest):
        return
    cands = _candidates(d, p, rest)
    ncand = np.array([len(c) for c in cands], np.int64)
    has = ncand[p.combo[rest]] > 0
    p.no_key[rest[~has]] = True
    rest = rest[has]
    cut = p.ln[rest] < p.wire[rest]
    whole = rest[~cut]
    mat = np.full((len(cands), max(ncand.max(), 1)), -1, np.int64)
    for c, ks in enumerate(cands):
        mat[c, :len(ks)] = [k.key_id for k in ks]
    left = _rounds(d, p, whole, mat, ncand, 0)
    if len(left):
        # Raw 802.11, Prism and AVS headers do not say whether an FCS follows (see Decryptor._protected)
        fcs = left[p.ln[left] > p.hdr[left] + CCMP_HDR + 4]
        fcs = fcs[np.array([_has_fcs(p, i) for i in fcs.tolist()], bool)] if len(fcs) else fcs
        _rounds(d, p, fcs, mat, ncand, 4)
        p.stripped[fcs[p.outcome[fcs] == OK]] = True
        left = left[~p.internal[left] & (p.outcome[left] == NONE)]
    if len(left):
        all_tk = np.array([all(k.kind == "tk" for k in c) for c in cands], bool)
        tk_only = all_tk[p.combo[left]]
        p.no_key[left[tk_only]] = True
        p.outcome[left[~tk_only]] = FAIL
    _cut(d, p, rest[cut], mat, cands, idx)


def _candidates(d, p: Protected, rest: np.ndarray) -> list[list]:
    """Return, per combo, the keys Decryptor._candidates gives its frames (empty for combos not in rest)."""
    ncombo = len(p.combo_first)
    seen = np.bincount(p.combo[rest], minlength=ncombo) > 0 if len(rest) else np.zeros(ncombo, bool)
    out: list[list] = [[] for _ in range(ncombo)]
    for c in np.flatnonzero(seen).tolist():
        i = int(p.combo_first[c])
        h = p.head[i]
        out[c] = d._candidates_for(bool(p.group[i]), h[4:10].tobytes(), h[10:16].tobytes(), int(p.kid[i]))
    return out


def _rounds(d, p: Protected, frames: np.ndarray, mat: np.ndarray, ncand: np.ndarray, trim: int) -> np.ndarray:
    """Try each frame's candidate keys in order (round r: every frame's r-th key, one batch per key) until
    one verifies its MIC; return the frames none verified (frames a cipher raised on are marked internal)."""
    pending = frames
    for r in range(mat.shape[1]):
        sel = pending[ncand[p.combo[pending]] > r]
        if not len(sel):
            break
        for k, fr in groups(mat[p.combo[sel], r], sel):
            key = d.hs.all[k]
            trailer = TRAILER if key.cipher == "TKIP" else MIC_LEN[key.cipher]
            fit = fr[p.ln[fr] - trim >= p.hdr[fr] + CCMP_HDR + trailer]
            if len(fit):
                _verify(d, p, key, fit, trim)
        pending = pending[(p.outcome[pending] == NONE) & ~p.internal[pending]]
    return pending


def _verify(d, p: Protected, key, fr: np.ndarray, trim: int) -> None:
    """Decrypt whole frames fr with key; set outcome OK, key and plaintext where the MIC verifies."""
    mic = MIC_LEN.get(key.cipher, 0)
    plen = p.ln[fr] - trim - p.hdr[fr] - CCMP_HDR - mic
    batch = (plen <= _CCM_MAX) & key.cipher.startswith("CCMP")
    if batch.any():
        b = fr[batch]
        # decrypted in place: a frame whose MIC fails has its rows zeroed again (never decoded anyway)
        ok, nb, _ = ccm_open_batch(_ecb(d, key), mic, p.buf, p.prefix[b], p.aad_of(b), p.s[b] + p.hdr[b] + CCMP_HDR,
                                   plen[batch], dest=p.out, dest_row=p.body_row[b])
        good = np.flatnonzero(ok)
        if len(good) < len(b):
            bad = np.flatnonzero(~ok)
            p.out[ranges(p.body_row[b[bad]], nb[bad])] = 0
        g = b[good]
        p.outcome[g], p.key[g], p.plen[g] = OK, key.key_id, plen[batch][good]
    for i in fr[~batch].tolist():
        f = p.frame_bytes(i, trim)
        try:
            plain, ok = d._cipher(key).decrypt(parse_header(f), f, len(f))
        except Exception:  # noqa: BLE001 - as Decryptor.frame: a bug here is counted, the frame not decoded
            p.internal[i] = True
            continue
        if ok:
            _put(p, i, plain)
            p.outcome[i], p.key[i] = OK, key.key_id


def _put(p: Protected, i: int, body: bytes) -> None:
    """Write one frame's plaintext body (from a per-frame cipher) after its header."""
    at = int(p.body_row[i]) * 16
    p.out.reshape(-1)[at:at + len(body)] = np.frombuffer(body, np.uint8)
    p.plen[i] = len(body)


def _cut(d, p: Protected, fr: np.ndarray, mat: np.ndarray, cands: list[list], idx: np.ndarray) -> None:
    """Decrypt the captured prefix of frames cut by the snap length with the key Decryptor._cut picks:
    the candidate PTK that last verified a frame of its pair (as of that frame), else the first candidate."""
    if not len(fr):
        return
    choice = _cut_keys(d, p, fr, mat, cands, idx)
    for k, sel in groups(choice, fr):
        key = d.hs.all[k]
        if key.cipher == "TKIP":
            for i in sel.tolist():
                f = p.frame_bytes(i)
                try:
                    plain, _ = d._cipher(key).decrypt(parse_header(f), f, int(p.wire[i]))
                except Exception:  # noqa: BLE001 - as Decryptor.frame
                    p.internal[i] = True
                    continue
                _put(p, i, plain or b"")
                p.outcome[i], p.key[i] = CUT, k
            continue
        mic = MIC_LEN[key.cipher]
        payload = np.maximum(p.wire[sel] - p.hdr[sel] - CCMP_HDR - mic, 0)
        plen = np.minimum(p.body_cap[sel], payload)
        if key.cipher.startswith("GCMP"):
            prefix, first, width = p.nonce[sel, 1:], 2, 4
        else:
            prefix, first, width = p.prefix[sel], 1, 2
        # the bytes past a frame's end in its last row are never read: left as they are
        ctr_open(_ecb(d, key), prefix, first, width, p.buf, p.s[sel] + p.hdr[sel] + CCMP_HDR, plen,
                 zero_tails=False, dest=p.out, dest_row=p.body_row[sel])
        p.outcome[sel], p.key[sel], p.plen[sel] = CUT, k, plen


def _cut_keys(d, p: Protected, fr: np.ndarray, mat: np.ndarray, cands: list[list], idx: np.ndarray) -> np.ndarray:
    """Return the key id Decryptor._cut would use for each cut frame of fr, following which PTK last
    verified a frame of each pair among the frames of idx before it."""
    choice = mat[p.combo[fr], 0].copy()
    ok = idx[p.outcome[idx] == OK]
    pair_id, pairs = _key_pairs(d)
    ok_key = p.key[ok]
    ev_pair = pair_id[ok_key] if len(ok) else np.zeros(0, np.int64)
    ptk = np.flatnonzero(ev_pair >= 0)      # group keys have no pair: only PTK frames are events
    events = {pid: (ok[ptk[at]], ok_key[ptk[at]]) for pid, at in groups(ev_pair[ptk], np.arange(len(ptk)))}
    ids = {pair: i for i, pair in enumerate(pairs)}
    for c, at in groups(p.combo[fr], np.arange(len(fr))):
        ptks = [k for k in cands[c] if k.kind == "ptk"]
        if not ptks:
            continue
        sel = fr[at]
        last: dict[tuple[bytes, bytes], np.ndarray] = {}
        for k in ptks:
            pair = (k.ap, k.sta)
            if pair in last:
                continue
            before = d._last_good.get(pair)
            init = before.key_id if before is not None else -1
            ev = events.get(ids.get(pair, -1))
            if ev is None:
                last[pair] = np.full(len(sel), init, np.int64)
                continue
            j = np.searchsorted(ev[0], sel, side="left") - 1
            last[pair] = np.where(j >= 0, ev[1][np.maximum(j, 0)], init)
        got = choice[at]
        for k in reversed(ptks):        # the first candidate that is its pair's last verified key wins
            got = np.where(last[(k.ap, k.sta)] == k.key_id, k.key_id, got)
        choice[at] = got
    return choice


def _has_fcs(p: Protected, i: int) -> bool:
    """Return True when frame i's last 4 bytes are the CRC-32 of the rest."""
    f = p.frame_bytes(i)
    return zlib.crc32(f[:-4]).to_bytes(4, "little") == f[-4:]


def _ecb(d, key):
    """Return the key's AES-ECB encryptor (built once per key)."""
    e = d._ecbs.get(key.key_id)
    if e is None:
        e = d._ecbs[key.key_id] = ecb_of(key.tk)
    return e
