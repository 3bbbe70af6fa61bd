"""Every schema column of every corpus capture against tshark, and the two decoders against each other.

A cell that differs from tshark must be listed in EXCEPTIONS with the reason we differ.
"""
from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from parsers import read_capture
from tests.helpers.compare import diff_tables
from parsers.formats.records import CaptureError
from parsers.schema import NAMES
from parsers.tshark import tshark_table

from tests.helpers.common import CORPUS, capture_files, corpus_or_skip, tshark_or_skip, tshark_refuses

# `malformed` holds our reasons; tshark's notion differs (it is checked in test_malformed).
COMPARED = [c for c in NAMES if c != "malformed"]


@dataclass(frozen=True)
class Exc:
    """A known, explained difference: file glob, column, frames (None = every frame), ours/theirs."""

    files: str
    column: str
    reason: str
    frames: tuple[int, ...] | None = None
    when: str = "any"   # any | theirs_null (tshark has no value) | ours_null (we have none)
    row: Callable[[dict], bool] | None = None   # a condition on our row


EXCEPTIONS: list[Exc] = [
    Exc("*", "nss", "tshark shows NSS only for VHT (wlan_radio.11ac.nss); for HT we derive it from the "
        "MCS index (streams = MCS // 8 + 1, IEEE 802.11-2020 19.5) and for HE from the radiotap HE "
        "data6 NSTS field", when="theirs_null"),
    Exc("*", "ip_hdr_len", "tshark has no field for the length of the IPv6 header with its extension "
        "headers", when="theirs_null", row=lambda r: r["ip_version"] == 6),
    *(Exc("*", c, "the ports/length tshark shows belong to the packet quoted inside an ICMP error; our "
          "transport columns describe the outer packet, whose transport is ICMP", when="ours_null",
          row=lambda r: r["icmp_type"] is not None)
      for c in ("sport", "dport", "udp_len", "tcp_seq", "tcp_ack", "tcp_flags", "tcp_hdr_len", "tcp_win",
                "tcp_len")),
    Exc("radiotap/wireshark__wpa-Induction.pcap", "fcs_bad", "these frames claim 802.11 protocol "
        "version 2 or 3, so tshark stops dissecting and leaves the FCS unverified (no wlan.fcs.status, "
        "read as good); the radio header says an FCS is present and its CRC-32 does not match, so we "
        "say bad — these are corrupted receptions", row=lambda r: r["wlan_type"] is None),
    *(Exc("*", c, "tshark's wlan_radio has no HE bandwidth or guard-interval field; we take them from "
          "the radiotap HE data5 field (bandwidth/RU allocation 0-3, GI 0 = 0.8 us)", when="theirs_null",
          row=lambda r: r["phy"] == "he") for c in ("bw_mhz", "sgi")),
    *(Exc("*", c, "ADDBA/DELBA action frames carry a status code / starting sequence number that tshark "
          "shows in the same fields; our wlan_status and wlan_ba_ssn are defined for (re)association/"
          "authentication responses and Block Ack (Request) frames only, so a BlockAck session's "
          "numbers are not mistaken for an association's", when="ours_null",
          row=lambda r: r["wlan_type"] == 0 and r["wlan_subtype"] == 13) for c in ("wlan_status", "wlan_ba_ssn")),
    *(Exc("radiotap/malformed/tcpdump__ieee802.11_rates_oobr.pcap", c, "the frame claims 802.11 "
          "protocol version 1, which no station sends; tshark decodes the header anyway, we mark it "
          "malformed and decode no field from it", frames=(1,), when="ours_null")
      for c in ("wlan_type", "wlan_subtype", "wlan_ra", "wlan_da", "wlan_ta", "wlan_sa", "wlan_bssid",
                "wlan_seq", "wlan_frag", "wlan_duration", "wlan_flags")),
    Exc("pcapng/pcapng-test-generator/*/test20[0-2].pcapng", "iface", "these files have several "
        "sections; pcapng interface ids restart in each section and tshark 4.0 prints the "
        "section-local id, so two different interfaces share a number. We number interfaces across "
        "the file so that one iface value means one interface (one link type, one clock)"),
    *(Exc(f, "ip_len", "the IP header's length field says 0 (TSO/BIG TCP super-frame); ip_len is the "
          "header's value, as documented, and tcp_len carries the real payload length taken from the "
          "frame; tshark shows a length it derived from the frame", frames=(1,))
      for f in ("wired/tcpdump__ipv4_tcp_http_xml_tso.pcap", "wired/tcpdump__bigtcp-ipv4.pcap",
                "wired/tcpdump__bigtcp-ipv6.pcap")),
    *(Exc("wired/tcpdump__bigtcp-ipv6.pcap", c, "IPv6 BIG TCP: payload length 0 and no jumbo option; we "
          "take the length from the frame, as tshark itself does for IPv4 BIG TCP, and decode the TCP "
          "header; tshark 4.0 gives TCP an empty payload and marks the frame malformed",
          frames=(1,), when="theirs_null")
      for c in ("sport", "dport", "tcp_seq", "tcp_ack", "tcp_flags", "tcp_hdr_len", "tcp_win", "tcp_len",
                "tcp_tsval", "tcp_tsecr")),
    Exc("wired/tcpdump__ipv6_jumbogram_1.pcap", "ip_len", "a jumbogram's length is in the hop-by-hop "
        "Jumbo Payload option (RFC 2675); ip_len is that length + 40, tshark shows the fixed header's "
        "payload length 0", frames=(1,)),
    Exc("radiotap/aircrack-ng__wep_64_ptw_01.cap", "ts_ns", "the record's microsecond field is "
        "1000046 (>= 10**6); we carry the overflow into the seconds (…535.000046, between frames 3850 "
        "at …534.999533 and 3852 at …535.002158), tshark shows …534.1000046, before frame 3850",
        frames=(3851,)),
]


def _explained(rel: str, frame: int, col: str, ours, theirs, row: dict | None = None) -> bool:
    for e in EXCEPTIONS:
        if e.column != col or not fnmatch.fnmatch(rel, e.files):
            continue
        if e.frames is not None and frame not in e.frames:
            continue
        if e.when == "theirs_null" and theirs is not None:
            continue
        if e.when == "ours_null" and ours is not None:
            continue
        if e.row is not None and (row is None or not e.row(row)):
            continue
        return True
    return False


FILES = capture_files()


@pytest.mark.parametrize("rel", FILES)
def test_matches_tshark(rel: str) -> None:
    corpus_or_skip()
    tshark_or_skip()
    path = CORPUS / rel
    if tshark_refuses(rel):
        with pytest.raises(CaptureError) as err:
            read_capture(path)
        assert path.name in str(err.value)
        return
    ours = read_capture(path)
    theirs = tshark_table(path)
    assert ours.height == theirs.height, f"{rel}: {ours.height} rows, tshark {theirs.height}"
    rows = {r["frame"]: r for r in ours.iter_rows(named=True)}
    diffs = [d for d in diff_tables(ours, theirs, COMPARED) if not _explained(rel, *d, rows.get(d[0]))]
    shown = "\n".join(f"  frame {f} {c}: ours={a!r} tshark={b!r}" for f, c, a, b in diffs[:40])
    assert not diffs, f"{rel}: {len(diffs)} unexplained differences from tshark:\n{shown}"


@pytest.mark.parametrize("rel", FILES)
def test_fast_equals_reference(rel: str) -> None:
    corpus_or_skip()
    path = CORPUS / rel
    try:
        fast = read_capture(path, decoder="fast")
    except CaptureError:
        with pytest.raises(CaptureError):
            read_capture(path, decoder="reference")
        return
    ref = read_capture(path, decoder="reference")
    diffs = diff_tables(fast, ref, NAMES)
    shown = "\n".join(f"  frame {f} {c}: fast={a!r} reference={b!r}" for f, c, a, b in diffs[:40])
    assert not diffs, f"{rel}: {len(diffs)} cells differ between decoders:\n{shown}"
