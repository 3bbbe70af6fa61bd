"""The analysis Context keeps narrow tables and cuts windows without copying: `Context.table` holds only
the columns the attribution code names (read from a spilled table's file by projection), `between` on a
column in time order is a slice giving the same rows as the filter, and `outside` drops every quiet
window in one filter.  Each answer is compared with the plain filter it replaces.  `release` lets go
of the tables (a spilled table is mapped, and the pages a cause touched count in RSS while it is held)
and reads them again, equal, when next asked for; `outside` with `columns` gives the same rows as
without, only those columns."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from tests.helpers.common import REPO
from xlayer.attribution.causes.base import Context, read_names
from xlayer.attribution.drops import DropConfig
from xlayer.metrics import open_timeline

SAMPLE = REPO / "samples" / "sim-baseline"


class _Tables:
    """A timeline stand-in holding its tables in memory (no `table_columns`)."""

    def __init__(self, **tables: pl.DataFrame) -> None:
        self._t = tables

    def table(self, name: str) -> pl.DataFrame:
        return self._t[name]


def _filter(df: pl.DataFrame, s: int, e: int, col: str = "ts_ns") -> pl.DataFrame:
    return df.filter((pl.col(col) >= s) & (pl.col(col) < e))


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


def test_context_keeps_only_the_named_columns_of_a_spilled_table(spilled) -> None:  # noqa: ANN001
    ctx = Context(spilled, DropConfig())
    narrowed = 0
    for name in ("attempts", "downlink", "delay", "air_frames", "flows", "captures"):
        full = spilled.table(name)
        got = ctx.table(name)
        assert spilled.table_columns(name) == full.columns
        # the table's order, only columns the attribution code names, the same rows and values
        assert got.columns == [c for c in full.columns if c in read_names()]
        assert got.equals(full.select(got.columns), null_equal=True)
        assert got.schema == full.select(got.columns).schema
        narrowed += got.width < full.width
        assert ctx.table(name) is got          # read once per analysis
    assert narrowed                             # some table did lose columns no cause reads


def test_timeline_table_projection_is_the_same_spilled_or_in_memory(spilled) -> None:  # noqa: ANN001
    mem = open_timeline(SAMPLE, spill=False, cache=False)
    cols = ["station", "ts_ns", "no_such_column", "capture_file"]
    a, b = spilled.table("attempts", columns=cols), mem.table("attempts", columns=cols)
    assert a.columns == b.columns == [c for c in mem.table("attempts").columns if c in cols]
    assert a.equals(b, null_equal=True)
    assert a.height == mem.table("attempts").height
    assert spilled.table("attempts", columns=()).width == 0
    assert mem.table_columns("delay") == spilled.table_columns("delay") == mem.table("delay").columns


def test_a_table_with_no_named_column_keeps_its_height() -> None:
    df = pl.DataFrame({"zz_unnamed_a": [1, 2, 3], "zz_unnamed_b": ["x", "y", "z"]})
    got = Context(_Tables(t=df), DropConfig()).table("t")
    assert got.columns == ["zz_unnamed_a"] and got.height == 3


def _rows(n: int, seed: int, sorted_ts: bool, nulls: bool) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    ts = rng.integers(0, 1_000, n).astype(np.int64)
    if sorted_ts:
        ts.sort()
    station = pl.Series("station", rng.choice(["a", "b", ""], n).tolist(), pl.String)
    df = pl.DataFrame({"ts_ns": ts, "frame": np.arange(n)}).with_columns(
        pl.when(station == "").then(None).otherwise(station).alias("station"))
    if nulls:
        df = df.with_columns(pl.when(pl.col("frame") % 17 == 3).then(None).otherwise(pl.col("ts_ns")).alias("ts_ns"))
    return df


@pytest.mark.parametrize("sorted_ts,nulls", [(True, False), (False, False), (True, True)])
def test_between_gives_the_filters_rows_in_order(sorted_ts: bool, nulls: bool) -> None:
    df = _rows(5_000, 7, sorted_ts, nulls)
    ctx = Context(_Tables(retransmissions=df), DropConfig())
    # inside, at both ends (start included, end excluded), empty, reversed and beyond the data
    for s, e in [(100, 200), (0, 1_000), (-50, 3), (999, 2_000), (500, 500), (600, 400), (2_000, 3_000),
                 (int(df["ts_ns"].drop_nulls()[10]), int(df["ts_ns"].drop_nulls()[10]) + 1)]:
        got = ctx.between("retransmissions", s, e)
        want = _filter(df, s, e)
        assert got.equals(want, null_equal=True), (s, e)


def test_between_on_another_time_column_and_an_empty_table() -> None:
    ss = pl.DataFrame({"bin_start_ns": np.arange(0, 1_000, 100, dtype=np.int64), "station": ["a"] * 10})
    empty = ss.head(0)
    ctx = Context(_Tables(station_series=ss, delay=empty), DropConfig())
    assert ctx.between("station_series", 150, 450, col="bin_start_ns")["bin_start_ns"].to_list() == [200, 300, 400]
    assert ctx.between("delay", 0, 10, col="bin_start_ns").height == 0


@pytest.mark.parametrize("nulls", [False, True])
def test_outside_drops_every_quiet_window_as_filters_one_by_one(nulls: bool) -> None:
    df = _rows(3_000, 11, False, nulls)
    ctx = Context(_Tables(attempts=df), DropConfig())
    assert ctx.outside("attempts").equals(df, null_equal=True)      # no drop window: the whole table
    ctx.quiet = [(100, 150), (140, 300), (900, 901), (5_000, 6_000)]
    want = df
    for s, e in ctx.quiet:
        want = want.filter((pl.col("ts_ns") < s) | (pl.col("ts_ns") >= e))
    got = ctx.outside("attempts")
    assert got.equals(want, null_equal=True)
    assert 0 < got.height < df.height


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


def test_read_names_holds_every_name_the_source_quotes() -> None:
    """The text scan behind `read_names` finds every identifier-like string constant of the attribution
    package's code (what parsing it finds: a column it reads by name is never dropped), and reads no
    more than the package's source (a name only in another package is not in it)."""
    import ast

    root = REPO / "xlayer" / "attribution"
    quoted: set[str] = set()
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        # pieces of f-strings are not names the code reads whole
        pieces = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
        quoted |= {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                   and n.value.isidentifier() and id(n) not in pieces}
    assert "ts_ns" in quoted and len(quoted) > 100
    assert quoted <= read_names()
    from parsers.schema import SCHEMA

    text = "".join(p.read_text(encoding="utf-8") for p in root.rglob("*.py"))
    unnamed = {c for c in SCHEMA if c not in text}        # packet columns the package never mentions
    assert unnamed and not unnamed & read_names()
