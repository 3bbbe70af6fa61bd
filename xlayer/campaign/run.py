"""Run a campaign: every bundle analyzed as one Dask task, each result written as it lands.

A `LocalCluster` (processes, one thread each) by default, or an existing cluster (`scheduler`).  The
driver (this process) writes the dataset (`xlayer.campaign.store`): the workers need not see OUT, only the
bundles.  A worker that dies takes its task back to the scheduler, which runs it on another worker
(Dask's own rescheduling); a bundle that fails is listed with its error; a bundle listed done with the same
content key is skipped.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xlayer.campaign.store import CampaignError, Store, content_key, locked
from xlayer.campaign.task import analyze_bundle, one_line
from xlayer.text import safe_text

MANIFEST_NAME = "bundle.json"


@dataclass
class RunResult:
    """What a run did: bundles analyzed now, skipped (already done), failed (with their lines)."""

    done: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)      # campaign.json's totals after the run


def find_bundles(paths: list[str], out: Path) -> list[Path]:
    """Return the bundle directories `paths` name (a bundle, its bundle.json, or a directory searched for
    bundles, links not followed), resolved and sorted; raise CampaignError on a missing path."""
    found: set[Path] = set()
    for p in paths:
        path = Path(p)
        if not os.path.lexists(path):
            raise CampaignError(f"{p}: no such file or directory")
        if path.name == MANIFEST_NAME and path.is_file():
            found.add(path.parent.resolve())
        elif (path / MANIFEST_NAME).exists() or not path.is_dir():
            found.add(path.resolve())       # not a bundle: its error row says why
        else:
            under = _search(path, out.resolve())
            if not under:
                raise CampaignError(f"{safe_text(p)}: no bundle here (no bundle.json in it or below it)")
            found |= under
    return sorted(found)


def _search(top: Path, out: Path) -> set[Path]:
    """Return the bundles under directory `top` (not descending into a bundle, nor into OUT)."""
    found = set()
    for d, subdirs, files in os.walk(top, followlinks=False):
        here = Path(d).resolve()
        if here == out:
            subdirs[:] = []
            continue
        if MANIFEST_NAME in files:
            found.add(here)
            subdirs[:] = []
        else:
            subdirs.sort()
    return found


def check_output(out: Path, bundles: list[Path]) -> None:
    """Raise CampaignError if OUT is a bundle or inside one (the campaign would write into its input)."""
    real = Path(os.path.realpath(out))
    for b in bundles:
        if real == b or b in real.parents:
            raise CampaignError(f"{out}: the output directory is inside bundle {b}; write it elsewhere")
    if (real / MANIFEST_NAME).exists():
        raise CampaignError(f"{out}: the output directory is a bundle; write it elsewhere")


def parse_window(text: str | None) -> tuple[float, float] | None:
    """Return --window A:B as (A, B) seconds from each bundle's first packet; raise CampaignError if bad."""
    if text is None:
        return None
    a, sep, b = text.partition(":")
    try:
        lo, hi = float(a), float(b)
    except ValueError:
        lo = hi = float("nan")
    if not sep or not (0 <= lo < hi < float("inf")):
        raise CampaignError(f"--window {safe_text(text)}: expected A:B seconds, 0 <= A < B (example: 50:100)")
    return lo, hi


def check_scheduler(address: str) -> None:
    """Raise CampaignError if `address` is not a Dask scheduler address (scheme://host:port or host:port)."""
    from distributed.comm.addressing import parse_address, parse_host_port
    from distributed.comm.registry import get_backend

    try:
        scheme, loc = parse_address(address)
        get_backend(scheme)
        if scheme in ("tcp", "tls", "ws", "wss"):
            parse_host_port(loc)
    except (ValueError, TypeError) as exc:
        raise CampaignError(f"--scheduler {safe_text(address)}: not a scheduler address ({one_line(exc)}); "
                            "expected tcp://HOST:PORT") from None


def connect(scheduler: str | None, workers: int | None) -> tuple[Any, Any]:
    """Return (client, cluster or None): a client of the cluster at `scheduler`, or of a new LocalCluster of
    `workers` processes (one thread each); raise CampaignError if the scheduler cannot be reached."""
    import logging

    from distributed import Client, LocalCluster

    if scheduler is not None:
        try:
            return Client(scheduler, timeout="10s", set_as_default=False), None
        except Exception as exc:  # noqa: BLE001 - any failure to connect is the user's address: one line
            raise CampaignError(f"--scheduler {safe_text(scheduler)}: cannot connect: {one_line(exc)}") from None
    n = workers or os.cpu_count() or 1
    # one thread per worker all the way down: polars' (and BLAS') own pools would make N workers fight for
    # the cores a worker count is meant to share out
    # (set while the workers are spawned, so they have it before anything imports polars)
    one = {"POLARS_MAX_THREADS": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    before = {k: os.environ.get(k) for k in one}
    os.environ.update(one)
    try:
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None,
                               silence_logs=logging.ERROR)
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return Client(cluster, set_as_default=False), cluster


def _entry(path: Path, key: str, window: tuple[float, float] | None) -> dict[str, Any]:
    """Return a bundle's manifest entry before analysis: path, name, tags (if its manifest reads)."""
    from xlayer.bundle.manifest import BundleError, open_bundle

    entry: dict[str, Any] = {"path": str(path), "name": safe_text(path.name), "key": key,
                             "window": list(window) if window else None, "tags": {}}
    try:
        entry["tags"] = {safe_text(str(k)): safe_text(str(v)) for k, v in open_bundle(path).tags.items()}
    except (BundleError, OSError, ValueError) as exc:
        entry["error"] = one_line(exc)
    return entry


def run_campaign(paths: list[str], out: str | os.PathLike, *, scheduler: str | None = None,
                 workers: int | None = None, window: tuple[float, float] | None = None,
                 progress: bool = True, on_result: Callable[[str, dict[str, Any]], None] | None = None) -> RunResult:
    """Analyze every bundle `paths` name into campaign directory `out`; return what was done."""
    from xlayer.campaign.task import SUMMARY_METRICS

    out = Path(out)
    bundles = find_bundles(paths, out)
    check_output(out, bundles)
    if workers is not None and workers < 1:
        raise CampaignError("--workers must be 1 or more")
    if scheduler is not None:
        check_scheduler(scheduler)
    res = RunResult()
    with locked(out):
        store = Store.open(out)
        entries = {}
        for b in bundles:
            key = content_key(b, window)
            entries[key] = _entry(b, key, window)
        columns = set(SUMMARY_METRICS) | {"payload_bytes", "stations", "rts", "ampdu", "incidents", "window_s",
                                          "interval", "t_s", "incident", "kind", "cause", "confidence", "start_s",
                                          "end_s", "flow", "vantage", "packets", "capture_file", "records",
                                          "decoded", "malformed", "skipped_bytes", "unread"}
        store.fix_partitions([e["tags"] for e in entries.values()], columns)
        store.save(complete=False)
        todo = {}
        for key, e in entries.items():
            if store.done(key):
                res.skipped.append(e["path"])
            elif "error" in e:
                store.put_error(key, e)
                res.errors[e["path"]] = e["error"]
            else:
                todo[key] = e
        if todo:
            _run(store, todo, res, scheduler, workers, window, progress, on_result)
        store.save(complete=True)     # every bundle done or listed with its error
    res.counts = dict(store.man["counts"])
    return res


def _run(store: Store, todo: dict[str, dict[str, Any]], res: RunResult, scheduler: str | None,
         workers: int | None, window: tuple[float, float] | None, progress: bool,
         on_result: Callable[[str, dict[str, Any]], None] | None) -> None:
    """Submit every bundle of `todo` and write each result as its future completes; return None."""
    from distributed import as_completed
    from tqdm import tqdm

    client, cluster = connect(scheduler, min(workers or os.cpu_count() or 1, len(todo)) if scheduler is None else None)
    try:
        futures = {client.submit(analyze_bundle, e["path"], window, key=f"xlayer-campaign-{key}", pure=False): key
                   for key, e in todo.items()}
        with tqdm(total=len(futures), desc="campaign", unit=" bundles", disable=not progress or None) as bar:
            for fut in as_completed(futures, loop=client.loop):
                key = futures[fut]
                _land(store, key, todo[key], fut, res)
                bar.update(1)
                if on_result is not None:
                    on_result(key, store.bundles[key])
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _land(store: Store, key: str, entry: dict[str, Any], fut: Any, res: RunResult) -> None:
    """Write one completed future's result (or its error) to the store; return None."""
    try:
        r = fut.result()
    except Exception as exc:  # noqa: BLE001 - a task lost for good (killed workers) is an error row
        r = {"status": "error", "error": one_line(exc)}
    if r["status"] == "done":
        store.put_done(key, {**entry, **r["meta"]}, r["tables"])
        res.done.append(entry["path"])
    else:
        store.put_error(key, {**entry, "error": r["error"]})
        res.errors[entry["path"]] = r["error"]
