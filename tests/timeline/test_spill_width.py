"""A spilled capture's chunk files hold only the columns with a value in that chunk (a wired capture's
radio and 802.11 columns, all null, cost about half its bytes), and reading them back gives the very
table the same capture gives in memory: same columns, dtypes and order, nulls where nothing was stored,
also when a column has values in some chunks only."""
from __future__ import annotations

import functools
import json
import struct
from pathlib import Path

import polars as pl
import pytest

import parsers
from parsers.schema import SCHEMA
from tests.helpers.common import REPO
from xlayer.metrics import open_timeline
from xlayer.timeline.open import _read_chunks, _stored_columns

_ETH = bytes.fromhex("020000000002" "020000000001" "0800")


def _ip(proto: int, i: int, body: bytes) -> bytes:
    return struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(body), i & 0xFFFF, 0x4000, 64, proto, 0,
                       bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])) + body


def _udp(i: int) -> bytes:
    return _ETH + _ip(17, i, struct.pack("!HHHH", 4000 + i % 7, 9, 8 + 20, 0) + bytes(20))


def _tcp(i: int) -> bytes:
    tcp = struct.pack("!HHIIBBHHH", 5000, 80, 1000 + 100 * i, 7, 5 << 4, 0x18, 512, 0, 0)
    return _ETH + _ip(6, i, tcp + bytes(100))


def _write_pcap(path: Path, frames: list[bytes]) -> None:
    """Write the frames as a microsecond Ethernet pcap, one per millisecond."""
    with path.open("wb") as fh:
        fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, f in enumerate(frames):
            fh.write(struct.pack("<IIII", 1_700_000_000 + i // 1000, (i % 1000) * 1000, len(f), len(f)) + f)


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Decode in chunks of 64 KiB of records (several chunk files per capture); spill under tmp_path."""
    monkeypatch.setattr(parsers, "iter_tables", functools.partial(parsers.iter_tables, chunk_bytes=64 << 10))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))


def _mixed_bundle(d: Path) -> Path:
    """A wired bundle whose first ~200 KiB are UDP only and the rest TCP only: the TCP columns are all
    null in the first chunks, the UDP length in the last ones."""
    d.mkdir()
    frames = [_udp(i) for i in range(3000)] + [_tcp(i) for i in range(1500)] + [_udp(i) for i in range(10)]
    _write_pcap(d / "w.pcap", frames)
    (d / "bundle.json").write_text(json.dumps({"xlayer_bundle": 1, "captures": [
        {"kind": "wired", "vantage": "w", "file": "w.pcap", "clock": "c", "format": "pcap"}]}))
    return d


def _same(a: pl.DataFrame, b: pl.DataFrame) -> None:
    assert a.columns == b.columns
    assert a.schema == b.schema
    assert a.equals(b, null_equal=True)


def test_columns_valued_in_some_chunks_only_read_back_as_in_memory(tmp_path: Path, small_chunks: None) -> None:
    b = _mixed_bundle(tmp_path / "b")
    mem = open_timeline(b, spill=False, cache=False)
    with open_timeline(b, spill=True, cache=False) as sp:
        (e,) = sp.entries()
        raw = sp._spilled[e.file].raw
        held = [set(pl.read_ipc_schema(f)) for f in raw]
        assert len(raw) >= 4
        # the UDP-only chunks hold no TCP column, the TCP-only ones no UDP length: not written as nulls
        assert "tcp_seq" not in held[0] and "udp_len" in held[0]
        assert any("tcp_seq" in h and "udp_len" not in h for h in held)
        assert not any(c.startswith(("wlan_", "rt_", "tsft", "phy")) for h in held for c in h)
        assert sp.columns(e) == mem.columns(e)
        _same(sp.packets(e), mem.packets(e))
        for cols in (["tcp_seq", "frame"], ["udp_len"], ["wlan_ta", "ts_local_ns"], ["tcp_sack", "flow"]):
            _same(sp.packets(e, columns=cols), mem.packets(e, columns=cols))
        assert sp.alignment.captures == mem.alignment.captures
        assert sp.table("flows").equals(mem.table("flows"))


def test_wired_capture_spills_none_of_its_null_columns(tmp_path: Path, small_chunks: None) -> None:
    with open_timeline(REPO / "samples" / "lab-baseline", spill=True, cache=False) as tl:
        for e in tl.entries():
            full = tl.packets(e)
            nulls = {c for c in full.columns if full.get_column(c).null_count() == full.height}
            assert {"wlan_ta", "rt_layout"} <= nulls          # a wired capture: no radio, no 802.11
            for f in tl._spilled[e.file].raw:
                chunk = pl.read_ipc(f)
                assert not nulls & set(chunk.columns)
                # what is written is what the decoder produced, unchanged
                assert all(chunk.schema[c] == full.schema[c] for c in chunk.columns)


def test_read_chunks_fills_what_a_chunk_does_not_hold(tmp_path: Path) -> None:
    a, b = tmp_path / "a.arrow", tmp_path / "b.arrow"
    pl.DataFrame({"frame": [1, 2], "ts_ns": [5, 6], "ip_src": ["10.0.0.1", None]},
                 schema={c: SCHEMA[c] for c in ("frame", "ts_ns", "ip_src")}).write_ipc(a)
    pl.DataFrame({"frame": [3], "ts_ns": [7], "tcp_sack": [[[1, 2]]]},
                 schema={c: SCHEMA[c] for c in ("frame", "ts_ns", "tcp_sack")}).write_ipc(b)
    got = _read_chunks([str(a), str(b)], ["tcp_sack", "ip_src"])
    assert got.schema == pl.Schema({"tcp_sack": SCHEMA["tcp_sack"], "ip_src": SCHEMA["ip_src"]})
    assert got.get_column("ip_src").to_list() == ["10.0.0.1", None, None]
    assert got.get_column("tcp_sack").to_list() == [None, None, [[1, 2]]]
    # none of the columns asked for in a chunk: its rows are still there, as nulls
    assert _read_chunks([str(a)], ["tcp_sack"]).get_column("tcp_sack").to_list() == [None, None]


def test_only_null_columns_of_the_schemas_dtype_are_left_out() -> None:
    df = pl.DataFrame({"frame": pl.Series([None], dtype=pl.Int64), "ts_ns": pl.Series([None], dtype=pl.Int64),
                       "ip_src": pl.Series([None], dtype=pl.String), "ip_dst": pl.Series(["x"], dtype=pl.String),
                       "sport": pl.Series([None], dtype=pl.Int32)})      # not the schema's UInt16: kept
    assert _stored_columns(df) == ["frame", "ts_ns", "ip_dst", "sport"]
