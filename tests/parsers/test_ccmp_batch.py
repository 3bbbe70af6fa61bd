"""Columnar CCMP (parsers.crypto.batch / ccmp) against the per-frame decryptor it replaces.

The columnar functions equal AESCCM and the per-frame counter mode on random frames; and on a crafted
WPA2 capture (written in tmp_path: two handshakes and a protected rekey, two stations' keys and the
group key interleaved, QoS and non-QoS, four-address frames, retries repeating a PN, MIC failures,
frames cut by the snap length, frames with an FCS nobody announced, a station without a key, WEP and
too-short frames, a user TK) ChunkDecryptor's columnar path gives every record the plaintext and
columns, and the run the counts and keys' state, the per-frame Decryptor gives.
"""
from __future__ import annotations

import random
import struct
import zlib

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESCCM

from parsers.columnar import accel
from parsers.crypto import parse_key
from parsers.crypto.ccmp import FrameCipher, ccm_open_batch, ccm_prefix, ctr_open, ecb_of
from parsers.crypto.decrypt import Decryptor
from parsers.crypto.frames import LLC_EAPOL, parse_header
from parsers.decode import decrypt as chunkdec
from parsers.decode.decrypt import ChunkDecryptor, _plain, bare_record, candidates
from parsers.formats.containers import open_capture
from xlayer.testbeds.sim.encrypt import four_way, protect

PASS, SSID = "batch-test-passphrase", "batch-net"
AP, STA1, STA2, STA3 = (bytes.fromhex(h) for h in ("02aa00000001", "02bb00000001", "02bb00000002", "02bb00000003"))
BCAST = b"\xff" * 6


# -- the columnar functions against the cryptography package -----------------------------------------

@pytest.fixture(params=["compiled", "numpy"])
def shuffle(request, monkeypatch) -> str:
    """Run a test with the byte shuffling around the AES in C (parsers/columnar/_walk.c) and in numpy."""
    if request.param == "compiled" and not accel.AVAILABLE:
        pytest.skip("parsers.columnar._walk is not built")
    monkeypatch.setattr(accel, "AVAILABLE", request.param == "compiled")
    return request.param


@pytest.mark.parametrize("tk_len,mic", [(16, 8), (32, 16)])
@pytest.mark.parametrize("in_place", [False, True])
def test_ccm_open_batch_equals_aesccm(tk_len, mic, in_place, shuffle):
    rng = random.Random(tk_len)
    tk = rng.randbytes(tk_len)
    aead, ecb = AESCCM(tk, tag_length=mic), ecb_of(tk)
    n = 600
    lens = [0, 1, 15, 16, 17, 31, 32, 33] + [rng.randrange(0, 1600) for _ in range(n - 8)]
    nonces = np.frombuffer(rng.randbytes(13 * n), np.uint8).reshape(n, 13)
    aads = np.zeros((n, 32), np.uint8)
    parts, at, want, off = [], [], [], 0
    for i, ln in enumerate(lens):
        alen = rng.choice([22, 24, 28, 30])
        a = rng.randbytes(alen)
        aads[i, 1], aads[i, 2:2 + alen] = alen, np.frombuffer(a, np.uint8)
        pt = rng.randbytes(ln)
        ct = bytearray(aead.encrypt(nonces[i].tobytes(), pt, a))
        tampered = i % 5 == 2
        if tampered:
            ct[rng.randrange(len(ct))] ^= 0x40
        pad = rng.randbytes(rng.randrange(0, 7))
        parts.append(pad + bytes(ct))
        at.append(off + len(pad))
        off += len(pad) + len(ct)
        want.append(None if tampered else pt)
    buf = np.frombuffer(b"".join(parts), np.uint8)     # the last frame ends the buffer: no read past it
    if in_place:    # into a plaintext buffer with a gap of rows before each frame, as batch._verify does
        nb = (np.array(lens) + 15) // 16
        first = np.cumsum(nb + 2) - nb      # two rows before each frame's
        dest = np.full((int(first[-1] + nb[-1]) + 1, 16), 0xEE, np.uint8)
        ok, _, none = ccm_open_batch(ecb, mic, buf, ccm_prefix(nonces), aads, np.array(at), np.array(lens), dest, first)
        assert none is None
        rows = dest
        untouched = np.concatenate([first - 2, first - 1, [len(dest) - 1]])
        assert (dest[untouched] == 0xEE).all()      # nothing but the frames' rows is written
    else:
        ok, nb, rows = ccm_open_batch(ecb, mic, buf, ccm_prefix(nonces), aads, np.array(at), np.array(lens))
        first = np.cumsum(nb) - nb
    for i, pt in enumerate(want):
        assert bool(ok[i]) == (pt is not None), i
        got = rows[first[i]:first[i] + nb[i]].reshape(-1)
        if pt is not None:
            assert got[:lens[i]].tobytes() == pt
        assert not got[lens[i]:].any()      # the last row is zero past the frame: the CBC-MAC's padding


@pytest.mark.parametrize("cipher", ["CCMP-128", "CCMP-256", "GCMP-128", "GCMP-256"])
def test_ctr_open_equals_per_frame_prefix(cipher, shuffle):
    """A cut frame's captured prefix: the columnar counter mode equals FrameCipher's."""
    rng = random.Random(cipher)
    tk = rng.randbytes(16 if cipher.endswith("128") else 32)
    fc = FrameCipher(tk, cipher)
    n = 300
    frames, wires = [], []
    for _ in range(n):
        f = bytes((0x88, 0x42)) + bytes(2) + STA1 + AP + AP + bytes(2) + bytes((5, 0)) + rng.randbytes(8)
        body = rng.randbytes(rng.randrange(0, 300))
        frames.append(f + body)
        wires.append(len(f) + len(body) + rng.randrange(1, 400))
    buf = np.frombuffer(b"".join(frames), np.uint8)
    starts = np.cumsum([0] + [len(f) for f in frames[:-1]])
    nonce = np.zeros((n, 13), np.uint8)
    for i, f in enumerate(frames):
        nonce[i, 0], nonce[i, 1:7], nonce[i, 7:] = 5, np.frombuffer(f[10:16], np.uint8), np.frombuffer(
            bytes((f[33], f[32], f[31], f[30], f[27], f[26])), np.uint8)
    mic = 8 if cipher == "CCMP-128" else 16
    plen = np.minimum([len(f) - 34 for f in frames], np.maximum(np.array(wires) - 34 - mic, 0))
    if cipher.startswith("GCMP"):
        prefix, first, width = nonce[:, 1:], 2, 4
    else:
        prefix, first, width = ccm_prefix(nonce), 1, 2
    nb, rows = ctr_open(ecb_of(tk), prefix, first, width, buf, starts + 34, plen)
    at = np.cumsum(nb) - nb
    for i, f in enumerate(frames):
        want, _ = fc.decrypt(parse_header(f), f, wires[i])
        assert rows[at[i]:at[i] + nb[i]].reshape(-1)[:plen[i]].tobytes() == want


# -- a crafted capture, decrypted both ways -------------------------------------------------------

def _radiotap(i: int, fcs: bool) -> bytes:
    """Return one of four radiotap layouts (Flags; TSFT + Flags; an extended bitmap; none)."""
    flags = 0x10 if fcs else 0
    kind = i % 4
    if kind == 0:
        return struct.pack("<BBHI", 0, 0, 10, 0x2) + bytes((flags, 0))
    if kind == 1:
        return struct.pack("<BBHI", 0, 0, 18, 0x3) + struct.pack("<Q", i) + bytes((flags, 0))
    if kind == 2:
        return struct.pack("<BBHII", 0, 0, 14, 0x80000002, 0) + bytes((flags, 0))
    return struct.pack("<BBHI", 0, 0, 8, 0) if not fcs else struct.pack("<BBHI", 0, 0, 10, 0x2) + bytes((flags, 0))


def _data(a1: bytes, a2: bytes, a3: bytes, to_from: int, seq: int, qos: bool, body: bytes, a4: bytes = b"",
          tid: int = 0) -> bytes:
    fc = bytes((0x88 if qos else 0x08, to_from))
    f = fc + b"\x2c\x00" + a1 + a2 + a3 + ((seq & 0xFFF) << 4).to_bytes(2, "little") + a4
    return f + (bytes((tid, 0)) if qos else b"") + body


def _payload(rng: random.Random, size: int) -> bytes:
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 28 + size, rng.randrange(65536), 0, 64, 17, 0,
                     bytes((10, 0, 0, 1)), bytes((10, 0, 0, 2)))
    return LLC_EAPOL[:6] + b"\x08\x00" + ip + struct.pack("!HHHH", 5000, 6000, 8 + size, 0) + rng.randbytes(size)


class _Writer:
    """Records of a pcap capture, each (radiotap header, 802.11 frame, FCS?, captured bytes of the frame)."""

    def __init__(self, linktype: int):
        self.linktype, self.recs, self.t = linktype, [], 0

    def add(self, frame: bytes, fcs: bool = False, keep: int | None = None, on_air: int | None = None) -> None:
        full = frame + (zlib.crc32(frame).to_bytes(4, "little") if fcs else b"")
        rt = _radiotap(len(self.recs), fcs) if self.linktype == 127 else b""
        cap = full if keep is None else full[:keep]
        wire = len(rt) + (on_air if on_air is not None else len(full))
        self.recs.append((rt + cap, wire))

    def write(self, path) -> None:
        with open(path, "wb") as fh:
            fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, self.linktype))
            for i, (data, wire) in enumerate(self.recs):
                fh.write(struct.pack("<IIII", 1700000000 + i // 1000, (i % 1000) * 1000, len(data), wire) + data)


def _craft(path, linktype: int, seed: int) -> bytes:
    """Write the crafted capture; return STA3's TK (its handshake is not in the capture)."""
    rng = random.Random(seed)
    pmk = parse_key(f"wpa-pwd:{PASS}:{SSID}").pmk()
    gtk = rng.randbytes(16)
    w = _Writer(linktype)
    fcs = linktype == 105       # raw 802.11: an FCS no header announces, found by its CRC

    def eapol(ptk_msgs, sta, seq, via=None, pn=0):
        for k, pdu in enumerate(ptk_msgs):
            from_ap = k % 2 == 0
            a1, a2, tf = (sta, AP, 2) if from_ap else (AP, sta, 1)
            f = _data(a1, a2, AP, tf, seq + k, True, LLC_EAPOL + pdu, tid=7)
            if via is not None:
                f = protect(f, len(f) - 26, via, pn + k, 0)
            w.add(f, fcs)

    msgs1, ptk1 = four_way(pmk, AP, STA1, rng.randbytes(32), rng.randbytes(32), gtk, 0, 1)
    msgs2, ptk2 = four_way(pmk, AP, STA2, rng.randbytes(32), rng.randbytes(32), gtk, 0, 1)
    _, ptk3 = four_way(pmk, AP, STA3, rng.randbytes(32), rng.randbytes(32), gtk, 0, 1)
    eapol(msgs1, STA1, 10)
    eapol(msgs2, STA2, 20)
    aead = {sta: AESCCM(tk, tag_length=8) for sta, tk in ((STA1, ptk1.tk), (STA2, ptk2.tk), (STA3, ptk3.tk),
                                                          (BCAST, gtk))}
    pn = {STA1: 100, STA2: 100, STA3: 100, BCAST: 100}
    rekeyed, forced = False, 0
    for i in range(3000):
        if i == 1700 and not rekeyed:         # a rekey of STA1, protected under its first PTK
            msgs1b, ptk1b = four_way(pmk, AP, STA1, rng.randbytes(32), rng.randbytes(32), gtk, 0, 5)
            eapol(msgs1b, STA1, 40, via=aead[STA1], pn=pn[STA1])
            pn[STA1] += 4
            aead[STA1] = AESCCM(ptk1b.tk, tag_length=8)
            rekeyed, forced = True, 3
        # right after the rekey, cut frames of STA1 come before any whole one: the key that last verified
        # a frame of the pair (the old PTK) decrypts them, not the newest candidate
        who = STA1 if forced else rng.choice([STA1, STA1, STA2, STA2, STA3, BCAST])
        body = _payload(rng, rng.choice([0, 3, 16, 40, 100, 600, 1400, rng.randrange(0, 1500)]))
        qos = rng.random() < 0.6
        tid = rng.randrange(8)
        if who == BCAST:
            f = _data(BCAST, AP, AP, 2, i, qos, body, tid=tid)
            kid = 1
        elif rng.random() < 0.1:      # four-address (mesh/WDS layout) between the AP and the station
            f = _data(who, AP, AP, 3, i, qos, body, a4=STA2, tid=tid)
            kid = 0
        else:
            from_ap = rng.random() < 0.5
            a1, a2, tf = (who, AP, 2) if from_ap else (AP, who, 1)
            f = _data(a1, a2, AP, tf, i, qos, body, tid=tid)
            kid = 0
        hdr = parse_header(f).hdr_len
        pn[who] += 1
        cut = forced > 0 or rng.random() < 0.3
        forced = max(forced - 1, 0)
        on_air = len(f) - hdr
        keep = hdr + 8 + rng.randrange(0, 80) if cut else None
        p = protect(f, on_air, aead[who], pn[who], kid)
        if cut:
            on = len(f) + 16 + 4 * fcs
            w.add(p[:keep], on_air=on)
            continue
        roll = rng.random()
        if roll < 0.03:
            bad = bytearray(p)
            bad[rng.randrange(hdr + 8, len(bad))] ^= 0x01      # a MIC failure
            p = bytes(bad)
        elif roll < 0.04:
            p = p[:hdr + 2]                                       # shorter than its CCMP header
        elif roll < 0.05:
            p = p[:hdr + 3] + bytes((p[hdr + 3] & ~0x20,)) + p[hdr + 4:]    # no Ext IV: WEP
        w.add(p, fcs)
        if rng.random() < 0.08:       # a retry: the same PN, the Retry bit set (masked in the AAD)
            w.add(bytes((p[0], p[1] | 0x08)) + p[2:], fcs)
    w.write(path)
    return ptk3.tk


def _reference(dec: Decryptor, chunk) -> dict:
    """The per-frame chunk decryption the columnar path replaced (Decryptor.frame on every candidate)."""
    rows = candidates(chunk)
    dec.counts.frames += len(chunk) - len(rows)
    out = {}
    for r in rows.tolist():
        o, cl = int(chunk.offset[r]), int(chunk.caplen[r])
        rec = bare_record(int(chunk.frame[r]) - 1, bytes(chunk.data[o:o + cl]), max(int(chunk.wirelen[r]), cl),
                          int(chunk.linktype[r]) & 0xFFFF)
        got = dec.frame(rec.index, rec.frame, rec.wire_len, rec.skipped)
        if rec.frame is None or (got.plaintext is None and got.reason is None):
            continue
        out[r] = _plain(got, rec.wire_len)
    return out


def _both(path, keys) -> tuple[ChunkDecryptor, Decryptor, list]:
    ref, new = Decryptor(keys), ChunkDecryptor(keys)
    verdicts = []
    with open_capture(path) as cap:
        for ch in cap.chunks():
            want, got = _reference(ref, ch), new.chunk(ch)
            assert list(got) == sorted(want)
            for r in want:
                a, b = want[r], got[r]
                assert (a.frame, a.claimed, a.key, a.mic) == (b.frame, b.claimed, b.key, b.mic), f"row {r}"
            verdicts += list(want.values())
    return new, ref, verdicts


@pytest.mark.parametrize("linktype", [127, 105])
@pytest.mark.parametrize("with_tk", [False, True])
def test_columnar_equals_per_frame(tmp_path, monkeypatch, linktype, with_tk, shuffle):
    path = tmp_path / "crafted.pcap"
    tk3 = _craft(path, linktype, seed=linktype)
    keys = [parse_key(f"wpa-pwd:{PASS}:{SSID}")] + ([parse_key("tk:" + tk3.hex())] if with_tk else [])
    batches = []
    real = chunkdec.decrypt_protected
    monkeypatch.setattr(chunkdec, "decrypt_protected", lambda d, p, lo, hi: batches.append(hi - lo) or real(d, p, lo, hi))
    new, ref, verdicts = _both(path, keys)
    assert new.fallbacks == 0 and sum(batches) > 2500      # the columnar path did the work
    ref.hs.finish()
    summary = new.summary()
    assert summary.pop("keys_derived") == 4                 # two PTKs, the rekey's, the GTK
    assert summary == ref.counts.as_dict()
    assert [(k.key_id, k.verified) for k in new._dec.hs.all] == [(k.key_id, k.verified) for k in ref.hs.all]
    assert {p: k.key_id for p, k in new._dec._last_good.items()} == {p: k.key_id for p, k in ref._last_good.items()}
    c = ref.counts
    # every case the capture was made to hold did occur
    assert c.mic_verified > 1000 and c.mic_unverified > 500 and c.too_short > 10 and c.wep > 10
    assert c.handshakes.ptks_derived == 3
    assert c.handshakes.gtks_unwrapped >= 1
    mics = {v.mic for v in verdicts}
    assert {"ok", "unverified"} <= mics
    if with_tk:
        assert c.no_key > 3 and c.mic_failures > 10        # bad MICs of STA3 (user TK only) and of the PTKs
        assert any(v.key == "tk" for v in verdicts)
    else:
        assert c.no_key > 300 and c.mic_failures > 10       # STA3 has no key
        assert "failed" in mics
    if linktype == 105:
        assert c.fcs_stripped > 1000


def test_a_failing_columnar_run_falls_back_per_frame(tmp_path, monkeypatch):
    """A bug in the columnar code (here: its second solve raises) costs speed, never verdicts or counts."""
    from parsers.crypto import batch

    path = tmp_path / "crafted.pcap"
    _craft(path, 127, seed=7)
    real, calls = batch._solve, []

    def flaky(d, p, idx):
        calls.append(len(idx))
        if len(calls) == 2:
            raise RuntimeError("injected")
        return real(d, p, idx)

    monkeypatch.setattr(batch, "_solve", flaky)
    new, ref, _ = _both(path, [parse_key(f"wpa-pwd:{PASS}:{SSID}")])
    assert new.fallbacks == 1 and len(calls) >= 2
    ref.hs.finish()
    summary = new.summary()
    summary.pop("keys_derived")
    assert summary == ref.counts.as_dict()
    assert [k.verified for k in new._dec.hs.all] == [k.verified for k in ref.hs.all]


@pytest.mark.skipif(not accel.AVAILABLE, reason="parsers.columnar._walk is not built")
def test_compiled_shuffles_refuse_spans_outside_their_buffers():
    """The C helpers check every frame's span before writing anything: a bad one raises, dest stays."""
    buf = np.arange(64, dtype=np.uint8)
    dest = np.zeros((4, 16), np.uint8)
    one = np.ones(1, np.int64)
    stream = bytes(16)
    with pytest.raises(ValueError):
        accel.ctr_xor(buf, one, np.array([16]), stream, dest, np.array([4]))        # row 4 of 4
    with pytest.raises(ValueError):
        accel.ctr_xor(buf, one, np.array([16]), stream, dest, np.array([-1]))
    with pytest.raises(ValueError):
        accel.ctr_xor(buf, one, np.array([17]), stream, dest, np.array([0]))       # 2 rows, 1 in stream
    with pytest.raises(ValueError):
        accel.put_headers(buf, np.array([0]), np.array([24]), dest.reshape(-1), np.array([10]))
    with pytest.raises(ValueError):
        accel.ctr_blocks(np.zeros((1, 14), np.uint8), 3, one, one)
    assert not dest.any()
    # reads past the end of buf are zeros, as rows_at reads them
    accel.ctr_xor(buf, np.array([56]), np.array([16]), stream, dest, np.array([1]))
    assert dest[1].tolist() == list(range(56, 64)) + [0] * 8
    blocks = np.frombuffer(accel.ctr_blocks(np.full((2, 14), 7, np.uint8), 2, np.array([0xFFFF, 3]),
                                            np.array([2, 1])), np.uint8).reshape(-1, 16)
    assert blocks[:, 14:].tolist() == [[0xFF, 0xFF], [0, 0], [0, 3]] and (blocks[:, :14] == 7).all()


@pytest.mark.skipif(not accel.AVAILABLE, reason="parsers.columnar._walk is not built")
@pytest.mark.parametrize("seed", range(4))
def test_compiled_locate_equals_numpy(seed):
    """The compiled candidates + locate pass gives the numpy functions' rows and spans on hostile records:
    random radiotap headers (extended bitmaps, TSFT, Flags with and without FCS), protected, EAPOL
    and other frames, snap-length cuts, records running past the buffer, other link types."""
    from parsers.formats.records import RecordChunk

    rng = random.Random(seed)
    parts, offs, caps, wires, lts, at = [], [], [], [], [], 0
    for i in range(3000):
        lt = rng.choice([127] * 6 + [105, 105, 119, 163, 1])
        if lt == 127 and rng.random() < 0.9:
            words = [rng.choice([0x2, 0x3, 0x6F, 0x80000002, 0x80000003, 0x4000002, rng.getrandbits(32)])]
            while words[-1] >> 31 and len(words) < rng.choice([2, 5, 14]):
                words.append(rng.choice([0x80000000, 0, rng.getrandbits(32)]))
            body = b"".join(w.to_bytes(4, "little") for w in words) + rng.randbytes(rng.randrange(0, 24))
            body = bytes((rng.choice([0x10, 0, 0x12]),)) * rng.randrange(0, 3) + body
            it_len = rng.choice([4 + len(body), 4 + len(body), rng.randrange(0, 80)])
            head = bytes((rng.choice([0, 0, 0, 1]), 0)) + it_len.to_bytes(2, "little") + body
        else:
            head = b""
        fc = bytes((rng.choice([0x08, 0x88, 0x00, 0xD0, 0x04, 0x48]), rng.choice([0x41, 0x42, 0x01, 0x02, 0x03, 0x43])))
        frame = fc + rng.randbytes(22 + rng.choice([0, 2, 6, 8]))
        if rng.random() < 0.3:
            frame += bytes(rng.randrange(0, 20)) + LLC_EAPOL + rng.randbytes(rng.randrange(0, 99))
        else:
            frame += rng.randbytes(rng.randrange(0, 200))
        rec = head + frame + (zlib.crc32(frame).to_bytes(4, "little") if rng.random() < 0.5 else b"")
        # whole, cut anywhere, or cut at the radio header's end (or an FCS after it)
        rec = rec[:rng.choice([len(rec)] * 5 + [rng.randrange(0, len(rec) + 1), len(head), len(head) + 4])]
        parts.append(rec)
        offs.append(at)
        caps.append(len(rec))
        wires.append(len(rec) + rng.choice([0, 0, 0, rng.randrange(1, 2000), -rng.randrange(0, 10)]))
        lts.append(lt)
        at += len(rec)
    caps[-1] += rng.randrange(0, 70)         # the last record claims bytes past the buffer's end
    n = len(parts)
    i64 = lambda v: np.array(v, np.int64)   # noqa: E731
    chunk = RecordChunk(data=np.frombuffer(b"".join(parts), np.uint8), offset=i64(offs), caplen=i64(caps),
                        wirelen=i64(wires), ts_ns=np.zeros(n, np.int64), linktype=i64(lts),
                        iface=np.zeros(n, np.int64), frame=np.arange(1, n + 1, dtype=np.int64))
    rows, where = chunkdec._candidates_located(chunk)
    want = candidates(chunk)
    assert where is not None and np.array_equal(rows, want) and len(rows) > n // 4
    for got, ref in zip(where, chunkdec.locate(chunk, want)):
        assert np.array_equal(got, ref)
    assert 0 < where[3].sum() < len(rows)       # both verdicts occur


@pytest.mark.skipif(not accel.AVAILABLE, reason="parsers.columnar._walk is not built")
def test_compiled_protected_fields_equal_numpy(monkeypatch):
    """Protected's header fields, nonces and first bytes from the compiled pass equal numpy's, on random
    bytes with every frame control (QoS, four-address, Order, management) and frames near the buffer's end."""
    from parsers.crypto.batch import Protected

    rng = np.random.default_rng(5)
    buf = rng.integers(0, 256, 20000, dtype=np.uint8)
    buf[rng.integers(0, len(buf) - 1, 3000)] = rng.choice([0x88, 0x08, 0xC8, 0x80, 0x00, 0xD0], 3000)
    s = np.concatenate([rng.integers(0, len(buf), 3000), len(buf) - np.arange(1, 60)])
    ln = rng.integers(0, 200, len(s))
    wire = ln + rng.integers(0, 9, len(s))
    made = {}
    for compiled in (True, False):
        monkeypatch.setattr(accel, "AVAILABLE", compiled)
        made[compiled] = Protected(buf, s, ln, wire, np.arange(len(s)))
    a, b = made[True], made[False]
    for name in ("head", "ftype", "sub", "fc1", "hdr", "tid", "kid", "ext_iv", "group", "four", "qos", "nonce",
                 "prefix", "combo", "combo_first", "body_row", "short", "wep"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    assert len(np.unique(a.hdr)) >= 5 and a.qos.any() and a.four.any() and a.group.any()
