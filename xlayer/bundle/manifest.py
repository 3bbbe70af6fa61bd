"""Experiment bundles: a directory of captures plus a `bundle.json` manifest, read as lazy polars tables.

The manifest format is the shared bundle spec (`xlayer_bundle: 1`).  Loading validates everything
a later step relies on -- above all that no `file` can point outside the bundle directory -- so a
manifest from someone else's machine is data, not a set of paths to trust.  Unknown keys are kept
and written back unchanged, so tools newer than this one can add fields without losing them here.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import tempfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import polars as pl

MANIFEST = "bundle.json"
CACHE_DIR = ".xlayer-cache"
VERSION = 1
KINDS = ("air", "wired", "tcp_state")
PACKET_KINDS = ("air", "wired")
PACKET_FORMATS = ("pcap", "pcapng")
STATE_FORMATS = ("ss", "tcpinfo-jsonl", "iperf3-json", "flent")
FORMATS = PACKET_FORMATS + STATE_FORMATS
STOP_REASONS = ("duration", "SIGINT", "SIGTERM", "disk_full", "error")
ADDED_COLUMNS = ("capture_file", "vantage", "clock")

# format -> (module under parsers, function); imported only when a table is read, because those
# parsers are written independently and a bundle must still open while one of them is missing.
STATE_READERS = {
    "ss": ("parsers.hoststate.ss", "read_ss"),
    "tcpinfo-jsonl": ("parsers.hoststate.tcpinfo", "read_tcpinfo_jsonl"),
    "iperf3-json": ("parsers.hoststate.iperf3", "read_iperf3_json"),
    "flent": ("parsers.hoststate.iperf3", "read_flent"),
}


class BundleError(Exception):
    """A bundle, its manifest or one of its captures cannot be used as asked."""


# ---------------------------------------------------------------------------------------------
# manifest entries

_ENTRY_KEYS = ("kind", "vantage", "file", "clock", "format", "channel", "iface", "netns", "notes",
               "complete", "packets", "if_drops", "bytes", "interval_s", "filter")


@dataclass
class CaptureEntry:
    """One capture file of a bundle: what it is, where it was taken, and which clock stamped it."""

    kind: str
    vantage: str
    file: str
    clock: str = ""                 # "" means: the vantage's own clock
    format: str | None = None       # None means: guess from the content when read
    channel: int | None = None
    iface: str | None = None
    netns: str | None = None
    notes: str = ""
    complete: bool | None = None
    packets: int | None = None
    if_drops: int | None = None
    bytes: int | None = None
    interval_s: float | None = None
    filter: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Same vantage, same clock, unless the manifest says otherwise.
        if not self.clock:
            self.clock = self.vantage

    @property
    def is_packets(self) -> bool:
        """Return True for packet captures (air or wired), False for host TCP state."""
        return self.kind in PACKET_KINDS

    def to_dict(self) -> dict[str, Any]:
        """Return the entry as the manifest's JSON object (unset optional fields left out)."""
        d: dict[str, Any] = {"kind": self.kind, "vantage": self.vantage, "file": self.file,
                             "clock": self.clock}
        for k in _ENTRY_KEYS[4:]:
            v = getattr(self, k)
            if v is None or (k == "notes" and v == ""):
                continue
            d[k] = v
        for k, v in self.extra.items():
            d.setdefault(k, v)
        return d

    @classmethod
    def from_dict(cls, d: Any, where: str = "capture") -> CaptureEntry:
        """Return the entry a manifest object describes; raise BundleError naming `where` if invalid."""
        if not isinstance(d, dict):
            raise BundleError(f"{where}: expected a JSON object, got {_json_type(d)}")
        for k in ("kind", "vantage", "file"):
            if k not in d:
                raise BundleError(f"{where}: missing required key '{k}'")
        known = {k: d[k] for k in _ENTRY_KEYS if k in d}
        extra = {k: v for k, v in d.items() if k not in _ENTRY_KEYS}
        if known.get("clock") is None:
            known["clock"] = ""
        if known.get("notes") is None:
            known["notes"] = ""
        entry = cls(**known, extra=extra)
        check_entry(entry, where)
        return entry


def _json_type(v: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(v), "a number")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


def check_relative_path(p: Any, where: str) -> str:
    """Return p if it is a relative path inside the bundle directory; raise BundleError otherwise."""
    if not isinstance(p, str) or not p:
        raise BundleError(f"{where}: 'file' must be a non-empty string")
    if "\x00" in p:
        raise BundleError(f"{where}: file {p!r} contains a NUL character")
    # Check both spellings: a manifest written on Windows, or crafted to look like one, must not
    # smuggle "..\\" or "C:" past a POSIX-only check.
    for pure in (PurePosixPath(p), PureWindowsPath(p)):
        if pure.is_absolute() or pure.anchor:
            raise BundleError(f"{where}: file {p!r} is an absolute path; files must be relative "
                              "to the bundle directory")
        if ".." in pure.parts:
            raise BundleError(f"{where}: file {p!r} leaves the bundle directory ('..')")
    if PurePosixPath(p).parts[0] in (MANIFEST, CACHE_DIR):
        raise BundleError(f"{where}: file {p!r} names the bundle's own manifest or cache")
    return p


def check_entry(e: CaptureEntry, where: str = "capture") -> None:
    """Raise BundleError if a capture entry breaks the spec; return None when it is valid."""
    if e.kind not in KINDS:
        raise BundleError(f"{where}: unknown kind {e.kind!r} (expected one of {', '.join(KINDS)})")
    for k in ("vantage", "clock"):
        v = getattr(e, k)
        if not isinstance(v, str) or not v:
            raise BundleError(f"{where}: '{k}' must be a non-empty string")
    check_relative_path(e.file, where)
    if e.format is not None:
        if e.format not in FORMATS:
            raise BundleError(f"{where}: unknown format {e.format!r} (expected one of {', '.join(FORMATS)})")
        allowed = PACKET_FORMATS if e.is_packets else STATE_FORMATS
        if e.format not in allowed:
            raise BundleError(f"{where}: kind {e.kind} cannot have format {e.format!r} "
                              f"(expected {' or '.join(allowed)})")
    for k in ("iface", "netns", "filter"):
        v = getattr(e, k)
        if v is not None and not isinstance(v, str):
            raise BundleError(f"{where}: '{k}' must be a string or null")
    if not isinstance(e.notes, str):
        raise BundleError(f"{where}: 'notes' must be a string")
    if e.complete is not None and not isinstance(e.complete, bool):
        raise BundleError(f"{where}: 'complete' must be true, false or null")
    for k in ("channel", "packets", "if_drops", "bytes"):
        v = getattr(e, k)
        if v is not None and not (_is_int(v) and v >= 0):
            raise BundleError(f"{where}: '{k}' must be a non-negative integer or null")
    if e.interval_s is not None and not (_is_num(e.interval_s) and e.interval_s > 0):
        raise BundleError(f"{where}: 'interval_s' must be a positive number or null")


# ---------------------------------------------------------------------------------------------
# the bundle

_BUNDLE_KEYS = ("xlayer_bundle", "created", "host", "tags", "captures", "clocks", "clock_overrides",
                "capture")


@dataclass
class Bundle:
    """One experiment: tags, capture entries, clock information; `path` is its directory once opened."""

    captures: list[CaptureEntry] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)
    created: str | None = None
    host: str | None = None
    clocks: dict[str, dict[str, Any]] = field(default_factory=dict)
    clock_overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    capture: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    path: Path | None = field(default=None, compare=False)

    # --- (de)serialisation ---

    def to_dict(self) -> dict[str, Any]:
        """Return the manifest JSON object of this bundle."""
        d: dict[str, Any] = {"xlayer_bundle": VERSION}
        if self.created is not None:
            d["created"] = self.created
        if self.host is not None:
            d["host"] = self.host
        d["tags"] = dict(self.tags)
        d["captures"] = [c.to_dict() for c in self.captures]
        if self.clocks:
            d["clocks"] = self.clocks
        if self.clock_overrides:
            d["clock_overrides"] = self.clock_overrides
        if self.capture is not None:
            d["capture"] = self.capture
        for k, v in self.extra.items():
            d.setdefault(k, v)
        return d

    @classmethod
    def from_dict(cls, d: Any, where: str = MANIFEST) -> Bundle:
        """Return the bundle a manifest object describes; raise BundleError naming `where` if invalid."""
        if not isinstance(d, dict):
            raise BundleError(f"{where}: the manifest must be a JSON object, not {_json_type(d)}")
        if "xlayer_bundle" not in d:
            raise BundleError(f"{where}: not an xlayer bundle manifest (no 'xlayer_bundle' key)")
        ver = d["xlayer_bundle"]
        if not _is_int(ver) or ver < 1:
            raise BundleError(f"{where}: 'xlayer_bundle' must be a positive integer")
        if ver > VERSION:
            raise BundleError(f"{where}: manifest version {ver} is newer than this xlayer reads "
                              f"({VERSION}); upgrade xlayer")
        caps = d.get("captures", [])
        if not isinstance(caps, list):
            raise BundleError(f"{where}: 'captures' must be an array")
        b = cls(
            captures=[CaptureEntry.from_dict(c, f"{where}: captures[{i}]") for i, c in enumerate(caps)],
            tags=d.get("tags") if d.get("tags") is not None else {},
            created=d.get("created"),
            host=d.get("host"),
            clocks=d.get("clocks") if d.get("clocks") is not None else {},
            clock_overrides=d.get("clock_overrides") if d.get("clock_overrides") is not None else {},
            capture=d.get("capture"),
            extra={k: v for k, v in d.items() if k not in _BUNDLE_KEYS},
        )
        check_bundle(b, where)
        return b

    # --- looking captures up ---

    def entry(self, which: str | CaptureEntry) -> CaptureEntry:
        """Return the capture named by file (exact) or vantage (if only one capture is there)."""
        if isinstance(which, CaptureEntry):
            return which
        for c in self.captures:
            if c.file == which:
                return c
        at = [c for c in self.captures if c.vantage == which]
        if len(at) == 1:
            return at[0]
        if len(at) > 1:
            raise BundleError(f"vantage {which!r} has {len(at)} captures "
                              f"({', '.join(c.file for c in at)}); name one by its file")
        known = sorted({c.vantage for c in self.captures} | {c.file for c in self.captures})
        raise BundleError(f"no capture {which!r} in the bundle (vantages and files: {', '.join(known)})")

    def file_path(self, which: str | CaptureEntry) -> Path:
        """Return the absolute path of a capture's file (the bundle must have been opened)."""
        if self.path is None:
            raise BundleError("this bundle has no directory yet (open_bundle sets it)")
        e = self.entry(which)
        return self.path / check_relative_path(e.file, e.file)

    def clock_groups(self) -> dict[str, list[CaptureEntry]]:
        """Return each clock name with the captures stamped by it, in manifest order."""
        out: dict[str, list[CaptureEntry]] = {}
        for c in self.captures:
            out.setdefault(c.clock, []).append(c)
        return out

    # --- tables ---

    def scan(self, which: str | CaptureEntry, decoder: str = "fast") -> pl.LazyFrame:
        """Return one capture as a lazy table with capture_file, vantage and clock columns added.

        Nothing is read until the frame is collected; packet captures are then streamed chunk by
        chunk, so a filtered or head()-limited query does not hold the whole file in memory.
        """
        e = self.entry(which)
        path = self.file_path(e)
        # A stat, not a read: fail here, where the caller named the capture, not deep inside collect().
        if not path.is_file():
            raise BundleError(f"{e.file}: capture file is missing from the bundle ({path})")
        consts = {"capture_file": e.file, "vantage": e.vantage, "clock": e.clock}
        if e.is_packets:
            return _packet_frame(path, consts, decoder)
        return _state_frame(path, consts, e.format)

    def packets(self, decoder: str = "fast") -> pl.LazyFrame:
        """Return all packet captures (air and wired) as one lazy table, concatenated diagonally."""
        frames = [self.scan(c, decoder) for c in self.captures if c.is_packets]
        if not frames:
            from parsers.schema import SCHEMA

            return pl.LazyFrame(schema=_with_added(SCHEMA))
        return frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal")

    def tcp_state(self) -> pl.LazyFrame:
        """Return all host TCP state captures as one lazy table, concatenated diagonally."""
        frames = [self.scan(c) for c in self.captures if not c.is_packets]
        if not frames:
            from parsers.hoststate.common import SCHEMA

            return pl.LazyFrame(schema=_with_added(SCHEMA))
        return frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal")

    def timeline(self, reference: str | None = None, **kw: Any) -> Any:
        """Return this bundle's `xlayer.timeline.open.Timeline`: captures aligned, metric tables on demand."""
        from xlayer.timeline.open import open_timeline

        return open_timeline(self, reference, **kw)

    def describe(self, decoder: str = "fast") -> dict[str, Any]:
        """Return the manifest plus, per capture, what reading it found (counts, span, errors)."""
        d = self.to_dict()
        d["path"] = str(self.path) if self.path is not None else None
        d["captures"] = [dict(c.to_dict(), **self._read_summary(c, decoder)) for c in self.captures]
        return d

    def _read_summary(self, e: CaptureEntry, decoder: str) -> dict[str, Any]:
        out: dict[str, Any] = {"records": None, "first_ts_ns": None, "last_ts_ns": None, "error": None}
        try:
            path = self.file_path(e)
            if not path.is_file():
                raise BundleError(f"{e.file}: capture file is missing from the bundle")
            out["file_bytes"] = path.stat().st_size
            out["format"] = e.format or guess_format(path)
            if e.is_packets:
                out.update(_packet_summary(path, decoder))
            else:
                df = _read_state(path, out["format"], e.vantage)
                out["records"] = df.height
                out["malformed"] = df.get_column("malformed").drop_nulls().len()
                out["first_ts_ns"], out["last_ts_ns"] = _time_span(df)
        except BundleError as exc:
            out["error"] = str(exc)
        except OSError as exc:
            out["error"] = f"{e.file}: {exc.strerror or exc}"
        except Exception as exc:  # noqa: BLE001 - one unreadable capture must not hide the others
            out["error"] = f"{e.file}: {type(exc).__name__}: {exc}"
        return out


def check_bundle(b: Bundle, where: str = MANIFEST) -> None:
    """Raise BundleError if a bundle breaks the spec; return None when it is valid."""
    if not isinstance(b.tags, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                               for k, v in b.tags.items()):
        raise BundleError(f"{where}: 'tags' must be an object of string keys and string values")
    for k in ("created", "host"):
        v = getattr(b, k)
        if v is not None and not isinstance(v, str):
            raise BundleError(f"{where}: '{k}' must be a string")
    seen: set[str] = set()
    for i, c in enumerate(b.captures):
        check_entry(c, f"{where}: captures[{i}]")
        if c.file in seen:
            raise BundleError(f"{where}: captures[{i}]: file {c.file!r} is listed twice")
        seen.add(c.file)
    for name in ("clocks", "clock_overrides"):
        sect = getattr(b, name)
        if not isinstance(sect, dict) or not all(isinstance(v, dict) for v in sect.values()):
            raise BundleError(f"{where}: '{name}' must be an object of objects")
    for clock, ov in b.clock_overrides.items():
        for k in ("offset_s", "skew_ppm", "anchor_ts"):
            if k in ov and ov[k] is not None and not _is_num(ov[k]):
                raise BundleError(f"{where}: clock_overrides.{clock}.{k} must be a number")
    if b.capture is not None:
        if not isinstance(b.capture, dict):
            raise BundleError(f"{where}: 'capture' must be an object")
        reason = b.capture.get("stop_reason")
        if reason is not None and reason not in STOP_REASONS:
            raise BundleError(f"{where}: capture.stop_reason {reason!r} is not one of "
                              f"{', '.join(STOP_REASONS)}")


# ---------------------------------------------------------------------------------------------
# manifest I/O

def _manifest_path(path: str | os.PathLike) -> tuple[Path, Path]:
    p = Path(path)
    if p.name == MANIFEST and not p.is_dir():
        return p.parent, p
    return p, p / MANIFEST


def load_manifest(dir: str | os.PathLike) -> Bundle:
    """Return the validated Bundle of DIR/bundle.json (path set to DIR); raise BundleError if unusable."""
    d, mf = _manifest_path(dir)
    try:
        raw = mf.read_bytes()
    except FileNotFoundError:
        if not d.is_dir():
            raise BundleError(f"{d}: no such directory") from None
        raise BundleError(f"{d}: no {MANIFEST} here (not an xlayer bundle)") from None
    except OSError as exc:
        raise BundleError(f"{mf}: cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BundleError(f"{mf}: not UTF-8 text (byte {exc.start})") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BundleError(f"{mf}: not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})") from None
    except RecursionError:
        raise BundleError(f"{mf}: not valid JSON (nested too deeply)") from None
    b = Bundle.from_dict(obj, str(mf))
    b.path = d
    return b


def open_bundle(path: str | os.PathLike) -> Bundle:
    """Return the bundle in directory `path` (or whose bundle.json is `path`), ready to scan."""
    b = load_manifest(path)
    b.path = b.path.resolve() if b.path is not None else None
    return b


def write_manifest(dir: str | os.PathLike, bundle: Bundle) -> Path:
    """Validate `bundle` and write it atomically as DIR/bundle.json; return the manifest's path."""
    d = Path(dir)
    check_bundle(bundle, str(d / MANIFEST))
    text = json.dumps(bundle.to_dict(), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{MANIFEST}.", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; a manifest is meant to be shared
        os.replace(tmp, d / MANIFEST)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    # The rename is only durable once the directory entry is; best effort where dirs can't be opened.
    with contextlib.suppress(OSError):
        dfd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    return d / MANIFEST


def utc_now() -> str:
    """Return the current time as the manifest's `created` text (UTC, microseconds, 'Z')."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# ---------------------------------------------------------------------------------------------
# format guessing (pure on bytes; one small read at the edge)

_PCAP_MAGICS = {b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d",
                b"\x34\xcd\xb2\xa1", b"\xa1\xb2\xcd\x34"}
_SS_HEADER = re.compile(rb"^(Netid\s+)?State\s+Recv-Q\s+Send-Q", re.M)
_SS_STAMP = re.compile(rb"^#\s*\d{9,}(\.\d+)?\s*$", re.M)
# `ss -tinH` prints no header: a socket line starts with a state name and the two queue sizes.
_SS_SOCKET = re.compile(rb"^(ESTAB|SYN-SENT|SYN-RECV|FIN-WAIT-[12]|TIME-WAIT|CLOSE-WAIT|LAST-ACK|LISTEN|"
                        rb"CLOSING|UNCONN|NEW-SYN-RECV)\s+\d+\s+\d+\s")
_HEAD = 64 << 10
_WHOLE_MAX = 256 << 20   # iperf3 and flent results are far smaller; anything bigger is not one


def guess_format_bytes(head: bytes, whole: Callable[[], bytes] | None = None) -> str | None:
    """Return the format a file starting with `head` is in, or None; `whole` gives all bytes if needed."""
    if head[:4] in _PCAP_MAGICS:
        return "pcap"
    if head[:4] == b"\x0a\x0d\x0d\x0a":
        return "pcapng"
    if head[:2] == b"\x1f\x8b":
        # flent stores its results as gzipped JSON; look inside rather than trust the name.
        try:
            inner = _gunzip_capped(whole() if whole is not None else head, _WHOLE_MAX)
        except zlib.error:
            return None
        return "flent" if _json_kind(inner) == "flent" else None
    # tcp_info JSON lines may open with '#' comment lines; ss text with '# <epoch>' stamps.
    first = next((ln.strip() for ln in head.splitlines()
                  if ln.strip() and not ln.lstrip().startswith(b"#")), b"")
    if first.startswith(b"{"):
        try:
            obj = json.loads(first)
        except ValueError:
            obj = None   # a JSON document spread over lines (iperf3 -J), or a line longer than head
        if isinstance(obj, dict):
            kind = _object_kind(obj)
            if kind is not None:
                return kind
            if _looks_like_tcpinfo(obj):
                return "tcpinfo-jsonl"
        return _json_kind(whole() if whole is not None else head)
    if _SS_HEADER.search(head) or _SS_STAMP.search(head) or _SS_SOCKET.match(first):
        return "ss"
    return None


def _gunzip_capped(data: bytes, limit: int) -> bytes:
    # A bounded inflate: a small hostile .gz must not expand into all of memory just to be guessed.
    d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    return d.decompress(data, limit)


def _looks_like_tcpinfo(obj: dict[str, Any]) -> bool:
    if any(str(k).startswith("tcpi_") for k in _keys_deep(obj)):
        return True
    # parsers.hoststate.tcpinfo allows the tcpi_ prefix to be left out; a timestamp plus a socket still says it.
    return ("ts_ns" in obj or "ts" in obj) and any(k in obj for k in ("sport", "dport", "state"))


def _keys_deep(obj: Any, depth: int = 0) -> Iterator[str]:
    # tcp_info may be nested one level down ({"ts": .., "tcp_info": {"tcpi_rtt": ..}}).
    if isinstance(obj, dict) and depth < 3:
        for k, v in obj.items():
            yield k
            yield from _keys_deep(v, depth + 1)


def _json_kind(data: bytes) -> str | None:
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return _object_kind(obj) if isinstance(obj, dict) else None


def _object_kind(obj: dict[str, Any]) -> str | None:
    if "start" in obj and "intervals" in obj:
        return "iperf3-json"
    if "metadata" in obj and ("raw_values" in obj or "results" in obj or "x_values" in obj):
        return "flent"
    return None


def guess_format(path: str | os.PathLike) -> str:
    """Return the format of the file at `path` from its content; raise BundleError if unknown."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            head = fh.read(_HEAD)
    except OSError as exc:
        raise BundleError(f"{p}: cannot read: {exc.strerror or exc}") from None

    def whole() -> bytes:
        return p.read_bytes() if p.stat().st_size <= _WHOLE_MAX else b""

    fmt = guess_format_bytes(head, whole)
    if fmt is None:
        raise BundleError(f"{p}: cannot tell the format (not pcap, pcapng, ss text, tcp_info JSON lines, "
                          "iperf3 JSON or flent data)")
    return fmt


# ---------------------------------------------------------------------------------------------
# lazy tables

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


def _read_state(path: Path, fmt: str | None, vantage: str) -> pl.DataFrame:
    """Return a host-state file as a table in parsers.hoststate.common's schema (format guessed if None)."""
    from parsers.hoststate.common import SCHEMA

    fmt = fmt or guess_format(path)
    if fmt not in STATE_READERS:
        raise BundleError(f"{path.name}: {fmt} is not a host TCP state format")
    mod_name, fn_name = STATE_READERS[fmt]
    import importlib

    try:
        fn = getattr(importlib.import_module(mod_name), fn_name)
    except (ImportError, AttributeError):
        raise BundleError(f"{path.name}: reading {fmt} needs {mod_name}.{fn_name}, "
                          "which this installation does not have") from None
    df = fn(path, vantage)   # every host-state reader names the rows' vantage itself
    # The lazy frame promised this schema before reading; hold the reader to it.
    return df.select(pl.col(k).cast(v) if k in df.columns else pl.lit(None, dtype=v).alias(k)
                     for k, v in SCHEMA.items())


def _state_frame(path: Path, consts: dict[str, str], fmt: str | None) -> pl.LazyFrame:
    from polars.io.plugins import register_io_source

    from parsers.hoststate.common import SCHEMA

    def source(with_columns: list[str] | None, predicate: pl.Expr | None, n_rows: int | None,
               batch_size: int | None) -> Iterator[pl.DataFrame]:  # noqa: ARG001 - plugin signature
        df = _finish(_read_state(path, fmt, consts["vantage"]), consts, predicate, with_columns)
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


__all__ = ["Bundle", "BundleError", "CaptureEntry", "FORMATS", "KINDS", "guess_format", "guess_format_bytes",
           "load_manifest", "open_bundle", "utc_now", "write_manifest"]
