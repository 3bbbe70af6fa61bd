"""Key specs from strings and Wireshark's 80211_keys file; PMK, PRF/KDF and the PTK split per AKM and cipher.

Specs: ``wpa-pwd:PASSPHRASE:SSID`` (or bare ``PASSPHRASE:SSID``), ``wpa-psk:PMK_HEX`` (32 or 48 bytes),
``tk:TK_HEX`` (16 or 32 bytes).  As in Wireshark, a ``:`` or ``%`` inside the passphrase or SSID is
written percent-encoded (``%3a``); more than one raw ``:`` is refused rather than guessed.
A Key never shows its secret: repr, str and format give its label, kind and SSID only, and error
messages name the spec's kind and position, never its text.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import re
from dataclasses import dataclass
from urllib.parse import unquote_to_bytes

MAX_KEYS_FILE_BYTES = 1 << 20      # an 80211_keys file is a few lines; refuse anything huge

# Pairwise/group cipher suite type (00-0F-AC-n, WPA1 00-50-F2-n) -> (name, TK bytes)
CIPHERS: dict[int, tuple[str, int]] = {2: ("TKIP", 32), 4: ("CCMP-128", 16), 8: ("GCMP-128", 16),
                                       9: ("GCMP-256", 32), 10: ("CCMP-256", 32)}
CIPHER_BY_NAME = {name: (suite, tk) for suite, (name, tk) in CIPHERS.items()}


@dataclass(frozen=True)
class Akm:
    """How one AKM derives and checks keys: PTK hash, KCK/KEK sizes, EAPOL MIC algorithm and length."""

    suite: int
    kdf: str            # "prf-sha1" (IEEE 802.11 12.7.1.2) or "sha256"/"sha384" (KDF, 12.7.1.7.2)
    kck: int
    kek: int
    mic: str            # "by-version" (descriptor v1 HMAC-MD5, v2 HMAC-SHA1, v3 AES-CMAC), "cmac",
    mic_len: int        # "hmac-sha256", "hmac-sha384"


# FT AKMs (3, 4, 9, 13, 19) derive the PTK through the PMK-R0/R1 hierarchy: not supported.
AKMS: dict[int, Akm] = {
    1: Akm(1, "prf-sha1", 16, 16, "by-version", 16), 2: Akm(2, "prf-sha1", 16, 16, "by-version", 16),
    5: Akm(5, "sha256", 16, 16, "cmac", 16), 6: Akm(6, "sha256", 16, 16, "cmac", 16),
    8: Akm(8, "sha256", 16, 16, "cmac", 16),
    11: Akm(11, "sha256", 16, 16, "hmac-sha256", 16), 12: Akm(12, "sha384", 24, 32, "hmac-sha384", 24),
    18: Akm(18, "sha256", 16, 16, "hmac-sha256", 16), 20: Akm(20, "sha384", 24, 32, "hmac-sha384", 24),
}
PTK_LABEL = b"Pairwise key expansion"


class KeySpecError(ValueError):
    """A key spec or keys file that cannot be used (the message never contains the secret)."""


class Key:
    """A user-given key: a passphrase with its SSID, a PMK, or a TK.  Its repr never shows the secret."""

    __slots__ = ("kind", "ssid", "label", "_secret", "_pmk")

    def __init__(self, kind: str, secret: bytes, ssid: bytes | None = None, label: str = "key"):
        self.kind, self.ssid, self.label = kind, ssid, label
        self._secret = bytes(secret)
        self._pmk: bytes | None = None

    def pmk(self) -> bytes | None:
        """Return the PMK (PBKDF2 of a passphrase, computed once), or None for a TK."""
        if self.kind == "wpa-psk":
            return self._secret
        if self.kind == "wpa-pwd":
            if self._pmk is None:
                self._pmk = pmk_from_passphrase(self._secret, self.ssid or b"")
            return self._pmk
        return None

    def tk(self) -> bytes | None:
        """Return the temporal key of a ``tk:`` spec, else None."""
        return self._secret if self.kind == "tk" else None

    def __repr__(self) -> str:
        ssid = "" if self.ssid is None else f" ssid={self.ssid.decode('utf-8', 'backslashreplace')!r}"
        return f"<Key {self.label} {self.kind}{ssid}>"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return format(repr(self), spec)

    def __reduce__(self):
        # A pickled key would carry the secret into files or other processes unnoticed.
        raise TypeError("Key objects hold secrets and are not picklable")


def pmk_from_passphrase(passphrase: bytes, ssid: bytes) -> bytes:
    """Return the 32-byte PMK = PBKDF2-HMAC-SHA1(passphrase, SSID, 4096, 32) (IEEE 802.11 J.4)."""
    return hashlib.pbkdf2_hmac("sha1", passphrase, ssid, 4096, 32)


def parse_key(spec: str, label: str = "key") -> Key:
    """Return the Key of one spec string (see the module doc); raise KeySpecError."""
    kind, sep, rest = spec.partition(":")
    if sep and kind in ("wpa-pwd", "wpa-psk", "tk"):
        return _make(kind, rest, label)
    return _make("wpa-pwd", spec, label)


def parse_keys_file(path: str | os.PathLike) -> list[Key]:
    """Return the WPA keys of a Wireshark 80211_keys file (``"wpa-pwd","PASS:SSID"`` lines); raise KeySpecError.

    WEP keys and comments are skipped; an unknown key type or a malformed line is an error.
    """
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_KEYS_FILE_BYTES + 1)
    except OSError as e:
        raise KeySpecError(f"{os.fspath(path)}: cannot read keys file: {e.strerror or e}") from None
    if len(raw) > MAX_KEYS_FILE_BYTES:
        raise KeySpecError(f"{os.fspath(path)}: keys file larger than {MAX_KEYS_FILE_BYTES} bytes")
    keys = []
    for n, line in enumerate(raw.decode("utf-8", "replace").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r'"([^"]*)"\s*,\s*"([^"]*)"(?:\s*,.*)?', line)
        if m is None:
            raise KeySpecError(f"{os.fspath(path)} line {n}: expected \"type\",\"key\"")
        kind = m.group(1).strip().lower()
        if kind == "wep":
            continue
        if kind not in ("wpa-pwd", "wpa-psk", "tk"):
            raise KeySpecError(f"{os.fspath(path)} line {n}: unknown key type (want wpa-pwd, wpa-psk, tk or wep)")
        try:
            keys.append(_make(kind, m.group(2), f"key{len(keys) + 1}"))
        except KeySpecError as e:
            raise KeySpecError(f"{os.fspath(path)} line {n}: {e}") from None
    return keys


def _make(kind: str, text: str, label: str) -> Key:
    """Return a Key from the text after its kind; raise KeySpecError without quoting the text."""
    if kind == "wpa-pwd":
        if text.count(":") != 1:
            raise KeySpecError(f"{label}: wpa-pwd wants PASSPHRASE:SSID with one ':' (write ':' inside as %3a)")
        pw, ssid = (unquote_to_bytes(p) for p in text.split(":"))
        if not 8 <= len(pw) <= 63 or any(not 32 <= c <= 126 for c in pw):
            raise KeySpecError(f"{label}: a WPA passphrase is 8 to 63 printable ASCII characters")
        if not 1 <= len(ssid) <= 32:
            raise KeySpecError(f"{label}: an SSID is 1 to 32 bytes")
        return Key(kind, pw, ssid, label)
    raw = _hex(text, label, kind)
    if kind == "wpa-psk" and len(raw) not in (32, 48):
        raise KeySpecError(f"{label}: wpa-psk wants a 32- or 48-byte PMK in hex")
    if kind == "tk" and len(raw) not in (16, 32):
        raise KeySpecError(f"{label}: tk wants a 16- or 32-byte temporal key in hex")
    return Key(kind, raw, None, label)


def _hex(text: str, label: str, kind: str) -> bytes:
    """Return the bytes of a hex string (':' or '-' separators allowed); raise KeySpecError."""
    t = re.sub(r"[\s:\-]", "", text)
    try:
        return bytes.fromhex(t)
    except ValueError:
        raise KeySpecError(f"{label}: {kind} wants hexadecimal digits") from None


# --------------------------------------------------------------------------------------------------
# PRF / KDF and the PTK


def prf_sha1(key: bytes, label: bytes, data: bytes, nbytes: int) -> bytes:
    """Return nbytes of PRF-n (HMAC-SHA1, IEEE 802.11 12.7.1.2): label || 0 || data || counter."""
    out = bytearray()
    i = 0
    while len(out) < nbytes:
        out += hmac.new(key, label + b"\x00" + data + bytes([i]), hashlib.sha1).digest()
        i += 1
    return bytes(out[:nbytes])


def kdf(hash_name: str, key: bytes, label: bytes, context: bytes, nbytes: int) -> bytes:
    """Return nbytes of KDF-Hash-Length (IEEE 802.11 12.7.1.7.2): HMAC(i LE16 || label || context || bits LE16)."""
    bits = (nbytes * 8).to_bytes(2, "little")
    out = bytearray()
    i = 1
    while len(out) < nbytes:
        out += hmac.new(key, i.to_bytes(2, "little") + label + context + bits, hash_name).digest()
        i += 1
    return bytes(out[:nbytes])


@dataclass(frozen=True, repr=False)
class Ptk:
    """A pairwise transient key split into KCK, KEK and TK (repr shows no key bytes)."""

    kck: bytes
    kek: bytes
    tk: bytes
    cipher: str

    def __repr__(self) -> str:
        return f"<Ptk {self.cipher}>"


def ptk_context(aa: bytes, spa: bytes, anonce: bytes, snonce: bytes) -> bytes:
    """Return min(AA,SPA) || max(AA,SPA) || min(ANonce,SNonce) || max(ANonce,SNonce)."""
    return min(aa, spa) + max(aa, spa) + min(anonce, snonce) + max(anonce, snonce)


def derive_ptk(pmk: bytes, aa: bytes, spa: bytes, anonce: bytes, snonce: bytes, akm: Akm, cipher: str) -> Ptk:
    """Return the PTK of one 4-way handshake for an AKM and pairwise cipher."""
    tk_len = CIPHER_BY_NAME[cipher][1]
    n = akm.kck + akm.kek + tk_len
    ctx = ptk_context(aa, spa, anonce, snonce)
    raw = prf_sha1(pmk, PTK_LABEL, ctx, n) if akm.kdf == "prf-sha1" else kdf(akm.kdf, pmk, PTK_LABEL, ctx, n)
    return Ptk(raw[:akm.kck], raw[akm.kck:akm.kck + akm.kek], raw[akm.kck + akm.kek:], cipher)
