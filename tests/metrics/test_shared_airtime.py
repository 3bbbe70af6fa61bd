"""An air capture's airtime is computed once per timeline and read by the stations and air_frames tables."""
from __future__ import annotations

import polars as pl

from tests.helpers.common import REPO
from xlayer.metrics import air, open_timeline, stations
from xlayer.timeline.airtime import airtime

SAMPLE = REPO / "samples" / "sim-rts_cts"


def test_tables_as_computed_from_their_own_airtime() -> None:
    tl = open_timeline(SAMPLE, cache=False)
    (e,) = tl.entries("air")
    shared = stations.capture_airtime(tl, e)
    assert stations.capture_airtime(tl, e) is shared        # kept, not computed again
    p = stations._filled(tl.packets(e, columns=list(air.NEEDS)), air.NEEDS)
    assert shared["ppdu_ns"].equals(airtime(p)["ppdu_ns"]) and shared["share_ns"].null_count() < len(shared)
    assert tl.table("air_frames").equals(air.air_frames(p, e.file))
    own = stations._tables_of(*stations._prepare(tl.packets(e, columns=list(stations.NEEDS))), e.file, tl.bin_ns)
    for name, df in own.items():
        assert tl.table(name).equals(df), name
    assert tl.table("air_frames")["airtime_ns"].drop_nulls().len() > 0
    assert isinstance(shared, pl.DataFrame) and shared.height == p.height
