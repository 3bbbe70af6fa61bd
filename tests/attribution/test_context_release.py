"""The analysis Context lets go of what it read: `release` drops the tables it holds (a spilled table is
mapped, and the pages a cause touched count in RSS while it is held) and reads them again, equal, when
next asked for; `outside` with `columns` gives the same rows as without, only those columns."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from tests.helpers.common import REPO
from xlayer.attribution.causes.base import Context
from xlayer.attribution.drops import DropConfig
from xlayer.metrics import open_timeline

SAMPLE = REPO / "samples" / "sim-baseline"


class _Tables:
    """A timeline stand-in holding its tables in memory (no `table_columns`)."""

    def __init__(self, **tables: pl.DataFrame) -> None:
        self._t = tables

    def table(self, name: str) -> pl.DataFrame:
        return self._t[name]


@pytest.fixture(scope="module")
def spilled(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """The sample bundle's timeline, spilled (every table a file), its spill under a tmp dir."""
    if not (SAMPLE / "bundle.json").is_file():
        pytest.skip(f"sample bundle missing: {SAMPLE}")
    mp = pytest.MonkeyPatch()
    tmp = tmp_path_factory.mktemp("spill")
    mp.setenv("TMPDIR", str(tmp))
    mp.setattr("tempfile.tempdir", str(tmp))
    tl = open_timeline(SAMPLE, spill=True, cache=False)
    try:
        yield tl
    finally:
        tl.close()
        mp.undo()


def test_release_drops_the_tables_and_reads_them_again_equal(spilled) -> None:  # noqa: ANN001
    ctx = Context(spilled, DropConfig())
    first = {name: ctx.table(name) for name in ("attempts", "air_frames", "delay")}
    span, stations = ctx.span, ctx.flow_station
    ctx.release()
    for name, df in first.items():
        again = ctx.table(name)
        assert again is not df                  # read anew: the first one was let go
        assert again.equals(df, null_equal=True) and again.schema == df.schema
        assert ctx.table(name) is again         # and kept until the next release
    assert ctx.span == span and ctx.flow_station == stations    # what was computed from them stays


@pytest.mark.parametrize("quiet", [[], [(100, 150), (140, 300), (900, 901)]])
def test_outside_with_columns_is_outside_projected(quiet: list[tuple[int, int]]) -> None:
    rng = np.random.default_rng(5)
    df = pl.DataFrame({"ts_ns": rng.integers(0, 1_000, 2_000).astype(np.int64), "frame": np.arange(2_000),
                       "station": rng.choice(["a", "b"], 2_000).tolist()})
    ctx = Context(_Tables(attempts=df), DropConfig())
    ctx.quiet = quiet
    full = ctx.outside("attempts")
    # the table's order whatever the order asked, the filter column not needed among them, unknown ones ignored
    got = ctx.outside("attempts", columns=("station", "frame", "no_such_column"))
    assert got.columns == ["frame", "station"]
    assert got.equals(full.select("frame", "station"), null_equal=True)
    assert (full.height < df.height) == bool(quiet)


def test_outside_with_columns_on_a_spilled_table(spilled) -> None:  # noqa: ANN001
    ctx = Context(spilled, DropConfig())
    ts = ctx.table("attempts")["ts_ns"]
    lo, hi = int(ts.min()), int(ts.max())
    ctx.quiet = [(lo + (hi - lo) // 4, lo + (hi - lo) // 2)]
    cols = ("station", "ta", "mac_seq", "frag")
    got = ctx.outside("attempts", columns=cols)
    want = ctx.outside("attempts").select([c for c in ctx.table("attempts").columns if c in cols])
    assert 0 < got.height < ts.len() and got.equals(want, null_equal=True)
