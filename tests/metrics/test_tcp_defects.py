"""Regressions of issue 11 (items 3 and 5) in xlayer.metrics.tcp, on corpus and hand-written captures.

* Byte-identical copies of a segment (same IP id -- 0 or constant --, TSval, flags, ACK, window) microseconds
  apart are ``network_duplicate``: not retransmissions, and Karn's rule keeps their RTT samples.
* A retransmission whose original the capture missed is listed (``original_captured`` false) when the
  receiver proves it had the bytes: an earlier ACK covering them, or a D-SACK answering it.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import polars as pl
import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

import parsers
import xlayer.metrics.flows as fl
import xlayer.metrics.tcp as te
from tests.helpers.common import corpus_or_skip, tshark_or_skip
from xlayer.timeline.flowkey import flow_exprs

T0 = 1_700_000_000.0
M = 1000
C, S = "10.0.0.1", "10.0.0.2"


def _tshark_flags(path: Path, field: str) -> set[int]:
    out = subprocess.run([tshark_or_skip(), "-r", str(path), "-n", "-Y", field, "-T", "fields", "-e", "frame.number"],
                         capture_output=True, text=True, timeout=60).stdout
    return {int(x) for x in out.split()}


def _classify(path: Path) -> pl.DataFrame:
    return te.classify(parsers.read_capture(path), path.name)["retransmissions"].sort("frame")


def _rtt(path: Path) -> pl.DataFrame:
    return fl.rtt_samples(fl.prepare(parsers.read_capture(path).with_columns(flow_exprs())))


class _Conv:
    """A client -> server TCP conversation written as a pcap, packet by packet (times in ms from T0)."""

    def __init__(self, ipid_step: int = 1) -> None:
        self.pkts: list = []
        self.ids = {C: 100, S: 500}
        self.step = ipid_step

    def add(self, t_ms: float, fwd: bool, seq: int, ack: int, flags: str = "A", data: int = 0,
            tsval: int | None = None, tsecr: int = 0, sack: tuple[int, int] | None = None, copy: bool = False,
            win: int = 1000) -> None:
        src, dst = (C, S) if fwd else (S, C)
        if not copy:
            self.ids[src] += self.step
        opts = []
        if tsval is not None:
            opts.append(("Timestamp", (tsval, tsecr)))
        if sack is not None:
            opts += [("NOP", None), ("NOP", None), ("SAck", sack)]
        p = (Ether() / IP(src=src, dst=dst, id=self.ids[src] & 0xFFFF, flags="DF")
             / TCP(sport=40000 if fwd else 80, dport=80 if fwd else 40000, seq=seq, ack=ack, flags=flags,
                   window=win, options=opts) / (b"x" * data))
        p.time = T0 + t_ms / 1000
        self.pkts.append(p)

    def write(self, path: Path) -> Path:
        wrpcap(str(path), self.pkts)
        return path


# --- item 3: byte-identical duplicates ------------------------------------------------------------

def test_corpus_triplicated_handshake_is_network_duplicate() -> None:
    """zeek vlan-pcp-dei: every packet three times (VLAN priority bits differ), IP id 0x0001 on both sides,
    same microsecond.  tshark flags frames 2, 3, 5, 6 '(suspected) retransmission' (and 8, 9 duplicate ACKs);
    we called 2, 3 rto and 5, 6 spurious (receiver_vantage, 0.9): they are copies of frames 1 and 4."""
    path = corpus_or_skip() / "wired" / "zeek__vlan-pcp-dei.pcapng"
    r = _classify(path)
    assert r["frame"].to_list() == [2, 3, 5, 6]
    assert set(r["class"]) == {"network_duplicate"}
    assert not r["spurious"].any() and r["trigger"].is_null().all()
    assert r["original_frame"].to_list() == [1, 1, 4, 4] and r["original_captured"].all()
    assert r["method"][0].startswith("byte-identical")
    # Karn's rule no longer drops the handshake's samples (the SYN and SYN-ACK were "retransmitted")
    assert _rtt(path).filter(pl.col("method") == "seq_ack").height == 2


def test_corpus_duplicated_capture_keeps_rtt_samples() -> None:
    """arkime wireshark-retrans: every packet two to four times with the same IP id and TSval (already
    network_duplicate); Karn's rule took every copy for a retransmission and kept no RTT sample at all."""
    path = corpus_or_skip() / "wired" / "arkime__wireshark-retrans.pcap"
    assert set(_classify(path)["class"]) == {"network_duplicate"}
    rtt = _rtt(path)
    assert rtt.filter(pl.col("method") == "seq_ack").height >= 10 and rtt.filter(pl.col("method") == "ts_echo").height


def _bulk(path: Path, copies: bool, extra: list | None = None) -> Path:
    """Linux-like sender (IP id 0, DF, 1 ms TSval clock), 40 segments acked one by one; `copies`: each data
    segment is in the capture twice, 20 us apart, byte for byte."""
    cv = _Conv(ipid_step=0)
    cv.add(0, True, 0, 0, "S", tsval=1)
    cv.add(10, False, 5000, 1, "SA", tsval=7, tsecr=1)
    cv.add(20, True, 1, 5001, "A", tsval=21, tsecr=7)
    t = 30.0
    for k in range(40):
        ts = int(t)
        cv.add(t, True, 1 + k * M, 5001, "PA", data=M, tsval=ts, tsecr=7)
        if copies:
            cv.add(t + 0.02, True, 1 + k * M, 5001, "PA", data=M, tsval=ts, tsecr=7, copy=True)
        cv.add(t + 10, False, 5001, 1 + (k + 1) * M, "A", tsval=7 + k, tsecr=ts)
        t += 12
    for e in extra or []:
        cv.add(*e[0], **e[1])
    return cv.write(path)


def test_byte_identical_copies_are_not_retransmissions(tmp_path: Path) -> None:
    once, twice = _bulk(tmp_path / "once.pcap", False), _bulk(tmp_path / "twice.pcap", True)
    r = _classify(twice)
    assert r.height == 40 and set(r["class"]) == {"network_duplicate"} and not r["spurious"].any()
    assert _classify(once).height == 0
    # the causes count rto / fast / spurious rows only, and the RTT samples are those of the clean capture
    a, b = _rtt(once), _rtt(twice)
    assert a.height >= 80 and a.drop("data_frame", "ack_frame").equals(b.drop("data_frame", "ack_frame"))
    # tshark calls every copy a retransmission (it has no notion of a network duplicate)
    assert len(_tshark_flags(twice, "tcp.analysis.retransmission")) == 40


def test_real_retransmissions_stay(tmp_path: Path) -> None:
    """The sender's own resend (new TSval, same IP id 0) and an identical copy too late to be a network's are
    retransmissions, not duplicates."""
    t_end = 30 + 40 * 12
    extra = [((t_end + 300, True, 1 + 39 * M, 5001, "PA"), {"data": M, "tsval": t_end + 300, "tsecr": 7}),
             ((t_end + 302, True, 1 + 39 * M, 5001, "PA"), {"data": M, "tsval": t_end + 300, "tsecr": 7,
                                                            "copy": True})]
    r = _classify(_bulk(tmp_path / "late.pcap", False, extra))
    assert r.height == 2 and "network_duplicate" not in set(r["class"]), r


# --- item 5: the capture missed the original -----------------------------------------------------

def _missed(path: Path, evidence: str) -> Path:
    """Receiver-side capture that misses segment 3's first transmission (sniffer loss); `evidence`:
    ``ack``: the receiver's ACK of it is seen before the resend; ``dsack``: the resend is answered by a
    D-SACK; ``seen``: control, the original is captured and normally ACKed, a later D-SACK is for an
    uncaptured resend."""
    cv = _Conv()
    cv.add(0, True, 0, 0, "S", tsval=1)
    cv.add(0.1, False, 5000, 1, "SA", tsval=7, tsecr=1)
    cv.add(20, True, 1, 5001, "A", tsval=21, tsecr=7)
    cv.add(30, True, 1, 5001, "PA", data=M, tsval=30, tsecr=7)
    cv.add(30.1, False, 5001, 1 + M, "A", tsval=30, tsecr=30)
    cv.add(31, True, 1 + M, 5001, "PA", data=M, tsval=31, tsecr=7)
    cv.add(31.1, False, 5001, 1 + 2 * M, "A", tsval=31, tsecr=31)
    if evidence == "seen":
        cv.add(32, True, 1 + 2 * M, 5001, "PA", data=M, tsval=32, tsecr=7)
        cv.add(32.1, False, 5001, 1 + 3 * M, "A", tsval=32, tsecr=32)
        cv.add(300, False, 5001, 1 + 3 * M, "A", tsval=300, tsecr=32, sack=(1 + 2 * M, 1 + 3 * M))
        return cv.write(path)
    cv.ids[C] += 1                                         # segment 3 went by, not captured
    if evidence == "ack":
        cv.add(32.1, False, 5001, 1 + 3 * M, "A", tsval=32, tsecr=32)   # its ACK, lost on the way back
    cv.add(250, True, 1 + 2 * M, 5001, "PA", data=M, tsval=250, tsecr=7)  # the sender's timeout resends it
    if evidence == "dsack":
        cv.add(250.1, False, 5001, 1 + 3 * M, "A", tsval=250, tsecr=250, sack=(1 + 2 * M, 1 + 3 * M))
    else:
        cv.add(250.1, False, 5001, 1 + 3 * M, "A", tsval=250, tsecr=250)
    return cv.write(path)


@pytest.mark.parametrize("evidence, method, frame", [("ack", "already_acked", 9), ("dsack", "dsack", 8)])
def test_retransmission_with_uncaptured_original_is_listed(tmp_path: Path, evidence: str, method: str,
                                                           frame: int) -> None:
    path = _missed(tmp_path / f"{evidence}.pcap", evidence)
    r = _classify(path)
    assert r["frame"].to_list() == [frame], r
    row = r.row(0, named=True)
    assert row["class"] == "spurious" and row["spurious"] and row["method"].startswith(method)
    assert row["original_captured"] is False and row["original_frame"] is None
    assert row["seq"] == 1 + 2 * M and row["len"] == M
    if evidence == "ack":
        # tshark's view: it flags it too ("spurious retransmission": the receiver had ACKed these bytes)
        assert _tshark_flags(path, "tcp.analysis.spurious_retransmission") == {frame}
    else:
        # tshark does not read D-SACKs: for it the resend is new data
        assert not _tshark_flags(path, "tcp.analysis.retransmission")


def test_captured_original_is_not_listed(tmp_path: Path) -> None:
    """A D-SACK after the normal ACK of a captured segment answers a later, uncaptured copy: no row."""
    assert _classify(_missed(tmp_path / "seen.pcap", "seen")).height == 0


def test_ack_written_before_but_sent_after_is_no_evidence() -> None:
    """zeek ipv6-http-atomic-frag frame 8: the server's ACK of these bytes is an earlier frame (6) with a
    later time stamp; the segment is the first and only transmission (tshark calls it spurious)."""
    path = corpus_or_skip() / "wired" / "zeek__ipv6-http-atomic-frag.pcap"
    assert 8 not in set(_classify(path)["frame"])


def test_acked_hole_filler_is_no_late_original(tmp_path: Path) -> None:
    """Without IP ids or timestamps a never-seen segment arriving within 3 ms of the highest one was a late
    original (Wireshark's timing rule); when the receiver had ACKed its bytes before, its original went by
    uncaptured: it is a retransmission."""
    cv = _Conv(ipid_step=0)
    cv.add(0, True, 1, 5001, "PA", data=M)
    cv.add(1, True, 1 + 2 * M, 5001, "PA", data=M)            # segment 2 (1 + M) went by, not captured
    cv.add(1.5, False, 5001, 1 + 3 * M, "A")                  # the receiver has all three
    cv.add(2, True, 1 + M, 5001, "PA", data=M)                # the sender resends segment 2 anyway
    r = _classify(cv.write(tmp_path / "hole.pcap"))
    assert r["frame"].to_list() == [4] and r["class"][0] == "spurious", r
    assert r["method"][0].startswith("already_acked") and r["original_captured"][0] is False
