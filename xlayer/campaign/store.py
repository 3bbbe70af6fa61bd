"""A campaign's results on disk: a Parquet dataset partitioned by the bundles' tags, and ``campaign.json``.

Layout: ``OUT/<table>/<tag>=<value>/.../<key>.parquet``, one file per bundle and table (tables:
`xlayer.campaign.task`), hive style, the partition tags (``partition_by`` in the manifest) fixed by the
campaign's first run: the tags its bundles have, sorted, less any named like a column of a table.  A bundle
without one of them goes under ``<tag>=__HIVE_DEFAULT_PARTITION__`` (read as null).  Tag keys and values
come from the bundles and are untrusted: every byte but ``A-Z a-z 0-9 _ . + -`` is written ``%XX``, as are
the dots of ``.`` and ``..``, and a long one is cut and given a hash: no tag can name a path outside OUT.
Every file carries ``bundle`` (the bundle's content key) and ``bundle_name`` (its directory's name).

The content key of a bundle is the SHA-256 of its ``bundle.json`` bytes, each capture's name, size and
modification time (ns), and the analysis window: a bundle edited, re-captured or touched is analyzed again;
one copied elsewhere with its times kept is not.

Each bundle's files are written whole (a temporary file in the same directory, renamed), then
``campaign.json`` is rewritten the same way with SIGINT/SIGTERM held between: an interrupt loses no bundle
the manifest lists, and leaves no temporary file.  A bundle written but not yet listed is analyzed again
by the next run (same key, same file names: replaced).
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl

from xlayer.metrics.export import remove_stale_temps, whole_file
from xlayer.signals import deferred

MANIFEST = "campaign.json"
VERSION = 1
TABLES = ("summary", "intervals", "incidents", "flows", "records")
NULL_PART = "__HIVE_DEFAULT_PARTITION__"
KEY_TEXT = ("sha256 of bundle.json's bytes, each capture's name, size and mtime (ns), and the analysis window")
_SAFE = re.compile(rb"[A-Za-z0-9_.+\-]")
_MAX_PART = 100


class CampaignError(Exception):
    """A campaign cannot start or be read (one line for the user, exit 2)."""


def part_text(text: str) -> str:
    """Return a tag key or value as one safe path component (see the module doc)."""
    raw = text.encode("utf-8", "surrogatepass")
    out = "".join(chr(b) if _SAFE.fullmatch(bytes([b])) else f"%{b:02X}" for b in raw)
    if out in (".", ".."):
        out = out.replace(".", "%2E")
    if len(out) > _MAX_PART:
        out = out[:80] + "~" + hashlib.sha256(raw).hexdigest()[:12]
    return out


def partition_dir(tags: dict[str, Any], partition_by: list[str]) -> str:
    """Return the hive partition path of a bundle's tags (relative, '/'-separated)."""
    parts = []
    for k in partition_by:
        v = tags.get(k)
        v = None if v is None else str(v)
        parts.append(f"{part_text(k)}={NULL_PART if not v else part_text(v)}")
    return "/".join(parts)


def content_key(bundle_dir: str | os.PathLike, window: tuple[float, float] | None) -> str:
    """Return a bundle's content key (see the module doc); a manifest that cannot be parsed is keyed by its
    bytes alone, a missing one by its path."""
    d = Path(bundle_dir)
    h = hashlib.sha256()
    try:
        raw = (d / "bundle.json").read_bytes()
    except OSError:
        raw = b"unreadable:" + os.fsencode(str(d.resolve()))
    h.update(raw)
    h.update(repr(window).encode())
    try:
        caps = json.loads(raw).get("captures") or []
    except (ValueError, AttributeError, RecursionError):
        caps = []
    for c in caps if isinstance(caps, list) else []:
        name = c.get("file") if isinstance(c, dict) else None
        if not isinstance(name, str):
            continue
        try:
            st = os.stat(d / name)   # a name pointing outside is refused by the analysis; here only stat'ed
            h.update(f"\0{name}\0{st.st_size}\0{st.st_mtime_ns}".encode("utf-8", "surrogatepass"))
        except (OSError, ValueError):
            h.update(f"\0{name}\0missing".encode("utf-8", "surrogatepass"))
    return h.hexdigest()[:32]


class Store:
    """The output directory of a campaign: its manifest in memory, and the writing of bundles' results."""

    def __init__(self, out: str | os.PathLike):
        self.out = Path(out)
        self.man: dict[str, Any] = {"xlayer_campaign": VERSION, "key": KEY_TEXT, "partition_by": None,
                                    "complete": False, "bundles": {}}

    @classmethod
    def read(cls, out: str | os.PathLike) -> Store:
        """Return the store of an existing campaign directory; raise CampaignError if it is not one."""
        s = cls(out)
        path = s.out / MANIFEST
        try:
            man = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise CampaignError(f"{out}: no {MANIFEST} here (not a campaign output directory)") from None
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            raise CampaignError(f"{path}: unreadable: {exc}") from None
        if not isinstance(man, dict) or man.get("xlayer_campaign") != VERSION or not isinstance(man.get("bundles"), dict):
            raise CampaignError(f"{path}: not an xlayer campaign manifest (version {VERSION})")
        s.man = man
        return s

    @classmethod
    def open(cls, out: str | os.PathLike) -> Store:
        """Return the store of `out` for a run: its manifest if there is one, else a new empty one."""
        p = Path(out) / MANIFEST
        return cls.read(out) if p.exists() else cls(out)

    @property
    def bundles(self) -> dict[str, dict[str, Any]]:
        """Return the manifest's bundles by content key."""
        return self.man["bundles"]

    def done(self, key: str) -> bool:
        """Return whether bundle `key` is listed done with every one of its files present."""
        b = self.bundles.get(key)
        return bool(b and b.get("status") == "done" and all((self.out / f).is_file() for f in b.get("files", [])))

    def fix_partitions(self, tag_sets: list[dict[str, Any]], columns: set[str]) -> list[str]:
        """Return the partition tags, choosing them now (first run) from the bundles' tags."""
        if self.man.get("partition_by") is None:
            keys = {str(k) for t in tag_sets for k in t}
            self.man["partition_by"] = sorted(k for k in keys if k not in columns and k not in ("bundle", "bundle_name"))
        return list(self.man["partition_by"])

    def put_done(self, key: str, entry: dict[str, Any], tables: dict[str, pl.DataFrame]) -> None:
        """Write a bundle's tables whole, then list it in the manifest (rewritten whole); return None."""
        where = partition_dir(entry.get("tags") or {}, self.man["partition_by"])
        files = []
        for name, df in tables.items():
            rel = f"{name}/{where}/{key}.parquet" if where else f"{name}/{key}.parquet"
            target = self.out / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            df = df.with_columns(pl.lit(key).alias("bundle"), pl.lit(entry["name"]).alias("bundle_name"))
            with whole_file(target) as tmp:
                df.write_parquet(tmp)
                os.replace(tmp, target)
            files.append(rel)
        self._replace_entry(key, {**entry, "status": "done", "files": files})

    def put_error(self, key: str, entry: dict[str, Any]) -> None:
        """List a bundle that failed, with its error line, in the manifest; return None."""
        self._replace_entry(key, {**entry, "status": "error", "files": []})

    def _replace_entry(self, key: str, entry: dict[str, Any]) -> None:
        """Put `entry` in the manifest, dropping (with their files) other entries of the same path."""
        stale = [k for k, b in self.bundles.items() if k != key and b.get("path") == entry.get("path")]
        with deferred():
            for k in stale:
                for f in self.bundles.pop(k).get("files", []):
                    with contextlib.suppress(FileNotFoundError):
                        (self.out / f).unlink()
            self.bundles[key] = entry
        self.save()

    def save(self, complete: bool | None = None) -> None:
        """Rewrite campaign.json whole (temporary file + rename), with counts; return None."""
        if complete is not None:
            self.man["complete"] = complete
        b = self.bundles.values()
        self.man["counts"] = {"bundles": len(self.bundles), "done": sum(x["status"] == "done" for x in b),
                              "error": sum(x["status"] == "error" for x in b),
                              "malformed_records": sum((x.get("records") or {}).get("malformed", 0) for x in b),
                              "skipped_bytes": sum((x.get("records") or {}).get("skipped_bytes", 0) for x in b)}
        self.man["bundles"] = dict(sorted(self.bundles.items(), key=lambda kv: (kv[1].get("path") or "", kv[0])))
        path = self.out / MANIFEST
        with whole_file(path) as tmp:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(self.man, f, indent=1, allow_nan=False, default=str)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)

    def table(self, name: str) -> pl.DataFrame:
        """Return one table of every done bundle (the files the manifest lists), without partition columns."""
        files = [self.out / f for b in self.bundles.values() if b.get("status") == "done"
                 for f in b.get("files", []) if f.split("/", 1)[0] == name]
        if not files:
            return pl.DataFrame()
        return pl.concat([pl.read_parquet(f) for f in sorted(files)], how="diagonal_relaxed")

    def tags(self) -> pl.DataFrame:
        """Return one row per done bundle: its key, name, path and every tag (strings; null where absent)."""
        done = [(k, b) for k, b in self.bundles.items() if b.get("status") == "done"]
        keys = sorted({str(t) for _, b in done for t in (b.get("tags") or {})})
        rows = [{"bundle": k, "bundle_name": b.get("name"), "path": b.get("path"),
                 **{t: (None if (b.get("tags") or {}).get(t) is None else str(b["tags"][t])) for t in keys}}
                for k, b in done]
        schema = {"bundle": pl.String, "bundle_name": pl.String, "path": pl.String} | {t: pl.String for t in keys}
        return pl.DataFrame(rows, schema=schema)


@contextlib.contextmanager
def locked(out: Path) -> Iterator[None]:
    """Hold an exclusive lock on the campaign directory while a run writes it; yield None.

    Raise CampaignError if another run holds it."""
    out.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(out, {MANIFEST})
    fd = os.open(out / ".campaign.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CampaignError(f"{out}: another campaign run is writing here") from None
        for d, _subdirs, _files in os.walk(out):
            remove_stale_temps(Path(d))
        yield
    finally:
        os.close(fd)
