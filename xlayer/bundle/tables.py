"""A bundle's captures as lazy polars tables, and what reading each one finds (`describe`).

Nothing is read until a frame is collected; packet captures are then streamed chunk by chunk.  Host
TCP state is read by the reader `parsers.hoststate.READERS` names for its format; what it could not
read (lines it skipped as unreadable, rows with unreadable values, its warnings) is counted in a
`parsers.hoststate.ReadStats` the caller passes (`scan(..., stats=)`, `read_state(..., stats=)`) and
summed up in one line by `ReadStats.summary()`: `describe` gives it as the capture's ``read_notes``
(added to its ``notes``, which `bundle show` prints) and its counts as ``unreadable`` and in
``malformed``.  The timeline (`Timeline.host_state`, read when the timeline is opened) keeps it as
`state_read_error` says: a file of which nothing could be read is a read error of the file (in
metrics.json's ``read_errors``, a warning from `xlayer metrics`, which still exits 0 since the other
tables are whole, analyze's notes and the report); a file read in part has its counts in the
timeline's ``read_stats`` like a packet capture's malformed records (`state_ingest_stats`), which
analyze's and the report's notes and metrics.json's ``read_notes`` give.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from parsers.formats.detect import HEAD_BYTES, WHOLE_MAX, guess_format_bytes
from xlayer.bundle.manifest import ADDED_COLUMNS, Bundle, BundleError, CaptureEntry, open_regular

if TYPE_CHECKING:
    from parsers.decode.ingest import IngestStats
    from parsers.hoststate.common import ReadStats


def scan(bundle: Bundle, which: str | CaptureEntry, decoder: str = "fast",
         stats: ReadStats | None = None) -> pl.LazyFrame:
    """Return one capture as a lazy table with capture_file, vantage and clock columns added.

    Nothing is read until the frame is collected; packet captures are then streamed chunk by
    chunk, so a filtered or head()-limited query does not hold the whole file in memory.  For a host
    state capture, `stats` is set to what the last collect read and skipped.
    """
    e = bundle.entry(which)
    path = bundle.file_path(e)
    # A stat, not a read: fail here, where the caller named the capture, not deep inside collect().
    if not path.is_file():
        raise BundleError(f"{e.file}: capture file is missing from the bundle ({path})")
    consts = {"capture_file": e.file, "vantage": e.vantage, "clock": e.clock}
    if e.is_packets:
        return _packet_frame(path, consts, decoder)
    return _state_frame(path, consts, e.format, stats)


def packets(bundle: Bundle, decoder: str = "fast") -> pl.LazyFrame:
    """Return all packet captures (air and wired) as one lazy table, concatenated diagonally."""
    frames = [scan(bundle, c, decoder) for c in bundle.captures if c.is_packets]
    if not frames:
        from parsers.schema import SCHEMA

        return pl.LazyFrame(schema=_with_added(SCHEMA))
    return frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal")


def tcp_state(bundle: Bundle) -> pl.LazyFrame:
    """Return all host TCP state captures as one lazy table, concatenated diagonally."""
    frames = [scan(bundle, c) for c in bundle.captures if not c.is_packets]
    if not frames:
        from parsers.hoststate.common import SCHEMA

        return pl.LazyFrame(schema=_with_added(SCHEMA))
    return frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal")


def describe(bundle: Bundle, decoder: str = "fast") -> dict[str, Any]:
    """Return the manifest plus, per capture, what reading it found (counts, span, errors)."""
    d = bundle.to_dict()
    d["path"] = str(bundle.path) if bundle.path is not None else None
    d["captures"] = [dict(c.to_dict(), **_read_summary(bundle, c, decoder)) for c in bundle.captures]
    return d


def _read_summary(bundle: Bundle, e: CaptureEntry, decoder: str) -> dict[str, Any]:
    out: dict[str, Any] = {"records": None, "first_ts_ns": None, "last_ts_ns": None, "error": None}
    try:
        path = bundle.file_path(e)
        if not path.is_file():
            raise BundleError(f"{e.file}: capture file is missing from the bundle")
        out["file_bytes"] = path.stat().st_size
        out["format"] = e.format or guess_format(path)
        if e.is_packets:
            out.update(_packet_summary(path, decoder))
        else:
            out.update(_state_summary(path, out["format"], e.vantage))
            if out["read_notes"]:
                # `bundle show` prints a capture's notes: what could not be read goes beside the manifest's
                out["notes"] = "; ".join(n for n in (e.notes, out["read_notes"]) if n)
    except BundleError as exc:
        out["error"] = str(exc)
    except OSError as exc:
        out["error"] = f"{e.file}: {exc.strerror or exc}"
    except Exception as exc:  # noqa: BLE001 - one unreadable capture must not hide the others
        out["error"] = f"{e.file}: {type(exc).__name__}: {exc}"
    return out


def _state_summary(path: Path, fmt: str, vantage: str) -> dict[str, Any]:
    """Return what reading a host-state file found: rows, malformed (rows with unreadable values plus
    lines that could not be read at all), unreadable lines, skipped sockets, time span, and read_notes
    (`ReadStats.summary`: None when everything was read)."""
    from parsers.hoststate.common import ReadStats

    st = ReadStats()
    df = read_state(path, fmt, vantage, stats=st)
    first, last = _time_span(df)
    return {"records": df.height, "malformed": df.get_column("malformed").drop_nulls().len() + st.malformed_lines,
            "unreadable": st.malformed_lines, "skipped_sockets": st.skipped_sockets,
            "first_ts_ns": first, "last_ts_ns": last, "read_notes": st.summary()}


def state_read_error(st: ReadStats) -> str | None:
    """Return the read error of a host-state file of which nothing could be read (no row, some line
    unreadable), or None when something was read or nothing was wrong."""
    if st.rows or not st.malformed_lines:
        return None
    return f"nothing readable: {st.summary()}"


def state_ingest_stats(st: ReadStats) -> IngestStats:
    """Return a host-state reader's counts as the IngestStats a packet capture's reading gives: input
    lines as records, unreadable lines and rows with unreadable values as malformed, with the reasons."""
    from collections import Counter

    from parsers.decode.ingest import IngestStats

    reasons = Counter(st.reasons)
    if st.malformed_rows:
        reasons["rows with unreadable values"] += st.malformed_rows
    bad = st.malformed_lines + st.malformed_rows
    return IngestStats(path=st.path, format=st.source, records=max(st.lines, bad), decoded=st.rows - st.malformed_rows,
                       malformed=bad, malformed_reasons=reasons, warnings=list(st.warnings))


def guess_format(path: str | os.PathLike) -> str:
    """Return the format of the file at `path` from its content; raise BundleError if unknown."""
    p = Path(path)
    # a regular file only: a FIFO or a device is refused without being opened for reading
    with open_regular(p) as fh:
        try:
            head = fh.read(HEAD_BYTES)
        except OSError as exc:
            raise BundleError(f"{p}: cannot read: {exc.strerror or exc}") from None

        def whole() -> bytes:
            # bounded: never more than WHOLE_MAX bytes, even if the file grew since it was looked at
            if os.fstat(fh.fileno()).st_size > WHOLE_MAX:
                return b""
            fh.seek(0)
            data = fh.read(WHOLE_MAX + 1)
            return data if len(data) <= WHOLE_MAX else b""

        fmt = guess_format_bytes(head, whole)
    if fmt is None:
        raise BundleError(f"{p}: cannot tell the format (not pcap, pcapng, ss text, tcp_info JSON lines, "
                          "iperf3 JSON or flent data)")
    return fmt



def _with_added(schema: Any) -> pl.Schema:
    s = pl.Schema(schema)
    for k in ADDED_COLUMNS:
        s[k] = pl.String
    return s


def _finish(df: pl.DataFrame, consts: dict[str, str], predicate: pl.Expr | None,
            with_columns: list[str] | None) -> pl.DataFrame:
    df = df.with_columns(pl.lit(v, dtype=pl.String).alias(k) for k, v in consts.items())
    # Filter before projecting: the predicate may use columns the projection leaves out.
    if predicate is not None:
        df = df.filter(predicate)
    if with_columns is not None:
        df = df.select(with_columns)
    return df


def _packet_frame(path: Path, consts: dict[str, str], decoder: str) -> pl.LazyFrame:
    from polars.io.plugins import register_io_source

    from parsers.schema import SCHEMA

    def source(with_columns: list[str] | None, predicate: pl.Expr | None, n_rows: int | None,
               batch_size: int | None) -> Iterator[pl.DataFrame]:  # noqa: ARG001 - plugin signature
        import parsers

        left = n_rows
        # Looked up at call time, so the reader is imported only when the frame is collected.
        with contextlib.closing(parsers.iter_tables(path, decoder=decoder)) as chunks:
            for chunk in chunks:
                df = _finish(chunk, consts, predicate, with_columns)
                if left is not None:
                    df = df.head(left)
                    left -= df.height
                yield df
                if left is not None and left <= 0:
                    return

    return register_io_source(source, schema=_with_added(SCHEMA), explain_name="xlayer bundle capture",
                              explain_detail=str(consts["capture_file"]))


def read_state(path: Path, fmt: str | None, vantage: str, stats: ReadStats | None = None) -> pl.DataFrame:
    """Return a host-state file as a table in parsers.hoststate.common's schema (format guessed if None);
    what was read, skipped and unreadable is counted into `stats`."""
    from parsers.hoststate import READERS, SCHEMA

    fmt = fmt or guess_format(path)
    if fmt not in READERS:
        raise BundleError(f"{path.name}: {fmt} is not a host TCP state format")
    df = READERS[fmt](path, vantage, stats=stats)   # every host-state reader names the rows' vantage itself
    # The lazy frame promised this schema before reading; hold the reader to it.
    return df.select(pl.col(k).cast(v) if k in df.columns else pl.lit(None, dtype=v).alias(k)
                     for k, v in SCHEMA.items())


def _state_frame(path: Path, consts: dict[str, str], fmt: str | None, stats: ReadStats | None) -> pl.LazyFrame:
    from polars.io.plugins import register_io_source

    from parsers.hoststate.common import SCHEMA, ReadStats

    def source(with_columns: list[str] | None, predicate: pl.Expr | None, n_rows: int | None,
               batch_size: int | None) -> Iterator[pl.DataFrame]:  # noqa: ARG001 - plugin signature
        st = ReadStats()
        df = _finish(read_state(path, fmt, consts["vantage"], stats=st), consts, predicate, with_columns)
        if stats is not None:   # the counts of this read, not added to an earlier collect's
            for f in fields(st):
                setattr(stats, f.name, getattr(st, f.name))
        yield df if n_rows is None else df.head(n_rows)

    return register_io_source(source, schema=_with_added(SCHEMA), explain_name="xlayer bundle tcp_state",
                              explain_detail=str(consts["capture_file"]))


def _packet_summary(path: Path, decoder: str) -> dict[str, Any]:
    import parsers

    st = parsers.IngestStats()
    try:
        for _ in parsers.iter_tables(path, decoder=decoder, stats=st):
            pass
    except parsers.CaptureError as exc:
        raise BundleError(f"{path.name}: {exc}") from None
    return {"records": st.records, "malformed": st.malformed, "first_ts_ns": st.first_ts_ns,
            "last_ts_ns": st.last_ts_ns, "container": st.format,
            "linktypes": {str(k): v for k, v in sorted(st.linktypes.items())},
            "interfaces": st.interfaces, "truncated_tail": st.truncated_tail, "read_error": st.error,
            "warnings": list(st.warnings)}


_TIME_NAMES = ("ts_ns", "time_ns", "timestamp_ns")
_SECONDS_NAMES = ("ts", "timestamp", "time", "epoch", "ts_s", "time_s")


def _time_span(df: pl.DataFrame) -> tuple[int | None, int | None]:
    """Return the first and last timestamp of a host-state table as epoch ns, if it has a time column."""
    if df.height == 0:
        return None, None
    for name, dt in df.schema.items():
        if isinstance(dt, pl.Datetime):
            s = df.get_column(name).dt.epoch("ns").drop_nulls()
            return (int(s.min()), int(s.max())) if len(s) else (None, None)
    for names, scale in ((_TIME_NAMES, 1), (_SECONDS_NAMES, 1_000_000_000)):
        for name in names:
            if name in df.columns and df.schema[name].is_numeric():
                s = df.get_column(name).drop_nulls()
                if len(s):
                    return int(round(s.min() * scale)), int(round(s.max() * scale))
    return None, None


__all__ = ["describe", "guess_format", "packets", "read_state", "scan", "state_ingest_stats", "state_read_error",
           "tcp_state"]
