"""Column projection: a read asked for some columns gives exactly the full read's values for them.

`malformed` is the one column a projected read may legitimately differ in: it holds only what the
decoded layers find, i.e. the full read's reason wherever the layer (or part of a layer) that gives
it was decoded, and null otherwise. The reference decoder's projected read must equal the fast one.
"""
from __future__ import annotations

import struct

import polars as pl
import pytest

import parsers
from parsers.decode import fast
from parsers.layers import radiotap
from parsers.layers import transport
from parsers.columnar.columns import ALWAYS, Projection, reason_part
from parsers.schema import NAMES

from tests.helpers.common import CORPUS, capture_files, corpus_or_skip

# Radiotap (with FCS, management frames, malformed elements), raw and PPI 802.11, wired with
# VLANs, fragments, TCP options, SLL2, malformed headers, and pcapng with several link types.
FILES = [
    "radiotap/wireshark__wpa-Induction.pcap",
    "radiotap/pyrit__wpapsk-virgin_broadband.dump",
    "radiotap/fragattacks__ping_I_F_BE_AE-fromap.pcapng",
    "radiotap/arkime__80211http.pcap",
    "radiotap/libpcap__http_PPI.pcap",
    "radiotap/malformed/tcpdump__ieee802.11_parse_elements_oobr.pcap",
    "radiotap/malformed/tcpdump__radiotap-heapoverflow.pcap",
    "wired/zeek__tcp_reassembly.pcap",
    "wired/zeek__tcp_option-sack.pcap",
    "wired/zeek__ipv4_fragmented-1.pcap",
    "wired/zeek__vlan-qinqinq.pcap",
    "wired/zeek__linux_dlt_sll2.pcap",
    "wired/tcpdump__ipv6-routing-header.pcap",
    "wired/malformed/tcpdump__tcp_header_heapoverflow.pcap",
    "pcapng/zeek__pcapng-multi-interface.pcapng",
    "pcapng/wireshark__dns+icmp.pcapng",
]

# Subsets touching each layer and each optional part of one (and the benchmark's mix of all).
SUBSETS = {
    "record": ["caplen", "linktype", "iface"],
    "radio": ["rt_layout", "tsft", "phy_rate_mbps", "mcs", "signal_dbm", "freq_mhz"],
    "fcs": ["fcs_bad"],
    "dot11": ["wlan_type", "wlan_subtype", "wlan_ra", "wlan_ta", "wlan_bssid", "wlan_seq", "wlan_retry"],
    "dot11_parts": ["wlan_ssid", "wlan_reason", "wlan_status", "wlan_ba_ssn", "wlan_ba_bitmap", "wlan_pn"],
    "wired": ["eth_src", "eth_dst", "eth_type", "vlan_id", "vlan_depth"],
    "network": ["ip_src", "ip_dst", "ip_proto", "ip_len", "ip_version", "ip_frag_offset"],
    "transport": ["sport", "dport", "tcp_seq", "tcp_flags", "tcp_len", "udp_len", "icmp_type"],
    "tcp_options": ["tcp_mss", "tcp_wscale", "tcp_sack_perm", "tcp_tsval", "tcp_tsecr", "tcp_sack"],
    "mixed": ["ts_ns", "phy_rate_mbps", "fcs_bad", "wlan_ta", "ip_dst", "dport", "tcp_win", "eth_src"],
}


def _paths() -> list:
    root = corpus_or_skip()
    have = set(capture_files())
    missing = set(FILES) - have
    assert not missing, missing
    return [root / f for f in FILES]


@pytest.fixture(scope="module")
def full_reads() -> dict:
    return {p: parsers.read_capture(p, threads=1) for p in _paths()}


def _expected(full: pl.DataFrame, cols: list[str]) -> pl.DataFrame:
    """The full read cut to a projection: its columns, malformed as the decoded parts find it."""
    proj = Projection(cols)
    reasons = [proj.reason(r) for r in full.get_column("malformed").to_list()]
    return full.select(proj.columns).with_columns(pl.Series("malformed", reasons, pl.Utf8))


@pytest.mark.parametrize("subset", sorted(SUBSETS))
def test_projected_fast_read_equals_full_read(full_reads, subset: str) -> None:
    cols = SUBSETS[subset]
    for path, full in full_reads.items():
        got = parsers.read_capture(path, columns=cols, threads=1)
        assert got.columns == [c for c in NAMES if c in set(cols) | set(ALWAYS)], path
        want = _expected(full, cols)
        assert got.schema == want.schema, path
        assert got.equals(want, null_equal=True), (path, _first_diff(got, want))


@pytest.mark.parametrize("subset", ["radio", "dot11_parts", "network", "tcp_options", "mixed"])
def test_projected_reference_read_equals_fast(subset: str) -> None:
    cols = SUBSETS[subset]
    for path in _paths():
        fast_df = parsers.read_capture(path, columns=cols, threads=1)
        ref_df = parsers.read_capture(path, columns=cols, decoder="reference", threads=1)
        assert ref_df.equals(fast_df, null_equal=True), (path, _first_diff(ref_df, fast_df))


def test_streamed_chunks_and_threads_agree() -> None:
    path = CORPUS / FILES[0]
    corpus_or_skip()
    cols = SUBSETS["mixed"]
    whole = parsers.read_capture(path, columns=cols, threads=1)
    parts = list(parsers.iter_tables(path, columns=cols, chunk_bytes=4096, threads=2))
    assert len(parts) > 3
    assert pl.concat(parts).equals(whole, null_equal=True)


def test_unknown_columns_raise_naming_them() -> None:
    path = CORPUS / FILES[0]
    corpus_or_skip()
    with pytest.raises(ValueError, match=r"'no_such'.*'wlan_rssi'"):
        parsers.read_capture(path, columns=["ip_src", "wlan_rssi", "no_such"])
    with pytest.raises(ValueError, match="'bogus'"):
        next(parsers.iter_tables(path, columns=["bogus"]))
    with pytest.raises(TypeError):
        Projection("ip_src")


def test_columns_may_be_any_iterable() -> None:
    path = CORPUS / FILES[0]
    corpus_or_skip()
    cols = SUBSETS["dot11"]
    want = parsers.read_capture(path, columns=cols)
    assert parsers.read_capture(path, columns=iter(cols)).equals(want, null_equal=True)
    assert pl.concat(parsers.iter_tables(path, columns=(c for c in cols))).equals(want, null_equal=True)


def test_empty_projection_is_the_always_columns() -> None:
    path = CORPUS / FILES[0]
    corpus_or_skip()
    df = parsers.read_capture(path, columns=[])
    assert df.columns == list(ALWAYS)
    assert df.get_column("malformed").null_count() == df.height    # nothing decoded, nothing found


def test_stats_keep_layouts_when_rt_layout_not_asked() -> None:
    path = CORPUS / FILES[0]
    corpus_or_skip()
    full, proj = parsers.IngestStats(), parsers.IngestStats()
    parsers.read_capture(path, stats=full)
    df = parsers.read_capture(path, stats=proj, columns=["wlan_seq"])
    assert "rt_layout" not in df.columns
    assert proj.rt_layouts == full.rt_layouts and sum(proj.rt_layouts.values()) == df.height
    assert proj.records == full.records


def test_skipped_parts_are_not_run(monkeypatch) -> None:
    """No CRC without fcs_bad, no option walk without an option column: a part that ran anyway
    would mark every row it saw with an internal error."""
    def boom(*a, **k):
        raise RuntimeError("this part should not run")

    paths = _paths()
    monkeypatch.setattr(radiotap, "_fcs_ok", boom)
    monkeypatch.setattr(transport, "_tcp_options", boom)
    for path in paths:
        df = parsers.read_capture(path, columns=SUBSETS["transport"] + ["phy_rate_mbps"], threads=1)
        assert not df.get_column("malformed").drop_nulls().str.contains("internal error").any(), path
    # and asked for, they do run
    df = parsers.read_capture(CORPUS / FILES[0], columns=["fcs_bad"], threads=1)
    assert df.get_column("malformed").drop_nulls().str.contains("this part should not run").any()


def test_layers_not_asked_for_are_not_decoded(monkeypatch) -> None:
    calls = []
    real = dict(fast.registry.NET_DECODERS)
    monkeypatch.setattr(fast.registry, "NET_DECODERS",
                        {k: (lambda f: lambda *a: calls.append(1) or f(*a))(f) for k, f in real.items()})
    path = CORPUS / "wired/zeek__tcp_reassembly.pcap"
    corpus_or_skip()
    parsers.read_capture(path, columns=["eth_src", "vlan_id"], threads=1)
    assert not calls
    parsers.read_capture(path, columns=["ip_ttl"], threads=1)
    assert calls


def _pcap(frames: list[bytes]) -> bytes:
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    for i, f in enumerate(frames):
        out.append(struct.pack("<IIII", 1_700_000_000 + i, 0, len(f), len(f)) + f)
    return b"".join(out)


def _eth_ipv4(proto: int, l4: bytes, ip_len: int | None = None) -> bytes:
    eth = bytes.fromhex("020000000002" "020000000001" "0800")
    n = 20 + len(l4) if ip_len is None else ip_len
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, n, 1, 0, 64, proto, 0, bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
    return eth + ip + l4


def test_malformed_holds_what_decoded_layers_find(tmp_path) -> None:
    tcp_bad_opt = struct.pack("!HHIIHHHH", 1, 2, 3, 4, (6 << 12) | 0x10, 100, 0, 0) + bytes([8, 1, 0, 0])
    udp_bad_len = struct.pack("!HHHH", 5, 6, 4, 0)
    frames = [
        _eth_ipv4(6, tcp_bad_opt),                 # TCP option length < 2: a tcp_options finding
        _eth_ipv4(17, udp_bad_len),                # UDP length < 8: a transport finding
        _eth_ipv4(17, struct.pack("!HHHH", 5, 6, 8, 0), ip_len=60),   # IP length past the frame
        bytes(10),                                 # shorter than an Ethernet header: link
    ]
    path = tmp_path / "m.pcap"
    path.write_bytes(_pcap(frames))
    full = parsers.read_capture(path).get_column("malformed").to_list()
    assert reason_part(full[0]) == "tcp_options" and full[0] == transport.R_OPT_SHORT
    assert full[1] == transport.R_UDP_LEN
    assert reason_part(full[2]) == "network" and reason_part(full[3]) == "link"
    for cols, want in ((["tcp_mss"], full),
                       (["sport"], [None, full[1], full[2], full[3]]),
                       (["ip_ttl"], [None, None, full[2], full[3]]),
                       (["eth_src"], [None, None, None, full[3]]),
                       (["caplen"], [None] * 4)):
        for decoder in ("fast", "reference"):
            got = parsers.read_capture(path, columns=cols, decoder=decoder)
            assert got.get_column("malformed").to_list() == want, (cols, decoder)
            st = parsers.IngestStats()
            parsers.read_capture(path, columns=cols, decoder=decoder, stats=st)
            assert st.malformed == sum(w is not None for w in want)


def _first_diff(a: pl.DataFrame, b: pl.DataFrame) -> str:
    if a.columns != b.columns or a.height != b.height:
        return f"shape/columns differ: {a.columns} {a.height} vs {b.columns} {b.height}"
    for c in a.columns:
        ne = a[c].ne_missing(b[c]) if a[c].dtype == b[c].dtype else None
        if ne is None:
            return f"{c}: dtype {a[c].dtype} vs {b[c].dtype}"
        if ne.any():
            i = int(ne.arg_max())
            return f"{c} at row {i}: {a[c][i]!r} vs {b[c][i]!r}"
    return "equal"
