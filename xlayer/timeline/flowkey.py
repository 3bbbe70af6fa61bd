"""Flow identity, written once: every metric table names flows the same way.

``flow``: one direction of a transport conversation, ``"tcp 10.0.0.1:5001>10.0.0.2:49152"`` (IPv6
addresses in brackets; ICMP and other protocols without ports: ``"icmp 10.0.0.1>10.0.0.2"``).
``conn``: the conversation with both directions, its endpoints in sorted order joined by ``"<>"``;
a packet's ``dir`` is ``"a"`` when it goes from the first endpoint of ``conn`` to the second, else ``"b"``.
Rows without an IP source and destination (802.11 control frames, ARP, encrypted payloads) get nulls.
The later fragments of a fragmented IP datagram carry no transport header: with `fragments=True` they
take the ports of their datagram's first fragment (same source, destination, protocol and IP id among
the fragments), so a fragmented TCP or UDP packet stays in its flow instead of a portless one.
"""
from __future__ import annotations

import polars as pl

PROTO_NAMES = {6: "tcp", 17: "udp", 1: "icmp", 58: "icmpv6", 132: "sctp"}
# What identifies one IP datagram's fragments (RFC 791; the Fragment header's id for IPv6).
FRAGMENT_KEY = ("ip_src", "ip_dst", "ip_proto", "ip_id")


def is_fragment() -> pl.Expr:
    """Return whether a row is a fragment of an IP datagram (more fragments follow, or not the first)."""
    return pl.col("ip_mf").fill_null(False) | (pl.col("ip_frag_offset").fill_null(0) > 0)


def _datagram_port(port: str) -> pl.Expr:
    # only fragments are grouped: other packets may share an id (0, with DF set) without being related
    first = pl.when(is_fragment()).then(pl.col(port)).drop_nulls().first().over(FRAGMENT_KEY)
    return pl.when(is_fragment() & pl.col(port).is_null()).then(first).otherwise(pl.col(port))


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


def _endpoint(ip: str, port: pl.Expr) -> pl.Expr:
    has_port = pl.col("ip_proto").cast(pl.Int64).is_in([6, 17, 132]) & port.is_not_null()
    return pl.when(has_port).then(_host(ip) + pl.lit(":") + port.cast(pl.String)).otherwise(_host(ip))


def flow_exprs(fragments: bool = False) -> list[pl.Expr]:
    """Return the expressions adding `flow`, `conn` and `dir` to a packet table (see module docstring);
    with `fragments`, later IP fragments take their datagram's ports (the table needs ip_mf, ip_frag_offset
    and ip_id)."""
    sport, dport = (_datagram_port(p) if fragments else pl.col(p) for p in ("sport", "dport"))
    src = _endpoint("ip_src", sport)
    dst = _endpoint("ip_dst", dport)
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


def reverse_flow(flow: str) -> str:
    """Return the `flow` string of the other direction of the same conversation ("tcp a:1>b:2" -> "tcp b:2>a:1")."""
    proto, _, ends = flow.partition(" ")
    src, _, dst = ends.partition(">")
    return f"{proto} {dst}>{src}"
