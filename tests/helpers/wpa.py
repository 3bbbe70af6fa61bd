"""Corpus WPA captures and tshark's decryption of them: the oracle of the decryption tests."""
from __future__ import annotations

import functools
import subprocess
from pathlib import Path

import pytest

from tests.helpers.common import CORPUS, corpus_or_skip, tshark_or_skip


def corpus_file(rel: str) -> Path:
    """Return a corpus file's path, or skip the test saying it is absent."""
    p = corpus_or_skip() / rel
    if not p.exists():
        pytest.skip(f"{rel} not in the corpus")
    return p


@functools.lru_cache(maxsize=None)
def tshark_decrypted(rel: str, key: str) -> dict[int, tuple]:
    """Return frame number -> (ip_src, ip_dst, ip_len, ip_id, TCP/UDP sport, dport) of the unfragmented
    protected frames tshark decrypts to IPv4 with the wpa-pwd `key` (ports of the outer header only)."""
    out = subprocess.run(
        [tshark_or_skip(), "-r", str(CORPUS / rel), "-o", "wlan.enable_decryption:TRUE",
         "-o", f'uat:80211_keys:"wpa-pwd","{key}"', "-T", "fields", "-E", "separator=/t", "-E", "occurrence=f",
         "-e", "frame.number", "-e", "ip.src", "-e", "ip.dst", "-e", "ip.len", "-e", "ip.id",
         "-e", "tcp.srcport", "-e", "tcp.dstport", "-e", "udp.srcport", "-e", "udp.dstport", "-e", "ip.proto",
         "-e", "wlan.fc.protected", "-e", "wlan.frag", "-e", "wlan.fc.frag"],
        capture_output=True, text=True, timeout=60, check=True).stdout
    res = {}
    for line in out.splitlines():
        n, src, dst, ln, iid, sp, dp, usp, udp, proto, prot, frag, more = line.split("\t")
        # an ICMP error's quoted header is not the frame's own transport header
        sp, dp = (sp or usp, dp or udp) if proto in ("6", "17") else ("", "")
        if prot == "1" and src and frag in ("0", "") and more in ("0", "False", ""):
            res[int(n)] = (src, dst, int(ln), int(iid, 16), int(sp) if sp else None, int(dp) if dp else None)
    return res
