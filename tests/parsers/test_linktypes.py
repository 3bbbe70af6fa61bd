"""Link types we do not decode give rows that say so; every decoded link type is registered twice."""
from __future__ import annotations

import struct

import pytest

from parsers import IngestStats, read_capture
from parsers.decode import registry

from tests.helpers.pcapgen import udp_frame


def _pcap(path, linktype: int, frames: list[bytes]) -> None:
    with open(path, "wb") as fh:
        fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype))
        for i, f in enumerate(frames):
            fh.write(struct.pack("<IIII", 1_700_000_000 + i, 0, len(f), len(f)))
            fh.write(f)


@pytest.mark.parametrize("decoder", ["fast", "reference"])
def test_undecoded_linktype_rows_carry_the_reason(tmp_path, decoder: str) -> None:
    path = tmp_path / "user0.pcap"
    _pcap(path, 147, [b"\x01\x02\x03", b"", b"hello world"])
    st = IngestStats()
    df = read_capture(path, decoder=decoder, stats=st)
    assert df.height == 3 and st.malformed == 3 and st.decoded == 0
    assert set(df.get_column("malformed")) == {"link type 147 (LINKTYPE 147) is not decoded"}
    assert df.get_column("linktype").to_list() == [147] * 3
    assert df.get_column("caplen").to_list() == [3, 0, 11]


def test_the_issue_link_types_have_both_decoders() -> None:
    wanted = {127, 105, 192, 119, 163, 1, 113, 276, 101, 228, 229, 12, 14, 0, 108}
    assert wanted <= set(registry.LINK_DECODERS)
    assert wanted <= set(registry.LINK_FRAME_DECODERS)


@pytest.mark.parametrize("linktype, prefix", [
    (1, b""),                                                   # Ethernet frame as is
    (101, None), (228, None), (12, None), (14, None),           # raw IPv4: the Ethernet header dropped
    (0, struct.pack("<I", 2)),                                  # BSD loopback, AF_INET in host order
    (108, struct.pack(">I", 2)),                                # OpenBSD loop, AF_INET in network order
])
def test_ipv4_reaches_transport_through_each_link_type(tmp_path, linktype: int, prefix) -> None:
    frame = udp_frame(7)
    payload = frame[14:] if prefix is None else prefix + (frame[14:] if linktype != 1 else frame)
    path = tmp_path / f"lt{linktype}.pcap"
    _pcap(path, linktype, [payload])
    for decoder in ("fast", "reference"):
        row = read_capture(path, decoder=decoder).row(0, named=True)
        assert row["malformed"] is None, (linktype, decoder, row["malformed"])
        assert (row["ip_src"], row["ip_dst"], row["ip_id"], row["sport"], row["dport"]) == \
            ("10.0.0.1", "10.0.0.2", 7, 1031, 9), (linktype, decoder)
