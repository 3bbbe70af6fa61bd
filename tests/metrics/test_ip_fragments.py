"""IPv4 fragments carrying TCP stay in their flow, and the segment counts whole (issue 11, real-capture defect 4).

The later fragments of a datagram carry no TCP header: they used to form a second, portless flow, and
the segment's payload was only what its first fragment held.  Checked on Zeek's fragment test captures
against tshark with IP reassembly on (it shows the reassembled segment's tcp.len).
"""
from __future__ import annotations

import subprocess

import pytest

from tests.helpers.common import CORPUS, corpus_or_skip, tshark_or_skip
from xlayer.bundle import CaptureEntry, write_manifest
from xlayer.bundle.manifest import Bundle
from xlayer.metrics import open_timeline


def _timeline(tmp_path, name: str):
    corpus_or_skip()
    d = tmp_path / "b"
    d.mkdir()
    (d / "c.pcap").write_bytes((CORPUS / "wired" / name).read_bytes())
    write_manifest(d, Bundle(captures=[CaptureEntry("wired", "server", "c.pcap")]))
    return open_timeline(d, cache=False)


def _tshark_reassembled_len(name: str) -> dict[str, int]:
    out = subprocess.run([tshark_or_skip(), "-r", str(CORPUS / "wired" / name), "-o", "ip.defragment:TRUE",
                          "-T", "fields", "-e", "ip.src", "-e", "tcp.srcport", "-e", "ip.dst", "-e", "tcp.dstport",
                          "-e", "tcp.len"], capture_output=True, text=True, check=True).stdout
    got: dict[str, int] = {}
    for line in out.splitlines():
        src, sport, dst, dport, n = line.split("\t")
        if sport:
            key = f"tcp {src}:{sport}>{dst}:{dport}"
            got[key] = got.get(key, 0) + int(n or 0)
    return got


@pytest.mark.parametrize("name", ["zeek__ipv4_fragmented-4.pcap", "zeek__ipv4_fragmented-syn.pcap"])
def test_fragmented_segment_counts_whole_in_its_flow(tmp_path, name):
    tl = _timeline(tmp_path, name)
    pk = tl.packets(columns=["frame", "flow"])
    assert pk["flow"].null_count() == 0
    assert not [f for f in pk["flow"].unique().to_list() if ":" not in f], "a portless flow of fragments"
    flows = {r["flow"]: r for r in tl.table("flows").iter_rows(named=True)}
    want = _tshark_reassembled_len(name)
    assert set(flows) == set(want)
    for f, n in want.items():
        assert flows[f]["payload_bytes"] == n, f


def test_datagram_with_its_last_fragment_missing(tmp_path):
    # five 1480-byte fragments of one segment, the last one never captured: the bytes captured count
    tl = _timeline(tmp_path, "zeek__ipv4_fragmented-3.pcap")
    (row,) = tl.table("flows").iter_rows(named=True)
    assert row["flow"] == "tcp 210.54.213.247:1265>131.243.1.10:21"
    assert row["packets"] == 5 and row["payload_bytes"] == 5 * 1480 - 20


def test_unrelated_packets_sharing_ip_id_zero_are_not_grouped(tmp_path):
    # frames 1 and 6 are unfragmented, IP id 0 like the fragments: they keep their own ports
    tl = _timeline(tmp_path, "zeek__ipv4_fragmented-4.pcap")
    pk = {r["frame"]: r["flow"] for r in tl.packets(columns=["frame", "flow"]).iter_rows(named=True)}
    assert pk[1] == "tcp 10.0.0.1:80>127.0.0.1:7790"
    assert pk[6] == "tcp 128.32.46.142:7790>10.0.0.1:80"
