"""parsers.crypto against published test vectors, and key specs that must never show their secret.

Vectors: PBKDF2 passphrase -> PSK (IEEE 802.11 Annex J.4), PRF-512 with HMAC-SHA1 (Annex J.3),
the CCMP-128 MPDU of IEEE 802.11 M.6.4 (inputs as in hostap's wlantest test_vectors.c; ciphertext
and MIC from the standard), and the Michael MIC chain of the TKIP specification.  The SHA-256/384
KDF, CCMP-256 and GCMP have no vector here (none found); their counter-mode path for frames cut by
the snap length is checked against the AEAD's own output.
"""
from __future__ import annotations

import hashlib
import hmac
import pickle

import pytest
from cryptography.hazmat.primitives import cmac
from cryptography.hazmat.primitives.ciphers import algorithms
from cryptography.hazmat.primitives.ciphers.aead import AESCCM, AESGCM

from parsers.crypto import KeySpecError, decrypt_frames, parse_key, parse_keys_file
from parsers.crypto.ccmp import FrameCipher, aad_of, nonce_of, pn_of
from parsers.crypto.frames import parse_header
from parsers.crypto.keys import AKMS, derive_ptk, kdf, pmk_from_passphrase, prf_sha1
from parsers.crypto.tkip import TkipCipher, michael

# IEEE 802.11 M.6.4: TK, the MPDU header (Retry set, masked out of the AAD), CCMP header for
# PN 0xB5039776E70C, the encrypted data and the 8-byte MIC.
CCMP_TK = bytes.fromhex("c97c1f67ce371185514a8a19f2bdd52f")
CCMP_HDR80211 = bytes.fromhex("0848c32c0fd2e128a57c5030f1844408abaea5b8fcba8033")
CCMP_HDR = bytes.fromhex("0ce70020769703b5")
CCMP_CIPHERTEXT = bytes.fromhex("f3d0a2fe9a3dbf2342a643e43246e80c3c04d019")
CCMP_MIC = bytes.fromhex("7845ce0b16f97623")
CCMP_PLAINTEXT = bytes.fromhex("f8ba1a55d02f85ae967bb62fb6cda8eb7e78a050")


@pytest.mark.parametrize("passphrase,ssid,psk", [
    (b"password", b"IEEE", "f42c6fc52df0ebef9ebb4b90b38a5f902e83fe1b135a70e23aed762e9710a12e"),
    (b"ThisIsAPassword", b"ThisIsASSID", "0dc0d6eb90555ed6419756b9a15ec3e3209b63df707dd508d14581f8982721af"),
])
def test_pbkdf2_annex_j(passphrase, ssid, psk):
    assert pmk_from_passphrase(passphrase, ssid).hex() == psk
    key = parse_key(f"wpa-pwd:{passphrase.decode()}:{ssid.decode()}")
    assert key.pmk().hex() == psk


def test_prf_sha1_annex_j():
    out = prf_sha1(b"\x0b" * 20, b"prefix", b"Hi There", 64)
    assert out.hex() == ("bcd4c650b30b9684951829e0d75f9d54b862175ed9f00606e17d8da35402ffee"
                         "75df78c3d31e0f889f012120c0862beb67753e7439ae242edb8373698356cf5a")
    # PRF-384 is the first 48 bytes of PRF-512: the PTK of a CCMP handshake is a prefix of TKIP's.
    assert prf_sha1(b"\x0b" * 20, b"prefix", b"Hi There", 48) == out[:48]


def test_kdf_length_is_bound_into_every_block():
    # Unlike the SHA-1 PRF, the KDF hashes the output length: a 48-byte PTK is not a prefix of 64.
    a = kdf("sha256", b"k" * 32, b"Pairwise key expansion", b"c" * 76, 48)
    b = kdf("sha256", b"k" * 32, b"Pairwise key expansion", b"c" * 76, 64)
    assert len(a) == 48 and len(b) == 64 and a != b[:48]
    ptk = derive_ptk(b"k" * 32, b"\x02" * 6, b"\x04" * 6, b"\x01" * 32, b"\x03" * 32, AKMS[20], "GCMP-256")
    assert (len(ptk.kck), len(ptk.kek), len(ptk.tk)) == (24, 32, 32)
    assert "Ptk" in repr(ptk) and ptk.tk.hex() not in repr(ptk)


def _vector_frame() -> bytes:
    return CCMP_HDR80211 + CCMP_HDR + CCMP_CIPHERTEXT + CCMP_MIC


def test_ccmp_m64_vector_decrypts_and_verifies():
    f = _vector_frame()
    h = parse_header(f)
    assert pn_of(CCMP_HDR).hex() == "b5039776e70c"
    plain, ok = FrameCipher(CCMP_TK, "CCMP-128").decrypt(h, f, len(f))
    assert ok is True and plain == CCMP_PLAINTEXT


def test_ccmp_m64_vector_detects_tampering():
    f = bytearray(_vector_frame())
    f[24 + 8 + 3] ^= 0x01                    # one ciphertext bit
    plain, ok = FrameCipher(CCMP_TK, "CCMP-128").decrypt(parse_header(bytes(f)), bytes(f), len(f))
    assert (plain, ok) == (None, False)
    g = bytearray(_vector_frame())
    g[5] ^= 0x01                             # A1 is in the AAD
    assert FrameCipher(CCMP_TK, "CCMP-128").decrypt(parse_header(bytes(g)), bytes(g), len(g)) == (None, False)
    r = bytearray(_vector_frame())
    r[1] ^= 0x08                             # Retry is masked out of the AAD: still verifies
    assert FrameCipher(CCMP_TK, "CCMP-128").decrypt(parse_header(bytes(r)), bytes(r), len(r))[1] is True


def test_ccmp_cut_frame_decrypts_its_prefix_unverified():
    f = _vector_frame()
    cut = f[:24 + 8 + 11]                    # the snap length kept 11 bytes of the body
    plain, ok = FrameCipher(CCMP_TK, "CCMP-128").decrypt(parse_header(cut), cut, len(f))
    assert ok is None and plain == CCMP_PLAINTEXT[:11]


@pytest.mark.parametrize("cipher", ["CCMP-128", "CCMP-256", "GCMP-128", "GCMP-256"])
def test_counter_mode_prefix_matches_the_aead(cipher):
    """A frame sealed by the AEAD with our nonce/AAD, then cut: the CTR prefix must be its plaintext."""
    tk = bytes(range(16 if cipher.endswith("128") else 32))
    hdr = bytes.fromhex("8842" "2c00" "020000000001" "020000000002" "020000000003" "1000" "0500")  # QoS, FromDS
    sec = bytes.fromhex("0100002000000000")
    body = bytes(range(200))
    h = parse_header(hdr + sec)
    gcm = cipher.startswith("GCMP")
    aead = AESGCM(tk) if gcm else AESCCM(tk, tag_length=8 if cipher == "CCMP-128" else 16)
    frame = hdr + sec + aead.encrypt(nonce_of(h, pn_of(sec), gcm), body, aad_of(h, hdr + sec))
    fc = FrameCipher(tk, cipher)
    assert fc.decrypt(h, frame, len(frame)) == (body, True)
    for keep in (0, 1, 15, 16, 17, 150, 200, 205):
        cut = frame[:len(hdr) + 8 + keep]
        plain, ok = fc.decrypt(h, cut, len(frame))
        assert ok is None and plain == body[:keep]


def test_michael_chain():
    key = bytes(8)
    expect = ["82925c1ca1d130b8", "434721ca40639b3f", "e8f9becae97e5d29", "90038fc6cf13c1db",
              "d55e100510128986", "0a942b124ecaa546"]
    for msg, mic in zip([b"", b"M", b"Mi", b"Mic", b"Mich", b"Michael"], expect):
        key = michael(key, msg)
        assert key.hex() == mic


def test_tkip_rejects_a_bad_icv():
    tk = bytes(range(32))
    hdr = bytes.fromhex("0842" "2c00" "020000000001" "020000000002" "020000000003" "1000")
    f = hdr + bytes.fromhex("0020012000000000") + bytes(40)
    plain, ok = TkipCipher(tk, bytes.fromhex("020000000002")).decrypt(parse_header(f), f, len(f))
    assert (plain, ok) == (None, False)


# --------------------------------------------------------------------------------------------------
# key specs


SECRET_PW = "Sup3r-Secret-Passw0rd"
SECRET_HEX = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"


def _shown(key) -> str:
    return " ".join([repr(key), str(key), f"{key}", f"{key:>80}", "%s" % (key,), repr([key])])


@pytest.mark.parametrize("spec,secret", [
    (f"wpa-pwd:{SECRET_PW}:HomeNet", SECRET_PW), (f"{SECRET_PW}:HomeNet", SECRET_PW),
    (f"wpa-psk:{SECRET_HEX}", SECRET_HEX), (f"tk:{SECRET_HEX[:32]}", SECRET_HEX[:32]),
])
def test_key_never_shows_its_secret(spec, secret):
    key = parse_key(spec, label="k1")
    shown = _shown(key)
    assert secret.lower() not in shown.lower() and secret[:8].lower() not in shown.lower()
    assert "k1" in shown
    if key.pmk() is not None:
        assert key.pmk().hex() not in shown
    with pytest.raises(TypeError):
        pickle.dumps(key)


def test_key_kinds_and_values():
    assert parse_key(f"wpa-psk:{SECRET_HEX}").pmk() == bytes.fromhex(SECRET_HEX)
    assert parse_key(f"tk:{SECRET_HEX[:32]}").tk() == bytes.fromhex(SECRET_HEX[:32])
    assert parse_key(f"tk:{SECRET_HEX[:32]}").pmk() is None
    k = parse_key("wpa-pwd:pass%3aword:my%3anet")
    assert k.ssid == b"my:net" and k.pmk() == pmk_from_passphrase(b"pass:word", b"my:net")
    assert parse_key("Induction:Coherer").ssid == b"Coherer"


@pytest.mark.parametrize("spec", [
    f"wpa-pwd:{SECRET_PW}", f"wpa-pwd:{SECRET_PW}:a:b", "wpa-pwd:short:Net", f"wpa-pwd:{SECRET_PW}:",
    f"wpa-pwd:{SECRET_PW}:{'x' * 33}", "wpa-psk:zz" + SECRET_HEX[2:], f"wpa-psk:{SECRET_HEX[:40]}",
    f"tk:{SECRET_HEX[:30]}", f"{SECRET_PW}\u00e9:Net",
])
def test_bad_spec_error_does_not_quote_the_secret(spec):
    with pytest.raises(KeySpecError) as e:
        parse_key(spec)
    msg = str(e.value)
    assert "\n" not in msg and SECRET_PW not in msg and SECRET_HEX[2:20] not in msg


def test_keys_file(tmp_path):
    p = tmp_path / "80211_keys"
    p.write_text(f'# comment\n"wep","0102030405"\n"wpa-pwd","{SECRET_PW}:HomeNet"\n'
                 f'"wpa-psk","{SECRET_HEX}"\n\n"tk","{SECRET_HEX[:32]}"\n')
    keys = parse_keys_file(p)
    assert [k.kind for k in keys] == ["wpa-pwd", "wpa-psk", "tk"]
    assert keys[0].ssid == b"HomeNet" and keys[1].pmk() == bytes.fromhex(SECRET_HEX)
    assert all(SECRET_PW not in repr(k) and SECRET_HEX not in repr(k) for k in keys)


@pytest.mark.parametrize("text", ['"wpa-pwd" "x:y"\n', '"rsa","abc"\n', f'"wpa-pwd","{SECRET_PW}"\n'])
def test_keys_file_errors_name_the_line_not_the_secret(tmp_path, text):
    p = tmp_path / "keys"
    p.write_text("# first\n" + text)
    with pytest.raises(KeySpecError) as e:
        parse_keys_file(p)
    assert "line 2" in str(e.value) and SECRET_PW not in str(e.value)


def test_keys_file_missing_or_huge(tmp_path):
    with pytest.raises(KeySpecError, match="cannot read"):
        parse_keys_file(tmp_path / "absent")
    big = tmp_path / "big"
    big.write_bytes(b"#" * (2 << 20))
    with pytest.raises(KeySpecError, match="larger than"):
        parse_keys_file(big)


# --------------------------------------------------------------------------------------------------
# a WPA2-PSK-SHA256 (AKM 6) handshake with GCMP-256 built here, per IEEE 802.11 and independently of
# parsers.crypto: KDF-SHA256, AES-CMAC MIC (descriptor version 3), GCM over nonce A2 || PN.

AA, SPA = bytes.fromhex("02aaaaaaaa01"), bytes.fromhex("02bbbbbbbb02")


def _kdf_sha256(key: bytes, label: bytes, context: bytes, bits: int) -> bytes:
    blocks = [hmac.new(key, i.to_bytes(2, "little") + label + context + bits.to_bytes(2, "little"),
                       hashlib.sha256).digest() for i in range(1, (bits + 255) // 256 + 1)]
    return b"".join(blocks)[:bits // 8]


def _eapol_key(info: int, nonce: bytes, key_data: bytes, kck: bytes | None, replay: int) -> bytes:
    body = (bytes([2]) + info.to_bytes(2, "big") + (32).to_bytes(2, "big") + replay.to_bytes(8, "big") + nonce
            + bytes(16 + 8 + 8) + bytes(16) + len(key_data).to_bytes(2, "big") + key_data)
    frame = bytes([2, 3]) + len(body).to_bytes(2, "big") + body
    if kck is not None:
        c = cmac.CMAC(algorithms.AES(kck))
        c.update(frame)
        frame = frame[:81] + c.finalize() + frame[97:]
    return frame


def _data(fc1: int, a1: bytes, a2: bytes, a3: bytes, body: bytes) -> bytes:
    return bytes([0x08, fc1]) + bytes(2) + a1 + a2 + a3 + bytes([0x30, 0x00]) + body


def test_synthetic_psk_sha256_gcmp256_handshake_and_frame():
    pmk = bytes(range(32))
    anonce, snonce = bytes([0xA1]) * 32, bytes([0x5B]) * 32
    ctx = min(AA, SPA) + max(AA, SPA) + min(anonce, snonce) + max(anonce, snonce)
    ptk = _kdf_sha256(pmk, b"Pairwise key expansion", ctx, (16 + 16 + 32) * 8)
    kck, tk = ptk[:16], ptk[32:]
    rsne = bytes([48, 20, 1, 0]) + b"\x00\x0f\xac\x04" + b"\x01\x00\x00\x0f\xac\x09" + b"\x01\x00\x00\x0f\xac\x06" + b"\x00\x00"
    llc = b"\xaa\xaa\x03\x00\x00\x00\x88\x8e"
    m1 = _data(0x02, SPA, AA, AA, llc + _eapol_key(0x008B, anonce, b"", None, 1))
    m2 = _data(0x01, AA, SPA, AA, llc + _eapol_key(0x010B, snonce, rsne, kck, 1))
    # a protected frame AP -> STA: AAD = masked FC, A1, A2, A3, SC with the sequence number masked
    plain = b"\xaa\xaa\x03\x00\x00\x00\x08\x00" + bytes(range(60))
    hdr = bytes([0x08, 0x42]) + bytes(2) + SPA + AA + AA + bytes([0x40, 0x01])
    pn = (7).to_bytes(6, "big")
    sec = bytes([pn[5], pn[4], 0, 0x20, pn[3], pn[2], pn[1], pn[0]])
    aad = bytes([0x08, 0x42]) + SPA + AA + AA + bytes([0x00, 0x00])
    enc = hdr + sec + AESGCM(tk).encrypt(AA + pn, plain, aad)
    wrong = parse_key("wpa-psk:" + "11" * 32)
    right = parse_key("wpa-psk:" + pmk.hex())
    res = decrypt_frames([m1, m2, enc], [wrong, right])
    assert res.plaintext[2] == bytes([0x08, 0x02]) + hdr[2:] + plain
    assert res.mic_ok[2] is True and res.keys[0]["cipher"] == "GCMP-256" and res.keys[0]["kind"] == "ptk"
    assert res.counts.handshakes.ptks_derived == 1 and res.counts.handshakes.handshakes_failed == 0
    only_wrong = decrypt_frames([m1, m2, enc], [wrong])
    assert only_wrong.plaintext[2] is None and only_wrong.counts.handshakes.handshakes_failed == 1
    assert only_wrong.counts.no_key == 1
