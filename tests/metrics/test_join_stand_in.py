"""No capture of the AP's wired side: the server's capture stands in for it, moved by the path's least delay."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl

from tests.helpers.common import REPO
from xlayer.attribution.analyze import analyze
from xlayer.metrics import open_timeline
from xlayer.metrics.join import stand_in_notes

SAMPLE = REPO / "samples" / "sim-udp_overflow"


def _without(tmp: Path, drop: set[str]) -> Path:
    """Return a copy of the sample bundle without the captures of vantages in `drop`."""
    b = json.loads((SAMPLE / "bundle.json").read_text())
    b["captures"] = [c for c in b["captures"] if c["vantage"] not in drop]
    out = tmp / "bundle"
    out.mkdir()
    (out / "bundle.json").write_text(json.dumps(b))
    for c in b["captures"]:
        shutil.copy(SAMPLE / c["file"], out / c["file"])
    return out


def _prec_rec(j: pl.DataFrame, truth_fate: str, fate: str) -> tuple[float, float, int]:
    t, p = j["fate_truth"] == truth_fate, j["fate"] == fate
    hit = int((t & p).sum())
    return hit / max(int(p.sum()), 1), hit / max(int(t.sum()), 1), int(t.sum())


def test_server_capture_stands_in_for_the_ap(tmp_path):
    """The AP queue's drops and deliveries come out of the server's capture as they did out of the AP's:
    each downlink row names the server's frame, every packet's fate is the one the AP's capture gives
    (found through truth's packet ids), drops have precision 1 against truth, the sojourns are the AP's
    (none below 0), the cause ranked first is the same, and a note says which capture stood in."""
    b = _without(tmp_path, {"ap_wired"})
    tl = open_timeline(b, cache=False)
    down = tl.table("downlink")
    assert down.height and set(down["capture_file"].unique()) == {"server.pcap"}
    truth = pl.read_parquet(SAMPLE / "truth_packets.parquet").filter(pl.col("server_frame").is_not_null())
    ap = open_timeline(SAMPLE, cache=False).table("downlink")
    j = (truth.select("server_frame", "ap_wired_frame", pl.col("fate").alias("fate_truth"))
         .join(down.select("frame", "fate"), left_on="server_frame", right_on="frame")
         .join(ap.select("frame", pl.col("fate").alias("fate_ap")), left_on="ap_wired_frame", right_on="frame"))
    assert j.height >= 0.99 * ap.height
    assert (j["fate"] == j["fate_ap"]).mean() >= 0.99
    p, r, n = _prec_rec(j, "dropped_at_ap_queue", "dropped_at_ap")
    p_ap, r_ap, _ = _prec_rec(j.with_columns(pl.col("fate_ap").alias("fate")), "dropped_at_ap_queue", "dropped_at_ap")
    assert n > 100 and p >= 0.99 and r >= r_ap - 0.01, (p, r, p_ap, r_ap)
    assert down["sojourn_ns"].drop_nulls().min() >= 0
    notes = stand_in_notes(tl)
    assert len(notes) == 1 and "server.pcap stands in" in notes[0]
    full = analyze(open_timeline(SAMPLE, cache=False))
    alone = analyze(tl)
    assert full.incidents and alone.incidents
    assert alone.incidents[0].findings[0].cause == full.incidents[0].findings[0].cause == "ap_queue_overflow"


def test_a_station_capture_does_not_stand_in(tmp_path):
    """A station's own capture sees downlink packets after the air: it is downstream, never the AP's side."""
    b = _without(tmp_path, {"ap_wired", "server"})
    tl = open_timeline(b, cache=False)
    assert tl.table("downlink")["capture_file"].drop_nulls().len() == 0
    assert stand_in_notes(tl) == []
