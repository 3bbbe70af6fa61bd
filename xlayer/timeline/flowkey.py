"""Flow identity, written once: every metric table names flows the same way.

``flow``: one direction of a transport conversation, ``"tcp 10.0.0.1:5001>10.0.0.2:49152"`` (IPv6
addresses in brackets; ICMP and other protocols without ports: ``"icmp 10.0.0.1>10.0.0.2"``).
``conn``: the conversation with both directions, its endpoints in sorted order joined by ``"<>"``;
a packet's ``dir`` is ``"a"`` when it goes from the first endpoint of ``conn`` to the second, else ``"b"``.
Rows without an IP source and destination (802.11 control frames, ARP, encrypted payloads) get nulls.
"""
from __future__ import annotations

import polars as pl

PROTO_NAMES = {6: "tcp", 17: "udp", 1: "icmp", 58: "icmpv6", 132: "sctp"}


def _proto() -> pl.Expr:
    p = pl.col("ip_proto").cast(pl.Int64)
    expr = pl.when(p == 6).then(pl.lit("tcp"))
    for num, name in PROTO_NAMES.items():
        if num != 6:
            expr = expr.when(p == num).then(pl.lit(name))
    return expr.otherwise(pl.lit("ip") + p.cast(pl.String))


def _host(col: str) -> pl.Expr:
    c = pl.col(col)
    return pl.when(c.str.contains(":", literal=True)).then(pl.lit("[") + c + pl.lit("]")).otherwise(c)


def _endpoint(ip: str, port: str) -> pl.Expr:
    has_port = pl.col("ip_proto").cast(pl.Int64).is_in([6, 17, 132]) & pl.col(port).is_not_null()
    return pl.when(has_port).then(_host(ip) + pl.lit(":") + pl.col(port).cast(pl.String)).otherwise(_host(ip))


def flow_exprs() -> list[pl.Expr]:
    """Return the expressions adding `flow`, `conn` and `dir` to a packet table (see module docstring)."""
    src = _endpoint("ip_src", "sport")
    dst = _endpoint("ip_dst", "dport")
    proto = _proto()
    ok = pl.col("ip_src").is_not_null() & pl.col("ip_dst").is_not_null() & pl.col("ip_proto").is_not_null()
    forward = src <= dst
    first = pl.when(forward).then(src).otherwise(dst)
    second = pl.when(forward).then(dst).otherwise(src)
    return [
        pl.when(ok).then(proto + pl.lit(" ") + src + pl.lit(">") + dst).alias("flow"),
        pl.when(ok).then(proto + pl.lit(" ") + first + pl.lit("<>") + second).alias("conn"),
        pl.when(ok).then(pl.when(forward).then(pl.lit("a")).otherwise(pl.lit("b"))).alias("dir"),
    ]


def with_flow(df: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame | pl.LazyFrame:
    """Return the packet table with `flow`, `conn` and `dir` columns added."""
    return df.with_columns(flow_exprs())


def flow_name(proto: int, src: str, sport: int | None, dst: str, dport: int | None) -> str:
    """Return the `flow` string of one direction (the same text `with_flow` builds)."""
    name = PROTO_NAMES.get(proto, f"ip{proto}")

    def ep(ip: str, port: int | None) -> str:
        host = f"[{ip}]" if ":" in ip else ip
        return f"{host}:{port}" if port is not None and proto in (6, 17, 132) else host

    return f"{name} {ep(src, sport)}>{ep(dst, dport)}"
