"""Retransmissions, duplicate ACKs and out-of-order segments of xlayer.metrics.tcp against tshark's
``tcp.analysis.*`` flags, frame by frame, on every wired corpus capture with TCP.  Every difference is in
EXCEPTIONS with the reason we disagree (and why we are right); an unexplained one fails the test."""
from __future__ import annotations

import subprocess

import polars as pl
import pytest

import parsers
import xlayer.metrics.tcp as te
from tests.helpers.common import (
    capture_files,
    corpus_or_skip,
    tshark_or_skip,
    tshark_refuses,
)

FIELDS = {"retransmission": "tcp.analysis.retransmission", "fast": "tcp.analysis.fast_retransmission",
          "out_of_order": "tcp.analysis.out_of_order", "dup_ack": "tcp.analysis.duplicate_ack"}
MAX_BYTES = 2_000_000

DUPLICATED = ("every packet is in this capture two to four times with the same IP id, length and TSval "
              "(captured at several points): the copies are network_duplicate for us, not sent twice")
# (file, kind, frame) -> (who flags it, why we differ)
EXCEPTIONS: dict[tuple[str, str, int], tuple[str, str]] = {
    ("wired/zeek__tcp_ctu-64702-888.pcap", "retransmission", 8): (
        "ours", "network_duplicate of frame 7 (same IP id 0x37d6): " + DUPLICATED),
    ("wired/zeek__tcp_ctu-64702-888.pcap", "out_of_order", 8): (
        "tshark", "tshark calls the second copy of the out-of-order frame 7 out-of-order again; it is the "
        "network's duplicate of it, not a second late original"),
    ("wired/arkime__wireshark-retrans.pcap", "retransmission", 10): (
        "ours", "fourth copy of the SYN of frame 1 (same IP id 0x0df8): " + DUPLICATED),
    ("wired/arkime__wireshark-retrans.pcap", "out_of_order", 10): (
        "tshark", "tshark's 3 ms rule after frame 9; the frame is a copy of the SYN in frame 1 (same IP id), "
        "neither late nor reordered: " + DUPLICATED),
    ("wired/zeek__ipv6-http-atomic-frag.pcap", "retransmission", 8): (
        "tshark", "the first and only transmission of these 15 bytes; the server's ACK of them (frame 6) has an "
        "earlier timestamp but was written to the file before the data, so tshark's 'already acked' test calls "
        "the data a spurious retransmission (it applies that test even when the sequence number advances)"),
    **{("wired/zeek__tcp_reassembly.pcap", "fast", f): (
        "tshark", "a repeated FIN from the server: tshark's dup-ACK counter for the client is left at its "
        "'ACKed segment that wasn't captured' value, so its '>= 2 duplicate ACKs' test passes; the client sent "
        "no duplicate ACK (its packets carry data, RFC 5681 2), so no dup-ACK threshold triggered it")
       for f in (8, 10, 12)},
    **{("wired/zeek__tcp_retransmit-fast009.pcap", "fast", f): (
        "ours", "SACK recovery (RFC 6675): retransmitted 0.06 ms after a duplicate ACK whose SACK blocks show data "
        "above it received; tshark only calls the retransmission of the cumulative ACK point (frame 32) fast")
       for f in (34, 36)},
    **{("wired/arkime__wireshark-retrans.pcap", "fast", f): (
        "tshark", "a captured copy of the segment after captured copies of the duplicate ACKs: "
        + DUPLICATED + " (no trigger: the sender sent it once)")
       for f in (22, 23, 24, 42, 62, 63, 64, 81, 83, 84, 86, 101, 103, 104)},
}
# the class we must give the frames the exceptions call duplicates, and the copies tshark flags as
# retransmissions as we do (our flag covers network_duplicate): in vlan-pcp-dei every packet is there three
# times, byte-identical at the IP and TCP layers (IP id 0x0001 on both sides), in the same microsecond
DUP_FRAMES = {("wired/zeek__tcp_ctu-64702-888.pcap", 8), ("wired/arkime__wireshark-retrans.pcap", 10),
              *(("wired/zeek__vlan-pcp-dei.pcapng", f) for f in (2, 3, 5, 6))}


def _tcp_files() -> list[str]:
    corpus = corpus_or_skip()
    out = []
    for rel in capture_files(include_malformed=False):
        if rel.startswith("radiotap/") or tshark_refuses(rel) or (corpus / rel).stat().st_size > MAX_BYTES:
            continue
        out.append(rel)
    return out


def _tshark(path: str) -> dict[str, set[int]]:
    cmd = [tshark_or_skip(), "-r", path, "-n", "-o", "tcp.analyze_sequence_numbers:TRUE", "-T", "fields",
           "-E", "separator=\t", "-e", "frame.number", *(f"-e{v}" for v in FIELDS.values())]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout
    flags: dict[str, set[int]] = {k: set() for k in FIELDS}
    for line in out.splitlines():
        cells = line.split("\t")
        for k, v in zip(FIELDS, cells[1:], strict=False):
            if v:
                flags[k].add(int(cells[0]))
    return flags


def test_against_tshark() -> None:
    corpus = corpus_or_skip()
    tshark_or_skip()
    checked = 0
    totals = {k: 0 for k in FIELDS}
    unexplained, used = [], set()
    for rel in _tcp_files():
        try:
            df = parsers.read_capture(corpus / rel)
        except parsers.CaptureError:
            continue
        if df.height == 0 or df["tcp_seq"].is_null().all():
            continue
        res = te.classify(df, rel)
        r, ev = res["retransmissions"], res["tcp_events"]
        ours = {
            # tshark's retransmission flag covers its fast and spurious ones: every class but a late original
            "retransmission": set(r.filter(pl.col("class") != "reorder")["frame"]),
            "fast": set(r.filter(pl.col("trigger") == "fast")["frame"]),
            "out_of_order": set(r.filter(pl.col("class") == "reorder")["frame"]),
            "dup_ack": set(ev.filter(pl.col("event") == "dup_ack")["frame"]),
        }
        theirs = _tshark(str(corpus / rel))
        checked += 1
        for kind in FIELDS:
            totals[kind] += len(theirs[kind])
            for who, frames in (("ours", ours[kind] - theirs[kind]), ("tshark", theirs[kind] - ours[kind])):
                for f in sorted(frames):
                    key = (rel, kind, f)
                    if EXCEPTIONS.get(key, ("",))[0] != who:
                        unexplained.append(f"{rel} frame {f}: {kind} only by {who}")
                    used.add(key)
        for rel2, f in DUP_FRAMES:
            if rel2 == rel:
                assert r.filter(pl.col("frame") == f)["class"].to_list() == ["network_duplicate"], (rel, f)
    assert checked >= 20, checked                       # the corpus's wired TCP captures were read
    assert totals["retransmission"] >= 50 and totals["dup_ack"] >= 50, totals
    assert not unexplained, "\n".join(unexplained)
    stale = set(EXCEPTIONS) - used
    assert not stale, f"exceptions that no longer happen: {sorted(stale)}"


@pytest.mark.parametrize("rel", ["wired/chrissanders__tcp_zerowindowrecovery.pcapng",
                                 "wired/chrissanders__tcp_zerowindowdead.pcapng"])
def test_zero_windows_match_tshark(rel: str) -> None:
    corpus = corpus_or_skip()
    tshark = tshark_or_skip()
    cmd = [tshark, "-r", str(corpus / rel), "-n", "-T", "fields", "-e", "frame.number", "-e",
           "tcp.analysis.zero_window", "-e", "tcp.analysis.zero_window_probe"]
    rows = [line.split("\t") for line in subprocess.run(cmd, capture_output=True, text=True).stdout.splitlines()]
    ev = te.classify(parsers.read_capture(corpus / rel))["tcp_events"]
    zw = {int(c[0]) for c in rows if c[1]}
    assert zw and set(ev.filter(pl.col("event") == "zero_window")["frame"]) == zw
    assert set(ev.filter(pl.col("event") == "zero_window_probe")["frame"]) == {int(c[0]) for c in rows if c[2]}
