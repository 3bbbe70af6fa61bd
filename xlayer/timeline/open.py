"""One timeline: a bundle's captures decoded once, moved onto the reference clock, and its derived tables.

`open_timeline(bundle)` reads every packet capture (only the columns the alignment and the table
modules use), aligns the clocks (`xlayer.timeline.align`), and keeps per capture a table in the packet
schema plus:

    capture_file, vantage, clock, kind   where the row comes from (manifest)
    ts_ns                                the record's time on the reference clock (int64 epoch ns)
    ts_local_ns                          the capture's own stamp
    flow, conn, dir                      flow identity (`xlayer.timeline.flowkey`)

The packet tables are kept in the decode cache (`xlayer.timeline.cache`): written once as uncompressed
Arrow IPC files (`Spilled`: the decoded chunks as the decoder produced them, each without its columns
that are entirely null, and beside them one file of what the alignment and the flow keys add: ts_ns on
the reference clock, flow, conn, dir), read back by `packets()` (only the columns asked for; a column
a chunk's file does not hold as nulls of the packet schema's dtype), and found again by the next
command on the same captures; each derived table is written there too once its module has computed
it, and memory-mapped back on each use (`mapped_ipc`: only the pages of the columns used are read
in).  Without the cache (`cache=False`), large bundles are spilled the same way to a temporary directory
(removed with the Timeline, by `Timeline.close` or at exit; one a killed process left is removed by
the next process that opens a timeline: see `SPILL_PREFIX`), and `spill=False` keeps every table in
memory instead.  What the alignment reads is held on disk while the captures are read.

Derived tables are computed on first use by the modules the timeline was opened with (`modules=`;
`xlayer.metrics.MODULES` for the metric tables, which `xlayer.open_timeline` passes): each module has
``NEEDS`` (packet columns it reads), ``TABLES`` (its tables' schemas) and ``build(tl) -> {name: DataFrame}``.
`Timeline.table(name)` returns one, `Timeline.tables()` all.  The timeline knows nothing of what the
modules compute: the metrics sit above it and are handed to it.  A capture the alignment could not
place keeps its own stamps, and its tables say so through `Timeline.alignment`.
"""
from __future__ import annotations

import errno
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from parsers.decode.ingest import IngestStats
from xlayer.bundle.manifest import Bundle, BundleError, CaptureEntry, open_bundle
from xlayer.bundle.tables import scan, state_ingest_stats, state_read_error
from xlayer.signals import process_alive
from xlayer.timeline.flowkey import FRAGMENT_KEY, flow_exprs, is_fragment

ADDED = ("capture_file", "vantage", "clock", "kind", "ts_local_ns", "flow", "conn", "dir")


def needed_columns(modules: Sequence[Any] = ()) -> list[str]:
    """Return the packet columns the alignment and the given table modules read (schema order)."""
    import xlayer.timeline.match as mm
    from parsers.schema import NAMES

    want = set(mm.READ_COLS) | {"frame", "ts_ns", "caplen", "malformed", "ip_src", "ip_dst", "ip_proto", "sport", "dport",
                                  "tcp_len", "tcp_flags"}
    for m in modules:
        want |= set(getattr(m, "NEEDS", ()))
    return [c for c in NAMES if c in want]


def _projected(columns: list[str], keys: Sequence[Any] | None = None) -> dict[str, Any]:
    """Return iter_tables' `columns=` argument when the parsers support a projection (else nothing), and
    its `keys=` argument when keys are given."""
    import inspect

    import parsers

    kw: dict[str, Any] = {"keys": keys} if keys else {}
    return {"columns": columns, **kw} if "columns" in inspect.signature(parsers.iter_tables).parameters else kw


def read_packets(path: str | os.PathLike, columns: list[str], decoder: str = "fast",
                 progress: Callable[[int], None] | None = None, stats: Any = None,
                 keys: Sequence[Any] | None = None) -> pl.DataFrame:
    """Return a capture's packet table with only `columns`, read chunk by chunk (counts into `stats`);
    `keys` (parsers.crypto keys) decrypt protected 802.11 frames."""
    import parsers
    from parsers.schema import SCHEMA

    parts = []
    for chunk in parsers.iter_tables(path, decoder=decoder, progress=progress, stats=stats,
                                     **_projected(columns, keys)):
        parts.append(chunk.select([c for c in columns if c in chunk.columns]))
    if not parts:
        return pl.DataFrame(schema={c: SCHEMA[c] for c in columns})
    return pl.concat(parts, rechunk=True)


def _disk_full(exc: BaseException) -> bool:
    """Return whether an error is a full disk or quota (also when a library wrapped the OSError in text)."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(exc)
    return os.strerror(errno.ENOSPC) in text or os.strerror(errno.EDQUOT) in text


def _spill_read(path: str | os.PathLike, columns: list[str], keep: list[str], out_dir: str,
                decoder: str = "fast", stats: Any = None, keys: Sequence[Any] | None = None
                ) -> tuple[list[str], list[str], list[str]]:
    """Write a capture's packet table (`columns`) chunk by chunk to IPC files in `out_dir`; return their
    paths, which of the `keep` columns (those the alignment reads) hold a value somewhere, and the
    table's columns in order (a chunk's file holds only those with a value: `_read_chunks`)."""
    import parsers
    from parsers.schema import SCHEMA

    files: list[str] = []
    names: list[str] = []
    valued: set[str] = set()            # columns with a value in some row
    for i, chunk in enumerate(parsers.iter_tables(path, decoder=decoder, stats=stats, **_projected(columns, keys))):
        chunk = chunk.select([c for c in columns if c in chunk.columns])
        names = names or chunk.columns
        f = os.path.join(out_dir, f"raw-{i:05d}.arrow")
        stored = _stored_columns(chunk)
        chunk.select(stored).write_ipc(f, compression=SPILL_COMPRESSION)
        files.append(f)
        valued.update(c for c in stored if c in keep and chunk[c].null_count() < chunk.height)
        del chunk
    if not files:
        empty = pl.DataFrame(schema={c: SCHEMA[c] for c in columns})
        files.append(os.path.join(out_dir, "raw-00000.arrow"))
        empty.write_ipc(files[0])
        return files, [c for c in keep if c in empty.columns], empty.columns
    # A wired capture's radio and 802.11 columns are all null: the alignment reads absent ones as nulls.
    return files, [c for c in keep if c in names and (c in _ALWAYS or c in valued)], names


# The spill files' codec.  Leaving out the all-null columns halved a wired capture's files (430 -> 194
# bytes a packet; `xlayer sim baseline --seconds 130`: 1698 -> 934 MB spilled); lz4 on top shrinks them
# ~15x more but cost CPU and memory end to end (the pipeline on the same at 39 s, 2 A/B runs each:
# 16.6/15.8 s CPU and 597/575 MB peak RSS uncompressed against 18.5/16.5 s and 657/635 MB with lz4): an
# uncompressed file is mapped back as it is, a compressed one is copied out.
SPILL_COMPRESSION = "uncompressed"
# kept in every chunk file whatever their values: the row count and the stamps are read from them
_ALWAYS = ("frame", "ts_ns")


def _stored_columns(chunk: pl.DataFrame) -> list[str]:
    """Return the columns of a decoded chunk worth writing: not those entirely null (a wired capture's
    radio and 802.11 columns: about half its bytes), which `_read_chunks` gives back as nulls of the
    packet schema's dtype; a column of another dtype is always written."""
    from parsers.schema import SCHEMA

    return [c for c, dt in chunk.schema.items()
            if c in _ALWAYS or SCHEMA.get(c) != dt or chunk.get_column(c).null_count() < chunk.height]


def _read_chunks(files: Sequence[str], columns: Sequence[str]) -> pl.DataFrame:
    """Return `columns` of a spilled capture's chunk files as one table, in order: a column a chunk's
    file does not hold (it was all null there) as nulls of the packet schema's dtype."""
    from parsers.schema import SCHEMA

    parts = []
    for f in files:
        # Read (copied), not mapped: mapping the chunks (`mapped_ipc`) cut the 1x pipeline's CPU time by
        # 6-10 % but raised its peak RSS by 40-80 MB (the mapped pages of every column in use count in
        # it), to 950-983 MB on a 4-station 802.11n bundle of 1 M air frames: too near the 1 GB bound.
        held = pl.read_ipc_schema(f)
        # (one column is read even when the chunk holds none of those asked for: it gives the height)
        got = pl.read_ipc(f, columns=[c for c in columns if c in held] or list(held)[:1])
        missing = [pl.lit(None, SCHEMA[c]).alias(c) for c in columns if c not in held]
        parts.append(got.with_columns(missing).select(columns))
    return pl.concat(parts, rechunk=False)


def mapped_ipc(path: str | os.PathLike, columns: Sequence[str] | None = None) -> pl.DataFrame:
    """Return an uncompressed Arrow IPC file's table (only `columns`, in the file's order, if given),
    memory-mapped rather than read: no byte is copied, and only the pages of the columns used are ever
    read in (clean file pages, which the kernel can drop again).

    `pl.read_ipc` copies every column into the heap: `analyze` of a 1 M-frame bundle counted the
    downlink table's `match` column that way, 280 MB of peak RSS for what its pages hold (25 MB)."""
    import pyarrow as pa

    table = pa.ipc.open_file(pa.memory_map(os.fspath(path))).read_all()
    if columns is not None:
        want = set(columns)
        table = table.select([c for c in table.column_names if c in want])
        if table.num_columns == 0:
            return pl.DataFrame()       # as polars' `select([])`: no column, no row
    # as the file's record batches, not rechunked (a rechunk is a copy)
    return pl.from_arrow(table, rechunk=False)


def park(df: pl.DataFrame, scratch: str | os.PathLike | None, name: str) -> pl.DataFrame:
    """Return `df` memory-mapped from an uncompressed Arrow file in `scratch` (a spilled timeline's
    directory), or `df` itself when there is none: a table kept for later waits in clean file pages,
    which the kernel can drop, not in the heap beside the work still to come.  The file is unlinked at
    once (the map holds its pages until the table is dropped), so nothing is left behind."""
    if scratch is None or df.height == 0:
        return df
    fd, path = tempfile.mkstemp(prefix=f"park-{name}-", suffix=".arrow", dir=scratch)
    os.close(fd)
    try:
        df.write_ipc(path, compression="uncompressed")
        return mapped_ipc(path)
    finally:
        os.remove(path)


# the columns a spilled capture's table gains beside the decoded ones, in the order they are added
_CONSTANT = ("capture_file", "vantage", "clock", "kind")
_DERIVED = ("flow", "conn", "dir")


@dataclass(frozen=True)
class Spilled:
    """Where one capture's spilled packet table is: written once, never rewritten.

    `raw`: the decoded chunks in order (their ts_ns is the capture's own stamp: ts_local_ns);
    `derived`: one IPC file with ts_ns on the reference clock, flow, conn and dir; the manifest's
    capture_file, vantage, clock and kind are constants added on reading."""

    raw: tuple[str, ...]
    derived: str
    names: tuple[str, ...]          # the table's columns, in order
    height: int

    def relative(self, root: str | os.PathLike) -> dict[str, Any]:
        """Return the paths relative to `root`, as a cache entry's meta.json keeps them."""
        return {"raw": [os.path.relpath(f, root) for f in self.raw], "derived": os.path.relpath(self.derived, root),
                "names": list(self.names), "height": self.height}

    @classmethod
    def under(cls, root: str | os.PathLike, d: Mapping[str, Any]) -> Spilled:
        """Return the spill `relative` described, its files under `root`."""
        return cls(tuple(os.path.join(root, f) for f in d["raw"]), os.path.join(root, d["derived"]),
                   tuple(d["names"]), int(d["height"]))

    def files(self) -> list[str]:
        """Return every file the spill is made of."""
        return [*self.raw, self.derived]

    def read(self, e: CaptureEntry, columns: Sequence[str] | None = None) -> pl.DataFrame:
        """Return the table (only `columns`, in their order, those it has), read from its files."""
        want = list(self.names) if columns is None else [c for c in columns if c in self.names]
        if not want:
            return pl.DataFrame()
        out: dict[str, pl.Series] = {}
        raw = [c for c in want if c not in (*_CONSTANT, *_DERIVED, "ts_ns", "ts_local_ns")]
        if "ts_local_ns" in want:
            raw.append("ts_ns")
        if raw:
            got = _read_chunks(self.raw, raw)
            out.update((s.name, s) for s in got.get_columns())
            if "ts_local_ns" in want:
                out["ts_local_ns"] = out.pop("ts_ns").cast(pl.Int64).alias("ts_local_ns")
        derived = [c for c in want if c in ("ts_ns", *_DERIVED)]
        if derived:
            out.update((s.name, s) for s in pl.read_ipc(self.derived, columns=derived).get_columns())
        values = dict(zip(_CONSTANT, (e.file, e.vantage, e.clock, e.kind)))
        for c in want:
            if c in values:
                out[c] = pl.repeat(values[c], self.height, dtype=pl.String, eager=True).alias(c)
        return pl.DataFrame([out[c] for c in want])


def _spill_derive(tl: Timeline, e: CaptureEntry, raw: list[str], names: list[str], fragments: bool) -> Spilled:
    """Return a spilled capture with its derived file written: its stamps on the reference clock and
    its flows (what the alignment adds, and `_with_flows`), one capture's few columns in memory."""
    want = [c for c in ("ts_ns", *_FLOW_KEY, *FRAGMENT_KEY[3:], "ip_mf", "ip_frag_offset") if c in names]
    keys = _read_chunks(raw, want)
    flows = _with_flows(keys, fragments=fragments).select(_DERIVED)
    stamps = tl._align(keys.select("ts_ns"), e).select("ts_ns")
    path = os.path.join(os.path.dirname(raw[0]), "derived.arrow")
    pl.concat([stamps, flows], how="horizontal").write_ipc(path, compression=SPILL_COMPRESSION)
    return Spilled(tuple(raw), path, (*names, *_CONSTANT, *_DERIVED, "ts_local_ns"), keys.height)


@dataclass
class Timeline:
    """A bundle on one clock: aligned packet tables per capture, host state, and metric tables."""

    bundle: Bundle
    alignment: Any                                   # xlayer.timeline.align.Alignment
    bin_ns: int = 100_000_000
    modules: Sequence[Any] = ()                      # table modules (see module docstring), in table order
    _packets: dict[str, pl.DataFrame] = field(default_factory=dict, repr=False)
    _tables: dict[str, pl.DataFrame] = field(default_factory=dict, repr=False)
    _host: pl.DataFrame | None = field(default=None, repr=False)
    errors: dict[str, str] = field(default_factory=dict)
    read_stats: dict[str, Any] = field(default_factory=dict)       # parsers.IngestStats per capture read
    # capture file -> its files when the timeline is spilled (see module docstring)
    _spilled: dict[str, Spilled] = field(default_factory=dict, repr=False)
    _spill_dir: str | None = field(default=None, repr=False)
    # metric table -> its IPC file when spilled (tables are spilled with the packet tables)
    _table_files: dict[str, str] = field(default_factory=dict, repr=False)
    # the decode-cache entry the packet tables are kept in (None: not cached); derived tables go there too
    _cached: Any = field(default=None, repr=False)
    # what several table modules read of a capture, computed once (an air capture's airtime: stations, air)
    _shared: dict[Any, Any] = field(default_factory=dict, repr=False)

    def close(self) -> None:
        """Remove the spill directory (tables already returned stay readable on POSIX systems); a cache
        entry stays."""
        if self._spill_dir is not None:
            shutil.rmtree(self._spill_dir, ignore_errors=True)

    def __enter__(self) -> Timeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- captures ---

    def entries(self, kind: str | None = None) -> list[CaptureEntry]:
        """Return the packet captures read (of one kind: 'air' or 'wired'), in manifest order."""
        return [e for e in self.bundle.captures
                if e.is_packets and (e.file in self._packets or e.file in self._spilled)
                and (kind is None or e.kind == kind)]

    def packets(self, which: str | CaptureEntry | None = None, columns: list[str] | None = None) -> pl.DataFrame:
        """Return one capture's aligned packet table (file or vantage), or all of them concatenated;
        only `columns` (those it has) when given."""
        if which is None:
            frames = [self.packets(e, columns) for e in self.entries()]
            return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()
        e = self._entry(which)
        if e.file in self._spilled:
            return self._spilled[e.file].read(e, columns)
        if e.file not in self._packets:
            raise BundleError(f"{e.file}: {self.errors.get(e.file, 'not a packet capture')}")
        df = self._packets[e.file]
        return df if columns is None else df.select([c for c in columns if c in df.columns])

    def columns(self, which: str | CaptureEntry) -> list[str]:
        """Return the column names of one capture's packet table."""
        e = self._entry(which)
        if e.file in self._spilled:
            return list(self._spilled[e.file].names)
        return self.packets(e).columns

    def _entry(self, which: str | CaptureEntry) -> CaptureEntry:
        # A vantage names its packet capture even when a host-state file shares the vantage.
        if isinstance(which, str) and all(c.file != which for c in self.bundle.captures):
            at = [c for c in self.bundle.captures if c.vantage == which and c.is_packets]
            if len(at) == 1:
                return at[0]
        return self.bundle.entry(which)

    def host_state(self) -> pl.DataFrame:
        """Return every host TCP state sample with ts_ns on the reference clock (ts_local_ns kept)."""
        if self._host is None:
            from parsers.hoststate.common import ReadStats

            frames = []
            for e in self.bundle.captures:
                if e.is_packets:
                    continue
                st = ReadStats()
                try:
                    df = scan(self.bundle, e, stats=st).collect()
                except Exception as exc:  # noqa: BLE001 - one unreadable sampler file must not stop the rest
                    self.errors[e.file] = f"{type(exc).__name__}: {exc}"
                    continue
                # nothing readable is a read error; read in part is counted like malformed packets
                if state_read_error(st) is not None:
                    self.errors[e.file] = state_read_error(st)
                elif st.summary():
                    self.read_stats[e.file] = state_ingest_stats(st)
                frames.append(self._align(df, e))
            self._host = pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()
        return self._host

    def _align(self, df: Any, e: CaptureEntry) -> Any:
        ca = self.alignment.capture(e.file)
        df = df.with_columns(pl.col("ts_ns").cast(pl.Int64).alias("ts_local_ns"))
        if ca.aligned:
            df = df.with_columns(ca.to_reference_ns(pl.col("ts_ns").cast(pl.Int64)).alias("ts_ns"))
        return df

    # --- metric tables ---

    def table(self, name: str, columns: Sequence[str] | None = None) -> pl.DataFrame:
        """Return one derived table by name (see `table_names`): only `columns`, in the table's order, if given."""
        if name not in self._tables and name not in self._table_files:
            kept = self._cached.table_file(name) if self._cached is not None else None
            if kept is not None and kept.is_file():
                self._table_files[name] = str(kept)
            else:
                self._build(name)
        if name in self._table_files:
            return mapped_ipc(self._table_files[name], columns)
        df = self._tables[name]
        if columns is None:
            return df
        want = set(columns)
        return df.select([c for c in df.columns if c in want])

    def table_columns(self, name: str) -> list[str]:
        """Return a derived table's column names (the table is computed if it was not yet)."""
        self.table(name, columns=())
        if name in self._table_files:
            return list(pl.read_ipc_schema(self._table_files[name]))
        return self._tables[name].columns

    def _build(self, name: str) -> None:
        for m in self.modules:
            if name in getattr(m, "TABLES", {}):
                built = m.build(self)
                if self._cached is not None:
                    for n in list(built):
                        self._table_files[n] = str(self._cached.put_table(n, built.pop(n)))
                elif self._spill_dir is None:
                    self._tables.update(built)
                else:
                    # Spilled like the packet tables: written once, mapped back on each use, so the
                    # finished tables of every module are not all held in memory at once.
                    d = os.path.join(self._spill_dir, "tables")
                    os.makedirs(d, exist_ok=True)
                    for n in list(built):
                        path = os.path.join(d, f"{n}.arrow")
                        built.pop(n).write_ipc(path, compression="uncompressed")
                        self._table_files[n] = path
                del built
                _release_freed_memory()
                return
        raise KeyError(f"no metric table {name!r} (tables: {', '.join(self.table_names())})")

    def table_names(self) -> list[str]:
        """Return the names of every table the timeline's modules compute, in module order."""
        return table_names(self.modules)

    def tables(self, progress: Callable[[str], None] | None = None) -> dict[str, pl.DataFrame]:
        """Return every metric table by name, computing those not yet computed."""
        for name in self.table_names():
            if progress is not None:
                progress(name)
            self.table(name)
        return {n: self.table(n) for n in self.table_names()}

    def __getattr__(self, name: str) -> Callable[[], pl.DataFrame]:
        # tl.flows(), tl.retransmissions() ...: a method per registered table, for notebooks.
        if name.startswith("_") or name == "modules" or name not in self.table_names():
            raise AttributeError(name)
        return lambda: self.table(name)


def table_names(modules: Sequence[Any]) -> list[str]:
    """Return the names of the tables the modules compute, in module order."""
    return [n for m in modules for n in getattr(m, "TABLES", {})]


def _release_freed_memory() -> None:
    """Make glibc return large freed blocks to the system (no-op elsewhere).

    glibc raises its mmap threshold each time a large mmapped block is freed, so after the first few
    large numpy arrays every later one comes from the heap, which is never given back: the process
    would keep its highest footprint for good.  A fixed threshold keeps large blocks mmapped.
    """
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(-3, 1 << 20)       # M_MMAP_THRESHOLD: 1 MiB, fixed
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass
    # The decoders build Arrow arrays: pyarrow's pool keeps what they freed unless asked to let it go.
    try:
        import pyarrow

        pyarrow.default_memory_pool().release_unused()
    except (ImportError, AttributeError):
        pass


class _LazyTables(Mapping):
    """Packet tables by capture file (`_files`: the files, or a dict keyed by them), read when asked for."""

    _files: Any

    def __contains__(self, file: object) -> bool:
        return file in self._files

    def __iter__(self) -> Iterator[str]:
        return iter(self._files)

    def __len__(self) -> int:
        return len(self._files)


class DecryptedTables(_LazyTables):
    """The alignment's columns of a bundle's packet captures, each read with keys when asked for (not kept)."""

    def __init__(self, bundle: Bundle, decoder: str, keys: Sequence[Any]):
        import xlayer.timeline.match as mm
        from parsers.schema import NAMES

        self._bundle, self._decoder, self._keys = bundle, decoder, keys
        self._cols = [c for c in NAMES if c in set(mm.READ_COLS)]
        self._files = [e.file for e in bundle.captures if e.is_packets]

    def __getitem__(self, file: str) -> pl.DataFrame:
        path = self._bundle.file_path(file)
        if not path.is_file():
            raise BundleError(f"{file}: capture file is missing from the bundle")
        return read_packets(path, self._cols, self._decoder, keys=self._keys)


class _IpcTables(_LazyTables):
    """The alignment's columns of spilled captures by capture file, each read from the capture's chunk
    files only when asked for (not kept)."""

    def __init__(self, raw: dict[str, list[str]], columns: dict[str, list[str]]):
        self._raw, self._columns = raw, columns
        self._files = {f: paths[0] for f, paths in raw.items()}     # where each capture's spill is

    def __getitem__(self, file: str) -> pl.DataFrame:
        # left in its chunks: a rechunk would hold the table twice at once (b130's alignment peaked
        # 663 MB with it, 611 MB without; the same alignment)
        return _read_chunks(self._raw[file], self._columns[file])


# Without the cache, spill the packet tables to disk when the bundle's packet captures hold more than this.
SPILL_MIN_BYTES = 64 << 20
# Spill directories are TMPDIR/xlayer-timeline-PID-START-RANDOM: PID and START (its start time in clock
# ticks since boot, 0 where /proc is absent) say whose it is, so that one left by a process that died
# without cleaning up (SIGKILL, power loss, a SIGTERM before the handlers were set) is found and removed
# by the next timeline opened; START tells a dead owner from a new process that was given its PID.
SPILL_PREFIX = "xlayer-timeline-"


def _start_ticks(pid: int) -> int | None:
    """Return a process's start time (clock ticks since boot): 0 without /proc, None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except FileNotFoundError:
        return None if os.path.isdir("/proc/self") else (0 if process_alive(pid) else None)
    except OSError:
        return 0
    try:    # the command name (field 2) may hold spaces and parentheses: count from the last ')'
        return int(stat[stat.rindex(b")") + 2:].split()[19])
    except (ValueError, IndexError):
        return 0



def new_spill_dir() -> str:
    """Return a new spill directory under TMPDIR, named after this process (see SPILL_PREFIX)."""
    pid = os.getpid()
    return tempfile.mkdtemp(prefix=f"{SPILL_PREFIX}{pid}-{_start_ticks(pid) or 0}-")


def _spill_owner(name: str) -> tuple[int, int] | None:
    """Return (pid, start ticks) from a spill directory's name, or None if it is not one of ours."""
    parts = name[len(SPILL_PREFIX):].split("-") if name.startswith(SPILL_PREFIX) else []
    if len(parts) != 3 or not (parts[0].isascii() and parts[1].isascii() and parts[0].isdigit() and parts[1].isdigit()):
        return None
    return int(parts[0]), int(parts[1])


def clean_stale_spills(root: str | os.PathLike | None = None) -> int:
    """Remove the spill directories in `root` (TMPDIR) of processes that are gone; return how many.

    Only our user's: another user's process may be alive in another PID namespace.
    """
    root = os.fspath(root) if root is not None else tempfile.gettempdir()
    try:
        names = os.listdir(root)
    except OSError:
        return 0
    n = 0
    for name in names:
        owner = _spill_owner(name)
        if owner is None or owner[0] == os.getpid():
            continue
        path = os.path.join(root, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not os.path.isdir(path) or os.path.islink(path) or st.st_uid != os.getuid():
            continue
        now = _start_ticks(owner[0])
        if now is None or (owner[1] and now and now != owner[1]):   # gone, or its PID reused since
            shutil.rmtree(path, ignore_errors=True)
            n += not os.path.exists(path)
    return n


def _remove_spill(path: str, owner: int) -> None:
    """Remove a spill directory, from the process that made it only (a forked child inherits the
    finalizer that calls this, and must not take its parent's files away)."""
    if os.getpid() == owner:
        shutil.rmtree(path, ignore_errors=True)


def open_timeline(bundle: Bundle | str | os.PathLike, reference: str | None = None, *, decoder: str = "fast",
                  bin_ns: int = 100_000_000, progress: Callable[[str], None] | None = None,
                  spill: bool | None = None, modules: Sequence[Any] = (), cache: bool = True,
                  keys: Sequence[Any] | None = None) -> Timeline:
    """Return the bundle's Timeline: captures read and aligned once; derived tables computed on demand.

    With `cache` (the default), the decoded and aligned packet tables and every derived table are kept
    in the decode cache (`xlayer.timeline.cache`) and read back by the next command on the same
    captures; without it, `spill` (default: when the packet captures total more than SPILL_MIN_BYTES)
    keeps the packet tables in temporary IPC files instead of memory (module docstring).  `modules` are
    the table modules (`xlayer.metrics.MODULES` for the metric tables).  `keys` (parsers.crypto keys)
    decrypt protected 802.11 frames; with keys the cache is not used (nothing derived from a secret
    is stored).
    """
    from xlayer.timeline import cache as tcache

    if not isinstance(bundle, Bundle):
        bundle = open_bundle(bundle)
    clean_stale_spills()
    cols = needed_columns(modules)
    key = build = None
    if cache and not keys:
        key = tcache.entry_key(_key_parts(bundle, decoder, cols, reference, bin_ns, modules))
        entry = tcache.lookup(key)
        if entry is not None:
            if progress is not None:
                progress("decoded tables from the cache")
            try:
                return _from_entry(bundle, entry, bin_ns, modules)
            except (OSError, ValueError, KeyError, TypeError):
                shutil.rmtree(entry.path, ignore_errors=True)   # damaged (by hand?): built again below
        try:
            build = tcache.begin(key)
        except OSError:
            build = None    # no writable cache here: read as without it
    created: list[str] = [str(build)] if build is not None else []
    try:
        tl = _open_timeline(bundle, reference, decoder, bin_ns, progress,
                            True if build is not None else spill, created, modules,
                            str(build) if build is not None else None, keys)
        tl.host_state()     # read now, so its read errors are known to every output (and kept in the cache)
        if build is not None:
            tl = _commit(tl, build, key)
        return tl
    except BaseException:
        # a failure (or an interrupt) before the Timeline owns its spill directory: remove it here
        for d in created:
            shutil.rmtree(d, ignore_errors=True)
        raise


def _key_parts(bundle: Bundle, decoder: str, cols: list[str], reference: str | None, bin_ns: int,
               modules: Sequence[Any]) -> dict[str, Any]:
    from xlayer.timeline.cache import fingerprint

    files: dict[str, Any] = {}
    for e in bundle.captures:
        path = bundle.file_path(e)
        files[e.file] = fingerprint(path) if path.is_file() else None
    return {"manifest": bundle.to_dict(), "files": files, "decoder": decoder, "columns": cols,
            "reference": reference, "bin_ns": bin_ns, "modules": [m.__name__ for m in modules]}


def _commit(tl: Timeline, build: Any, key: str) -> Timeline:
    """Return the timeline after its build directory became a cache entry (paths moved with it)."""
    from dataclasses import asdict

    from xlayer.timeline import cache as tcache

    rel = {f: sp.relative(build) for f, sp in tl._spilled.items()}
    # "packets": each capture's derived file (what completes its table); "spilled": all of its files
    meta = {"bundle": str(tl.bundle.path), "alignment": asdict(tl.alignment), "errors": tl.errors,
            "read_stats": {f: st.as_dict() for f, st in tl.read_stats.items()},
            "packets": {f: r["derived"] for f, r in rel.items()}, "spilled": rel}
    entry = tcache.commit(build, key, meta)
    tl._spilled = {f: Spilled.under(entry.path, r) for f, r in rel.items()}
    tl._spill_dir = None
    tl._cached = entry
    return tl


def _from_entry(bundle: Bundle, entry: Any, bin_ns: int, modules: Sequence[Any]) -> Timeline:
    """Return the timeline a complete cache entry holds."""
    from collections import Counter

    from xlayer.timeline.align import Alignment, CaptureAlignment

    meta = entry.meta
    a = meta["alignment"]
    al = Alignment(a["reference"], a["reference_clock"], [CaptureAlignment(**c) for c in a["captures"]],
                   a["clocks"], a["seconds"])
    stats = {}
    for f, d in meta["read_stats"].items():
        d = dict(d)
        for k in ("linktypes", "malformed_reasons", "rt_layouts"):
            d[k] = Counter({(int(x) if k == "linktypes" else x): n for x, n in d[k].items()})
        stats[f] = IngestStats(**d)
    spilled = {f: Spilled.under(entry.path, r) for f, r in meta["spilled"].items()}
    if set(spilled) != set(meta["packets"]):
        raise KeyError("packets")
    for p in (f for sp in spilled.values() for f in sp.files()):
        if not os.path.isfile(p):
            raise OSError(f"{p}: missing from the cache entry")
    os.utime(entry.path / "meta.json")      # last use, for `xlayer cache list`
    return Timeline(bundle, al, bin_ns=bin_ns, modules=tuple(modules), errors=dict(meta["errors"]),
                    read_stats=stats, _spilled=spilled, _cached=entry)


def _open_timeline(bundle: Bundle, reference: str | None, decoder: str, bin_ns: int,
                   progress: Callable[[str], None] | None, spill: bool | None, created: list[str],
                   modules: Sequence[Any], spill_dir: str | None, keys: Sequence[Any] | None = None) -> Timeline:
    import xlayer.timeline.match as mm
    from xlayer.timeline.align import align_bundle

    _release_freed_memory()
    cols = needed_columns(modules)
    if spill is None:
        size = 0
        for e in bundle.captures:
            path = bundle.file_path(e)
            if e.is_packets and path.is_file():
                size += path.stat().st_size
        spill = size > SPILL_MIN_BYTES
    if spill and spill_dir is None:
        spill_dir = new_spill_dir()
        created.append(spill_dir)
    raw: dict[str, pl.DataFrame] = {}
    raw_files: dict[str, list[str]] = {}
    align_cols: dict[str, list[str]] = {}
    raw_names: dict[str, list[str]] = {}
    errors: dict[str, str] = {}
    read_stats: dict[str, IngestStats] = {}
    for n, e in enumerate(bundle.captures):
        if not e.is_packets:
            continue
        if progress is not None:
            progress(f"reading {e.file}")
        try:
            path = bundle.file_path(e)
            if not path.is_file():
                raise BundleError(f"{e.file}: capture file is missing from the bundle")
            if spill_dir is None:
                raw[e.file] = read_packets(path, cols, decoder, stats=read_stats.setdefault(e.file, IngestStats()),
                                           keys=keys)
            else:
                d = os.path.join(spill_dir, f"{n:03d}")
                os.makedirs(d)
                # what the alignment reads stays on disk too until every capture is read (it is read
                # back from the chunk files): reading the next capture holds no earlier one in memory
                raw_files[e.file], align_cols[e.file], raw_names[e.file] = _spill_read(
                    path, cols, list(mm.READ_COLS), d, decoder, stats=read_stats.setdefault(e.file, IngestStats()),
                    keys=keys)
                _release_freed_memory()
        except Exception as exc:  # noqa: BLE001 - one unreadable capture must not stop the others
            if _disk_full(exc):
                # the scratch space, not the capture, failed: every later capture would fail alike
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)) from exc
            errors[e.file] = f"{type(exc).__name__}: {exc}"
    if progress is not None:
        progress("aligning clocks")
    # the alignment reads each capture's columns once, in turn: mapped back only then, so that one
    # capture's are in memory at a time rather than all four beside the alignment's working tables
    al = align_bundle(bundle, reference, decoder=decoder,
                      tables=_IpcTables(raw_files, align_cols) if spill_dir else raw)
    _release_freed_memory()
    tl = Timeline(bundle, al, bin_ns=bin_ns, modules=tuple(modules), errors=errors, _spill_dir=spill_dir,
                  read_stats=read_stats)
    if spill_dir is not None and spill_dir in created:
        # removed when the timeline goes, or at exit (after an exception, KeyboardInterrupt or Stop)
        weakref.finalize(tl, _remove_spill, spill_dir, os.getpid())
    fragments = {"ip_mf", "ip_frag_offset", "ip_id"} <= set(cols)
    for e in bundle.captures:
        if e.file in raw_files:
            # The decoded chunks stay as they were written: only the columns the alignment and the flow
            # keys change are written beside them (rewriting every column cost more than the decode).
            tl._spilled[e.file] = _spill_derive(tl, e, raw_files.pop(e.file), raw_names.pop(e.file),
                                             fragments)
            continue
        if e.file not in raw:
            continue
        df = _with_flows(raw.pop(e.file).with_columns(
            pl.lit(e.file, pl.String).alias("capture_file"), pl.lit(e.vantage, pl.String).alias("vantage"),
            pl.lit(e.clock, pl.String).alias("clock"), pl.lit(e.kind, pl.String).alias("kind")),
            fragments=fragments)
        tl._packets[e.file] = tl._align(df, e)
    return tl


_FLOW_KEY = ["ip_src", "ip_dst", "ip_proto", "sport", "dport"]
_FLOW_HASH_SEED = 0x5EED


def _datagram_ports(keys: pl.DataFrame) -> pl.DataFrame:
    """Return the key columns with the later fragments of an IP datagram given its first fragment's ports."""
    frag = is_fragment()
    if not keys.select(frag.any()).item():
        return keys.select(_FLOW_KEY)
    # the fragments alone are grouped (the few rows the window is about), and written back in place
    sub = keys.with_row_index("_r").filter(frag)
    sub = sub.select("_r", *(pl.col(p).fill_null(pl.col(p).drop_nulls().first().over(FRAGMENT_KEY))
                             for p in ("sport", "dport")))
    idx = sub.get_column("_r")
    return keys.select(_FLOW_KEY).with_columns(keys.get_column(p).clone().scatter(idx, sub.get_column(p))
                                               for p in ("sport", "dport"))


def _with_flows(df: pl.DataFrame | pl.LazyFrame, fragments: bool) -> pl.DataFrame | pl.LazyFrame:
    """Return the packet table with `flow`, `conn` and `dir` appended (`flowkey.flow_exprs`'s values)."""
    # The strings are built once per distinct (addresses, protocol, ports), a handful per capture, and
    # joined back: built per packet, with the fragments' window over every row, they took 0.16 s per 94 k
    # packets. A missing column (a table read without ports) leaves the expressions to say so.
    names = df.collect_schema().names() if isinstance(df, pl.LazyFrame) else df.columns
    extra = [*FRAGMENT_KEY[3:], "ip_mf", "ip_frag_offset"] if fragments else []
    if not set(_FLOW_KEY + extra) <= set(names):
        return df.with_columns(flow_exprs(fragments=fragments))
    out = ["flow", "conn", "dir"]
    if isinstance(df, pl.LazyFrame):
        # A spilled capture, streamed: only its distinct keys are held, and each row's strings are looked
        # up by the keys' hash, row by row (a join would hold the whole capture: 417 -> 901 MB at 0.3x).
        # Fragments (rare) and hashes that collide among the distinct keys take the expressions, as before.
        if fragments and df.select(is_fragment().any()).collect().item():
            return df.with_columns(flow_exprs(fragments=True))
        h = pl.struct(_FLOW_KEY).hash(seed=_FLOW_HASH_SEED)
        distinct = df.select(_FLOW_KEY).unique().collect().with_columns(*flow_exprs(), h.alias("_h"))
        if distinct.get_column("_h").n_unique() != distinct.height:
            return df.with_columns(flow_exprs())
        return df.with_columns(h.replace_strict(distinct.get_column("_h"), distinct.get_column(c),
                                                return_dtype=pl.String).alias(c) for c in out)
    keys = _datagram_ports(df.select(_FLOW_KEY + extra)) if fragments else df.select(_FLOW_KEY)
    distinct = keys.unique().with_columns(flow_exprs()).select(*_FLOW_KEY, *out)
    got = keys.join(distinct, on=_FLOW_KEY, how="left", nulls_equal=True, maintain_order="left")
    return df.with_columns(got.select(out).get_columns())


def read_notes(tl: Timeline) -> list[str]:
    """Return one line per capture whose reading skipped or could not fully decode records (with the counts)."""
    out = []
    for f, st in getattr(tl, "read_stats", {}).items():
        bits = []
        if st.malformed:
            top = ", ".join(f"{r} x{n}" for r, n in st.malformed_reasons.most_common(2))
            bits.append(f"{st.malformed:,} of {st.records:,} records malformed ({top})")
        if st.truncated_tail:
            bits.append("the file ends inside its last record (skipped)")
        if st.skipped_bytes:
            bits.append(f"{st.skipped_bytes:,} bytes skipped")
        if st.error:
            bits.append(f"reading stopped early: {st.error}")
        note = decryption_note(st.decryption)
        if note:
            bits.append(note)
        if bits:
            out.append(f"{f}: " + "; ".join(bits))
    return out


def decryption_note(d: dict | None) -> str | None:
    """Return what decrypting a capture with the keys given did, in one phrase (None: no keys given)."""
    if not d:
        return None
    def n(k: str, one: str, many: str) -> str:
        return f"{d[k]:,} {one if d[k] == 1 else many}"

    text = (f"decrypted {d['decrypted']:,} of {n('protected', 'protected frame', 'protected frames')} "
            f"({n('hs_handshakes', 'handshake', 'handshakes')}, {n('keys_derived', 'key', 'keys')} derived")
    for k, one, many in (("mic_failures", "MIC failure", "MIC failures"), ("no_key", "with no key", "with no key"),
                         ("hs_handshakes_failed", "handshake failed (wrong passphrase or PMK?)",
                          "handshakes failed (wrong passphrase or PMK?)"),
                         ("mic_unverified", "cut by the snap length (MIC unverified)",
                          "cut by the snap length (MIC unverified)"), ("wep", "WEP, not decrypted", "WEP, not decrypted")):
        if d.get(k):
            text += f", {n(k, one, many)}"
    return text + ")"
