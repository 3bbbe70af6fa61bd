"""xlayer.ingest's Parquet stream: the codec choice, many chunks (one row group each) reading back as
read_capture's table, and the Arrow memory pool it decodes with put back afterwards."""
from __future__ import annotations

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import xlayer.ingest as ingest_mod
from parsers.decode.ingest import IngestStats, read_capture
from tests.parsers.test_stream_ingest import _write_capture


@pytest.mark.parametrize("codec, meta_name", [("lz4", "LZ4"), ("none", "UNCOMPRESSED")])
def test_other_codecs_write_the_same_table_in_many_row_groups(tmp_path, monkeypatch, codec, meta_name) -> None:
    src = tmp_path / "s.pcap"
    _write_capture(src, 4000, payload=300)
    # small chunks: the table is written as several row groups, by the writer thread
    monkeypatch.setattr(ingest_mod, "STREAM_CHUNK_BYTES", 256 << 10)
    out = tmp_path / "s.parquet"
    stats = IngestStats()
    rows = ingest_mod.ingest_to_parquet(src, out, stats=stats, progress=False, compression=codec)
    want = read_capture(src)
    assert rows == want.height == stats.records == 4000
    meta = pq.ParquetFile(out).metadata
    assert meta.num_row_groups >= 4
    assert {meta.row_group(g).column(c).compression for g in range(meta.num_row_groups)
            for c in range(meta.num_columns)} == {meta_name}
    assert pl.read_parquet(out).equals(want)
    assert pq.read_table(out).equals(want.to_arrow())


def test_default_codec_is_zstd_and_smaller_than_lz4(tmp_path) -> None:
    src = tmp_path / "s.pcap"
    _write_capture(src, 3000, payload=300)
    zstd, lz4 = tmp_path / "z.parquet", tmp_path / "l.parquet"
    ingest_mod.ingest_to_parquet(src, zstd, progress=False)
    ingest_mod.ingest_to_parquet(src, lz4, progress=False, compression="lz4")
    assert pq.ParquetFile(zstd).metadata.row_group(0).column(0).compression == "ZSTD"
    assert zstd.stat().st_size < lz4.stat().st_size
    assert pl.read_parquet(zstd).equals(pl.read_parquet(lz4))


def test_unknown_codec_is_refused_before_any_file_is_made(tmp_path) -> None:
    src = tmp_path / "s.pcap"
    _write_capture(src, 10, payload=50)
    out = tmp_path / "s.parquet"
    with pytest.raises(ValueError, match="compression must be one of"):
        ingest_mod.ingest_to_parquet(src, out, progress=False, compression="brotli9")
    assert not out.exists()


def test_the_default_arrow_pool_is_put_back_after_success_and_failure(tmp_path) -> None:
    src = tmp_path / "s.pcap"
    _write_capture(src, 500, payload=100)
    before = pa.default_memory_pool().backend_name
    ingest_mod.ingest_to_parquet(src, tmp_path / "a.parquet", progress=False)
    assert pa.default_memory_pool().backend_name == before
    with pytest.raises(OSError):    # the output's directory does not exist
        ingest_mod.ingest_to_parquet(src, tmp_path / "missing" / "b.parquet", progress=False)
    assert pa.default_memory_pool().backend_name == before
    assert not (tmp_path / "missing").exists()


def test_concurrent_ingests_write_the_same_tables_and_put_the_pool_back(tmp_path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    src = tmp_path / "s.pcap"
    _write_capture(src, 2000, payload=200)
    before = pa.default_memory_pool().backend_name
    outs = [tmp_path / f"{k}.parquet" for k in range(3)]
    with ThreadPoolExecutor(max_workers=3) as pool:
        rows = list(pool.map(lambda o: ingest_mod.ingest_to_parquet(src, o, progress=False), outs))
    assert rows == [2000] * 3
    assert pa.default_memory_pool().backend_name == before
    want = read_capture(src)
    for o in outs:
        assert pl.read_parquet(o).equals(want)
