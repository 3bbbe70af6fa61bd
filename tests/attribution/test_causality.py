"""Root causes before consequences, decided by measured delay (issue 11, build item 1).

Spurious RTOs follow a delay above the RTO; the measurements of the timed-out flows' packets at the AP
say whether retries or queueing made that delay, and the finding that made it ranks first.
"""
from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from tests.helpers.common import REPO
from xlayer.attribution.causality import _covered, delay_components, explain
from xlayer.attribution.causes.base import Window
from xlayer.attribution.incidents import CauseFinding

MS = 1_000_000


def _analyze(sample: str) -> dict:
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "xlayer", "analyze", str(REPO / "samples" / sample), "--json", "-q"],
                       capture_output=True, text=True, cwd=REPO, timeout=600)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_retries_of_a_deaf_station_are_the_root_of_its_spurious_timeouts():
    (inc,) = _analyze("sim-delay_spike")["incidents"]
    assert inc["cause"] == inc["root"] == "mac_retries"
    (c,) = inc["consequences"]
    assert c["cause"] == "spurious_rto" and c["explained_by"] == "mac_retries"
    assert "MAC retry time" in c["because"]
    d = inc["evidence"]["spurious_rto"]["numbers"]["delay_p95_ms"]
    assert d["mac_retry"] > d["ap_queue"] and d["mac_retry"] >= 0.5 * 200


def test_slow_station_queueing_is_the_root_in_the_performance_anomaly():
    (inc,) = _analyze("sim-performance_anomaly")["incidents"]
    assert inc["root"] == "performance_anomaly"
    assert [c["cause"] for c in inc["consequences"]] == ["spurious_rto"]
    assert "AP queue sojourn" in inc["consequences"][0]["because"]


def test_delay_on_the_wired_path_leaves_spurious_timeouts_a_root():
    # the lab's delay spike is a wired bottleneck: no air capture, no AP-side delay to blame
    (inc,) = _analyze("lab-delay_spike")["incidents"]
    assert inc["root"] == "spurious_rto" and inc["consequences"] == []


def test_covered_time_of_overlapping_intervals():
    f = _covered(np.array([10, 15, 40]), np.array([20, 30, 50]))
    assert f(np.array([0, 10, 15, 20, 30, 35, 40, 45, 50, 100])).tolist() == [0, 0, 5, 10, 20, 20, 20, 25, 30, 30]
    assert _covered(np.array([], dtype=np.int64), np.array([], dtype=np.int64))(np.array([5])).tolist() == [0]


class _Ctx:
    """Just the window filter `explain` uses, over a crafted downlink table."""

    def __init__(self, downlink: pl.DataFrame) -> None:
        self.dl = downlink

    def between(self, name: str, s: int, e: int) -> pl.DataFrame:
        assert name == "downlink"
        return self.dl.filter((pl.col("ts_ns") >= s) & (pl.col("ts_ns") < e))


def _downlink(sojourn_ms: list[float], retry_ms: list[float]) -> pl.DataFrame:
    t0 = 10_000 * MS
    rows = []
    for i, (q, r) in enumerate(zip(sojourn_ms, retry_ms)):
        arrive = t0 + i * 300 * MS
        first = arrive + int(q * MS)
        rows.append({"ts_ns": arrive, "flow": "f", "sojourn_ns": int(q * MS), "first_air_ts_ns": first,
                     "last_air_ts_ns": first + int(r * MS)})
    return pl.DataFrame(rows)


def _findings(*names: str) -> list[CauseFinding]:
    out = []
    for n in names:
        nums = {"host_rto_ms": 200.0} if n == "spurious_rto" else {}
        out.append(CauseFinding(n, 0.9 if n == "spurious_rto" else 0.5, n, nums, flows=["f"]))
    return out


W = Window(10_000 * MS, 20_000 * MS, ["f"])


@pytest.mark.parametrize("maker", ["mac_retries", "interference"])
def test_retry_time_past_the_rto_makes_retries_the_root(maker):
    dl = _downlink([1, 1, 2, 1], [300, 5, 250, 400])
    got = explain(_Ctx(dl), W, _findings("spurious_rto", maker))
    assert [f.cause for f in got] == [maker, "spurious_rto"] and got[1].explained_by == maker


def test_queueing_past_the_rto_makes_the_queue_maker_the_root_not_the_retries():
    dl = _downlink([400, 350, 380, 390], [1, 2, 1, 1])
    got = explain(_Ctx(dl), W, _findings("spurious_rto", "mac_retries", "ap_queue_overflow"))
    assert [f.cause for f in got] == ["mac_retries", "ap_queue_overflow", "spurious_rto"]
    assert got[2].explained_by == "ap_queue_overflow"


def test_no_reorder_when_no_finding_made_the_measured_delay():
    dl = _downlink([400, 350, 380, 390], [1, 2, 1, 1])          # queueing, but no queue maker found
    got = explain(_Ctx(dl), W, _findings("spurious_rto", "mac_retries"))
    assert [f.cause for f in got] == ["spurious_rto", "mac_retries"] and got[0].explained_by is None


def test_no_reorder_when_the_delay_stays_far_below_the_rto():
    dl = _downlink([5, 6, 4, 5], [20, 30, 25, 20])
    got = explain(_Ctx(dl), W, _findings("spurious_rto", "mac_retries"))
    assert [f.cause for f in got] == ["spurious_rto", "mac_retries"]


def test_waiting_behind_another_packets_retries_counts_as_retry_time():
    # packet 2 arrives while packet 1 is being retried for 500 ms: its sojourn is the AP retrying
    dl = pl.DataFrame({"ts_ns": [0, 10 * MS], "flow": ["f", "f"], "sojourn_ns": [0, 495 * MS],
                       "first_air_ts_ns": [1 * MS, 506 * MS], "last_air_ts_ns": [501 * MS, 506 * MS]})
    comp = delay_components(_Ctx(dl), Window(0, 1000 * MS, ["f"]), ["f"])
    assert comp is not None and comp["mac"] > 480 and comp["queue"] < 20
