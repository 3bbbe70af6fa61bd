"""parsers.crypto on real WPA/WPA2 captures, with tshark as the oracle.

For each capture with a known passphrase: the frames tshark decrypts to IPv4 are the frames we
decrypt to IPv4, with the same IP source, destination, total length and id.  Fragments (fragment
number > 0 or More Fragments) are left out of the comparison: tshark shows IP only where its
reassembly completes, which is the decoder's business, not decryption's.  Known difference:
tshark 4.0 leaves frames under a TKIP group key of a WPA2 (CCMP) handshake encrypted
(wpa-Induction: the manifest's "~203/280"); we decrypt them, each verified by TKIP's Michael MIC
and ICV, and their IPv4 header checksums must hold.  Crafted cases (cut, tampered, wrong key) are
written by the test into tmp_path from corpus frames.
"""
from __future__ import annotations

import random
import struct
from pathlib import Path

import numpy as np
import pytest

from parsers.crypto import decrypt_capture, decrypt_frames, parse_key
from parsers.crypto.decrypt import Decryptor
from parsers.crypto.frames import dot11_records, parse_header
from parsers.crypto.keys import pmk_from_passphrase
from parsers.formats.containers import open_capture
from tests.helpers.wpa import corpus_file, tshark_decrypted

LLC_IPV4 = b"\xaa\xaa\x03\x00\x00\x00\x08\x00"
CASES = {   # file -> passphrase:SSID (MANIFEST.tsv; aircrack-ng test1's SSID is "ogogo", from its beacons)
    "radiotap/wireshark__wpa-Induction.pcap": "Induction:Coherer",
    "radiotap/aircrack-ng__wpa2-psk-linksys.cap": "dictionary:linksys",
    "radiotap/libpcap__wpa2linkuppassphraseiswireshark.pcap": "wireshark:ikeriri-5g",
    "radiotap/aircrack-ng__test1.pcap": "15211521:ogogo",
    "radiotap/aircrack-ng__wpa-psk-linksys.cap": "dictionary:linksys",
    "radiotap/fragattacks__ping_I_F_BE_AE-fromap.pcapng": "abcdefgh:testnetwork",
    "radiotap/fragattacks__amsdu-inject-fromap.pcapng": "abcdefgh:testnetwork",
    "radiotap/fragattacks__linux-plain-fromap.pcapng": "abcdefgh:testnetwork",
}
# Frames tshark 4.0 does not decrypt although a key verifies them (see the module doc).
TSHARK_MISSES_TKIP_GTK = {"radiotap/wireshark__wpa-Induction.pcap"}


def tshark_ip(rel: str, key: str) -> dict[int, tuple]:
    """Return frame number -> (src, dst, len, id) of the unfragmented protected frames tshark decrypts to IPv4."""
    return {n: r[:4] for n, r in tshark_decrypted(rel, key).items()}


def ip_at(plain: bytes) -> int:
    """Return where the first IPv4 header of a plaintext frame starts (after LLC/SNAP; in an A-MSDU,
    in the first subframe carrying one, as tshark shows it), or -1."""
    h = parse_header(plain)
    pos = h.hdr_len
    if not (h.qos_at and plain[h.qos_at] & 0x80):
        return pos + 8 if plain[pos:pos + 8] == LLC_IPV4 else -1
    while pos + 14 <= len(plain):           # A-MSDU subframes: DA, SA, length, then LLC/SNAP
        n = int.from_bytes(plain[pos + 12:pos + 14], "big")
        if plain[pos + 14:pos + 22] == LLC_IPV4:
            return pos + 22
        pos += (14 + n + 3) // 4 * 4
    return -1


def ip_of(plain: bytes) -> tuple | None:
    """Return (src, dst, len, id) of the first IPv4 packet in a plaintext frame, else None."""
    at = ip_at(plain)
    ip = plain[at:at + 20] if at >= 0 else b""
    if len(ip) < 20:
        return None
    return (".".join(map(str, ip[12:16])), ".".join(map(str, ip[16:20])),
            int.from_bytes(ip[2:4], "big"), int.from_bytes(ip[4:6], "big"))


def ip_checksum_ok(plain: bytes) -> bool:
    """Return True when the IPv4 header after the LLC/SNAP header sums to 0xFFFF (ones' complement)."""
    at = ip_at(plain)
    ihl = (plain[at] & 0x0F) * 4
    words = struct.unpack(f"!{ihl // 2}H", plain[at:at + ihl])
    s = sum(words)
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s == 0xFFFF


def unfragmented(f: bytes) -> bool:
    h = parse_header(f)
    return h is not None and not h.flags & 0x04 and not f[22] & 0x0F


@pytest.mark.parametrize("rel", sorted(CASES))
def test_same_ip_frames_as_tshark(rel):
    path = corpus_file(rel)
    key = CASES[rel]
    theirs = tshark_ip(rel, key)
    res = decrypt_capture(path, [parse_key(key)])
    ours = {i + 1: ip_of(p) for i, p in enumerate(res.plaintext) if p is not None and unfragmented(p)}
    ours = {n: v for n, v in ours.items() if v is not None}
    assert set(theirs) <= set(ours), f"tshark decrypts frames we do not: {sorted(set(theirs) - set(ours))}"
    for n in theirs:
        assert ours[n] == theirs[n], f"frame {n}"
    extra = sorted(set(ours) - set(theirs))
    if rel in TSHARK_MISSES_TKIP_GTK:
        assert extra, "the TKIP group-key frames tshark misses should be here"
    for n in extra:
        k = res.keys[res.key_id[n - 1]]
        assert (k["kind"], k["cipher"]) == ("gtk", "TKIP") and rel in TSHARK_MISSES_TKIP_GTK, f"frame {n}"
        assert res.mic_ok[n - 1] is True and ip_checksum_ok(res.plaintext[n - 1]), f"frame {n}"
    c = res.counts
    assert c.frames == len(res.plaintext) and c.decrypted == int(res.decrypted.sum())
    assert c.decrypted == c.mic_verified + c.mic_unverified
    assert c.protected == c.decrypted + c.mic_failures + c.no_key + c.wep + c.too_short
    assert c.mic_failures == sum(1 for m in res.mic_ok if m is False) and c.internal_errors == 0


def test_counts_and_keys_of_the_corpus():
    """Handshakes, rekeys and group keys found, per capture (checked by hand against tshark's EAPOL view)."""
    induction = decrypt_capture(corpus_file("radiotap/wireshark__wpa-Induction.pcap"), [parse_key("Induction:Coherer")])
    assert [(k["kind"], k["cipher"]) for k in induction.keys] == [("ptk", "CCMP-128"), ("gtk", "TKIP")]
    assert induction.counts.decrypted == 276 and induction.counts.mic_failures == 0
    # 3 handshakes, each a rekey of the same pair's PTK: frames use the newest key from its time on
    linksys = decrypt_capture(corpus_file("radiotap/aircrack-ng__wpa2-psk-linksys.cap"), [parse_key("dictionary:linksys")])
    ptks = [k for k in linksys.keys if k["kind"] == "ptk"]
    assert len(ptks) == 3 and linksys.counts.handshakes.ptks_derived == 3
    for i in np.flatnonzero(linksys.decrypted):
        k = linksys.keys[linksys.key_id[i]]
        if k["kind"] == "ptk":
            assert k == max((p for p in ptks if p["since"] <= i), key=lambda p: p["since"])
    tkip = decrypt_capture(corpus_file("radiotap/aircrack-ng__wpa-psk-linksys.cap"), [parse_key("dictionary:linksys")])
    assert tkip.counts.decrypted == tkip.counts.protected == 59
    assert {k["cipher"] for k in tkip.keys} == {"TKIP"}


def test_prism_frames_with_an_fcs_decrypt():
    """aircrack-ng's wpa.cap (Prism, TKIP) carries FCSs the header does not announce: airdecap-ng decrypts 2."""
    res = decrypt_capture(corpus_file("radiotap/aircrack-ng__wpa.cap"), [parse_key("biscotte:test")])
    assert res.counts.decrypted == 2 and res.counts.fcs_stripped == 2 and res.counts.mic_failures == 0


def test_wrong_passphrase_decrypts_nothing_and_counts_the_handshake():
    res = decrypt_capture(corpus_file("radiotap/wireshark__wpa-Induction.pcap"), [parse_key("Induction2:Coherer")])
    c = res.counts
    assert not res.decrypted.any() and all(p is None for p in res.plaintext)
    assert c.handshakes.ptks_derived == 0 and c.handshakes.handshakes == c.handshakes.handshakes_failed == 1
    assert c.no_key == c.protected == 280 and c.mic_failures == 0
    assert res.keys == []


def test_sae_handshake_with_a_passphrase_is_counted_as_needing_the_pmk():
    """WPA3-SAE derives the PMK in the SAE exchange: a passphrase alone cannot give it (say so, count it)."""
    res = decrypt_capture(corpus_file("radiotap/aircrack-ng__wpa3-psk.pcap"), [parse_key("abcdefgh:testnetwork")])
    hs = res.counts.handshakes
    assert hs.needs_pmk == 1 and hs.handshakes == hs.handshakes_failed == 1 and hs.ptks_derived == 0


def test_no_keys_at_all():
    res = decrypt_capture(corpus_file("radiotap/wireshark__wpa-Induction.pcap"), [])
    assert res.counts.no_key == 280 and res.counts.handshakes.handshakes_incomplete == 0
    assert res.counts.handshakes.handshakes == 1 and not res.decrypted.any()


def test_psk_and_tk_specs_decrypt_what_the_passphrase_does():
    path = corpus_file("radiotap/libpcap__wpa2linkuppassphraseiswireshark.pcap")
    by_pwd = decrypt_capture(path, [parse_key("wireshark:ikeriri-5g")])
    pmk = pmk_from_passphrase(b"wireshark", b"ikeriri-5g").hex()
    by_psk = decrypt_capture(path, [parse_key(f"wpa-psk:{pmk}")])
    assert by_pwd.decrypted.sum() == 4 and by_psk.plaintext == by_pwd.plaintext
    # the TK of that PTK alone decrypts the pair's frames (the user knows it; we never print it)
    d = Decryptor([parse_key("wireshark:ikeriri-5g")])
    for r in dot11_records(path):
        d.frame(r.index, r.frame, r.wire_len)
    tk = next(k.tk for k in d.hs.all if k.kind == "ptk").hex()
    by_tk = decrypt_capture(path, [parse_key(f"tk:{tk}")])
    unicast = [i for i, p in enumerate(by_pwd.plaintext) if p is not None and by_pwd.key_kind[i] == "ptk"]
    assert unicast and [by_tk.plaintext[i] for i in unicast] == [by_pwd.plaintext[i] for i in unicast]
    assert {by_tk.key_kind[i] for i in unicast} == {"tk"}
    # the group frames are under the GTK: the TK does not verify them, which is "no key", not tampering
    assert by_tk.counts.mic_failures == 0 and by_tk.counts.no_key == by_tk.counts.protected - len(unicast)


def test_results_never_hold_the_secrets():
    path = corpus_file("radiotap/wireshark__wpa-Induction.pcap")
    key = parse_key("Induction:Coherer")
    res = decrypt_capture(path, [key])
    d = Decryptor([key])
    for r in dot11_records(path):
        d.frame(r.index, r.frame, r.wire_len)
    secrets = [b"Induction".hex(), "Induction", key.pmk().hex()] + [k.tk.hex() for k in d.hs.all]
    shown = " ".join([repr(res.keys), repr(res.counts), repr(res.counts.as_dict()), repr(res.columns()),
                      repr(d.hs.all), repr(key), repr(list(d._ciphers.values()))])  # noqa: SLF001
    for s in secrets:
        assert s not in shown


# --------------------------------------------------------------------------------------------------
# crafted from corpus frames


def _frames(rel: str) -> tuple[list[bytes], list[int]]:
    recs = list(dot11_records(corpus_file(rel)))
    return [r.frame for r in recs], [r.wire_len for r in recs]


def test_buffer_offsets_input_equals_list_input():
    frames, _ = _frames("radiotap/libpcap__wpa2linkuppassphraseiswireshark.pcap")
    keys = [parse_key("wireshark:ikeriri-5g")]
    buf = np.frombuffer(b"".join(frames), np.uint8)
    lens = np.array([len(f) for f in frames])
    offs = np.concatenate([[0], np.cumsum(lens)[:-1]])
    a = decrypt_frames(frames, keys)
    b = decrypt_frames((buf, offs, lens), keys)
    assert a.plaintext == b.plaintext and a.decrypted.sum() == 4 and a.counts == b.counts


def test_cut_frames_decrypt_their_prefix_unverified():
    frames, wire = _frames("radiotap/aircrack-ng__wpa2-psk-linksys.cap")
    keys = [parse_key("dictionary:linksys")]
    full = decrypt_frames(frames, keys, wire)
    targets = [i for i in np.flatnonzero(full.decrypted) if len(frames[i]) > 80][:6]
    cut = list(frames)
    for i in targets:
        cut[i] = frames[i][:80]                  # a snap length of 80 bytes
    res = decrypt_frames(cut, keys, wire)
    for i in targets:
        h = parse_header(frames[i])
        keep = 80 - h.hdr_len - 8
        assert res.mic_ok[i] is None and res.decrypted[i]
        assert res.plaintext[i] == full.plaintext[i][:h.hdr_len + keep]
    assert res.counts.mic_unverified == len(targets) and res.counts.mic_failures == 0
    assert res.counts.decrypted == full.counts.decrypted


def test_tampered_frames_fail_the_mic_and_are_not_decoded():
    for rel, key in (("radiotap/aircrack-ng__wpa2-psk-linksys.cap", "dictionary:linksys"),
                     ("radiotap/aircrack-ng__wpa-psk-linksys.cap", "dictionary:linksys")):
        frames, wire = _frames(rel)
        keys = [parse_key(key)]
        full = decrypt_frames(frames, keys, wire)
        bad = [i for i in np.flatnonzero(full.decrypted)][1:4]
        frames = list(frames)
        for i in bad:
            b = bytearray(frames[i])
            b[-10] ^= 0x40
            frames[i] = bytes(b)
        res = decrypt_frames(frames, keys, wire)
        for i in bad:
            assert res.plaintext[i] is None and res.mic_ok[i] is False and res.reason[i] == "MIC failure"
        assert res.counts.mic_failures == len(bad)
        assert res.counts.decrypted == full.counts.decrypted - len(bad)


def test_hostile_eapol_and_frames_never_raise():
    """Every prefix of every EAPOL frame, and random bytes, go through without an exception or a key."""
    frames, _ = _frames("radiotap/libpcap__wpa2linkuppassphraseiswireshark.pcap")
    eapol = [f for f in frames if parse_header(f) and b"\x88\x8e" in f[24:40]]
    assert len(eapol) == 4
    crafted = []
    for f in eapol:
        crafted += [f[:n] for n in range(len(f))]
        for pos in range(f.find(b"\x88\x8e") + 2, len(f), 7):   # flip EAPOL bytes: lengths, key info, data
            b = bytearray(f)
            b[pos] ^= 0xFF
            crafted.append(bytes(b))
    rng = random.Random(14)
    crafted += [bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 300))) for _ in range(300)]
    crafted += [bytes([0x88, 0x41]) + bytes(rng.getrandbits(8) for _ in range(60)) for _ in range(100)]
    res = decrypt_frames(crafted + [None], [parse_key("wireshark:ikeriri-5g"), parse_key("tk:" + "00" * 16)])
    assert res.counts.frames == len(crafted) + 1 and res.counts.not_dot11 == 1
    assert res.counts.handshakes.ptks_derived == 0 and res.counts.internal_errors == 0
    assert not any(res.mic_ok[i] for i in range(len(crafted)))


@pytest.mark.parametrize("rel", ["radiotap/malformed/tcpdump__radiotap-heapoverflow.pcap",
                                 "radiotap/malformed/tcpdump__ieee802.11_meshhdr-oobr.pcap",
                                 "radiotap/malformed/aircrack-ng__floatingpoint_exception.pcap",
                                 "radiotap/malformed/aircrack-ng__wpaclean_crash.pcap"])
def test_malformed_captures_are_counted_not_raised(rel):
    res = decrypt_capture(corpus_file(rel), [parse_key("abcdefgh:testnetwork")])
    c = res.counts
    assert c.frames == len(res.plaintext) > 0 and c.internal_errors == 0
    assert c.protected == c.decrypted + c.mic_failures + c.no_key + c.wep + c.too_short
    skipped = [r for r in dot11_records(corpus_file(rel)) if r.frame is None]
    assert c.not_dot11 == len(skipped) and all(r.skipped for r in skipped)
    assert [res.reason[r.index] for r in skipped] == [r.skipped for r in skipped]


def _raw_records(path: Path) -> tuple[list[bytes], list[int], int]:
    """Return the record bytes, wire lengths and link type of a pcap file (our reader)."""
    frames, wire, lts = [], [], set()
    with open_capture(path) as cap:
        for ch in cap.chunks():
            for off, cl, wl, lt in zip(ch.offset.tolist(), ch.caplen.tolist(), ch.wirelen.tolist(),
                                       ch.linktype.tolist()):
                frames.append(bytes(ch.data[off:off + cl]))
                wire.append(wl)
                lts.add(lt)
    return frames, wire, lts.pop()


def test_snap_length_cut_capture_through_radiotap(tmp_path):
    """A radiotap capture (FCS flagged) re-written with a 120-byte snap length: cut protected frames
    decrypt their captured prefix, unverified, and equal the whole frames' plaintext prefix."""
    src = corpus_file("radiotap/wireshark__wpa-Induction.pcap")
    key = [parse_key("Induction:Coherer")]
    whole = decrypt_capture(src, key)
    raw, wire, lt = _raw_records(src)
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 120, lt)]
    for i, (r, w) in enumerate(zip(raw, wire)):
        keep = r[:120] if whole.decrypted[i] else r      # the handshake stays whole
        out.append(struct.pack("<IIII", i, 0, len(keep), w) + keep)
    cut_path = tmp_path / "cut.pcap"
    cut_path.write_bytes(b"".join(out))
    cut = decrypt_capture(cut_path, key)
    # a cut of the FCS alone leaves the frame whole (its MIC verifies): those are not "shortened"
    shortened = [i for i in np.flatnonzero(whole.decrypted) if len(raw[i]) - 4 > 120]
    assert cut.counts.mic_verified == whole.counts.decrypted - len(shortened)
    assert len(shortened) > 100
    assert cut.counts.mic_unverified == len(shortened) and cut.counts.mic_failures == 0
    for i in shortened:
        p = cut.plaintext[i]
        assert cut.mic_ok[i] is None and 0 < len(p) and whole.plaintext[i].startswith(p)
    # cut inside the payload (not only in the MIC): the plaintext is the captured part
    assert sum(len(cut.plaintext[i]) < len(whole.plaintext[i]) for i in shortened) > 100
