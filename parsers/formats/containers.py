"""Capture files (pcap, pcapng) as a stream of RecordChunks over one read-only memory map.

    with open_capture("air.pcap") as cap:
        for chunk in cap.chunks():      # about chunk_bytes of records each
            ...                         # chunk.data[chunk.offset[i]:][:chunk.caplen[i]] is packet i

The file is never read whole: `chunk.data` is a uint8 view of the mapping, and the pages of chunks
already handed out are released (MADV_DONTNEED) when the next chunk is asked for, so memory stays flat
on files larger than RAM. Record headers are walked by one tight loop (C in parsers/_walk.c, or Python
in pcap.py and pcapng.py when that is not built); everything else is numpy. gzip-compressed captures
are decompressed to an unlinked temporary file, never to more than `decompressed_cap` bytes: a stream
that would unpack further (a "zip bomb") is refused with a CaptureError rather than fill the disk.
`CappedReader` puts the same cap on any decompressing file object (the host-state readers use it).
"""
from __future__ import annotations

import gzip
import io
import mmap
import os
import tempfile
import threading
import zlib
from collections.abc import Iterator

import numpy as np

from parsers.columnar import accel
from parsers.formats.detect import GZIP_MAGIC, PCAPNG_MAGIC, pcap_magic
from parsers.formats.pcap import PcapReader
from parsers.formats.pcapng import PcapngReader
from parsers.formats.records import CaptureError, ContainerStats, Interface, RecordChunk

_PAGE = mmap.PAGESIZE

# What a compressed stream may unpack to: never more than MAX_DECOMPRESSED_BYTES, and past
# RATIO_FREE_BYTES never more than MAX_RATIO times its compressed size.  Captures and ss text
# compress 2-30x; a stream of zeros compresses ~1000x, which only a crafted file needs.
MAX_DECOMPRESSED_BYTES = 64 << 30
MAX_RATIO = 200
RATIO_FREE_BYTES = 64 << 20


class DecompressionLimit(CaptureError):
    """A compressed stream unpacks to more than its cap (see `decompressed_cap`)."""

    def __init__(self, message: str, cap: int):
        super().__init__(message)
        self.cap = cap


def decompressed_cap(compressed_bytes: int, max_bytes: int | None = None, ratio: int | None = None,
                     free_bytes: int | None = None) -> int:
    """Return how many bytes a stream of `compressed_bytes` may decompress to (module constants by default)."""
    max_bytes = MAX_DECOMPRESSED_BYTES if max_bytes is None else max_bytes
    ratio = MAX_RATIO if ratio is None else ratio
    free_bytes = RATIO_FREE_BYTES if free_bytes is None else free_bytes
    return min(max_bytes, max(free_bytes, ratio * max(compressed_bytes, 0)))


class CappedReader(io.RawIOBase):
    """A read-only stream over a decompressing file object that raises DecompressionLimit once more
    than `cap` bytes have come out of it (wrap it in io.BufferedReader for lines)."""

    def __init__(self, raw, cap: int, name: str = ""):
        super().__init__()
        self._raw, self.cap, self.name, self.total = raw, int(cap), name, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        # never ask for more than one byte past the cap: that byte is the proof it was exceeded
        want = min(len(buf), self.cap - self.total + 1)
        data = self._raw.read(want)
        n = len(data)
        self.total += n
        if self.total > self.cap:
            raise DecompressionLimit(f"{self.name}: decompresses to more than {self.cap:,} bytes, the cap for "
                                     f"its compressed size (at most {MAX_RATIO}x); refused as a decompression "
                                     "bomb (decompress it yourself if it is genuine)", self.cap)
        buf[:n] = data
        return n


class CaptureFile:
    """An open capture: format, interfaces and counts, and its records as chunks."""

    def __init__(self, path: str, fh, chunk_bytes: int, warnings: list[str]):
        self.path = path
        self.chunk_bytes = max(int(chunk_bytes), 1)
        self.stats = ContainerStats(warnings=list(warnings))
        self.size = os.fstat(fh.fileno()).st_size
        if self.size == 0:
            raise CaptureError(f"{path}: empty file (0 bytes), not a capture")
        self._mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        self.data = np.frombuffer(self._mm, dtype=np.uint8)
        self._released = 0                  # pages below this offset are out of the resident set
        self._done_upto = 0                 # records below this offset are done with (mark_done)
        self._release_lock = threading.Lock()   # the walk thread and the reading thread both release
        self._reader = None
        self._iterated = False
        self.gzipped = False
        try:
            self._reader = self._open_reader()
        except BaseException:
            self.close()
            raise
        self.format = self._reader.format
        self.stats.format = self.format

    def _open_reader(self) -> PcapReader | PcapngReader:
        head = bytes(self._mm[:16])
        if head[:4] == PCAPNG_MAGIC:
            return PcapngReader(self.path, self._mm, self.data, self.stats)
        if pcap_magic(head) is not None:
            return PcapReader(self.path, self._mm, self.data, self.stats)
        if head[:2] == GZIP_MAGIC:
            raise CaptureError(f"{self.path}: gzip inside gzip (or a corrupt gzip stream); gunzip it first")
        raise CaptureError(f"{self.path}: not a pcap or pcapng file (first bytes: {head.hex()})")

    @property
    def interfaces(self) -> list[Interface]:
        """Return the interfaces met so far (pcapng: grows as IDBs are read); index = global iface id."""
        return self._reader.interfaces if self._reader else []

    @property
    def names(self) -> dict[str, list[str]]:
        """Return address -> host names from pcapng Name Resolution Blocks read so far."""
        return self._reader.names if self._reader else {}

    @property
    def sections(self) -> list[dict[str, str]]:
        """Return per pcapng section its SHB hardware / os / userappl strings (empty for pcap)."""
        return self._reader.sections if self._reader else []

    @property
    def if_stats(self) -> dict[int, dict[str, int]]:
        """Return global iface id -> latest Interface Statistics Block counters (ifrecv, ifdrop, ...)."""
        return self._reader.if_stats if self._reader else {}

    def chunks(self, keep: int = 0, first_bytes: int | None = None) -> Iterator[RecordChunk]:
        """Yield the file's packet records as RecordChunks of about chunk_bytes of records each (the
        first of about first_bytes, if given: a pipeline's next stage can start sooner).

        Pages of a chunk are released when the next one is asked for; with keep=k, only once k more
        chunks have been handed out (for callers that decode several chunks at once).
        """
        if self._iterated:
            raise RuntimeError("chunks() can be iterated once per open_capture()")
        self._iterated = True
        reader, pages = self._reader, self.pages(keep)
        pos, done = reader.start, False
        step = max(int(first_bytes), 1) if first_bytes else self.chunk_bytes
        while not done:
            pieces, pos, done = reader.walk(pos, pos + step)
            step = self.chunk_bytes
            chunk = _concat(pieces)
            if len(chunk):
                self.stats.records += len(chunk)
                yield chunk
            pages.done(min(pos, self.size))

    def pages(self, keep: int = 0) -> PageRelease:
        """Return a tracker that releases the pages of chunks once `keep` later ones are handed out."""
        return PageRelease(self, keep)

    def release_before(self, end: int) -> None:
        """Drop the pages wholly below file offset `end` from the resident set (once per page); for a
        reader done with every record before `end` sooner than the chunks' `keep` lag says."""
        with self._release_lock:
            if end > self._released:
                self._released = max(self._released, self._release(self._released, end))

    def mark_done(self, end: int) -> None:
        """Note that every record before file offset `end` is done with: its pages are released when
        the next chunk is walked (by the thread that walks, not the caller's)."""
        self._done_upto = max(self._done_upto, end)

    def release_done(self) -> None:
        """Release the pages of the records marked done (mark_done) now."""
        self.release_before(self._done_upto)

    def _release(self, start: int, upto: int) -> int:
        # Pages below the next record are done with: drop them from our resident set (the page cache
        # keeps them, and a caller who still looks at an old chunk faults them back in).
        end = upto // _PAGE * _PAGE
        if end > start and hasattr(mmap, "MADV_DONTNEED") and not self._mm.closed:
            if accel.AVAILABLE:     # the same call, without holding the GIL (a decoding thread runs)
                accel.dontneed(self._mm, start, end - start)
            else:
                self._mm.madvise(mmap.MADV_DONTNEED, start, end - start)
            return end
        return start

    def adopt(self, state: dict) -> None:
        """Take the counts and the interfaces that a walk of this file in another process found."""
        self._iterated = True
        self.stats = state["stats"]
        reader = self._reader
        reader.interfaces[:] = state["interfaces"]
        reader.names = state["names"]
        reader.sections = state["sections"]
        reader.if_stats = state["if_stats"]

    def close(self) -> None:
        """Release the mapping (it stays alive while the caller still holds chunk arrays)."""
        if self._reader is not None:
            self._reader.close()
        self.data = None
        if self._mm is not None and not self._mm.closed:
            try:
                self._mm.close()
            except BufferError:
                pass   # chunks handed out still view it; it is unmapped when they go

    def __enter__(self) -> CaptureFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class PageRelease:
    """Releases the pages of handed-out chunks, `keep` chunks behind the newest."""

    def __init__(self, cap: CaptureFile, keep: int):
        self.cap, self.keep = cap, keep
        self.released = 0
        self.ends: list[int] = []

    def done(self, end: int) -> None:
        """Note that the records before file offset `end` have been handed out."""
        self.ends.append(end)
        upto = self.cap._done_upto  # noqa: SLF001
        if len(self.ends) > self.keep:
            upto = max(upto, self.ends.pop(0))
        self.cap.release_before(upto)
        self.released = self.cap._released  # noqa: SLF001


def open_capture(path: str | os.PathLike, chunk_bytes: int = 16 << 20) -> CaptureFile:
    """Return an open CaptureFile for a pcap or pcapng file (or a gzipped one); else raise CaptureError."""
    name = os.fspath(path)
    warnings: list[str] = []
    try:
        fh = open(name, "rb")
    except OSError as e:
        raise CaptureError(f"{name}: cannot open: {e.strerror or e}") from None
    with fh:
        if fh.read(2) == GZIP_MAGIC:
            fh.seek(0)
            tmp = _gunzip(name, fh, warnings)
            with tmp:
                cap = CaptureFile(name, tmp, chunk_bytes, warnings)
                cap.gzipped = True
                return cap
        fh.seek(0)
        return CaptureFile(name, fh, chunk_bytes, warnings)


def _gunzip(name: str, fh, warnings: list[str]):
    """Return an unlinked temporary file holding the decompressed stream (as tshark reads .gz files),
    at most `decompressed_cap` bytes; raise CaptureError past that, the temporary file closed (gone)."""
    try:
        tmp = tempfile.TemporaryFile(prefix="xlayer-gunzip-")
    except OSError as e:
        raise CaptureError(f"{name}: cannot make a temporary file in {tempfile.gettempdir()} to decompress "
                           f"it: {e.strerror or e}") from None
    try:
        src = CappedReader(gzip.GzipFile(fileobj=fh), decompressed_cap(_size_of(fh)), name)
        _copy_stream(src, tmp, warnings)
        tmp.flush()
        if tmp.tell() == 0:
            raise CaptureError(f"{name}: gzip file with no readable content")
    except OSError as e:
        tmp.close()
        raise CaptureError(f"{name}: cannot decompress to a temporary file in {tempfile.gettempdir()}: "
                           f"{e.strerror or e}") from None
    except BaseException:
        # an interrupt (Stop, KeyboardInterrupt) or the cap: the unlinked file goes with its descriptor
        tmp.close()
        raise
    warnings.append("decompressed from gzip to a temporary file")
    return tmp


def _size_of(fh) -> int:
    try:
        return os.fstat(fh.fileno()).st_size
    except (AttributeError, OSError, ValueError):
        return 0


def _copy_stream(src, dst, warnings: list[str]) -> None:
    # Errors of the compressed stream end the copy with a warning; errors writing `dst` (a full disk)
    # are raised, so that a short temporary file is never read as if it were the whole capture.
    while True:
        try:
            block = src.read(1 << 20)
        except (EOFError, OSError, zlib.error) as e:
            warnings.append(f"gzip stream ended early or is corrupt ({e}); read what was decompressed")
            return
        if not block:
            return
        dst.write(block)


def _concat(pieces: list[RecordChunk]) -> RecordChunk:
    if len(pieces) == 1:
        return pieces[0]
    if not pieces:
        e = np.zeros(0, dtype=np.int64)
        return RecordChunk(data=np.zeros(0, np.uint8), offset=e, caplen=e, wirelen=e, ts_ns=e,
                           linktype=e, iface=e, frame=e)
    comments, base = {}, 0
    for p in pieces:
        comments.update({base + r: c for r, c in p.comments.items()})
        base += len(p)
    cat = {k: np.concatenate([getattr(p, k) for p in pieces])
           for k in ("offset", "caplen", "wirelen", "ts_ns", "linktype", "iface", "frame")}
    has_ts = None
    if any(p.has_ts is not None for p in pieces):
        has_ts = np.concatenate([np.ones(len(p), bool) if p.has_ts is None else p.has_ts for p in pieces])
    return RecordChunk(data=pieces[0].data, comments=comments, has_ts=has_ts, **cat)
