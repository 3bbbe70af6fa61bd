"""Streaming a large capture: decoded chunks leave the resident set at once, and the Parquet stream
(dictionary pages for string columns only) holds exactly what read_capture returns."""
from __future__ import annotations

import os
import struct
import sys
import zlib
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from parsers.columnar import accel
from parsers.decode import ingest as pingest
from parsers.decode.ingest import IngestStats, iter_tables, read_capture
from parsers.formats.containers import open_capture
from parsers.schema import SCHEMA
from xlayer.ingest import ingest_to_parquet

_ON_LINUX = sys.platform.startswith("linux") and os.path.exists("/proc/self/smaps")


def _frame(i: int, payload: int) -> bytes:
    """Return one radiotap record body: Flags (FCS at end) + rate + channel, a QoS data frame with
    LLC/SNAP, IPv4 and TCP, and its correct FCS."""
    rt = struct.pack("<BBHI", 0, 0, 14, 0b1110) + struct.pack("<BBHH", 0x10, 108, 5180, 0x0140)
    mac = struct.pack("<HH6s6s6sH", 0x0288, 44, bytes.fromhex("020000000001"), bytes.fromhex("020000000002"),
                      bytes.fromhex("020000000003"), (i % 4096) << 4) + b"\x00\x00"
    llc = b"\xaa\xaa\x03\x00\x00\x00\x08\x00"
    sack = b""
    if i % 5 == 0:      # every fifth segment: NOP, NOP and one SACK block (a tcp_sack list value)
        sack = b"\x01\x01\x05\x0a" + struct.pack(">II", 5000 + i, 6000 + i)
    tcp = struct.pack(">HHIIBBHHH", 5201, 40000 + i % 7, 1000 + 1448 * i, 77, (5 + len(sack) // 4) << 4,
                      0x10, 65535, 0, 0) + sack
    body = tcp + bytes(payload)
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(body), i & 0xFFFF, 0, 64, 6, 0,
                     bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2 + i % 3]))
    wlan = mac + llc + ip + body
    return rt + wlan + struct.pack("<I", zlib.crc32(wlan))


def _write_capture(path: Path, records: int, payload: int = 900) -> int:
    """Write a nanosecond pcap (link type 127) of `records` frames; return its size."""
    parts = [struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 127)]
    for i in range(records):
        f = _frame(i, payload)
        sec, ns = 1_700_000_000 + i // 1000, (i % 1000) * 1_000_000
        parts.append(struct.pack("<IIII", sec, ns, len(f), len(f)) + f)
    path.write_bytes(b"".join(parts))
    return path.stat().st_size


def _mapped_kb(path: Path) -> int:
    """Return how many kB of the file's mappings in this process are resident."""
    total, inside = 0, False
    with open("/proc/self/smaps") as fh:
        for line in fh:
            head = line.split()
            if head and "-" in head[0] and not head[0].endswith(":"):
                inside = len(head) > 5 and head[5] == str(path)
            elif inside and head[0] == "Rss:":
                total += int(head[1])
    return total


@pytest.mark.skipif(not _ON_LINUX, reason="reads resident pages from /proc/self/smaps")
def test_release_before_drops_pages_below_the_offset(tmp_path) -> None:
    src = tmp_path / "a.pcap"
    size = _write_capture(src, 4000)
    with open_capture(src) as cap:
        assert int(cap.data.sum(dtype=np.uint64)) > 0       # every page touched: all resident
        assert _mapped_kb(src) >= size // 1024 - 8
        cap.release_before(size // 2)
        held = _mapped_kb(src)
        assert held <= size // 2048 + 8, held                # the first half is gone
        cap.release_before(size // 4)                        # an earlier offset: nothing changes
        assert _mapped_kb(src) == held
        assert int(cap.data[: size // 2].sum(dtype=np.uint64)) > 0   # still readable (faulted back in)


@pytest.mark.skipif(not _ON_LINUX, reason="reads resident pages from /proc/self/smaps")
def test_chunks_release_what_is_marked_done_before_their_keep_lag(tmp_path) -> None:
    src = tmp_path / "a.pcap"
    size = _write_capture(src, 8000)
    chunk = 1 << 20
    with open_capture(src, chunk_bytes=chunk) as cap:
        it = cap.chunks(keep=100)        # the lag alone would keep every chunk's pages
        first = next(it)
        second = next(it)
        held = _mapped_kb(src)
        assert held >= 2 * chunk // 1024 - 64
        end = int(second.offset[-1] + second.caplen[-1])
        cap.mark_done(end)
        assert _mapped_kb(src) == held           # marking alone releases nothing
        third = next(it)                         # the walk of the next chunk releases them
        assert _mapped_kb(src) <= held - chunk // 1024, (_mapped_kb(src), held)
        cap.release_done()                       # and so does asking for it: nothing left to drop
        assert len(first) and len(third) and size > 3 * chunk


@pytest.mark.skipif(not (_ON_LINUX and accel.AVAILABLE),
                    reason="needs /proc/self/smaps and the compiled walk")
def test_walk_thread_read_stays_within_a_few_chunks_resident(tmp_path) -> None:
    # A file large enough for the walk thread (PREP_MIN_BYTES): the decoded chunks' pages are
    # dropped as the reader goes, whatever the threads' timing.
    src = tmp_path / "big.pcap"
    chunk = 2 << 20
    size = _write_capture(src, pingest.PREP_MIN_BYTES // 990 + 6000)
    assert size >= pingest.PREP_MIN_BYTES
    stats, rows, held = IngestStats(), 0, []
    for df in iter_tables(src, chunk_bytes=chunk, threads=2, stats=stats):
        rows += df.height
        held.append(_mapped_kb(src))
    assert rows == stats.records == stats.decoded
    assert len(held) > 20
    # in flight: the chunk decoded, PREP_AHEAD queued, one walked ahead, one the decoder took
    # early; + 2 MB: the mapping is faulted in and out in large folios
    assert max(held) <= ((pingest.PREP_AHEAD + 3) * chunk + (2 << 20)) // 1024, held
    assert max(held) < size // 1024 // 4


@pytest.mark.skipif(not (_ON_LINUX and accel.AVAILABLE),
                    reason="needs /proc/self/smaps and the compiled walk")
def test_lean_read_walks_a_chunk_only_once_the_one_before_is_taken(tmp_path) -> None:
    # lean: no chunk waits walked in the queue, so one chunk fewer is resident than above
    src = tmp_path / "big.pcap"
    chunk = 2 << 20
    _write_capture(src, pingest.PREP_MIN_BYTES // 990 + 6000)
    want = list(iter_tables(src, chunk_bytes=chunk, threads=2))
    stats, held, got = IngestStats(), [], []
    for df in iter_tables(src, chunk_bytes=chunk, threads=2, stats=stats, lean=True):
        got.append(df)
        held.append(_mapped_kb(src))
    assert len(got) == len(want) > 20 and all(a.equals(b) for a, b in zip(got, want))
    assert stats.records == stats.decoded == sum(df.height for df in got)
    # the chunk decoded and the one walked meanwhile (at the start, a third: the decoder takes two
    # chunks before its first table); + 2 MB: large folios
    assert max(held) <= (3 * chunk + (2 << 20)) // 1024, held


def test_stream_to_parquet_equals_read_capture_with_string_dictionaries(tmp_path) -> None:
    # string columns dictionary-encoded, statistics only for the columns that grow with the file
    src = tmp_path / "s.pcap"
    _write_capture(src, 3000, payload=200)
    out = tmp_path / "s.parquet"
    stats = IngestStats()
    rows = ingest_to_parquet(src, out, stats=stats, progress=False)
    want = read_capture(src)
    assert rows == want.height == 3000 and stats.malformed == 0
    assert want.get_column("tcp_sack").drop_nulls().len() == 600
    assert pl.read_parquet(out).equals(want)
    # Arrow readers get the types df.to_arrow() has (plain strings, not the views written)
    back = pq.read_table(out)
    assert back.schema.equals(want.to_arrow().schema)
    assert back.equals(want.to_arrow())
    meta = pq.ParquetFile(out).metadata
    for g in range(meta.num_row_groups):
        for c in range(meta.num_columns):
            col = meta.row_group(g).column(c)
            name = col.path_in_schema.split(".")[0]
            if SCHEMA[name] == pl.Utf8:
                assert col.has_dictionary_page, name
            else:
                assert not col.has_dictionary_page, name
            assert col.is_stats_set == (name in ("frame", "ts_ns")), name
        assert meta.row_group(g).column(0).compression == "ZSTD"


def _write_flawed_capture(path: Path, records: int) -> None:
    """Write _write_capture's frames with two kinds of flaw among them: an 802.11 protocol version 1
    (every 7th frame from the 3rd) and an IPv4 header length of 16 bytes (every 11th from the 5th)."""
    parts = [struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 127)]
    for i in range(records):
        f = bytearray(_frame(i, 200))
        wlan = f[14:-4]
        if i % 7 == 3:
            wlan[0] |= 0x01
        if i % 11 == 5:
            wlan[26 + 8] = 0x44
        f = f[:14] + wlan + struct.pack("<I", zlib.crc32(bytes(wlan)))
        parts.append(struct.pack("<IIII", 1_700_000_000 + i // 1000, (i % 1000) * 1_000_000, len(f), len(f)) + f)
    path.write_bytes(b"".join(parts))


@pytest.mark.parametrize("decoder", ["fast", "reference"])
def test_arrow_tables_are_the_frames_with_dictionary_strings_and_the_same_counts(tmp_path, decoder) -> None:
    from parsers.columnar.columns import DICT_TYPE, to_polars

    src = tmp_path / "flawed.pcap"
    _write_flawed_capture(src, 600)
    s_frames, s_tables = IngestStats(), IngestStats()
    frames = list(iter_tables(src, decoder=decoder, chunk_bytes=32 << 10, stats=s_frames, threads=1))
    tables = list(iter_tables(src, decoder=decoder, chunk_bytes=32 << 10, stats=s_tables, threads=1, arrow=True))
    assert len(tables) == len(frames) > 2
    strings = [c for c, dt in SCHEMA.items() if dt == pl.Utf8]
    for df, t in zip(frames, tables):
        assert t.column_names == df.columns
        assert all(t.schema.field(c).type == DICT_TYPE for c in strings)
        assert to_polars(t).equals(df)
    assert len(s_frames.malformed_reasons) == 2
    assert s_tables.as_dict() == s_frames.as_dict()
    assert list(s_tables.malformed_reasons.items()) == list(s_frames.malformed_reasons.items())
