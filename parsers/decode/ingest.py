"""Capture files to packet tables: streaming chunks, counts of everything read, decoder choice."""
from __future__ import annotations

import itertools
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from parsers.columnar import accel
from parsers.columnar.columns import Projection, to_polars
from parsers.crypto.keys import Key
from parsers.decode.decrypt import ChunkDecryptor, Plain
from parsers.decode.fast import IFACE_TOO_LARGE, decode_chunk, iface_unfit
from parsers.decode.reference import decode_record
from parsers.decode.walkproc import HelperFailed, WalkHelper, chunk_from
from parsers.formats.containers import CaptureFile, open_capture
from parsers.formats.records import RecordChunk
from parsers.layers.dot11 import WINDOW as DOT11_WINDOW
from parsers.layers.fcs import radiotap_fcs
from parsers.layers.radiotap import gather_ahead
from parsers.schema import SCHEMA

log = logging.getLogger(__name__)

DECODERS = ("fast", "reference")


@dataclass
class IngestStats:
    """What reading one file found: every record is either decoded, malformed-marked, or skipped."""

    path: str = ""
    format: str = ""
    file_bytes: int = 0
    records: int = 0            # rows produced
    decoded: int = 0            # rows with no malformed reason
    malformed: int = 0          # rows with a malformed reason
    fallback: int = 0           # rows the fast path passed to the reference decoder
    skipped_bytes: int = 0      # bytes of the file not turned into rows
    truncated_tail: bool = False
    error: str | None = None    # why reading stopped before the end of the file
    first_ts_ns: int | None = None
    last_ts_ns: int | None = None
    linktypes: Counter = field(default_factory=Counter)
    malformed_reasons: Counter = field(default_factory=Counter)
    rt_layouts: Counter = field(default_factory=Counter)
    interfaces: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    decryption: dict | None = None  # with keys: handshakes, keys derived, decrypted, MIC failures, no key...

    def as_dict(self) -> dict:
        """Return the counts as plain JSON-able values."""
        d = asdict(self)
        for k in ("linktypes", "malformed_reasons", "rt_layouts"):
            d[k] = {str(a): b for a, b in getattr(self, k).most_common()}
        return d


def _reference_table(chunk: RecordChunk, proj: Projection, layouts: Counter,
                     plain: dict[int, Plain] | None = None) -> pl.DataFrame:
    """Decode every record with the per-frame decoder (all layers), then keep the projected columns
    and the malformed reasons the projected fast path would find; count the radiotap layouts."""
    rows = []
    unfit = iface_unfit(chunk.iface)
    for r in range(len(chunk)):
        o = int(chunk.offset[r])
        row = decode_record(bytes(chunk.data[o:o + int(chunk.caplen[r])]), int(chunk.linktype[r]),
                            int(chunk.wirelen[r]), plain.get(r) if plain else None)
        timed = chunk.has_ts is None or bool(chunk.has_ts[r])
        row.update(frame=int(chunk.frame[r]), ts_ns=int(chunk.ts_ns[r]) if timed else None,
                   caplen=int(chunk.caplen[r]),
                   wirelen=int(chunk.wirelen[r]), linktype=int(chunk.linktype[r]),
                   iface=int(chunk.iface[r]))
        if unfit is not None and unfit[r]:     # as the fast decoder: this reason first, no wrapped id
            row.update(iface=None, malformed=IFACE_TOO_LARGE)
        if "malformed" in row:
            row["malformed"] = proj.reason(row["malformed"])
        rows.append(row)
    df = pl.DataFrame(rows, schema=SCHEMA, orient="row") if rows else pl.DataFrame(schema=SCHEMA)
    if proj.decodes("link"):
        layouts.update(Counter(df.get_column("rt_layout").drop_nulls().to_list()))
    return df if proj.all else df.select(proj.columns)


def _account(stats: IngestStats, chunk: RecordChunk, df: pl.DataFrame | pa.Table, layouts: Counter) -> None:
    n = len(chunk)
    stats.records += n
    if n == 0:
        return
    if isinstance(df, pa.Table):
        bad = _reasons(df.column("malformed"))
        stats.malformed += sum(bad.values())
        stats.decoded += n - sum(bad.values())
        stats.malformed_reasons.update(bad)
    else:
        col = df.get_column("malformed")
        bad = len(col) - col.null_count()   # drop_nulls costs a lazy query (~0.2 ms) even with none
        stats.malformed += bad
        stats.decoded += n - bad
        if bad:
            stats.malformed_reasons.update(col.drop_nulls().to_list())
    lt = chunk.linktype
    if lt[0] == lt[-1] and lt.min() == lt.max():    # one link type: no sort
        stats.linktypes[int(lt[0])] += n
    else:
        lts, counts = np.unique(lt, return_counts=True)
        stats.linktypes.update(dict(zip(lts.tolist(), counts.tolist())))
    stats.rt_layouts.update(layouts)
    ts = chunk.ts_ns if chunk.has_ts is None else chunk.ts_ns[chunk.has_ts]
    if not len(ts):
        return
    lo, hi = int(ts.min()), int(ts.max())
    stats.first_ts_ns = lo if stats.first_ts_ns is None else min(stats.first_ts_ns, lo)
    stats.last_ts_ns = hi if stats.last_ts_ns is None else max(stats.last_ts_ns, hi)


def _reasons(col: pa.ChunkedArray) -> Counter:
    """Return how many rows hold each malformed reason, in the order of their first rows (the order a
    Counter updated with the column's values row by row has)."""
    found: Counter = Counter()
    if col.null_count == len(col):
        return found
    for arr in col.chunks:
        if not isinstance(arr, pa.DictionaryArray):
            found.update(arr.drop_null().to_pylist())
            continue
        codes = arr.indices.drop_null().to_numpy()
        if not len(codes):
            continue
        uniq, first, counts = np.unique(codes, return_index=True, return_counts=True)
        texts = arr.dictionary.to_pylist()
        for k in np.argsort(first, kind="stable").tolist():
            found[texts[int(uniq[k])]] += int(counts[k])
    return found


def _as_dictionaries(table: pa.Table) -> pa.Table:
    """Return the table with its string columns as dictionary arrays (columns.DICT_TYPE)."""
    cols = [pc.dictionary_encode(c.cast(pa.string()).combine_chunks())
            if pa.types.is_string(c.type) or pa.types.is_large_string(c.type) or c.type == pa.string_view()
            else c for c in table.columns]
    return pa.table(cols, names=table.column_names)


def _decode(chunk: RecordChunk, decoder: str, proj: Projection, plain: dict[int, Plain] | None = None,
            arrow: bool = False) -> tuple[RecordChunk, pl.DataFrame | pa.Table, int, Counter]:
    layouts: Counter = Counter()
    if decoder == "fast":
        table, nfall = decode_chunk(chunk, proj, layouts, plain, dictionary=arrow)
        return chunk, table if arrow else to_polars(table), nfall, layouts
    df = _reference_table(chunk, proj, layouts, plain)
    return chunk, _as_dictionaries(df.to_arrow()) if arrow else df, 0, layouts


def _decoded(chunks: Iterator[RecordChunk], decoder: str, threads: int, proj: Projection,
             decrypt: ChunkDecryptor | None = None, arrow: bool = False):
    """Yield (chunk, table, fallback count, layout counts) in file order, decoding up to `threads`
    chunks at once.

    numpy, Arrow and polars release the GIL for part of a chunk's work, so a second core helps
    somewhat; at most threads + 1 chunks are in flight, which keeps memory bounded. With `decrypt`,
    each chunk's protected frames are decrypted here, in file order (the handshakes come before the
    frames they protect), before the chunk is handed to a decoder.
    """
    def plain(chunk: RecordChunk) -> dict[int, Plain] | None:
        return decrypt.chunk(chunk) if decrypt is not None else None

    it = iter(chunks)
    head = [c for c in (next(it, None), next(it, None)) if c is not None]
    if threads <= 1 or len(head) < 2:
        # one chunk (most small captures): threads would cost more to start than they could save
        for chunk in itertools.chain(head, it):
            yield _decode(chunk, decoder, proj, plain(chunk), arrow)
        return
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=threads) as pool:
        pending: deque = deque()
        for chunk in itertools.chain(head, it):
            pending.append(pool.submit(_decode, chunk, decoder, proj, plain(chunk), arrow))
            if len(pending) > threads:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


# Without the compiled walk (parsers/accel.py), radiotap captures at least this large have their
# records walked and FCSs checked by a helper process (in Python, a CRC-32 per frame is the largest
# GIL-bound cost there; other captures gain little); the first HERE_BYTES of records are decoded here
# meanwhile (the helper takes ~0.15 s to start). The compiled loops cost a tenth and release the GIL,
# which leaves a helper nothing to take over.
HELPER_MIN_BYTES = 160 << 20
HERE_BYTES = 96 << 20
RADIOTAP = 127


def _use_helper(cap: CaptureFile, decoder: str, threads: int, walk_helper: bool) -> bool:
    return (walk_helper and not accel.AVAILABLE and threads > 1 and decoder == "fast"
            and cap.size >= HELPER_MIN_BYTES and not cap.gzipped and os.name == "posix"
            and bool(cap.interfaces) and cap.interfaces[0].linktype == RADIOTAP)


# The helper pays only with a core to itself: on a machine whose CPUs other work keeps busy, each
# hand-off between the two processes waits for a time slice, and reading the file took 3.3-4.0 s
# with the helper against 2.0-2.4 s without (500k frames, 2 cores, load 10; with one other busy
# process, 1.1-1.4 s against 0.7-0.9 s). CPU pressure (Linux PSI) above this share says so.
BUSY_PSI = 40.0
# Decoding threads are the same story, less sharply (each waits for the GIL and then for a CPU):
# at load 4-8, 1.04-1.19 s on one thread against 1.14-2.10 s on two (air), 0.66 s against 0.92 s
# (wired). Files from this size on are read on one thread when the CPUs are taken.
BUSY_CHECK_BYTES = 64 << 20


def _cpus_taken() -> bool:
    """Return True if other work keeps all CPUs but ours busy: CPU pressure over the last 10 s, or
    (as it is now) at least as many other runnable tasks as CPUs besides ours, in 3 looks."""
    try:
        with open("/proc/pressure/cpu") as fh:
            if float(fh.readline().split()[1].partition("=")[2]) > BUSY_PSI:
                return True
    except (OSError, IndexError, ValueError):
        pass
    others = []
    for look in range(3):   # the fewest seen, 1 ms apart: one look may catch a passing task
        if look:
            time.sleep(0.001)
        try:
            with open("/proc/loadavg") as fh:
                others.append(int(fh.read().split()[3].partition("/")[0]) - 1)   # minus us
        except (OSError, IndexError, ValueError):
            return False
    return min(others) >= max((os.cpu_count() or 1) - 1, 1)


# With the compiled loops, a capture at least this large is walked and FCS-checked by a thread one
# chunk ahead of the decoding: that work is C with the GIL released, so the two overlap with few
# hand-offs of the GIL. (Two threads each decoding whole chunks hand the GIL to each other at every
# numpy call, thousands of times per chunk; on two cores that was no faster than one thread.)
PREP_MIN_BYTES = 48 << 20
# Chunks waiting, walked, for a decoder (one more is walked meanwhile): the walk costs a fraction of
# the decoding, so one is enough, and each one more holds its chunk's pages (12-32 MB) resident.
PREP_AHEAD = 1
PREP_FIRST_BYTES = 4 << 20  # a small first chunk: decoding waits for the walk of this much only


class _Prepared:
    """A thread that walks a capture's chunks, checks their FCSs and makes the decoders' first
    gathers, up to PREP_AHEAD chunks ahead of the reader; iterate it once, to the end or to a close."""

    def __init__(self, chunks: Iterator[RecordChunk], fcs: bool, ahead: bool,
                 release: Callable[[], None] | None = None, lean: bool = False):
        import queue
        import threading

        self._queue: queue.Queue = queue.Queue(maxsize=PREP_AHEAD)
        self._stop = threading.Event()
        self._chunks, self._fcs, self._ahead = chunks, fcs, ahead
        # called here each time the reader takes a chunk: it drops the pages of the chunks decoded
        # (madvise costs ~1.5 ms per 32 MB, better spent off the decoding thread)
        self._release = release
        # lean: a chunk is walked only once the reader has taken the one before (not while it waits
        # in the queue), so one chunk fewer of the file is resident; the walk costs about half the
        # decoding, so the next chunk is still ready in time
        self._room = threading.Semaphore(1) if lean else None
        self._thread = threading.Thread(target=self._run, name="xlayer-walk", daemon=True)
        self._thread.start()

    def _wait_room(self) -> bool:
        """Return once the next chunk may be walked (False: the reader has stopped)."""
        if self._room is None:
            return True
        while not self._stop.is_set():
            if self._room.acquire(timeout=0.1):
                if self._release is not None:   # the chunks the reader is done with go first
                    self._release()
                return True
        return False

    def _put(self, item) -> bool:
        import queue

        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                if self._release is not None:
                    self._release()
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            while self._wait_room():
                chunk = next(self._chunks, None)
                if chunk is None:
                    break
                if self._fcs:
                    chunk.fcs_first, chunk.fcs_ok = radiotap_fcs(chunk.data, chunk.offset, chunk.caplen,
                                                                 chunk.wirelen, chunk.linktype)
                if self._ahead:     # the first gathers of the decoders, off the decoding thread
                    chunk.ahead = gather_ahead(chunk.data, chunk.offset, chunk.linktype, DOT11_WINDOW)
                if not self._put(("chunk", chunk)):
                    return
            else:
                return      # the reader has stopped
            self._put(("end", None))
        except BaseException as exc:  # noqa: BLE001 - handed to the reading thread, raised there
            self._put(("error", exc))

    def __iter__(self) -> Iterator[RecordChunk]:
        try:
            while True:
                kind, item = self._queue.get()
                if kind == "end":
                    return
                if kind == "error":
                    raise item
                if self._room is not None:
                    self._room.release()
                yield item
        finally:
            self._stop.set()
            self._thread.join()
            self._chunks.close()


def _helped_chunks(cap: CaptureFile, path: str, keep: int, fcs: bool = True) -> Iterator[RecordChunk]:
    """Yield the file's chunks: the first few walked here while a helper process starts (see
    walkproc), then the helper's. If the helper cannot start or fails on the way, walk the rest
    here: the chunks are the same either way."""
    first = max(1, HERE_BYTES // cap.chunk_bytes)
    helper = WalkHelper.start(path, cap.chunk_bytes, first, cap.size, fcs=fcs)
    handed = 0
    try:
        own = cap.chunks(keep=keep)
        for i, chunk in enumerate(own):
            handed += len(chunk)
            yield chunk
            if helper is not None and i + 1 == first:
                break
        else:
            return                # the whole file was walked here
        own.close()
        pages = cap.pages(keep)
        for kind, msg in helper.messages():
            if kind == "end":
                cap.adopt(msg)
                return
            chunk = chunk_from(msg, cap.data)
            handed += len(chunk)
            yield chunk
            pages.done(int(chunk.offset[-1] + chunk.caplen[-1]))
    except HelperFailed as exc:
        log.debug("walk helper for %s failed (%s); walking in this process", path, exc)
    finally:
        if helper is not None:
            helper.close()
    yield from _rewalk(cap, path, keep, handed)


def _rewalk(cap: CaptureFile, path: str, keep: int, handed: int) -> Iterator[RecordChunk]:
    """Walk the file again here, yielding what follows its first `handed` records; then let `cap`
    report this walk's counts."""
    with open_capture(path, chunk_bytes=cap.chunk_bytes) as again:
        for chunk in again.chunks(keep=keep):
            if handed >= len(chunk):
                handed -= len(chunk)
                continue
            if handed:
                chunk, handed = _tail(chunk, handed), 0
            yield chunk
        cap.adopt({"stats": again.stats, "interfaces": again.interfaces, "names": again.names,
                   "sections": again.sections, "if_stats": again.if_stats})


def _tail(chunk: RecordChunk, skip: int) -> RecordChunk:
    """Return the chunk without its first `skip` records."""
    cut = {k: getattr(chunk, k)[skip:] for k in ("offset", "caplen", "wirelen", "ts_ns", "linktype",
                                                  "iface", "frame")}
    return RecordChunk(data=chunk.data, comments={r - skip: c for r, c in chunk.comments.items() if r >= skip},
                       has_ts=None if chunk.has_ts is None else chunk.has_ts[skip:], **cut)


def iter_tables(path: str | os.PathLike, decoder: str = "fast", chunk_bytes: int = 16 << 20,
                stats: IngestStats | None = None,
                progress: Callable[[int], None] | None = None,
                threads: int | None = None, walk_helper: bool = True,
                columns: Sequence[str] | None = None, keys: Sequence[Key] | None = None,
                arrow: bool = False, lean: bool = False) -> Iterator[pl.DataFrame] | Iterator[pa.Table]:
    """Yield the capture as packet tables of about chunk_bytes of records each; fill stats as it goes.

    `arrow`: yield Arrow tables instead of polars frames, the string columns as dictionary arrays
    (int32 codes into their distinct strings, columns.DICT_TYPE); otherwise the same columns and values.
    `lean`: with the walk thread, walk each chunk only once the one before is taken (one chunk fewer
    of the file resident, for streams that keep memory bounded).

    `keys` (parsers.crypto keys; none: no decryption) decrypt protected 802.11 frames natively: their
    plaintext is decoded on to IP and transport, the wlan_decrypted/wlan_mic/wlan_key columns say how,
    and stats.decryption holds the counts (handshakes, decrypted, MIC failures, no key...).

    Raises records.CaptureError when the file is not a capture we can read at all, ValueError for
    an unknown column name. `columns` (None: all) projects the tables: only those columns, plus
    frame, ts_ns and malformed, are built, and only the layers and parts of layers they need are
    decoded (no FCS CRC without fcs_bad, no IP without an IP or transport column, no TCP options
    without an option column...; see columns.Projection). A projected read's `malformed` (and the
    malformed counts in stats) holds only what the decoded layers find: a reason a skipped layer
    would have given is absent. `threads` chunks are decoded at once (default: the number of CPUs,
    at most 4); with `threads` > 1, a large file's records are instead walked (and its FCSs checked)
    by a thread one chunk ahead (compiled loops, parsers/accel.py) or else, with walk_helper, by a
    helper process (walkproc), while `threads` - 1 chunks are decoded at once. While other work keeps
    the CPUs busy, a large file is decoded on one thread (with the walk thread, if compiled).
    """
    if threads is None:
        threads = min(os.cpu_count() or 1, 4)
    if decoder not in DECODERS:
        raise ValueError(f"decoder must be one of {DECODERS}, not {decoder!r}")
    proj = Projection(columns)
    stats = stats if stats is not None else IngestStats()
    stats.path = os.fspath(path)
    with open_capture(path, chunk_bytes=chunk_bytes) as cap:
        stats.format = cap.format
        stats.file_bytes = cap.size
        done = 0
        busy = threads > 1 and cap.size >= BUSY_CHECK_BYTES and _cpus_taken()
        # With keys, not while the CPUs are taken: the decryption holds the GIL for most of a chunk,
        # and the walk thread cost more than it saved (WPA2 benchmark capture, 500 k frames, load 11 on
        # 2 cores, 5 runs each: 1.08-1.98 s wall and 0.66-0.83 s CPU on one thread, against 1.59-2.08 s
        # and 0.75-0.87 s with the walk thread)
        prep = not (busy and keys)
        if accel.AVAILABLE and threads > 1 and decoder == "fast" and cap.size >= PREP_MIN_BYTES and prep:
            # the walk thread stays on a busy machine: it hands over the GIL once per chunk
            fcs = proj.decodes("fcs") and any(i.linktype == RADIOTAP for i in cap.interfaces)
            walked = cap.chunks(keep=PREP_AHEAD + threads, first_bytes=min(PREP_FIRST_BYTES, chunk_bytes))
            chunks = iter(_Prepared(walked, fcs, proj.decodes("link"), release=cap.release_done, lean=lean))
            threads = 1 if busy else threads - 1
        elif busy:
            threads = 1
            chunks = cap.chunks()
        elif _use_helper(cap, decoder, threads, walk_helper):
            threads -= 1
            chunks = _helped_chunks(cap, os.fspath(path), keep=threads if threads > 1 else 0,
                                    fcs=proj.decodes("fcs"))
        else:
            chunks = cap.chunks(keep=threads if threads > 1 else 0)
        decrypt = ChunkDecryptor(keys) if keys and proj.decodes("dot11") else None
        more = {"decrypt": decrypt} if decrypt is not None else {}
        for chunk, df, nfall, layouts in _decoded(chunks, decoder, threads, proj, arrow=arrow, **more):
            stats.fallback += nfall
            _account(stats, chunk, df, layouts)
            if len(chunk) and chunk.data is cap.data:
                # decoded (chunks come back in file order, each after the ones before it): its
                # pages go at the next chunk walked, not `keep` chunks later
                cap.mark_done(int(chunk.offset[-1] + chunk.caplen[-1]))
            if progress is not None and len(chunk):
                pos = int(chunk.offset[-1] + chunk.caplen[-1])
                progress(pos - done)
                done = pos
            yield df
        cs = cap.stats
        stats.skipped_bytes = cs.skipped_bytes
        stats.truncated_tail = cs.truncated_tail
        stats.error = cs.error
        stats.warnings = list(cs.warnings)
        if decrypt is not None:
            stats.decryption = decrypt.summary()
        stats.interfaces = [
            {"id": i, "linktype": itf.linktype, "snaplen": itf.snaplen, "name": itf.name,
             "description": itf.description}
            for i, itf in enumerate(cap.interfaces)
        ]
        if progress is not None and cap.size > done:
            progress(cap.size - done)


def read_capture(path: str | os.PathLike, decoder: str = "fast", stats: IngestStats | None = None,
                 chunk_bytes: int = 32 << 20, threads: int | None = None,
                 columns: Sequence[str] | None = None, keys: Sequence[Key] | None = None) -> pl.DataFrame:
    """Return the whole capture as one packet table (decoder 'fast' or 'reference'); `keys` decrypt
    protected 802.11 frames (see iter_tables).

    `columns` (None: all) builds only those columns plus frame, ts_ns and malformed, decoding only
    the layers they need; `malformed` then holds only what those layers find (see iter_tables).
    Chunks are larger than iter_tables' by default: the whole table is kept anyway, and each chunk
    has a fixed cost (a few thousand numpy calls) that larger chunks spread thinner.
    """
    if columns is not None and not isinstance(columns, str):
        columns = list(columns)     # read twice (here and by iter_tables): an iterator would not do
    proj = Projection(columns)      # unknown names fail here, before the file is opened
    parts = list(iter_tables(path, decoder=decoder, chunk_bytes=chunk_bytes, stats=stats,
                             threads=threads, columns=columns, keys=keys))
    if not parts:
        return pl.DataFrame(schema=proj.schema())
    return pl.concat(parts, rechunk=False)
