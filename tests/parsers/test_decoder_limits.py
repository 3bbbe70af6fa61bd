"""Interface ids at and past the iface column's range (UInt16), in pcapng files and in the decoders:
never wrapped, the same from the fast and the reference decoder, and no slowdown with many IDBs."""
from __future__ import annotations

import struct

import numpy as np
import polars as pl
import pytest

from parsers.columnar.columns import Projection, to_polars
from parsers.decode.fast import IFACE_MAX, IFACE_TOO_LARGE, decode_chunk
from parsers.decode.ingest import IngestStats, _decode, read_capture
from parsers.formats.pcapng import MAX_INTERFACES
from parsers.formats.records import CaptureError, RecordChunk
from parsers.schema import SCHEMA
from tests.helpers.common import deadline

# Ethernet + IPv4 (20 bytes, UDP, 10.0.0.1 -> 10.0.0.2) + UDP header: decodes without a reason
FRAME = (bytes(6) + bytes.fromhex("020000000001") + b"\x08\x00"
         + bytes.fromhex("4500001c00000000401100000a0000010a000002") + bytes.fromhex("0035003500080000"))
DECODERS = ("fast", "reference")


def _block(btype: int, body: bytes) -> bytes:
    body += bytes(-len(body) % 4)
    return struct.pack("<II", btype, len(body) + 12) + body + struct.pack("<I", len(body) + 12)


def _shb() -> bytes:
    return _block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))


def _idb(tsresol: int | None = None, tsoffset: int = 0) -> bytes:
    opts = b""
    if tsresol is not None:
        opts += struct.pack("<HHB3x", 9, 1, tsresol)
    if tsoffset:
        opts += struct.pack("<HHq", 14, 8, tsoffset)
    return _block(1, struct.pack("<HHI", 1, 0, 0) + (opts + bytes(4) if opts else b""))


def _epb(iface: int, ticks: int = 0) -> bytes:
    return _block(6, struct.pack("<IIIII", iface, ticks >> 32, ticks & 0xFFFFFFFF, len(FRAME), len(FRAME))
                  + FRAME)


def _read_both(path, **kw) -> dict[str, tuple[pl.DataFrame, IngestStats]]:
    out = {}
    for dec in DECODERS:
        st = IngestStats()
        out[dec] = (read_capture(path, decoder=dec, stats=st, threads=1, **kw), st)
    return out


def _agree(got: dict) -> tuple[pl.DataFrame, IngestStats]:
    (fast, fst), (ref, rst) = got["fast"], got["reference"]
    assert fast.equals(ref, null_equal=True)
    assert (fst.records, fst.malformed, fst.skipped_bytes, fst.error) == \
           (rst.records, rst.malformed, rst.skipped_bytes, rst.error)
    return fast, fst


def test_limits_match_the_schema():
    assert SCHEMA["iface"] == pl.UInt16
    assert IFACE_MAX == np.iinfo(np.uint16).max == MAX_INTERFACES - 1


def _chunk(ifaces: list[int], caplens: list[int] | None = None) -> RecordChunk:
    n = len(ifaces)
    data = np.frombuffer(FRAME * n, dtype=np.uint8)
    i64 = lambda v: np.asarray(v, dtype=np.int64)  # noqa: E731
    return RecordChunk(data=data, offset=i64(np.arange(n) * len(FRAME)), caplen=i64(caplens or [len(FRAME)] * n),
                       wirelen=i64([len(FRAME)] * n), ts_ns=i64(np.arange(n)), linktype=i64([1] * n),
                       iface=i64(ifaces), frame=i64(np.arange(1, n + 1)))


@pytest.mark.parametrize("columns", [None, ["ip_src"], ["sport"]])
def test_decoders_never_wrap_an_interface_id(columns):
    """99,999 as a UInt16 is 34,463: such a row is malformed, its iface null, in both decoders."""
    chunk = _chunk([0, 99_999, IFACE_MAX, IFACE_MAX + 1, 3])
    proj = Projection(columns)
    fast = to_polars(decode_chunk(chunk, proj)[0])
    ref = _decode(chunk, "reference", proj)[1]
    assert fast.equals(ref, null_equal=True)
    if columns is None:
        assert fast["iface"].to_list() == [0, None, IFACE_MAX, None, 3]
    assert fast["malformed"].to_list() == [None, IFACE_TOO_LARGE, None, IFACE_TOO_LARGE, None]
    if columns == ["ip_src"]:   # the rest of a row with an unfit id is still decoded
        assert fast["ip_src"].to_list() == ["10.0.0.1"] * 5


def test_unfit_id_reason_survives_the_per_frame_fallback():
    """A record cut inside its IPv4 header goes to the reference decoder from the fast path: the
    interface reason must stay its first reason there too."""
    cut = 14 + 10
    chunk = _chunk([99_999, 1, 70_000], caplens=[cut, cut, len(FRAME)])
    table, fallback = decode_chunk(chunk)
    fast = to_polars(table)
    ref = _decode(chunk, "reference", Projection(None))[1]
    assert fallback == 2
    assert fast.equals(ref, null_equal=True)
    assert fast["iface"].to_list() == [None, 1, None]
    assert fast["malformed"].to_list()[0] == IFACE_TOO_LARGE == fast["malformed"].to_list()[2]
    assert fast["ip_version"].to_list() == [4, 4, 4]      # the cut rows decoded as far as they go


def test_most_interfaces_the_column_holds_are_read(tmp_path):
    path = tmp_path / "full.pcapng"
    path.write_bytes(_shb() + _idb() * MAX_INTERFACES + _epb(0) + _epb(IFACE_MAX) + _epb(12_345))
    df, st = _agree(_read_both(path))
    assert df["iface"].to_list() == [0, IFACE_MAX, 12_345]
    assert df["malformed"].null_count() == 3 and st.error is None and st.skipped_bytes == 0
    assert len(st.interfaces) == MAX_INTERFACES


def test_one_interface_too_many_in_the_first_section_refuses_the_file(tmp_path):
    """100,000 IDBs: once a traceback (reference) and a wrapped id 34,463 (fast); now one clear error."""
    path = tmp_path / "many.pcapng"
    path.write_bytes(_shb() + _idb() * 100_000 + _epb(0) + _epb(99_999))
    for dec in DECODERS:
        with pytest.raises(CaptureError, match=f"more than {MAX_INTERFACES} interfaces") as exc:
            read_capture(path, decoder=dec)
        assert "tshark refuses" not in str(exc.value)   # tshark reads it: the limit is ours


def test_one_interface_too_many_later_ends_reading_with_the_rest_skipped(tmp_path):
    first = _shb() + _idb() + _epb(0, 5) + _epb(0, 6)
    second = _shb() + _idb() * (MAX_INTERFACES - 1)
    rest = _idb() + _epb(0, 7)
    path = tmp_path / "later.pcapng"
    path.write_bytes(first + second + rest)
    df, st = _agree(_read_both(path))
    assert df["frame"].to_list() == [1, 2] and df["iface"].to_list() == [0, 0]
    assert f"more than {MAX_INTERFACES} interfaces" in st.error
    assert st.skipped_bytes == len(rest)


def test_a_packet_naming_no_interface_ends_reading_counted(tmp_path):
    """As tshark: an EPB whose interface has no IDB in its section ends reading; the rest is skipped."""
    head = _shb() + _idb() + _idb() + _epb(1, 1)
    bad = _epb(2, 2) + _epb(0, 3)
    path = tmp_path / "noidb.pcapng"
    path.write_bytes(head + bad)
    df, st = _agree(_read_both(path))
    assert df["iface"].to_list() == [1]
    assert "interface 2 is not described in this section (2 interfaces)" in st.error
    assert st.skipped_bytes == len(bad) and st.records == 1


def test_interfaces_of_several_resolutions_in_one_run_keep_their_time_stamps(tmp_path):
    # us (default), ns, 2^-10 s with an offset of 100 s: one run of EPBs alternating between them
    idbs = _idb() + _idb(tsresol=9) + _idb(tsresol=0x80 | 10, tsoffset=100)
    pkts = [(0, 1_500_000), (1, 7_000_000_123), (2, 3 * 1024 + 512), (0, 2), (2, 1)]
    path = tmp_path / "res.pcapng"
    path.write_bytes(_shb() + idbs + b"".join(_epb(i, t) for i, t in pkts))
    df, _ = _agree(_read_both(path))
    assert df["ts_ns"].to_list() == [1_500_000_000, 7_000_000_123, 103_500_000_000, 2_000,
                                     100_000_000_000 + 10**9 // 1024]


def test_alternating_idbs_and_packets_read_in_linear_time(tmp_path):
    """20,000 IDB/EPB pairs took minutes (every packet run rebuilt per-interface lists); seconds now.
    The bound is generous: a loaded machine stays far below it, the quadratic walk far above."""
    n = 20_000
    path = tmp_path / "alternating.pcapng"
    path.write_bytes(_shb() + b"".join(_idb() + _epb(i, i) for i in range(n)))
    st = IngestStats()
    with deadline(120):
        df = read_capture(path, stats=st, threads=1)
    assert df["iface"].to_list() == list(range(n)) and st.error is None and df["ts_ns"].to_list()[:3] == [0, 1000, 2000]
