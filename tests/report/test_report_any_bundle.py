"""`xlayer report` on any bundle: idle gaps, single-packet flows, captures hours apart, one layer alone.

Issue 13 (1): flows idle for over 10 s left rows with a null bin start in `flow_series` (and its
Parquet), which the report cast to integers: a time axis from 1677 and a RuntimeWarning.  Each bundle
here is built in tmp_path (crafted pcaps, or copies of a shipped sample cut down or with one capture's
stamps moved by hours); the report must exit 0, write its page, print no warning, and keep its time
axis within the span of the data.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tests.helpers.common import REPO
from tests.report import bundles

NS = 1_000_000_000


def _run(*args: str) -> subprocess.CompletedProcess:
    """Run xlayer with RuntimeWarnings made errors (one escaping would fail the run)."""
    return subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-m", "xlayer", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=600)


def _x_range(html: str) -> tuple[float, float]:
    """Return the shared time axis (ms since the epoch) of the page's panels."""
    ranges = [(float(a), float(b)) for a, b in re.findall(
        r'"name":"Range1d","id":"[^"]+","attributes":\{"start":([-0-9.e+]+),"end":([-0-9.e+]+)\}', html)]
    assert ranges, "no shared time range in the page"
    return ranges[0]


def _data_span_ms(bundle: Path) -> tuple[float, float, float]:
    """Return the first and last time (ms, reference clock) of any packet or host sample of the bundle,
    and the width of a bin (ms): binned series are drawn at their bins' middles."""
    from xlayer.metrics import open_timeline

    tl = open_timeline(bundle)
    ts = [tl.packets(e, columns=["ts_ns"])["ts_ns"] for e in tl.entries()]
    hs = tl.host_state()
    if hs.height:
        ts.append(hs["ts_ns"])
    t = pl.concat([s.cast(pl.Int64) for s in ts]).drop_nulls()
    return int(t.min()) / 1e6, int(t.max()) / 1e6, tl.bin_ns / 1e6


BUILDERS = {
    "idle_gaps": lambda d: bundles.gap_bundle(d),
    "single_packet_flows": lambda d: bundles.single_packet_bundle(d),
    "capture_hours_later": lambda d: bundles.hours_apart(d, 3),
    "unrelated_hours_apart": lambda d: bundles.unrelated_hours_apart(d, 5),
    "air_only": lambda d: bundles.sample_subset("sim-udp_overflow", d, ["sniffer.pcap"]),
    "wired_only": lambda d: bundles.sample_subset("sim-udp_overflow", d, ["server.pcap"]),
    "ss_only": lambda d: bundles.sample_subset("lab-delay_spike", d, ["server-ss.txt"]),
    "tcpinfo_only": lambda d: bundles.sample_subset("sim-udp_overflow", d, ["server-tcp.jsonl"]),
}


@pytest.mark.parametrize("kind", list(BUILDERS))
def test_report_on_any_bundle(tmp_path, kind):
    bundle = BUILDERS[kind](tmp_path / kind)
    out = tmp_path / "report.html"
    p = _run("report", str(bundle), "-o", str(out), "-q")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Warning" not in p.stderr and "Traceback" not in p.stderr, p.stderr[-3000:]
    html = out.read_text()
    assert "RuntimeWarning" not in html                  # no panel met invalid numbers either
    start, end = _x_range(html)
    lo, hi, bin_ms = _data_span_ms(bundle)
    # the axis is the drawn data's extent (a bin's middle at most a bin past its packets) plus 1 % (at
    # least 1 ms) each side: inside the bundle's span
    slack = max((hi - lo) * 0.011, 1.5) + bin_ms
    assert lo - slack <= start < end <= hi + slack, (start, end, lo, hi)
    assert "1677-" not in html and "1970-01-01" not in html
    m = re.search(r"time span</th><td>([^<]*)</td>", html)
    assert m, "the header has no time span"
    if kind in ("idle_gaps", "unrelated_hours_apart"):
        assert "2020-09-13" in m.group(1)
    # nothing but the page beside the bundle: no temporary file left
    assert sorted(x.name for x in tmp_path.iterdir()) == sorted([kind, "report.html"])


def test_idle_flows_have_every_bin_start(tmp_path):
    """flow_series of flows idle over SERIES_MAX_GAP_NS: no null bin start, an empty bin at each gap's two
    ends, busy bins where the packets are (the table and its Parquet export alike)."""
    from xlayer.metrics import open_timeline
    from xlayer.metrics.flows import SERIES_MAX_GAP_NS

    bundle = bundles.gap_bundle(tmp_path / "gap")
    tl = open_timeline(bundle)
    fs = tl.table("flow_series")
    bin_ns = tl.bin_ns
    assert fs.height and fs["bin_start_ns"].null_count() == 0
    t0 = 1_600_000_000 * NS
    sparse = fs.filter(pl.col("flow") == "tcp 10.0.0.1:40001>10.0.0.2:81").sort("bin_start_ns")
    busy = [t0 + int(s * NS) for s in (0.5, 15.0, 40.0, 60.0)]
    assert sparse.filter(pl.col("packets") > 0)["bin_start_ns"].to_list() == busy
    got = set(sparse["bin_start_ns"].to_list())
    for a, b in zip(busy, busy[1:]):
        assert b - a > SERIES_MAX_GAP_NS
        assert {a + bin_ns, b - bin_ns} <= got                    # the gap's two ends, empty
        assert not any(a + bin_ns < x < b - bin_ns for x in got)  # and nothing filled between
    assert sparse.height == 4 + 2 * 3
    out = tmp_path / "m"
    p = _run("metrics", str(bundle), "-o", str(out), "--tables", "flow_series", "-q")
    assert p.returncode == 0, p.stderr
    pq = pl.read_parquet(next(out.rglob("flow_series*.parquet")))
    assert pq.height == fs.height and pq["bin_start_ns"].null_count() == 0


def test_lines_leave_out_points_without_a_time():
    """A null time (NaN once in numpy) is dropped, not cast to the year 1677, and no warning is raised."""
    from xlayer.report.page import _gapped

    x = np.array([np.nan, 1.6e18, 1.6e18 + 1e8, np.nan, 1.6e18 + 30e9])
    y = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gx, gy = _gapped(x, y, 20 * NS)
    fin = gx[np.isfinite(gx)]
    assert fin.min() >= 1.6e12 and fin.max() <= 1.6e12 + 30e3     # ms, all within the data
    assert list(gy[np.isfinite(gy)]) == [2.0, 3.0, 5.0]
    assert np.isnan(gy).sum() == 1                                 # one break: the 30 s gap


def test_metrics_json_of_the_gap_bundle_is_valid(tmp_path):
    """The Parquet's companion metrics.json still parses (no NaN written for the missing bins)."""
    bundle = bundles.gap_bundle(tmp_path / "gap")
    out = tmp_path / "m"
    assert _run("metrics", str(bundle), "-o", str(out), "-q").returncode == 0
    for f in out.rglob("*.json"):
        json.loads(f.read_text())
