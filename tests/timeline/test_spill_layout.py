"""A spilled timeline (decoded chunks written once, the aligned stamps and flows written beside them)
reads back exactly what the same timeline held in memory gives, column by column, and so does a cache
entry built that way; an entry missing one of its files is built again."""
from __future__ import annotations

import functools
import json
import os
import shutil
from pathlib import Path

import polars as pl
import pytest

import parsers
from tests.helpers.common import REPO
from xlayer.metrics import open_timeline
from xlayer.timeline import cache

# sim-fragmentation: later IP fragments take their datagram's ports (a window over the whole capture);
# ns3-ht: A-MPDUs and TSFT on the air capture
SAMPLES = ["sim-fragmentation", "ns3-ht"]
SUBSETS = [None, ["flow", "ts_ns", "frame", "no_such_column", "capture_file"], ["ts_local_ns"], ["kind", "vantage"],
           ["dir", "conn"], ["ts_ns", "ts_local_ns", "wlan_ta", "ip_src"]]


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Decode in chunks of 64 KiB of records, so that every capture is spilled as several chunk files."""
    monkeypatch.setattr(parsers, "iter_tables", functools.partial(parsers.iter_tables, chunk_bytes=64 << 10))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))


def _same(a: pl.DataFrame, b: pl.DataFrame) -> None:
    assert a.columns == b.columns
    assert a.schema == b.schema
    assert a.equals(b, null_equal=True)


@pytest.mark.parametrize("sample", SAMPLES)
def test_spilled_tables_equal_the_in_memory_ones(sample: str, small_chunks: None) -> None:
    mem = open_timeline(REPO / "samples" / sample, spill=False, cache=False)
    with open_timeline(REPO / "samples" / sample, spill=True, cache=False) as sp:
        raw = [f for f in Path(sp._spill_dir).rglob("raw-*.arrow")]
        assert len(raw) > 2 * len(sp.entries())          # several chunks per capture, read back as one table
        a, m = sp.alignment, mem.alignment
        same = (a.reference, a.reference_clock, a.captures, a.clocks)
        assert same == (m.reference, m.reference_clock, m.captures, m.clocks)     # (not the seconds it took)
        assert [e.file for e in sp.entries()] == [e.file for e in mem.entries()]
        for e in mem.entries():
            assert sp.columns(e) == mem.columns(e)
            for cols in SUBSETS:
                _same(sp.packets(e, columns=cols), mem.packets(e, columns=cols))
        _same(sp.packets(), mem.packets())
        # every table of the modules that park what they keep for later in the spill directory (the join's
        # finished downlink and uplink, the flows' packet identities and RTT rows), and no parked file left
        for name in ("downlink", "uplink", "attempts", "capture_loss", "flows", "flow_series", "rtt", "owd", "loss"):
            _same(sp.table(name), mem.table(name))
        assert not [p for p in Path(sp._spill_dir).rglob("park-*")]


def test_spill_keeps_the_decoded_chunks_and_adds_only_what_alignment_changes(small_chunks: None) -> None:
    with open_timeline(REPO / "samples" / "ns3-ht", spill=True, cache=False) as tl:
        for e in tl.entries():
            derived = Path(tl._spilled[e.file].derived)
            # the chunks are not rewritten: beside them, one file of the stamps and flow names
            assert list(pl.read_ipc_schema(derived)) == ["ts_ns", "flow", "conn", "dir"]
            assert sorted(p.name for p in derived.parent.iterdir() if not p.name.startswith("raw-")) == [derived.name]
            assert len(tl._spilled[e.file].raw) >= 2


def test_cache_entry_reads_back_the_same_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                small_chunks: None) -> None:
    monkeypatch.setenv("XLAYER_CACHE_DIR", str(tmp_path / "cache"))
    b = tmp_path / "bundle"
    shutil.copytree(REPO / "samples" / "sim-fragmentation", b)
    mem = open_timeline(b, spill=False, cache=False)
    open_timeline(b)                                  # builds the entry
    again = open_timeline(b)                          # reads it
    assert again._cached is not None
    for e in mem.entries():
        for cols in SUBSETS:
            _same(again.packets(e, columns=cols), mem.packets(e, columns=cols))


@pytest.mark.parametrize("which", ["raw", "derived"])
def test_cache_entry_missing_a_file_is_built_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   small_chunks: None, which: str) -> None:
    root = tmp_path / "cache"
    monkeypatch.setenv("XLAYER_CACHE_DIR", str(root))
    b = tmp_path / "bundle"
    shutil.copytree(REPO / "samples" / "sim-fragmentation", b)
    want = open_timeline(b).packets()
    (entry,) = cache.entries(root)
    meta = json.loads((root / entry["key"] / "meta.json").read_text())
    sp = next(iter(meta["spilled"].values()))
    os.remove(root / entry["key"] / (sp["raw"][-1] if which == "raw" else sp["derived"]))
    tl = open_timeline(b)
    _same(tl.packets(), want)
    assert all(os.path.isfile(f) for s in tl._spilled.values() for f in s.files())
