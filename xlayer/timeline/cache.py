"""The decode cache: a bundle's decoded, aligned packet tables and its derived tables, kept between commands.

An entry is keyed by what its tables follow from: each capture's content (size, mtime and a hash of
its first and last 64 KiB), the manifest, the decoder and the code that decodes, aligns and derives
(a hash of those source files), the columns read, the reference clock and the bin width.  Entries live
outside the bundle (`$XLAYER_CACHE_DIR`, else `$XDG_CACHE_HOME/xlayer`, else `~/.cache/xlayer`), so a
read-only bundle works.

An entry is built in a directory of its own beside the others (`.build-KEY-PID-*`) and renamed into
place whole once its packet tables and `meta.json` are written: a reader sees a complete entry or none.
Two processes building the same entry both finish; the second rename finds the first one's entry and
its own copy is removed.  Derived tables are added to a complete entry one file at a time, each
written under a temporary name and renamed.  A build left by a process that died is removed by the
next one that looks (`clean_stale`).
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

import polars as pl

from xlayer.signals import process_alive

FORMAT = 2                      # what an entry holds; a change makes every older entry a miss
_EDGE = 64 << 10                # bytes hashed at each end of a capture
_BUILD = ".build-"
MAX_BYTES = 10 << 30            # entries beyond this total are removed, least recently used first
# The code whose output an entry holds: any change to it is a new key, never a stale table.
_CODE = ("parsers", "xlayer/bundle", "xlayer/timeline", "xlayer/metrics")


def cache_root() -> Path:
    """Return the directory the cache entries live in (not created here)."""
    env = os.environ.get("XLAYER_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "xlayer"


@lru_cache(maxsize=1)
def code_version() -> str:
    """Return a hash of the source files that decode, align and derive tables."""
    root = Path(__file__).resolve().parents[2]
    h = hashlib.sha256()
    for part in _CODE:
        for p in sorted((root / part).rglob("*")):
            if p.suffix in (".py", ".c") and p.is_file():
                h.update(str(p.relative_to(root)).encode())
                h.update(p.read_bytes())
    return h.hexdigest()[:16]


def fingerprint(path: str | os.PathLike) -> dict[str, Any]:
    """Return what identifies a file's content cheaply: size, mtime and a hash of both ends."""
    p = Path(path)
    st = p.stat()
    h = hashlib.sha256()
    with p.open("rb") as fh:
        h.update(fh.read(_EDGE))
        if st.st_size > 2 * _EDGE:
            fh.seek(st.st_size - _EDGE)
        h.update(fh.read(_EDGE))
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "edges": h.hexdigest()[:32]}


def entry_key(parts: dict[str, Any]) -> str:
    """Return the key of an entry: a hash of everything its tables follow from."""
    text = json.dumps({"format": FORMAT, "code": code_version(), **parts}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class Entry:
    """One complete cache entry: `packets/NNN.arrow` per capture, `tables/NAME.arrow`, `meta.json`."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def meta(self) -> dict[str, Any]:
        """Return what the entry's builder recorded (alignment, read counts, errors, packet files)."""
        return json.loads((self.path / "meta.json").read_text())

    def table_file(self, name: str) -> Path:
        """Return where derived table `name` is (or would be) kept."""
        return self.path / "tables" / f"{name}.arrow"

    def put_table(self, name: str, df: pl.DataFrame) -> Path:
        """Write a derived table atomically into the entry; return its file."""
        dest = self.table_file(name)
        dest.parent.mkdir(exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=dest.parent)
        os.close(fd)
        try:
            df.write_ipc(tmp, compression="uncompressed")
            os.replace(tmp, dest)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return dest


def lookup(key: str, root: Path | None = None) -> Entry | None:
    """Return the complete entry of `key`, or None."""
    path = (root or cache_root()) / key
    return Entry(path) if (path / "meta.json").is_file() else None


def begin(key: str, root: Path | None = None) -> Path:
    """Return a new private directory to build the entry of `key` in (the cache root is created)."""
    root = root or cache_root()
    root.mkdir(parents=True, exist_ok=True)
    clean_stale(root)
    prune(root)
    return Path(tempfile.mkdtemp(prefix=f"{_BUILD}{key}-{os.getpid()}-", dir=root))


def commit(build: Path, key: str, meta: dict[str, Any]) -> Entry:
    """Write `meta.json` into a finished build and rename it into place; return the entry (ours or a
    concurrent builder's, whichever was renamed first)."""
    tmp = build / ".meta.json.tmp"
    tmp.write_text(json.dumps(meta, allow_nan=False, default=str))
    os.replace(tmp, build / "meta.json")
    dest = build.parent / key
    try:
        os.rename(build, dest)
    except OSError as exc:
        if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
            raise
        shutil.rmtree(build, ignore_errors=True)
    return Entry(dest)


def abandon(build: Path) -> None:
    """Remove an unfinished build."""
    shutil.rmtree(build, ignore_errors=True)



def clean_stale(root: Path | None = None) -> int:
    """Remove builds whose process is gone; return how many were removed."""
    root = root or cache_root()
    n = 0
    for p in root.glob(f"{_BUILD}*") if root.is_dir() else ():
        parts = p.name[len(_BUILD):].split("-")
        if len(parts) >= 2 and parts[1].isascii() and parts[1].isdigit() and not process_alive(int(parts[1])):
            shutil.rmtree(p, ignore_errors=True)
            n += 1
    return n


def prune(root: Path | None = None, max_bytes: int | None = None) -> int:
    """Remove the least recently used entries until the rest fit in `max_bytes` ($XLAYER_CACHE_MAX_GB, else
    MAX_BYTES); return how many were removed."""
    if max_bytes is None:
        env = os.environ.get("XLAYER_CACHE_MAX_GB", "")
        try:
            max_bytes = int(float(env) * (1 << 30)) if env else MAX_BYTES
        except ValueError:
            max_bytes = MAX_BYTES
    rows = sorted(entries(root), key=lambda r: r["used"])
    total, n = sum(r["bytes"] for r in rows), 0
    for r in rows:
        if total <= max_bytes:
            break
        shutil.rmtree((root or cache_root()) / r["key"], ignore_errors=True)
        total -= r["bytes"]
        n += 1
    return n


def entries(root: Path | None = None) -> list[dict[str, Any]]:
    """Return every complete entry: key, bundle directory it was built from, bytes, last use."""
    root = root or cache_root()
    out = []
    for p in sorted(root.iterdir()) if root.is_dir() else ():
        if p.name.startswith(".") or not (p / "meta.json").is_file():
            continue
        size = sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        try:
            bundle = json.loads((p / "meta.json").read_text()).get("bundle")
        except (OSError, ValueError):
            bundle = None
        out.append({"key": p.name, "bundle": bundle, "bytes": size,
                    "used": (p / "meta.json").stat().st_mtime})
    return out


def clear(root: Path | None = None) -> tuple[int, int]:
    """Remove every entry and unfinished build; return (entries removed, bytes freed)."""
    root = root or cache_root()
    n = size = 0
    for p in list(root.iterdir()) if root.is_dir() else ():
        if p.is_dir() and (p.name.startswith(_BUILD) or (p / "meta.json").is_file()):
            size += sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
            shutil.rmtree(p, ignore_errors=True)
            n += 1
    return n, size
