"""TCP events per capture: retransmissions (what triggered them, whether they were needed), duplicate ACKs,
out-of-order segments with their reordering extent, zero windows.

Everything is computed per capture (vantage) and per TCP connection (``conn``/``dir`` from
`xlayer.timeline.flowkey`), in the capture's frame order, as Wireshark reads it.  Sequence and acknowledgement
numbers are unwrapped per direction (32-bit wrap) and shown relative to the direction's first sequence
number as Wireshark does (the SYN is 0; without a SYN the first segment seen is 1).

A segment holding data (or SYN/FIN) that starts below the highest sequence number seen before it in its
direction ("next expected", Wireshark's ``nextseq``) and is no keep-alive or zero-window probe is a row of
``retransmissions`` -- so is one not below it whose bytes the receiver proves it had (see ``spurious``: the
capture missed their original) --, classed:

``network_duplicate``
    the network (or the capture) duplicated the packet, the sender did not send it twice (`network_copies`):
    the sender numbers its IP packets and the same IP id, length and TSval were seen before at this vantage
    (within `DUP_WINDOW_NS`), or -- whatever the IP ids -- it is byte-identical at the IP and TCP layers to
    the previous transmission of its sequence number here (same IP id, length, flags, ACK, window, TSval
    and TSecr) and came within `COPY_WINDOW_NS` of it: a sender's retransmission carries a new TSval (RFC
    7323) and usually a new IP id, and comes at least about a round trip after its original.  Not a
    retransmission: no trigger, never spurious, and (`flows`' ``rtt`` too) Karn's rule ignores it;
``reorder``
    its bytes were never seen before at this vantage and it was sent *before* the segment that carried
    the highest sequence number (lower IP id, else lower TSval, else -- weakest -- it came within the
    handshake RTT (3 ms without one) of it, Wireshark's rule): it is the original, arriving late;
``spurious``
    a real retransmission whose bytes had reached the receiver already; the method says how that is known,
    strongest first: ``receiver_capture`` (a receiver-side capture of the bundle saw an earlier
    transmission of these bytes: same raw sequence number and IP id / TSval), ``dsack`` (an ACK carries a
    D-SACK block covering it, RFC 2883), ``receiver_vantage`` (this capture is on the receiver's side and
    saw the original), ``eifel`` (the first ACK covering it echoes a TSecr older than the first retransmission
    of its run -- retransmissions with no new data between them -- or that of an earlier transmission of its
    own bytes, RFC 3522: a delayed ACK's echo of the retransmission before it is no evidence),
    ``already_acked`` (the receiver had ACKed these bytes before it was seen, Wireshark's rule);
    a segment that does not start below "next expected" is a retransmission too when the receiver proves
    it had the bytes already, the capture having missed their original (``original_captured`` false): it
    had ACKed them (an ACK earlier in both frame order and time reaches its end), or the first ACK to
    cover it after it is a D-SACK for it (the receiver's answer to it was "duplicate"; seen before any
    other transmission of its sequence number here).  Both make it ``spurious``;
``fast`` / ``rto``
    a needed (or undecided) retransmission, by its ``trigger``: ``fast`` after >= 2 duplicate ACKs for
    its sequence number or a SACK above it; ``rto`` after a silence at least the RTO estimate (RFC 6298
    srtt + 4 rttvar from this vantage's RTT samples, Karn's rule, at least 200 ms as Linux); ``tlp`` after
    a shorter silence of at least two smoothed RTTs on the last segment sent (a tail loss probe, classed
    ``rto``: a timer sent it); a retransmission following one of those inside its recovery episode (below
    the episode's recovery point) inherits its trigger; ``unknown`` when none applies (classed ``rto``: no
    ACK asked for it, so a timer did).  A spurious row keeps its trigger.

Where a capture sits (``side``): for each direction of a connection, ``sender`` when the capture is
nearer that direction's sender, ``receiver`` when nearer its receiver.  Decided from IP TTLs (hops since
the sender = the next initial TTL of 32/64/128/255 minus the TTL; the direction with fewer hops comes from
the nearer end), else from the handshake (the end that answers faster is the near one: at the server
the SYN-ACK follows the SYN at once, at the client the ACK follows the SYN-ACK at once), else ``unknown``.
A retransmission that looks spurious at the sender may have been needed at the receiver: only
receiver-side evidence (a receiver capture, D-SACK, Eifel, ACKs) decides ``spurious``; a middle capture
that saw the original pass proves nothing.

`classify(df)` works on one packet table (one capture, no bundle needed); the timeline's `build` adds
the evidence of the bundle's other (receiver-side) captures, whose ``ts_ns`` are on one clock.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np
import polars as pl

from xlayer.metrics.keys import index_rows, with_sorted_ids
from xlayer.metrics.schema import Column, conform, register
from xlayer.timeline.flowkey import flow_exprs

try:
    from xlayer.metrics import _tcpk
except ImportError:  # pragma: no cover - built without a C compiler: the polars expressions do the same
    _tcpk = None

# The compiled state machines are used when built (setup.py); XLAYER_PURE_PYTHON=1 turns them off, as it does
# the parsers' (tests compare both ways).
KERNEL = _tcpk is not None and os.environ.get("XLAYER_PURE_PYTHON", "") in ("", "0")


def hash_ids(h: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Return per row of the 64-bit hashes `h` its hash's number (0..n-1, in order of first appearance), the
    row where that hash first appears, and n (`_tcpk.hash_ids`: one pass, no sort; needs the kernel)."""
    ids, rep = np.empty(len(h), np.int64), np.empty(len(h), np.int64)
    n = _tcpk.hash_ids(np.ascontiguousarray(h.view(np.int64)), ids, rep)
    return ids, rep, n


def same_keys(cols: list[np.ndarray], rep: np.ndarray) -> bool:
    """Return whether every row has the key values (`cols`, one array per key column) of the row `rep` names
    (`hash_ids`): False when two distinct keys shared a hash.  (A null left in a float column is NaN, equal
    to nothing: a mismatch, not a match.)"""
    again = np.flatnonzero(rep != np.arange(len(rep)))      # only rows whose hash was seen before can differ
    return all(bool((c[rep[again]] == c[again]).all()) for c in cols)

NEEDS = ("frame", "ts_ns", "ip_version", "ip_src", "ip_dst", "ip_proto", "ip_id", "ip_ttl", "ip_frag_offset",
         "sport", "dport", "tcp_seq", "tcp_ack", "tcp_flags", "tcp_win", "tcp_len", "tcp_wscale", "tcp_tsval",
         "tcp_tsecr", "tcp_sack")

FIN, SYN, RST, ACK = 0x01, 0x02, 0x04, 0x10
MIN_RTO_NS = 200_000_000          # Linux's RTO floor (and the sims'): RFC 6298's 1 s is not what stacks use
INITIAL_RTO_NS = 1_000_000_000    # RFC 6298 before any RTT sample
TLP_MIN_NS = 10_000_000           # Linux's probe timeout floor
DUP_WINDOW_NS = 1_000_000_000     # a network duplicate follows its twin within this
# A byte-identical copy (same IP id -- often 0 or constant, or none on IPv6 --, TSval/TSecr, ACK, window)
# within this is a duplicate made by the network or the capture setup, whatever the IP ids: a sender
# retransmits a segment at least about one RTT after sending it (fast retransmit waits for duplicate ACKs
# that later segments cause; TLP and RTO wait >= 2 srtt and >= 200 ms on Linux), and its copy would also
# need the same TSval (a 1 ms clock on Linux, RFC 7323 asks 1 ms to 1 s) and the same ACK and window.
# Half a millisecond is below the RTT of any path but a LAN's; duplicates seen in real captures (a SPAN
# port or a bridge loop copying the frame) are microseconds apart.
COPY_WINDOW_NS = 500_000
OOO_DEFAULT_NS = 3_000_000        # Wireshark's out-of-order window without a handshake RTT
G = ["conn", "dir"]
K = "_g"      # `prepare`'s integer number of (conn, dir), for its windows

_C = Column
RETRANSMISSIONS = register("retransmissions", (
    _C("capture_file", pl.String, "", "capture the segment was seen in"),
    _C("vantage", pl.String, "", "vantage of that capture"),
    _C("side", pl.String, "", "where the capture sits for this flow: sender, receiver or unknown (see module doc)"),
    _C("frame", pl.Int64, "", "frame number of the segment in capture_file (1-based, as Wireshark)"),
    _C("ts_ns", pl.Int64, "ns", "time the segment was seen (reference clock)"),
    _C("flow", pl.String, "", "flow (direction) of the segment"),
    _C("conn", pl.String, "", "connection (both directions)"),
    _C("seq", pl.Int64, "", "relative sequence number (as Wireshark shows it)"),
    _C("seq_raw", pl.UInt32, "", "raw sequence number (tcp.seq_raw)"),
    _C("len", pl.Int64, "B", "TCP payload length"),
    _C("class", pl.String, "", "rto, fast, spurious, reorder or network_duplicate"),
    _C("trigger", pl.String, "", "rto, tlp, fast or unknown (reorder / network_duplicate: null)"),
    _C("spurious", pl.Boolean, "", "the bytes had reached the receiver before: the retransmission was not needed"),
    _C("method", pl.String, "", "what decided the class (see module doc)"),
    _C("confidence", pl.Float64, "", "0..1: how sure the method is"),
    _C("original_frame", pl.Int64, "", "first earlier frame at this capture carrying these bytes (null: none)"),
    _C("original_captured", pl.Boolean, "", "this capture recorded an earlier transmission of these bytes "
       "(false: a retransmission whose original it did not record -- lost before it, or missed by it; "
       "null: reorder, the row is the original)"),
    _C("original_ts_ns", pl.Int64, "ns", "its time"),
    _C("silence_ns", pl.Int64, "ns", "time since the connection's previous packet at this capture"),
    _C("rto_estimate_ns", pl.Int64, "ns", "RTO estimate at that time (srtt + 4 rttvar, >= 200 ms)"),
    _C("evidence_capture", pl.String, "", "capture holding the evidence of the method (null: this one)"),
    _C("evidence_frame", pl.Int64, "", "frame of that evidence (the D-SACK / Eifel ACK, the original at the receiver, ...)"),
), "one segment that starts below the highest sequence number seen before it in its direction (or whose bytes "
   "the receiver had already: its original not captured), per capture")

TCP_EVENTS = register("tcp_events", (
    _C("capture_file", pl.String, "", "capture the packet was seen in"),
    _C("vantage", pl.String, "", "vantage of that capture"),
    _C("frame", pl.Int64, "", "frame number in capture_file"),
    _C("ts_ns", pl.Int64, "ns", "time (reference clock)"),
    _C("flow", pl.String, "", "flow (direction) of the packet"),
    _C("conn", pl.String, "", "connection"),
    _C("event", pl.String, "", "dup_ack, out_of_order, zero_window, zero_window_probe, window_full or keep_alive"),
    _C("seq", pl.Int64, "", "relative sequence number"),
    _C("ack", pl.Int64, "", "relative acknowledgement number"),
    _C("count", pl.Int64, "", "dup_ack: its number in the run of duplicates of one ACK (1 = first duplicate)"),
    _C("ref_frame", pl.Int64, "", "dup_ack: the ACK it duplicates; out_of_order: first frame that came earlier "
       "with a higher sequence number"),
    _C("extent_segments", pl.Int64, "", "out_of_order: segments that arrived before it though sent after "
       "(RFC 4737 reordering extent)"),
    _C("extent_bytes", pl.Int64, "B", "out_of_order: their payload bytes"),
    _C("extent_ns", pl.Int64, "ns", "out_of_order: how late it came after the first of them"),
), "one notable TCP packet per capture: duplicate ACK, out-of-order segment, zero window ...")

TABLES = {"retransmissions": RETRANSMISSIONS, "tcp_events": TCP_EVENTS}


# ------------------------------------------------------------------------------------------------
# helpers

def _wrap32(e: pl.Expr) -> pl.Expr:
    """Signed 32-bit value of an int64 difference (sequence arithmetic)."""
    x = e & 0xFFFFFFFF
    return pl.when(x >= 1 << 31).then(x - (1 << 32)).otherwise(x)


def _wrap16(e: pl.Expr) -> pl.Expr:
    x = e & 0xFFFF
    return pl.when(x >= 1 << 15).then(x - (1 << 16)).otherwise(x)


def _rev_runs(col: str, conn: str = "_c") -> pl.Expr:
    """The last value of `col` seen in the other direction before each row, for rows whose conns (column
    `conn`) come in runs, each in frame order (`_conn_ordered`'s)."""
    def last(d: str) -> pl.Expr:
        # filled down the whole column, kept where the value filled in came from this row's conn
        v = pl.when(pl.col("dir") == d).then(pl.col(col))
        src = pl.when(v.is_not_null()).then(pl.col(conn)).forward_fill()
        return pl.when(src == pl.col(conn)).then(v.forward_fill())
    return pl.when(pl.col("dir") == "a").then(last("b")).otherwise(last("a"))


# `prepare` keys the working rows by categorical conn/flow and an enum dir: windows, sorts and joins then
# compare small integers (in the strings' order) instead of hashing the strings; `conform` casts back.
DIR = pl.Enum(["a", "b"])


def _other(d: pl.Expr) -> pl.Expr:
    return pl.when(d == "a").then(pl.lit("b", DIR)).otherwise(pl.lit("a", DIR))


def _initial_ttl(ttl: pl.Expr) -> pl.Expr:
    return (pl.when(ttl <= 32).then(32).when(ttl <= 64).then(64).when(ttl <= 128).then(128).otherwise(255))


def _dir_codes(*frames: pl.DataFrame) -> list[np.ndarray] | None:
    """Return per frame of `prepare`'s rows (categorical conn, `DIR` dir, no nulls) each row's direction as one
    integer (conn's code * 2 + dir's), comparable across the frames; None when a frame has other keys."""
    code = pl.col("conn").to_physical().cast(pl.Int64) * 2 + pl.col("dir").to_physical().cast(pl.Int64)
    if not all(isinstance(f.schema.get("conn"), pl.Categorical) and f.schema.get("dir") == DIR
               and not f.get_column("conn").null_count() and not f.get_column("dir").null_count() for f in frames):
        return None
    return [f.select(code).to_series().to_numpy() for f in frames]


def _per_direction(left: pl.DataFrame, right: pl.DataFrame) -> np.ndarray:
    """Return per row of `left` the row of `right` (one row per direction) with its (conn, dir), -1 where none:
    a look-up by the directions' integer codes (`_dir_codes`) instead of a join hashing both key columns of
    every row of `left`."""
    codes = _dir_codes(left, right)
    if codes is not None and right.height and left.height:
        rows = index_rows(pl.Series(codes[1]), pl.Series(codes[0]))
        if rows is not None:
            return rows.fill_null(-1).to_numpy()
    r = right.select(G).with_row_index("_rr")
    return left.select(G).join(r, on=G, how="left", maintain_order="left").get_column("_rr") \
        .cast(pl.Int64).fill_null(-1).to_numpy()


def _group_of(left: pl.DataFrame, groups: pl.DataFrame, col: str) -> np.ndarray:
    """Return per row of `left` the int64 `col` of its direction's row in `groups` (one per direction), -1 where
    its direction has none (`_per_direction`)."""
    at = _per_direction(left, groups)
    out = np.full(len(at), -1, np.int64)
    hit = at >= 0
    out[hit] = groups.get_column(col).cast(pl.Int64).to_numpy()[at[hit]]
    return out


# ------------------------------------------------------------------------------------------------
# one capture

def prepare(df: pl.DataFrame) -> pl.DataFrame:
    """Return the capture's TCP rows in (conn, dir, frame) order with unwrapped sequence space and the
    per-direction state each row sees (next expected seq, last ACK/window of both directions, dup ACKs)."""
    if "conn" not in df.columns:
        df = df.with_columns(flow_exprs())
    for c in NEEDS:
        if c not in df.columns:
            from parsers.schema import SCHEMA
            df = df.with_columns(pl.lit(None, SCHEMA[c]).alias(c))
    keep = [c for c in ("capture_file", "vantage", "kind") if c in df.columns]
    # lazily: the filter copies only the columns selected
    t = df.lazy().filter((pl.col("ip_proto") == 6) & pl.col("tcp_seq").is_not_null() & pl.col("conn").is_not_null()
                         & (pl.col("ip_frag_offset").fill_null(0) == 0)) \
        .select(*keep, "frame", "ts_ns", "flow", "conn", "dir", "ip_version", "ip_id", "ip_ttl", "tcp_seq",
                "tcp_ack", "tcp_flags", "tcp_win", "tcp_len", "tcp_wscale", "tcp_tsval", "tcp_tsecr", "tcp_sack") \
        .with_columns(pl.col("conn", "flow").cast(pl.Categorical), pl.col("dir").cast(DIR)).collect()
    del df                # the packet table: freed here if the caller holds no other reference to it
    # Rows in (conn, dir, frame) order, sorted and windowed by integers: "_g" numbers the directions in
    # their sort order, "_c" the conns.  (The numbers are found on the two key columns alone, and the rows
    # sorted before the columns below are added: each copy of the table then holds fewer columns.)
    t = t.with_columns(_direction_ids(t))
    # rows in frame order (a capture's are): a stable sort by the one integer is the whole sort
    t = t.sort("_g", maintain_order=True) if t["frame"].is_sorted() else t.sort("_g", "frame")
    f = pl.col("tcp_flags").cast(pl.Int64).fill_null(0)
    t = t.with_columns(
        ((f & SYN) > 0).alias("syn"), ((f & FIN) > 0).alias("fin"), ((f & RST) > 0).alias("rst"),
        ((f & ACK) > 0).alias("ackf"), pl.col("tcp_len").cast(pl.Int64).fill_null(0).alias("len"),
        pl.col("tcp_seq").cast(pl.Int64).alias("_s"), pl.col("tcp_win").cast(pl.Int64).alias("win"),
    )
    t = t.with_columns(pl.col("conn").rle_id().alias("_c"))
    # the rows' permutation into (conn, frame) order and back, for what is computed in a conn's frame order
    order, back = _conn_order(t)
    if KERNEL:
        return _state_kernel(t, order)
    return _state_polars(t, order, back)


def _direction_ids(t: pl.DataFrame) -> pl.Series:
    """Return ``_g`` of `prepare`'s rows (categorical conn, enum dir): `with_sorted_ids` of (conn, dir), the
    distinct pairs found on one integer column (the two codes) and the rows numbered through it."""
    if t.height == 0 or t.get_column("dir").null_count() or t.get_column("conn").null_count():
        return with_sorted_ids(t.select(G), G, "_g").get_column("_g")
    code = (pl.col("conn").to_physical().cast(pl.Int64) * 2 + pl.col("dir").to_physical().cast(pl.Int64)).alias("_cd")
    c = t.select(code, *G)
    ids = c.unique("_cd").sort(G).with_row_index("_g").select("_cd", "_g")
    return c.select("_cd").join(ids, on="_cd", how="left", maintain_order="left").get_column("_g")


def _state_polars(t: pl.DataFrame, order: pl.Series, back: pl.Series) -> pl.DataFrame:
    """Return `prepare`'s rows with the per-direction state added by polars expressions (`_state_kernel`'s
    fallback: the same columns, without the compiled module)."""
    # Sequence numbers unwrapped per direction: the first raw value plus the sum of signed 32-bit steps.
    t = t.with_columns(_wrap32(pl.col("_s").diff().over(K)).fill_null(0).alias("_d"))
    t = t.with_columns((pl.col("_s").first().over(K) + pl.col("_d").cum_sum().over(K)).alias("seq_u"))
    t = t.with_columns(
        (pl.col("seq_u").first().over(K) - pl.when(pl.col("syn").first().over(K)).then(0).otherwise(1)).alias("base"),
        (pl.col("seq_u") + pl.col("len") + pl.col("syn").cast(pl.Int64) + pl.col("fin").cast(pl.Int64)).alias("end_u"),
        (pl.col("len") > 0).alias("data"),
    )
    # ACK numbers: unwrapped in their own stream, anchored near the other direction's first sequence number.
    firsts = t.group_by(G).agg(pl.col("_s").first().alias("_o"), pl.col("base").first().alias("rbase"))
    firsts = firsts.with_columns(_other(pl.col("dir")).alias("dir"))
    t = t.join(firsts, on=G, how="left", maintain_order="left")
    araw = pl.when(pl.col("ackf")).then(pl.col("tcp_ack").cast(pl.Int64))
    t = t.with_columns(araw.alias("_a"))
    t = t.with_columns(pl.col("_a").forward_fill().backward_fill().over(K).alias("_af"))
    t = t.with_columns(_wrap32(pl.col("_af").diff().over(K)).fill_null(0).alias("_ad"),
                       pl.col("_af").first().over(K).alias("_a0"))
    anchor = pl.when(pl.col("_o").is_not_null()).then(pl.col("_o") + _wrap32(pl.col("_a0") - pl.col("_o"))) \
        .otherwise(pl.col("_a0"))
    t = t.with_columns(pl.when(pl.col("ackf")).then(anchor + pl.col("_ad").cum_sum().over(K)).alias("ack_u"))
    t = t.with_columns(pl.col("rbase").fill_null(pl.col("_a0") - 1).alias("rbase"))
    # Per-direction state before each row (Wireshark: nextseq, lastack, window of the same direction).
    t = t.with_columns(
        pl.col("end_u").cum_max().shift(1).over(K).alias("nxt0"),
        pl.col("ack_u").forward_fill().shift(1).over(K).alias("prev_ack"),
        pl.col("win").shift(1).over(K).alias("prev_win"),
    )
    # The rows stay in (conn, dir, frame) order: what needs the connection's frame order is computed in it
    # by the window (order_by) instead of sorting every column back and forth.
    t = t.with_columns(_conn_ordered(t, order, back, _rev_runs("win")).alias("rev_win"))
    # A zero-window probe does not advance "next expected" (as Wireshark): recompute without them.
    t = t.with_columns(((pl.col("len") == 1) & (pl.col("seq_u") == pl.col("nxt0")) & (pl.col("rev_win") == 0))
                       .fill_null(False).alias("zwp"))
    t = t.with_columns(pl.when(~pl.col("zwp")).then(pl.col("end_u")).alias("_e"))
    t = t.with_columns(pl.col("_e").cum_max().shift(1).over(K).alias("nxt"))
    adv = (pl.col("_e") > pl.col("nxt")) | (pl.col("nxt").is_null() & pl.col("_e").is_not_null())
    t = t.with_columns(adv.fill_null(False).alias("adv"))
    t = t.with_columns(
        pl.when(pl.col("adv")).then(pl.col("ts_ns")).forward_fill().shift(1).over(K).alias("nxt_ts"),
        pl.when(pl.col("adv")).then(pl.col("frame")).forward_fill().shift(1).over(K).alias("nxt_frame"),
        pl.when(pl.col("adv")).then(pl.col("ip_id").cast(pl.Int64)).forward_fill().shift(1).over(K).alias("nxt_ipid"),
        pl.when(pl.col("adv")).then(pl.col("tcp_tsval").cast(pl.Int64)).forward_fill().shift(1).over(K)
        .alias("nxt_tsval"),
    )
    seg = (pl.col("len") > 0) | pl.col("syn") | pl.col("fin")
    plain = ~(pl.col("syn") | pl.col("fin") | pl.col("rst"))
    keepalive = (pl.col("len") <= 1) & (pl.col("seq_u") == pl.col("nxt") - 1) & plain
    t = t.with_columns(seg.alias("seg"), keepalive.fill_null(False).alias("keepalive"))
    t = t.with_columns(_idinfo().alias("idinfo"))
    # ACK runs: Wireshark's duplicate ACK (same seq/ack/window, no data, window not 0).
    dup = ((pl.col("len") == 0) & (pl.col("win") != 0) & (pl.col("win") == pl.col("prev_win"))
           & (pl.col("seq_u") == pl.col("nxt")) & (pl.col("ack_u") == pl.col("prev_ack")) & plain)
    t = t.with_columns(dup.fill_null(False).alias("dup0"))
    t = t.with_columns(_conn_ordered(t, order, back, _rev_runs("keepalive")).fill_null(False).alias("rev_ka"))
    t = t.with_columns((pl.col("dup0") & ~pl.col("rev_ka")).alias("dupack"))
    # runs of one ACK value: numbered over the whole table (prev_ack is null on a direction's first row,
    # so each direction starts a new run) -- one integer key for the window instead of (direction, run)
    epoch = (pl.col("ack_u") != pl.col("prev_ack")).fill_null(True).cum_sum()
    t = t.with_columns(epoch.alias("_ep"))
    # (the runs are contiguous: the count since the run's start is the running count less the one before it)
    n = pl.col("dupack").cast(pl.Int64).cum_sum()
    run_start = pl.col("_ep") != pl.col("_ep").shift(1)
    t = t.with_columns(
        (n - pl.when(run_start.fill_null(True)).then(n - pl.col("dupack").cast(pl.Int64)).forward_fill()).alias("dupnum"),
        pl.when(~pl.col("dupack")).then(pl.col("frame")).forward_fill().over(K).alias("dup_ref"))
    t = _sack(t)
    t = t.with_columns(_conn_ordered(t, order, back, _rev_runs("ack_u").alias("rev_ack"),
                                     _rev_runs("dupnum").alias("rev_dup"),
                                     _rev_runs("sack_max").alias("rev_sack"),
                                     _rev_runs("ts_ns").alias("rev_ts"),
                                     pl.when(pl.col("_c") == pl.col("_c").shift(1)).then(pl.col("ts_ns").shift(1))
                                     .alias("prev_conn_ts")))
    return t.drop("_s", "_d", "_e", "_a", "_af", "_ad", "_a0", "_o", "_ep", "tcp_sack", "_g", "_c")


# --- the compiled state machine (xlayer/metrics/_tcpk.c) ---

_NUL = np.iinfo(np.int64).min      # null in the kernel's int64 buffers
_K_IN = ("frame", "ts_ns", "_s", "tcp_ack", "len", "win", "ip_id", "tcp_tsval")
_K_OUT = ("seq_u", "base", "end_u", "ack_u", "rbase", "nxt0", "prev_ack", "prev_win", "rev_win", "nxt", "nxt_ts",
          "nxt_frame", "nxt_ipid", "nxt_tsval", "dupnum", "dup_ref", "rev_ack", "rev_dup", "rev_ts", "prev_conn_ts")
_K_OUTB = ("zwp", "adv", "keepalive", "dup0", "rev_ka", "dupack")
_K_NOT_NULL = ("seq_u", "base", "end_u", "dupnum")


def _kernel_args(t: pl.DataFrame, order: pl.Series) -> tuple[Any, ...]:
    """Return the buffers `_tcpk` reads: row order, connection number, direction, flags, and the int64
    input columns (`_K_IN`, null as `_NUL`)."""
    # one buffer per column, read where it is (an int64 column without nulls is not copied at all)
    inp = [np.ascontiguousarray(s.to_numpy())
           for s in t.select(pl.col(c).cast(pl.Int64).fill_null(_NUL) for c in _K_IN).get_columns()]
    b = t.select((pl.col("dir") == "b").cast(pl.UInt8).alias("d"),
                 (pl.col("syn").cast(pl.UInt8) | (pl.col("fin").cast(pl.UInt8) * 2) | (pl.col("rst").cast(pl.UInt8) * 4)
                  | (pl.col("ackf").cast(pl.UInt8) * 8)).alias("f"))
    return (np.ascontiguousarray(order.cast(pl.Int64).to_numpy()), t.get_column("_c").cast(pl.Int64).to_numpy(),
            np.ascontiguousarray(b.get_column("d").to_numpy()), np.ascontiguousarray(b.get_column("f").to_numpy()), inp)


def _from_kernel(name: str, values: np.ndarray) -> pl.Series:
    """Return an int64 column of the kernel as a Series of its own memory, `_NUL` as null."""
    if name in _K_NOT_NULL:
        # (each output column is an array of its own: the Series shares it, no copy)
        return pl.Series(name, values)
    return pl.Series(name, values).to_frame().select(pl.when(pl.col(name) != _NUL).then(pl.col(name))).to_series()


def _state_kernel(t: pl.DataFrame, order: pl.Series) -> pl.DataFrame:
    """Return `prepare`'s rows with the per-direction state added (`_state_polars`'s columns) by one pass of
    the compiled state machine over the rows in (conn, frame) order."""
    n = t.height
    nconn = int(t["_c"].max()) + 1 if n else 0
    o, cid, d, f, inp = _kernel_args(t, order)
    out = [np.empty(n, np.int64) for _ in _K_OUT]
    outb = np.empty((len(_K_OUTB), n), np.uint8)
    _tcpk.tcp_state(o, cid, d, f, inp, out, outb, nconn)
    del inp
    v = {c: _from_kernel(c, out[k]) for k, c in enumerate(_K_OUT)}
    v.update((c, pl.Series(c, outb[k].view(np.bool_))) for k, c in enumerate(_K_OUTB))
    del out, outb
    seg = ((pl.col("len") > 0) | pl.col("syn") | pl.col("fin")).alias("seg")
    t = t.with_columns(*(v.pop(c) for c in ("seq_u", "base", "end_u")), (pl.col("len") > 0).alias("data"),
                       *(v.pop(c) for c in ("rbase", "ack_u", "nxt0", "prev_ack", "prev_win", "rev_win", "zwp", "nxt",
                                            "adv", "nxt_ts", "nxt_frame", "nxt_ipid", "nxt_tsval")),
                       seg, v.pop("keepalive"), _idinfo_kernel(t),
                       *(v.pop(c) for c in ("dup0", "rev_ka", "dupack", "dupnum", "dup_ref")))
    t = _sack(t)
    rs = np.empty(n, np.int64)
    _tcpk.rev_last(o, cid, d, t.get_column("sack_max").fill_null(_NUL).to_numpy(), rs, nconn)
    t = t.with_columns(*(v.pop(c) for c in ("rev_ack", "rev_dup")), _from_kernel("rev_sack", rs),
                       *(v.pop(c) for c in ("rev_ts", "prev_conn_ts")))
    return t.drop("_s", "tcp_sack", "_g", "_c")


def _idinfo_kernel(t: pl.DataFrame) -> pl.Series:
    """Return `_idinfo()` of `t` (rows in (conn, dir, frame) order, ``_g`` numbering the directions), the
    distinct IP ids of each direction counted by the compiled kernel."""
    g = t.get_column("_g").cast(pl.Int64).to_numpy()
    starts = np.flatnonzero(np.diff(g, prepend=g[0] - 1)) if len(g) else np.zeros(0, np.int64)
    flag = np.empty(t.height, np.uint8)
    _tcpk.numbered(np.append(starts, t.height).astype(np.int64),
                   t.get_column("ip_id").cast(pl.Int64).fill_null(_NUL).to_numpy(), flag)
    return t.select(((pl.col("ip_version") == 4).fill_null(False) & pl.Series(flag.view(np.bool_)))
                    .alias("idinfo")).to_series()


def _idinfo() -> pl.Expr:
    """Whether the direction's sender numbers its IP packets (IPv4 ids not all zero / constant; a capture that
    holds every packet several times still counts): then IP ids tell send order."""
    return ((pl.col("ip_version") == 4) & (pl.col("ip_id").n_unique().over(K) >= 2)
            & (pl.col("ip_id").n_unique().over(K) * 4 >= pl.len().over(K))).fill_null(False)


def _conn_order(t: pl.DataFrame) -> tuple[pl.Series, pl.Series]:
    """Return the permutation putting the rows of `t` (``_c`` not decreasing) in (conn, frame) order, and its inverse."""
    frame = t["frame"]
    span = int(frame.max()) + 1 if t.height and frame.null_count() == 0 and frame.min() >= 0 else 0
    if 0 < span and (int(t["_c"].max()) + 1) * span < 1 << 62:
        # one integer key instead of a sort on two columns
        order = t.select((pl.col("_c").cast(pl.Int64) * span + pl.col("frame")).arg_sort()).to_series()
    else:
        order = t.select(pl.arg_sort_by("_c", "frame")).to_series()
    inv = np.empty(t.height, np.int64)
    inv[order.to_numpy()] = np.arange(t.height)
    return order, pl.Series(inv).cast(order.dtype)


def _conn_ordered(t: pl.DataFrame, order: pl.Series, back: pl.Series, *exprs: pl.Expr) -> pl.Series | list[pl.Series]:
    """Return `exprs` evaluated on the rows of `t` put in (conn, frame) order by `order`, in `t`'s row order
    again (`back`, the inverse permutation): one gather each way instead of a window sorting every conn."""
    cols = sorted({"_c", "dir"}.union(*(e.meta.root_names() for e in exprs)))
    o = t.select(pl.col(cols).gather(order)).select(*exprs)
    out = [o.get_column(c).gather(back) for c in o.columns]
    return out[0] if len(out) == 1 else out


def _sack(t: pl.DataFrame) -> pl.DataFrame:
    """Add sack_max (highest SACKed sequence, unwrapped) and the D-SACK block (dsack_left/right) per row."""
    t = t.with_row_index("_r")
    s = t.filter(pl.col("tcp_sack").is_not_null() & pl.col("ack_u").is_not_null()) \
        .select("_r", "ack_u", pl.col("tcp_ack").cast(pl.Int64).alias("_ar"), "tcp_sack")
    if s.height:
        s = s.with_columns(pl.int_ranges(0, pl.col("tcp_sack").list.len()).alias("_i")).explode("tcp_sack", "_i")
        s = s.filter(pl.col("tcp_sack").is_not_null()).with_columns(
            (pl.col("ack_u") + _wrap32(pl.col("tcp_sack").arr.get(0).cast(pl.Int64) - pl.col("_ar"))).alias("l"),
            (pl.col("ack_u") + _wrap32(pl.col("tcp_sack").arr.get(1).cast(pl.Int64) - pl.col("_ar"))).alias("r"))
        first = s.filter(pl.col("_i") == 0).select("_r", pl.col("l").alias("l0"), pl.col("r").alias("r0"))
        second = s.filter(pl.col("_i") == 1).select("_r", pl.col("l").alias("l1"), pl.col("r").alias("r1"))
        agg = s.group_by("_r").agg(pl.col("r").max().alias("sack_max")).join(first, on="_r", how="left") \
            .join(second, on="_r", how="left").join(s.select("_r", "ack_u").unique("_r"), on="_r")
        # RFC 2883: the first block is a D-SACK when it lies below the cumulative ACK or inside the second.
        isd = (pl.col("r0") <= pl.col("ack_u")) | ((pl.col("l0") >= pl.col("l1")) & (pl.col("r0") <= pl.col("r1")))
        agg = agg.with_columns(pl.when(isd.fill_null(False)).then(pl.col("l0")).alias("dsack_left"),
                               pl.when(isd.fill_null(False)).then(pl.col("r0")).alias("dsack_right"),
                               # a D-SACK block says nothing about what is missing above the ACK
                               pl.when(isd.fill_null(False) & pl.col("l1").is_null()).then(None)
                               .otherwise(pl.col("sack_max")).alias("sack_max"))
        t = t.join(agg.select("_r", "sack_max", "dsack_left", "dsack_right"), on="_r", how="left",
                   maintain_order="left")
    else:
        t = t.with_columns(pl.lit(None, pl.Int64).alias(c) for c in ("sack_max", "dsack_left", "dsack_right"))
    return t.drop("_r")


def sides(t: pl.DataFrame) -> pl.DataFrame:
    """Return (conn, dir, side): where this capture sits for each direction's sender (see module doc)."""
    # (lazily: the filter then copies the TTLs only, not every column of `t`)
    hops = t.lazy().filter(pl.col("ip_ttl").is_not_null()).select(*G, "ip_ttl").group_by(G).agg(
        (_initial_ttl(pl.col("ip_ttl").cast(pl.Int64)) - pl.col("ip_ttl").cast(pl.Int64)).median().alias("hops")).collect()
    rh = hops.with_columns(_other(pl.col("dir")).alias("dir")).rename({"hops": "rhops"})
    # handshake: the SYN's direction, and gaps SYN -> SYN-ACK -> ACK
    syn = t.filter(pl.col("syn") & ~pl.col("ackf")).group_by("conn").agg(
        pl.col("dir").first().alias("cdir"), pl.col("ts_ns").min().alias("t0"))
    sa = t.filter(pl.col("syn") & pl.col("ackf")).group_by("conn").agg(pl.col("ts_ns").min().alias("t1"))
    hs = syn.join(sa, on="conn").filter(pl.col("t1").is_not_null())
    # the client's first ACK after the SYN-ACK: the earliest later one of its direction (each ACK meets its
    # conn's one handshake row: no sort of every ACK by time)
    later = t.lazy().filter(~pl.col("syn") & pl.col("ackf") & pl.col("ts_ns").is_not_null()).select(
        "conn", pl.col("dir").alias("cdir"), pl.col("ts_ns").alias("t2")) \
        .join(hs.lazy().select("conn", "cdir", "t1"), on=["conn", "cdir"]).filter(pl.col("t2") > pl.col("t1")) \
        .group_by("conn", "cdir").agg(pl.col("t2").min()).collect()
    hs = hs.join(later, on=["conn", "cdir"])
    # server near: it answers the SYN faster than the client answers the SYN-ACK
    hs = hs.with_columns(pl.when((pl.col("t1") - pl.col("t0")) < (pl.col("t2") - pl.col("t1"))).then(pl.lit("server"))
                         .when((pl.col("t1") - pl.col("t0")) > (pl.col("t2") - pl.col("t1"))).then(pl.lit("client"))
                         .alias("near"))
    out = t.select(G).unique().join(hops, on=G, how="left").join(rh, on=G, how="left") \
        .join(hs.select("conn", "cdir", "near"), on="conn", how="left")
    # the near end for this direction's sender: client end sends dir == cdir
    by_hs = pl.when(pl.col("near").is_null()).then(None) \
        .when((pl.col("dir") == pl.col("cdir")) == (pl.col("near") == "client")).then(pl.lit("sender")) \
        .otherwise(pl.lit("receiver"))
    side = pl.when(pl.col("hops") < pl.col("rhops")).then(pl.lit("sender")) \
        .when(pl.col("hops") > pl.col("rhops")).then(pl.lit("receiver")).otherwise(by_hs)
    return out.select(*G, side.fill_null("unknown").alias("side"))


class _AckIndex:
    """The ACKs of one capture for `_tcpk.first_ack`: grouped by the direction they acknowledge (its rows in
    frame order), each group's running maximum of the acknowledgement, and the group number of each
    (conn, dir)."""

    def __init__(self, t: pl.DataFrame) -> None:
        # `t` is in (conn, dir, frame) order: the ACKs of one direction are contiguous and in frame order
        a = t.lazy().filter(pl.col("ackf") & pl.col("ack_u").is_not_null()).select(
            "conn", _other(pl.col("dir")).alias("dir"), "frame", "ts_ns", "ack_u",
            pl.col("tcp_tsecr").cast(pl.Int64).alias("tsecr")).collect()
        a = a.with_columns(pl.struct(G).rle_id().cast(pl.Int64).alias("_ag"))
        gid = a.get_column("_ag").to_numpy()
        starts = np.flatnonzero(np.diff(gid, prepend=-1)) if a.height else np.zeros(0, np.int64)
        self.off = np.append(starts, a.height).astype(np.int64)
        self.groups = a.select(*G, "_ag").unique("_ag")
        self.frame = a.get_column("frame").fill_null(_NUL).to_numpy()
        self.ack = a.get_column("ack_u").to_numpy()
        self.cols = a.select("frame", "ts_ns", "tsecr")
        self.cm = np.empty(a.height, np.int64)
        none = np.zeros(0, np.int64)
        _tcpk.first_ack(self.off, self.frame, self.ack, self.cm, none, none, none, none)

    def first(self, left: pl.DataFrame, need: str) -> pl.DataFrame:
        """Return `_first_ack(left, ..., need)`."""
        grp = _group_of(left, self.groups, "_ag")
        out = np.empty(left.height, np.int64)
        _tcpk.first_ack(self.off, self.frame, self.ack, self.cm, grp,
                        left.get_column("frame").fill_null(_NUL).to_numpy(),
                        left.get_column(need).cast(pl.Int64).fill_null(_NUL).to_numpy(), out)
        idx = pl.Series("_x", out)
        got = self.cols.select(pl.all().gather(idx.clip(0, None))) if self.cols.height else \
            pl.DataFrame({c: pl.Series(c, [None] * left.height, pl.Int64) for c in self.cols.columns})
        got = got.with_columns(pl.when(idx >= 0).then(pl.col(c)) for c in got.columns)
        return left.with_columns(got.get_column("frame").alias("ack_frame"), got.get_column("ts_ns").alias("ack_ts"),
                                 got.get_column("tsecr").alias("ack_tsecr"))


def _ack_tables(t: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame] | _AckIndex:
    """Return `_first_ack`'s two views of the ACKs of `t`: every ACK by frame, and the first ACK reaching
    each new cumulative acknowledgement (both keyed by the direction they acknowledge); with the compiled
    kernel, its index of them."""
    if KERNEL:
        return _AckIndex(t)
    # (lazily, here and below: a filter of `t` then copies only the columns selected, not all of `t`'s)
    # `t` is in (conn, dir, frame) order: each direction's ACKs come in frame order, as the windows below
    # read them, without a sort (the two tables are sorted by their own keys)
    acks = t.lazy().filter(pl.col("ackf") & pl.col("ack_u").is_not_null()).select(
        "conn", _other(pl.col("dir")).alias("dir"), "frame", "ts_ns", "ack_u",
        pl.col("tcp_tsecr").cast(pl.Int64).alias("tsecr")).collect()
    acks = acks.with_columns(pl.col("ack_u").cum_max().over(G).alias("cm"))
    r1 = acks.select(*G, pl.col("frame").alias("_f"), pl.col("frame").alias("f1"), pl.col("ts_ns").alias("t1"),
                     pl.col("tsecr").alias("e1"), pl.col("cm").alias("cm1")).sort("_f")
    r2 = acks.unique([*G, "cm"], keep="first", maintain_order=True).select(
        *G, pl.col("cm").alias("_cm"), pl.col("frame").alias("f2"), pl.col("ts_ns").alias("t2"),
        pl.col("tsecr").alias("e2")).sort("_cm")
    return r1, r2


def _first_ack(left: pl.DataFrame, t: pl.DataFrame, need: str,
               acks: tuple[pl.DataFrame, pl.DataFrame] | _AckIndex | None = None) -> pl.DataFrame:
    """Add ack_frame/ack_ts/ack_tsecr: the first ACK after each left row (conn, dir, frame) from the other
    direction whose acknowledgement reaches left[need] (ACKs taken cumulatively, in frame order; `acks`:
    `_ack_tables(t)` when the caller made them already)."""
    acks = acks if acks is not None else _ack_tables(t)
    if isinstance(acks, _AckIndex):
        return acks.first(left, need)
    r1, r2 = acks
    out = left.with_row_index("_i").sort("frame").join_asof(
        r1, left_on="frame", right_on="_f", by=G, strategy="forward", allow_exact_matches=False,
        check_sortedness=False).drop("_f")
    out = out.sort(need).join_asof(r2, left_on=need, right_on="_cm", by=G, strategy="forward",
                        check_sortedness=False).drop("_cm")
    ok1 = pl.col("cm1") >= pl.col(need)
    return out.sort("_i").select(
        pl.exclude("_i", "f1", "t1", "e1", "cm1", "f2", "t2", "e2"),
        pl.when(ok1).then(pl.col("f1")).otherwise(pl.col("f2")).alias("ack_frame"),
        pl.when(ok1).then(pl.col("t1")).otherwise(pl.col("t2")).alias("ack_ts"),
        pl.when(ok1).then(pl.col("e1")).otherwise(pl.col("e2")).alias("ack_tsecr"))


COPY_COLS = ("frame", "ts_ns", "seq_u", "len", "ip_id", "tsval", "tsecr", "ack", "flags", "win")


def network_copies(rows: pl.DataFrame, seg: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Return (*by, frame, copy, copy_by) per row of `rows`: whether it is a copy of an earlier segment of `seg`
    made by the network or the capture, not a transmission by the sender (the module doc's
    ``network_duplicate``), and by which test: ``ip_id`` (the first transmission's IP id, length and TSval),
    ``identical`` (byte-identical to the previous one, within `COPY_WINDOW_NS`), null.

    `seg` holds one capture's segments (data, SYN or FIN) with `by` (the direction), `COPY_COLS` (``seq_u``
    unwrapped, ``ack`` in any form that is the same for equal ACKs; null ``flags`` / ``win`` compare equal);
    `rows` their (*by, frame) to judge, with ``idinfo`` (the sender numbers its IP packets).
    """
    keys = [*by, "seq_u"]
    r = rows.select(*by, "frame", "idinfo").join(seg.select(*by, "frame", *COPY_COLS[1:]), on=[*by, "frame"])
    s = seg.select(*by, *COPY_COLS).join(r.select(keys).unique(), on=keys, how="semi")
    # the first transmission of the sequence number: same IP id (numbered), length and TSval within 1 s
    first = s.sort("frame").group_by(keys).agg(pl.col("frame", "ts_ns", "ip_id", "len", "tsval").first()
                                               .name.prefix("f_"))
    r = r.join(first, on=keys, how="left")
    by_id = (pl.col("f_frame") < pl.col("frame")) & pl.col("idinfo") & (pl.col("ip_id") == pl.col("f_ip_id")) \
        & (pl.col("len") == pl.col("f_len")) & ((pl.col("tsval") == pl.col("f_tsval")) | pl.col("tsval").is_null()) \
        & ((pl.col("ts_ns") - pl.col("f_ts_ns")) < DUP_WINDOW_NS)
    # the previous transmission of the sequence number: byte-identical and within COPY_WINDOW_NS
    prev = s.select(*keys, pl.col("frame").alias("_pf"), *(pl.col(c).alias("p_" + c) for c in COPY_COLS[1:]))
    r = r.sort("frame").join_asof(prev.sort("_pf"), left_on="frame", right_on="_pf", by=keys, strategy="backward",
                                  allow_exact_matches=False, check_sortedness=False)
    same = [pl.col(c).eq_missing(pl.col("p_" + c)) for c in ("len", "ip_id", "tsval", "tsecr", "ack", "flags", "win")]
    twin = pl.col("_pf").is_not_null() & pl.all_horizontal(same) \
        & ((pl.col("ts_ns") - pl.col("p_ts_ns")).abs() <= COPY_WINDOW_NS)
    how = pl.when(by_id.fill_null(False)).then(pl.lit("ip_id")).when(twin.fill_null(False)).then(pl.lit("identical"))
    return r.select(*by, "frame", how.is_not_null().alias("copy"), how.alias("copy_by"))


def _rto(t: pl.DataFrame, cand_seq: pl.DataFrame, cand_frames: pl.DataFrame,
         copies: pl.DataFrame | None = None, acks: tuple[pl.DataFrame, pl.DataFrame] | _AckIndex | None = None) -> pl.DataFrame:
    """Return (conn, dir, ts_ns, srtt, rto) after each RTT sample (RFC 6298; Karn: never-retransmitted data;
    `copies`: frames of network copies, no sample of their own: their original gives it)."""
    d = t.lazy().filter(pl.col("data")).select(*G, "frame", "ts_ns", "seq_u", "end_u").collect()
    d = _without_keys(d, cand_seq).drop("seq_u")
    if copies is not None and copies.height:
        d = d.join(copies, on=[*G, "frame"], how="anti")
    s = _first_ack(d, t, "end_u", acks).filter(pl.col("ack_ts").is_not_null())
    # An ACK that comes only after a retransmission filled a hole below the segment measures the recovery,
    # not the path: drop samples with a retransmission of the direction between segment and ACK.
    if KERNEL:
        return _rtt_estimates(_retx_between(s, cand_frames))
    n = cand_frames.sort("frame").with_columns(pl.int_range(1, pl.len() + 1).over(G).alias("_n")) \
        .select(*G, pl.col("frame").alias("_f"), "_n").sort("_f")
    s = s.sort("frame").join_asof(n, left_on="frame", right_on="_f", by=G, strategy="backward",
                                  check_sortedness=False).rename({"_n": "_n0"}).drop("_f")
    s = s.sort("ack_frame").join_asof(n, left_on="ack_frame", right_on="_f", by=G, strategy="backward",
                                      check_sortedness=False).drop("_f")
    return _rtt_estimates(s)


def _without_keys(d: pl.DataFrame, keys: pl.DataFrame) -> pl.DataFrame:
    """Return the rows of `d` whose (conn, dir, seq_u) is not in `keys` (a few), in their order: the anti-join
    decided on the rows whose seq_u alone matches one, not by hashing three keys of every row."""
    maybe = d.get_column("seq_u").is_in(keys.get_column("seq_u").implode())
    if not maybe.any():
        return d
    hit = d.with_row_index("_r").filter(maybe).join(keys, on=[*G, "seq_u"], how="semi").get_column("_r").to_numpy()
    keep = np.ones(d.height, bool)
    keep[hit] = False
    return d.filter(pl.Series(keep))


def _retx_between(s: pl.DataFrame, cand_frames: pl.DataFrame) -> pl.DataFrame:
    """Return the samples `s` with _n0 / _n, the retransmissions of their direction (`cand_frames`) up to the
    segment's and the ACK's frame (`_tcpk.count_upto`), in the order `_rto`'s polars steps leave them (its
    sorts kept: the RTO estimate's smoothing reads samples of one ACK time in that order)."""
    r = cand_frames.select(*G, "frame").sort(*G, "frame").with_columns(pl.struct(G).rle_id().cast(pl.Int64).alias("_rg"))
    rg = r.get_column("_rg").to_numpy()
    starts = np.flatnonzero(np.diff(rg, prepend=-1)) if r.height else np.zeros(0, np.int64)
    grp = _group_of(s, r.select(*G, "_rg").unique("_rg"), "_rg")
    off, vals = np.append(starts, r.height).astype(np.int64), r.get_column("frame").fill_null(_NUL).to_numpy()
    counts = []
    for c in ("frame", "ack_frame"):
        out = np.empty(s.height, np.int64)
        _tcpk.count_upto(off, vals, grp, s.get_column(c).fill_null(_NUL).to_numpy(), out)
        counts.append(out)
    # the two sorts as one gather of the columns `_rtt_estimates` reads: a sort by one column is the gather of
    # that column's arg_sort, so the composed permutation puts the rows where the two sorts would
    first = s.select(pl.col("frame").arg_sort()).to_series()
    then = s.select(pl.col("ack_frame").gather(first).arg_sort()).to_series()
    return s.select(*G, "ts_ns", "ack_ts", pl.Series("_n0", counts[0]), pl.Series("_n", counts[1])) \
        .select(pl.all().gather(first.gather(then)))


def _rtt_estimates(s: pl.DataFrame) -> pl.DataFrame:
    """Return `_rto`'s table from its samples with _n0 / _n (rows in the order its sorts leave them)."""
    s = s.filter(pl.col("_n").fill_null(0) == pl.col("_n0").fill_null(0))
    s = s.select(*G, pl.col("ack_ts").alias("ts_ns"), (pl.col("ack_ts") - pl.col("ts_ns")).alias("rtt")) \
        .filter(pl.col("rtt") >= 0).sort(*G, "ts_ns")
    s = s.with_columns(pl.col("rtt").cast(pl.Float64).ewm_mean(alpha=0.125, adjust=False).over(G).alias("srtt"))
    dev = (pl.col("rtt") - pl.col("srtt").shift(1).over(G)).abs().fill_null(pl.col("rtt") / 2)
    s = s.with_columns(dev.alias("_dev"))
    s = s.with_columns(pl.col("_dev").ewm_mean(alpha=0.25, adjust=False).over(G).alias("rttvar"))
    return s.select(*G, "ts_ns", "srtt", pl.max_horizontal(pl.col("srtt") + 4 * pl.col("rttvar"),
                                                           pl.lit(float(MIN_RTO_NS))).alias("rto"))


def _analyze(df: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Return (prepared rows, retransmission rows with working columns, events) of one capture."""
    return _analyze_prepared(prepare(df))


# columns of `prepare` that only served `prepare` itself (and `sides`)
_SPENT = ("ip_version", "tcp_flags", "tcp_win", "tcp_len", "tcp_ack", "prev_win", "prev_ack", "nxt0", "dup0", "rev_ka",
          "adv")
# columns of `prepare` that only the retransmission candidates read (and `sides`: ip_ttl)
_CAND_ONLY = ("ip_ttl", "nxt", "nxt_ts", "nxt_frame", "nxt_ipid", "nxt_tsval", "sack_max", "rev_dup",
              "rev_sack", "rev_ts", "prev_conn_ts")
# columns of `prepare` that only `_events` (and the steps before it) read
_EVENTS_ONLY = ("flow", "syn", "fin", "rst", "len", "win", "base", "rbase", "zwp", "keepalive", "dupack", "dupnum",
                "dup_ref", "tcp_wscale", "rev_ack", "rev_win")


def _analyze_prepared(t: pl.DataFrame, kind: str | None = None) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """`_analyze` of a capture's `prepare`d rows (`kind`: the capture's, when the rows have no kind column)."""
    # joined on the two key columns only: a join of the whole working table would copy every column
    # (a look-up of the few directions' sides by their integer codes: no join over every row's two keys)
    sd = sides(t)
    at = pl.Series("_at", _per_direction(t, sd))
    t = t.with_columns(sd.get_column("side").gather(at.set(at < 0, None)))
    below = pl.col("seg") & pl.col("nxt").is_not_null() & (pl.col("seq_u") < pl.col("nxt")) \
        & ~pl.col("keepalive") & ~pl.col("zwp") & ~((pl.col("len") > 1) & (pl.col("seq_u") == pl.col("nxt") - 1))
    # not below "next expected", yet the receiver had the bytes: a retransmission whose original the capture
    # missed (module doc) -- ACKed before it (in frame order and in time), or D-SACKed at once after it
    fresh = pl.col("seg") & ~pl.col("_below") & ((pl.col("len") > 0) | pl.col("fin")) & ~pl.col("syn") \
        & ~pl.col("keepalive") & ~pl.col("zwp")
    acked = pl.col("seg") & ((pl.col("len") > 0) | pl.col("fin")) & ~pl.col("syn") \
        & (pl.col("rev_ack") >= pl.col("end_u")) & (pl.col("rev_ts") < pl.col("ts_ns"))
    t = t.with_columns(below.fill_null(False).alias("_below"))
    t = t.with_columns(fresh.fill_null(False).alias("_fresh"), acked.fill_null(False).alias("acked_before"))
    # the ACKs' look-up tables, made once for the three look-ups of the capture
    acks = _ack_tables(t)
    by_dsack = _dsacked_first(t, acks)
    cand = t.filter(pl.col("_below") | (pl.col("_fresh") & pl.col("acked_before"))
                    | pl.col("frame").is_in(by_dsack["frame"].implode())) \
        .with_columns((~pl.col("_below")).alias("missed"))
    del by_dsack
    # network (or capture) copies: judged from IP and TCP header fields that are dropped from the rows below
    # (only the segments at a candidate's sequence number are read: a semi-join before the columns are copied)
    # (the rows at a candidate's sequence number found on that one integer first: the semi-join on three
    # keys then hashes those few rows, not every segment's)
    copies = network_copies(cand, t.lazy().filter(pl.col("seg") & pl.col("seq_u").is_in(cand.get_column("seq_u").implode()))
                            .join(cand.lazy().select(*G, "seq_u").unique(), on=[*G, "seq_u"], how="semi").select(
        *G, "frame", "ts_ns", "seq_u", "len", pl.col("ip_id").cast(pl.Int64), pl.col("tcp_tsval").cast(pl.Int64)
        .alias("tsval"), pl.col("tcp_tsecr").cast(pl.Int64).alias("tsecr"), pl.col("ack_u").alias("ack"),
        pl.col("tcp_flags").cast(pl.Int64).alias("flags"), "win").collect(), G)
    cand = cand.join(copies, on=[*G, "frame"], how="left").drop(*_SPENT, "_below", "_fresh")
    del copies
    t = t.drop(*_SPENT, "_below", "_fresh", "acked_before")
    # the state only the candidates read: dropped from the working rows, which are held to the end
    t = t.drop(*_CAND_ONLY)
    # the original: the first earlier frame starting at the same sequence number, else one covering it
    # (`t` is in (conn, dir, frame) order: a sequence number's first row is its first frame)
    firsts = t.lazy().filter(pl.col("seg")).select(*G, "seq_u", "frame", "ts_ns", "len", "ip_id", "tcp_tsval",
                                                    "end_u").collect()
    firsts = firsts.filter(_first_distinct(firsts) if KERNEL else pl.struct(*G, "seq_u").is_first_distinct()).select(
        *G, "seq_u", pl.col("frame").alias("o_frame"), pl.col("ts_ns").alias("o_ts"), pl.col("len").alias("o_len"),
        pl.col("ip_id").cast(pl.Int64).alias("o_ipid"), pl.col("tcp_tsval").cast(pl.Int64).alias("o_tsval"),
        pl.col("end_u").alias("o_end"))
    # (the few rows at a candidate's sequence number joined, not every segment start: a left join hashes them)
    cand = cand.join(firsts.filter(pl.col("seq_u").is_in(cand.get_column("seq_u").implode())), on=[*G, "seq_u"],
                     how="left")
    cand = _covering(cand, firsts)
    del firsts            # one row per segment start: not held through the steps below
    use_c = (pl.col("o_frame").is_null() | (pl.col("o_frame") >= pl.col("frame"))) \
        & (pl.col("co_end") > pl.col("seq_u")) & (pl.col("co_frame") < pl.col("frame"))
    same = pl.col("o_frame") < pl.col("frame")
    o_cols = ("o_frame", "o_ts", "o_len", "o_ipid", "o_tsval")
    cand = cand.with_columns(
        pl.when(same).then(pl.col(c)).when(use_c.fill_null(False)).then(pl.col("c" + c)).alias(c) for c in o_cols)
    cand = cand.with_columns(same.fill_null(False).alias("same_start")).drop(
        "c_seq", "o_end", *("c" + c for c in o_cols), "co_end").sort("conn", "dir", "frame")
    seen = pl.col("o_frame").is_not_null()
    ipid = pl.col("ip_id").cast(pl.Int64)
    tsval = pl.col("tcp_tsval").cast(pl.Int64)
    netdup = pl.col("copy")
    # never seen here: sent before the highest segment (the original, late) or after it (a retransmission
    # whose original was lost before this capture)
    id_order = pl.when(pl.col("idinfo") & pl.col("nxt_ipid").is_not_null()).then(_wrap16(ipid - pl.col("nxt_ipid")))
    ts_order = pl.when(tsval.is_not_null() & pl.col("nxt_tsval").is_not_null() & (tsval != 0)) \
        .then(_wrap32(tsval - pl.col("nxt_tsval")))
    hs_rtt = _handshake_rtt(t)
    cand = cand.join(hs_rtt, on="conn", how="left")
    late = (pl.col("ts_ns") - pl.col("nxt_ts")) < pl.col("ooo_thres")
    cand = cand.with_columns(netdup.fill_null(False).alias("netdup"), id_order.alias("_ido"), ts_order.alias("_tso"),
                             late.fill_null(False).alias("_late"))
    # (not when the receiver had ACKed the bytes before they came: then they are no late original)
    reorder = ~seen & ~pl.col("netdup") & ~pl.col("missed") & ~pl.col("acked_before") & (
        pl.when(pl.col("_ido").is_not_null() & (pl.col("_ido") != 0)).then(pl.col("_ido") < 0)
        .when(pl.col("_tso").is_not_null() & (pl.col("_tso") != 0)).then(pl.col("_tso") < 0)
        .otherwise(pl.col("_late")))
    rmethod = pl.when(pl.col("_ido").is_not_null() & (pl.col("_ido") != 0)).then(pl.lit("ip_id")) \
        .when(pl.col("_tso").is_not_null() & (pl.col("_tso") != 0)).then(pl.lit("tsval")).otherwise(pl.lit("timing"))
    cand = cand.with_columns(reorder.alias("reorder"), rmethod.alias("_rm"))
    # the events need no more of the candidates than this: made now, so that the columns only they read are
    # dropped from the working rows before the RTT samples and ACK look-ups below, the busiest steps
    ev = _events(t, cand.sort("conn", "dir", "frame"))
    t = t.drop(*_EVENTS_ONLY)

    # --- trigger of real retransmissions ---
    retx = ~pl.col("netdup") & ~pl.col("reorder")
    # Karn: no sample from segments at a retransmitted sequence number; a network copy is no retransmission
    rto = _rto(t, cand.filter(~pl.col("netdup")).select(*G, "seq_u").unique(), cand.filter(retx).select(*G, "frame"),
               cand.filter(pl.col("netdup")).select(*G, "frame"), acks)
    cand = cand.sort("ts_ns").join_asof(rto.sort("ts_ns"), on="ts_ns", by=G, strategy="backward",
                                                             check_sortedness=False)
    cand = cand.with_columns(
        pl.col("rto").fill_null(float(INITIAL_RTO_NS)).cast(pl.Int64).alias("rto_est"),
        (pl.col("ts_ns") - pl.col("prev_conn_ts")).alias("silence"))
    by_timer = pl.col("silence") >= (pl.col("rto_est") * 9) // 10
    by_dup = (pl.col("rev_ack") <= pl.col("seq_u")) & (
        ((pl.col("rev_dup") >= 2) & (pl.col("rev_ack") == pl.col("seq_u"))) | (pl.col("rev_sack") > pl.col("seq_u")))
    by_tlp = (pl.col("silence") >= pl.max_horizontal(2 * pl.col("srtt").fill_null(0), pl.lit(float(TLP_MIN_NS))) * 0.8) \
        & (pl.col("end_u") >= pl.col("nxt"))
    # Linux arms the RTO from the send time of the oldest unacknowledged segment, not from the last ACK
    by_head = (pl.col("ts_ns") - pl.col("o_ts")) >= (pl.col("rto_est") * 9) // 10
    trig = pl.when(by_timer.fill_null(False)).then(pl.lit("rto")).when(by_dup.fill_null(False)).then(pl.lit("fast")) \
        .when(by_head.fill_null(False)).then(pl.lit("rto_head")).when(by_tlp.fill_null(False)).then(pl.lit("tlp"))
    cand = cand.sort("conn", "dir", "frame").with_columns(pl.when(retx).then(trig).alias("_t0"))
    cand = cand.with_columns(pl.col("_t0").replace("rto_head", "rto").alias("trig0"))
    # recovery episodes: later retransmissions below the recovery point inherit the trigger
    start = pl.col("trig0").is_not_null()
    cand = cand.with_columns(
        pl.when(start).then(pl.col("trig0")).forward_fill().over(G).alias("_et"),
        pl.when(start).then(pl.col("nxt")).forward_fill().over(G).alias("_ep"),
        pl.when(start).then(pl.col("frame")).forward_fill().over(G).alias("_ef"))
    inherit = retx & ~start & (pl.col("seq_u") < pl.col("_ep"))
    cand = cand.with_columns(
        pl.when(~retx).then(None).when(start).then(pl.col("trig0")).when(inherit.fill_null(False)).then(pl.col("_et"))
        .otherwise(pl.lit("unknown")).alias("trigger"),
        pl.when(~retx).then(None)
        .when(pl.col("_t0") == "rto").then(pl.format("rto: silence {} ms >= 0.9 x RTO estimate {} ms",
                                                     pl.col("silence") // 1_000_000, pl.col("rto_est") // 1_000_000))
        .when(pl.col("_t0") == "rto_head").then(pl.format("rto: {} ms after the original >= 0.9 x RTO estimate {} ms",
                                                          (pl.col("ts_ns") - pl.col("o_ts")) // 1_000_000,
                                                          pl.col("rto_est") // 1_000_000))
        .when(pl.col("trig0") == "fast").then(pl.when(pl.col("rev_sack") > pl.col("seq_u"))
                                              .then(pl.lit("fast: SACK above it in the last ACK"))
                                              .otherwise(pl.format("fast: {} duplicate ACKs", pl.col("rev_dup"))))
        .when(pl.col("trig0") == "tlp").then(pl.format("tlp: silence {} ms >= 2 srtt on the last segment",
                                                       pl.col("silence") // 1_000_000))
        .when(inherit.fill_null(False)).then(pl.format("{}: recovery episode from frame {}", pl.col("_et"),
                                                       pl.col("_ef")))
        .otherwise(pl.lit("unknown: no duplicate ACK, SACK or timer silence (a timer assumed)")).alias("tmethod"),
        pl.when(~retx).then(None).when(pl.col("_t0") == "rto").then(0.85).when(pl.col("_t0") == "rto_head").then(0.7)
        .when(pl.col("trig0") == "fast").then(pl.when(pl.col("rev_dup") >= 3).then(0.9).otherwise(0.8))
        .when(pl.col("trig0") == "tlp").then(0.6).when(inherit.fill_null(False)).then(0.75).otherwise(0.3)
        .alias("tconf"))

    # --- spurious: evidence at this capture ---
    dsk = t.filter(pl.col("dsack_left").is_not_null()).select(
        "conn", _other(pl.col("dir")).alias("dir"), pl.col("dsack_left").alias("_dl"),
        pl.col("dsack_right").alias("dr"), pl.col("frame").alias("dsack_frame"))
    dsk = dsk.sort("dsack_frame").unique([*G, "_dl", "dr"], keep="last").sort("_dl")
    cand = cand.sort("seq_u").join_asof(dsk, left_on="seq_u", right_on="_dl", by=G, strategy="backward",
                                        check_sortedness=False)
    dsack = retx & (pl.col("dr") >= pl.col("end_u")) & (pl.col("dsack_frame") > pl.col("frame"))
    cand = cand.with_columns((pl.col("seq_u") + 1).alias("_need"))
    cand = _first_ack(cand.sort("conn", "dir", "frame"), t, "_need", acks)
    del acks
    # Eifel (RFC 3522) asks whether the ACK was made by a transmission from before the retransmissions.  A
    # delayed ACK echoes the older of the two segments it covers (RFC 7323: TS.Recent moves only at the left
    # edge), so in a go-back-N after a timeout the ACK covering one retransmission echoes the one before it:
    # the echo is compared with the first retransmission of the run (retransmissions with no new data between
    # them), or is an earlier transmission of these very bytes (a timer that fired again)
    cand = cand.with_columns(
        pl.when(retx).then(pl.col("nxt")).forward_fill().shift(1).over(G).alias("_pn"))
    run0 = retx & (pl.col("_pn").is_null() | (pl.col("_pn") != pl.col("nxt")))
    cand = cand.with_columns(
        pl.when(retx).then(pl.when(run0).then(tsval).otherwise(pl.lit(None, pl.Int64)).forward_fill().over(G))
        .alias("_rts"),
        pl.when(retx).then(tsval).shift(1).over([*G, "seq_u"]).alias("_pts"))
    echo = pl.col("ack_tsecr")
    eifel = retx & tsval.is_not_null() & (tsval != 0) & (echo.fill_null(0) != 0) \
        & (pl.col("ack_ts") >= pl.col("ts_ns")) \
        & ((_wrap32(echo - pl.col("_rts").fill_null(tsval)) < 0) | (echo == pl.col("_pts")).fill_null(False))
    acked = retx & (pl.col("len") > 0) & (pl.col("rev_ack") >= pl.col("end_u"))
    # a monitor-mode capture near the AP sees what was sent over the air, not what the station received
    air = (pl.col("kind") == "air") if "kind" in cand.columns else pl.lit(kind == "air")
    rxv = retx & (pl.col("side") == "receiver") & ~air.fill_null(False)
    cand = cand.with_columns(dsack.fill_null(False).alias("ev_dsack"), eifel.fill_null(False).alias("ev_eifel"),
                             acked.fill_null(False).alias("ev_acked"), (rxv & seen).fill_null(False).alias("ev_rxv"),
                             (rxv & ~seen).fill_null(False).alias("ev_rxv_neg"),
                             pl.lit(None, pl.Boolean).alias("ev_rx"), pl.lit(None, pl.String).alias("rx_capture"),
                             pl.lit(None, pl.Int64).alias("rx_frame")).drop("_pn", "_rts", "_pts")
    cand = cand.sort("conn", "dir", "frame")
    # `t` without the columns only the candidates and the events read: `build` reads of it what `_originals`,
    # `_rx_rows` and `_rx_span` do
    return t, cand, ev


def _covering(cand: pl.DataFrame, firsts: pl.DataFrame) -> pl.DataFrame:
    """Return `cand` with, per row, the segment start of `firsts` (G, seq_u, o_*; one row per direction and
    sequence number) of its direction starting highest below its seq_u, as c_seq and co_* (null: none).

    Found by a binary search over (direction, seq_u) packed into one int64 and sorted alone: not a sort of
    every segment start's columns for a join_asof of the few candidates.  Falls back to the join_asof when
    the packing does not fit or a key is null."""
    cover = firsts.rename({c: "c" + c for c in firsts.columns if c.startswith("o_")}).rename({"seq_u": "c_seq"})
    # (`prepare`'s keys: a categorical conn and the two-valued direction enum, whose codes pack into one integer)
    keyed = all(isinstance(df.schema["conn"], pl.Categorical) and df.schema["dir"] == DIR for df in (cand, firsts))
    if keyed and cand.height and firsts.height and not any(
            df.get_column(c).null_count() for df in (cand, firsts) for c in (*G, "seq_u")):
        code = (pl.col("conn").to_physical().cast(pl.Int64) * 2 + pl.col("dir").to_physical().cast(pl.Int64))
        fk, qk = (df.select(code.alias("_cd"), "seq_u") for df in (firsts, cand))
        lo = min(fk.get_column("seq_u").min(), qk.get_column("seq_u").min())
        span = max(fk.get_column("seq_u").max(), qk.get_column("seq_u").max()) - lo + 1
        if (max(fk.get_column("_cd").max(), qk.get_column("_cd").max()) + 1) * span < 1 << 63:
            packed = pl.col("_cd") * span + (pl.col("seq_u") - lo)
            perm = fk.select(packed.arg_sort()).to_series()
            fcode = fk.get_column("_cd").gather(perm).to_numpy()
            sorted_key = fk.select(packed.gather(perm)).to_series().to_numpy()
            # the last start strictly below the candidate's (join_asof "backward" without exact matches)
            at = np.searchsorted(sorted_key, qk.select(packed).to_series().to_numpy(), side="left") - 1
            ok = at >= 0
            at = np.where(ok, at, 0)
            ok &= fcode[at] == qk.get_column("_cd").to_numpy()
            rows = pl.Series("_i", perm.to_numpy()[at]).to_frame().select(
                pl.when(pl.Series(ok)).then(pl.col("_i"))).to_series()
            return cand.hstack(cover.drop(G).select(pl.all().gather(rows)).get_columns())
    return cand.sort("seq_u").join_asof(cover.sort("c_seq"), left_on="seq_u", right_on="c_seq", by=G,
                                        strategy="backward", check_sortedness=False, allow_exact_matches=False)


def _dsacked_first(t: pl.DataFrame, acks: tuple[pl.DataFrame, pl.DataFrame] | _AckIndex | None = None) -> pl.DataFrame:
    """Return (conn, dir, frame) of the segments that do not start below "next expected" (``_fresh`` rows) and
    whose first covering ACK after them is a D-SACK for them (module doc): the receiver had their bytes."""
    dsk = t.filter(pl.col("dsack_left").is_not_null()).select(
        "conn", _other(pl.col("dir")).alias("dir"), pl.col("dsack_left").alias("_dl"),
        pl.col("dsack_right").alias("_dr"), pl.col("frame").alias("_df"))
    none = pl.DataFrame(schema={"conn": pl.String, "dir": pl.String, "frame": pl.Int64})
    if dsk.height == 0:
        return none
    rows = t.lazy().filter(pl.col("_fresh")).select(*G, "frame", "seq_u", "end_u").collect()
    # the D-SACK block of the direction with the highest left edge at or below the segment's start
    blocks = dsk.unique([*G, "_dl", "_dr"]).select(*G, "_dl", "_dr").sort("_dl")
    hit = rows.sort("seq_u").join_asof(blocks, left_on="seq_u", right_on="_dl", by=G, strategy="backward",
                                       check_sortedness=False).filter(pl.col("_dr") >= pl.col("end_u"))
    if hit.height == 0:
        return none
    # its first D-SACK after the segment ...
    hit = hit.join(dsk, on=[*G, "_dl", "_dr"]).filter(pl.col("_df") > pl.col("frame")) \
        .group_by(*G, "frame", "seq_u", "end_u").agg(pl.col("_df").min())
    # ... is the first ACK after it to cover it (else the receiver took this one as new, the copy it
    # D-SACKed came later) ...
    hit = _first_ack(hit, t, "end_u", acks).filter(pl.col("ack_frame").is_null() | (pl.col("ack_frame") >= pl.col("_df")))
    # ... and comes before any other transmission of its sequence number here
    again = t.lazy().filter(pl.col("seg") & pl.col("seq_u").is_in(hit.get_column("seq_u").implode())) \
        .select(*G, "seq_u", pl.col("frame").alias("_f")).collect() \
        .join(hit.select(*G, "seq_u", "frame", "_df"), on=[*G, "seq_u"]) \
        .filter((pl.col("_f") > pl.col("frame")) & (pl.col("_f") < pl.col("_df")))
    return hit.join(again, on=[*G, "frame"], how="anti").select(*G, "frame")


def _handshake_rtt(t: pl.DataFrame) -> pl.DataFrame:
    """Return (conn, ooo_thres): Wireshark's out-of-order window, the first RTT (SYN to the handshake's ACK)."""
    syn = t.filter(pl.col("syn") & ~pl.col("ackf")).group_by("conn").agg(pl.col("ts_ns").min().alias("_t0"),
                                                                        pl.col("dir").first().alias("_cd"))
    # the client's first ACK: per direction the earliest one, then the SYN's direction's
    acks = t.lazy().filter(~pl.col("syn") & pl.col("ackf")).group_by(G).agg(pl.col("ts_ns").min().alias("_t2")) \
        .collect()
    fin = syn.join(acks, left_on=["conn", "_cd"], right_on=G)
    out = t.select("conn").unique().join(fin, on="conn", how="left")
    return out.select("conn", (pl.col("_t2") - pl.col("_t0")).fill_null(OOO_DEFAULT_NS).alias("ooo_thres"))


def _events(t: pl.DataFrame, cand: pl.DataFrame) -> pl.DataFrame:
    """Return the tcp_events rows of one capture."""
    rel_seq = (pl.col("seq_u") - pl.col("base")).alias("seq")
    rel_ack = (pl.col("ack_u") - pl.col("rbase")).alias("ack")
    parts = []
    base = ["frame", "ts_ns", "flow", "conn"]
    parts.append(t.filter(pl.col("dupack")).select(*base, pl.lit("dup_ack").alias("event"), rel_seq, rel_ack,
                                                   pl.col("dupnum").alias("count"), pl.col("dup_ref").alias("ref_frame")))
    plain = ~(pl.col("syn") | pl.col("fin") | pl.col("rst"))
    parts.append(t.filter((pl.col("win") == 0) & plain).select(*base, pl.lit("zero_window").alias("event"), rel_seq,
                                                               rel_ack))
    parts.append(t.filter(pl.col("zwp")).select(*base, pl.lit("zero_window_probe").alias("event"), rel_seq, rel_ack))
    parts.append(t.filter(pl.col("keepalive") & ~pl.col("zwp")).select(*base, pl.lit("keep_alive").alias("event"),
                                                                      rel_seq, rel_ack))
    # window full: the segment reaches the right edge of the receiver's last advertised window
    scale = _scales(t)
    # the other direction's last ACK and window before each row: `prepare`'s rev_ack and rev_win
    # (lazily, data segments only: the join with the scales then copies their dozen columns, not all rows')
    edge = pl.col("_ra") + pl.col("_rw") * pl.col("rscale")
    parts.append(t.lazy().filter((pl.col("len") > 0) & plain).select(
        *base, "dir", "len", "seq_u", "base", "ack_u", "rbase", pl.col("rev_ack").alias("_ra"),
        pl.col("rev_win").alias("_rw")).join(scale.lazy(), on=G, how="left", maintain_order="left")
        .filter((pl.col("seq_u") + pl.col("len") == edge).fill_null(False))
        .select(*base, pl.lit("window_full").alias("event"), rel_seq, rel_ack).collect())
    # out of order: reordering extent = segments (bytes) that arrived before it with a higher sequence number
    ooo = cand.filter(pl.col("reorder"))
    if ooo.height:
        d = t.lazy().filter(pl.col("seg")).select(*G, "frame", "ts_ns", "seq_u", "len").collect()
        if not _in_direction_order(d):      # (`prepare` leaves its rows in that order: no sort)
            d = d.sort("conn", "dir", "frame")
        d = d.with_columns(pl.int_range(pl.len()).over(G).alias("k"), pl.col("len").cum_sum().over(G).alias("cb"),
                           pl.col("seq_u").cum_max().over(G).alias("cmax"))
        first_above = _first_of_runs(d, "cmax").select(
            *G, pl.col("cmax").alias("_cm"), pl.col("k").alias("j"), pl.col("frame").alias("ref_frame"),
            pl.col("ts_ns").alias("tj"), (pl.col("cb") - pl.col("len")).alias("cbj")).sort("_cm")
        o = ooo.select(*base, *G[1:], "seq_u", "base", "ack_u", "rbase").join(
            d.select(*G, "frame", "k", "cb", "len"), on=[*G, "frame"], how="left")
        o = o.with_columns((pl.col("seq_u") + 1).alias("_q")).sort("_q")
        del d
        o = o.join_asof(first_above, left_on="_q", right_on="_cm", by=G, strategy="forward",
                        check_sortedness=False)
        del first_above
        parts.append(o.select(*base, pl.lit("out_of_order").alias("event"), rel_seq, rel_ack, "ref_frame",
                              (pl.col("k") - pl.col("j")).alias("extent_segments"),
                              (pl.col("cb") - pl.col("len") - pl.col("cbj")).alias("extent_bytes"),
                              (pl.col("ts_ns") - pl.col("tj")).alias("extent_ns")))
    ev = pl.concat(parts, how="diagonal_relaxed")
    for c in ("count", "ref_frame", "extent_segments", "extent_bytes", "extent_ns"):
        if c not in ev.columns:
            ev = ev.with_columns(pl.lit(None, pl.Int64).alias(c))
    return ev.sort("frame")


def _in_direction_order(d: pl.DataFrame) -> bool:
    """Return whether the rows of `d` are in (conn, dir, frame) order, frames rising within a direction."""
    if d.height < 2:
        return True
    new = ((pl.col("conn") != pl.col("conn").shift(1)) | (pl.col("dir") != pl.col("dir").shift(1))).fill_null(True)
    if not d.select((new | (pl.col("frame") > pl.col("frame").shift(1))).fill_null(False).all()).item():
        return False
    heads = d.filter(d.select(new).to_series()).select(G)
    return heads.height == heads.unique().height and heads.equals(heads.sort(G))


def _first_of_runs(d: pl.DataFrame, col: str) -> pl.DataFrame:
    """Return ``d.unique([*G, col], keep="first", maintain_order=True)`` of rows in (conn, dir, frame) order
    whose `col` never falls within a direction (a cumulative max): the equal rows are then runs, whose first
    rows are found by comparing neighbours instead of hashing three columns of every row."""
    if d.get_column(col).null_count():
        return d.unique([*G, col], keep="first", maintain_order=True)
    new = (pl.col("conn") != pl.col("conn").shift(1)) | (pl.col("dir") != pl.col("dir").shift(1)) \
        | (pl.col(col) != pl.col(col).shift(1))
    return d.filter(new.fill_null(True))


def _scales(t: pl.DataFrame) -> pl.DataFrame:
    """Return (conn, dir, rscale): the multiplier of the other direction's window (1 without both options;
    null when the handshake was not seen, as Wireshark does not judge then)."""
    s = t.filter(pl.col("syn")).group_by(G).agg(pl.col("tcp_wscale").first().cast(pl.Int64).alias("ws"))
    both = s.group_by("conn").agg(pl.col("ws").is_not_null().all().alias("both"), pl.len().alias("n"))
    s = s.join(both, on="conn").filter(pl.col("n") == 2).with_columns(
        pl.when(pl.col("both")).then(pl.lit(1) * (2 ** pl.col("ws").clip(0, 14))).otherwise(1).alias("rscale"))
    return s.select("conn", _other(pl.col("dir")).alias("dir"), "rscale")


def _finish(cand: pl.DataFrame) -> pl.DataFrame:
    """Return the retransmissions table from working rows: spurious decision, class, method, confidence."""
    retx = ~pl.col("netdup") & ~pl.col("reorder")
    rx_pos = pl.col("ev_rx").fill_null(False)
    rx_neg = (pl.col("ev_rx") == False).fill_null(False)  # noqa: E712 - null means no receiver capture
    # strongest evidence first (module doc)
    spur = pl.when(~retx).then(False).when(rx_pos).then(True).when(pl.col("ev_dsack")).then(True) \
        .when(rx_neg).then(False).when(pl.col("ev_rxv")).then(True).when(pl.col("ev_eifel")).then(True) \
        .when(pl.col("ev_acked")).then(True).otherwise(False)
    smethod = pl.when(rx_pos).then(pl.lit("receiver_capture")).when(pl.col("ev_dsack")).then(pl.lit("dsack")) \
        .when(rx_neg).then(None).when(pl.col("ev_rxv")).then(pl.lit("receiver_vantage")) \
        .when(pl.col("ev_eifel")).then(pl.lit("eifel")).when(pl.col("ev_acked")).then(pl.lit("already_acked"))
    sconf = pl.when(rx_pos).then(0.95).when(pl.col("ev_dsack")).then(0.9).when(pl.col("ev_rxv")).then(0.9) \
        .when(pl.col("ev_eifel")).then(0.85).when(pl.col("ev_acked")).then(0.8)
    out = cand.with_columns(spur.alias("spurious"), smethod.alias("_sm"), sconf.alias("_sc"))
    needed = pl.when(rx_neg).then(pl.lit("receiver_capture: the original never reached the receiver; "))\
        .when(pl.col("ev_rxv_neg")).then(pl.lit("receiver_vantage: the original never came here; ")).otherwise(pl.lit(""))
    cls = pl.when(pl.col("netdup")).then(pl.lit("network_duplicate")).when(pl.col("reorder")).then(pl.lit("reorder")) \
        .when(pl.col("spurious")).then(pl.lit("spurious")).when(pl.col("trigger") == "fast").then(pl.lit("fast")) \
        .otherwise(pl.lit("rto"))
    method = pl.when(pl.col("netdup") & (pl.col("copy_by") == "ip_id")) \
        .then(pl.lit("same IP id, length and TSval seen before here")) \
        .when(pl.col("netdup")).then(pl.lit("byte-identical (IP id, flags, ACK, window, TSval, TSecr) to the previous "
                                            f"transmission here, within {COPY_WINDOW_NS / 1e6:g} ms")) \
        .when(pl.col("reorder")).then(pl.format("{}: sent before the highest segment, first seen here", pl.col("_rm"))) \
        .when(pl.col("spurious")).then(pl.format("{} (trigger {})", pl.col("_sm"), pl.col("tmethod"))) \
        .otherwise(needed + pl.col("tmethod"))
    conf = pl.when(pl.col("netdup")).then(0.9) \
        .when(pl.col("reorder")).then(pl.when(pl.col("_rm") == "ip_id").then(0.85)
                                      .when(pl.col("_rm") == "tsval").then(0.8).otherwise(0.5)) \
        .when(pl.col("spurious")).then(pl.col("_sc")) \
        .when(rx_neg).then(pl.max_horizontal(pl.col("tconf"), pl.lit(0.9))).otherwise(pl.col("tconf"))
    ev_cap = pl.when(pl.col("spurious") & rx_pos | rx_neg & ~pl.col("spurious")).then(pl.col("rx_capture"))
    ev_frame = pl.when(pl.col("netdup") | pl.col("reorder")).then(pl.col("o_frame").fill_null(pl.col("nxt_frame"))) \
        .when(pl.col("spurious") & rx_pos).then(pl.col("rx_frame")) \
        .when(pl.col("spurious") & (pl.col("_sm") == "dsack")).then(pl.col("dsack_frame")) \
        .when(pl.col("spurious") & (pl.col("_sm") == "eifel")).then(pl.col("ack_frame")) \
        .when(pl.col("spurious")).then(pl.col("o_frame"))
    out = out.with_columns(cls.alias("class"), method.alias("method"), conf.alias("confidence"),
                           ev_cap.alias("evidence_capture"), ev_frame.alias("evidence_frame"),
                           (pl.col("seq_u") - pl.col("base")).alias("seq"), pl.col("tcp_seq").alias("seq_raw"),
                           pl.col("o_frame").alias("original_frame"), pl.col("o_ts").alias("original_ts_ns"),
                           pl.when(~pl.col("reorder")).then(pl.col("o_frame").is_not_null()).alias("original_captured"),
                           pl.col("silence").alias("silence_ns"), pl.col("rto_est").alias("rto_estimate_ns"))
    for c in ("capture_file", "vantage"):
        if c not in out.columns:
            out = out.with_columns(pl.lit(None, pl.String).alias(c))
    return conform(out.sort("frame").select([c.name for c in RETRANSMISSIONS]), RETRANSMISSIONS)


def classify(df: pl.DataFrame, capture_file: str | None = None, vantage: str | None = None
             ) -> dict[str, pl.DataFrame]:
    """Return {"retransmissions", "tcp_events"} of one capture's packet table (single-capture evidence)."""
    if capture_file is not None:
        df = df.with_columns(pl.lit(capture_file).alias("capture_file"))
    if vantage is not None:
        df = df.with_columns(pl.lit(vantage).alias("vantage"))
    _, cand, ev = _analyze(df)
    return {"retransmissions": _finish(cand), "tcp_events": _conform_events(ev, capture_file, vantage)}


def _conform_events(ev: pl.DataFrame, capture_file: str | None, vantage: str | None) -> pl.DataFrame:
    ev = ev.with_columns(pl.lit(capture_file, pl.String).alias("capture_file"),
                         pl.lit(vantage, pl.String).alias("vantage"))
    return conform(ev.select([c.name for c in TCP_EVENTS if c.name in ev.columns]), TCP_EVENTS)


# ------------------------------------------------------------------------------------------------
# the bundle

def _receiver_evidence(cand: pl.DataFrame, t: pl.DataFrame, rx: list[tuple[str, pl.DataFrame]]) -> pl.DataFrame:
    """Set ev_rx / rx_capture / rx_frame: did a receiver-side capture see an earlier transmission of the
    retransmitted bytes (True), or does it cover the time and never saw one (False)?"""
    return _receiver_evidence_slim(cand, _originals(t, cand), [(n, _rx_rows(r), _rx_span(r)) for n, r in rx])


def _originals(t: pl.DataFrame, cand: pl.DataFrame) -> pl.DataFrame:
    """Return the segments of `t` starting at a candidate's sequence number (its possible originals)."""
    # (filtered on the sequence number alone first: the semi-join on three keys then hashes few rows)
    return t.lazy().filter(pl.col("seg") & pl.col("seq_u").is_in(cand.get_column("seq_u").implode())).select(
        *G, "seq_u", pl.col("frame").alias("pf"), pl.col("tcp_seq").alias("sr"), pl.col("ip_id").alias("pid"),
        pl.col("tcp_tsval").alias("pts"), pl.col("idinfo").alias("pinfo")).collect() \
        .join(cand.select(*G, "seq_u").unique(), on=[*G, "seq_u"], how="semi")


def _rx_rows(r: pl.DataFrame) -> pl.DataFrame:
    """Return a receiver-side capture's segments: identity on the wire, frame and time."""
    return r.filter(pl.col("seg")).select(*G, pl.col("tcp_seq").alias("sr"), pl.col("ip_id").alias("pid"),
                                          pl.col("tcp_tsval").alias("pts"), pl.col("frame").alias("rf"),
                                          pl.col("ts_ns").alias("rts"))


def _rx_span(r: pl.DataFrame) -> pl.DataFrame:
    """Return (conn, dir, r0, r1): when a receiver-side capture saw each direction."""
    return r.group_by(G).agg(pl.col("ts_ns").min().alias("r0"), pl.col("ts_ns").max().alias("r1"))


def _receiver_evidence_slim(cand: pl.DataFrame, orig: pl.DataFrame,
                            rx: list[tuple[str, pl.DataFrame, pl.DataFrame]]) -> pl.DataFrame:
    """`_receiver_evidence` from the candidates' possible originals (`_originals`) and, per receiver-side
    capture, its name, segments (`_rx_rows`) and span (`_rx_span`)."""
    if not rx or cand.height == 0:
        return cand
    c = cand.with_row_index("_c")
    # every earlier transmission (here) starting at the same sequence number: its identity on the wire
    prev = c.select("_c", *G, "seq_u", "frame", "ts_ns").join(orig, on=[*G, "seq_u"]) \
        .filter(pl.col("pf") < pl.col("frame"))
    found = []
    cover = []
    for name, rr, span in rx:
        by_id = prev.filter(pl.col("pinfo")).join(rr.drop("pts"), on=[*G, "sr", "pid"])
        by_ts = prev.filter(~pl.col("pinfo") & pl.col("pts").is_not_null()).join(rr.drop("pid"), on=[*G, "sr", "pts"])
        hit = pl.concat([by_id.select("_c", "rf"), by_ts.select("_c", "rf")])
        found.append(hit.group_by("_c").agg(pl.col("rf").min()).with_columns(pl.lit(name).alias("rcap")))
        # identities are usable for this flow (ip ids or timestamps), and the receiver capture spans the
        # original's send time to well after the retransmission: a missing original is then evidence
        usable = c.join(span, on=G).filter(
            (pl.col("idinfo") | pl.col("tcp_tsval").is_not_null()) & pl.col("o_ts").is_not_null()
            & (pl.col("r0") <= pl.col("o_ts")) & (pl.col("r1") >= pl.col("ts_ns") + INITIAL_RTO_NS))
        cover.append(usable.select("_c").with_columns(pl.lit(name).alias("ncap")))
    f = pl.concat(found).sort("rf").unique("_c", keep="first")
    n = pl.concat(cover).unique("_c", keep="first")
    c = c.drop("ev_rx", "rx_capture", "rx_frame").join(f, on="_c", how="left").join(n, on="_c", how="left")
    c = c.with_columns(
        pl.when(pl.col("rf").is_not_null()).then(True).when(pl.col("ncap").is_not_null()).then(False)
        .alias("ev_rx"),
        pl.coalesce("rcap", "ncap").alias("rx_capture"), pl.col("rf").alias("rx_frame"))
    return c.drop("_c", "rf", "rcap", "ncap")


def _compact(df: pl.DataFrame) -> pl.DataFrame:
    """Return `df` with its strings copied out: rows taken from a large table keep that table's whole string
    buffers alive (polars' string views share them), a few kept rows would hold every capture's strings."""
    return df.with_columns(pl.col(pl.String) + "")


_MAC_KEY = ("wlan_ta", "wlan_seq", "wlan_frag", "wlan_retry")
MAC_RETRY_SPAN_NS = 1_000_000_000    # an 802.11 retransmission follows its first attempt within this


def _first_attempts(df: pl.DataFrame) -> pl.DataFrame:
    """Return an air capture's records without 802.11 retransmissions of an MPDU already recorded.

    A MAC retry repeats the same IP packet (same IP id) on the air: it is the link layer's
    retransmission, not TCP's and not a network duplicate.  The first attempt the sniffer heard
    stands for the packet (a later one when the first was missed).
    """
    if not set(_MAC_KEY) <= set(df.columns) or df.height == 0:
        return df
    gap = _mac_gap(df)
    again = pl.col("wlan_retry").fill_null(False) & pl.col("wlan_seq").is_not_null() & (gap <= MAC_RETRY_SPAN_NS)
    return df.filter(~again.fill_null(False)).drop(list(_MAC_KEY))


def _mac_gap(df: pl.DataFrame) -> pl.Series:
    """Return per record the time since the previous record (frame order) of the same (TA, sequence, fragment)."""
    code = pl.col("wlan_ta").cast(pl.Categorical).to_physical().cast(pl.Int64).fill_null(-1) + 1
    seq, frag = (pl.col(c).cast(pl.Int64).fill_null(-1) + 1 for c in ("wlan_seq", "wlan_frag"))
    m = df.select(code.alias("_t"), seq.alias("_s"), frag.alias("_f"), "frame", "ts_ns").with_row_index("_r")
    ns, nf = (int(m[c].max()) + 1 for c in ("_s", "_f"))
    # the MPDU identity as one integer (exact: a TA's code, 16-bit sequence and 8-bit fragment numbers fit)
    m = m.select("_r", "frame", "ts_ns", ((pl.col("_t") * ns + pl.col("_s")) * nf + pl.col("_f")).alias("_m"))
    if KERNEL and m.select((pl.col("frame").diff() > 0).all() & pl.col("frame").is_not_null().all()).item():
        # records in frame order: one pass remembering each identity's last time (`_tcpk.key_gap`)
        return key_gaps(m.get_column("_m"), m.get_column("ts_ns")).alias("g")
    # a sort of these few integer columns by identity, instead of a window over about one group per record
    o = m.sort("_m", "frame").select(
        "_r", pl.when(pl.col("_m") == pl.col("_m").shift(1)).then(pl.col("ts_ns") - pl.col("ts_ns").shift(1)).alias("g"))
    return o.sort("_r").get_column("g")


def _first_distinct(rows: pl.DataFrame) -> pl.Series:
    """Return per row of `rows` (directions contiguous, each in frame order) whether it is the first of its
    direction with its seq_u (`_tcpk.first_distinct`)."""
    g = rows.select(pl.struct(G).rle_id().cast(pl.Int64)).to_series().to_numpy()
    starts = np.flatnonzero(np.diff(g, prepend=-1)) if rows.height else np.zeros(0, np.int64)
    out = np.empty(rows.height, np.uint8)
    _tcpk.first_distinct(np.append(starts, rows.height).astype(np.int64), rows.get_column("seq_u").to_numpy(), out)
    return pl.Series("_first", out.view(np.bool_))


def key_gaps(keys: pl.Series, ts: pl.Series) -> pl.Series:
    """Return per row (rows in order) its time minus that of the previous row with the same key (null: the
    first of its key, or a null time), from the compiled kernel."""
    gap = np.empty(len(keys), np.int64)
    _tcpk.key_gap(keys.cast(pl.Int64, wrap_numerical=True).fill_null(_NUL).to_numpy(),
                  ts.cast(pl.Int64).fill_null(_NUL).to_numpy(), gap)
    return _from_kernel("gap", gap)


def build(tl: Any) -> dict[str, pl.DataFrame]:
    """Return the timeline's retransmissions and tcp_events tables (all captures, cross-vantage evidence).

    At an air capture only each MPDU's first recorded attempt counts (see `_first_attempts`).
    """
    # Per capture only what the cross-capture step reads is kept: the retransmission candidates, their
    # possible originals, and (receiver-side captures) each segment's identity and the span seen.
    per: list[tuple[str, pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]] = []
    # the capture's file, vantage and kind are the same on every row: added to the few candidate rows
    # only, not carried as three string columns through every step over all of its TCP rows
    want = [*NEEDS, "flow", "conn", "dir"]
    for e in tl.entries("wired") + tl.entries("air"):
        if "tcp_seq" not in tl.columns(e):
            continue
        # the packet table lives only while `prepare` reads it: passed on without a name here, so that
        # `prepare` frees it once it has its rows instead of holding it through all its window functions
        cols = want + (list(_MAC_KEY) if e.kind == "air" else [])
        t = prepare(_first_attempts(tl.packets(e, columns=cols)) if e.kind == "air" else tl.packets(e, columns=cols))
        if t.height == 0 and tl.packets(e, columns=["frame"]).height == 0:
            continue
        t, cand, ev = _analyze_prepared(t, e.kind)
        cand = cand.with_columns(pl.lit(e.file, pl.String).alias("capture_file"),
                                 pl.lit(e.vantage, pl.String).alias("vantage"), pl.lit(e.kind, pl.String).alias("kind"))
        rside = t.filter(pl.col("side") == "receiver") if e.kind != "air" else t.clear()
        per.append(tuple(_compact(x) if isinstance(x, pl.DataFrame) else x for x in (
            e.file, cand, _conform_events(ev, e.file, e.vantage), _originals(t, cand), _rx_rows(rside),
            _rx_span(rside) if rside.height else rside)))
        del t, rside, cand, ev
    rets, evs = [], []
    for name, cand, ev, orig, _, _ in per:
        # receiver-side captures of the other files, per direction of each connection
        rx = [(other, rows, span) for other, _, _, _, rows, span in per if other != name and span.height]
        rets.append(_finish(_receiver_evidence_slim(cand, orig, rx)))
        evs.append(ev)
    ret = pl.concat(rets) if rets else None
    ev = pl.concat(evs) if evs else None
    return {"retransmissions": conform(ret, RETRANSMISSIONS), "tcp_events": conform(ev, TCP_EVENTS)}
