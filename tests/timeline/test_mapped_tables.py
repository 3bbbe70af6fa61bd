"""A spilled derived table is memory-mapped back (`mapped_ipc`), not copied: the same table `pl.read_ipc`
gives (columns, dtypes, values, nulls), only the columns asked for, and still readable once the spill
directory is gone."""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from xlayer.timeline.open import mapped_ipc, park


def _table(n: int) -> pl.DataFrame:
    return pl.DataFrame({
        "ts_ns": pl.Series(range(n), dtype=pl.Int64),
        "station": [None if i % 5 == 0 else f"02:00:00:00:00:{i % 256:02x}" for i in range(n)],
        "rates_mbps": [[float(i), 6.5] if i % 3 else None for i in range(n)],
        "acked": [None if i % 7 == 0 else i % 2 == 0 for i in range(n)],
        "frag": pl.Series([i % 4 for i in range(n)], dtype=pl.UInt8),
    })


def _write(df: pl.DataFrame, path: Path, batches: int) -> Path:
    # several record batches, as a table concatenated from per-capture parts is written
    parts = [df.slice(i * (df.height // batches), df.height // batches) for i in range(batches)]
    pl.concat(parts, rechunk=False).write_ipc(path, compression="uncompressed")
    return path


@pytest.mark.parametrize("batches", [1, 4])
def test_mapped_table_is_the_table_read(tmp_path: Path, batches: int) -> None:
    df = _table(4_000)
    f = _write(df, tmp_path / "t.arrow", batches)
    got = mapped_ipc(f)
    want = pl.read_ipc(f)
    assert got.schema == want.schema == df.schema
    assert got.equals(want, null_equal=True)


def test_mapped_projection_keeps_the_files_order_and_skips_unknown_names(tmp_path: Path) -> None:
    df = _table(1_000)
    f = _write(df, tmp_path / "t.arrow", 2)
    got = mapped_ipc(f, ["frag", "no_such_column", "ts_ns"])
    assert got.columns == ["ts_ns", "frag"]
    assert got.equals(df.select("ts_ns", "frag"))
    assert mapped_ipc(f, []).shape == (0, 0)


def test_mapped_empty_table_keeps_its_schema(tmp_path: Path) -> None:
    df = _table(0)
    f = tmp_path / "e.arrow"
    df.write_ipc(f, compression="uncompressed")
    got = mapped_ipc(f)
    assert got.height == 0 and got.schema == df.schema


def test_mapped_table_outlives_its_file(tmp_path: Path) -> None:
    df = _table(2_000)
    f = _write(df, tmp_path / "t.arrow", 2)
    got = mapped_ipc(f, ["station", "ts_ns"])
    f.unlink()      # Timeline.close removes the spill directory; tables already returned stay readable
    assert got.equals(df.select("ts_ns", "station"), null_equal=True)
    assert got.filter(pl.col("station").is_null()).height == 400


def test_parked_table_is_the_table_and_leaves_no_file(tmp_path: Path) -> None:
    df = _table(3_000)
    got = park(df, tmp_path, "downlink")
    assert got.schema == df.schema and got.equals(df, null_equal=True)
    assert list(tmp_path.iterdir()) == []        # mapped, the file already unlinked
    assert park(df, None, "downlink") is df      # no spill directory: kept as it is
