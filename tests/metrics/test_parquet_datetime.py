"""The Parquet `xlayer metrics` writes carries a UTC Datetime beside every epoch time: queries need no conversion."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers.common import REPO
from xlayer.metrics import open_timeline, table_names
from xlayer.metrics.export import (
    MANIFEST,
    UTC_DTYPE,
    is_epoch_time,
    parquet_schema,
    utc_name,
    write_metrics,
)
from xlayer.metrics.schema import REGISTRY

SAMPLE = REPO / "samples" / "lab-baseline"
# Every `ns` column that is a length of time, not an instant: a new column must be put on one side.
DURATIONS = {"access_ns", "air_ns", "airtime_ns", "ap_ns", "bin_ns", "data_airtime_ns", "extent_ns",
             "fragments_ns", "gap_ns", "ipdv_ns", "jitter_ns", "owd_ns", "queue_ns", "queue_retry_ns", "retry_ns",
             "rto_estimate_ns", "rtt_ns", "service_ns", "silence_ns", "sojourn_ns", "wired_ns"}


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    if not (SAMPLE / "bundle.json").is_file():
        pytest.skip(f"{SAMPLE} is not in this checkout")
    out = tmp_path_factory.mktemp("m")
    write_metrics(open_timeline(SAMPLE), out, tables=["rtt", "flows", "flow_series", "owd", "loss"])
    return out


def test_every_ns_column_is_an_instant_or_a_duration():
    table_names()       # registers every module's tables
    ns = {c.name: is_epoch_time(c) for cols in REGISTRY.values() for c in cols if c.unit == "ns"}
    instants = {n for n, epoch in ns.items() if epoch}
    assert {"ts_ns", "first_ts_ns", "last_ts_ns", "bin_start_ns", "window_start_ns", "start_ts_ns"} <= instants
    assert not instants & DURATIONS, instants & DURATIONS
    assert set(ns) - instants == DURATIONS, sorted((set(ns) - instants) ^ DURATIONS)
    # a twin never shadows a declared column
    for name, cols in REGISTRY.items():
        declared = {c.name for c in cols}
        assert not {utc_name(c.name) for c in cols if is_epoch_time(c)} & declared, name


def test_written_schema_has_a_utc_twin_beside_each_instant(written: Path):
    man = json.loads((written / MANIFEST).read_text())
    for name, t in man["tables"].items():
        df = pl.read_parquet(written / t["file"])
        assert dict(df.schema) == parquet_schema(name), name
        assert [c["name"] for c in t["columns"]] == df.columns, name        # the manifest documents them
        for c in REGISTRY[name]:
            if is_epoch_time(c):
                twin = utc_name(c.name)
                assert df.columns.index(twin) == df.columns.index(c.name) + 1
                assert df.schema[twin] == UTC_DTYPE
                # the same instant, to the nanosecond, nulls included
                assert df[twin].dt.epoch("ns").equals(df[c.name].cast(pl.Int64), check_names=False), (name, c.name)
            elif c.unit == "ns":
                assert utc_name(c.name) not in df.columns, (name, c.name)
    rtt = pl.read_parquet(written / "rtt.parquet")
    assert rtt.height > 10 and "rtt_utc" not in rtt.columns
    # pyarrow sees a real UTC timestamp type (what DuckDB reads as TIMESTAMP WITH TIME ZONE)
    assert pq.read_schema(written / "rtt.parquet").field("ts_utc").type == pa.timestamp("ns", tz="UTC")


def _window(written: Path) -> tuple[datetime, datetime, int]:
    """Return the middle third of the RTT samples' time span as UTC datetimes, and the samples in it."""
    ts = pl.read_parquet(written / "rtt.parquet")["ts_ns"]
    lo_ns, hi_ns = int(ts.min()), int(ts.max())
    a_ns, b_ns = lo_ns + (hi_ns - lo_ns) // 3, lo_ns + 2 * (hi_ns - lo_ns) // 3
    # whole microseconds, as a Python datetime holds them
    a_ns, b_ns = a_ns - a_ns % 1000, b_ns - b_ns % 1000
    want = ts.filter((ts >= a_ns) & (ts < b_ns)).len()
    assert 0 < want < ts.len()
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (epoch + timedelta(microseconds=a_ns // 1000), epoch + timedelta(microseconds=b_ns // 1000), want)


def test_time_range_query_without_conversion_polars(written: Path):
    a, b, want = _window(written)
    got = pl.scan_parquet(written / "rtt.parquet").filter(
        (pl.col("ts_utc") >= a) & (pl.col("ts_utc") < b)).collect()
    assert got.height == want
    assert got["ts_utc"].min() >= a and got["ts_utc"].max() < b


def test_time_range_query_without_conversion_sql_or_arrow(written: Path):
    a, b, want = _window(written)
    path = written / "rtt.parquet"
    try:
        import duckdb
    except ImportError:
        duckdb = None
    if duckdb is not None:
        con = duckdb.connect()
        con.execute("SET TimeZone = 'UTC'")
        (got,) = con.execute("SELECT count(*) FROM read_parquet(?) WHERE ts_utc >= ? AND ts_utc < ?",
                             [str(path), a, b]).fetchone()
    else:
        # pyarrow's own filter on the Parquet column, as a reader without polars would query it
        got = pq.read_table(path, columns=["ts_utc"], filters=[("ts_utc", ">=", a), ("ts_utc", "<", b)]).num_rows
    assert got == want
