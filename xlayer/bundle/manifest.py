"""Experiment bundles: a directory of captures plus a `bundle.json` manifest, read as lazy polars tables.

The manifest format is the shared bundle spec (`xlayer_bundle: 1`).  Loading validates everything
a later step relies on -- above all that no `file` can point outside the bundle directory -- so a
manifest from someone else's machine is data, not a set of paths to trust.  The same holds on disk:
`Bundle.file_path` refuses a capture whose resolved path leaves the bundle, any symbolic link unless
the manifest says `"follow_links": true`, and anything but a regular file (a FIFO or a device is
refused without being opened); `bundle.json` itself must be a regular file of at most
`MANIFEST_MAX_BYTES`, and is read with a bounded read.  The parsed JSON then goes through
`xlayer.bundle.validate` before anything else looks at it: strings UTF-8 can hold, finite numbers,
64-bit integers, at most `MAX_CAPTURES` captures (`MAX_ENTRIES` tags, clocks, overrides), sane
clock overrides and a well-typed `capture` run; each problem is one line naming its key path.
Unknown keys are kept and written back unchanged, so tools newer than this one can add fields
without losing them here.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import posixpath
import stat
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, BinaryIO

from xlayer.bundle.validate import (
    MAX_CAPTURES,
    MAX_ENTRIES,
    json_problem,
    override_problem,
    parse_json,
    run_problem,
    size_problem,
)

MANIFEST = "bundle.json"
VERSION = 1
KINDS = ("air", "wired", "tcp_state")
PACKET_KINDS = ("air", "wired")
PACKET_FORMATS = ("pcap", "pcapng")
STATE_FORMATS = ("ss", "tcpinfo-jsonl", "iperf3-json", "flent")
FORMATS = PACKET_FORMATS + STATE_FORMATS
STOP_REASONS = ("duration", "SIGINT", "SIGTERM", "disk_full", "error")
ADDED_COLUMNS = ("capture_file", "vantage", "clock")
MANIFEST_MAX_BYTES = 16 << 20       # a manifest is a few kB; anything this big is not one


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
    parts = PurePosixPath(p).parts
    if not parts:
        raise BundleError(f"{where}: file {p!r} names the bundle directory itself, not a file in it")
    if parts[0] == MANIFEST:
        raise BundleError(f"{where}: file {p!r} names the bundle's own manifest")
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
                "capture", "follow_links")


def named(items: list[Any], which: str) -> tuple[Any | None, list[Any]]:
    """Return the item (a capture entry, or anything with `file` and `vantage`) that `which` names: the
    one with that file, else the only one at that vantage; and every item at that vantage."""
    for c in items:
        if c.file == which:
            return c, [c]
    at = [c for c in items if c.vantage == which]
    return (at[0] if len(at) == 1 else None), at


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
    follow_links: bool = False      # may a capture be a symbolic link (to a file inside the bundle)?
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
        if self.follow_links is not False:
            d["follow_links"] = self.follow_links
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
        # the entry count first (no walk over 100,000 entries of a manifest refused anyway), then
        # every value (a lone surrogate, NaN, a 5,000-digit integer) before any is used
        problem = size_problem(d) or json_problem(d)
        if problem:
            raise BundleError(f"{where}: {problem}")
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
            follow_links=d.get("follow_links", False),
        )
        check_bundle(b, where)
        return b

    # --- looking captures up ---

    def entry(self, which: str | CaptureEntry) -> CaptureEntry:
        """Return the capture named by file (exact) or vantage (if only one capture is there)."""
        if isinstance(which, CaptureEntry):
            return which
        found, at = named(self.captures, which)
        if found is not None:
            return found
        if len(at) > 1:
            raise BundleError(f"vantage {which!r} has {len(at)} captures "
                              f"({', '.join(c.file for c in at)}); name one by its file")
        known = sorted({c.vantage for c in self.captures} | {c.file for c in self.captures})
        raise BundleError(f"no capture {which!r} in the bundle (vantages and files: {', '.join(known)})")

    def file_path(self, which: str | CaptureEntry) -> Path:
        """Return the path of a capture's file (the bundle must have been opened).

        Raise BundleError, naming the file and never reading it, if the path goes through a symbolic
        link while the manifest does not say `"follow_links": true`, if it resolves outside the bundle
        directory, or if it exists and is not a regular file (a FIFO, a device, a directory).  A
        missing file is returned as is: the caller says it is missing.
        """
        if self.path is None:
            raise BundleError("this bundle has no directory yet (open_bundle sets it)")
        e = self.entry(which)
        return checked_path(self.path, check_relative_path(e.file, e.file), self.follow_links)

    @property
    def keys_file(self) -> str | None:
        """Return the manifest's `keys_file` (a WPA keys file inside the bundle, 80211_keys format), or None."""
        return self.extra.get("keys_file")

    def keys_path(self) -> Path | None:
        """Return the keys file's path checked on disk like a capture's (inside, regular, no link unless
        allowed), or None when the manifest names none; raise BundleError if it is refused or missing."""
        if self.keys_file is None:
            return None
        if self.path is None:
            raise BundleError("this bundle has no directory yet (open_bundle sets it)")
        path = checked_path(self.path, check_relative_path(self.keys_file, "keys_file"), self.follow_links)
        if not path.is_file():
            raise BundleError(f"{self.keys_file}: keys file named by the manifest is missing from the bundle")
        return path

    def clock_groups(self) -> dict[str, list[CaptureEntry]]:
        """Return each clock name with the captures stamped by it, in manifest order."""
        out: dict[str, list[CaptureEntry]] = {}
        for c in self.captures:
            out.setdefault(c.clock, []).append(c)
        return out



def check_bundle(b: Bundle, where: str = MANIFEST) -> None:
    """Raise BundleError if a bundle breaks the spec; return None when it is valid."""
    if not isinstance(b.tags, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                               for k, v in b.tags.items()):
        raise BundleError(f"{where}: 'tags' must be an object of string keys and string values")
    if len(b.tags) > MAX_ENTRIES:
        raise BundleError(f"{where}: tags: {len(b.tags)} entries, more than a bundle may have ({MAX_ENTRIES})")
    for k in ("created", "host"):
        v = getattr(b, k)
        if v is not None and not isinstance(v, str):
            raise BundleError(f"{where}: '{k}' must be a string")
    if not isinstance(b.follow_links, bool):
        raise BundleError(f"{where}: 'follow_links' must be true or false")
    if len(b.captures) > MAX_CAPTURES:
        raise BundleError(f"{where}: {len(b.captures)} captures, more than a bundle may have ({MAX_CAPTURES})")
    seen: dict[str, str] = {}
    for i, c in enumerate(b.captures):
        check_entry(c, f"{where}: captures[{i}]")
        # './x.pcap' and 'x.pcap' (or 'a//b' and 'a/b') are one file
        key = posixpath.normpath(c.file)
        if key in seen:
            also = "" if seen[key] == c.file else f" (as {seen[key]!r})"
            raise BundleError(f"{where}: captures[{i}]: file {c.file!r} is listed twice{also}")
        seen[key] = c.file
    for name in ("clocks", "clock_overrides"):
        sect = getattr(b, name)
        if not isinstance(sect, dict) or not all(isinstance(v, dict) for v in sect.values()):
            raise BundleError(f"{where}: '{name}' must be an object of objects")
        if len(sect) > MAX_ENTRIES:
            raise BundleError(f"{where}: {name}: {len(sect)} entries, more than a bundle may have ({MAX_ENTRIES})")
    for clock, ov in b.clock_overrides.items():
        problem = override_problem(clock, ov)
        if problem:
            raise BundleError(f"{where}: {problem}")
    keys_file = b.extra.get("keys_file")
    if keys_file is not None:
        if not isinstance(keys_file, str):
            raise BundleError(f"{where}: 'keys_file' must be a string (a file inside the bundle)")
        check_relative_path(keys_file, f"{where}: keys_file")
    if b.capture is not None:
        if not isinstance(b.capture, dict):
            raise BundleError(f"{where}: 'capture' must be an object")
        problem = run_problem(b.capture)
        if problem:
            raise BundleError(f"{where}: {problem}")
        reason = b.capture.get("stop_reason")
        if reason is not None and reason not in STOP_REASONS:
            raise BundleError(f"{where}: capture.stop_reason {reason!r} is not one of "
                              f"{', '.join(STOP_REASONS)}")


# ---------------------------------------------------------------------------------------------
# files on disk: inside the bundle, regular, never a symbolic link unless allowed

def _file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def _inside(root_real: str, target_real: str) -> bool:
    with contextlib.suppress(ValueError):
        return os.path.commonpath([root_real, target_real]) == root_real
    return False


def checked_path(root: str | os.PathLike, rel: str, follow_links: bool = False) -> Path:
    """Return root/rel after checking it on disk (see `Bundle.file_path`); raise BundleError if not.

    Only lstat, readlink (realpath) and stat are used: the file is never opened here.
    """
    root = Path(root)
    path = root / rel
    cur = root
    for part in PurePosixPath(rel).parts:
        cur = cur / part
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            break
        except OSError as exc:
            raise BundleError(f"{rel}: cannot look at it: {exc.strerror or exc}") from None
        if stat.S_ISLNK(st.st_mode) and not follow_links:
            via = "" if cur == path else f" (through {cur.relative_to(root)})"
            raise BundleError(f"{rel}: is a symbolic link{via}; a bundle's files must be regular files "
                              "inside it (a manifest may allow links within the bundle with "
                              '"follow_links": true)')
    if not _inside(os.path.realpath(root), os.path.realpath(path)):
        raise BundleError(f"{rel}: resolves to a file outside the bundle directory; refused")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return path
    except OSError as exc:
        raise BundleError(f"{rel}: cannot look at it: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise BundleError(f"{rel}: is {_file_kind(st.st_mode)}, not a regular file; refused without "
                          "reading it")
    return path


def open_regular(path: str | os.PathLike, follow_links: bool = True) -> BinaryIO:
    """Open `path` for binary reading only if it is a regular file; raise BundleError otherwise.

    stat first, so a FIFO or a device is never opened; then open with O_NONBLOCK (a FIFO swapped in
    meanwhile cannot block the open) and O_NOFOLLOW unless links are allowed, and check again.
    """
    try:
        st = os.stat(path) if follow_links else os.lstat(path)
    except OSError as exc:
        raise BundleError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise BundleError(f"{path}: is {_file_kind(st.st_mode)}, not a regular file; refused without "
                          "reading it")
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    if not follow_links:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise BundleError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BundleError(f"{path}: is {_file_kind(st.st_mode)}, not a regular file; refused")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


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
        lst = os.lstat(mf)
    except FileNotFoundError:
        if not d.is_dir():
            raise BundleError(f"{d}: no such directory") from None
        raise BundleError(f"{d}: no {MANIFEST} here (not an xlayer bundle)") from None
    except OSError as exc:
        raise BundleError(f"{mf}: cannot read: {exc.strerror or exc}") from None
    if stat.S_ISLNK(lst.st_mode) and not _inside(os.path.realpath(d), os.path.realpath(mf)):
        raise BundleError(f"{mf}: is a symbolic link to outside the bundle directory; refused")
    try:
        st = os.stat(mf)
    except OSError as exc:
        raise BundleError(f"{mf}: cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise BundleError(f"{mf}: is {_file_kind(st.st_mode)}, not a regular file; refused without "
                          "reading it")
    limit = MANIFEST_MAX_BYTES
    if st.st_size > limit:
        raise BundleError(f"{mf}: {st.st_size} bytes, more than a manifest may have "
                          f"({limit} bytes); refused")
    with open_regular(mf) as fh:
        try:
            raw = fh.read(limit + 1)           # bounded, even if the file grew since the stat
        except OSError as exc:
            raise BundleError(f"{mf}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > limit:
        raise BundleError(f"{mf}: more than a manifest may have ({limit} bytes); refused")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BundleError(f"{mf}: not UTF-8 text (byte {exc.start})") from None
    try:
        obj = parse_json(text)
    except json.JSONDecodeError as exc:
        raise BundleError(f"{mf}: not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})") from None
    except RecursionError:
        raise BundleError(f"{mf}: not valid JSON (nested too deeply)") from None
    except ValueError as exc:
        # parse_json turns overlong numbers into markers; anything the decoder still refuses is one line
        raise BundleError(f"{mf}: not valid JSON ({str(exc).splitlines()[0] if str(exc) else 'bad value'})") from None
    b = Bundle.from_dict(obj, str(mf))
    b.path = d
    if b.follow_links:
        # links may make two names one file: compare where they lead (realpath reads links only)
        seen: dict[str, str] = {}
        for i, c in enumerate(b.captures):
            real = os.path.realpath(d / c.file)
            if real in seen:
                raise BundleError(f"{mf}: captures[{i}]: file {c.file!r} is listed twice "
                                  f"(as {seen[real]!r})")
            seen[real] = c.file
    return b


def open_bundle(path: str | os.PathLike) -> Bundle:
    """Return the bundle in directory `path` (or whose bundle.json is `path`), ready to scan."""
    b = load_manifest(path)
    b.path = b.path.resolve() if b.path is not None else None
    return b


def write_manifest(dir: str | os.PathLike, bundle: Bundle) -> Path:
    """Validate `bundle` and write it atomically as DIR/bundle.json; return the manifest's path."""
    d = Path(dir)
    where = str(d / MANIFEST)
    check_bundle(bundle, where)
    problem = json_problem(bundle.to_dict())
    if problem:
        raise BundleError(f"{where}: {problem}")
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
