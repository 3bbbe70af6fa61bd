"""Native WPA/WPA2 decryption of 802.11 frames (no tshark), from user-given keys (WPA3-SAE: with its PMK).

    keys = [parse_key("wpa-pwd:Induction:Coherer")]        # PASSPHRASE:SSID; or parse_keys_file(path)
    res = decrypt_capture("air.pcap", keys)                # or decrypt_frames(frames, keys)
    res.plaintext[i]    # the 802.11 frame i with the Protected bit cleared and its body in clear, or None

Modules, one job each: `keys` (key specs, PMK, PRF/KDF, PTK split), `eapol` (EAPOL-Key frames,
4-way and group-key handshakes, MIC check, GTK unwrap), `ccmp` (CCMP/GCMP), `tkip` (TKIP, Michael),
`frames` (802.11 header fields the ciphers need; captures to bare 802.11 frames), `decrypt` (the
per-frame driver, the reference), `batch` (the same verdicts, columnar: the frames of one key at once).  Keys are secrets: nothing here prints, logs or stores them outside the Key objects.

For the decoders: one `Decryptor(keys)` per capture, fed every record in capture order
(`.frame(index, dot11_bytes, wire_len)`, FCS removed); it keeps only key state, so it can run chunk
by chunk in the walk.  Its plaintext frames have the Protected bit cleared and can go down the same
802.11 -> LLC -> IP path as unprotected frames.  Key objects refuse pickling: build them where they
are used.
"""
from __future__ import annotations

from parsers.crypto.decrypt import (
           DecryptCounts,
           DecryptResult,
           decrypt_capture,
           decrypt_frames,
)
from parsers.crypto.keys import Key, KeySpecError, parse_key, parse_keys_file

__all__ = ["DecryptCounts", "DecryptResult", "Key", "KeySpecError", "decrypt_capture", "decrypt_frames",
           "parse_key", "parse_keys_file"]
