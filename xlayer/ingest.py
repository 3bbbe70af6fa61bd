"""Capture files to Parquet: streaming, with a progress bar, leaving a valid file or none."""
from __future__ import annotations

import base64
import os
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from parsers.columnar import accel
from parsers.decode.ingest import IngestStats, iter_tables
from parsers.schema import SCHEMA
from xlayer.signals import deferred


def _bar(total: int, enabled: bool, desc: str):
    # tqdm disables itself when stderr is not a terminal (disable=None); small files need no bar.
    return tqdm(total=total, unit="B", unit_scale=True, desc=desc, leave=False,
                disable=None if enabled and total > (64 << 20) else True)


# Smaller chunks than read_capture's, decoded one at a time while the one before is compressed and
# written. Each chunk has a fixed cost, so the largest that keeps a 500 MB capture's conversion
# under 256 MB resident (with ARROW_POOL, below). Measured (500 k-frame air capture, load 10-14 on
# 2 cores, CPU s / peak RSS): 12 MB 1.39 s / 228 MB, 16 MB 1.20-1.34 s / 241 MB, 24 MB 1.16-1.28 s /
# ~280 MB (pyarrow's mimalloc pool kept: 16 MB 250 MB). Read lean (iter_tables: a chunk is walked
# only once the one before is taken), one chunk fewer of the file is resident: 16 MB 214-217 MB,
# 20 MB 232-237 MB (CPU 0.76-0.85 s against 0.81-0.85 s, alternating runs), 24 MB ~249 MB.
STREAM_CHUNK_BYTES = 20 << 20
# Dictionary pages only for the string columns (addresses, layouts, reasons: few distinct values).
# Measured on the 500 k-frame air capture (CPU seconds of all the writes / file size), zstd:
# dictionary on every column 0.64 s / 9.4 MB, on the string columns only 0.50 s / 6.5 MB, on none
# 0.50 s / 6.7 MB. Codecs, string dictionaries only: lz4 0.40 s / 11.4 MB, snappy 0.42 s / 14.7 MB,
# none 0.43 s / 98 MB, zstd 0.50 s / 6.5 MB. The whole conversion took 1.69 s of CPU with zstd
# against 1.56 s with lz4 (wall time within the noise of a shared machine): zstd, the smallest file,
# which every Parquet reader knows (the guide says zstd). Measured again with 16 MB chunks (writes
# only): zstd 0.39-0.42 s / 6.4 MB, lz4 0.30 s / 11.5 MB, none 0.32 s / 103 MB; data page v2 0.36 s /
# 7.4 MB; larger write batches or data pages, none saved. The whole conversion (benchmarks/ingest.py,
# same run): zstd 1.31 s CPU, lz4 1.24 s; the writes overlap the decoding (91-99 % of their time),
# so the wall time is the decoding's. zstd stays the default; `compression` chooses another.
# Measured again with the strings handed over as dictionaries (writes only, CPU s / MB): zstd (level
# 1) 0.26 / 6.4, zstd 3 0.28 / 6.3, zstd -1 0.26 / 8.0, zstd -5 0.25 / 10.0, lz4 0.21 / 11.5, snappy
# 0.20 / 14.9, none 0.21 / 103, gzip 1 0.36 / 7.2, brotli 1 0.26 / 6.9; dictionaries on the 75
# numeric columns with at most 1000 distinct values too: zstd 0.35 / 6.9, lz4 0.28 / 10.7. Whole
# conversion: zstd 0.76-0.83 s CPU, lz4 0.74-0.77 s. zstd (level 1) stays: the smallest file for
# ~0.05 s of CPU per 500 k frames, in the writer thread.
COMPRESSION = "zstd"
COMPRESSIONS = ("zstd", "lz4", "snappy", "none")
DICTIONARY_COLUMNS = [name for name, dtype in SCHEMA.items() if dtype == pl.Utf8]
# Row-group statistics (min/max) only where they can skip row groups: the columns that grow with
# the file. Those of the other columns took 0.07 s of the 0.52 s of writing, and every row group
# spans nearly all of their values anyway.
STATISTICS_COLUMNS = ["frame", "ts_ns"]


def _system_pool() -> pa.MemoryPool | None:
    """Return the Arrow memory pool ingest decodes with: the C library's allocator (None if absent)."""
    try:
        return pa.system_memory_pool()
    except (AttributeError, NotImplementedError):
        return None


# pyarrow's default pool (mimalloc) holds its own pages in each thread that allocates (the walk,
# decoding and writer threads): ~10 MB more resident at the same chunk size than malloc's, at no
# measurable CPU cost. The default pool while ingest runs; the previous one again after.
ARROW_POOL = _system_pool()
_pool_lock = threading.Lock()
_pool_users = 0                         # ingests running (in any thread of this process)
_pool_before: pa.MemoryPool | None = None


@contextmanager
def _ingest_pool() -> Iterator[None]:
    """Make ARROW_POOL the default pool while any ingest runs; the first one in sets it, the last
    one out puts the previous pool back."""
    global _pool_users, _pool_before
    if ARROW_POOL is None:
        yield
        return
    with _pool_lock:
        if _pool_users == 0:
            _pool_before = pa.default_memory_pool()
            pa.set_memory_pool(ARROW_POOL)
        _pool_users += 1
    try:
        yield
    finally:
        with _pool_lock:
            _pool_users -= 1
            if _pool_users == 0 and _pool_before is not None:
                pa.set_memory_pool(_pool_before)
                _pool_before = None


def ingest_to_parquet(path: str | os.PathLike, output: str | os.PathLike, decoder: str = "fast",
                      stats: IngestStats | None = None, progress: bool = True, keys=None,
                      compression: str = COMPRESSION) -> int:
    """Write a capture's packet table to Parquet; return the number of rows written.

    Interrupted (KeyboardInterrupt or any BaseException), the rows written so far are closed into a
    valid Parquet file before the exception goes on. On a write error (disk full), no file is left.
    `keys` (parsers.crypto keys) decrypt protected 802.11 frames (not with the tshark decoder).
    `compression` is one of COMPRESSIONS (zstd: the smallest file; lz4 costs ~0.1 s less CPU per
    500 k frames for a file ~1.8 times larger).
    """
    if compression not in COMPRESSIONS:
        raise ValueError(f"compression must be one of {COMPRESSIONS}, not {compression!r}")
    stats = stats if stats is not None else IngestStats()
    output = os.fspath(output)
    if decoder == "tshark":
        from parsers.tshark import tshark_table

        df = tshark_table(path)
        stats.records = stats.decoded = df.height
        df.write_parquet(output, compression=_polars_codec(compression))
        return df.height
    with _ingest_pool():
        return _stream(path, output, decoder, stats, progress, keys, compression)


def _stream(path: str | os.PathLike, output: str, decoder: str, stats: IngestStats, progress: bool,
            keys, compression: str) -> int:
    """Return the rows written: ingest_to_parquet's fast and reference decoders."""
    size = os.path.getsize(path)
    writer = None
    rows = 0
    # Parquet encoding and compression release the GIL: each chunk is written by a second thread
    # while the next one is decoded here. At most one write is in flight, so memory stays bounded.
    pool = ThreadPoolExecutor(max_workers=1)
    pending: Future | None = None
    try:
        with _bar(size, progress, os.path.basename(os.fspath(path))) as bar:
            # One decoding thread (with the compiled walk, a walk thread one chunk ahead: see
            # iter_tables), no walk helper process: a child's peak RSS would include ours at spawn
            # time (reported peaks add up). The writer thread writes each table.
            for table in iter_tables(path, decoder=decoder, stats=stats, progress=bar.update,
                                     chunk_bytes=STREAM_CHUNK_BYTES, walk_helper=False, threads=_threads(),
                                     keys=keys, arrow=True, lean=True):
                with deferred():    # the writer is made and handed whole tables, never cut halfway
                    if writer is None:
                        writer = _writer(output, table, compression)
                    if pending is not None:
                        pending.result()
                    pending = pool.submit(_write, writer, table)
                    rows += table.num_rows
            if pending is not None:
                pending.result()        # the last write: its error surfaces here
                pending = None
        if writer is None:
            from parsers.schema import empty_frame

            empty_frame().write_parquet(output, compression=_polars_codec(compression))
    except OSError:
        _settle(pending)
        if writer is not None:
            try:
                writer.close()
            except OSError:
                pass
            writer = None
        if os.path.exists(output):
            os.unlink(output)
        raise
    finally:
        with deferred():
            _settle(pending)
            pool.shutdown(wait=True)
            if writer is not None:
                writer.close()
    return rows


def _polars_codec(compression: str) -> str:
    """Return polars' name for a codec of COMPRESSIONS."""
    return "uncompressed" if compression == "none" else compression


def _threads() -> int:
    # With the compiled walk, two: large files get the walk thread (one decoding thread still).
    # Without it, one: two pure-Python decoding threads would hold twice the chunks in memory.
    return 2 if accel.AVAILABLE else 1


# The decoder hands each chunk over as an Arrow table whose string columns are dictionary arrays (codes
# into their distinct strings): Parquet's writer stores those codes and the dictionary as they are,
# where a plain string column would be hashed row by row to find the same dictionary (0.26 s of CPU
# against 0.29 s for all the writes of the 500 k-frame air capture, zstd; the same file), and the
# decoding builds neither string views nor a polars frame. Both are the same Parquet column (UTF-8 byte
# arrays); only the Arrow schema stored with the file (which Arrow readers restore) tells them apart,
# so the plain schema is stored: the file reads back as the table read_capture returns.
_DIRECT = hasattr(pq.ParquetWriter, "add_key_value_metadata")


def _writer(output: str, table: pa.Table, compression: str = COMPRESSION) -> pq.ParquetWriter:
    """Return a Parquet writer for tables shaped as `table` (dictionary pages for strings only,
    statistics for frame and ts_ns only)."""
    plain = pl.DataFrame(schema={c: SCHEMA[c] for c in table.column_names}).to_arrow().schema
    schema = table.schema if _DIRECT else plain
    writer = pq.ParquetWriter(output, schema, compression=compression,
                              use_dictionary=[c for c in DICTIONARY_COLUMNS if c in schema.names],
                              write_statistics=[c for c in STATISTICS_COLUMNS if c in schema.names],
                              store_schema=not _DIRECT)
    if _DIRECT:     # the key and encoding Arrow's own writer uses (base64 of the IPC schema message)
        stored = base64.b64encode(plain.serialize().to_pybytes()).decode()
        writer.add_key_value_metadata({"ARROW:schema": stored})
    return writer


def _write(writer: pq.ParquetWriter, table: pa.Table) -> None:
    # in the writer thread
    writer.write_table(table if _DIRECT else table.cast(writer.schema))


def _settle(pending: Future | None) -> None:
    """Wait for a write still in flight (its error, if any, is the caller's to report already)."""
    if pending is not None:
        try:
            pending.result()
        except BaseException:  # noqa: BLE001 - we are already handling a failure
            pass


def scan_stats(path: str | os.PathLike, decoder: str = "fast", progress: bool = True) -> IngestStats:
    """Return the counts of a full decoding pass over a capture, keeping no table."""
    stats = IngestStats()
    size = os.path.getsize(path)
    with _bar(size, progress, os.path.basename(os.fspath(path))) as bar:
        for _ in iter_tables(path, decoder=decoder, stats=stats, progress=bar.update):
            pass
    return stats


__all__ = ["ingest_to_parquet", "scan_stats", "SCHEMA"]
