"""Write a timeline's metric tables to a directory of Parquet files with a manifest saying what is there.

Each table is written to a temporary file beside it (``.NAME.parquet.PID-RANDOM.part``) and renamed
when complete, and ``metrics.json`` is rewritten (also through a rename) in the same step, with
SIGINT/SIGTERM held between the two; if the manifest cannot be rewritten the table is taken back
out.  So at any moment — after an interrupt, a full disk or any other error — the directory holds
whole Parquet files and a manifest listing exactly those, with ``complete`` false until the last
table is in, and no temporary file.  A run starts by replacing the manifest with an empty one and
removing the table files of an earlier run.  Writers of one directory take turns: each holds an
exclusive lock on the directory (``flock``) while it writes.  The manifest documents every table's
columns (name, dtype, unit, meaning) and carries the clock alignment the tables are on.

Times for SQL: beside every epoch time column goes the same instant as a ``Datetime("ns", "UTC")``
column, named by one rule: ``NAME_ns`` -> ``NAME_utc`` (``ts_ns`` -> ``ts_utc``, ``bin_start_ns`` ->
``bin_start_utc``), so DuckDB, polars or pyarrow filter a time range without converting.  An epoch time
is a column the schema declares integer with unit ``ns`` and names ``ts_ns``, ``ts_local_ns`` or
``*_ts_ns``, ``*_start_ns``, ``*_end_ns``; other ``ns`` columns (``rtt_ns``, ``owd_ns``, ``sojourn_ns``,
``bin_ns``...) are durations and get none.  The Int64 columns stay: they are the exact values the
tables are computed on.  The manifest documents the added columns too.

`whole_file` and `OutputError` are the same machinery for any single output file (the HTML report).
"""
from __future__ import annotations

import base64
import contextlib
import errno
import fcntl
import json
import os
import re
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from xlayer.metrics import table_names
from xlayer.metrics.schema import DOCS, REGISTRY, Column
from xlayer.signals import deferred, process_alive
from xlayer.timeline import Timeline
from xlayer.timeline.open import read_notes

MANIFEST = "metrics.json"
VERSION = 1
_TEMP = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)-[0-9a-f]+\.part$")


class OutputError(OSError):
    """An output file or directory could not be written; `filename` is the directory it goes in."""


@dataclass
class Written:
    """What a `write_metrics` call has put in place so far (for the caller to report after a failure)."""

    manifest: bool = False                       # the run's own metrics.json replaced any earlier one
    tables: list[str] = field(default_factory=list)


def _cause(exc: OSError) -> int | None:
    # pyarrow and polars name the cause only in their text: "[errno 28] ...", "... (os error 28)"
    m = re.search(r"\[errno (\d+)\]|\(os error (\d+)\)", str(exc))
    return int(m.group(1) or m.group(2)) if m else None


def reason(exc: OSError) -> str:
    """Return why an OSError happened, in words ("No space left on device"), also for pyarrow's and polars'."""
    code = _cause(exc)
    if code is not None:
        return os.strerror(code)
    return exc.strerror or str(exc)


@contextlib.contextmanager
def writing_into(directory: Path) -> Iterator[None]:
    """Turn an OSError of the block into an OutputError naming `directory` (the output's); yield None."""
    try:
        yield
    except OutputError:
        raise
    except OSError as exc:
        raise OutputError(_cause(exc) or exc.errno or errno.EIO, reason(exc), str(directory)) from exc



def remove_stale_temps(directory: Path, names: set[str] | None = None) -> None:
    """Remove temporary files left in `directory` by writers that are gone (killed); return None.

    Only `whole_file`'s own temporary files (of targets in `names`, if given) whose process no
    longer runs are removed: a live writer's are its own.
    """
    for p in directory.glob(".*.part"):
        m = _TEMP.match(p.name)
        if m is None or (names is not None and m["name"] not in names) or process_alive(int(m["pid"])):
            continue
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


@contextlib.contextmanager
def whole_file(target: Path) -> Iterator[Path]:
    """Yield a new empty temporary file beside `target`; it is removed when the block ends unless the
    block renamed it (onto `target`): interrupted, failed or not, no temporary file is left."""
    tmp: Path | None = None
    try:
        with deferred():
            name = target.with_name(f".{target.name}.{os.getpid()}-{secrets.token_hex(4)}.part")
            # O_EXCL: never someone else's file; mode 0o666 through the umask, as a plain open() gives
            os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            tmp = name
        yield tmp
    finally:
        if tmp is not None:
            with deferred(), contextlib.suppress(FileNotFoundError):
                tmp.unlink()


def _write_json(path: Path, obj: Any) -> None:
    # The file is replaced whole (rename), which is what an interrupt or a full disk needs.  It is not
    # forced to disk, as the tables are not: an fsync per table cost ~20 ms (0.1x bundle: 0.46 s of the
    # run) and one at the end 0.3 s on a large bundle (the journal commit writes the spill files out);
    # a power cut may lose the last tables, which the bundle gives again.
    with whole_file(path) as tmp:
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=1, allow_nan=False, default=str)
        os.replace(tmp, path)


@contextlib.contextmanager
def _locked(directory: Path, progress: Callable[[str], None] | None) -> Iterator[None]:
    """Hold an exclusive lock on `directory` while the block runs (writers of one directory take turns)."""
    with writing_into(directory):
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        with writing_into(directory):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if progress is not None:
                    progress(f"waiting for another writer of {directory}")
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError as exc:
                # a file system without flock (some network ones): write unlocked rather than not at all
                if exc.errno not in (errno.ENOLCK, errno.EINVAL, errno.EOPNOTSUPP):
                    raise
        yield
    finally:
        with deferred():
            os.close(fd)        # releases the lock


UTC_DTYPE = pl.Datetime("ns", "UTC")
# Names of epoch instants (the schema's unit alone, "ns", does not tell an instant from a duration).
_EPOCH_NAME = re.compile(r"^(?:ts|ts_local|.+_ts|.+_start|.+_end)_ns$")


def is_epoch_time(c: Column) -> bool:
    """Return whether column `c` holds epoch instants in integer nanoseconds (not a duration)."""
    return c.unit == "ns" and c.dtype.is_integer() and _EPOCH_NAME.match(c.name) is not None


def utc_name(name: str) -> str:
    """Return the name of the Datetime column written beside epoch time column `name` (`ts_ns` -> `ts_utc`)."""
    return name.removesuffix("_ns") + "_utc"


def _written_columns(name: str) -> list[tuple[Column, str | None]]:
    """Return the columns of table `name` as written, each with the epoch column a UTC twin is made from."""
    out: list[tuple[Column, str | None]] = []
    for c in REGISTRY[name]:
        out.append((c, None))
        if is_epoch_time(c):
            out.append((Column(utc_name(c.name), UTC_DTYPE, "", f"{c.name} as a UTC timestamp (the same instant)"),
                        c.name))
    return out


def parquet_schema(name: str) -> dict[str, pl.DataType]:
    """Return {column: dtype} of table `name` as `write_metrics` writes it (the schema's, plus UTC twins)."""
    return {c.name: c.dtype for c, _ in _written_columns(name)}


def with_utc_times(name: str, df: pl.DataFrame) -> pl.DataFrame:
    """Return table `name` as written: a `Datetime("ns", "UTC")` column beside each epoch time column."""
    return df.select(pl.col(src).cast(UTC_DTYPE).alias(c.name) if src is not None else pl.col(c.name)
                     for c, src in _written_columns(name))


def without_utc_times(name: str, df: pl.DataFrame) -> pl.DataFrame:
    """Return a table read back from Parquet without the UTC twins `with_utc_times` added."""
    return df.drop([utc_name(c.name) for c in REGISTRY[name] if is_epoch_time(c)], strict=False)


def table_doc(name: str) -> dict[str, Any]:
    """Return a table's documentation: what a row is, and each written column's dtype, unit and meaning."""
    return {"row": DOCS.get(name, ""), "columns": [
        {"name": c.name, "dtype": str(c.dtype), "unit": c.unit, "doc": c.doc} for c, _ in _written_columns(name)]}


def _start(outdir: Path, man: dict[str, Any], written: Written) -> None:
    """Replace any earlier run's manifest with this run's (no tables yet) and remove its table files."""
    remove_stale_temps(outdir, {MANIFEST} | {f"{n}.parquet" for n in table_names()})
    for legacy in [outdir / f"{MANIFEST}.part", *outdir.glob("*.parquet.part")]:   # older xlayer's temps
        with contextlib.suppress(FileNotFoundError):
            legacy.unlink()
    # held together: the old files must not outlive the manifest that listed them, unlisted
    with deferred():
        _write_json(outdir / MANIFEST, man)
        written.manifest = True
        for n in table_names():
            with contextlib.suppress(FileNotFoundError):
                (outdir / f"{n}.parquet").unlink()


# polars hands string columns to Arrow as views at no cost, as plain strings only through a copy (b13's
# tables: 0.11 s of 0.44 s). Both are the same Parquet column (UTF-8 byte arrays); only the Arrow schema
# stored with the file, which Arrow readers restore, tells them apart: the views are written and the
# plain schema stored, so the file is the one `df.to_arrow()` would give (as `xlayer.ingest` does).
_VIEWS = hasattr(pl, "CompatLevel") and hasattr(pq.ParquetWriter, "add_key_value_metadata")


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """Return the columns of `schema` worth dictionary-encoding in Parquet: its strings."""
    # Strings (capture file, fate, station, direction...) repeat a few values; numbers (stamps, frame
    # numbers, sizes) rarely do, and trying a dictionary on them first made the files 1.7x larger and
    # the writing slower (b13's tables: 14.3 -> 8.5 MB).
    return [f.name for f in schema
            if pa.types.is_string(f.type) or pa.types.is_large_string(f.type) or pa.types.is_string_view(f.type)]


def write_parquet(df: pl.DataFrame, path: str | os.PathLike) -> None:
    """Write `df` to `path` as zstd Parquet, dictionary pages for strings only; return None.

    The file is byte for byte `pq.write_table(df.to_arrow(), path, compression="zstd",
    use_dictionary=dictionary_columns(...))`'s. A full disk raises OSError.
    """
    plain = df.head(0).to_arrow().schema
    if not _VIEWS:
        pq.write_table(df.to_arrow(), str(path), compression="zstd", use_dictionary=dictionary_columns(plain))
        return
    table = df.to_arrow(compat_level=pl.CompatLevel.newest())
    with pq.ParquetWriter(str(path), table.schema, compression="zstd", use_dictionary=dictionary_columns(plain),
                          store_schema=False) as w:
        # the key and encoding Arrow's own writer uses (base64 of the IPC schema message)
        w.add_key_value_metadata({"ARROW:schema": base64.b64encode(plain.serialize().to_pybytes()).decode()})
        w.write_table(table)


def _put_table(outdir: Path, name: str, df: Any, man: dict[str, Any], written: Written) -> None:
    """Write one table and list it in the manifest, both or neither."""
    target = outdir / f"{name}.parquet"
    with whole_file(target) as tmp:
        # pyarrow's writer reports a full disk as OSError (polars would wrap it in ComputeError).
        write_parquet(with_utc_times(name, df), tmp)
        with deferred():
            os.replace(tmp, target)
            man["tables"][name] = {"file": target.name, "rows": df.height, **table_doc(name)}
            try:
                _write_json(outdir / MANIFEST, man)
            except BaseException:
                # the manifest still lists the tables before this one: take this one back out
                del man["tables"][name]
                with contextlib.suppress(FileNotFoundError):
                    target.unlink()
                raise
            written.tables.append(name)


def write_metrics(tl: Timeline, out: str | os.PathLike, tables: list[str] | None = None,
                  progress: Callable[[str], None] | None = None, written: Written | None = None) -> dict[str, Any]:
    """Write the metric tables as Parquet under `out`; return the manifest written (metrics.json).

    A failure to write under `out` raises OutputError; what was put in place by then is in `written`
    (pass one to see it after a failure or an interrupt).
    """
    outdir = Path(out)
    names = tables if tables is not None else table_names()
    unknown = [n for n in names if n not in table_names()]
    if unknown:
        raise KeyError(f"no metric table {', '.join(map(repr, unknown))} (tables: {', '.join(table_names())})")
    written = written if written is not None else Written()
    man: dict[str, Any] = {
        "xlayer_metrics": VERSION,
        "bundle": str(tl.bundle.path) if tl.bundle.path is not None else None,
        "tags": dict(tl.bundle.tags),
        "bin_ns": tl.bin_ns,
        "alignment": tl.alignment.as_json(),
        "read_errors": dict(tl.errors),
        "complete": False,
        "tables": {},
    }
    # files read in part (their counts), as analyze notes them
    if read_notes(tl):
        man["read_notes"] = read_notes(tl)
    with writing_into(outdir):
        outdir.mkdir(parents=True, exist_ok=True)
    with _locked(outdir, progress):
        with writing_into(outdir):
            _start(outdir, man, written)
        for name in names:
            if progress is not None:
                progress(name)
            df = tl.table(name)     # its errors are the timeline's (decode cache, spill files), not the output's
            with writing_into(outdir):
                _put_table(outdir, name, df, man, written)
        man["complete"] = True
        with writing_into(outdir):
            _write_json(outdir / MANIFEST, man)
    return man
