"""Helpers every metric table uses: a schema is a tuple of `parsers.schema.Column`, written once per table.

A metric module declares its tables as ``TABLES = {"name": (Column(...), ...)}``; `conform` holds a
computed frame to its declared schema (order, dtypes, missing columns as nulls) so a table read from
Parquet, built empty or computed always looks the same; `register` collects every module's tables so
the reference pages (docs/generate.py) and `xlayer metrics` list them from one place.
"""
from __future__ import annotations

import polars as pl

from parsers.schema import Column

__all__ = ["Column", "REGISTRY", "conform", "empty", "register", "schema_of"]

REGISTRY: dict[str, tuple[Column, ...]] = {}
DOCS: dict[str, str] = {}


def register(name: str, columns: tuple[Column, ...], doc: str) -> tuple[Column, ...]:
    """Return `columns` after recording them as table `name` (one line `doc` says what a row is)."""
    if name in REGISTRY and REGISTRY[name] != columns:
        raise ValueError(f"metric table {name!r} declared twice with different columns")
    REGISTRY[name] = columns
    DOCS[name] = doc
    return columns


def schema_of(columns: tuple[Column, ...]) -> dict[str, pl.DataType]:
    """Return {name: dtype} of a table schema."""
    return {c.name: c.dtype for c in columns}


def empty(columns: tuple[Column, ...]) -> pl.DataFrame:
    """Return an empty frame with exactly the schema's columns and dtypes."""
    return pl.DataFrame(schema=schema_of(columns))


def conform(df: pl.DataFrame | None, columns: tuple[Column, ...]) -> pl.DataFrame:
    """Return `df` with exactly the schema's columns, in order, cast to their dtypes (absent: null).

    A column `df` has that the schema does not is an error: a table's columns are documented.
    """
    if df is None:
        return empty(columns)
    names = {c.name for c in columns}
    extra = [c for c in df.columns if c not in names]
    if extra:
        raise ValueError(f"columns not in the declared schema: {', '.join(extra)}")
    return df.select(
        (pl.col(c.name).cast(c.dtype) if c.name in df.columns else pl.lit(None, dtype=c.dtype)).alias(c.name)
        for c in columns)


# How a packet row of the cross-layer join (xlayer.metrics.join) was matched to its 802.11 MPDU.
MATCH_KINDS = ("key", "size_order", "ambiguous")
MATCH_COLUMNS: tuple[Column, ...] = (
    Column("match", pl.Utf8, "", "how the packet met its MPDU: key (its IP and transport fields, decrypted or "
           "open), size_order (protected, no keys: the only packet its length, FIFO order and time allow), "
           "ambiguous (as size_order, but equal-length packets dropped beside it could be the one); null: not matched"),
    Column("match_confidence", pl.Float64, "fraction", "1 for key and size_order; 1 / the number of equal-length "
           "packets that could be the one for ambiguous; null: not matched"),
)
