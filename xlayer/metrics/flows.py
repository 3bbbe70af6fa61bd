"""Per-flow metrics on the reference clock: volume and rate, RTT, one-way delay, delay variation, loss.

A flow is one direction of a transport conversation (`xlayer.timeline.flowkey`); every table names it the same
way and keeps capture files + frame numbers beside each value so a person can find the packets.

What a capture contributes: its rows that carry an IP source and destination (on the air: unencrypted
data frames; frames with a bad FCS are left out).  An air capture sees each MAC retry of the same MPDU
again: a frame repeating the transmitter, 802.11 sequence/fragment number and IP identity of one seen
less than `MAC_RETRY_WINDOW_NS` before is that retry and is counted once, at its first capture (so the
delay to the air is the AP's sojourn plus the first attempt's airtime).

Tables:

* ``flows`` / ``flow_series``: packets, IP bytes, payload bytes, goodput and throughput (all IP bytes),
  per flow per capture, whole and per bin of ``Timeline.bin_ns``.  The series has every bin between
  the flow's first and last packet, empty bins as zeros, except that an idle gap longer than
  `SERIES_MAX_GAP_NS` is marked by one empty bin at each end (a flow that sends one packet a minute
  for a day would otherwise be a million rows).  Goodput counts, for TCP, how far each segment moves
  the highest sequence number seen in this capture (retransmissions count nothing; a jump over a hole
  counts the hole, whose bytes arrive later in retransmissions), so at the receiver it sums to the
  unique bytes delivered; for other protocols all payload.
* ``rtt``: TCP round-trip samples at each capture: from a data segment to the first ACK that covers
  it (one sample per ACK advancing the cumulative acknowledgement, taken from the most recently sent
  segment it covers; Karn's rule: none when that segment was a retransmission or was retransmitted --
  a copy made by the network or the capture, the tcp module's network_duplicate, is neither),
  and from the first segment carrying a TSval to the first reverse ACK echoing it (skipped when two
  copies of the same bytes carry that TSval).  A capture at the sender measures the whole round trip;
  one in the middle measures the part beyond it (to the receiver and back); one at the receiver only
  the receiver's ACK delay.
* ``owd``: one row per packet seen at two captures, for every ordered pair of *adjacent* captures
  that both saw the flow, oriented upstream -> downstream: its one-way delay, its RFC 3393 IPDV and
  the RFC 3550 jitter after its arrival (one table rather than three: per-packet rows for pairs of
  captures are the largest table of a bundle).  Adjacent: no third capture lies between the two on
  the flow's path; the delay across such a capture is the sum of the two legs' rows.  The path is
  put in order once per flow (`_paths`), not by comparing every pair of captures, so a bundle of
  hundreds of captures costs work linear in them: each conversation is measured from one pivot
  capture, and where both directions are matched, half its data delay minus its reverse delay is a
  distance along the path with the clock alignment's error cancelled (the sign of one flow's median
  delay is that error on a short leg, two captures on one wire); a one-way flow goes from the side
  its source (or away from the side its destination) is on by those conversations; only a flow with
  neither follows its median's sign.  Neighbours in that order are then compared directly, where
  their delays are tight (`_refine`).  So a short leg's delays can be slightly negative.
  `owd_pair(tl, a, b)` gives any pair on demand, `between_keyed(..., pairs="all")` every pair.
  Packets are matched on (flow, IP identification, TCP sequence number, UDP length, IP length,
  fragment offset; the TCP payload length follows from the IP length); an identity seen twice in one
  capture (e.g. a retransmission that kept its IP id) is ambiguous and gives no delay.  IPv6
  packets without a fragment header have no identification: their TCP segments still match by
  sequence number, other IPv6 packets mostly end up ambiguous.

  - IPDV, selection function "consecutive packets": the packet's delay minus that of the packet sent
    just before it at the upstream capture; null when that one was lost (or ambiguous).
  - Jitter: J after each arrival at the downstream capture, in arrival order: D = difference of
    consecutive transit times, J += (|D| - J) / 16 from J = 0, in ns (not RTP timestamp units).
* ``loss`` / ``loss_bursts``: RFC 2680 one-way loss between two captures (sent upstream, never seen
  downstream) -- adjacent ones, the flow's first capture and each other, each and the flow's last --
  with RFC 3357-style loss periods (runs of consecutive lost packets in upstream order).
  A downstream capture only sees what reaches it: loss to an air capture includes the sniffer's misses;
  loss to a station's own capture is loss to that station.  Counted only over packets sent upstream
  early enough to reach the downstream capture while it recorded: from its first record minus the
  flow's smallest delay between the two, to a guard before its last record (the larger of
  `LOSS_GUARD_MIN_NS` and the flow's largest delay: a later packet could still have been in flight);
  ``window_start_ns``/``window_end_ns`` say which upstream times were counted.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from xlayer.metrics import tcp as tcpmod
from xlayer.metrics.schema import Column, conform, register
from xlayer.timeline.flowkey import FRAGMENT_KEY, is_fragment
from xlayer.timeline.open import park

if TYPE_CHECKING:
    from collections.abc import Callable

    from xlayer.timeline.open import Timeline

NEEDS: tuple[str, ...] = (
    "frame", "ts_ns", "fcs_bad", "wlan_ta", "wlan_seq", "wlan_frag",
    "ip_src", "ip_dst", "ip_proto", "ip_id", "ip_len", "ip_hdr_len", "ip_mf", "ip_frag_offset",
    "sport", "dport", "tcp_seq", "tcp_ack", "tcp_flags", "tcp_hdr_len", "tcp_len", "tcp_tsval", "tcp_tsecr", "udp_len")

# what this module reads of a packet table (the timeline's added columns too)
_READ = [*NEEDS, "capture_file", "vantage", "kind", "flow", "conn", "dir"]
LOSS_GUARD_MIN_NS = 100_000_000      # floor of the in-flight guard before the downstream capture's end
MAC_RETRY_WINDOW_NS = 1_000_000_000  # an air frame repeating an MPDU's identity this soon is its retry
SERIES_MAX_GAP_NS = 10_000_000_000   # longer idle gaps of a flow are not filled bin by bin

_BIG = 1 << 32
_HALF = 1 << 31
_NUL = np.iinfo(np.int64).min    # null in the compiled kernels' int64 buffers
_SYN, _FIN, _ACK = 0x02, 0x01, 0x10
# Packet identity across captures; "fh" is the flow name's hash (integer joins, the name rides along).
REFINE_PASSES = 3      # odd-even passes of `_refine`: neighbours out of order move this far
_KEY = ("fh", "k_id", "k_seq", "k_ulen", "k_iplen", "k_off")
_C = Column

_SRC = (
    _C("vantage", pl.Utf8, "", "where the capture was taken (bundle manifest)"),
    _C("capture_file", pl.Utf8, "", "capture file of the bundle the numbers come from"),
)
_PAIR = (
    _C("flow", pl.Utf8, "", "the flow (one direction, xlayer.timeline.flowkey)"),
    _C("vantage_a", pl.Utf8, "", "upstream capture's vantage (the packet passes it first)"),
    _C("vantage_b", pl.Utf8, "", "downstream capture's vantage"),
    _C("capture_file_a", pl.Utf8, "", "upstream capture file"),
    _C("capture_file_b", pl.Utf8, "", "downstream capture file"),
)

FLOWS = register("flows", (
    _C("flow", pl.Utf8, "", "the flow (one direction, xlayer.timeline.flowkey)"),
    _C("conn", pl.Utf8, "", "the conversation, both directions (xlayer.timeline.flowkey)"),
    _C("dir", pl.Utf8, "", "a: first endpoint of conn to the second; b: the reverse"),
    _C("proto", pl.Utf8, "", "transport protocol name (tcp, udp, icmp, ... or ipN)"),
    _C("src", pl.Utf8, "", "source address"), _C("sport", pl.UInt16, "", "source port (null without ports)"),
    _C("dst", pl.Utf8, "", "destination address"),
    _C("dport", pl.UInt16, "", "destination port (null without ports)"),
    *_SRC,
    _C("first_ts_ns", pl.Int64, "ns", "first packet of the flow in this capture, reference clock"),
    _C("last_ts_ns", pl.Int64, "ns", "last packet of the flow in this capture, reference clock"),
    _C("first_frame", pl.Int64, "", "frame number of the first packet in capture_file"),
    _C("packets", pl.Int64, "", "packets (air: MAC retries of one MPDU counted once)"),
    _C("bytes", pl.Int64, "B", "IP bytes (IP total length, as the header says)"),
    _C("payload_bytes", pl.Int64, "B", "transport payload bytes (TCP segment data, UDP data, else IP payload)"),
    _C("goodput_bytes", pl.Int64, "B", "new payload bytes: TCP: advance of the highest sequence number seen "
       "(retransmissions count nothing); other protocols: all payload"),
    _C("goodput_bps", pl.Float64, "bit/s", "goodput_bytes over last_ts_ns - first_ts_ns (null for one packet)"),
    _C("throughput_bps", pl.Float64, "bit/s", "bytes over last_ts_ns - first_ts_ns (null for one packet)"),
), "one flow (direction) as one capture saw it: volume, goodput and throughput over its lifetime")

FLOW_SERIES = register("flow_series", (
    _C("flow", pl.Utf8, "", "the flow (one direction, xlayer.timeline.flowkey)"),
    *_SRC,
    _C("bin_start_ns", pl.Int64, "ns", "start of the bin (a multiple of the timeline's bin_ns), reference clock"),
    _C("bin_ns", pl.Int64, "ns", "bin width"),
    _C("packets", pl.Int64, "", "packets in the bin"),
    _C("bytes", pl.Int64, "B", "IP bytes in the bin"),
    _C("payload_bytes", pl.Int64, "B", "transport payload bytes in the bin"),
    _C("goodput_bytes", pl.Int64, "B", "new payload bytes in the bin (see flows.goodput_bytes)"),
    _C("goodput_bps", pl.Float64, "bit/s", "goodput_bytes over the bin width"),
    _C("throughput_bps", pl.Float64, "bit/s", "bytes over the bin width"),
), "one bin of one flow at one capture; every bin from the flow's first to last packet, empty ones as zeros "
   "(idle gaps over 10 s: one empty bin at each end)")

RTT = register("rtt", (
    _C("flow", pl.Utf8, "", "the data direction (its segments are timed; the ACKs go the other way)"),
    *_SRC,
    _C("ts_ns", pl.Int64, "ns", "the ACK's time: when the sample is known, reference clock"),
    _C("rtt_ns", pl.Int64, "ns", "ACK time minus data segment time, both at this capture: the round trip "
       "beyond this vantage (whole round trip at the sender)"),
    _C("data_frame", pl.Int64, "", "frame of the timed data segment in capture_file"),
    _C("ack_frame", pl.Int64, "", "frame of the ACK in capture_file"),
    _C("method", pl.Utf8, "", "seq_ack: first ACK covering the segment (Karn's rule); ts_echo: first ACK "
       "echoing the segment's TSval in TSecr"),
), "one TCP round-trip time sample at one capture")

OWD = register("owd", (
    *_PAIR,
    _C("ts_ns", pl.Int64, "ns", "the packet's time at the upstream capture, reference clock"),
    _C("owd_ns", pl.Int64, "ns", "time at the downstream capture minus time upstream (clock alignment error "
       "included)"),
    _C("frame_a", pl.Int64, "", "frame in capture_file_a"),
    _C("frame_b", pl.Int64, "", "frame in capture_file_b (air: the first attempt captured)"),
    _C("ipdv_ns", pl.Int64, "ns", "RFC 3393 IPDV: owd_ns minus that of the packet sent just before it at the "
       "upstream capture (null when that one was lost or ambiguous)"),
    _C("jitter_ns", pl.Float64, "ns", "RFC 3550 interarrival jitter J after this packet's arrival downstream "
       "(in arrival order; J += (|D| - J)/16, J = 0 before the first)"),
), "one packet of a flow seen at two captures: its one-way delay upstream -> downstream, IPDV and jitter")

LOSS = register("loss", (
    *_PAIR,
    _C("window_start_ns", pl.Int64, "ns", "earliest upstream time counted (downstream capture's first record "
       "minus the flow's smallest delay)"),
    _C("window_end_ns", pl.Int64, "ns", "latest upstream time counted (downstream capture's last record minus "
       "the in-flight guard)"),
    _C("sent", pl.Int64, "", "packets seen upstream in the window (ambiguous identities left out)"),
    _C("lost", pl.Int64, "", "of those, packets never seen downstream (RFC 2680)"),
    _C("loss_ratio", pl.Float64, "fraction", "lost / sent"),
    _C("bursts", pl.Int64, "", "loss periods: runs of consecutive lost packets in upstream order (RFC 3357)"),
    _C("mean_burst_len", pl.Float64, "packets", "mean loss period length (null without loss)"),
    _C("max_burst_len", pl.Int64, "packets", "longest loss period (0 without loss)"),
), "one flow between two captures: one-way packet loss and its loss periods")

LOSS_BURSTS = register("loss_bursts", (
    *_PAIR,
    _C("start_ts_ns", pl.Int64, "ns", "upstream time of the first lost packet of the run"),
    _C("end_ts_ns", pl.Int64, "ns", "upstream time of the last lost packet of the run"),
    _C("length", pl.Int64, "packets", "consecutive packets lost"),
    _C("first_frame_a", pl.Int64, "", "frame of the first lost packet in capture_file_a"),
), "one loss period: a run of consecutive packets of a flow sent upstream and never seen downstream")

TABLES = {"flows": FLOWS, "flow_series": FLOW_SERIES, "rtt": RTT, "owd": OWD, "loss": LOSS,
          "loss_bursts": LOSS_BURSTS}


@dataclass
class Prepared:
    """One capture's IP packets, narrowed to what the metrics read, with per-flow attributes beside."""

    vantage: str
    capture_file: str
    df: pl.DataFrame      # one row per packet (air: per MPDU), in frame order
    flows: pl.DataFrame   # one row per flow: fid, flow, conn, dir, src, sport, dst, dport

    @property
    def height(self) -> int:
        """Return the number of packets."""
        return self.df.height


# --- preparation ---

def _unwrap(col: str, by: str) -> pl.Expr:
    """32-bit sequence numbers made monotone int64 within `by` groups (rows in capture order)."""
    raw = pl.col(col).cast(pl.Int64)
    step = ((raw - raw.shift(1).over(by) + _HALF) % _BIG) - _HALF
    return step.fill_null(raw).cum_sum().over(by)


def _code(col: str) -> pl.Expr:
    """A small integer per distinct string (window functions over integers are several times faster)."""
    return pl.col(col).cast(pl.Categorical).to_physical().cast(pl.Int64)


def _not_retry(m: pl.DataFrame) -> np.ndarray:
    """Return, per row of (_mpdu, ts_ns) in capture order, whether it is no MAC retry: the first of its MPDU
    identity, or `MAC_RETRY_WINDOW_NS` or more after the previous one."""
    if tcpmod.KERNEL:
        # one pass in capture order remembering each identity's last time
        g = tcpmod.key_gaps(m.get_column("_mpdu"), m.get_column("ts_ns"))
        return (g.is_null() | (g >= MAC_RETRY_WINDOW_NS)).to_numpy()
    # a sort of the two columns by identity (then capture order) instead of a window over ~one group per row
    o = m.with_row_index("_r").sort("_mpdu", "_r").select(
        "_r", (pl.col("_mpdu").ne_missing(pl.col("_mpdu").shift(1))
               | ((pl.col("ts_ns") - pl.col("ts_ns").shift(1)) >= MAC_RETRY_WINDOW_NS).fill_null(True)).alias("k"))
    keep = np.empty(o.height, bool)
    keep[o["_r"].to_numpy()] = o["k"].to_numpy()
    return keep


def _flow_numbers(df: pl.DataFrame, per_flow: pl.DataFrame) -> list[pl.Series]:
    """Return per row of `df` (fid) the flow name's hash ``fh`` and ``g``: (conn, dir) as one integer, its other
    direction the same number with the last bit flipped.  Both are computed once per flow, from `per_flow`
    (fid, flow, conn, dir: one row each), and spread over the rows by ``fid``."""
    per = per_flow.select(
        "fid", pl.col("flow").hash().alias("fh"),
        (_code("conn") * 2 + (pl.col("dir") == "b").cast(pl.Int64)).alias("g"))
    rows = df.select("fid").join(per, on="fid", how="left", maintain_order="left")
    return [rows.get_column("fh"), rows.get_column("g")]


def _key_columns() -> list[pl.Expr]:
    """Return the packet identity's columns beside ``fh`` (`_KEY`), from a prepared table's columns."""
    return [pl.col("ip_id").fill_null(-1).alias("k_id"), pl.col("tcp_seq").fill_null(-1).alias("k_seq"),
            pl.col("udp_len").fill_null(-1).cast(pl.Int32).alias("k_ulen"),
            pl.col("ip_len").fill_null(-1).alias("k_iplen"),
            pl.col("ip_frag_offset").fill_null(0).cast(pl.Int32).alias("k_off")]


def _not_retry_rows(df: pl.DataFrame) -> pl.Series:
    """Return per row of an air capture's rows in frame order (`_ta`, wlan_seq, wlan_frag, ts_ns and the `_KEY`
    columns) whether it is no MAC retry."""
    # A MAC retry repeats the MPDU (transmitter, sequence, fragment) and its IP identity; 802.11
    # sequence numbers wrap every 4096 MPDUs, so only a repeat within a short time is a retry.
    ident = pl.struct(pl.col("_ta").fill_null(-1), pl.col("wlan_seq").fill_null(-1), pl.col("wlan_frag").fill_null(-1),
                      *_KEY)
    return pl.Series(_not_retry(df.select(ident.hash().alias("_mpdu"), "ts_ns")))


def _first_copies(packets: pl.DataFrame, keep: pl.Expr, per_flow: pl.DataFrame, col: Callable[[str, pl.DataType], pl.Expr]
                  ) -> pl.Series | None:
    """Return per row of an air capture's `packets` (with ``fid``) whether `prepare` keeps it: `keep`, and no
    MAC retry; None when the rows kept are not in frame order (`prepare` then sorts them first)."""
    kept = packets.select(keep.fill_null(False)).to_series()
    ident = packets.lazy().filter(kept).select(
        "fid", col("frame", pl.Int64), col("ts_ns", pl.Int64), col("ip_id", pl.Int64), col("ip_len", pl.Int64),
        col("ip_frag_offset", pl.Int64), col("tcp_seq", pl.Int64), col("udp_len", pl.Int64),
        col("wlan_seq", pl.Int64), col("wlan_frag", pl.Int64),
        (_code("wlan_ta") if "wlan_ta" in packets.columns else pl.lit(None, pl.Int64)).alias("_ta")).collect()
    if not ident["frame"].is_sorted():
        return None
    ident = ident.with_columns(_flow_numbers(ident, per_flow)[0], *_key_columns())
    ok = _not_retry_rows(ident).to_numpy()
    del ident
    full = np.zeros(packets.height, bool)
    full[np.flatnonzero(kept.to_numpy())[ok]] = True
    return pl.Series(full)


def _flow_ids(packets: pl.DataFrame) -> pl.Series:
    """Return ``fid`` per row of `packets`: a small integer per distinct flow name (0.. in order of first
    appearance, from its hash by the compiled table; without it the categorical code)."""
    if not tcpmod.KERNEL:
        return packets.select(_code("flow").alias("fid")).to_series()
    # (the flow name's 64-bit hash stands for it, as ``fh`` does across captures: no string is coded)
    ids, _, _ = tcpmod.hash_ids(packets.select(pl.col("flow").hash()).to_series().to_numpy())
    return pl.Series("fid", ids)


def _per_flow(packets: pl.DataFrame, keep: pl.Expr, col: Callable[[str, pl.DataType], pl.Expr]) -> pl.DataFrame:
    """Return one row per flow (``fid``) of the rows `keep` selects: its strings, ports and addresses from its
    first row in frame order."""
    strings = ("flow", "conn", "dir", "ip_src", "ip_dst", "sport", "dport")
    cols = [col(c, pl.Utf8) if c.startswith("ip_") else col(c, pl.UInt16) if c.endswith("port") else pl.col(c)
            for c in strings]
    frame = packets.get_column("frame") if "frame" in packets.columns else None
    if frame is None or (frame.null_count() == 0 and frame.is_sorted()):
        # rows in frame order: a flow's first kept row is its first row in frame order, found on the integer
        # codes alone; only those few rows' strings are then read (a group-by would gather every row's)
        mask = pl.when(keep).then(pl.col("fid")).is_first_distinct() & keep
        return packets.lazy().filter(mask).select("fid", *cols).collect()
    first = pl.col("frame").arg_min()
    return packets.lazy().filter(keep).select("fid", col("frame", pl.Int64), *cols) \
        .group_by("fid").agg(pl.col(*strings).get(first)).collect()


# the packet columns `prepare` reads: not the capture's constants (file, vantage), given beside
_PREPARE_READ = [c for c in _READ if c not in ("capture_file", "vantage", "kind")]


def prepare(packets: pl.DataFrame, kind: str = "wired", vantage: str | None = None,
            capture_file: str | None = None) -> Prepared:
    """Return a capture's IP packets (MAC retries dropped on the air) with payload, identity and TCP columns;
    `vantage` and `capture_file` stand for the table's columns of those names when it has none."""
    cols = set(packets.columns)

    def col(name: str, dtype: pl.DataType) -> pl.Expr:
        return (pl.col(name).cast(dtype) if name in cols else pl.lit(None, dtype)).alias(name)

    vantage = (packets["vantage"][0] if "vantage" in cols else vantage or "") if packets.height else ""
    capture_file = (packets["capture_file"][0] if "capture_file" in cols else capture_file or "") \
        if packets.height else ""
    # lazily: the filters then copy only the columns selected, not every column of the packet table
    keep = pl.col("flow").is_not_null()
    if "fcs_bad" in cols:
        keep = keep & ~pl.col("fcs_bad").fill_null(False)
    # (the flow's number made once, for both plans below: its numbers follow the rows' order, and without
    # the kernel categorical codes depend on what was coded before, so two plans could number differently)
    packets = packets.with_columns(_flow_ids(packets))
    rows = packets.lazy().filter(keep)
    # The strings (flow, conn, dir, addresses) are constant per flow: taken once per flow here, from its
    # first row in frame order, rather than carried on every row through the filters and copies below
    # (five strings a row were the largest columns of an air capture's working table).
    per_flow = _per_flow(packets, keep, col)
    # fragments' datagrams are grouped by their addresses (`datagram` below): as codes, only when there are any
    has_frag = rows.select(col("ip_mf", pl.Boolean), col("ip_frag_offset", pl.Int64)).select(
        is_fragment().any()).collect().item()
    addresses = [(_code(c) if c in cols else pl.lit(None, pl.Int64)).alias(c) for c in ("ip_src", "ip_dst")] \
        if has_frag else []
    retries = kind == "air"
    if retries and packets.height:
        # the MAC retries told apart first, on the identity's few columns: the wide table below is then
        # built of the rows kept only, not built whole and filtered (a second copy of every column)
        first_copies = _first_copies(packets, keep, per_flow, col)
        if first_copies is not None:
            rows, retries = packets.lazy().filter(first_copies), False
        del first_copies
    df = rows.select(
        "fid", col("frame", pl.Int64), col("ts_ns", pl.Int64),
        *addresses, col("ip_proto", pl.Int64), col("ip_id", pl.Int64), col("ip_len", pl.Int64),
        col("ip_hdr_len", pl.Int64),
        col("ip_mf", pl.Boolean), col("ip_frag_offset", pl.Int64), col("tcp_seq", pl.Int64),
        col("tcp_ack", pl.Int64), col("tcp_flags", pl.Int64), col("tcp_len", pl.Int64), col("tcp_hdr_len", pl.Int64),
        col("tcp_tsval", pl.Int64), col("tcp_tsecr", pl.Int64), col("udp_len", pl.Int64),
        # (the MPDU's identity only where its retries are still to be told apart)
        *([col("wlan_seq", pl.Int64), col("wlan_frag", pl.Int64),
           (_code("wlan_ta") if "wlan_ta" in cols else pl.lit(None, pl.Int64)).alias("_ta")] if retries else []),
    ).collect()
    del packets, rows     # freed here if the caller holds no other reference to it (`build` does not)
    # A capture's rows come in frame order: sorting them anyway would gather every column into a second
    # copy of the table, the largest allocation of the whole module.
    if not df["frame"].is_sorted():
        df = df.sort("frame")
    df = df.with_columns(*_flow_numbers(df, per_flow), *_key_columns())
    if retries and df.height:
        # (rows not in frame order: sorted above, then their retries dropped)
        df = df.filter(_not_retry_rows(df))
    # (a MAC retry is never a flow's first row: the flows are those of the rows kept)
    flows = per_flow.rename({"ip_src": "src", "ip_dst": "dst"})
    del per_flow
    frag = is_fragment()
    l4 = pl.col("ip_len") - pl.col("ip_hdr_len")
    # A fragmented TCP segment's length is that of its whole datagram, given to the first fragment (the
    # one with the TCP header): the furthest byte any of its fragments reaches (offsets in bytes;
    # overlapping fragments count once).  The later fragments then add nothing, as they carry no header.
    datagram = pl.when(frag).then(pl.col("ip_frag_offset").fill_null(0) + l4).max().over(FRAGMENT_KEY)
    # (the window groups every row by four columns: only worth it when there are fragments)
    l4_tcp = pl.when(frag & (pl.col("ip_frag_offset").fill_null(0) == 0)).then(datagram).otherwise(l4) if has_frag else l4
    # TCP payload from the IP length where the headers give it: the first 802.11 fragment of a packet
    # carries the whole IP header but only part of the segment, and tcp_len is then what the frame holds.
    tcp_from_ip = l4_tcp - pl.col("tcp_hdr_len")
    tcp_len = pl.when((pl.col("ip_len") > 0) & (tcp_from_ip >= 0)).then(tcp_from_ip).otherwise(pl.col("tcp_len"))
    df = df.with_columns(tcp_len.alias("tcp_len"))
    payload = (pl.when(pl.col("ip_proto") == 6).then(pl.col("tcp_len"))
               .when(frag & (pl.col("ip_proto") == 17) & (pl.col("ip_frag_offset").fill_null(0) == 0)).then(l4 - 8)
               .when(frag).then(l4)
               .when((pl.col("ip_proto") == 17) & pl.col("udp_len").is_not_null()).then(pl.col("udp_len") - 8)
               .otherwise(l4))
    flags = pl.col("tcp_flags").fill_null(0)
    df = df.select(
        "frame", "ts_ns", "fid", "fh", "g", *_KEY[1:],
        pl.col("ip_len").fill_null(0), payload.fill_null(0).clip(lower_bound=0).alias("payload"),
        ((pl.col("ip_proto") == 6) & pl.col("tcp_seq").is_not_null()).alias("is_tcp"),
        "tcp_seq", "tcp_ack", (flags & _ACK > 0).alias("ack_flag"), pl.col("tcp_tsval").alias("tsval"),
        pl.col("tcp_tsecr").alias("tsecr"),
        (pl.col("tcp_len").fill_null(0) + (flags & _SYN > 0).cast(pl.Int64) + (flags & _FIN > 0).cast(pl.Int64))
        .alias("span"), pl.col("tcp_len").fill_null(0).alias("_tlen"))
    # The TCP columns are computed in place, in frame order, windowed per TCP flow ("_tf"; the other rows
    # share one group whose values are masked): no split into TCP and other rows, concatenated and sorted
    # back into frame order, each a copy of every column.
    tcp = pl.col("is_tcp")
    df = df.with_columns(pl.when(tcp).then(pl.col("fid")).otherwise(-1).alias("_tf"))
    # Highest sequence end seen before this segment: bytes beyond it are new (goodput), a segment
    # starting below it resends something (a retransmission, or reordering at a later vantage).
    df = _seq_state(df) if tcpmod.KERNEL else _seq_state_polars(df)
    # A jump over a hole counts the hole's bytes too: they are filled later by retransmissions that
    # count nothing, so the sum is the sequence space covered (tcptrace's "unique bytes").
    df = df.with_columns(
        pl.when(~tcp | pl.col("_prev").is_null()).then(pl.col("payload"))
        .otherwise((pl.col("seq_u") + pl.col("_tlen") - pl.col("_prev")).clip(lower_bound=0)).alias("new_payload"),
        (tcp & pl.col("_prev").is_not_null() & (pl.col("seq_u") < pl.col("_prev")) & (pl.col("span") > 0))
        .alias("retx"))
    out = df.drop("_prev", "_tlen", "tcp_seq", "_tf")
    return Prepared(vantage, capture_file, out, flows)


def _seq_state_polars(df: pl.DataFrame) -> pl.DataFrame:
    """Return `df` with seq_u (sequence numbers unwrapped per TCP flow ``_tf``), end_u and ``_prev`` (the
    highest end_u of the flow's rows before), by windows (`_seq_state`'s fallback)."""
    tcp = pl.col("is_tcp")
    df = df.with_columns(pl.when(tcp).then(_unwrap("tcp_seq", "_tf")).alias("seq_u"))
    df = df.with_columns((pl.col("seq_u") + pl.col("span")).alias("end_u"))
    return df.with_columns(pl.when(tcp).then(pl.col("end_u").cum_max().shift(1).over("_tf")).alias("_prev"))


def _seq_state(df: pl.DataFrame) -> pl.DataFrame:
    """Return `_seq_state_polars`'s columns from one pass of the compiled kernel over the rows in frame order."""
    n = df.height
    seq_u, prev = np.empty(n, np.int64), np.empty(n, np.int64)
    a = df.select(pl.col("_tf").cast(pl.Int64), pl.col("tcp_seq").cast(pl.Int64).fill_null(_NUL),
                  pl.col("span").cast(pl.Int64).fill_null(0))
    tcpmod._tcpk.seq_track(*(a.get_column(c).to_numpy() for c in a.columns), seq_u, prev)
    k = pl.DataFrame({"seq_u": seq_u, "_prev": prev}).select(
        pl.when(pl.col(c) != _NUL).then(pl.col(c)).alias(c) for c in ("seq_u", "_prev"))
    return df.with_columns(k.get_column("seq_u")).with_columns(
        (pl.col("seq_u") + pl.col("span")).alias("end_u"), k.get_column("_prev"))


# --- flows and series ---

def flow_totals(prep: Prepared) -> pl.DataFrame:
    """Return the `flows` table of one prepared capture."""
    if prep.height == 0:
        return conform(None, FLOWS)
    out = prep.df.group_by("fid").agg(
        pl.col("ts_ns").min().alias("first_ts_ns"), pl.col("ts_ns").max().alias("last_ts_ns"),
        pl.col("frame").min().alias("first_frame"), pl.len().alias("packets"),
        pl.col("ip_len").sum().alias("bytes"), pl.col("payload").sum().alias("payload_bytes"),
        pl.col("new_payload").sum().alias("goodput_bytes")).join(prep.flows, on="fid")
    dur = (pl.col("last_ts_ns") - pl.col("first_ts_ns")).cast(pl.Float64)
    ok = dur > 0
    out = out.with_columns(
        pl.col("flow").str.split_exact(" ", 1).struct.field("field_0").alias("proto"),
        pl.lit(prep.vantage).alias("vantage"), pl.lit(prep.capture_file).alias("capture_file"),
        pl.when(ok).then(pl.col("goodput_bytes") * 8e9 / dur).alias("goodput_bps"),
        pl.when(ok).then(pl.col("bytes") * 8e9 / dur).alias("throughput_bps"))
    return conform(out.drop("fid").sort("first_ts_ns", "flow"), FLOWS)


def flow_series(prep: Prepared, bin_ns: int, max_gap_ns: int = SERIES_MAX_GAP_NS) -> pl.DataFrame:
    """Return the `flow_series` table of one prepared capture: every bin of every flow, empty ones as zeros."""
    if prep.height == 0:
        return conform(None, FLOW_SERIES)
    sums = (prep.df.with_columns((pl.col("ts_ns") // bin_ns * bin_ns).alias("bin_start_ns"))
            .group_by("fid", "bin_start_ns").agg(
                pl.len().alias("packets"), pl.col("ip_len").sum().alias("bytes"),
                pl.col("payload").sum().alias("payload_bytes"), pl.col("new_payload").sum().alias("goodput_bytes"))
            .sort("fid", "bin_start_ns"))
    # Empty bins after each busy one up to the next; past max_gap only the bins at the gap's two ends.
    # The next busy bin is a column before any filter: a shift evaluated after one would see only the
    # rows kept (the next long gap, or null at the last), which put null bin starts in the table.
    sums = sums.with_columns(pl.col("bin_start_ns").shift(-1).over("fid").alias("_next"))
    nxt = pl.col("_next")
    first = pl.col("bin_start_ns") + bin_ns
    long_gap = (nxt - pl.col("bin_start_ns")) > max_gap_ns
    stop = pl.when(nxt.is_null()).then(first).when(long_gap).then(first + bin_ns).otherwise(nxt)
    gaps = sums.select("fid", pl.int_ranges(first, stop, bin_ns).alias("bin_start_ns"))
    tail = sums.filter(long_gap.fill_null(False)).select("fid", (nxt - bin_ns).alias("bin_start_ns"))
    sums = sums.drop("_next")
    empty = pl.concat([gaps.explode("bin_start_ns").drop_nulls(), tail]).unique()
    out = pl.concat([sums, empty.join(sums.select("fid", "bin_start_ns"), on=["fid", "bin_start_ns"], how="anti")],
                    how="diagonal").with_columns(pl.col("packets", "bytes", "payload_bytes", "goodput_bytes")
                                                 .fill_null(0).cast(pl.Int64))
    out = out.join(prep.flows.select("fid", "flow"), on="fid").with_columns(
        pl.lit(prep.vantage).alias("vantage"), pl.lit(prep.capture_file).alias("capture_file"),
        pl.lit(bin_ns, pl.Int64).alias("bin_ns"),
        (pl.col("goodput_bytes") * 8e9 / bin_ns).alias("goodput_bps"),
        (pl.col("bytes") * 8e9 / bin_ns).alias("throughput_bps"))
    # ordered by the flow's name, not its code: categorical codes depend on what the process saw before
    return conform(out.sort("flow", "bin_start_ns").drop("fid"), FLOW_SERIES)


# --- RTT ---

def _retransmitted_later(seg: pl.DataFrame) -> pl.Series:
    """Return, per data segment, whether some retransmission resent any of its bytes (Karn)."""
    retx = seg.filter(pl.col("retx")).select("g", "seq_u", "end_u").sort("g", "seq_u")
    if retx.height == 0:
        return pl.Series("later", [False] * seg.height)
    # Merge the resent ranges into disjoint intervals, then look up each segment's nearest one below its end.
    retx = retx.with_columns(pl.col("end_u").cum_max().shift(1).over("g").alias("_reach"))
    retx = retx.with_columns((pl.col("_reach").is_null() | (pl.col("seq_u") > pl.col("_reach")))
                             .cum_sum().over("g").alias("_grp"))
    merged = (retx.group_by("g", "_grp").agg(pl.col("seq_u").min().alias("m_start"), pl.col("end_u").max().alias("m_end"))
              .drop("_grp").sort("m_start"))
    found = _later_by_search(seg, merged)
    if found is not None:
        return found
    probe = seg.select("g", "seq_u", (pl.col("end_u") - 1).alias("_last")).with_row_index("_i").sort("_last")
    hit = probe.join_asof(merged, left_on="_last", right_on="m_start", by="g", strategy="backward",
                          check_sortedness=False).sort("_i")
    return (hit["m_end"].is_not_null() & (hit["m_end"] > hit["seq_u"])).alias("later")


def _later_by_search(seg: pl.DataFrame, merged: pl.DataFrame) -> pl.Series | None:
    """Return `_retransmitted_later` of `seg` given the merged resent intervals (g, m_start, m_end; disjoint
    within a direction) by one binary search per segment over (direction, start) packed into one int64, in
    the segments' own order (no sort of them and back); None when the packing does not fit 63 bits."""
    if any(df.get_column(c).null_count() for df, cs in ((seg, ("g", "seq_u", "end_u")), (merged, ("g", "m_start")))
           for c in cs):
        return None
    g, seq = seg.get_column("g").cast(pl.Int64).to_numpy(), seg.get_column("seq_u").to_numpy()
    last = seg.get_column("end_u").to_numpy() - 1
    mg, ms = merged.get_column("g").cast(pl.Int64).to_numpy(), merged.get_column("m_start").to_numpy()
    lo, hi = min(int(last.min()), int(ms.min())), max(int(last.max()), int(ms.max()))
    g0, g1 = min(int(g.min()), int(mg.min())), max(int(g.max()), int(mg.max()))
    span = hi - lo + 1
    if (g1 - g0 + 1) * span >= 1 << 63:
        return None
    mkey = (mg - g0) * span + (ms - lo)
    o = np.argsort(mkey, kind="stable")
    mkey, mg, me = mkey[o], mg[o], merged.get_column("m_end").to_numpy()[o]
    # the last interval of the segment's direction starting at or below its last byte (join_asof "backward")
    at = np.searchsorted(mkey, (g - g0) * span + (last - lo), side="right") - 1
    ok = at >= 0
    at = np.where(ok, at, 0)
    ok &= mg[at] == g
    return pl.Series("later", ok & (me[at] > seq))


def _numbers_ip_packets(rows: pl.DataFrame) -> pl.DataFrame:
    """Return (g, idinfo) per direction of `rows` (g, k_id; -1: no IP id): whether its sender numbers its IP
    packets (every row has an id, at least two distinct and a quarter as many as rows), the distinct ids
    counted by the compiled kernel (`_tcpk.numbered`, the tcp module's test) when built."""
    n = pl.col("k_id").n_unique()
    if not tcpmod.KERNEL or rows.height == 0 or rows.get_column("g").null_count() \
            or rows.get_column("k_id").null_count() or rows.get_column("k_id").min() < -1:
        return rows.group_by("g").agg(((pl.col("k_id") >= 0).all() & (n >= 2) & (n * 4 >= pl.len())).alias("idinfo"))
    # directions made contiguous: the kernel counts each run of rows in one pass over a bitmap or hash table
    rows = rows.sort("g")
    g = rows.get_column("g").to_numpy()
    starts = np.flatnonzero(np.diff(g, prepend=g[0] - 1))
    kid = rows.get_column("k_id").cast(pl.Int64).to_numpy()
    flag = np.empty(len(kid), np.uint8)
    # -1 (no id) is one value of its own, as the kernel counts its null
    tcpmod._tcpk.numbered(np.append(starts, len(kid)).astype(np.int64), np.where(kid < 0, _NUL, kid), flag)
    all_ids = np.minimum.reduceat(kid, starts) >= 0
    return pl.DataFrame({"g": g[starts], "idinfo": flag[starts].astype(bool) & all_ids},
                        schema={"g": rows.schema["g"], "idinfo": pl.Boolean})


def _without_copies(seg: pl.DataFrame, tcp: pl.DataFrame) -> pl.DataFrame:
    """Return the segments `seg` (of the TCP rows `tcp`) without the copies the network or the capture made
    of an earlier one (`xlayer.metrics.tcp.network_copies`, the retransmissions table's network_duplicate):
    the sender sent them once, so Karn's rule does not count them and their original gives the sample.
    `prepare` keeps of the TCP flags only SYN/FIN (in the span) and ACK, and not the window: the two
    byte-identity tests here compare the rest."""
    from xlayer.metrics.tcp import network_copies

    rows = seg.filter(pl.col("retx")).select("g", "frame")
    if rows.height == 0:
        return seg
    # the sender numbers its IP packets (as the tcp module decides it); counted over the directions that
    # retransmit only: the rows of the others would be counted for nothing
    info = _numbers_ip_packets(tcp.filter(pl.col("g").is_in(rows.get_column("g").unique().implode()))
                               .select("g", "k_id"))
    # only the segments at a retransmission's sequence number can be judged or be its twin: the others are
    # left out before their identity columns are made (`network_copies` would leave them out after)
    at = seg.lazy().join(seg.lazy().filter(pl.col("retx")).select("g", "seq_u").unique(), on=["g", "seq_u"],
                         how="semi", maintain_order="left")
    ident = at.select("g", "frame", "ts_ns", "seq_u", pl.col("payload").alias("len"),
                       pl.when(pl.col("k_id") >= 0).then(pl.col("k_id")).alias("ip_id"), "tsval", "tsecr",
                       pl.col("tcp_ack").alias("ack"),
                       ((pl.col("span") - pl.col("payload")) * 2 + pl.col("ack_flag").cast(pl.Int64)).alias("flags"),
                       pl.lit(None, pl.Int64).alias("win")).collect()
    copies = network_copies(rows.join(info, on="g"), ident, ["g"]).filter(pl.col("copy"))
    return seg.join(copies.select("g", "frame"), on=["g", "frame"], how="anti") if copies.height else seg


# the prepared columns `rtt_samples` (and `_without_copies`) read
_RTT_READ = ("g", "fid", "frame", "ts_ns", "k_id", "payload", "tcp_ack", "ack_flag", "tsval", "tsecr", "span",
             "seq_u", "end_u", "retx")


def _by_frame(df: pl.DataFrame) -> pl.DataFrame:
    """Return `df` (distinct frames) in frame order: sorted only when it is not already (a join kept it)."""
    return df if df.get_column("frame").is_sorted() and not df.get_column("frame").null_count() else df.sort("frame")


def _gt(col: str) -> pl.Expr:
    """A direction and a TSval (`col`) as one int64 ``_gt`` (`_echo_key`): joins on one column instead of two."""
    return (pl.col("g").cast(pl.Int64) * _BIG + pl.col(col).cast(pl.Int64)).alias("_gt")


def _echo_key(stamped: pl.DataFrame, echo: pl.DataFrame) -> list[str]:
    """Return the columns the ts_echo samples match a segment's TSval to an ACK's TSecr by: ``_gt`` (`_gt`:
    direction and value as one int64) when every direction number and value fits it exactly, else
    (g, tsval), the ACKs' TSecr renamed tsval."""
    ok = all(df.height == 0 or df.select((pl.col("g").null_count() == 0) & (pl.col("g").min() >= 0)
                                         & (pl.col("g").max() < _HALF)
                                         & (pl.col(c).min() >= 0) & (pl.col(c).max() < _BIG)).item()
             for df, c in ((stamped, "tsval"), (echo, "tsecr")))
    if ok:
        return ["_gt"]
    return ["g", "tsval"]


def _unwrapped(df: pl.DataFrame, col: str, by: str) -> pl.Series:
    """Return `_unwrap(col, by)` of `df` (rows in capture order, `col` not null), by the compiled kernel's
    one pass when built."""
    if not tcpmod.KERNEL or df.select((pl.col(by).min() < 0) | pl.col(by).is_null().any()).item():
        return df.select(_unwrap(col, by)).to_series()
    n = df.height
    seq_u, prev = np.empty(n, np.int64), np.empty(n, np.int64)
    tcpmod._tcpk.seq_track(df.get_column(by).cast(pl.Int64).to_numpy(), df.get_column(col).cast(pl.Int64).to_numpy(),
                           np.zeros(n, np.int64), seq_u, prev)
    return pl.Series(col, seq_u)


def _latest_per_ack(m: pl.DataFrame, rising: bool) -> pl.DataFrame:
    """Return the rows of `m` (segments matched to an ACK: frame, ts_ns, ack_frame; no nulls) that are, per
    ACK, the segment latest by (time, frame).  With the times rising in frame order (`rising`, as a capture's
    almost always are) that is the latest frame: found by a scatter-max into an array indexed by the ACK's
    frame number when the numbers are small enough, else (and otherwise) by windows on that integer key."""
    if rising and m.height:
        af, fr = m.get_column("ack_frame").to_numpy(), m.get_column("frame").to_numpy()
        top = int(af.max())
        if int(af.min()) >= 0 and top <= max(4 * len(af), 1 << 20):
            latest = np.full(top + 1, np.iinfo(np.int64).min, np.int64)
            np.maximum.at(latest, af, fr)
            return m.filter(pl.Series(fr == latest[af]))
    return (m.filter(pl.lit(rising) | (pl.col("ts_ns") == pl.col("ts_ns").max().over("ack_frame")))
            .filter(pl.col("frame") == pl.col("frame").max().over("ack_frame")))


def rtt_samples(prep: Prepared) -> pl.DataFrame:
    """Return the `rtt` table of one prepared capture (seq_ack with Karn's rule, and ts_echo samples)."""
    return _named_rtt(_rtt_rows(prep), prep.flows, prep.vantage, prep.capture_file)


def _named_rtt(rows: pl.DataFrame | None, flows: pl.DataFrame, vantage: str, capture_file: str) -> pl.DataFrame:
    """Return the `rtt` table of the samples `_rtt_rows` made: each one's flow name (`flows`: fid -> flow),
    vantage, capture file and method added."""
    if rows is None:
        return conform(None, RTT)
    res = (rows.join(flows.select("fid", "flow"), on="fid", how="left", maintain_order="left")
           .with_columns(pl.lit(vantage).alias("vantage"), pl.lit(capture_file).alias("capture_file"),
                         pl.when(pl.col("_m")).then(pl.lit("ts_echo")).otherwise(pl.lit("seq_ack")).alias("method"))
           .drop("fid", "_m"))
    return conform(res, RTT)


def _rtt_rows(prep: Prepared) -> pl.DataFrame | None:
    """Return the rtt samples of one prepared capture in the table's order, without their strings (fid, ts_ns,
    rtt_ns, data_frame, ack_frame, _m: whether ts_echo; `_named_rtt` names them); None when it has no TCP."""
    # (lazily: the filter copies only the columns read below, not the flow names and packet identities)
    tcp = prep.df.lazy().filter(pl.col("is_tcp")).select(_RTT_READ).collect()
    if tcp.height == 0:
        return None
    seg = _without_copies(tcp.filter(pl.col("span") > 0), tcp) \
        .select("g", "fid", "frame", "ts_ns", "seq_u", "end_u", "retx", "tsval")
    seg = seg.with_columns(_retransmitted_later(seg).alias("later"))
    # ACKs, renamed to the direction they acknowledge (g with its last bit flipped) and unwrapped into
    # that direction's sequence space.
    acks = tcp.filter(pl.col("ack_flag") & pl.col("tcp_ack").is_not_null()).select(
        (pl.col("g") ^ 1).alias("g"), "frame", "ts_ns", "tcp_ack", "tsecr")
    # directions that sent data (a filter keeps the frame order a semi-join would not)
    acks = _by_frame(acks.filter(pl.col("g").is_in(seg.get_column("g").unique().implode())))
    acks = acks.with_columns(_unwrapped(acks, "tcp_ack", "g").alias("ack_u")).drop("tcp_ack")
    base = (seg.group_by("g").agg(pl.col("seq_u").first().alias("_s0"))
            .join(acks.group_by("g").agg(pl.col("ack_u").first().alias("_a0")), on="g"))
    base = base.select("g", (((pl.col("_s0") - pl.col("_a0") + _HALF) // _BIG) * _BIG).alias("_shift"))
    # (a look-up of the few directions' shifts: no join of every ACK, which would not keep their order)
    shift = pl.col("g").replace_strict(base.get_column("g"), base.get_column("_shift"), default=None)
    acks = _by_frame(acks.with_columns(shift.alias("_shift")).filter(pl.col("_shift").is_not_null())
                     .with_columns(pl.col("ack_u") + pl.col("_shift")))
    out = []
    # seq_ack: the ACKs that advance the cumulative acknowledgement, each matched to the segments it
    # newly covers; the sample comes from the most recently sent of them.
    adv = (acks.filter((pl.col("ack_u") > pl.col("ack_u").cum_max().shift(1).over("g")).fill_null(True))
           .select("g", pl.col("frame").alias("ack_frame"), pl.col("ts_ns").alias("ack_ts"), "ack_u").sort("ack_u"))
    # (the columns read below only: each sort then copies these, not every column of the segments)
    rising = all(seg.get_column(c).null_count() == 0 and seg.get_column(c).is_sorted() for c in ("ts_ns", "frame"))
    m = seg.select("g", "fid", "frame", "ts_ns", "end_u", "retx", "later").sort("end_u").join_asof(
        adv, left_on="end_u", right_on="ack_u", by="g", strategy="forward", check_sortedness=False)
    m = _latest_per_ack(m.filter(pl.col("ack_frame").is_not_null() & (pl.col("ack_ts") >= pl.col("ts_ns")))
                        .select("fid", "frame", "ts_ns", "retx", "later", "ack_frame", "ack_ts"), rising) \
        .filter(~(pl.col("retx") | pl.col("later")))
    out.append(m.select("fid", pl.col("ack_ts").alias("ts_ns"), (pl.col("ack_ts") - pl.col("ts_ns")).alias("rtt_ns"),
                        pl.col("frame").alias("data_frame"), "ack_frame", pl.lit(False).alias("_m")))
    # ts_echo: the first segment carrying a TSval, to the first ACK after it echoing that TSval.  A
    # retransmission with a fresh TSval is unambiguous (RFC 7323); a TSval carried by two copies of the
    # same bytes is not (which copy the echo answers is unknown), so it is skipped.
    stamped = seg.filter(pl.col("tsval").is_not_null())
    echo = acks.filter(pl.col("tsecr").is_not_null() & (pl.col("tsecr") != 0))
    grp = _echo_key(stamped, echo)
    if grp == ["_gt"]:
        stamped = stamped.with_columns(_gt("tsval"))
        echo = echo.with_columns(_gt("tsecr"))
    first = stamped.group_by(grp).agg(pl.col("fid", "frame", "ts_ns").first(), pl.col("retx").any())
    # Only a TSval that also rides on a retransmission can cover the same bytes twice: check those few.
    suspect = stamped.join(first.filter(pl.col("retx")).select(grp), on=grp, how="semi").sort("frame")
    again = suspect.filter(pl.col("seq_u") < pl.col("end_u").cum_max().shift(1).over(grp)).select(grp).unique()
    first = first.join(again, on=grp, how="anti").sort("ts_ns")
    echo = (echo.select(*grp, pl.col("frame").alias("ack_frame"), pl.col("ts_ns").alias("ack_ts"))
            if grp == ["_gt"] else
            echo.select("g", pl.col("tsecr").alias("tsval"), pl.col("frame").alias("ack_frame"),
                        pl.col("ts_ns").alias("ack_ts")))
    # only the ACKs echoing a TSval looked for are sorted and searched (a few in ten on a bulk transfer)
    echo = echo.join(first.select(grp), on=grp, how="semi", maintain_order="left").sort("ack_ts")
    e = first.join_asof(echo, left_on="ts_ns", right_on="ack_ts", by=grp, strategy="forward",
                        check_sortedness=False).filter(pl.col("ack_frame").is_not_null())
    out.append(e.select("fid", pl.col("ack_ts").alias("ts_ns"), (pl.col("ack_ts") - pl.col("ts_ns")).alias("rtt_ns"),
                        pl.col("frame").alias("data_frame"), "ack_frame", pl.lit(True).alias("_m")))
    # sorted by the flow name's rank and the method's (seq_ack < ts_echo): integers, not strings; the
    # strings are added to the sorted rows (a sort gathers every column it carries)
    names = prep.flows.select("fid", pl.col("flow").rank("dense").alias("_fr"))
    return _in_rtt_order(pl.concat(out).join(names, on="fid")).drop("_fr")


def _in_rtt_order(rows: pl.DataFrame) -> pl.DataFrame:
    """Return `rows` (_fr, ts_ns, _m, data_frame, ...) sorted by those four columns: by one int64 key packing
    them when their ranges fit in 63 bits (a sort on one integer, several times cheaper than on four)."""
    ok = rows.height > 1 and all(rows.get_column(c).null_count() == 0 for c in ("_fr", "ts_ns", "_m", "data_frame"))
    if ok:
        lo = rows.select(pl.col("ts_ns", "data_frame").min()).row(0)
        hi = rows.select(pl.col("_fr", "ts_ns", "data_frame").max()).row(0)
        nt, nd = hi[1] - lo[0] + 1, hi[2] - lo[1] + 1
        ok = (hi[0] + 1) * nt * 2 * nd < 1 << 63
    if not ok:
        return rows.sort("_fr", "ts_ns", "_m", "data_frame")
    key = (((pl.col("_fr").cast(pl.Int64) * nt + (pl.col("ts_ns") - lo[0])) * 2 + pl.col("_m").cast(pl.Int64)) * nd
           + (pl.col("data_frame") - lo[1]))
    # (distinct keys: the four columns identify a sample, so no tie is left to the sort's order)
    return rows.sort(rows.select(key).to_series())


# --- between two captures ---

@dataclass
class Keyed:
    """One capture's packet identities: one row each with its first frame, time and copies seen."""

    vantage: str
    capture_file: str
    df: pl.DataFrame
    names: pl.DataFrame    # fh -> flow, conn, dir, src, dst
    span: tuple[int, int]  # first and last record time on the reference clock
    ordered: bool = False  # df is in (fh, ts_ns, frame) order (`keyed`), the order `pair_tables` works in
    ids: int = 0           # ``_k`` numbers the identities 0..ids-1 across the keys of one `numbered_ids` /
    #                        `exact_ids` call (0: ``_k`` are the identities' hashes)


def keyed(prep: Prepared) -> Keyed:
    """Return one row per packet identity of a prepared capture: first frame, its time, copies seen, and
    ``_k``: the identity's 64-bit hash, one column to join captures on (`exact_ids` makes it exact)."""
    # sorted once here, in the order every pair of captures reads it (a capture is upstream in several)
    df = _identities(prep.df)
    if df is None:
        df = (prep.df.group_by(list(_KEY))
              .agg(pl.col("frame").first(), pl.col("ts_ns").first(), pl.len().cast(pl.Int32).alias("n"))
              .with_columns(pl.struct(list(_KEY)).hash().alias("_k")).sort("frame"))
    # times rising with the frames (as a capture's almost always do): a stable sort by flow is the whole sort
    df = df.sort("fh", maintain_order=True) if df["ts_ns"].is_sorted() else df.sort("fh", "ts_ns", "frame")
    names = prep.flows.select(pl.col("flow").hash().alias("fh"), "flow", "conn", "dir", "src", "dst")
    span = (prep.df["ts_ns"].min(), prep.df["ts_ns"].max()) if prep.height else (0, 0)
    return Keyed(prep.vantage, prep.capture_file, df, names, span, ordered=True)


def _identities(df: pl.DataFrame) -> pl.DataFrame | None:
    """Return `keyed`'s rows (_KEY, first frame, its time, n, _k) of prepared rows in frame order, in the order
    of their first frames: each identity's first row, found by its hash (one integer column, not a group-by
    on six), with the copies counted among the rows whose hash repeats (few); None when the rows are not in
    frame order or two identities share a hash (then the group-by on the identity itself decides)."""
    if not df["frame"].is_sorted() or df["frame"].null_count():
        return None
    k = df.select(*_KEY, "frame", "ts_ns", pl.struct(list(_KEY)).hash().alias("_k"))
    if tcpmod.KERNEL:
        return _identities_kernel(k)
    again = k.get_column("_k").is_duplicated()
    first = k.filter(k.get_column("_k").is_first_distinct())
    if not again.any():
        return first.select(*_KEY, "frame", "ts_ns", pl.lit(1, pl.Int32).alias("n"), "_k")
    per = k.filter(again).group_by("_k").agg(
        pl.len().cast(pl.Int32).alias("n"),
        pl.any_horizontal(*(pl.col(c).min() != pl.col(c).max() for c in _KEY)).alias("_x"))
    if per.get_column("_x").any():
        return None
    return first.join(per.select("_k", "n"), on="_k", how="left", maintain_order="left").select(
        *_KEY, "frame", "ts_ns", pl.col("n").fill_null(1), "_k")


def _identities_kernel(k: pl.DataFrame) -> pl.DataFrame | None:
    """Return `_identities`' rows of `k` (_KEY, frame, ts_ns, _k; rows in frame order) by one pass of the
    compiled hash table: each identity's first row and its count; None when two identities share a hash."""
    ids, rep, n = tcpmod.hash_ids(k.get_column("_k").to_numpy())
    first = rep == np.arange(len(rep))
    if not first.all() and not tcpmod.same_keys([k.get_column(c).to_numpy() for c in _KEY], rep):
        return None
    counts = np.bincount(ids, minlength=n)[ids[first]].astype(np.int32)
    return k.filter(pl.Series(first)).select(*_KEY, "frame", "ts_ns", pl.Series("n", counts), "_k")


def exact_ids(keys: list[Keyed]) -> list[Keyed]:
    """Return `keys` with ``_k`` one-to-one with the packet identity across all of them: the hashes as they are
    when no two identities share one (checked here), else exact numbers of the distinct identities."""
    frames = [k.df.select("_k", *_KEY) for k in keys if k.df.height]
    if not frames:
        return keys
    s = pl.concat(frames).sort("_k")
    same_k = pl.col("_k") == pl.col("_k").shift(1)
    other = pl.any_horizontal(pl.col(c) != pl.col(c).shift(1) for c in _KEY)
    if not s.select((same_k & other).any()).item():
        return keys
    ids = s.select(_KEY).unique().with_row_index("_k").with_columns(pl.col("_k").cast(pl.UInt64))
    return [Keyed(k.vantage, k.capture_file, k.df.drop("_k").join(ids, on=list(_KEY), how="left", maintain_order="left"),
                  k.names, k.span, k.ordered, ids.height) for k in keys]


def numbered_ids(keys: list[Keyed]) -> list[Keyed]:
    """Return `keys` with ``_k`` numbering the distinct packet identities across all of them 0..n-1
    (`Keyed.ids` = n; `exact_ids` checks the hashes the same way), so that the pairwise steps find an
    identity's row in another capture by indexing an array (`_rows_of`) instead of joining on a hash."""
    frames = [k.df for k in keys if k.df.height]
    if not frames:
        return keys
    dense, n = (_numbered_kernel if tcpmod.KERNEL else _numbered_sorted)(frames)
    if dense is None:
        return exact_ids(keys)          # two identities share a hash: numbered by the identities themselves
    out, at = [], 0
    for k in keys:
        h = k.df.height
        if h:
            df = k.df.with_columns(pl.Series("_k", dense[at:at + h], pl.UInt64))
            at += h
            k = Keyed(k.vantage, k.capture_file, df, k.names, k.span, k.ordered, n)
        out.append(k)
    return out


def _numbered_kernel(frames: list[pl.DataFrame]) -> tuple[np.ndarray | None, int]:
    """Return `numbered_ids`' numbers of the keyed rows `frames` (in order, concatenated) and how many, by the
    compiled hash table (numbers in order of first appearance); None when two identities share a hash.
    Only the hashes and, one at a time, each identity column are put together: not a sorted copy of all."""
    ids, rep, n = tcpmod.hash_ids(np.concatenate([f.get_column("_k").to_numpy() for f in frames]))
    if not (rep == np.arange(len(rep))).all():
        for c in _KEY:
            if not tcpmod.same_keys([np.concatenate([f.get_column(c).to_numpy() for f in frames])], rep):
                return None, 0
    return ids.view(np.uint64), n


def _numbered_sorted(frames: list[pl.DataFrame]) -> tuple[np.ndarray | None, int]:
    """Return `_numbered_kernel`'s result by a sort of the hashes (numbers in the hashes' order)."""
    s = pl.concat([f.select("_k", *_KEY) for f in frames]).with_row_index("_r").sort("_k")
    same_k = pl.col("_k") == pl.col("_k").shift(1)
    other = pl.any_horizontal(pl.col(c) != pl.col(c).shift(1) for c in _KEY)
    if s.select((same_k & other).any()).item():
        return None, 0
    # the hashes are exact: the sorted hashes' run numbers, put back in the rows' order
    run = s.select((~same_k).fill_null(True).cum_sum().cast(pl.Int64) - 1).to_series().to_numpy()
    dense = np.empty(s.height, np.uint64)
    dense[s.get_column("_r").to_numpy()] = run
    return dense, int(run[-1]) + 1


def _rows_of(ids: int, k: pl.Series) -> np.ndarray:
    """Return per identity number 0..ids-1 its row in `k` (the ``_k`` column of rows with distinct
    identities), -1 where absent."""
    pos = np.full(ids, -1, np.int64)
    pos[k.to_numpy()] = np.arange(len(k))
    return pos


def _matched(left: pl.DataFrame, right: pl.DataFrame, ids: int, how: str = "inner") -> pl.DataFrame:
    """Return `left` joined on ``_k`` with `right` (distinct ``_k``, numbered by `numbered_ids`: ``ids``), left's
    rows in their order with right's other columns beside (`how` "left": null where unmatched), by array
    look-ups instead of a hash join."""
    at = _rows_of(ids, right.get_column("_k"))[left.get_column("_k").to_numpy()]
    hit = at >= 0
    if how == "inner":
        left, at = left.filter(pl.Series(hit)), at[hit]
        idx = pl.Series("_i", at)
    else:
        idx = pl.Series("_i", at).to_frame().select(pl.when(pl.col("_i") >= 0).then(pl.col("_i"))).to_series()
    return left.hstack(right.drop("_k").select(pl.all().gather(idx)).get_columns())


def rfc3550_jitter(abs_d: pl.Expr) -> pl.Expr:
    """Return the RFC 3550 jitter J_i = J_{i-1} + (|D_i| - J_{i-1})/16, J_0 = 0 (first |D| must be 0)."""
    # The recurrence is an exponentially weighted mean with alpha 1/16 whose first input is J_0 = 0.
    return abs_d.cast(pl.Float64).ewm_mean(alpha=1 / 16, adjust=False)


def _in_arrival_order(owd: pl.DataFrame) -> bool:
    """Return whether the rows of `owd` are in (fh, ts_b, frame_b) order, strictly (no nulls: matched rows)."""
    if owd.height < 2 or any(owd.get_column(c).null_count() for c in ("fh", "ts_b", "frame_b")):
        return owd.height < 2
    fh, tb, fb = (owd.get_column(c).to_numpy() for c in ("fh", "ts_b", "frame_b"))
    same_f, same_t = fh[1:] == fh[:-1], tb[1:] == tb[:-1]
    up = (fh[1:] > fh[:-1]) | same_f & ((tb[1:] > tb[:-1]) | same_t & (fb[1:] > fb[:-1]))
    return bool(up.all())


def _arrival_jitter(owd: pl.DataFrame) -> pl.Series:
    """Return the RFC 3550 jitter per row of `owd` (rows in a's order per flow), computed in b's arrival order."""
    jitter = rfc3550_jitter((pl.col("owd_ns") - pl.col("owd_ns").shift(1).over("fh")).abs().fill_null(0)).over("fh")
    if _in_arrival_order(owd):
        # nothing reordered between the captures (the common case): b's order is a's, no sort
        return owd.select(jitter.alias("jitter_ns")).to_series()
    # only the three columns the jitter reads go into b's order and back: not every column by two sorts
    perm = _arrival_perm(owd)
    j = owd.select(pl.col("fh", "owd_ns").gather(perm)).select(jitter).to_series().to_numpy()
    out = np.empty(len(j), np.float64)
    out[perm.to_numpy()] = j
    return pl.Series("jitter_ns", out, pl.Float64)


def _arrival_perm(owd: pl.DataFrame) -> pl.Series:
    """Return the permutation putting the rows of `owd` in (fh, ts_b, frame_b) order: by one packed int64 key
    when the rows come grouped by rising fh (`pair_tables` leaves them so) and the ranges fit 63 bits."""
    by_three = owd.select(pl.arg_sort_by("fh", "ts_b", "frame_b")).to_series
    if any(owd.get_column(c).null_count() for c in ("fh", "ts_b", "frame_b")) or not owd.get_column("fh").is_sorted():
        return by_three()
    lo = owd.select(pl.col("ts_b", "frame_b").min()).row(0)
    hi = owd.select(pl.col("ts_b", "frame_b").max()).row(0)
    nf = owd.select(pl.col("fh").n_unique()).item()
    nt, nb = hi[0] - lo[0] + 1, hi[1] - lo[1] + 1
    if nf * nt * nb >= 1 << 63:
        return by_three()
    # (the flows' run numbers are their order: fh rises; a packet's frame at b is its own, so no key ties)
    key = (pl.col("fh").rle_id().cast(pl.Int64) * nt + (pl.col("ts_b") - lo[0])) * nb + (pl.col("frame_b") - lo[1])
    return owd.select(key.arg_sort()).to_series()


def loss_runs(lost: pl.DataFrame, by: str) -> pl.DataFrame:
    """Return one row per run of consecutive lost packets (rows in sending order; `lost` boolean column)."""
    runs = lost.with_columns((pl.col("lost") != pl.col("lost").shift(1).over(by)).fill_null(True)
                             .cum_sum().over(by).alias("_run"))
    return (runs.filter(pl.col("lost")).group_by(by, "_run")
            .agg(pl.col("ts_ns").first().alias("start_ts_ns"), pl.col("ts_ns").last().alias("end_ts_ns"),
                 pl.len().alias("length"), pl.col("frame_a").first().alias("first_frame_a"))
            .drop("_run"))


def pair_tables(a: Keyed, b: Keyed, flows: pl.Series | None = None,
                guard_min_ns: int = LOSS_GUARD_MIN_NS, owd_flows: pl.Series | None = None) -> dict[str, pl.DataFrame]:
    """Return owd/loss/loss_bursts for the flows (hashes `flows`, default all) sent from `a` to `b`
    (owd rows only for the hashes `owd_flows` when given)."""
    ak, bk = a.df, b.df
    if flows is not None:
        ak, bk = ak.filter(pl.col("fh").is_in(flows.implode())), bk.filter(pl.col("fh").is_in(flows.implode()))
    bk = bk.select("_k", pl.col("frame").alias("frame_b"), pl.col("ts_ns").alias("ts_b"), pl.col("n").alias("n_b"))
    # on the identity's number (`exact_ids`): one integer column instead of six
    lk = ak.filter(pl.col("n") == 1).select("fh", "_k", pl.col("frame").alias("frame_a"), "ts_ns")
    ids = a.ids if a.ids and a.ids == b.ids else 0
    lk = (_matched(lk, bk, ids, "left") if ids else lk.join(bk, on="_k", how="left", maintain_order="left")).drop("_k")
    if not a.ordered:
        lk = lk.sort("fh", "ts_ns", "frame_a")
    lk = lk.with_columns(pl.when(pl.col("n_b") == 1).then(pl.col("ts_b") - pl.col("ts_ns")).alias("owd_ns"))
    lit = [pl.lit(v, pl.Utf8).alias(k) for k, v in (("vantage_a", a.vantage), ("vantage_b", b.vantage),
                                                      ("capture_file_a", a.capture_file),
                                                      ("capture_file_b", b.capture_file))]
    # IPDV over consecutive packets in a's order (lost or ambiguous neighbours give null).
    owd = (lk.with_columns((pl.col("owd_ns") - pl.col("owd_ns").shift(1).over("fh")).alias("ipdv_ns"))
           .filter(pl.col("owd_ns").is_not_null()).drop("n_b"))
    owd = owd.with_columns(_arrival_jitter(owd).alias("jitter_ns"))
    # Loss window: while b recorded, and a guard before its end (a later packet could be in flight);
    # a packet sent before b's first record minus the flow's smallest delay would have come too early.
    guard = owd.group_by("fh").agg(pl.max_horizontal(pl.col("owd_ns").max(), pl.lit(guard_min_ns)).alias("_g"),
                                   pl.col("owd_ns").min().clip(lower_bound=0).alias("_m"))
    win = lk.select("fh", "ts_ns", "frame_a", pl.col("n_b").is_null().alias("lost")).join(
        guard, on="fh", how="left").with_columns(
        (pl.lit(b.span[0]) - pl.col("_m").fill_null(0)).alias("window_start_ns"),
        (pl.lit(b.span[1]) - pl.col("_g").fill_null(guard_min_ns)).alias("window_end_ns"))
    # (`lk` is in (fh, ts_ns, frame_a) order, which the join keeping the left order and the filter keep)
    win = win.filter(pl.col("ts_ns").is_between(pl.col("window_start_ns"), pl.col("window_end_ns")))
    bursts = loss_runs(win.select("fh", "ts_ns", "frame_a", "lost"), "fh")
    per = bursts.group_by("fh").agg(pl.len().alias("bursts"), pl.col("length").mean().alias("mean_burst_len"),
                                    pl.col("length").max().alias("max_burst_len"))
    names = a.names.select("fh", "flow")
    loss = (win.group_by("fh").agg(pl.col("window_start_ns", "window_end_ns").first(),
                                   pl.len().alias("sent"), pl.col("lost").sum().cast(pl.Int64).alias("lost"))
            .join(per, on="fh", how="left").join(names, on="fh")
            .with_columns(pl.col("bursts", "max_burst_len").fill_null(0),
                          (pl.col("lost") / pl.col("sent")).alias("loss_ratio"), *lit))
    bursts = bursts.join(names, on="fh").with_columns(*lit).sort("fh", "start_ts_ns", "first_frame_a")
    if owd_flows is not None:
        owd = owd.filter(pl.col("fh").is_in(owd_flows.implode()))
    owd = owd.join(names, on="fh", how="left", maintain_order="left")
    return {"owd": conform(owd.drop("fh", "ts_b").with_columns(*lit), OWD),
            "loss": conform(loss.drop("fh").sort("flow"), LOSS), "loss_bursts": conform(bursts.drop("fh"), LOSS_BURSTS)}


def _median_delay(a: Keyed, b: Keyed) -> pl.DataFrame:
    """Return (fh, d): per flow seen at both, the median delay from `a` to `b` of its matched packets."""
    both = (a.df.filter(pl.col("n") == 1).select("fh", "_k", "ts_ns")
            .join(b.df.filter(pl.col("n") == 1).select("_k", pl.col("ts_ns").alias("ts_b")), on="_k"))
    return both.group_by("fh").agg((pl.col("ts_b") - pl.col("ts_ns")).median().alias("d"))


def _oriented(a: Keyed, b: Keyed) -> pl.DataFrame:
    """Return (fh, d, fwd): per flow seen at both, its median delay a -> b and whether it goes a -> b."""
    med = _median_delay(a, b).join(a.names.select("fh", "conn", "dir", "src", "dst"), on="fh")
    # The sign of one flow's median delay is the clock alignment's error whenever the true delay is
    # smaller (two captures on one wire: ~10 us against ~20 us of alignment error), so flows of one
    # path could be oriented both ways.  A conversation seen both ways at both captures is oriented
    # by its data delay minus its reverse delay: the sum of the two one-way delays, the clock error
    # cancelling.  Its endpoints then say which side of the pair each address is on, and a one-way
    # flow (UDP) goes from its source's side; only a flow with neither is left to its median's sign.
    rev = med.select("conn", pl.when(pl.col("dir") == "a").then(pl.lit("b")).otherwise(pl.lit("a")).alias("dir"),
                     pl.col("d").alias("_dr"))
    med = med.join(rev, on=["conn", "dir"], how="left").with_columns(
        pl.when(pl.col("d") != pl.col("_dr")).then(pl.col("d") > pl.col("_dr")).alias("_conv"))
    sure = med.filter(pl.col("_conv").is_not_null())
    side = (pl.concat([sure.select(pl.col("src").alias("addr"), pl.col("_conv").cast(pl.Float64).alias("_a")),
                       sure.select(pl.col("dst").alias("addr"), (~pl.col("_conv")).cast(pl.Float64).alias("_a"))])
            .group_by("addr").agg(pl.col("_a").mean()))
    # vote of the two ends: 1 = source on a's side / destination on b's side, 0 = the reverse
    med = (med.join(side.rename({"addr": "src", "_a": "_s"}), on="src", how="left")
           .join(side.rename({"addr": "dst", "_a": "_t"}), on="dst", how="left")
           .with_columns(pl.mean_horizontal(pl.col("_s"), 1 - pl.col("_t")).alias("_v")))
    fwd = (pl.when(pl.col("_conv").is_not_null()).then(pl.col("_conv"))
           .when(pl.col("_v").is_not_null() & (pl.col("_v") != 0.5)).then(pl.col("_v") > 0.5)
           .otherwise(pl.col("d") >= 0))
    return med.select("fh", "d", fwd.alias("fwd"))


def orient(a: Keyed, b: Keyed) -> tuple[pl.Series, pl.Series]:
    """Return the flow hashes going a -> b and those going b -> a (`_oriented`: a conversation's two
    directions where both are seen, else the side of the flow's endpoints, else the median delay's sign)."""
    o = _oriented(a, b)
    return o.filter(pl.col("fwd"))["fh"], o.filter(~pl.col("fwd"))["fh"]


def between_captures(preps: list[Prepared], guard_min_ns: int = LOSS_GUARD_MIN_NS,
                     pairs: str = "adjacent") -> dict[str, pl.DataFrame]:
    """Return owd/loss/loss_bursts for every ordered pair of prepared captures sharing a flow (`between_keyed`)."""
    return between_keyed([keyed(p) for p in preps], guard_min_ns, pairs)


def _paths(keys: list[Keyed], ok: list[int]) -> pl.DataFrame:
    """Return (fh, cap, rank): for each flow, the captures that saw it in the order it passed them.

    Each conversation is measured against one pivot capture (the one seeing the most packet
    identities, of those that saw the conversation): per capture, the median delay of the flow's
    matched packets from the pivot (`d`).  Where both directions are matched, half the data delay
    minus the reverse delay is a signed distance along the path with the clock error cancelled
    (`_oriented`'s rule); a one-way flow takes the side its endpoints are on by those conversations,
    else its median's sign.  One join over all captures, so a bundle of many captures costs what
    its packets cost, not the square of its captures.
    """
    frames = [keys[i].df.filter(pl.col("n") == 1).select("fh", "_k", "ts_ns", pl.lit(i, pl.Int32).alias("cap"))
              for i in ok]
    allk = pl.concat(frames)
    names = pl.concat([keys[i].names for i in ok]).unique("fh", keep="first")
    # (each capture's rows and flows counted on its own table: no group-by over all of them)
    counts = [(-f.height, i) for f, i in zip(frames, ok) if f.height]
    rank = {c: r for r, (_, c) in enumerate(sorted(counts))}
    seen = (pl.concat([f.select(pl.col("fh").unique(), pl.lit(i, pl.Int32).alias("cap")) for f, i in zip(frames, ok)])
            .join(names.select("fh", "conn"), on="fh")
            .with_columns(pl.col("cap").replace_strict(rank, return_dtype=pl.Int32).alias("_rk")))
    pivot = seen.group_by("conn").agg(pl.col("cap").sort_by("_rk").first().alias("piv"))
    piv_of = names.select("fh", "conn").join(pivot, on="conn")
    at_piv = _pivot_rows(frames, ok, piv_of)
    ids = keys[ok[0]].ids if all(keys[i].ids == keys[ok[0]].ids for i in ok) else 0
    d = (_pivot_delays(frames, ok, at_piv, ids)
         .join(names.select("fh", "conn", "dir", "src", "dst"), on="fh").join(pivot, on="conn"))
    rev = d.select("conn", "cap", pl.when(pl.col("dir") == "a").then(pl.lit("b")).otherwise(pl.lit("a")).alias("dir"),
                   pl.col("d").alias("_dr"))
    d = d.join(rev, on=["conn", "cap", "dir"], how="left").with_columns(
        pl.when((pl.col("d") != pl.col("_dr")) & (pl.col("cap") != pl.col("piv")))
        .then((pl.col("d") - pl.col("_dr")) / 2).alias("_conv"))
    # Which side of (pivot, capture) each address is on, by the conversations: 1 = the pivot's.
    sure = d.filter(pl.col("_conv").is_not_null())
    side = (pl.concat([sure.select("piv", "cap", pl.col("src").alias("addr"), (pl.col("_conv") > 0).cast(pl.Float64).alias("_a")),
                       sure.select("piv", "cap", pl.col("dst").alias("addr"), (pl.col("_conv") < 0).cast(pl.Float64).alias("_a"))])
            .group_by("piv", "cap", "addr").agg(pl.col("_a").mean()))
    d = (d.join(side.rename({"addr": "src", "_a": "_s"}), on=["piv", "cap", "src"], how="left")
         .join(side.rename({"addr": "dst", "_a": "_t"}), on=["piv", "cap", "dst"], how="left")
         .with_columns(pl.mean_horizontal(pl.col("_s"), 1 - pl.col("_t")).alias("_v")))
    fwd = (pl.when(pl.col("_v").is_not_null() & (pl.col("_v") != 0.5)).then(pl.col("_v") > 0.5)
           .otherwise(pl.col("d") >= 0))
    d = d.with_columns(
        pl.when(pl.col("cap") == pl.col("piv")).then(pl.lit(0.0))
        .when(pl.col("_conv").is_not_null()).then(pl.col("_conv"))
        .otherwise(pl.col("d").abs().cast(pl.Float64) * pl.when(fwd).then(1.0).otherwise(-1.0)).alias("pos"),
        # ties (copies of one capture: every distance 0) go downstream of the pivot in capture order
        pl.when(pl.col("cap") == pl.col("piv")).then(0)
        .when(pl.col("_conv").is_not_null()).then(pl.col("_conv").sign().cast(pl.Int32))
        .when(fwd).then(1).otherwise(-1).alias("_sg"))
    path = (d.sort("fh", "pos", "_sg", "cap").select("fh", "cap")
            .with_columns(pl.int_range(pl.len(), dtype=pl.Int32).over("fh").alias("rank")))
    return _refine(path, allk, names, ids)


def _pivot_rows(frames: list[pl.DataFrame], ok: list[int], piv_of: pl.DataFrame) -> pl.DataFrame:
    """Return (_k, _tp) of the rows of `frames` (fh, _k, ts_ns; frames[j] holds capture ok[j]) at their flow's
    pivot capture (`piv_of`: fh -> piv): each pivot's rows picked from its own frame by the flow hash alone,
    not by a join of every capture's rows on (flow, capture)."""
    parts = [frames[ok.index(piv)].filter(pl.col("fh").is_in(pl.Series(fhs, dtype=frames[0].schema["fh"]).implode()))
             for piv, fhs in piv_of.group_by("piv").agg("fh").iter_rows()]
    return pl.concat(parts or [frames[0].clear()]).select("_k", pl.col("ts_ns").alias("_tp"))


def _pivot_delays(frames: list[pl.DataFrame], ok: list[int], at_piv: pl.DataFrame, ids: int) -> pl.DataFrame:
    """Return (fh, cap, d): per flow and capture, the median delay of its packets from their time at the pivot
    (`at_piv`: _k, _tp), grouped capture by capture on the flow hash alone (a group-by on (flow, capture) over
    every capture's rows encodes both keys of each row)."""
    med = (pl.col("ts_ns") - pl.col("_tp")).median().alias("d")
    # (the pivot's row of each identity number found once, for every capture's look-ups)
    pos = _rows_of(ids, at_piv.get_column("_k")) if ids else None
    tp = at_piv.get_column("_tp")
    parts = []
    for f, cap in zip(frames, ok):
        if pos is None:
            m = f.join(at_piv, on="_k")
        else:
            at = pos[f.get_column("_k").to_numpy()]
            hit = at >= 0
            m = f.filter(pl.Series(hit)).with_columns(tp.gather(pl.Series(at[hit])))
        parts.append(m.group_by("fh").agg(med).select("fh", pl.lit(cap, pl.Int32).alias("cap"), "d"))
    return pl.concat(parts)


def _refine(path: pl.DataFrame, allk: pl.DataFrame, names: pl.DataFrame, ids: int = 0) -> pl.DataFrame:
    """Return the path order with neighbours swapped where their own delay says the order is reversed.

    A distance from a far pivot is a median of delays spread by every queue between them: two
    captures a few microseconds apart on one wire can come out in either order.  Between the two
    themselves the delays are tight, so neighbours are compared directly (odd-even transposition, the
    conversation's reverse delay cancelling the clock error as in `_oriented`), a few passes, each one
    join over the packets of the pairs compared.
    """
    rev = names.join(names.select("conn", "dir", pl.col("fh").alias("_rfh")), on="conn").filter(
        pl.col("dir") != pl.col("dir_right")).select("fh", "_rfh")
    # medians of the pairs compared so far: the first pass measures the neighbours of both parities in
    # one join over the packets, later passes only the pairs a swap made neighbours
    known = pl.DataFrame(schema={"fh": pl.UInt64, "_a": pl.Int32, "_b": pl.Int32, "_d": pl.Float64})
    for p in range(2 * REFINE_PASSES):
        adjacent = path.join(path.select("fh", pl.col("cap").alias("_b"), (pl.col("rank") - 1).alias("rank")),
                             on=["fh", "rank"])
        pairs = adjacent.filter(pl.col("rank") % 2 == p % 2)
        if pairs.height == 0:
            break
        known = _pair_medians(adjacent, rev, allk, known, ids)
        med = known
        cmp = (pairs.join(rev, on="fh", how="left")
               .join(med.rename({"_a": "cap"}), on=["fh", "cap", "_b"], how="left")
               .join(med.rename({"fh": "_rfh", "_a": "cap", "_d": "_dr"}), on=["_rfh", "cap", "_b"], how="left")
               .with_columns(pl.when(pl.col("_dr").is_not_null() & (pl.col("_d") != pl.col("_dr")))
                             .then(pl.col("_d") < pl.col("_dr")).alias("_swap")))
        swaps = cmp.filter(pl.col("_swap").fill_null(False))
        if swaps.height == 0 and p % 2 == 1:
            break
        if swaps.height:
            moved = pl.concat([swaps.select("fh", "cap", (pl.col("rank") + 1).alias("_nr")),
                               swaps.select("fh", pl.col("_b").alias("cap"), "rank").rename({"rank": "_nr"})])
            path = (path.join(moved, on=["fh", "cap"], how="left")
                    .with_columns(pl.coalesce("_nr", "rank").alias("rank")).drop("_nr"))
    return path.sort("fh", "rank")


def _pair_medians(pairs: pl.DataFrame, rev: pl.DataFrame, allk: pl.DataFrame, known: pl.DataFrame,
                  ids: int = 0) -> pl.DataFrame:
    """Return `known` (fh, _a, _b, _d) with the median delay from capture _a to _b added for each pair of
    `pairs` (fh, cap, _b) and its conversation's reverse flow (`rev`: fh -> _rfh) not in it yet (``_k``
    numbered 0..ids-1 by `numbered_ids`: matched by array look-ups)."""
    want = pairs.join(rev, on="fh", how="left")
    want = pl.concat([want.select("fh", "cap", "_b"),
                      want.filter(pl.col("_rfh").is_not_null()).select(pl.col("_rfh").alias("fh"), "cap", "_b")]).unique()
    want = want.join(known.select("fh", pl.col("_a").alias("cap"), "_b"), on=["fh", "cap", "_b"], how="anti")
    if want.height == 0:
        return known
    # one join per pair of captures on the identity alone: a join on (identity, capture) over all the
    # captures at once costs twice as much; each capture's rows are joined once per neighbour it has.
    # The rows of one pair are taken from `allk` only when it is measured: partitioning every capture's
    # rows up front held a second copy of them all.
    meds = [known]
    for ca, cb in want.select("cap", "_b").unique().sort("cap", "_b").iter_rows():
        flows = want.filter((pl.col("cap") == ca) & (pl.col("_b") == cb)).get_column("fh")
        g = allk.lazy().filter((pl.col("cap") == ca) & pl.col("fh").is_in(flows.implode())).select(
            "fh", "_k", pl.col("ts_ns").alias("_ta")).collect()
        at_b = allk.lazy().filter(pl.col("cap") == cb).select("_k", "ts_ns").collect()
        m = _matched(g, at_b, ids) if ids else g.join(at_b, on="_k")
        del g, at_b
        meds.append(m.group_by("fh").agg((pl.col("ts_ns") - pl.col("_ta")).median().alias("_d"))
                    .select("fh", pl.lit(ca, pl.Int32).alias("_a"), pl.lit(cb, pl.Int32).alias("_b"), "_d"))
        del m
    return pl.concat(meds, how="vertical_relaxed")


def between_keyed(keys: list[Keyed], guard_min_ns: int = LOSS_GUARD_MIN_NS,
                  pairs: str = "adjacent") -> dict[str, pl.DataFrame]:
    """Return owd/loss/loss_bursts between the keyed captures along each flow's path (`_paths`).

    `pairs="adjacent"`: owd for adjacent captures (no third capture lies between them on the flow's
    path), loss for those and from the flow's first capture to each other, and from each to its last
    (so per flow a number of pairs linear in its captures); `pairs="all"`: both for every pair.
    """
    if pairs not in ("adjacent", "all"):
        raise ValueError(f"pairs must be 'adjacent' or 'all', not {pairs!r}")
    if sum(1 for k in keys if k.df.height) < 2:
        return {n: conform(None, s) for n, s in _PAIR_TABLES.items()}
    return _between_numbered(numbered_ids(keys), guard_min_ns, pairs)


_PAIR_TABLES = {"owd": OWD, "loss": LOSS, "loss_bursts": LOSS_BURSTS}


def _numbers_only(k: Keyed) -> Keyed:
    """Return a numbered capture's keys without the identity's own columns: once ``_k`` numbers the
    identities (`numbered_ids`), the pairwise steps read only it, fh, frame, ts_ns and n."""
    return Keyed(k.vantage, k.capture_file, k.df.drop(list(_KEY[1:]), strict=False), k.names, k.span, k.ordered,
                 k.ids)


def _between_numbered(keys: list[Keyed], guard_min_ns: int, pairs: str) -> dict[str, pl.DataFrame]:
    """Return `between_keyed`'s tables of keys numbered by one `numbered_ids` call (two or more not empty)."""
    ok = [i for i, k in enumerate(keys) if k.df.height]
    path = _paths(keys, ok)
    last = path.group_by("fh").agg(pl.col("rank").max().alias("_last"))
    pj = path.join(path, on="fh", suffix="_d").filter(pl.col("rank") < pl.col("rank_d")).join(last, on="fh")
    adj = pl.col("rank_d") == pl.col("rank") + 1
    if pairs == "adjacent":
        pj = pj.filter(adj | (pl.col("rank") == 0) | (pl.col("rank_d") == pl.col("_last")))
    pj = pj.with_columns((adj | pl.lit(pairs == "all")).alias("_owd"))
    parts: dict[str, list[pl.DataFrame]] = {"owd": [], "loss": [], "loss_bursts": []}
    for (up, down), g in sorted(pj.group_by("cap", "cap_d"), key=lambda t: t[0]):
        owd_flows = g.filter(pl.col("_owd"))["fh"]
        for name, df in pair_tables(keys[up], keys[down], g["fh"], guard_min_ns, owd_flows).items():
            parts[name].append(df)
    return {n: pl.concat(parts[n]) if parts[n] else conform(None, _PAIR_TABLES[n]) for n in parts}


def owd_pair(tl: Timeline, a: str, b: str, guard_min_ns: int = LOSS_GUARD_MIN_NS) -> dict[str, pl.DataFrame]:
    """Return owd/loss/loss_bursts of the flows going from capture `a` to capture `b` (file or vantage),
    whether or not the pair is adjacent (the timeline's `owd` table holds adjacent pairs only)."""
    ka, kb = exact_ids([keyed(prepare(tl.packets(e, columns=_PREPARE_READ), e.kind, e.vantage, e.file))
                        for e in (tl._entry(x) for x in (a, b))])
    fwd, _ = orient(ka, kb)
    if ka.df.height == 0 or kb.df.height == 0 or not fwd.len():
        return {"owd": conform(None, OWD), "loss": conform(None, LOSS), "loss_bursts": conform(None, LOSS_BURSTS)}
    return pair_tables(ka, kb, fwd, guard_min_ns)


# --- module entry ---

def build(tl: Timeline) -> dict[str, pl.DataFrame]:
    """Return every table of this module for a timeline."""
    per: dict[str, list[pl.DataFrame]] = {"flows": [], "flow_series": [], "rtt": []}
    # each capture's RTT samples wait for the pairwise tables without their strings (four a row: flow,
    # vantage, file, method), named only once the captures' identities are freed
    rtts: list[tuple[pl.DataFrame | None, pl.DataFrame, str, str]] = []
    keys = []
    scratch = getattr(tl, "_spill_dir", None)
    # One capture prepared at a time: only its packet identities are kept for the pairwise tables.
    for e in tl.entries():
        p = prepare(tl.packets(e, columns=_PREPARE_READ), e.kind, e.vantage, e.file)
        if p.height == 0:
            continue
        per["flows"].append(flow_totals(p))
        per["flow_series"].append(flow_series(p, tl.bin_ns))
        # what the pairwise tables and the RTT table read later waits in the scratch directory (a spilled
        # timeline), not in the heap while the next capture is prepared
        rows = _rtt_rows(p)
        rtts.append((None if rows is None else park(rows, scratch, "rtt"), p.flows, p.vantage, p.capture_file))
        k = keyed(p)
        keys.append(replace(k, df=park(k.df, scratch, "keyed")))
        del p, rows, k
    if sum(1 for k in keys if k.df.height) < 2:
        pairs = between_keyed(keys)
    else:
        # (rebound here: the identities' own columns are freed, not kept alive by this list)
        keys = [_numbers_only(k) for k in numbered_ids(keys)]
        pairs = _between_numbered(keys, LOSS_GUARD_MIN_NS, "adjacent")
    del keys
    per["rtt"] = [_named_rtt(*r) for r in rtts]
    del rtts
    schemas = {"flows": FLOWS, "flow_series": FLOW_SERIES, "rtt": RTT}
    out = {n: pl.concat(v) if v else conform(None, schemas[n]) for n, v in per.items()}
    out.update(pairs)
    return out


__all__ = ["LOSS_GUARD_MIN_NS", "MAC_RETRY_WINDOW_NS", "NEEDS", "SERIES_MAX_GAP_NS", "TABLES", "Keyed", "Prepared",
           "between_captures", "between_keyed", "build", "flow_series", "flow_totals", "keyed", "loss_runs",
           "numbered_ids", "orient",
           "owd_pair", "pair_tables", "prepare", "rfc3550_jitter", "rtt_samples"]
