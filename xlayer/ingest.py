"""Capture files to Parquet: streaming, with a progress bar, leaving a valid file or none."""
from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor

import pyarrow.parquet as pq
from tqdm import tqdm

from parsers.decode.ingest import IngestStats, iter_tables
from parsers.schema import SCHEMA
from xlayer.signals import deferred


def _bar(total: int, enabled: bool, desc: str):
    # tqdm disables itself when stderr is not a terminal (disable=None); small files need no bar.
    return tqdm(total=total, unit="B", unit_scale=True, desc=desc, leave=False,
                disable=None if enabled and total > (64 << 20) else True)


# Smaller chunks than read_capture's, decoded one at a time while the one before is compressed and
# written: a 500 MB capture's conversion stays near 210 MB resident (limit: 256 MB).
STREAM_CHUNK_BYTES = 12 << 20


def ingest_to_parquet(path: str | os.PathLike, output: str | os.PathLike, decoder: str = "fast",
                      stats: IngestStats | None = None, progress: bool = True, keys=None) -> int:
    """Write a capture's packet table to Parquet; return the number of rows written.

    Interrupted (KeyboardInterrupt or any BaseException), the rows written so far are closed into a
    valid Parquet file before the exception goes on. On a write error (disk full), no file is left.
    `keys` (parsers.crypto keys) decrypt protected 802.11 frames (not with the tshark decoder).
    """
    stats = stats if stats is not None else IngestStats()
    output = os.fspath(output)
    if decoder == "tshark":
        from parsers.tshark import tshark_table

        df = tshark_table(path)
        stats.records = stats.decoded = df.height
        df.write_parquet(output)
        return df.height
    size = os.path.getsize(path)
    writer = None
    rows = 0
    # Parquet encoding and zstd release the GIL: each chunk is written by a second thread while the
    # next one is decoded here. At most one write is in flight, so memory stays bounded.
    pool = ThreadPoolExecutor(max_workers=1)
    pending: Future | None = None
    try:
        with _bar(size, progress, os.path.basename(os.fspath(path))) as bar:
            # One decoding thread, no walk helper process: the writer thread has the second core,
            # and a child's peak RSS would include ours at spawn time (reported peaks add up).
            for df in iter_tables(path, decoder=decoder, stats=stats, progress=bar.update,
                                  chunk_bytes=STREAM_CHUNK_BYTES, walk_helper=False, threads=1, keys=keys):
                with deferred():    # the writer is made and handed whole tables, never cut halfway
                    table = df.to_arrow()
                    if writer is None:
                        writer = pq.ParquetWriter(output, table.schema, compression="zstd")
                    if pending is not None:
                        pending.result()
                    pending = pool.submit(writer.write_table, table)
                    rows += df.height
            if pending is not None:
                pending.result()        # the last write: its error surfaces here
                pending = None
        if writer is None:
            from parsers.schema import empty_frame

            empty_frame().write_parquet(output)
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
