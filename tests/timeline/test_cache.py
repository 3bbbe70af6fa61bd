"""The decode cache: a bundle is decoded once, and what is read back equals what was computed.

Each test points $XLAYER_CACHE_DIR at a directory of its own and works on a copy of a shipped sample.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

from tests.helpers.common import REPO
from xlayer.metrics import open_timeline
from xlayer.timeline import cache

SAMPLE = REPO / "samples" / "sim-udp_overflow"


@pytest.fixture
def env(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("XLAYER_CACHE_DIR", str(root))
    b = tmp_path / "bundle"
    shutil.copytree(SAMPLE, b)
    return b, root


def _no_decoding(monkeypatch) -> None:
    import parsers.decode.ingest as ingest

    def refuse(*a, **kw):
        raise AssertionError("a capture was decoded although the cache holds it")

    monkeypatch.setattr(ingest, "iter_tables", refuse)
    monkeypatch.setattr("parsers.iter_tables", refuse, raising=False)


def test_second_open_reads_the_cache_and_gives_the_same_tables(env, monkeypatch):
    b, root = env
    first = open_timeline(b)
    want = {n: first.table(n) for n in ("downlink", "flows", "retransmissions", "air_frames")}
    packets = first.packets("sniffer", columns=["frame", "ts_ns", "ts_local_ns", "flow"])
    assert len(cache.entries(root)) == 1
    _no_decoding(monkeypatch)
    again = open_timeline(b)
    assert again.alignment.as_json() == first.alignment.as_json()
    assert again.read_stats.keys() == first.read_stats.keys()
    assert again.read_stats["sniffer.pcap"].records == first.read_stats["sniffer.pcap"].records > 0
    assert again.packets("sniffer", columns=["frame", "ts_ns", "ts_local_ns", "flow"]).equals(packets)
    for n, df in want.items():
        assert again.table(n).equals(df), n


def test_a_changed_capture_is_a_new_entry(env):
    b, root = env
    before = open_timeline(b).read_stats["client.pcap"].records
    data = bytearray((b / "client.pcap").read_bytes())
    cut = len(data) - 200          # drop the last records: same name, other content
    (b / "client.pcap").write_bytes(bytes(data[:cut]))
    tl = open_timeline(b)
    assert len(cache.entries(root)) == 2
    st = tl.read_stats["client.pcap"]
    assert st.records < before


def test_read_only_bundle(env):
    b, root = env
    for p in [*b.iterdir(), b]:
        p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        r = subprocess.run([sys.executable, "-m", "xlayer", "analyze", str(b), "--json", "-q"], cwd=REPO,
                           capture_output=True, text=True, timeout=600,
                           env={**os.environ, "XLAYER_CACHE_DIR": str(root)})
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["incidents"]
        assert sorted(p.name for p in b.iterdir()) == sorted(p.name for p in SAMPLE.iterdir())
    finally:
        for p in [b, *b.iterdir()]:
            p.chmod(p.stat().st_mode | stat.S_IWUSR)


def test_two_processes_at_once_both_succeed_with_equal_output(env):
    b, root = env
    run = [sys.executable, "-m", "xlayer", "analyze", str(b), "--json", "-q"]
    procs = [subprocess.Popen(run, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "XLAYER_CACHE_DIR": str(root)}) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e for _, e in outs]
    assert json.loads(outs[0][0]) == json.loads(outs[1][0])
    assert len(cache.entries(root)) == 1
    assert not [p for p in root.iterdir() if p.name.startswith(".")]


def test_damaged_entry_is_built_again(env):
    b, root = env
    want = open_timeline(b).table("flows")
    (entry,) = cache.entries(root)
    meta = json.loads((root / entry["key"] / "meta.json").read_text())
    os.remove(root / entry["key"] / next(iter(meta["packets"].values())))
    assert open_timeline(b).table("flows").equals(want)
    assert open_timeline(b).table("flows").equals(want)


def test_no_cache_leaves_nothing(env):
    b, root = env
    tl = open_timeline(b, cache=False)
    assert tl.table("flows").height > 0
    assert not root.exists() or not any(root.iterdir())


def test_stale_builds_are_removed_and_live_ones_kept(tmp_path):
    root = tmp_path / "c"
    root.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = root / f".build-abc-{dead.pid}-x1"
    live = root / f".build-abc-{os.getpid()}-x2"
    stale.mkdir()
    live.mkdir()
    assert cache.clean_stale(root) == 1
    assert not stale.exists() and live.exists()


def test_prune_removes_least_recently_used(tmp_path):
    root = tmp_path / "c"
    for i, key in enumerate(("old", "new")):
        d = root / key
        d.mkdir(parents=True)
        (d / "meta.json").write_text("{}")
        (d / "blob").write_bytes(b"x" * 1000)
        os.utime(d / "meta.json", (1_000_000 + i, 1_000_000 + i))
    assert cache.prune(root, max_bytes=1500) == 1
    assert [e["key"] for e in cache.entries(root)] == ["new"]


def test_cache_command_lists_and_clears(env):
    b, root = env
    open_timeline(b).table("flows")
    e = {**os.environ, "XLAYER_CACHE_DIR": str(root)}
    r = subprocess.run([sys.executable, "-m", "xlayer", "cache"], cwd=REPO, capture_output=True, text=True, env=e)
    assert r.returncode == 0 and "1 entry" in r.stdout and str(b) in r.stdout
    r = subprocess.run([sys.executable, "-m", "xlayer", "cache", "clear"], cwd=REPO, capture_output=True,
                       text=True, env=e)
    assert r.returncode == 0 and "removed 1 cache entry" in r.stdout
    assert cache.entries(root) == []


def test_key_follows_code_and_options(env):
    b, _ = env
    from xlayer.bundle import open_bundle
    from xlayer.metrics import MODULES
    from xlayer.timeline.open import _key_parts, needed_columns

    bundle = open_bundle(b)
    cols = needed_columns(MODULES)
    k = cache.entry_key(_key_parts(bundle, "fast", cols, None, 100_000_000, MODULES))
    assert k == cache.entry_key(_key_parts(bundle, "fast", cols, None, 100_000_000, MODULES))
    assert k != cache.entry_key(_key_parts(bundle, "reference", cols, None, 100_000_000, MODULES))
    assert k != cache.entry_key(_key_parts(bundle, "fast", cols, None, 50_000_000, MODULES))
    assert k != cache.entry_key(_key_parts(bundle, "fast", cols, "client", 100_000_000, MODULES))
    assert len(k) == 32


def test_stale_build_names_with_unicode_digits_are_left_alone(tmp_path):
    root = tmp_path / "c"
    root.mkdir()
    odd = root / ".build-abc-\u00b2\u00b3-x1"          # isdigit() holds, int() fails
    odd.mkdir()
    assert cache.clean_stale(root) == 0 and odd.exists()
