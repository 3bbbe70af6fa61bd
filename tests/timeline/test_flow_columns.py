"""The timeline's flow columns, built once per distinct endpoints: the same as `flowkey.flow_exprs` per packet."""
from __future__ import annotations

import polars as pl
import pytest

from xlayer.timeline.flowkey import flow_exprs
from xlayer.timeline.open import _with_flows


def _packets() -> pl.DataFrame:
    # fragments of two datagrams (ids 7 and 8; the later ones carry no ports, one first fragment comes
    # last), an unrelated packet sharing id 7 without fragmenting, IPv6, ICMP, a row without IP
    rows = [
        ("10.0.0.1", "10.0.0.2", 17, 5000, 53, 7, True, 0),
        ("10.0.0.1", "10.0.0.2", 17, None, None, 7, True, 185),
        ("10.0.0.1", "10.0.0.2", 17, None, None, 7, False, 370),
        ("10.0.0.1", "10.0.0.2", 17, None, None, 8, False, 185),
        ("10.0.0.1", "10.0.0.2", 17, 6000, 53, 8, True, 0),
        ("10.0.0.1", "10.0.0.2", 17, None, None, 7, False, 0),
        ("10.0.0.2", "10.0.0.1", 6, 80, 40000, 1, False, 0),
        ("fe80::1", "fe80::2", 6, 443, 50000, None, False, 0),
        ("10.0.0.1", "10.0.0.9", 1, None, None, 3, False, 0),
        (None, None, None, None, None, None, None, None),
    ]
    cols = ["ip_src", "ip_dst", "ip_proto", "sport", "dport", "ip_id", "ip_mf", "ip_frag_offset"]
    types = [pl.String, pl.String, pl.UInt8, pl.UInt16, pl.UInt16, pl.UInt32, pl.Boolean, pl.UInt16]
    df = pl.DataFrame(rows, schema=list(zip(cols, types)), orient="row")
    return df.with_row_index("frame")


@pytest.mark.parametrize("fragments", [True, False])
@pytest.mark.parametrize("lazy", [False, True])
def test_same_as_per_packet_expressions(fragments: bool, lazy: bool) -> None:
    df = _packets()
    ports = df.select("sport", "dport")
    want = df.with_columns(flow_exprs(fragments=fragments))
    got = _with_flows(df.lazy() if lazy else df, fragments)
    got = got.collect() if lazy else got
    assert got.columns == want.columns
    assert got.equals(want)
    assert df.select("sport", "dport").equals(ports) and ports["sport"].null_count() == 6   # the input is untouched
    if fragments:   # the later fragments took their own datagram's ports
        assert got["flow"][1] == got["flow"][2] == "udp 10.0.0.1:5000>10.0.0.2:53"
        assert got["flow"][3] == "udp 10.0.0.1:6000>10.0.0.2:53"
        assert got["flow"][5] == "udp 10.0.0.1>10.0.0.2"


def test_no_ports_at_all() -> None:
    df = _packets().with_columns(pl.lit(None, pl.UInt16).alias("sport"), pl.lit(None, pl.UInt16).alias("dport"))
    got = _with_flows(df, True)
    assert got.equals(df.with_columns(flow_exprs(fragments=True)))
    assert got["flow"][0] == "udp 10.0.0.1>10.0.0.2" and got["flow"][9] is None


def test_many_rows_few_flows() -> None:
    base = _packets().filter(pl.col("ip_mf").is_not_null() & ~pl.col("ip_mf") & (pl.col("ip_frag_offset") == 0))
    df = pl.concat([base] * 2_000)
    assert _with_flows(df, True).equals(df.with_columns(flow_exprs(fragments=True)))
