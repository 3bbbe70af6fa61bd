"""The cross-layer join: every IP packet on the AP's wired side, its 802.11 transmissions, and its fate.

Inputs (from the timeline, all on the reference clock): the AP's wired capture(s) (kind ``wired``,
vantage ``ap_wired`` or any vantage starting with ``ap``), every air capture, and any other wired
capture that turns out to sit downstream of the AP (a station's own capture).

**No capture of the AP's wired side.** A wired capture upstream of the air stands in for it: of those
whose packets to the stations reach the air after them (a server's; a station's own capture holds its
copies after the air), the one the air shows most (`upstream_stand_in`).  Its downlink stamps
move later by the least delay from it to the air, its uplink stamps earlier by the least delay from the
air to it: the path's own delay, so that what a packet waited beyond it, and a loss on the path, count
as the AP's.  `stand_in_notes` says which capture stood in and by how much.

**Stations.** An 802.11 address that is the RA of a From-DS data frame or the TA of a To-DS data
frame; its IP address(es) come from the unencrypted data frames (RA/DA and ``ip_dst`` downlink,
TA/SA and ``ip_src`` uplink).  Downlink packets are the AP-side wired packets to a station's IP,
uplink packets those from one.

**MPDUs and attempts.** Unicast data frames carrying a payload are grouped into MSDUs by (TA, RA,
TID, sequence number): frames of one such key in capture order belong to one MSDU unless more than
`SPAN_NS` apart or a first fragment carries another IP packet (sequence numbers wrap at 4096).  The
group's attempts are its frames: first transmissions, retries (Retry bit), and the later fragments,
which carry no IP header and join their first fragment through (TA, RA, seq).  A-MPDU membership is
the radiotap A-MPDU reference.  Unencrypted data frames decode through LLC/SNAP into the same IP and
transport columns as wired packets, so a group meets its wired packet on the key of
`xlayer.timeline.match` (IPv4 id, addresses, protocol, lengths, ports, TCP seq/ack/flags/TSval ...) and
on time: downlink, the latest wired packet with that key at most `MATCH_WINDOW_NS` before the first
attempt (the clocks get `SLACK_NS` of leeway); uplink, the latest air group at most that long before
the wired packet (``match`` = ``key``; decrypted frames have their plaintext's columns and join so).

**Protected traffic without keys** (section "protected traffic without keys" below).  A keyless MSDU's
IP length is its MPDUs' length less the MAC header (QoS, HT Control, four addresses), the cipher's
header and MIC (CCMP-128 16 bytes, CCMP-256/GCMP-256 24, TKIP 20, WEP 8: per station, the one under
which lengths agree best), LLC/SNAP, FCS and an A-MSDU subframe header; a retry repeats its MPDU's
packet number (PN), so a first fragment with another PN is another MPDU.  A keyless station's IP is
its MAC on the AP's wired side (a bridge), else the address whose packets its frames resemble most
by (direction, length, second).  Per station queue and length, the packets the AP accepted meet its
MPDUs in FIFO order (MPDUs the sniffer missed keep their places); which packets a drop-tail queue
shared by the stations dropped follows from arrivals and departures (`protected_down`); uplink, every
confirmed MSDU is forwarded.  A size-only clock alignment is first corrected by the quickest packets
each way (`clock_correction`).  Such a pair has ``match`` = ``size_order`` (confidence 1), or
``ambiguous`` when equal-length packets taken as dropped reached the AP while it waited (confidence
1 / the number that could be it); fates, attempts and sojourns then follow as for keyed pairs.
Limits: two stations with the same kind of traffic at once and no bridge cannot be told apart (their
IPs stay unmatched: ``unknown``); a queue other than one shared FIFO (fq_codel, per-station queues)
makes the drops a guess, said by ``ambiguous``; an A-MSDU of several packets is not split.

**Confirmation.** An attempt is confirmed by an ACK (control subtype 13) that is the next record of
the same capture, addressed to the attempt's TA, at most `ACK_WINDOW_NS` after it (record order is
reception order; the stamps are the ends of reception, so the gap is SIFS plus the ACK's airtime plus
stamping jitter), or by the first Block Ack from the RA to the TA at most `BA_WINDOW_NS` after the
attempt whose bitmap has the attempt's sequence number set.  An MSDU is confirmed when an attempt of
its final fragment (More Fragments clear) is.  A station's own capture (a wired capture whose copies
of downlink packets come after the AP's) that holds the packet confirms it too (``acked_by`` =
``client``).

**Sequence spaces and capture loss.** QoS data frames are numbered per (TA, RA, TID); everything else
a transmitter sends (management, non-QoS data) shares one counter per TA.  Per space, the sequence
numbers seen are unwrapped in capture order (a step is taken modulo 4096 as a signed value, so
Block-Ack retransmissions of older numbers step back); a number inside the span seen but never seen
is an MPDU the sniffer missed (``holes``); ``capture_loss`` counts them per space and in total,
with the Block Ack bitmaps' evidence and the ACKs heard without their data frame beside them.  A
queue drop consumes no sequence number (it happens before the MAC numbers the frame).

Fates of a downlink packet:

* ``delivered``: an attempt was confirmed, or the station's capture shows it, or (``acked_by`` =
  ``inferred``) no ACK was heard but the AP went on to its next MPDU of that queue after fewer than
  `RETRY_LIMIT` transmissions (a far station's ACKs are often too weak for the sniffer);
* ``air_unacked``: seen on the air, never confirmed (failed after the retry limit, or the sniffer
  missed every ACK);
* ``sniffer_missed``: never seen on the air, but the station's capture has it, or the sequence
  numbers of its neighbours leave a hole for it: between the previous and the next packet of the
  same station and sequence space that were seen (in wired order: the AP's queue is FIFO), ``g``
  numbers are missing and ``k`` packets unseen; ``min(g, k)`` of them count as missed: first those
  that arrived after the AP started sending some downlink MPDU (of any station) since the previous
  wired arrival (a full drop-tail queue accepts a packet only once a slot freed), then the earliest;
* ``dropped_at_ap``: the rest: never on the air, with seen packets after it and no hole for it;
* ``unknown``: no later packet of its station was seen (still queued at the end, or the station
  left), outside the air capture's span, or protected traffic none of whose packets could be paired.

Uplink (station -> the AP's wired side): ``delivered`` (on the wired side after the air),
``sniffer_missed`` (on the wired side, never seen on the air: it must have crossed it),
``dropped_at_ap`` (confirmed on the air, never forwarded to the wired side), ``air_unacked`` (seen,
never confirmed, never forwarded), ``unknown`` (within 1 s of the wired capture's end, or before its start).
Air-only uplink rows are kept only for conversations the AP's wired side carries (a packet to the AP
itself never leaves it).

Sojourn: downlink, the first attempt's transmission start (its capture stamp less the PPDU airtime,
`xlayer.timeline.match.airtime`; an RTS/CTS exchange before it is not counted) minus the wired
arrival: the time in the AP's queue; uplink, the wired stamp minus the last attempt's end of
reception.  Matching takes the nearest stamp with the same key, so a clock misalignment shows as a
wrong (even negative) sojourn instead of a lost match.  Several air captures: each packet takes the one
that saw most of its attempts; one that saw none lets the others' evidence decide (missed before
dropped before unknown).
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

import xlayer.timeline.match as mm
from xlayer.metrics.keys import index_rows, with_sorted_ids
from xlayer.metrics.schema import MATCH_COLUMNS, Column, conform, register
from xlayer.timeline.airtime import COLUMNS as AIRTIME_COLUMNS
from xlayer.timeline.open import mapped_ipc, park

if TYPE_CHECKING:
    from xlayer.timeline.open import Timeline

NEEDS: tuple[str, ...] = tuple(dict.fromkeys(
    ("frame", "ts_ns", "wirelen", "malformed", "fcs_bad", "rt_layout", "rt_len", "rt_flags", "phy_rate_mbps", "phy",
     "nss", "ampdu_ref", "ampdu_flags", "wlan_type", "wlan_subtype", "wlan_to_ds", "wlan_from_ds",
     "wlan_retry", "wlan_more_frag", "wlan_protected", "wlan_order", "wlan_ra", "wlan_ta", "wlan_sa",
     "wlan_da", "wlan_seq", "wlan_frag", "wlan_tid", "wlan_ba_ssn", "wlan_ba_bitmap", "ip_dscp", "wlan_pn",
     "wlan_amsdu", "wlan_decrypted", "eth_src", "eth_dst")
    + tuple(c for c, _ in mm.IP_KEY)))

# what `_wired_ip` reads of a wired capture, and what `analyse_air` reads of an air capture (airtime's too)
_WIRED = ["capture_file", "frame", "ts_ns", "flow", "ip_dscp", "malformed", "eth_src", "eth_dst",
          *(c for c, _ in mm.IP_KEY)]
_AIR = list(dict.fromkeys((*NEEDS, *AIRTIME_COLUMNS, "flow")))
# (an air capture has no Ethernet addresses: read, they would be a million null strings each)
_AIR_READ = [c for c in _AIR if c not in ("eth_src", "eth_dst")]
# what `analyse_air` reads of the usable air records after their airtime and match key
_AIR_KEPT = ("_i", "_ra_grp", "frame", "ts_ns", "tx_start_ns", "key", "wlan_type", "wlan_subtype", "wlan_to_ds", "wlan_from_ds",
             "wlan_retry", "wlan_more_frag", "wlan_protected", "wlan_ra", "wlan_ta", "_ra_da", "_ta_sa", "wlan_seq",
             "wlan_frag", "wlan_tid", "wlan_ba_ssn", "wlan_ba_bitmap", "phy_rate_mbps", "ampdu_ref", "ip_src", "ip_dst",
             "ip_id", "ip_len", "flow", "wlan_pn", "wlan_amsdu", "wlan_decrypted", "_mpdu", "_hdr")

SPAN_NS = 100_000_000           # attempts of one MSDU fall within this (as in align_match)
MATCH_WINDOW_NS = 10_000_000_000  # a packet waits at most this long between wired side and air
SLACK_NS = 2_000_000            # clock alignment error allowed when ordering wired and air stamps
ACK_WINDOW_NS = 1_000_000       # data end -> ACK end: SIFS + ACK airtime (<= 304 us at 1 Mbit/s) + jitter
BA_WINDOW_NS = 5_000_000        # data end -> the Block Ack that answers it (BAR exchanges included)
RETRY_LIMIT = 7                 # transmissions of an MPDU before giving up (dot11ShortRetryLimit, ns-3, Linux)
FATES = ("delivered", "air_unacked", "sniffer_missed", "dropped_at_ap", "unknown")

_C = Column


def _packet_columns(direction: str) -> tuple[Column, ...]:
    down = direction == "down"
    return (
        _C("capture_file", pl.Utf8, "", "the AP's wired capture holding the packet, or the one standing in for it (null: seen on the air only)"),
        _C("frame", pl.Int64, "", "frame number in that capture"),
        _C("ts_ns", pl.Int64, "ns", "wired stamp, reference clock" + (" (arrival at the AP)" if down else
                                                                     " (forwarded by the AP)")),
        _C("flow", pl.Utf8, "", "flow (xlayer.timeline.flowkey)"),
        _C("station", pl.Utf8, "", "the station's 802.11 address"),
        _C("ip_id", pl.UInt32, "", "IPv4 identification"),
        _C("ip_len", pl.UInt32, "B", "IP total length"),
        _C("air_capture_file", pl.Utf8, "", "the air capture the attempts are from"),
        _C("first_air_frame", pl.Int64, "", "frame number of the first attempt seen in the air capture"),
        _C("last_air_frame", pl.Int64, "", "frame number of the last attempt seen"),
        _C("first_air_ts_ns", pl.Int64, "ns", "first attempt's stamp (end of reception), reference clock"),
        _C("last_air_ts_ns", pl.Int64, "ns", "last attempt's stamp (end of reception), reference clock"),
        _C("sojourn_ns", pl.Int64, "ns",
           "first transmission start minus wired arrival (time queued in the AP)" if down else
           "wired stamp minus the last attempt's end of reception (time in the AP)"),
        _C("mac_seq", pl.UInt16, "", "802.11 sequence number"),
        _C("tid", pl.UInt8, "", "QoS TID (null: non-QoS data)"),
        _C("n_attempts", pl.UInt32, "", "transmissions seen (all fragments, all retries)"),
        _C("n_retries", pl.UInt32, "", "transmissions seen with the Retry bit set"),
        _C("n_fragments", pl.UInt32, "", "802.11 fragments of the MSDU (highest fragment number seen + 1)"),
        _C("rates_mbps", pl.List(pl.Float64), "Mbit/s", "PHY rate of each transmission seen, in order"),
        _C("ampdu", pl.Boolean, "", "some transmission was inside an A-MPDU"),
        _C("acked_by", pl.Utf8, "", "ack, blockack, client (the station's capture has it) or none"),
        _C("ack_frame", pl.Int64, "", "frame number of the confirming ACK/Block Ack in the air capture"),
        _C("fate", pl.Utf8, "", ", ".join(FATES) + " (module docstring)"),
        *MATCH_COLUMNS,
    )


DOWNLINK = register("downlink", _packet_columns("down"),
                    "one IP packet on the AP's wired side going to a station: its 802.11 MPDU and fate")
UPLINK = register("uplink", _packet_columns("up"),
                  "one IP packet from a station: its 802.11 MPDU and whether the AP's wired side forwarded it")
ATTEMPTS = register("attempts", (
    _C("capture_file", pl.Utf8, "", "air capture"),
    _C("frame", pl.Int64, "", "frame number of the transmission in the air capture"),
    _C("ts_ns", pl.Int64, "ns", "stamp (end of reception), reference clock"),
    _C("tx_start_ns", pl.Int64, "ns", "estimated transmission start (stamp less the PPDU airtime)"),
    _C("direction", pl.Utf8, "", "down (From DS) or up (To DS)"),
    _C("station", pl.Utf8, "", "the station's 802.11 address"),
    _C("ta", pl.Utf8, "", "transmitter address"), _C("ra", pl.Utf8, "", "receiver address"),
    _C("mac_seq", pl.UInt16, "", "802.11 sequence number"),
    _C("frag", pl.UInt8, "", "fragment number"),
    _C("tid", pl.UInt8, "", "QoS TID (null: non-QoS data)"),
    _C("retry", pl.Boolean, "", "Retry bit"),
    _C("more_frag", pl.Boolean, "", "More Fragments bit"),
    _C("rate_mbps", pl.Float64, "Mbit/s", "PHY rate"),
    _C("ampdu_ref", pl.UInt32, "", "A-MPDU reference (null: not in an A-MPDU)"),
    _C("attempt", pl.UInt32, "", "0-based index of this transmission among its MSDU's transmissions seen"),
    _C("acked", pl.Boolean, "", "an ACK or a Block Ack confirmed this transmission"),
    _C("acked_by", pl.Utf8, "", "ack, blockack or none"),
    _C("ack_frame", pl.Int64, "", "frame number of the confirming ACK/Block Ack"),
    _C("wired_capture_file", pl.Utf8, "", "the AP's wired capture holding the packet (null: not joined)"),
    _C("wired_frame", pl.Int64, "", "frame number of the packet in that capture"),
), "one 802.11 transmission of a unicast data MPDU seen by an air capture, joined to its wired packet")
CAPTURE_LOSS = register("capture_loss", (
    _C("capture_file", pl.Utf8, "", "air capture"),
    _C("ta", pl.Utf8, "", "transmitter (null: the whole capture)"),
    _C("ra", pl.Utf8, "", "receiver of a QoS sequence space (null: the transmitter's shared space, or all)"),
    _C("direction", pl.Utf8, "", "down, up, other (neither From nor To DS), all"),
    _C("mpdus_captured", pl.Int64, "", "distinct sequence numbers seen"),
    _C("mpdus_missed", pl.Int64, "", "sequence numbers inside the span seen that were never seen"),
    _C("mpdus_inferred", pl.Int64, "", "captured + missed: MPDUs the transmitter sent in the span"),
    _C("loss_fraction", pl.Float64, "fraction", "missed / inferred"),
    _C("blockack_missed", pl.Int64, "", "of the missed, those a Block Ack bitmap says the receiver got"),
    _C("orphan_acks", pl.Int64, "", "ACKs to this transmitter with no frame of it just before "
       "(a transmission the sniffer missed; counts attempts, not MPDUs)"),
    _C("method", pl.Utf8, "", "how missed was inferred (seq_gaps)"),
), "sniffer capture loss of one air capture, per sequence space and in total")

TABLES = {"downlink": DOWNLINK, "uplink": UPLINK, "attempts": ATTEMPTS, "capture_loss": CAPTURE_LOSS}

_ATT_KEEP = ("frame", "ts_ns", "tx_start_ns", "direction", "station", "ta", "ra", "mac_seq", "frag", "tid",
             "retry", "more_frag", "rate_mbps", "ampdu_ref")


# ---------------------------------------------------------------------------------------------
# one air capture


def _group_addr(col: str) -> pl.Expr:
    """Return whether a MAC address column (strings) is a group (broadcast/multicast) address."""
    return pl.col(col).str.slice(1, 1).is_in(list("13579bdfBDF"))


# The air records' address and flow columns, as categorical codes from `_usable_air` on: 4 bytes a row where a
# string view took 16 (and a 17-byte address its copy), in every table the analysis and the join build from
# them (attempts, spaces, MSDU groups, the matched rows); the tables' strings come back only in `conform`.
# (polars compares, sorts and takes the least of categoricals by their strings: orders and ties are unchanged)
_AIR_CODED = ("wlan_ra", "wlan_ta", "wlan_sa", "wlan_da", "flow")


def _coded(df: pl.DataFrame, cols: Sequence[str]) -> pl.DataFrame:
    """Return `df` with those of `cols` it holds as strings cast to categorical codes."""
    cast = [pl.col(c).cast(pl.Categorical) for c in cols if c in df.columns and df.schema[c] in (pl.String, pl.Null)]
    return df.lazy().with_columns(cast).collect() if cast else df


def _mac_header_len() -> pl.Expr:
    """Return the 802.11 MAC header's length: 24, +6 with four addresses, +2 QoS, +4 HT Control (+HTC in QoS)."""
    qos = (pl.col("wlan_type") == 2) & ((pl.col("wlan_subtype").cast(pl.Int32) & 8) != 0)
    return (24 + 6 * (pl.col("wlan_to_ds") & pl.col("wlan_from_ds")).fill_null(False).cast(pl.Int64)
            + 2 * qos.fill_null(False).cast(pl.Int64)
            + 4 * (qos & pl.col("wlan_order")).fill_null(False).cast(pl.Int64))


def _usable_air(air: pl.DataFrame) -> pl.DataFrame:
    """Return the air records with a decoded MAC header and a good FCS, record order kept, with key and tx start."""
    # (added as columns, not by `with_columns` on the capture's every column: that took 0.1 s a call on a
    # million records; the Ethernet addresses, never read of an air capture, are left out)
    n = air.height
    air = air.hstack([pl.Series(c, [], pl.Null).extend_constant(None, n) for c in NEEDS
                      if c not in air.columns and c not in ("eth_src", "eth_dst")])
    # A record malformed past its MAC header still counts as a transmission; its IP fields are used
    # only in a first fragment, whose IP packet goes on in the next fragments ("total length past end").
    usable = air.select((pl.col("wlan_type").is_not_null() & ~pl.col("fcs_bad").fill_null(False)).alias("ok"))
    air = air.with_row_index("_i")
    # (nearly always every record is: a filter would copy every column of the capture for nothing)
    if not usable.get_column("ok").all():
        air = air.filter(usable.get_column("ok"))
    del usable
    # transmission start: the PPDU's end (the last stamp of an A-MPDU) less its airtime
    # a first fragment's IP length is the whole packet's, not what the fragment carries
    # (airtime is handed only the columns it reads: what it does not find takes its defaults, as before)
    frag0 = pl.col("wlan_more_frag").fill_null(False)
    dur, known, mpdu, _ = mm.airtime(air.select(
        *(c for c in AIRTIME_COLUMNS if c in air.columns and c != "ip_len"),
        pl.when(frag0).then(None).otherwise(pl.col("ip_len")).alias("ip_len")))
    del frag0
    ppdu_end = pl.when(pl.col("ampdu_ref").is_not_null()).then(pl.col("ts_ns").max().over("ampdu_ref")) \
        .otherwise(pl.col("ts_ns"))
    dur = pl.Series("_dur", np.where(known, dur, 0.0).astype(np.int64))
    # the records' addresses and flows as codes (`_AIR_CODED`)
    coded = {c: pl.col(c).cast(pl.Categorical) for c in _AIR_CODED
             if c in air.columns and air.schema[c] in (pl.String, pl.Null)}
    made = {
        # (whether the RA is a group address is read off its string once: the rest sees its code)
        "_ra_grp": _group_addr("wlan_ra"),
        "tx_start_ns": ppdu_end - pl.lit(dur),
        "key": pl.when((pl.col("wlan_type") == 2) & pl.col("ip_src").is_not_null()
                       & (pl.col("malformed").is_null() | pl.col("wlan_more_frag").fill_null(False)))
        .then(mm._key_expr()),
        # of the SA and DA, `_stations` reads only whether they are the TA and RA: two booleans, not two
        # address strings per record held through the analysis
        "_ra_da": pl.col("wlan_ra") == pl.col("wlan_da"), "_ta_sa": pl.col("wlan_ta") == pl.col("wlan_sa"),
        # the MPDU's length on the air (FCS included) and its MAC header's: a protected frame's IP length follows
        "_mpdu": pl.lit(pl.Series(np.ma.masked_array(mpdu, mpdu == -1), dtype=pl.Int64)),
        "_hdr": _mac_header_len(),
    }
    del mpdu, dur
    # one pass over the records for every column the analysis reads next (the radio and IP key columns
    # served airtime and the key only), not a copy of the capture's columns per step
    return air.lazy().select([made[c].alias(c) if c in made else coded[c].alias(c) if c in coded else pl.col(c)
                              for c in _AIR_KEPT if c in made or c in air.columns]).collect()


def _stations(air: pl.DataFrame) -> pl.DataFrame:
    """Return (station, ip) pairs learnt from unencrypted data frames (down: RA/DA & ip_dst; up: TA/SA & ip_src;
    `_ra_da`, `_ta_sa`: whether the RA is the DA, the TA the SA)."""
    # lazily, each direction's pairs made distinct before they meet: the filters then copy only the columns
    # read, and no table of one row per data frame is built
    d = air.lazy().filter((pl.col("wlan_type") == 2) & pl.col("ip_src").is_not_null() & ~pl.col("_ra_grp"))
    down = d.filter(pl.col("wlan_from_ds") & ~pl.col("wlan_to_ds") & pl.col("_ra_da")) \
        .select(pl.col("wlan_ra").alias("station"), pl.col("ip_dst").alias("ip")).unique()
    up = d.filter(pl.col("wlan_to_ds") & ~pl.col("wlan_from_ds") & pl.col("_ta_sa")) \
        .select(pl.col("wlan_ta").alias("station"), pl.col("ip_src").alias("ip")).unique()
    return pl.concat([down.collect(), up.collect()]).unique()


def _before_in_run(x: pl.Expr, new_run: pl.Expr) -> pl.Expr:
    """Return per row the last non-null `x` on an earlier row of its run (null if none); a run's rows are
    contiguous and `new_run` is true on its first row."""
    # x.forward_fill().over(run).shift(1).over(run) without the windows: over some 100 k runs of a row or
    # two, each window took longer than the rest of the attempts' grouping
    i = pl.int_range(pl.len())
    start = pl.when(new_run).then(i).forward_fill()
    filled = pl.when(pl.when(x.is_not_null()).then(i).forward_fill() >= start).then(x.forward_fill())
    return pl.when(~new_run).then(filled.shift(1))


def _attempts(air: pl.DataFrame) -> pl.DataFrame:
    """Return the unicast payload-carrying data frames, with direction, station and MSDU group id `gid`."""
    # lazily: the filter then copies only the columns selected, not every column of the air records
    d = air.lazy().filter((pl.col("wlan_type") == 2) & ((pl.col("wlan_subtype").cast(pl.Int32) & 4) == 0)
                          & pl.col("wlan_seq").is_not_null() & pl.col("wlan_ra").is_not_null()
                          & pl.col("wlan_ta").is_not_null() & ~pl.col("_ra_grp"))
    down = pl.col("wlan_from_ds") & ~pl.col("wlan_to_ds")
    up = pl.col("wlan_to_ds") & ~pl.col("wlan_from_ds")
    d = d.select(
        "_i", "frame", "ts_ns", "tx_start_ns", "key",
        pl.when(down).then(pl.lit("down")).when(up).then(pl.lit("up")).otherwise(pl.lit("other")).alias("direction"),
        pl.when(down).then(pl.col("wlan_ra")).when(up).then(pl.col("wlan_ta")).alias("station"),
        pl.col("wlan_ta").alias("ta"), pl.col("wlan_ra").alias("ra"), pl.col("wlan_seq").alias("mac_seq"),
        pl.col("wlan_frag").fill_null(0).alias("frag"),
        pl.when((pl.col("wlan_subtype").cast(pl.Int32) & 8) != 0).then(pl.col("wlan_tid")).alias("tid"),
        ((pl.col("wlan_subtype").cast(pl.Int32) & 8) != 0).alias("_qos"),
        pl.when((pl.col("wlan_subtype").cast(pl.Int32) & 8) != 0).then(pl.col("wlan_tid")).cast(pl.Int16).fill_null(-1)
        .alias("_tid"),
        pl.col("wlan_retry").fill_null(False).alias("retry"),
        pl.col("wlan_more_frag").fill_null(False).alias("more_frag"),
        pl.col("phy_rate_mbps").alias("rate_mbps"), "ampdu_ref",
        pl.col("wlan_protected").fill_null(False).alias("protected"),
        # protected and not decrypted (no keys, or none that fit): matched by size and order, not by key
        (pl.col("wlan_protected").fill_null(False) & ~pl.col("wlan_decrypted").fill_null(False)
         & pl.col("_noip")).alias("nokey"),
        pl.col("wlan_pn").cast(pl.UInt64).alias("pn"), pl.col("wlan_amsdu").fill_null(False).alias("amsdu"),
        # what follows the MAC header, FCS excluded: cipher header and MIC, LLC/SNAP and the IP packet
        (pl.col("_mpdu") - pl.col("_hdr") - 4).alias("body"),
        *(c for c in ("flow", "ip_id", "ip_len") if c in air.columns)).collect()
    # The rows stay in record order: only the few key columns are sorted, the (ta, ra, tid) spaces as
    # numbers in their sort order (so the group ids are numbered as before).
    part = ["_s", "mac_seq"]
    k = with_sorted_ids(d.select("ta", "ra", "_tid", "mac_seq", "_i", "ts_ns", "frag", "key", "pn",
                                 pl.int_range(pl.len(), dtype=pl.UInt32).alias("_r")), ["ta", "ra", "_tid"], "_s") \
        .drop("ta", "ra", "_tid")
    # by (space, seq, _i): the rows are in _i order, so a stable sort on one integer (4x quicker than three keys)
    k = k.sort(pl.col("_s").cast(pl.Int64) * 65536 + pl.col("mac_seq").cast(pl.Int64), maintain_order=True)
    # the key columns are sorted: a run of equal (ta, ra, tid, seq) is one window, its rows contiguous
    run = pl.struct(part).rle_id()
    first = pl.col("_q").shift(1).ne_missing(pl.col("_q"))
    gap = (pl.col("ts_ns") - pl.when(~first).then(pl.col("ts_ns").shift(1))) > SPAN_NS
    k0 = pl.when(pl.col("frag") == 0).then(pl.col("key"))
    # (lazily: each eager step took 10-30 ms more on a million attempts)
    k = k.lazy().with_columns(run.alias("_q"))
    k = k.with_columns(_before_in_run(k0, first).alias("_pk"))
    other_packet = (pl.col("frag") == 0) & pl.col("key").is_not_null() & pl.col("_pk").is_not_null() \
        & (pl.col("key") != pl.col("_pk"))
    # a retry repeats its MPDU's packet number: a first fragment with another PN is another MPDU (a sequence
    # number reused after a wrap, or by a transmitter that restarted)
    p0 = pl.when(pl.col("frag") == 0).then(pl.col("pn"))
    k = k.with_columns(_before_in_run(p0, first).alias("_pp"))
    other_pn = (pl.col("frag") == 0) & pl.col("pn").is_not_null() & pl.col("_pp").is_not_null() \
        & (pl.col("pn") != pl.col("_pp"))
    k = k.select("_r", (first | gap.fill_null(False) | other_packet.fill_null(False) | other_pn.fill_null(False))
                 .cast(pl.Int64).cum_sum().alias("gid")).collect()
    # in the sorted keys a group is a run of rows in record order: its attempts are numbered from its start
    g = k["gid"].to_numpy()
    n = len(g)
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]]) if n else np.zeros(0, np.int64)
    within = np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))
    r = k["_r"].to_numpy()
    gid, attempt = np.empty(n, np.int64), np.empty(n, np.uint32)
    gid[r], attempt[r] = g, within
    return d.hstack([pl.Series("gid", gid), pl.Series("attempt", attempt)])


def _ba_bits(ba: pl.DataFrame, columns: tuple[str, ...] | None = None) -> pl.DataFrame:
    """Return (ba_i, frame, ts_ns, ta, ra, seq) for every sequence number a Block Ack bitmap marks received
    (only `columns` of them, when given)."""
    ba = ba.filter(pl.col("wlan_ba_bitmap").is_not_null() & pl.col("wlan_ba_ssn").is_not_null()
                   & (pl.col("wlan_ba_bitmap").str.len_chars() % 2 == 0))
    schema = {"ba_i": pl.UInt32, "ba_frame": pl.Int64, "ba_ts": pl.Int64, "ba_ta": pl.Utf8, "ba_ra": pl.Utf8,
              "mac_seq": pl.Int64}
    want = [c for c in schema if columns is None or c in columns]
    src = {"ba_i": "_i", "ba_frame": "frame", "ba_ts": "ts_ns", "ba_ta": "wlan_ta", "ba_ra": "wlan_ra"}
    out = []
    for n, part in ba.group_by(pl.col("wlan_ba_bitmap").str.len_chars().alias("_n")):
        nbytes = int(n[0]) // 2
        if nbytes == 0:
            continue
        try:
            raw = bytes.fromhex("".join(part["wlan_ba_bitmap"].to_list()))
        except ValueError:
            continue
        # bit k of octet j (LSB first) stands for SSN + 8j + k
        bits = np.unpackbits(np.frombuffer(raw, np.uint8).reshape(-1, nbytes), axis=1, bitorder="little")
        r, off = np.nonzero(bits)
        ssn = part["wlan_ba_ssn"].to_numpy().astype(np.int64)
        # one row per bit set: the Block Ack's columns gathered by polars (the addresses as Python objects,
        # one per bit, were the largest part), and only those asked for
        idx = pl.Series(r)
        out.append(pl.DataFrame([part.get_column(src[c]).gather(idx).alias(c) if c != "mac_seq"
                                 else pl.Series("mac_seq", ((ssn[r] + off) % 4096).astype(np.int64)) for c in want]))
    if not out:
        return pl.DataFrame(schema={c: schema[c] for c in want})
    return pl.concat(out, how="vertical_relaxed")


BA_MAX_BYTES = 512      # a bitmap this long or shorter marks each sequence number (mod 4096) at most once


def _ba_marked(ba: pl.DataFrame, b: pl.Series, seq: pl.Series) -> pl.Series | None:
    """Return per (Block Ack row `b` of `ba`, sequence number `seq`) whether that Block Ack's bitmap marks the
    number received (false: no Block Ack, or no bitmap `_ba_bits` reads), or None where that cannot be read
    off each bitmap at one place (a frame number shared by two Block Acks, a bitmap past `BA_MAX_BYTES`)."""
    if ba.get_column("frame").is_duplicated().any():
        return None     # (`_ba_bits`' bits are keyed by frame number: two Block Acks would pool theirs)
    hexes = ba.get_column("wlan_ba_bitmap")
    ok = (hexes.is_not_null() & ba.get_column("wlan_ba_ssn").is_not_null() & (hexes.str.len_chars() % 2 == 0)
          & (hexes.str.len_chars() > 0)).fill_null(False)
    start = np.full(ba.height, -1, np.int64)        # each Block Ack's first byte in `raw`, -1: no bits
    nbytes = np.zeros(ba.height, np.int64)
    raw, at = [], 0
    # bitmaps of one length decoded together, and skipped together if one is no hex (as `_ba_bits` does)
    lens = hexes.str.len_chars().fill_null(0).to_numpy()
    for n in np.unique(lens[ok.to_numpy()]):
        rows = np.flatnonzero(ok.to_numpy() & (lens == n))
        try:
            got = bytes.fromhex("".join(hexes.gather(pl.Series(rows)).to_list()))
        except ValueError:
            continue
        if n // 2 > BA_MAX_BYTES:
            return None
        start[rows] = at + np.arange(len(rows)) * (n // 2)
        nbytes[rows] = n // 2
        raw.append(np.frombuffer(got, np.uint8))
        at += len(got)
    raw = np.concatenate(raw) if raw else np.zeros(1, np.uint8)
    bi = b.cast(pl.Int64).fill_null(-1).to_numpy()
    sq = seq.cast(pl.Int64).fill_null(-1).to_numpy()
    has = bi >= 0
    bi = np.where(has, bi, 0)
    ssn = ba.get_column("wlan_ba_ssn").cast(pl.Int64).fill_null(0).to_numpy()
    # bit k of octet j (LSB first) stands for SSN + 8j + k (mod 4096)
    off = (sq - ssn[bi]) % 4096 if len(ssn) else np.zeros(len(bi), np.int64)
    inside = has & (sq >= 0) & (sq < 4096) & (start[bi] >= 0) & (off < 8 * nbytes[bi])
    byte = raw[np.where(inside, start[bi] + off // 8, 0)]
    return pl.Series("_marked", inside & (((byte >> (off % 8).astype(np.uint8)) & 1) == 1))


def _not_seen(bits: pl.DataFrame, att: pl.DataFrame) -> pl.DataFrame:
    """Return the rows of `bits` (ta, ra, mac_seq) no attempt has (an anti join on the three)."""
    codes = [x.get_column(c) for x in (bits, att) for c in ("ta", "ra")]
    if not all(c.dtype == pl.Categorical for c in codes) or max(c.to_physical().max() or 0 for c in codes) >= 1 << 20:
        seen = att.select("ta", "ra", pl.col("mac_seq").cast(pl.Int64)).unique()
        return bits.join(seen, on=["ta", "ra", "mac_seq"], how="anti")
    # the addresses' codes and the number as one integer: one 8-byte key hashed, not three columns
    # (a null address makes a null key, which meets none, as in the join)
    key = ((pl.col("ta").to_physical().cast(pl.Int64) * (1 << 20) + pl.col("ra").to_physical().cast(pl.Int64)) * 4096
           + pl.col("mac_seq").cast(pl.Int64))
    seen = att.select(key.alias("_k")).to_series()
    return bits.lazy().filter(~key.is_in(seen.implode()).fill_null(False)).collect()


def _ba_pairs(ba: pl.DataFrame, bits: pl.DataFrame) -> pl.DataFrame:
    """Return the distinct (ta, ra, mac_seq) the Block Acks `ba` say arrived (ta: the data's transmitter, the
    Block Ack's receiver) from their `bits` (ba_i, mac_seq), numbering the few address pairs first."""
    pairs = ba.select(pl.col("wlan_ra").alias("ta"), pl.col("wlan_ta").alias("ra"))
    ids = pairs.unique().with_row_index("_pid")
    pid = pairs.join(ids, on=["ta", "ra"], how="left", nulls_equal=True, maintain_order="left").get_column("_pid")
    rows = pl.Series(_positions(ba.get_column("_i"), bits.get_column("ba_i")))
    # (the pair and the number as one integer: one 8-byte key hashed per bit, not a row of two columns)
    k = (pid.gather(rows).cast(pl.Int64) * 4096 + bits.get_column("mac_seq")).alias("_k").to_frame().unique()
    got = k.select((pl.col("_k") // 4096).cast(pl.UInt32).alias("_pid"), (pl.col("_k") % 4096).alias("mac_seq"))
    return got.join(ids, on="_pid", how="left").select("ta", "ra", "mac_seq")


def _confirm(air: pl.DataFrame, att: pl.DataFrame, ba: pl.DataFrame | None = None,
             bits: pl.DataFrame | None = None) -> pl.DataFrame:
    """Return the attempts with acked_by (ack / blockack / none) and ack_frame; `ba`, `bits`: the Block Acks
    among the air records and `_ba_bits(ba, ("ba_i", "mac_seq"))`, when already made."""
    # the record after each attempt, gathered by position: a join on `_i` hashed a million keys for it
    nxt = _positions(air.get_column("_i"), att.get_column("_i")) + 1
    beyond = pl.Series(nxt >= air.height)
    nxt = air.select(pl.col("wlan_type").alias("_nt"), pl.col("wlan_subtype").alias("_ns"),
                     pl.col("wlan_ra").alias("_nra"), pl.col("ts_ns").alias("_nts"),
                     pl.col("frame").alias("_nframe"))[np.minimum(nxt, max(air.height - 1, 0))]
    if beyond.any():
        nxt = nxt.with_columns(pl.when(~beyond).then(pl.all()).name.keep())
    att = att.hstack(nxt.get_columns())
    del nxt, beyond
    is_ack = ((pl.col("_nt") == 1) & (pl.col("_ns") == 13) & (pl.col("_nra") == pl.col("ta"))
              & ((pl.col("_nts") - pl.col("ts_ns")).abs() <= ACK_WINDOW_NS)).fill_null(False)
    att = att.lazy().with_columns(pl.when(is_ack).then(pl.col("_nframe")).alias("_ack_frame")) \
        .drop("_nt", "_ns", "_nra", "_nts", "_nframe").collect()
    # Block Ack: the first one from the RA to the TA after the PPDU ends
    if ba is None:
        ba = air.filter((pl.col("wlan_type") == 1) & (pl.col("wlan_subtype") == 9))
    if ba.height:
        bas = ba.select(pl.col("ts_ns").alias("ba_ts"), pl.col("frame").alias("ba_frame"),
                        pl.col("wlan_ta").alias("ra"), pl.col("wlan_ra").alias("ta"),
                        pl.int_range(pl.len(), dtype=pl.UInt32).alias("_b")).sort("ba_ts")
        ppdu_end = pl.when(pl.col("ampdu_ref").is_not_null()).then(pl.col("ts_ns").max().over("ampdu_ref")) \
            .otherwise(pl.col("ts_ns"))
        q = att.select(pl.int_range(pl.len(), dtype=pl.UInt32).alias("_r"), "ta", "ra", "mac_seq",
                       ppdu_end.alias("_end")).sort("_end")
        q = q.join_asof(bas, left_on="_end", right_on="ba_ts", by=["ta", "ra"], strategy="forward",
                        tolerance=BA_WINDOW_NS, check_sortedness=False)
        marked = _ba_marked(ba, q.get_column("_b"), q.get_column("mac_seq"))
        if marked is None:
            # the bits set, as one integer per (Block Ack frame, sequence number): a membership test on it holds
            # far less than a two-column join of every attempt against every bit (one bit per pair and frame)
            pair = pl.col("ba_frame") * 4096 + pl.col("mac_seq").cast(pl.Int64)
            if bits is None:
                bits = _ba_bits(ba, ("ba_i", "mac_seq"))
            # (each bit's Block Ack frame number gathered by the Block Ack's row)
            rows = pl.Series(_positions(ba.get_column("_i"), bits.get_column("ba_i")))
            bits = bits.select(ba.get_column("frame").gather(rows).alias("ba_frame"), "mac_seq") \
                .select(pair.alias("_k")).get_column("_k")
            del rows
            marked = q.select(pair.is_in(bits.implode())).to_series()
            del bits
        # back in the attempts' order by their row number (scattered by it, not a sort or a join on `_i`)
        at = np.empty(q.height, np.int64)
        at[q.get_column("_r").to_numpy()] = np.arange(q.height)
        att = att.hstack(q.select(pl.when(marked).then(pl.col("ba_frame")).alias("_ba_frame"))
                         .select(pl.all().gather(pl.Series(at))).get_columns())
        del q, marked
    else:
        att = att.with_columns(pl.lit(None, pl.Int64).alias("_ba_frame"))
    att = att.lazy().with_columns(
        pl.when(pl.col("_ack_frame").is_not_null()).then(pl.lit("ack"))
        .when(pl.col("_ba_frame").is_not_null()).then(pl.lit("blockack")).otherwise(pl.lit("none")).alias("acked_by"),
        pl.coalesce("_ack_frame", "_ba_frame").alias("ack_frame")).drop("_ack_frame", "_ba_frame") \
        .with_columns((pl.col("acked_by") != "none").alias("acked")).collect()
    # (the attempts are in record order already, as `_attempts` made them: sorted only if not)
    return att if att.get_column("_i").is_sorted() else att.sort("_i")


_DIRECTION = pl.Enum(["down", "other", "up"])   # (in their sort order as strings)


def _seq_spaces(air: pl.DataFrame) -> pl.DataFrame:
    """Return one row per distinct sequence number seen per space: space, ta, ra, useq, holes (missed before it)."""
    qos = (pl.col("wlan_type") == 2) & ((pl.col("wlan_subtype").cast(pl.Int32) & 8) != 0) & ~pl.col("_ra_grp")
    s = air.lazy().filter(pl.col("wlan_seq").is_not_null() & pl.col("wlan_ta").is_not_null()
                          & pl.col("wlan_type").is_in([0, 2])).select(
        "_i", "ts_ns", pl.col("wlan_ta").alias("ta"),
        pl.when(qos).then(pl.col("wlan_ra")).alias("ra"),
        pl.when(qos).then(pl.col("wlan_tid").cast(pl.Int16)).otherwise(-1).alias("_tid"),
        pl.col("wlan_seq").cast(pl.Int64).alias("seq"),
        # (as an enum in the strings' order: capture loss takes the least of its modes, by codes not strings)
        pl.when(pl.col("wlan_from_ds") & ~pl.col("wlan_to_ds")).then(pl.lit("down", _DIRECTION))
        .when(pl.col("wlan_to_ds") & ~pl.col("wlan_from_ds")).then(pl.lit("up", _DIRECTION))
        .otherwise(pl.lit("other", _DIRECTION)).alias("direction")).collect()
    part = ["ta", "ra", "_tid"]
    # each space numbered in the spaces' sort order: rows sorted and windowed by one integer
    # by (_q, _i): the rows are in _i order, so a stable sort on _q alone
    s = with_sorted_ids(s, part, "_q").sort("_q", maintain_order=True)
    step = ((pl.col("seq") - pl.col("seq").shift(1).over("_q") + 2048) % 4096 - 2048).fill_null(0)
    s = s.lazy().with_columns(step.cum_sum().over("_q").alias("useq")).collect()
    u, inv = _distinct_numbers_of(s, part)
    u = u.lazy().with_columns(
        (pl.col("useq") - pl.col("useq").min().over("_q") - pl.int_range(pl.len()).over("_q")).alias("holes")) \
        .select("ta", "ra", "_tid", "useq", "seq", "ts_ns", "direction", "holes").collect()
    # each record's holes: those of its number in its space (what the downlink reads of a matched MPDU's space)
    return u, s.select("_i", "useq", u.get_column("holes").gather(inv))


def _odd_space_holes(att: pl.DataFrame, space: pl.DataFrame) -> pl.DataFrame:
    """Return the attempts with the holes of a QoS data frame without a TID (if ever) taken, as the downlink
    does, from its transmitter's shared space (ra and TID unset) at its number: its own space has a null TID."""
    odd = att.get_column("_qos") & att.get_column("tid").is_null()
    att = _without(att, "_qos")
    if not odd.any():
        return att
    shared = space.filter(pl.col("ra").is_null() & (pl.col("_tid") == -1)).select("ta", "useq", pl.col("holes").alias("_h"))
    got = _join_left(att.select("ta", "useq"), shared, ["ta", "useq"]).get_column("_h")
    return att.with_columns(pl.when(pl.Series(odd)).then(got).otherwise(pl.col("holes")).alias("holes"))


def _distinct_numbers(s: pl.DataFrame, part: list[str]) -> pl.DataFrame:
    """Return one row per (_q, useq) of `s` (rows in (_q, _i) order), sorted by them: `part`, seq and
    direction of its first row, ts_ns its earliest."""
    return _distinct_numbers_of(s, part)[0]


def _distinct_numbers_of(s: pl.DataFrame, part: list[str]) -> tuple[pl.DataFrame, pl.Series]:
    """Return `_distinct_numbers` and, per row of `s`, the row of its (_q, useq) in it."""
    lo, hi = (s.select(pl.col("useq").min().alias("lo"), pl.col("useq").max().alias("hi")).row(0) if s.height
              else (0, 0))
    if not s.height or hi - lo >= 1 << 40 or s.get_column("_q").max() >= 1 << 22:
        u = (s.group_by("_q", "useq").agg(pl.col(*part, "seq").first(), pl.col("ts_ns").min(),
                                           pl.col("direction").first()).sort("_q", "useq"))
        inv = s.select("_q", "useq").join(u.select("_q", "useq").with_row_index("_u"), on=["_q", "useq"],
                                          how="left", maintain_order="left").get_column("_u")
        return u, inv
    # A group-by on the two columns, then a sort of its result, took 0.18 s at 0.3x: one stable sort on
    # one integer instead (ties keep their (_q, _i) order, so a run's first row is the group's first)
    # and the runs' starts.
    k = (s.get_column("_q").cast(pl.Int64) * (1 << 41) + (s.get_column("useq") - lo)).to_numpy()
    order = np.argsort(k, kind="stable")
    k = k[order]
    new = np.r_[True, k[1:] != k[:-1]]
    starts = np.flatnonzero(new)
    first = s.select("_q", "useq", *part, "seq", "direction")[order[starts]]
    earliest = np.minimum.reduceat(s.get_column("ts_ns").to_numpy()[order], starts)
    inv = np.empty(len(k), np.int64)
    inv[order] = np.cumsum(new) - 1
    return first.with_columns(pl.Series("ts_ns", earliest, pl.Int64)).select(
        "_q", "useq", *part, "seq", "ts_ns", "direction"), pl.Series("_u", inv)


def _orphan_acks(air: pl.DataFrame) -> pl.DataFrame:
    """Return ACKs whose previous record is no frame of the ACK's receiver within the ACK window: (ra, n)."""
    prev = air.select(pl.col("wlan_type"), pl.col("wlan_subtype"), pl.col("wlan_ra"),
                      pl.col("wlan_ta").shift(1).alias("_pta"), pl.col("wlan_type").shift(1).alias("_ptype"),
                      (pl.col("ts_ns") - pl.col("ts_ns").shift(1)).alias("_dt"))
    ok = ((pl.col("_pta") == pl.col("wlan_ra")) & (pl.col("_ptype") != 1)
          & (pl.col("_dt") <= ACK_WINDOW_NS)).fill_null(False)
    return prev.filter((pl.col("wlan_type") == 1) & (pl.col("wlan_subtype") == 13) & ~ok) \
        .group_by(pl.col("wlan_ra").alias("ta")).agg(pl.len().cast(pl.Int64).alias("orphan_acks"))


def _capture_loss(file: str, space: pl.DataFrame, orphans: pl.DataFrame, ba_missed: pl.DataFrame) -> pl.DataFrame:
    """Return the capture_loss rows of one air capture."""
    # (a tie of modes broken by the least: `mode` lists tied values in no fixed order, run to run)
    per = (space.group_by("ta", "ra", "_tid")
           .agg(pl.len().cast(pl.Int64).alias("mpdus_captured"),
                pl.col("holes").max().cast(pl.Int64).alias("mpdus_missed"),
                pl.col("direction").mode().min())
           .group_by("ta", "ra").agg(pl.col("mpdus_captured").sum(), pl.col("mpdus_missed").sum(),
                                     pl.col("direction").mode().min())
           .with_columns(pl.col("direction").cast(pl.String)))
    per = per.join(ba_missed, on=["ta", "ra"], how="left").with_columns(pl.col("blockack_missed").fill_null(0))
    per = per.join(orphans, on="ta", how="left").with_columns(pl.col("orphan_acks").fill_null(0))
    # an orphan ACK belongs to the transmitter, not to one of its spaces: count it once, on its first row
    per = per.sort("ta", "ra", nulls_last=True).with_columns(
        pl.when(pl.int_range(pl.len()).over("ta") == 0).then(pl.col("orphan_acks")).otherwise(0).alias("orphan_acks"))
    total = per.select(pl.lit(None, pl.Utf8).alias("ta"), pl.lit(None, pl.Utf8).alias("ra"),
                       pl.col("mpdus_captured").sum(), pl.col("mpdus_missed").sum(),
                       pl.lit("all").alias("direction"), pl.col("blockack_missed").sum(),
                       pl.lit(int(orphans["orphan_acks"].sum()) if orphans.height else 0, pl.Int64)
                       .alias("orphan_acks"))
    out = pl.concat([per.select(total.columns), total], how="vertical_relaxed")
    inferred = pl.col("mpdus_captured") + pl.col("mpdus_missed")
    return out.with_columns(pl.lit(file).alias("capture_file"), inferred.alias("mpdus_inferred"),
                            pl.when(inferred > 0).then(pl.col("mpdus_missed") / inferred).alias("loss_fraction"),
                            pl.lit("seq_gaps").alias("method"))


def analyse_air(air: pl.DataFrame, file: str) -> dict[str, pl.DataFrame]:
    """Return one air capture's attempts (with gid, useq, confirmation), MSDU groups, stations and capture loss."""
    # (its tables with strings, as the join's inputs from the wired side have them: the codes are the join's own)
    return {k: v.with_columns(pl.col(pl.Categorical).cast(pl.String))
            for k, v in _analyse_usable(_usable_air(air), file).items()}


def _analyse_usable(air: pl.DataFrame, file: str, compact: bool = True) -> dict[str, pl.DataFrame]:
    """Return `analyse_air` of the air records `_usable_air` kept (`compact`: see `_compact_air`)."""
    # the Block Acks' bits made once, as numbers: confirmation reads their frames, capture loss their addresses
    ba = _rows(air, (pl.col("wlan_type") == 1) & (pl.col("wlan_subtype") == 9))
    ba_bits = _ba_bits(ba, ("ba_i", "mac_seq"))
    # the columns read by one step only are used up first and dropped: the Block Ack fields (in `ba` now) and
    # the IP addresses (the stations' pairs; the attempts read only whether there is one) are a string
    # column each over every record, held through all the steps below
    stations = _stations(air)
    air = air.lazy().with_columns(pl.col("ip_src").is_null().alias("_noip")).drop(
        "ip_src", "ip_dst", "wlan_ba_bitmap", "wlan_ba_ssn").collect()
    att = _confirm(air, _attempts(air), ba, ba_bits)
    space, seq_of = _seq_spaces(air)
    # (each attempt's number and holes in its record's space: the space the downlink looks a packet's MPDU up in)
    att = _odd_space_holes(_join_left(att, seq_of, ["_i"]), space)
    del seq_of
    # what needs the air records is done first, so that they are freed before the MSDU groups are built
    # (of the Block Ack bits, capture loss reads only the distinct (transmitter, receiver, seq): one row per
    # bit set, with two address strings, would be one of the largest tables held here)
    bits = _ba_pairs(ba, ba_bits)
    del ba, ba_bits
    orphans = _orphan_acks(air)
    span = (int(air["ts_ns"].min()), int(air["ts_ns"].max())) if air.height else (0, -1)
    del air
    # capture loss: which of the holes a Block Ack says arrived (the attempts' addresses and numbers only)
    ba_missed = _not_seen(bits, att).group_by("ta", "ra").agg(pl.len().cast(pl.Int64).alias("blockack_missed"))
    del bits
    # sorted once and kept sorted: the group-by below would otherwise hold a sorted copy beside `att`
    if not att["_i"].is_sorted():
        att = att.sort("_i")
    # MSDU groups: the first attempt gives seq/key/time; the final fragment's confirmation confirms it.
    grp = _msdu_groups(att)
    # join_timeline reads of the attempts only the attempts table's columns and the group id (the rest is
    # freed before the groups are finished), and of the sequence spaces what places a packet's MPDU
    att = _columns(att, [*_ATT_KEEP, "gid", "attempt", "acked", "acked_by", "ack_frame"])
    loss = _capture_loss(file, space, orphans, ba_missed)
    space = _columns(space, ["ta", "ra", "_tid", "useq", "holes"])
    # No ACK seen, yet the transmitter went on to its next MPDU of the same queue before its retry limit:
    # it got an ACK the sniffer did not hear (a far station's ACKs are often too weak for the sniffer).
    part = ["ta", "ra", "tid"]
    moved_on = pl.col("first_air_frame").shift(-1).over(part, order_by="first_air_frame").is_not_null()
    grp = grp.lazy().with_columns(
        pl.when(pl.col("acked_by").is_null() & moved_on & (pl.col("n_attempts") < RETRY_LIMIT * pl.col("n_fragments")))
        .then(pl.lit("inferred")).otherwise(pl.col("acked_by").fill_null("none")).alias("acked_by"),
        pl.lit(file).alias("air_capture_file")).collect()
    out = {"attempts": att, "groups": grp, "space": space, "stations": stations, "loss": loss,
           "span": pl.DataFrame({"start": [span[0]], "end": [span[1]]})}
    del att, grp, space, stations
    return _compact_air(out) if compact else out


def _msdu_groups(att: pl.DataFrame) -> pl.DataFrame:
    """Return one row per MSDU group `gid` of the attempts (rows in record order): its first attempt's seq,
    key and time, its attempts counted, its final fragment's confirmation."""
    # An MSDU sent once (nearly all) is its own group: the group-by, a hash of every row and a list built
    # per group, is left to those with several attempts; the rest are taken column by column.
    several = _repeated(att.get_column("gid"))
    multi = _msdu_groups_by(_rows(att, pl.lit(several)))
    if several.all():
        return multi
    one = att.lazy().filter(~pl.lit(several)).select(
        "gid", "ta", "ra", "direction", "station", "tid", "mac_seq", "useq", "holes", "key", "flow", "ip_id", "ip_len",
        "protected", pl.col("nokey").alias("_nokey"), pl.col("amsdu").alias("_amsdu"), "pn",
        # as the aggregations make of one row: a sum of a null is 0, a list holds the one value
        pl.col("body").fill_null(0).alias("_body"),
        ((pl.col("frag") == 0) & ~pl.col("more_frag") & pl.col("body").is_not_null()).alias("_whole"),
        pl.col("frame").alias("first_air_frame"), pl.col("frame").alias("last_air_frame"),
        pl.col("ts_ns").alias("first_air_ts_ns"), pl.col("ts_ns").alias("last_air_ts_ns"),
        pl.col("tx_start_ns").alias("_start"), pl.lit(1, pl.UInt32).alias("n_attempts"),
        pl.col("retry").cast(pl.UInt32).alias("n_retries"), (pl.col("frag").cast(pl.UInt32) + 1).alias("n_fragments"),
        pl.concat_list("rate_mbps").alias("rates_mbps"), pl.col("ampdu_ref").is_not_null().alias("ampdu"),
        pl.when(~pl.col("more_frag") & pl.col("acked")).then(pl.col("acked_by")).alias("acked_by"),
        pl.when(~pl.col("more_frag") & pl.col("acked")).then(pl.col("ack_frame")).alias("ack_frame")) \
        .select(multi.columns).cast(multi.schema).collect()
    return pl.concat([one, multi])


def _msdu_groups_by(att: pl.DataFrame) -> pl.DataFrame:
    """Return `_msdu_groups` of attempts by a group-by (any number of attempts per group)."""
    # Which attempt is the final fragment's is a column made before grouping: a filter holding the group's
    # own maximum made polars evaluate it group by group (0.17 s of 0.19 s on 94 k groups).
    last_frag = (pl.col("frag") == pl.col("frag").max().over("gid")) & ~pl.col("more_frag")
    att = att.with_columns(pl.struct("gid", "frag").is_first_distinct().alias("_frag_first"),
                           (last_frag & pl.col("acked")).alias("_final_acked"))
    grp = att.group_by("gid").agg(
        pl.col("ta").first(), pl.col("ra").first(), pl.col("direction").first(), pl.col("station").first(),
        pl.col("tid").first(), pl.col("mac_seq").first(), pl.col("useq").first(), pl.col("holes").first(),
        pl.col("key").drop_nulls().first(),
        pl.col("flow").drop_nulls().first(), pl.col("ip_id").drop_nulls().first(),
        pl.col("ip_len").drop_nulls().first(),
        pl.col("protected").any(), pl.col("nokey").all().alias("_nokey"), pl.col("amsdu").any().alias("_amsdu"),
        pl.col("pn").drop_nulls().first(),
        # each fragment's body once (its first transmission: a retry repeats it)
        pl.col("body").filter(pl.col("_frag_first")).sum().alias("_body"),
        # every fragment seen, the last one included: only then does the length add up
        ((pl.col("frag").n_unique() == pl.col("frag").max().cast(pl.UInt32) + 1) & (~pl.col("more_frag")).any()
         & pl.col("body").is_not_null().all()).alias("_whole"),
        pl.col("frame").first().alias("first_air_frame"), pl.col("frame").last().alias("last_air_frame"),
        pl.col("ts_ns").first().alias("first_air_ts_ns"), pl.col("ts_ns").last().alias("last_air_ts_ns"),
        pl.col("tx_start_ns").first().alias("_start"),
        pl.len().cast(pl.UInt32).alias("n_attempts"), pl.col("retry").sum().cast(pl.UInt32).alias("n_retries"),
        (pl.col("frag").max().cast(pl.UInt32) + 1).alias("n_fragments"),
        pl.col("rate_mbps").alias("rates_mbps"), pl.col("ampdu_ref").is_not_null().any().alias("ampdu"),
        pl.col("acked_by").filter(pl.col("_final_acked")).first().alias("acked_by"),
        pl.col("ack_frame").filter(pl.col("_final_acked")).first().alias("ack_frame"))
    return grp


def _compact_air(a: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    """Return `_analyse_usable`'s tables with the groups', spaces' and stations' strings copied out of the air
    records' buffers (string views share them: see `_compact`)."""
    for k in ("groups", "space", "stations"):
        # (the groups' strings are made of literals, not taken from the air records: nothing to copy out)
        a[k] = _compact(a[k], skip=_LITERAL_STRINGS if k == "groups" else ())
    return a


# the groups' string columns made of literals (`_attempts`, `_confirm`, `_analyse_usable`): they share no
# buffer of the air records (the records' own strings, addresses and flows, are codes there)
_LITERAL_STRINGS = ("direction", "acked_by", "air_capture_file")


# ---------------------------------------------------------------------------------------------
# wired side and the join


def _ap_files(tl: Timeline) -> list[str]:
    """Return the AP's wired captures: vantage ap_wired, or any wired vantage starting with 'ap'."""
    return [e.file for e in tl.entries("wired") if e.vantage == "ap_wired" or e.vantage.lower().startswith("ap")]


# With no capture of the AP's wired side, a wired capture stands in for it when its packets to the
# stations reach the air after it: a host upstream of the AP (the server).  A share this small suffices:
# where the AP's queue overflows, most packets never reach the air at all.
UPSTREAM_MIN_SHARE = 0.1


def upstream_stand_in(tl: Timeline, ip_sta: pl.DataFrame, airs: list[tuple[str, dict]]) -> tuple[str | None, int, int]:
    """Return (the wired capture that stands in for the AP's wired side, the least delay from it to the air
    and from the air to it, ns), or (None, 0, 0): of the captures upstream of the AP, the one whose
    packets to and from the stations the air shows most."""
    best: tuple[int, str, int, int] | None = None
    for e in tl.entries("wired"):
        w = _wired_ip(tl.packets(e.file, columns=_WIRED)).with_row_index("_w")
        dw = w.join(ip_sta.rename({"ip": "ip_dst"}), on="ip_dst", how="inner")
        uw = w.join(ip_sta.rename({"ip": "ip_src"}), on="ip_src", how="inner")
        if dw.height == 0:
            continue
        lead = pl.concat([downlink_one(dw, a)[0].select((pl.col("_start") - pl.col("ts_ns")).alias("d"))
                          for _, a in airs]).get_column("d").drop_nulls()
        # a station's own capture holds its copies after the air (a negative lead): downstream
        if lead.len() < UPSTREAM_MIN_SHARE * dw.height or float(lead.median()) <= 0:
            continue
        lag = (pl.concat([uplink_one(uw, a)[0].select((pl.col("ts_ns") - pl.col("last_air_ts_ns")).alias("d"))
                          for _, a in airs]).get_column("d").drop_nulls() if uw.height else pl.Series("d", [], pl.Int64))
        lag = lag.filter(lag > 0)
        cand = (lead.len(), e.file, int(lead.min()), int(lag.min()) if lag.len() else int(lead.min()))
        if best is None or cand[0] > best[0]:
            best = cand
    return (None, 0, 0) if best is None else best[1:]


def _wired_ip(df: pl.DataFrame) -> pl.DataFrame:
    """Return a wired capture's IP packets with the match key."""
    for c, t in mm.IP_KEY:
        if c not in df.columns:
            df = df.with_columns(pl.lit(None, t).alias(c))
    if "flow" not in df.columns:
        df = df.with_columns(pl.lit(None, pl.Utf8).alias("flow"))
    if "ip_dscp" not in df.columns:
        df = df.with_columns(pl.lit(None, pl.UInt8).alias("ip_dscp"))
    ok = pl.col("ip_src").is_not_null() & pl.col("ip_dst").is_not_null()
    if "malformed" in df.columns:
        ok = ok & pl.col("malformed").is_null()
    # (the Ethernet addresses, where the capture has them, tell a bridged station's packets without keys)
    eth = [c for c in ("eth_src", "eth_dst") if c in df.columns]
    # lazily: the filter then copies only the columns selected
    return df.lazy().filter(ok).select("capture_file", "frame", "ts_ns", "flow", "ip_src", "ip_dst", "ip_id", "ip_len",
                                       "ip_dscp", *eth, mm._key_expr().alias("key")).collect()


def _wired_key(df: pl.DataFrame) -> pl.DataFrame:
    """Return (key, ts_ns, ip_dst) of a wired capture's IP packets: `_wired_ip`'s rows, three of its columns."""
    for c, t in mm.IP_KEY:
        if c not in df.columns:
            df = df.with_columns(pl.lit(None, t).alias(c))
    ok = pl.col("ip_src").is_not_null() & pl.col("ip_dst").is_not_null()
    if "malformed" in df.columns:
        ok = ok & pl.col("malformed").is_null()
    return df.lazy().filter(ok).select(mm._key_expr().alias("key"), "ts_ns", "ip_dst").collect()


_PRIORITY = pl.col("fate").replace_strict({"delivered": 0, "air_unacked": 0, "sniffer_missed": 1,
                                          "dropped_at_ap": 2, "unknown": 3}, default=3)
_GROUP_INFO = ("air_capture_file", "first_air_frame", "last_air_frame", "first_air_ts_ns", "last_air_ts_ns",
               "mac_seq", "tid", "n_attempts", "n_retries", "n_fragments", "rates_mbps", "ampdu", "acked_by",
               "ack_frame")


# what `_merge_groups` reads of the matched groups (besides the packet column)
_MERGE_COLS = ("air_capture_file", "first_air_frame", "first_air_ts_ns", "_start", "mac_seq", "tid", "ta", "ra", "useq", "holes",
               "gid", "last_air_frame", "last_air_ts_ns", "n_attempts", "n_retries", "n_fragments", "rates_mbps",
               "ampdu", "acked_by", "ack_frame")


def _merge_groups(m: pl.DataFrame, by: str) -> pl.DataFrame:
    """Return one row per `by`: the matched MSDU groups of one packet merged (normally just one)."""
    m = _columns(m, [by, *_MERGE_COLS, "match", "match_confidence"])
    # A packet matched by one group (nearly all) is its own merge: the group-by, a hash of every row and a
    # list built per group, is left to the few with several.
    several = _repeated(m.get_column(by))
    merged = _merge_several(_rows(m, pl.lit(several)), by)
    if merged.height == m.height:
        return merged
    return pl.concat([_merge_one(_rows(m, ~pl.lit(several)), by).lazy().cast(merged.schema).collect(), merged])


def _merge_one(m: pl.DataFrame, by: str) -> pl.DataFrame:
    """Return `_merge_several` of rows each alone in its `by` group, column by column (no group-by)."""
    return m.lazy().select(
        by, "match", "match_confidence", "air_capture_file", "first_air_frame", "first_air_ts_ns", "_start",
        "mac_seq", "tid", "ta", "ra", "useq", "holes", "gid", "last_air_frame", "last_air_ts_ns",
        # as the aggregations make of one row: a sum ignores a null, so does any(); a null list explodes to none
        pl.col("n_attempts").fill_null(0), pl.col("n_retries").fill_null(0), "n_fragments",
        pl.col("rates_mbps").fill_null(pl.lit([], pl.List(pl.Float64))), pl.col("ampdu").fill_null(False),
        pl.when(pl.col("acked_by") != "none").then(pl.col("acked_by")).otherwise(pl.lit("none")).alias("acked_by"),
        "ack_frame").collect()


def _merge_several(m: pl.DataFrame, by: str) -> pl.DataFrame:
    """Return one row per `by` of the matched groups `m` (`_merge_groups`'s columns), merged by a group-by."""
    return m.sort("first_air_frame").group_by(by).agg(
        pl.col("match").first(), pl.col("match_confidence").first(),
        *(pl.col(c).first() for c in ("air_capture_file", "first_air_frame", "first_air_ts_ns", "_start", "mac_seq",
                                      "tid", "ta", "ra", "useq", "holes", "gid")),
        pl.col("last_air_frame").last(), pl.col("last_air_ts_ns").last(),
        pl.col("n_attempts").sum(), pl.col("n_retries").sum(), pl.col("n_fragments").max(),
        pl.col("rates_mbps").list.explode(keep_nulls=False, empty_as_null=False), pl.col("ampdu").any(),
        pl.col("acked_by").filter(pl.col("acked_by") != "none").first().fill_null("none"),
        pl.col("ack_frame").drop_nulls().first())


def _space_cols() -> list[pl.Expr]:
    """Return the expressions naming a group's sequence space (as `_seq_spaces` does)."""
    return [pl.when(pl.col("tid").is_not_null()).then(pl.col("ra")).alias("_sra"),
            pl.col("tid").cast(pl.Int16).fill_null(-1).alias("_tid")]


# a string column with at most this many distinct values (and 4 rows or more per value) is rebuilt as views
# of one copy of each value (`_compact`)
DICT_MAX = 1 << 16


def _compact(df: pl.DataFrame, skip: Sequence[str] = ()) -> pl.DataFrame:
    """Return `df` with its strings copied out: rows taken from a large table keep that table's whole string
    buffers alive (polars' string views share them).  A column of few distinct values (addresses, flows,
    fates) becomes views of one small copy of each: a copy per row held 16-40 bytes more a row."""
    out = []
    for c, dt in df.schema.items():
        if dt != pl.String or c in skip:
            continue
        u = df.get_column(c).drop_nulls().unique()
        if u.len() <= DICT_MAX and 4 * u.len() <= df.height:
            u = u + ""      # (the distinct values copied out too, or they would hold the old buffers)
            out.append(pl.col(c).replace_strict(u, u, return_dtype=pl.String))
        else:
            out.append(pl.col(c) + "")
    return df.with_columns(out) if out else df


def _positions(all_i: pl.Series, sub_i: pl.Series) -> np.ndarray:
    """Return the row of each of `sub_i`'s values in `all_i` (ascending row numbers holding every one of them)."""
    sub = sub_i.to_numpy()
    if all_i.len() == 0 or all_i[-1] == all_i.len() - 1:     # every row kept: the number is the row
        return sub.astype(np.int64)
    return np.searchsorted(all_i.to_numpy(), sub).astype(np.int64)


def _columns(df: pl.DataFrame, names: Sequence[str]) -> pl.DataFrame:
    """Return the columns `names` of `df` (as `select` of those names, without its cost: see `_without`)."""
    return pl.DataFrame([df.get_column(c) for c in names]) if names else df.select([])


def _without(df: pl.DataFrame, *names: str) -> pl.DataFrame:
    """Return `df` without the columns `names` (those it has)."""
    # (a frame of its other columns: DataFrame.drop took 10-40 ms CPU on the join's million-row tables)
    return pl.DataFrame([df.get_column(c) for c in df.columns if c not in names]) if df.width else df


def _rows(df: pl.DataFrame, predicate: pl.Expr) -> pl.DataFrame:
    """Return the rows of `df` where `predicate` holds, in order."""
    # (through the lazy engine: DataFrame.filter took 2-3x its CPU time on the join's million-row tables)
    return df.lazy().filter(predicate).collect()


def _repeated(s: pl.Series) -> pl.Series:
    """Return `s.is_duplicated()`: for small non-negative integers (row numbers, group ids) by counting them."""
    if s.dtype.is_integer() and s.len() and not s.null_count() and s.min() >= 0 and s.max() <= 4 * s.len() + 1024:
        v = s.cast(pl.Int64).to_numpy()
        return pl.Series(s.name, np.bincount(v)[v] > 1)
    return s.is_duplicated()


def _int_key(s: pl.Series) -> pl.Series:
    """Return `s`, a categorical column as its codes (equal values, equal codes: polars' categories are global)."""
    return s.to_physical() if s.dtype == pl.Categorical else s


def _join_left(d: pl.DataFrame, right: pl.DataFrame, on: list[str], nulls_equal: bool = False) -> pl.DataFrame:
    """Return `d` left-joined to `right` (one row per key): the key columns alone go through the join,
    so that the rest of `d` is not copied; rows keep their order."""
    if len(on) == 1:
        # one integer key (a packet's or a group's number, a station's code): its rows looked up by position,
        # not hashed
        k, w = right.get_column(on[0]), d.get_column(on[0])
        same = k.dtype == w.dtype or (k.dtype.is_integer() and w.dtype.is_integer())
        rows = index_rows(_int_key(k), _int_key(w)) if same else None
        if rows is not None:
            return d.hstack(_without(right, *on).select(pl.all().gather(rows)).get_columns())
    add = d.select(on).join(right, on=on, how="left", nulls_equal=nulls_equal, maintain_order="left")
    if add.height != d.height:      # a key repeated in `right`: the plain join multiplies the rows
        return d.join(right, on=on, how="left", nulls_equal=nulls_equal, maintain_order="left")
    return d.hstack(_without(add, *on).get_columns())


_DOWN_COLS = tuple(c.name for c in DOWNLINK)
_UP_COLS = tuple(c.name for c in UPLINK)


def _rank_within(d: pl.DataFrame, by: list[str], order: list[pl.Expr]) -> pl.Series:
    """Return `_rank`: each row's place (from 0) in its `by` group ordered by `order` (ties: row order).

    One sort of the key columns and a run start per group, instead of a window over tens of thousands of
    small groups (each sorted on its own)."""
    k = d.select(*by, *(e.alias(f"_o{i}") for i, e in enumerate(order)),
                 pl.int_range(pl.len(), dtype=pl.UInt32).alias("_r")).sort([*by, *(f"_o{i}" for i in range(len(order))), "_r"],
                                                                      nulls_last=False)
    n = k.height
    new = k.select(pl.any_horizontal(pl.col(c).ne_missing(pl.col(c).shift(1)) for c in by)).to_series().to_numpy()
    if n:
        new[0] = True
    starts = np.flatnonzero(new)
    rank = np.empty(n, np.int64)
    rank[k["_r"].to_numpy()] = np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))
    return pl.Series("_rank", rank)


def _dequeued_since_previous(ts: pl.Series, groups: pl.DataFrame) -> pl.Series:
    """Return per wired packet whether the AP started sending some downlink MPDU since the previous packet's arrival."""
    # lazily: the filter copies the one column read, not every column of the groups
    ev = np.sort(groups.lazy().filter(pl.col("direction") == "down").select("_start").collect()
                 .get_column("_start").drop_nulls().to_numpy())
    t = ts.to_numpy()
    order = np.argsort(t, kind="stable")
    st = t[order]
    prev = np.concatenate(([np.iinfo(np.int64).min], st[:-1]))
    out = np.empty(len(t), dtype=bool)
    out[order] = np.searchsorted(ev, st, side="right") > np.searchsorted(ev, prev, side="right")
    return pl.Series("_deq", out)


# ---------------------------------------------------------------------------------------------
# protected traffic without keys: size, order and time

# cipher header + MIC (+ ICV) per MPDU: CCMP-128; CCMP-256 / GCMP-256; TKIP (IV/ExtIV + MIC + ICV); WEP
CIPHER_OVERHEADS = {"ccmp": 16, "gcmp256": 24, "tkip": 20, "wep": 8}
LLC_SNAP = 8
AMSDU_SUBHDR = 14               # an A-MSDU subframe's DA, SA and length (one subframe: no padding after it)
SIZE_BIN_NS = 1_000_000_000     # the length histograms that tie an IP to a station are per second
CLOCK_SLACK_NS = 50_000_000     # clock error a keyless pairing tolerates before `clock_correction` measures it
CLOCK_RANK = 0                  # the quickest forwarding time: the least (an overflowing queue may leave only the
                                # first packets quick; a pair paired wrongly as if nothing were dropped is slower)
CLOCK_MIN_PAIRS = 20            # keyless pairs each way needed to measure a clock error
STATION_CHUNK = 8               # keyless stations whose length histograms are compared with the IPs' at once
MIN_SHARE = 0.25                # the likeness (Jaccard) of an IP's packets and a station's frames to tie them
OFFSET_SPAN = 64                # FIFO offsets tried between a station's first MPDUs and its wired packets
OFFSET_STREAMS = 256            # streams (station, queue, length) whose offset is searched: the largest
DROP_EVIDENCE = 0.5             # a drop-tail capacity must fit at least this much better than an endless queue
IDLE_NS = 20_000_000            # an AP with packets queued starts its next MPDU sooner than this (backoff, others'
                                # transmissions): a longer pause says the packet paired was not waiting


def _protected_len(overhead: pl.Expr) -> pl.Expr:
    """Return the IP length a keyless MSDU group carries under a cipher overhead (null if not positive, or
    if a fragment was not seen)."""
    n = (pl.col("_body") - pl.col("n_fragments").cast(pl.Int64) * overhead - LLC_SNAP
         - AMSDU_SUBHDR * pl.col("_amsdu").cast(pl.Int64))
    return pl.when((n > 20) & pl.col("_whole")).then(n)


def _length_counts(wired: pl.DataFrame) -> pl.DataFrame:
    """Return per (ip, direction, length, second) the wired packets: an IP as destination (down) or source (up)."""
    b = (pl.col("ts_ns") // SIZE_BIN_NS).alias("bin")
    down = wired.group_by(pl.col("ip_dst").alias("ip"), pl.col("ip_len").cast(pl.Int64).alias("len"), b).len("nw")
    up = wired.group_by(pl.col("ip_src").alias("ip"), pl.col("ip_len").cast(pl.Int64).alias("len"), b).len("nw")
    return pl.concat([down.with_columns(pl.lit("down").alias("direction")),
                      up.with_columns(pl.lit("up").alias("direction"))])


def learn_protected(wired: pl.DataFrame, groups: pl.DataFrame, known: pl.DataFrame
                    ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Return ((station, ip, how) for IPs behind keyless stations, (station, _oh) each one's cipher overhead).

    A bridging AP forwards a station's MAC on its wired side (``how`` = ``ethernet``); otherwise an IP
    goes to the station whose keyless frames explain most of its packets by length, second by second
    (``size``).  The overhead is the one under which a station's frames explain most wired packets.
    """
    empty = (pl.DataFrame(schema={"station": pl.Utf8, "ip": pl.Utf8, "how": pl.Utf8}),
             pl.DataFrame(schema={"station": pl.Utf8, "_oh": pl.Int64}))
    g = _rows(groups, pl.col("_nokey") & pl.col("direction").is_in(["down", "up"]))
    if g.height == 0 or wired.height == 0:
        return empty
    # (the few keyless groups' codes back to strings: they meet the wired side's Ethernet addresses)
    g = g.with_columns(pl.col(pl.Categorical).cast(pl.String))
    stas = g.select("station").unique().sort("station")
    nw = _length_counts(wired)
    tot = nw.group_by("ip").agg(pl.col("nw").sum().alias("tot"))
    nsta = g.group_by("station").len("nsta")
    scores = []
    # a few stations at a time, against the IPs whose packet count is within a factor 1/MIN_SHARE of theirs
    # (no likeness can reach MIN_SHARE otherwise): what is joined stays near the size of the wired counts
    for lo in range(0, stas.height, STATION_CHUNK):
        part = g.join(stas.slice(lo, STATION_CHUNK), on="station")
        n_lo, n_hi = nsta.join(stas.slice(lo, STATION_CHUNK), on="station").select(
            pl.col("nsta").min().alias("lo"), pl.col("nsta").max().alias("hi")).row(0)
        ips = tot.filter(pl.col("tot").is_between(n_lo * MIN_SHARE, n_hi / MIN_SHARE)).select("ip")
        w_part = nw.join(ips, on="ip")
        for oh in CIPHER_OVERHEADS.values():
            na = (part.group_by("station", "direction", _protected_len(pl.lit(oh)).alias("len"),
                                (pl.col("first_air_ts_ns") // SIZE_BIN_NS).alias("bin")).len("na"))
            j = w_part.join(na, on=["direction", "len", "bin"])
            scores.append(j.group_by("ip", "station").agg(pl.min_horizontal("nw", "na").sum().alias("score"))
                          .with_columns(pl.lit(oh, pl.Int64).alias("_oh")))
    sc = pl.concat(scores)
    oh = (sc.group_by("station", "_oh").agg(pl.col("score").sum()).sort("station", "score", "_oh",
                                                                          descending=[False, True, False])
          .unique("station", keep="first").select("station", "_oh"))
    oh = stas.join(oh, on="station", how="left").with_columns(pl.col("_oh").fill_null(CIPHER_OVERHEADS["ccmp"]))
    # bridged: the station's own MAC on the wired side names its IP
    eth = []
    for mac, ip in (("eth_dst", "ip_dst"), ("eth_src", "ip_src")):
        if mac in wired.columns:
            eth.append(wired.join(stas, left_on=mac, right_on="station", how="semi")
                       .select(pl.col(mac).alias("station"), pl.col(ip).alias("ip")))
    by_eth = (pl.concat(eth).group_by("station", "ip").len().sort("len", descending=True).unique("ip", keep="first")
              .select("station", "ip", pl.lit("ethernet").alias("how")) if eth else empty[0])
    # by size: how alike the IP's packets and the station's frames are, counted per (direction, length,
    # second) (the Jaccard index of the two multisets), under the station's overhead: the best station
    # must be well ahead of the next (two stations of one kind of traffic at the same time cannot be told)
    cand = (sc.join(oh, on=["station", "_oh"]).join(tot, on="ip").join(nsta, on="station")
            .with_columns((pl.col("score") / (pl.col("tot") + pl.col("nsta") - pl.col("score"))).alias("share"))
            .filter(pl.col("share") >= MIN_SHARE).join(by_eth.select("ip"), on="ip", how="anti")
            .join(known.select("ip"), on="ip", how="anti"))
    by_size = _assign(cand).select("station", "ip", pl.lit("size").alias("how"))
    learnt = pl.concat([by_eth, by_size.join(by_eth, on="ip", how="anti")])
    return learnt.join(known.select("ip"), on="ip", how="anti"), oh


def _assign(cand: pl.DataFrame) -> pl.DataFrame:
    """Return (station, ip) from candidate pairs with their `share`: first one IP per station, best first
    (two downloads of one packet size at once are told apart by which station each fits best), then
    any IP left whose best station fits it well ahead of the next (a station with several addresses)."""
    # a loop over the few (IP, station) candidates, not over packets
    taken_ip: set[str] = set()
    taken_sta: set[str] = set()
    pairs = []
    for ip, sta in cand.sort("share", "ip", "station", descending=[True, False, False]).select("ip", "station").iter_rows():
        if ip not in taken_ip and sta not in taken_sta:
            taken_ip.add(ip)
            taken_sta.add(sta)
            pairs.append((sta, ip))
    first = pl.DataFrame(pairs, schema={"station": pl.Utf8, "ip": pl.Utf8}, orient="row")
    rest = (cand.join(first.select("ip"), on="ip", how="anti").sort("ip", "share", descending=[False, True])
            .group_by("ip", maintain_order=True).agg(pl.col("station").first(), pl.col("share").first(),
                                                     pl.col("share").get(1, null_on_oob=True).alias("next"))
            .filter(pl.col("next").is_null() | (pl.col("share") >= 1.5 * pl.col("next"))))
    return pl.concat([first, rest.select("station", "ip")])


def _new_holes(space: pl.DataFrame) -> pl.DataFrame:
    """Return per sequence number seen (ta, _sra, _tid, useq) the numbers missed just before it (`_dh`)."""
    part = ["ta", "_sra", "_tid"]
    return (space.select("ta", pl.col("ra").alias("_sra"), "_tid", "useq", "holes").sort(*part, "useq")
            .with_columns((pl.col("holes") - pl.col("holes").shift(1).over(part)).fill_null(0).alias("_dh"))
            .drop("holes"))


def _full_at_arrival(arr: np.ndarray, dep: np.ndarray, q: int) -> tuple[np.ndarray, np.ndarray]:
    """Return per arrival (stamps `arr`; departures `dep`) whether a drop-tail queue of `q` slots was full, and
    how many packets it held then.

    Free slots follow z = max(0, z + x) (x = -1 an arrival, +1 a departure; the clamp is the drop):
    Lindley's recursion, whose closed form z_n = S_n - min(-q, min_k S_k) needs no loop.
    """
    t = np.concatenate([dep, arr])
    is_arr = np.concatenate([np.zeros(len(dep), bool), np.ones(len(arr), bool)])
    order = np.lexsort((is_arr, t))                 # at equal stamps the departure first
    s = np.cumsum(np.where(is_arr[order], -1, 1))
    z = s - np.minimum(-q, np.minimum.accumulate(s))
    before = np.concatenate(([q], z[:-1]))
    full, held = np.empty(len(arr), bool), np.empty(len(arr), np.int64)
    a = is_arr[order]
    full[order[a] - len(dep)] = before[a] <= 0
    held[order[a] - len(dep)] = q - before[a]
    return full, held


def _overdrawn(arr: pl.DataFrame, full: np.ndarray, dep: pl.DataFrame) -> int:
    """Return how many departures find their station with nothing accepted left (arrivals `arr` and
    departures `dep`: station, ts_ns): the model dropped packets the station then sent."""
    ev = pl.concat([arr.select("station", "ts_ns", pl.Series("_x", np.where(full, 0, 1), pl.Int64)),
                    dep.select("station", "ts_ns", pl.lit(-1, pl.Int64).alias("_x"))])
    occ = pl.col("_x").cum_sum().over("station", order_by=["ts_ns", "_x"])
    return int(ev.select(((occ < 0) & (pl.col("_x") < 0)).sum()).item())


def _least_capacity(arr: pl.DataFrame, dep: pl.DataFrame) -> int:
    """Return the smallest queue capacity under which no station sends more MPDUs than the model let in
    for it (beyond what an endless queue gives: MPDUs of packets that came before the wired capture
    began), found by bisection: a lower bound (a queue that never drains hides a larger one)."""
    t_arr = arr.get_column("ts_ns").to_numpy()
    t_dep = np.sort(dep.get_column("ts_ns").to_numpy())
    tol = _overdrawn(arr, np.zeros(len(t_arr), bool), dep)
    lo, hi = 1, len(t_arr) + 1
    while lo < hi:
        mid = (lo + hi) // 2
        if _overdrawn(arr, _full_at_arrival(t_arr, t_dep, mid)[0], dep) <= tol:
            hi = mid
        else:
            lo = mid + 1
    return lo


# Packets of one station queue and one length keep their order through a FIFO queue: each such stream is
# paired on its own, so that a frame of another length (an ARP, a TCP ACK, a management frame in the same
# sequence space) cannot shift the pairing of the rest.
_FIFO = ("station", "_q", "_len")


def _slots(g: pl.DataFrame, holes: pl.DataFrame) -> pl.DataFrame:
    """Return keyless groups with `_slot`: their MPDU's place in their stream (`_FIFO`), counting the MPDUs
    the sniffer missed in their sequence space just before them (a queue drop consumes no sequence number;
    a missed MPDU is taken to be of the length of the next one seen, as in a bulk transfer)."""
    g = _join_left(g.with_columns(_space_cols()), holes, ["ta", "_sra", "_tid", "useq"], nulls_equal=True)
    # an MSDU whose length is unknown (a fragment missed) still took its place in the queue: taken to be
    # of the length of the one before it (else after it), so that it does not shift the rest of that stream
    near = pl.col("_len").forward_fill().over("station", "_q", order_by="first_air_frame")
    g = g.with_columns(pl.coalesce(pl.col("_len"), near, pl.col("_len").backward_fill()
                                   .over("station", "_q", order_by="first_air_frame")).alias("_len"))
    part = list(_FIFO)
    return g.with_columns(
        (pl.int_range(pl.len()).over(part, order_by="first_air_frame")
         + pl.col("_dh").fill_null(0).cum_sum().over(part, order_by="first_air_frame")
         - pl.col("_dh").fill_null(0).first().over(part, order_by="first_air_frame")).alias("_slot"))


def _queues(g: pl.DataFrame, w: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Return (groups, wired rows) with `_q`: the station's TID, from the DSCP's user priority on the wired side,
    when its keyless frames use several TIDs (else one queue per station)."""
    multi = g.group_by("station").agg((pl.col("tid").n_unique() > 1).alias("_multi"))
    g = g.join(multi, on="station").with_columns(
        pl.when(pl.col("_multi")).then(pl.col("tid").cast(pl.Int16)).otherwise(-1).alias("_q")).drop("_multi")
    w = w.join(multi, on="station").with_columns(
        pl.when(pl.col("_multi")).then((pl.col("ip_dscp").cast(pl.Int16) // 8).fill_null(0)).otherwise(-1)
        .alias("_q")).drop("_multi")
    return g, w


def _best_offset(acc: pl.DataFrame, slots: pl.DataFrame, on_time: pl.Expr) -> pl.DataFrame:
    """Return per queue the offset between wired rank and slot that pairs most of the first MPDUs well
    (equal lengths, in time order); of offsets within 1 % of the best, the nearest 0 (a bundle's captures
    start together: with equal lengths and a long queue, several offsets are in time order)."""
    # the largest streams' first MPDUs (the rest keep offset 0): what is tried stays a few million rows
    big = slots.group_by(_FIFO).len().sort("len", descending=True).head(OFFSET_STREAMS).select(_FIFO)
    head = (slots.join(big, on=list(_FIFO), nulls_equal=True).filter(pl.col("_slot") < 2 * OFFSET_SPAN)
            .select(*_FIFO, "_slot", "_start"))
    ks = pl.DataFrame({"_k": pl.int_range(-OFFSET_SPAN, OFFSET_SPAN + 1, eager=True)})
    t = (head.join(ks, how="cross").with_columns((pl.col("_slot") + pl.col("_k")).alias("_r"))
         .join(acc.select(*_FIFO, "_r", "ts_ns"), on=[*_FIFO, "_r"])
         .group_by(*_FIFO, "_k").agg(on_time.sum().alias("_ok")))
    t = t.with_columns(pl.col("_ok").max().over(_FIFO).alias("_top"))
    return (t.filter(pl.col("_ok") >= 0.99 * pl.col("_top")).sort(pl.col("_k").abs(), "_k")
            .group_by(_FIFO, maintain_order=True).agg(pl.col("_k").first()))


def _confidence(rows: pl.DataFrame) -> pl.DataFrame:
    """Return the paired rows with match and match_confidence: 1 / (1 + the packets of its stream left
    unpaired (taken as dropped) that reached the AP while it waited there, any of which it could have been).

    `rows`: every packet of the keyless streams (`_FIFO`, ts_ns), the paired ones with `_gap` (the time
    between its wired stamp and its MPDU).  None such: ``size_order``, else ``ambiguous``.
    """
    loose = (rows.filter(pl.col("gid").is_null()).select(*_FIFO, "ts_ns").sort("ts_ns")
             .with_columns(pl.int_range(1, pl.len() + 1).over(_FIFO).alias("_c")))
    r = rows.filter(pl.col("gid").is_not_null()).with_columns(pl.col("_gap").abs().alias("_gap"))

    def upto(t: pl.Expr, name: str) -> pl.Series:
        q = r.select(*_FIFO, "_w", t.alias("_t")).sort("_t")
        j = q.join_asof(loose, left_on="_t", right_on="ts_ns", by=list(_FIFO), strategy="backward",
                        check_sortedness=False)
        return r.select("_w").join(j.select("_w", pl.col("_c").fill_null(0).alias(name)), on="_w", how="left")

    hi, lo = upto(pl.col("ts_ns") + pl.col("_gap"), "_hi"), upto(pl.col("ts_ns") - pl.col("_gap") - 1, "_lo")
    r = r.join(hi, on="_w", how="left").join(lo, on="_w", how="left")
    c = 1 + pl.col("_hi").fill_null(0) - pl.col("_lo").fill_null(0)
    return r.with_columns(pl.when(c == 1).then(pl.lit("size_order")).otherwise(pl.lit("ambiguous")).alias("match"),
                          (1 / c).cast(pl.Float64).alias("match_confidence"))


def _pair(slots: pl.DataFrame, acc: pl.DataFrame, on_time: pl.Expr) -> pl.DataFrame:
    """Return (_w, gid): each stream's MPDU slots paired in order with its accepted packets (rank `_r`), from
    the best offset on, where time allows (`on_time`)."""
    acc = acc.select("_w", *_FIFO, "_r", "ts_ns", *(["_held"] if "_held" in acc.columns else []))
    off = _best_offset(acc, slots, on_time)
    return (slots.join(off, on=list(_FIFO), how="left", nulls_equal=True)
            .with_columns((pl.col("_slot") + pl.col("_k").fill_null(0)).alias("_r"))
            .join(acc, on=[*_FIFO, "_r"]).filter(on_time)
            .select("_w", "gid", (pl.col("_start") - pl.col("ts_ns")).alias("_gap"), "ts_ns",
                    *(["_held"] if "_held" in acc.columns else [])))


def protected_down(w: pl.DataFrame, a: dict[str, pl.DataFrame], shift: int = 0) -> pl.DataFrame:
    """Return (gid, _w, match, match_confidence): keyless downlink MPDUs paired with the AP's wired packets.

    The AP's queue is taken as one drop-tail FIFO shared by all stations (as ns-3's and a plain
    qdisc's are): the packets it accepted leave in arrival order, and what arrives while it is full
    is dropped.  An MPDU leaves it once its last attempt ends (a sequence number missed: about when
    the next one seen of its space does).  Per capacity tried (`_capacities`), the model says which
    packets were dropped; a station's accepted packets of one length then meet its MPDUs of that
    length in order (`_pair`), where time allows.  The capacity kept is the one under which the
    packets the queue held at each arrival agree best with the MPDUs that left before it was sent.
    `shift` (`clock_correction`) is taken from the wired stamps first.
    """
    out = pl.DataFrame(schema={"gid": pl.Int64, "_w": pl.UInt32, "match": pl.Utf8, "match_confidence": pl.Float64})
    w = w.with_columns(pl.col("ts_ns") - shift)
    grp = a["groups"]
    g = _rows(grp, (pl.col("direction") == "down") & pl.col("_nokey") & pl.col("key").is_null()
                   & pl.col("station").is_not_null())
    if g.height == 0 or w.height == 0 or "_plen" not in g.columns:
        return out
    start = int(a["span"]["start"][0])
    holes = _new_holes(a["space"])
    alld = _join_left(_rows(grp, (pl.col("direction") == "down") & pl.col("last_air_ts_ns").is_not_null())
                      .with_columns(_space_cols()), holes, ["ta", "_sra", "_tid", "useq"], nulls_equal=True)
    dep = alld.select("station", pl.col("last_air_ts_ns").alias("ts_ns"),
                      (1 + pl.col("_dh").fill_null(0).clip(0, 4096)).alias("_n"))
    dep = dep.select(pl.col("station", "ts_ns").repeat_by("_n").explode())
    del alld
    if dep.height == 0:
        return out
    arr = w.filter((pl.col("ts_ns") >= start) & (pl.col("ts_ns") <= dep["ts_ns"].max())).sort("ts_ns", "_w")
    t_arr, t_dep = arr.get_column("ts_ns").to_numpy(), np.sort(dep.get_column("ts_ns").to_numpy())
    g, ws = _queues(g, w.filter(pl.col("ts_ns") >= start).select("_w", "ts_ns", "station", "ip_len", "ip_dscp"))
    slots = _slots(g.with_columns(pl.col("_plen").alias("_len")), holes).select("gid", *_FIFO, "_slot", "_start")
    ws = ws.with_columns(pl.col("ip_len").cast(pl.Int64).alias("_len"))
    on_time = (pl.col("ts_ns") <= pl.col("_start") + SLACK_NS) & (pl.col("_start") - pl.col("ts_ns") <= MATCH_WINDOW_NS)
    best, endless = None, None
    # from a queue that never fills down: drops are claimed only where they fit clearly better than none
    # (a scheduler that is not first come, first served across stations blurs the fit of every capacity)
    for q in reversed(_capacities(_least_capacity(arr.select("station", "ts_ns"), dep), len(t_arr))):
        full, held = _full_at_arrival(t_arr, t_dep, q)
        state = arr.select("_w", pl.Series("_full", full), pl.Series("_held", held))
        rows = _join_left(ws, state, ["_w"]).with_columns(pl.col("_full").fill_null(False))
        acc = (rows.filter(~pl.col("_full"))
               .with_columns(pl.int_range(pl.len()).over(_FIFO, order_by=["ts_ns", "_w"]).alias("_r")))
        p = _pair(slots, acc, on_time)
        err = _misfit(p, t_dep)
        endless = err if endless is None else endless
        if best is None or (err < best[0] and err <= DROP_EVIDENCE * endless):
            best = (err, rows.select("_w", *_FIFO, "ts_ns"), p.select("_w", "gid", "_gap"))
        del rows, acc, p, state
    # confidence over each stream's packets in wired order: paired ones and the rest
    r = _confidence(best[1].join(best[2], on="_w", how="left"))
    return r.select("gid", "_w", "match", "match_confidence").cast(out.schema)


def _misfit(p: pl.DataFrame, t_dep: np.ndarray) -> float:
    """Return how badly pairs (ts_ns, _gap, _held) fit a FIFO, per pair: what the queue held at a packet's
    arrival must have left before it was sent, and an AP holding packets does not sit idle for long."""
    if p.height == 0:
        return float("inf")
    t = p.get_column("ts_ns").to_numpy()
    start = t + p.get_column("_gap").to_numpy()
    before = np.searchsorted(t_dep, start, side="left")
    left = before - np.searchsorted(t_dep, t, side="right")
    prev = np.where(before > 0, t_dep[np.maximum(before - 1, 0)], np.iinfo(np.int64).min)
    idle = (prev > t) & (start - prev > IDLE_NS)
    return float((np.abs(left - p.get_column("_held").fill_null(0).to_numpy()).sum() + idle.sum()) / p.height)


def _capacities(lo: int, n: int) -> list[int]:
    """Return the queue capacities to try: from the least the departures allow, by steps of a quarter, to
    one that never fills (n + 1)."""
    out, q = [], max(lo, 1)
    while q <= n:
        out.append(q)
        q = max(q + 1, int(q * 1.25))
    return [*out, n + 1]


def _keyless_streams(w: pl.DataFrame, a: dict[str, pl.DataFrame], which: pl.Expr
                     ) -> tuple[pl.DataFrame, pl.DataFrame] | None:
    """Return (keyless MSDU groups `which` selects, each with its FIFO `_slot`; the wired packets of their
    stations, each with its rank `_r` in its FIFO), or None when there are none."""
    g = _rows(a["groups"], which & pl.col("_nokey") & pl.col("key").is_null() & pl.col("station").is_not_null())
    if g.height == 0 or w.height == 0 or "_plen" not in g.columns:
        return None
    start = int(a["span"]["start"][0])
    g, ws = _queues(g, w.filter(pl.col("ts_ns") >= start).select("_w", "ts_ns", "station", "ip_len", "ip_dscp"))
    g = _slots(g.with_columns(pl.col("_plen").alias("_len")), _new_holes(a["space"]))
    acc = ws.with_columns(pl.col("ip_len").cast(pl.Int64).alias("_len"))
    return g, acc.with_columns(pl.int_range(pl.len()).over(_FIFO, order_by=["ts_ns", "_w"]).alias("_r"))


def _up_pairs(w: pl.DataFrame, a: dict[str, pl.DataFrame], slack: int) -> tuple[pl.DataFrame, pl.DataFrame] | None:
    """Return (the station streams' wired packets, pairs _w, gid, _gap) of keyless uplink: each MSDU the AP
    confirmed is forwarded (an AP rarely drops uplink), in order; None without keyless uplink."""
    got = _keyless_streams(w, a, (pl.col("direction") == "up") & (pl.col("acked_by") != "none"))
    if got is None:
        return None
    g, acc = got
    slots = g.select("gid", *_FIFO, "_slot", pl.col("last_air_ts_ns").alias("_start"))
    # uplink the air comes first: the wired copy follows the last attempt
    on_time = (pl.col("ts_ns") + slack >= pl.col("_start")) & (pl.col("ts_ns") - pl.col("_start") <= MATCH_WINDOW_NS)
    return acc, _pair(slots, acc, on_time)


def protected_up(w: pl.DataFrame, a: dict[str, pl.DataFrame], shift: int = 0) -> pl.DataFrame:
    """Return (gid, _w, match, match_confidence): keyless uplink MSDUs the AP confirmed, paired in order with
    the station's packets on the AP's wired side (`shift`: `clock_correction`)."""
    out = pl.DataFrame(schema={"gid": pl.Int64, "_w": pl.UInt32, "match": pl.Utf8, "match_confidence": pl.Float64})
    got = _up_pairs(w.with_columns(pl.col("ts_ns") - shift), a, SLACK_NS)
    if got is None:
        return out
    acc, p = got
    rows = acc.select("_w", *_FIFO, "ts_ns").join(p.select("_w", "gid", "_gap"), on="_w", how="left")
    r = _confidence(rows)
    return r.select("gid", "_w", "match", "match_confidence").cast(out.schema)


def clock_correction(down: pl.DataFrame, up: pl.DataFrame, a: dict[str, pl.DataFrame]) -> int:
    """Return ns to take from the wired stamps so that keyless pairs see the clocks as keyed ones would (0 if
    unknown).

    Without keys the alignment rests on sizes alone and may be off by milliseconds, more than the queue
    model can bear.  Paired as if nothing were dropped (right wherever the queue did not overflow), the
    quickest downlink packets go from the wired side to the air and the quickest uplink ones back in
    about the same short time; a clock error lengthens one direction by what it takes from the other.
    """
    got = _up_pairs(up, a, CLOCK_SLACK_NS)
    down_p = _down_pairs_endless(down, a)
    if got is None or down_p is None or min(got[1].height, down_p.height) < CLOCK_MIN_PAIRS:
        return 0
    # (uplink `_gap` is the air's end less the wired stamp: its forwarding time is minus that)
    fwd_up = int((-got[1].get_column("_gap")).sort()[CLOCK_RANK])
    fwd_down = int(down_p.get_column("_gap").sort()[CLOCK_RANK])
    return int((fwd_up - fwd_down) // 2)


def _down_pairs_endless(w: pl.DataFrame, a: dict[str, pl.DataFrame]) -> pl.DataFrame | None:
    """Return keyless downlink pairs (_w, gid, _gap) as if the AP's queue never overflowed (None: no keyless)."""
    got = _keyless_streams(w, a, pl.col("direction") == "down")
    if got is None:
        return None
    slots, acc = got
    on_time = ((pl.col("ts_ns") <= pl.col("_start") + CLOCK_SLACK_NS)
               & (pl.col("_start") - pl.col("ts_ns") <= MATCH_WINDOW_NS))
    return _pair(slots.select("gid", *_FIFO, "_slot", "_start"), acc, on_time)


def _with_protected(m: pl.DataFrame, pairs: pl.DataFrame, groups: pl.DataFrame) -> pl.DataFrame:
    """Return the keyed matches `m` (match ``key``) and the keyless `pairs` with their groups' columns."""
    m = m.lazy().with_columns(pl.lit("key").alias("match"), pl.lit(1.0).alias("match_confidence")).collect()
    if pairs.height == 0:
        return m
    pm = pairs.join(groups, on="gid").select("_w", *_MERGE_COLS, "match", "match_confidence")
    return pl.concat([m, pm.cast(m.schema)])


def downlink_one(w: pl.DataFrame, a: dict[str, pl.DataFrame], shift: int = 0) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Return (per wired downlink packet `_w`: its groups and fate in one air capture, gid -> _w map); `shift`:
    `clock_correction`, for the keyless pairs."""
    # lazily: only the columns the matches keep are filtered and sorted, not every column of the groups
    # (the groups' row numbers, keys and times alone are sorted and matched: their other columns are taken
    # afterwards for the matched rows only)
    g = (a["groups"].lazy().with_row_index("_g").filter((pl.col("direction") == "down") & pl.col("key").is_not_null())
         .select("_g", "key", (pl.col("_start") + SLACK_NS).alias("_t")).sort("_t").collect())
    m = g.join_asof(w.select("_w", "key", pl.col("ts_ns").alias("_wts")).sort("_wts"), left_on="_t",
                    right_on="_wts", by="key", strategy="nearest", tolerance=MATCH_WINDOW_NS + SLACK_NS,
                    check_sortedness=False)
    del g             # the matching's working tables are freed as soon as used: this is the join's busiest moment
    m = m.filter(pl.col("_w").is_not_null())
    m = m.select("_w").hstack(_columns(a["groups"], _MERGE_COLS).select(pl.all().gather(m.get_column("_g"))).get_columns())
    m = _with_protected(m, protected_down(w, a, shift), a["groups"])
    gmap = _columns(m, ["gid", "_w"])
    per = _merge_groups(m, "_w")
    del m
    # (each working column is dropped once read for the last time: these rows are a million wide)
    # (the packet's number alone goes through the join: the packets' other columns are not copied)
    # (the holes, sequence numbers missed before it, of each matched packet's MPDU came with its group)
    # (the steps on these rows run lazily: each eager with_columns or drop took 10-30 ms on them)
    d = _join_left(w, per, ["_w"]).lazy().with_columns(_space_cols()).drop("ra", "useq").collect()
    del per
    matched = pl.col("gid").is_not_null()
    # an unseen packet's space: the one its station's packets of the same DSCP used (else the station's)
    seen = d.lazy().filter(matched).select("station", "ip_dscp", "ta", "_sra", "_tid").collect()
    # (a tie of modes broken by the least, as in `_capture_loss`)
    by_dscp = seen.group_by("station", "ip_dscp").agg(pl.col("ta").mode().min().alias("_pta"),
                                                       pl.col("_sra").mode().min().alias("_psra"),
                                                       pl.col("_tid").mode().min().alias("_ptid"))
    by_sta = seen.group_by("station").agg(pl.col("ta").mode().min().alias("_qta"),
                                          pl.col("_sra").mode().min().alias("_qsra"),
                                          pl.col("_tid").mode().min().alias("_qtid"))
    del seen
    d = _join_left(_join_left(d, by_dscp, ["station", "ip_dscp"], nulls_equal=True), by_sta, ["station"])
    have_p = pl.col("_pta").is_not_null()
    d = d.lazy().with_columns(
        pl.when(matched).then(pl.col("ta")).when(have_p).then(pl.col("_pta")).otherwise(pl.col("_qta")).alias("_sta"),
        pl.when(matched).then(pl.col("_sra")).when(have_p).then(pl.col("_psra")).otherwise(pl.col("_qsra"))
        .alias("_sra"),
        pl.when(matched).then(pl.col("_tid")).when(have_p).then(pl.col("_ptid")).otherwise(pl.col("_qtid"))
        .alias("_tid")).drop("ta", "_pta", "_psra", "_ptid", "_qta", "_qsra", "_qtid")
    # the space as one integer for the windows below (four columns, three of them strings, hashed once)
    # (labelled by its first row: one hashing pass, where a join on the four columns copied every column of `d`)
    space = ["station", "_sta", "_sra", "_tid"]
    d = d.with_columns(pl.int_range(pl.len(), dtype=pl.UInt32).alias("_p")) \
        .with_columns(pl.col("_p").first().over(space))
    part = ["_p"]
    # in wired order within each space (the windows order the rows: sorting every column would copy them)
    order = ["ts_ns", "frame"]
    d = d.with_columns(
        pl.col("holes").forward_fill().over(part, order_by=order).alias("_hp"),
        pl.col("holes").backward_fill().over(part, order_by=order).alias("_hn"),
        matched.cast(pl.Int64).cum_sum().over(part, order_by=order).alias("_seg")).drop("holes").collect()
    # Which unseen packets of a segment took the missing sequence numbers: with the AP's queue full, a
    # drop-tail queue accepts a packet only if a slot freed since the previous arrival, i.e. the AP
    # dequeued some MPDU (of any station: the queue is shared) for its first transmission in between;
    # a packet that arrived with no dequeue since the previous arrival met a full queue.  Those are
    # called missed first, then the earliest (the queue was not full: every one of them was sent).
    d = d.hstack([_dequeued_since_previous(d.get_column("ts_ns"), a["groups"]).alias("_deq")])
    d = d.hstack([_rank_within(d, [*part, "_seg"], [~matched, ~pl.col("_deq"), *(pl.col(c) for c in order)])])
    # unmatched rows follow their segment's matched row (if any): rank among the unseen starts at 0
    d = d.lazy().with_columns(
        (pl.col("_hn") - pl.col("_hp").fill_null(0)).clip(lower_bound=0).alias("_gap"),
        pl.when(pl.col("_hp").is_not_null() & (pl.col("_seg") > 0)).then(pl.col("_rank") - 1)
        .otherwise(pl.col("_rank")).alias("_rank")).drop("_hp", "_seg", "_deq", "_p").collect()
    # a station whose traffic is protected and none of whose packets could be paired is not judged
    # (the groups' stations are categorical codes; a capture without wired packets leaves d's as strings)
    prot = a["groups"].lazy().filter(pl.col("direction") == "down").group_by("station").agg(
        (pl.col("protected").mean() > 0.5).alias("_prot")).join(
        d.lazy().filter(matched).select(pl.col("station").cast(a["groups"].schema["station"])).unique(),
        on="station", how="anti").with_columns(pl.col("station").cast(d.schema["station"])).collect()
    d = _join_left(d, prot, ["station"])
    start, end = a["span"].row(0)
    outside = (pl.col("ts_ns") < start) | (pl.col("ts_ns") > end)
    fate = (pl.when(matched).then(pl.when(pl.col("acked_by") != "none").then(pl.lit("delivered"))
                                  .otherwise(pl.lit("air_unacked")))
            .when(pl.col("_hn").is_null() | pl.col("_sta").is_null() | pl.col("_prot").fill_null(False) | outside)
            .then(pl.lit("unknown"))
            .when(pl.col("_rank") < pl.col("_gap")).then(pl.lit("sniffer_missed"))
            .otherwise(pl.lit("dropped_at_ap")))
    d = d.lazy().with_columns(
        fate.alias("fate"),
        pl.when(matched).then(pl.col("air_capture_file")).otherwise(pl.lit(a["loss"]["capture_file"][0]))
        .alias("air_capture_file"))
    # what join_timeline reads of the rows: the table's columns, the packet, its key and the transmission start
    return d.select([c for c in (*_DOWN_COLS, "_w", "key", "_start") if c in d.collect_schema()]).collect(), gmap


def uplink_one(w: pl.DataFrame, a: dict[str, pl.DataFrame], shift: int = 0
               ) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Return (wired uplink packets with their groups, unmatched air uplink groups, gid -> _w map); `shift`:
    `clock_correction`, for the keyless pairs."""
    up = (pl.col("direction") == "up") & pl.col("key").is_not_null()
    # lazily: only the columns the matches keep are filtered and sorted, not every column of the groups
    # (as downlink: the groups' row numbers, keys and times alone are sorted and matched)
    g = (a["groups"].lazy().with_row_index("_g").filter(up).select("_g", "key", "first_air_ts_ns")
         .sort("first_air_ts_ns").collect())
    m = (w.select("_w", "key", (pl.col("ts_ns") + SLACK_NS).alias("_t")).sort("_t")
         .join_asof(g, left_on="_t", right_on="first_air_ts_ns", by="key", strategy="nearest",
                    tolerance=MATCH_WINDOW_NS + SLACK_NS, check_sortedness=False)
         .filter(pl.col("_g").is_not_null()))
    del g
    m = m.select("_w").hstack(_columns(a["groups"], _MERGE_COLS).select(pl.all().gather(m.get_column("_g"))).get_columns())
    m = _with_protected(m, protected_up(w, a, shift), a["groups"])
    gmap = _columns(m, ["gid", "_w"])
    per = _merge_groups(m, "_w")
    del m
    d = _join_left(w, per, ["_w"])
    del per
    # (the few groups no packet took, filtered once: not a copy of every uplink group first)
    only = _rows(a["groups"], up & ~pl.col("gid").is_in(gmap.get_column("gid").implode()))
    return _columns(d, [c for c in (*_UP_COLS, "_w", "gid") if c in d.columns]), only, gmap


def _downstream_keys(tl: Timeline, ap: list[str], down: pl.DataFrame) -> tuple[pl.DataFrame, bool]:
    """Return ((key, ts_ns, _ap) of the packets in wired captures downstream of the AP (a station's own capture)
    that have the key of one of the downlink packets `down`, _ap the first one's stamp; whether no two of
    `down` share a key)."""
    out = []
    probe = down.select("key", pl.col("ts_ns").alias("_ap")).unique("key", keep="first")
    for e in tl.entries("wired"):
        if e.file in ap:
            continue
        # only the key, the stamp and the destination: the rest of `_wired_ip`'s columns (flow names...)
        # would be built for 1 M+ packets at the join's busiest moment for nothing
        o = _wired_key(tl.packets(e.file, columns=["ts_ns", "malformed", *(c for c, _ in mm.IP_KEY)]))
        seen = o.join(probe, on="key")
        lag = seen.select((pl.col("ts_ns") - pl.col("_ap")).median()).item()
        # A station's own capture sees the AP's downlink to that station only; a capture upstream
        # (the server's, next to the AP on a fast link) sees it all, and clock error can put it a few
        # microseconds "after" the AP: it must not vouch for packets the AP dropped.
        if lag is not None and lag > 0 and seen.get_column("ip_dst").n_unique() == 1:
            # (only its packets with a downlink packet's key can meet one: the rest are not kept)
            out.append(seen.select("key", "ts_ns", "_ap"))
    unique = probe.height == down.height
    if not out:
        return pl.DataFrame(schema={"key": pl.UInt64, "ts_ns": pl.Int64, "_ap": pl.Int64}), unique
    return pl.concat(out), unique


def _client_has(down: pl.DataFrame, client: pl.DataFrame, unique: bool) -> pl.Series:
    """Return `_client` per row of `down`: whether a station's own capture (`_downstream_keys`) holds a copy
    of the packet at most `MATCH_WINDOW_NS` after it."""
    if unique:
        # each key the one packet's, stamped `_ap`: a copy on time is one of its own rows (no sort, no asof)
        lag = pl.col("ts_ns") - pl.col("_ap")
        on_time = client.filter((lag >= 0) & (lag <= MATCH_WINDOW_NS)).get_column("key")
        return down.select(pl.col("key").is_in(on_time.implode()).alias("_client")).to_series()
    got = (down.select("_w", "key", "ts_ns").sort("ts_ns")
           .join_asof(client.select("key", pl.col("ts_ns").alias("_cts")).sort("_cts"), left_on="ts_ns",
                      right_on="_cts", by="key", strategy="forward", tolerance=MATCH_WINDOW_NS, check_sortedness=False)
           .select("_w", pl.col("_cts").is_not_null().alias("_client")))
    return _join_left(down.select("_w"), got, ["_w"]).get_column("_client")


def _by_station(wired: pl.DataFrame, ip_sta: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Return (the wired packets to a station's IP, those from one and to none), each with its `station`."""
    ips = ip_sta.get_column("ip")
    if ips.null_count() or ips.is_duplicated().any():
        down = wired.join(ip_sta.rename({"ip": "ip_dst"}), on="ip_dst", how="inner")
        return down, wired.join(ip_sta.rename({"ip": "ip_src"}), on="ip_src", how="inner").join(
            down.select("_w"), on="_w", how="anti")
    # (an IP is one station's: the few addresses are looked up, not a million strings hashed in a join)
    to_sta = pl.col("ip_dst").is_in(ips.implode())
    station = ip_sta.get_column("station")
    return (_rows(wired, to_sta).with_columns(pl.col("ip_dst").replace_strict(ips, station).alias("station")),
            _rows(wired, pl.col("ip_src").is_in(ips.implode()) & ~to_sta)
            .with_columns(pl.col("ip_src").replace_strict(ips, station).alias("station")))


def _nulls(*names: str) -> list[pl.Expr]:
    """Return null columns standing for the air side's columns when there is no air capture."""
    types = {"acked_by": pl.Utf8, "n_attempts": pl.UInt32}
    return [pl.lit(None, types.get(n, pl.Int64)).alias(n) for n in names]


def _choose(rows: pl.DataFrame) -> pl.DataFrame:
    """Return one row per `_w`: the air capture that saw most attempts, else the strongest evidence."""
    return (rows.with_columns(pl.col("n_attempts").fill_null(0).alias("_na"), _PRIORITY.alias("_pri"))
            .sort(["_w", "_na", "_pri"], descending=[False, True, False])
            .unique("_w", keep="first", maintain_order=True))


def _choose_among(rows: list[pl.DataFrame]) -> pl.DataFrame:
    """Return `_choose` of the rows of every air capture (`rows`: one table per capture), in no set order."""
    if len(rows) == 1 and not _repeated(rows[0].get_column("_w")).any():
        # one air capture (the usual case) has one row per packet already: its choice is every row, and
        # the sort would copy every column of the table for an order the caller sorts away again
        return rows[0]
    return _choose(pl.concat(rows, how="diagonal_relaxed"))


def _aligned_by_size(tl: Timeline, file: str) -> bool:
    """Return whether the alignment placed an air capture by frame sizes alone (its clock is then rough)."""
    try:
        return ":size" in (tl.alignment.capture(file).method or "")
    except (AttributeError, KeyError):
        return False


def join_timeline(tl: Timeline) -> dict[str, pl.DataFrame]:
    """Return the downlink, uplink, attempts and capture_loss tables of a timeline."""
    # A spilled timeline (a large bundle) has a scratch directory: the attempts wait there, not in memory,
    # while the wired side is joined (they are needed again only at the end).
    scratch = getattr(tl, "_spill_dir", None)
    att_files: dict[str, str] = {}
    airs = []
    for n, e in enumerate(tl.entries("air")):
        a = _analyse_usable(_usable_air(tl.packets(e.file, columns=_AIR_READ)), e.file, compact=False)
        if scratch is not None:
            att_files[e.file] = os.path.join(scratch, f"join-attempts-{n}.arrow")
            a.pop("attempts").write_ipc(att_files[e.file], compression="uncompressed")
        # the kept tables' strings copied out only now: the attempts, which share the air records' string
        # buffers too, are gone, so the old buffers are freed as the copies are made, not held beside them
        airs.append((e.file, _compact_air(a)))
        del a
    loss = pl.concat([a["loss"] for _, a in airs], how="vertical_relaxed") if airs else None
    stations = (pl.concat([a["stations"] for _, a in airs]).unique() if airs
                else pl.DataFrame(schema={"station": pl.Utf8, "ip": pl.Utf8}))
    # an IP seen behind two addresses (a station that reassociated with a new MAC...): keep the first
    ip_sta = stations.unique("ip", keep="first", maintain_order=True)
    ap = _ap_files(tl)
    stand_in, down_lead, up_lag = (None, 0, 0) if ap or not airs else upstream_stand_in(tl, ip_sta, airs)
    if stand_in is not None:
        ap = [stand_in]
    wired = (pl.concat([_wired_ip(tl.packets(f, columns=_WIRED)) for f in ap], how="diagonal_relaxed") if ap
             else _wired_ip(pl.DataFrame(schema={"capture_file": pl.Utf8, "frame": pl.Int64, "ts_ns": pl.Int64})))
    wired = wired.with_row_index("_w")
    # keyless stations: their IPs (bridged Ethernet addresses, else lengths) and cipher overheads
    if airs:
        learnt, oh = learn_protected(wired, pl.concat([a["groups"] for _, a in airs], how="diagonal_relaxed"), ip_sta)
        # (coded as the air's stations are: they are joined to the groups' and the packets')
        learnt, oh = _coded(learnt, ["station"]), _coded(oh, ["station"])
        ip_sta = pl.concat([ip_sta, learnt.select("station", "ip")])
        for _, a in airs:
            # (the station alone goes through the join, not a copy of every group column; what only the
            # protected length read is dropped with it: the rest of the join reads none of it)
            # (lazily: the eager with_columns and drop each took tens of ms on a million groups)
            a["groups"] = _join_left(a["groups"], oh, ["station"]).lazy().with_columns(
                _protected_len(pl.col("_oh").fill_null(CIPHER_OVERHEADS["ccmp"])).alias("_plen")).drop(
                "_oh", "_body", "_whole", "_amsdu", "pn").collect()
        del learnt, oh
    # the wired rows' strings as codes too: a packet's flow meets the air groups' flows
    wired = _coded(_without(wired, "eth_src", "eth_dst"), ["capture_file", "flow"])
    down_w, up_w = _by_station(wired, ip_sta)
    # the addresses served to find the station: the rest reads neither, nor more of `wired` than this
    down_w, up_w = _without(down_w, "ip_src", "ip_dst"), _without(up_w, "ip_src", "ip_dst")
    if stand_in is not None:
        # its stamps taken to the AP: later by the least delay to the air, earlier by the least from it
        # (the path's own delay; what a packet waited beyond it counts as the AP's)
        down_w = down_w.with_columns(pl.col("ts_ns") + down_lead)
        up_w = up_w.with_columns(pl.col("ts_ns") - up_lag)
    w_end = int(wired["ts_ns"].max()) if wired.height else None
    w_start = int(wired["ts_ns"].min()) if wired.height else None
    wired = wired.select("_w", "capture_file", "frame")
    gmaps, down_rows, up_rows, up_only = [], [], [], []
    for file, a in airs:
        shift = clock_correction(down_w, up_w, a) if _aligned_by_size(tl, file) else 0
        d, gm = downlink_one(down_w, a, shift)
        down_rows.append(d)
        u, only, gu = uplink_one(up_w, a, shift)
        up_rows.append(u)
        up_only.append(only)
        gmaps.append(pl.concat([gm, gu]))
        del d, gm, u, only, gu
        # what is left to do reads of an air capture only its attempts and capture loss: free the rest now
        for k in ("groups", "space", "stations"):
            a.pop(k)
    # downlink
    if down_rows:
        down = _choose_among(down_rows)
        del down_rows
    else:   # no air capture: nothing to say about any packet's air side
        down = down_w.with_columns(pl.lit("unknown").alias("fate"), *_nulls("acked_by", "_start", "n_attempts"))
    client, unique = _downstream_keys(tl, ap, down_w)
    del down_w
    if client.height and down.height:
        got = _client_has(down, client, unique)
        down = down.hstack([got])
        c = pl.col("_client").fill_null(False)
        unseen = pl.col("n_attempts").fill_null(0) == 0
        down = down.lazy().with_columns(
            pl.when(c & unseen).then(pl.lit("sniffer_missed")).when(c & (pl.col("fate") == "air_unacked"))
            .then(pl.lit("delivered")).otherwise(pl.col("fate")).alias("fate"),
            pl.when(c & (pl.col("acked_by").fill_null("none") == "none")).then(pl.lit("client"))
            .otherwise(pl.col("acked_by")).alias("acked_by")).collect()
        del got
    del client
    down = down.lazy().with_columns(pl.col("acked_by").fill_null("none"),
                                    (pl.col("_start") - pl.col("ts_ns")).alias("sojourn_ns")).collect()
    # (the rows of one AP capture are in its frame order already, as the wired side had them: not sorted again)
    if not (down.get_column("capture_file").n_unique() == 1 and down.get_column("frame").is_sorted()):
        down = down.sort("capture_file", "frame")
    keep = [c.name for c in DOWNLINK]
    # each table is finished as soon as it can be, and its working rows freed
    # (parked in the scratch directory while the uplink and attempts are worked out)
    downlink = park(conform(_columns(down, [c for c in keep if c in down.columns]), DOWNLINK), scratch, "downlink")
    del down
    # uplink
    if up_rows:
        seen_up = pl.when(pl.col("gid").is_not_null()).then(pl.lit("delivered")).otherwise(pl.lit("sniffer_missed"))
        up = _choose_among([u.lazy().with_columns(seen_up.alias("fate")).collect() for u in up_rows])
    else:
        up = up_w.with_columns(pl.lit("unknown").alias("fate"), *_nulls("acked_by", "last_air_ts_ns", "first_air_ts_ns"))
    up = up.lazy().with_columns((pl.col("ts_ns") - pl.col("last_air_ts_ns")).alias("sojourn_ns"),
                                pl.col("acked_by").fill_null("none")).collect()
    wired_flows = up_w.get_column("flow").drop_nulls().unique()
    if up_only:
        only = pl.concat(up_only, how="diagonal_relaxed").filter(pl.col("flow").is_in(wired_flows.implode()))
        # ties broken by capture and frame: which row is kept, and the rows' order, do not depend on threads
        only = (only.sort(["n_attempts", "air_capture_file", "first_air_frame"], descending=[True, False, False],
                          nulls_last=True, maintain_order=True).unique("key", keep="first", maintain_order=True))
        edge = (pl.lit(w_end is None) | (pl.col("last_air_ts_ns") > (w_end or 0) - 1_000_000_000)
                | (pl.col("first_air_ts_ns") < (w_start or 0)))
        only = only.with_columns(
            pl.when(edge).then(pl.lit("unknown")).when(pl.col("acked_by") != "none").then(pl.lit("dropped_at_ap"))
            .otherwise(pl.lit("air_unacked")).alias("fate"))
        up = pl.concat([up, only], how="diagonal_relaxed")
        del only
    del up_rows, up_only, up_w
    # (air-only rows of one A-MPDU share a stamp: their capture's frame numbers order them)
    up = up.sort([c for c in ("capture_file", "frame", "first_air_ts_ns", "air_capture_file", "first_air_frame")
                  if c in up.columns], nulls_last=True, maintain_order=True)
    uplink = park(conform(_columns(up, [c for c in keep if c in up.columns]), UPLINK), scratch, "uplink")
    del up
    # attempts, joined to their wired packet
    if airs:
        # (a wired packet's number is its row in `wired`: looked up by position, as the group ids are)
        wired = wired.select("_w", pl.col("capture_file").alias("wired_capture_file"), pl.col("frame").alias("wired_frame"))
        parts = []
        for (f, a), g in zip(airs, gmaps):
            if f in att_files:
                # mapped, not read: clean file pages instead of a second copy of every attempt column
                a["attempts"] = mapped_ipc(att_files[f])
                os.remove(att_files[f])
            att = a.pop("attempts")
            if index_rows(g.get_column("gid"), att.get_column("gid").head(0)) is None:
                g = g.unique("gid")     # (a group taken by two packets, if ever: one of them, as before)
            # only the key columns go through the joins (`_join_left`), not a copy of every attempt column
            att = _join_left(att, g, ["gid"])
            parts.append(_join_left(att, wired, ["_w"]).lazy().drop("_w").with_columns(pl.lit(f).alias("capture_file"))
                         .collect())
            del g, att
        del gmaps
        att = pl.concat(parts, how="diagonal_relaxed")
        del parts
    else:
        att = None
    return {
        "downlink": downlink,
        "uplink": uplink,
        "attempts": conform(None if att is None else att.select([c.name for c in ATTEMPTS]), ATTEMPTS),
        "capture_loss": conform(None if loss is None else loss.select([c.name for c in CAPTURE_LOSS]), CAPTURE_LOSS),
    }


def match_notes(tl: Timeline) -> list[str]:
    """Return one line saying how many packets of protected traffic were matched by size and order (or none)."""
    if not tl.entries("air"):
        return []
    counts = {"size_order": 0, "ambiguous": 0}
    for name in ("downlink", "uplink"):
        t = tl.table(name)
        if "match" not in t.columns:
            continue
        for m, n in t.group_by("match").len().iter_rows():
            if m in counts:
                counts[m] += int(n)
    total = counts["size_order"] + counts["ambiguous"]
    if not total:
        return []
    return [f"protected traffic without keys: the fates, attempts and sojourns of {total:,} packets were matched "
            f"to their MPDUs by size, order and time ({counts['size_order']:,} size_order, {counts['ambiguous']:,} "
            f"ambiguous: equal-length packets dropped beside them could be the one; the match column and "
            f"match_confidence of the downlink and uplink tables say which)"]


def stand_in_notes(tl: Timeline) -> list[str]:
    """Return one line naming the capture that stood in for the AP's wired side (none captured), or none."""
    if _ap_files(tl) or not tl.entries("air"):
        return []
    moved = {}
    for name in ("downlink", "uplink"):
        t = tl.table(name).filter(pl.col("capture_file").is_not_null()).head(1)
        if t.height:
            f, frame, ts = t.row(0)[t.columns.index("capture_file")], t["frame"][0], t["ts_ns"][0]
            own = tl.packets(f, columns=["frame", "ts_ns"]).filter(pl.col("frame") == frame)["ts_ns"]
            if own.len():
                moved[name] = (f, int(ts) - int(own[0]))
    if not moved:
        return []
    f = next(iter(moved.values()))[0]
    how = ", ".join(f"{name} packets {'later' if ns >= 0 else 'earlier'} by "
                    + (f"{abs(ns) / 1e6:.3f} ms" if abs(ns) >= 1_000_000 else f"{abs(ns) / 1e3:.1f} us")
                    for name, (_, ns) in moved.items())
    return [f"no capture of the AP's wired side: {f} stands in for it, its stamps taken to the AP by the path's "
            f"least delay ({how}); a packet lost on that path counts as dropped at the AP, and its waits beyond "
            f"that least delay as the AP's"]


def build(tl: Timeline) -> dict[str, pl.DataFrame]:
    """Return {"downlink", "uplink", "attempts", "capture_loss"} for a timeline."""
    return join_timeline(tl)
