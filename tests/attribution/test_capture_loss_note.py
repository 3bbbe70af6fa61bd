"""Issue 13: a sniffer that missed frames is said where the user looks (summary, JSON notes, report).

The shipped sim-baseline bundle is copied with every 20th record of its sniffer capture left out; the
analysis then says how many data MPDUs the sniffer missed, with the numbers of the `capture_loss` table
(one definition), and the untouched bundle says nothing of it.
"""
from __future__ import annotations

import shutil

import numpy as np
import polars as pl

from tests.helpers.common import REPO
from tests.timeline.test_align import read_records, write_pcap
from xlayer.attribution.analyze import CAPTURE_LOSS_NOTE, analyze
from xlayer.cli.analyze import summary_text
from xlayer.metrics import open_timeline

SRC = REPO / "samples" / "sim-baseline"


def _notes(d) -> tuple[list[str], pl.DataFrame, str]:
    tl = open_timeline(d, cache=False)
    an = analyze(tl)
    return [n for n in an.notes if "the sniffer missed" in n], tl.table("capture_loss"), summary_text(an)


def test_missed_frames_are_said_with_the_tables_numbers(tmp_path) -> None:
    d = tmp_path / "b"
    shutil.copytree(SRC, d)
    ts, frames, wl, lt = read_records(SRC / "sniffer.pcap")
    keep = np.ones(len(ts), bool)
    keep[::20] = False
    write_pcap(d / "sniffer.pcap", lt, ts[keep], [f for f, k in zip(frames, keep) if k], wl[keep])
    notes, cl, text = _notes(d)
    row = cl.filter(pl.col("direction") == "all").row(0, named=True)
    share = row["mpdus_missed"] / row["mpdus_inferred"]
    print(notes, row)
    assert share >= CAPTURE_LOSS_NOTE
    assert len(notes) == 1
    assert f"missed {row['mpdus_missed']:,} of {row['mpdus_inferred']:,} data MPDUs ({share:.1%}" in notes[0]
    assert notes[0] in text


def test_a_complete_sniffer_is_not_doubted(tmp_path) -> None:
    d = tmp_path / "b"
    shutil.copytree(SRC, d)
    notes, cl, _ = _notes(d)
    row = cl.filter(pl.col("direction") == "all").row(0, named=True)
    assert row["mpdus_missed"] / max(row["mpdus_inferred"], 1) < CAPTURE_LOSS_NOTE and notes == []
