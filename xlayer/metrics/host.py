"""Host TCP state joined to the packet flows, on the reference clock.

A host-state sample describes one socket from its own host: ``src:sport`` is the local end, so the
sample's ``flow`` is the direction the socket sends in (`xlayer.timeline.flowkey` names it as the packet
tables do) and ``conn`` the conversation, which is how the samples meet the packets.  Listening and
wildcard sockets (an address ``*``) belong to no flow.  ``in_packets`` says whether any packet
capture of the bundle saw the conversation: a sample whose conversation no capture saw is kept
(the host's view is evidence too) but cannot be set beside packets.

Limits (study 001's "host limits"): ``rwnd_limited`` / ``sndbuf_limited`` / ``app_limited`` are the
share of the interval since the previous sample of that socket the kernel spent limited by the
receiver's window, the send buffer, or the application (tcp_info's busy/rwnd_limited/sndbuf_limited
times; ss's ``app_limited`` flag where only that is known), null when the source has no such counter.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from parsers.hoststate.common import SCHEMA as HOST_SCHEMA
from xlayer.metrics.schema import Column, conform, register
from xlayer.timeline.flowkey import flow_exprs

if TYPE_CHECKING:
    from xlayer.timeline.open import Timeline

NEEDS: tuple[str, ...] = ()
_C = Column

# Host-state columns carried over unchanged (their meaning and unit are parsers.hoststate.common's).
CARRIED = ("state", "cc", "cwnd", "ssthresh", "snd_cwnd_bytes", "mss", "rto_us", "backoff", "srtt_us",
           "rttvar_us", "minrtt_us", "snd_wnd", "rcv_wnd", "unacked", "lost", "retrans_total", "bytes_retrans",
           "total_rto", "total_rto_recoveries", "dsack_dups", "reord_seen", "bytes_acked", "bytes_received",
           "notsent", "delivery_rate_bps", "pacing_rate_bps")

HOST_STATE = register("host_state", (
    _C("ts_ns", pl.Int64, "ns", "sample time on the reference clock"),
    _C("ts_local_ns", pl.Int64, "ns", "sample time on the sampling host's own clock"),
    _C("capture_file", pl.Utf8, "", "host-state file of the bundle"),
    _C("vantage", pl.Utf8, "", "the host that was sampled"),
    _C("flow", pl.Utf8, "", "the direction the socket sends in (local > remote), as packet tables name it"),
    _C("conn", pl.Utf8, "", "the conversation, both directions (xlayer.timeline.flowkey)"),
    _C("in_packets", pl.Boolean, "", "some packet capture of the bundle saw this conversation"),
    _C("src", pl.Utf8, "", "local address"), _C("sport", pl.UInt16, "", "local port"),
    _C("dst", pl.Utf8, "", "remote address"), _C("dport", pl.UInt16, "", "remote port"),
    *(_C(c, HOST_SCHEMA[c], "", "as in the host-state table (parsers.hoststate.common)") for c in CARRIED),
    _C("rwnd_limited", pl.Float64, "fraction", "share of the time since the socket's previous sample spent "
       "limited by the receiver's window"),
    _C("sndbuf_limited", pl.Float64, "fraction", "the same, limited by the send buffer"),
    _C("app_limited", pl.Boolean, "", "the application, not the network, limited the sending (ss/tcp_info flag)"),
), "one host TCP state sample of one socket, joined to its flow")

TABLES = {"host_state": HOST_STATE}


def join_host_state(host: pl.DataFrame, packet_conns: set[str]) -> pl.DataFrame:
    """Return host-state samples (ts_ns already on the reference clock) with flow, conn and limits."""
    if host.height == 0:
        return conform(None, HOST_STATE)
    wild = (pl.col("src") == "*") | (pl.col("dst") == "*") | pl.col("src").is_null() | pl.col("dst").is_null()
    df = host.with_columns(
        pl.when(wild).then(None).otherwise(pl.col("src")).alias("ip_src"),
        pl.when(wild).then(None).otherwise(pl.col("dst")).alias("ip_dst"),
        pl.lit(6, pl.Int64).alias("ip_proto"))
    df = df.with_columns(flow_exprs()).drop("dir", "ip_src", "ip_dst", "ip_proto")
    key = ["capture_file", "src", "sport", "dst", "dport"]
    df = df.sort([*key, "ts_ns"])
    # Limit shares: the kernel's cumulative µs counters, differenced per socket over the busy time.
    has_busy = "busy_us" in df.columns
    limits = []
    for name, col in (("rwnd_limited", "rwnd_limited_us"), ("sndbuf_limited", "sndbuf_limited_us")):
        if has_busy and col in df.columns:
            d_lim = pl.col(col).cast(pl.Float64).diff().over(key)
            d_busy = pl.col("busy_us").cast(pl.Float64).diff().over(key)
            limits.append(pl.when(d_busy > 0).then((d_lim / d_busy).clip(0.0, 1.0)).otherwise(None).alias(name))
        else:
            limits.append(pl.lit(None, pl.Float64).alias(name))
    df = df.with_columns(*limits, pl.col("conn").is_in(list(packet_conns)).alias("in_packets"))
    return conform(df.select([c.name for c in HOST_STATE if c.name in df.columns]), HOST_STATE)


def build(tl: Timeline) -> dict[str, pl.DataFrame]:
    """Return {"host_state": ...} for a timeline."""
    conns: set[str] = set()
    for e in tl.entries():
        conns |= set(tl.packets(e.file, columns=["conn"]).get_column("conn").drop_nulls().unique().to_list())
    return {"host_state": join_host_state(tl.host_state(), conns)}
