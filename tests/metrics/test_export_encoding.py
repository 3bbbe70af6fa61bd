"""`write_parquet`: metric tables written with dictionary pages for strings only, read back unchanged."""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from xlayer.metrics.export import dictionary_columns, write_parquet


def _frame(n: int = 50_000) -> pl.DataFrame:
    return pl.DataFrame({
        "ts_ns": pl.int_range(n, eager=True).cast(pl.Int64) * 1_000_003 + 1_700_000_000_000_000_000,
        "fate": pl.Series(["delivered", "dropped_at_ap", None, "unknown"] * (n // 4)),
        "key": pl.Series([f"k{i}" for i in range(n)]),
        "ok": pl.Series([True, False, None, True] * (n // 4)),
    }).with_columns(pl.col("ts_ns").cast(pl.Datetime("ns", "UTC")).alias("ts_utc"))


def _encodings(path: Path, column: str) -> set[str]:
    meta = pq.ParquetFile(path).metadata
    i = meta.schema.names.index(column)
    return {e for g in range(meta.num_row_groups) for e in meta.row_group(g).column(i).encodings}


def test_round_trip_and_plain_schema(tmp_path: Path) -> None:
    df = _frame()
    write_parquet(df, tmp_path / "t.parquet")
    assert pl.read_parquet(tmp_path / "t.parquet").equals(df)
    # Arrow readers get the schema df.to_arrow() gives (plain strings, not the views written)
    assert pq.read_table(tmp_path / "t.parquet").schema.equals(df.to_arrow().schema)
    assert pq.read_table(tmp_path / "t.parquet").equals(df.to_arrow())


def test_dictionary_pages_for_strings_only(tmp_path: Path) -> None:
    df = _frame()
    assert dictionary_columns(df.to_arrow().schema) == ["fate", "key"]
    write_parquet(df, tmp_path / "t.parquet")
    assert "RLE_DICTIONARY" in _encodings(tmp_path / "t.parquet", "fate")
    assert not {"RLE_DICTIONARY", "PLAIN_DICTIONARY"} & _encodings(tmp_path / "t.parquet", "ts_ns")
    # stamps that never repeat: a dictionary tried on them first would only make the file larger
    pq.write_table(df.to_arrow(), tmp_path / "all.parquet", compression="zstd")
    assert (tmp_path / "t.parquet").stat().st_size < (tmp_path / "all.parquet").stat().st_size


def test_same_bytes_as_pyarrow_plain_write(tmp_path: Path) -> None:
    df = _frame(4_000)
    write_parquet(df, tmp_path / "a.parquet")
    t = df.to_arrow()
    pq.write_table(t, tmp_path / "b.parquet", compression="zstd", use_dictionary=dictionary_columns(t.schema))
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()


def test_empty_table(tmp_path: Path) -> None:
    df = _frame().head(0)
    write_parquet(df, tmp_path / "e.parquet")
    assert pl.read_parquet(tmp_path / "e.parquet").equals(df)
