"""Issue 13, items 6 and 9: what `xlayer analyze` says when it finds no incident, and how it writes times.

6. samples/lab-queue_overflow loses packets in its AP queue, yet TCP's fast retransmits keep its goodput
   up: "no incident" must say what was seen (the loss between the two captures around the queue, the
   retransmissions and how TCP recovered) and why it made no incident -- with the numbers of the `loss`
   and `retransmissions` tables, not numbers of its own.
9. Times carry their date and 'UTC' once, in the header line; a summary spanning midnight dates every time.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl

from tests.helpers.common import REPO
from xlayer.attribution.incidents import Analysis, CauseFinding, Incident
from xlayer.cli.analyze import summary_text

SAMPLES = REPO / "samples"


def analyze_text(tmp: Path, bundle: Path, *args: str) -> str:
    """Return what `xlayer analyze` prints on a copy of a sample bundle (exit 0 asserted)."""
    copy = tmp / bundle.name
    shutil.copytree(bundle, copy)
    r = subprocess.run([sys.executable, "-m", "xlayer", "analyze", "-q", "--no-cache", str(copy), *args],
                       capture_output=True, text=True, timeout=300, cwd=tmp, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def seen_lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip().startswith("seen: ")]


def test_queue_drops_without_an_incident_are_said_with_the_tables_numbers(tmp_path: Path) -> None:
    from xlayer.metrics import open_timeline

    text = analyze_text(tmp_path, SAMPLES / "lab-queue_overflow")
    assert "no incident: no flow dropped below its steady state and no condition held" in text
    (seen,) = seen_lines(text)
    flow = "tcp 10.71.1.2:5201>10.71.2.2:34492"
    tl = open_timeline(tmp_path / "lab-queue_overflow", cache=False)
    loss = tl.table("loss").filter((pl.col("flow") == flow) & (pl.col("vantage_a") == "router_in")
                                   & (pl.col("vantage_b") == "router_out")).row(0, named=True)
    rt = tl.table("retransmissions").filter((pl.col("flow") == flow) & (pl.col("vantage") == "server"))
    assert loss["lost"] > 80 and rt.height > 80          # the sample's truth: 93 tail drops at the AP queue
    assert (rt["trigger"] == "fast").all()
    # the loss is placed between the two captures around the queue, not server->client
    assert seen == (f"seen: {flow}: {loss['lost']} of {loss['sent']:,} packets lost between router_in and "
                    f"router_out ({loss['loss_ratio']:.1%}, {loss['bursts']} loss periods); TCP resent {rt.height} "
                    f"segments ({rt.height} by fast retransmit, no timeout); its goodput never fell below 0.5 x its "
                    "steady state for 0.3 s or more (--threshold, --min-duration)")


def test_thresholds_in_the_reason_are_the_ones_given(tmp_path: Path) -> None:
    text = analyze_text(tmp_path, SAMPLES / "lab-queue_overflow", "--threshold", "0.2", "--min-duration", "0.5")
    (seen,) = seen_lines(text)
    assert seen.endswith("never fell below 0.2 x its steady state for 0.5 s or more (--threshold, --min-duration)")


def test_a_clean_run_says_nothing_was_lost(tmp_path: Path) -> None:
    text = analyze_text(tmp_path, SAMPLES / "lab-baseline")
    assert seen_lines(text) == [("seen: no packet of the data flow lost between captures and no TCP retransmission; "
                                 "goodput never fell below 0.5 x its steady state for 0.3 s or more (--threshold, "
                                 "--min-duration)")]


def test_an_incident_has_no_seen_line_and_times_carry_their_date(tmp_path: Path) -> None:
    text = analyze_text(tmp_path, SAMPLES / "lab-delay_spike")
    assert seen_lines(text) == [] and "incidents (1)" in text
    ref = next(ln for ln in text.splitlines() if ln.startswith("reference clock:"))
    assert ref == "reference clock: server; times UTC, 2026-11-21"


# ---------------------------------------------------------------------------------------------
# times (item 9), on analyses made here

NOV21 = 1795219200.0          # 2026-11-21T00:00:00Z


def _flow(start: float, end: float) -> dict:
    return {"flow": "tcp 10.0.0.1:1>10.0.0.2:2", "vantage": "server", "capture_file": "s.pcap", "station": None,
            "start": start, "end": end, "goodput_bps": 5e6, "packets": 10}


def test_one_date_is_said_once() -> None:
    an = Analysis([], [_flow(NOV21 + 3600.25, NOV21 + 3700.5)], {"reference": "server"})
    lines = summary_text(an).splitlines()
    assert lines[0] == "reference clock: server; times UTC, 2026-11-21"
    assert lines[2].endswith("01:00:00.250-01:01:40.500")


def test_a_span_across_midnight_dates_every_time() -> None:
    inc = Incident(int((NOV21 - 10) * 1e9), int((NOV21 + 5) * 1e9), "drop", ["f"],
                   findings=[CauseFinding("mac_retries", 0.8, "retries")])
    an = Analysis([inc], [_flow(NOV21 - 20, NOV21 + 20)], {"reference": "server"})
    text = summary_text(an)
    assert text.splitlines()[0] == "reference clock: server; times UTC"
    assert "2026-11-20 23:59:40.000-2026-11-21 00:00:20.000" in text
    assert " 1. 2026-11-20 23:59:50.000-2026-11-21 00:00:05.000 (15.0 s) drop: mac_retries" in text


def test_no_time_shown_no_time_header() -> None:
    assert summary_text(Analysis([], [], {"reference": "server"})).splitlines()[0] == "reference clock: server"
