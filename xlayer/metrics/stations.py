"""Per-station 802.11 metrics of every air capture: rates, retries, failures, airtime, signal, events.

**Who is who.** Access points are the addresses that send beacons or probe responses (TA = BSSID),
the TA of From-DS data frames and the RA of To-DS data frames.  A station is a unicast address that
exchanges frames with an AP: a frame *concerns* station S when one of its TA and RA is S and the
other an AP (``down``: AP -> S, ``up``: S -> AP).  ACK and CTS frames carry only an RA.  An ACK that
is the next record after a frame from that RA answers it, so its transmitter is that frame's RA.  A CTS
answers an RTS only when it is the next record after a good-FCS RTS from its RA at most
`CTS_WINDOW_NS` later (SIFS + CTS airtime + stamping jitter); its transmitter is that RTS's RA.  Any
other CTS is a *CTS-to-self*: a station (or AP) protecting its own next transmission or retry sends a
CTS addressed to itself, with no RTS before it.  Its transmitter is its RA, so it concerns no station
(it is counted apart, in ``cts_to_self``, not in ``cts``, the frame counts or the airtime; an RTS the
sniffer missed makes its CTS look like the RTS sender's CTS-to-self).  Frames between two stations
(IBSS, TDLS) or two APs (WDS) concern no station.  Only frames with a good FCS
decide who is an AP or a station (a decoding error past the MAC header, such as an IP header cut
by an 802.11 fragment, leaves the 802.11 fields good).

**Bad FCS.** A frame whose FCS fails may have any field corrupted; it is counted for a station
(``fcs_bad``) only when its addresses still read as one of the AP/station pairs above (the TA is
readable), so frames corrupted in the address fields are not counted anywhere.  Every other metric
uses good frames only, except airtime (a corrupted frame held the air all the same).

**MPDUs.** Data frames are numbered per (TA, RA, TID); the sequence numbers of each such space are
unwrapped in capture order (a step is taken modulo 4096 as a signed value), so an MPDU is
(TA, RA, TID, unwrapped seq, fragment) and an MSDU the same without the fragment.  A transmission is
confirmed by an ACK that is the next record, addressed to its TA, at most `ACK_WINDOW_NS` after its
PPDU's last record, or by the first Block Ack from its RA to its TA at most `BA_WINDOW_NS` later whose
bitmap has its sequence number.  An MPDU *failed after the retry limit* when none of its
transmissions seen was confirmed, its sequence number never shows again (it is the MPDU's last
transmission), that last transmission has the Retry bit, and at least `FAIL_MIN_ATTEMPTS` of its
transmissions were seen (this keeps out MPDUs that got through after a few retries but whose final
ACK the sniffer alone missed: ``ack_miss_fraction`` says how often that happens on the link).  On
ns-3's far stations this finds 9 of 10 and 31 of 40 of the AP's retry-limit drops; an MPDU the
station received but whose ACK the AP missed looks delivered to a sniffer that heard the ACK.

**Airtime** per frame is `xlayer.timeline.airtime` (PPDU duration from length, rate, preamble and GI; an
A-MPDU's PPDU split over its subframes by bytes), summed over the frames that concern the station,
ACK/CTS/Block Ack included.  ``airtime_share`` divides by the airtime of every frame of the capture
(beacons, other BSSs, unattributed frames included); ``data_airtime_share`` divides the station's data
frames' airtime by that of every station's data frames (the share of the data airtime among stations).

**Rate changes** are read on first transmissions of data (Retry bit clear; one per PPDU) per station
and direction.  Rate-control probes (Minstrel sends about one frame in ten at another rate) would give
two changes each, so a rate must hold for `MIN_RUN` consecutive PPDUs to count; shorter runs are
dropped before the changes between the remaining runs are listed.

**Events.** Association, reassociation, authentication, disassociation and deauthentication frames
(good FCS) with their reason and status codes, and ``bssid_change``: a station's data frames move
from one AP address to another (``gap_ns``: the time without data between its last data frame with the
old AP, ``prev_frame``, and its first with the new one).

**Several BSSs.** A station has one ``stations`` row per BSS it belongs to in a capture: an AP it
exchanged data or (re)association, authentication, disassociation or deauthentication frames with.
A data, control or such management frame counts in the row of its AP when the station belongs to
that BSS; any other frame (a probe response while it scans, a frame with an AP whose BSS it is not in)
and a CTS-to-self it sent count in the row of the BSS of its nearest earlier frame that made it a
member (the next one if none is earlier),
and a station that belongs to no BSS has one row, for the AP it exchanged most frames with.  On a
one-BSS capture each station has one row, as before this split; summed over a station's rows, its
counts and airtimes are those of the station.  ``station_series`` keeps one row per station and bin;
its ``bssid`` is the BSS of most of the station's data frames in the bin (of most of its frames
without data; ties: the later BSS).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from xlayer.metrics import tcp as tcpmod
from xlayer.metrics.schema import Column, conform, register
from xlayer.timeline.airtime import COLUMNS as AIRTIME_COLUMNS
from xlayer.timeline.airtime import airtime

if TYPE_CHECKING:
    from xlayer.bundle.manifest import CaptureEntry
    from xlayer.timeline.open import Timeline

NEEDS: tuple[str, ...] = (
    "frame", "ts_ns", "wirelen", "linktype", "malformed", "rt_layout", "rt_len", "rt_flags", "phy_rate_mbps", "phy",
    "mcs", "bw_mhz", "nss", "sgi", "he_gi_us", "freq_mhz", "chan_flags", "signal_dbm", "noise_dbm", "fcs_bad",
    "ampdu_ref", "ampdu_flags", "wlan_type", "wlan_subtype", "wlan_to_ds", "wlan_from_ds", "wlan_more_frag",
    "wlan_retry", "wlan_order", "wlan_amsdu", "wlan_ra", "wlan_ta", "wlan_bssid", "wlan_seq", "wlan_frag", "wlan_tid",
    "wlan_reason", "wlan_status", "wlan_ba_ssn", "wlan_ba_bitmap", "ip_len")

ACK_WINDOW_NS = 1_000_000      # PPDU end -> ACK end: SIFS + ACK airtime (<= 304 us at 1 Mbit/s) + stamping jitter
CTS_WINDOW_NS = 1_000_000      # RTS stamp -> CTS stamp: SIFS + CTS airtime (<= 304 us at 1 Mbit/s) + stamping jitter
BA_WINDOW_NS = 5_000_000       # PPDU end -> the Block Ack answering it (Block Ack Request exchanges included)
MIN_RUN = 3                    # PPDUs a rate must hold to count as a rate change (not a rate-control probe)
# A failed MPDU was sent dot11ShortRetryLimit = 7 times (the standard's default, ns-3's and most drivers'):
# six seen tolerates one the sniffer missed and keeps out MPDUs that got through after a few retries
# but whose last ACK the sniffer missed (the commonest false failure next to a far station).
FAIL_MIN_ATTEMPTS = 6

MGMT_EVENTS = {0: "assoc_req", 1: "assoc_resp", 2: "reassoc_req", 3: "reassoc_resp", 10: "disassoc", 11: "auth",
               12: "deauth"}
# A station belongs to the BSS of an AP it exchanged data or one of these management frames with.

_C = Column
STATIONS = register("stations", (
    _C("capture_file", pl.Utf8, "", "air capture"),
    _C("station", pl.Utf8, "", "the station's 802.11 address"),
    _C("bssid", pl.Utf8, "", "the BSS (AP address) this row counts: one row per BSS the station exchanged data or "
       "(re)association/authentication frames with (module docstring)"),
    _C("first_ts_ns", pl.Int64, "ns", "first frame concerning the station, reference clock"),
    _C("last_ts_ns", pl.Int64, "ns", "last frame concerning the station, reference clock"),
    _C("frames_down", pl.Int64, "", "good-FCS frames AP -> station (ACK/CTS included)"),
    _C("frames_up", pl.Int64, "", "good-FCS frames station -> AP (ACK/CTS included)"),
    _C("data_frames", pl.Int64, "", "data frame transmissions, both directions (retries included)"),
    _C("data_mpdus", pl.Int64, "", "distinct data MPDUs, both directions"),
    _C("retries", pl.Int64, "", "data frame transmissions with the Retry bit"),
    _C("retry_fraction", pl.Float64, "fraction", "retries / data_frames (of the transmissions seen; null without "
       "data frames)"),
    _C("retry_fraction_down", pl.Float64, "fraction", "retry fraction of data transmissions AP -> station"),
    _C("retry_fraction_up", pl.Float64, "fraction", "retry fraction of data transmissions station -> AP"),
    _C("unseen_tx_min", pl.Int64, "", "data transmissions the sniffer must have missed: MPDUs whose first "
       "transmission seen has the Retry bit (at least one each)"),
    _C("failed_mpdus", pl.Int64, "", "data MPDUs failed after the retry limit: never confirmed, sent at least "
       f"{FAIL_MIN_ATTEMPTS} times, the last with the Retry bit, never seen again"),
    _C("failed_mpdus_down", pl.Int64, "", "of those, sent by the AP"),
    _C("ack_miss_fraction", pl.Float64, "fraction", "MPDUs sent once (so confirmed to their sender) whose ACK "
       "the sniffer did not see: how often it misses this link's ACKs"),
    _C("rate_mean_down_mbps", pl.Float64, "Mbit/s", "mean PHY rate of data transmissions AP -> station"),
    _C("rate_median_down_mbps", pl.Float64, "Mbit/s", "median PHY rate of data transmissions AP -> station"),
    _C("rate_mean_up_mbps", pl.Float64, "Mbit/s", "mean PHY rate of data transmissions station -> AP"),
    _C("rate_median_up_mbps", pl.Float64, "Mbit/s", "median PHY rate of data transmissions station -> AP"),
    _C("airtime_ns", pl.Int64, "ns", "airtime of every frame concerning the station (bad FCS included)"),
    _C("airtime_share", pl.Float64, "fraction", "airtime_ns / airtime of every frame in the capture"),
    _C("data_airtime_ns", pl.Int64, "ns", "airtime of its data frames, both directions"),
    _C("data_airtime_share", pl.Float64, "fraction", "data_airtime_ns / data airtime of every station"),
    _C("signal_dbm_median", pl.Float64, "dBm", "median signal of frames the station sent"),
    _C("noise_dbm_median", pl.Float64, "dBm", "median noise of frames the station sent"),
    _C("fcs_bad", pl.Int64, "", "bad-FCS frames whose addresses still read as this station and its AP"),
    _C("fcs_bad_rate", pl.Float64, "fraction", "fcs_bad / (frames_down + frames_up + fcs_bad)"),
    _C("fragments_per_msdu_down", pl.Float64, "", "mean fragments per data MSDU AP -> station (max fragment + 1)"),
    _C("fragments_per_msdu_up", pl.Float64, "", "mean fragments per data MSDU station -> AP"),
    _C("rts", pl.Int64, "", "RTS frames between the station and its AP, both directions"),
    _C("cts", pl.Int64, "", "CTS frames answering those RTS (the next record after the RTS, addressed to its "
       f"sender, at most {CTS_WINDOW_NS / 1e6:g} ms later)"),
    _C("cts_to_self", pl.Int64, "", "CTS-to-self frames the station sent: good-FCS CTS addressed to it that answer "
       "no RTS (protection before its own transmission; not in cts, frames_up or airtime_ns)"),
    _C("rts_ratio", pl.Float64, "", "rts / data_frames: RTS per data transmission (null without data frames)"),
), "one station (non-AP address exchanging frames with an AP) in one air capture")
STATION_SERIES = register("station_series", (
    _C("capture_file", pl.Utf8, "", "air capture"),
    _C("station", pl.Utf8, "", "the station's 802.11 address"),
    _C("bin_start_ns", pl.Int64, "ns", "start of the time bin (the timeline's bin_ns), reference clock"),
    _C("bssid", pl.Utf8, "", "the BSS of most of the station's data frames in the bin (of its frames without data; "
       "ties: the later one)"),
    _C("frames", pl.Int64, "", "good-FCS frames concerning the station, both directions"),
    _C("data_frames", pl.Int64, "", "data frame transmissions, both directions"),
    _C("phy_rate_mbps", pl.Float64, "Mbit/s", "mean PHY rate of data transmissions AP -> station"),
    _C("retry_fraction", pl.Float64, "fraction", "data transmissions with the Retry bit / data transmissions "
       "(null without data transmissions in the bin)"),
    _C("airtime_ns", pl.Int64, "ns", "airtime of the frames concerning the station"),
    _C("airtime_share", pl.Float64, "fraction", "airtime_ns / airtime of every frame of the capture in the bin"),
    _C("signal_dbm", pl.Float64, "dBm", "median signal of frames the station sent"),
    _C("noise_dbm", pl.Float64, "dBm", "median noise of frames the station sent"),
    _C("fcs_bad", pl.Int64, "", "bad-FCS frames read as this station's"),
), "one station in one time bin of one air capture")
RATE_CHANGES = register("rate_changes", (
    _C("capture_file", pl.Utf8, "", "air capture"),
    _C("station", pl.Utf8, "", "the station's 802.11 address"),
    _C("ts_ns", pl.Int64, "ns", "first PPDU at the new rate, reference clock"),
    _C("frame", pl.Int64, "", "its frame number"),
    _C("direction", pl.Utf8, "", "down (AP -> station) or up"),
    _C("from_mbps", pl.Float64, "Mbit/s", "rate held before"),
    _C("to_mbps", pl.Float64, "Mbit/s", "rate held from this frame on"),
    _C("ppdus", pl.Int64, "", "first-transmission PPDUs in the run at the new rate"),
), f"a data PHY rate change between runs of at least {MIN_RUN} first transmissions (probes dropped)")
MGMT = register("mgmt_events", (
    _C("capture_file", pl.Utf8, "", "air capture"),
    _C("frame", pl.Int64, "", "frame number"),
    _C("ts_ns", pl.Int64, "ns", "stamp, reference clock"),
    _C("station", pl.Utf8, "", "the non-BSSID address of the frame (may be broadcast for a deauthentication)"),
    _C("bssid", pl.Utf8, "", "BSSID (bssid_change: the new AP address)"),
    _C("direction", pl.Utf8, "", "down (from the BSSID), up (to it), or null"),
    _C("event", pl.Utf8, "", "assoc_req, assoc_resp, reassoc_req, reassoc_resp, disassoc, auth, deauth, bssid_change"),
    _C("reason", pl.UInt16, "", "reason code (disassoc, deauth)"),
    _C("status", pl.UInt16, "", "status code (auth, assoc/reassoc responses)"),
    _C("prev_bssid", pl.Utf8, "", "bssid_change: the AP address before"),
    _C("prev_frame", pl.Int64, "", "bssid_change: the station's last data frame with prev_bssid"),
    _C("gap_ns", pl.Int64, "ns", "bssid_change: time without data, from prev_frame to this frame"),
), "one (de)association/authentication frame or BSSID change of a station in an air capture")

TABLES = {"stations": STATIONS, "station_series": STATION_SERIES, "rate_changes": RATE_CHANGES,
          "mgmt_events": MGMT}


# ---------------------------------------------------------------------------------------------
# one air capture


def _group(col: str) -> pl.Expr:
    """Return whether a MAC address column is a group (broadcast/multicast) address."""
    return pl.col(col).str.slice(1, 1).is_in(list("13579bdfBDF"))


def _unicast(col: str, group: pl.Series) -> pl.Expr:
    """Return whether a MAC code column is a unicast address (`group`: the codes of group addresses)."""
    return pl.col(col).is_not_null() & ~pl.col(col).is_in(group.implode())


def _mac_codes(df: pl.DataFrame, cols: tuple[str, ...]) -> pl.Series:
    """Return the sorted distinct MAC addresses of `cols`: a row's index in it is the address's code."""
    return (pl.concat([df.get_column(c).drop_nulls().unique() for c in cols]).unique()
            .sort().alias("mac"))


def _decode(df: pl.DataFrame, macs: pl.Series, cols: tuple[str, ...]) -> pl.DataFrame:
    """Return `df` with its MAC code columns `cols` turned back into the address strings."""
    return df.with_columns(macs.gather(df.get_column(c)).alias(c) for c in cols if c in df.columns)


def cts_answers_rts(ts: str = "ts_ns", typ: str = "type", sub: str = "sub", ta: str = "ta", ra: str = "ra",
                    bad: str = "bad") -> pl.Expr:
    """Return, per record of one capture in record order (records without a MAC header left out), whether
    it is a CTS answering an RTS: the record just before is a good-FCS RTS from this CTS's RA, at most
    `CTS_WINDOW_NS` earlier (a null FCS verdict: no FCS captured, taken as good).  A CTS for which this is
    false is a CTS-to-self.  The column names are parameters, so that `_prepare`'s columns and the
    air_frames table's (``wlan_type``, ...; there per capture: ``.over("capture_file", order_by="frame")``)
    can be read."""
    prev_rts = ((pl.col(typ).shift(1) == 1) & (pl.col(sub).shift(1) == 11) & ~pl.col(bad).shift(1).fill_null(False)
                & (pl.col(ta).shift(1) == pl.col(ra))
                & ((pl.col(ts) - pl.col(ts).shift(1)) <= CTS_WINDOW_NS))
    return ((pl.col(typ) == 1) & (pl.col(sub) == 12) & prev_rts).fill_null(False)


def capture_airtime(tl: Timeline, e: CaptureEntry) -> pl.DataFrame:
    """Return `airtime` of an air capture's records as `_prepare` sees them (ppdu_ns, share_ns), computed
    once per timeline: the stations and air_frames tables both read it."""
    key = ("airtime", e.file)
    if key not in tl._shared:
        # only the columns airtime reads; those NEEDS lacks stay absent, as in `_prepare`'s table
        cols = [c for c in NEEDS if c in AIRTIME_COLUMNS]
        tl._shared[key] = airtime(_filled(tl.packets(e, columns=cols), cols)).select("ppdu_ns", "share_ns")
    return tl._shared[key]


def _filled(df: pl.DataFrame, cols: Sequence[str]) -> pl.DataFrame:
    """Return `df` with the columns of `cols` it lacks added as nulls of the packet schema's dtype."""
    missing = [c for c in cols if c not in df.columns]
    if missing:
        from parsers.schema import SCHEMA
        df = df.with_columns(pl.lit(None, SCHEMA[c]).alias(c) for c in missing)
    return df


def _prepare(packets: pl.DataFrame, share: pl.Series | None = None) -> tuple[pl.DataFrame, pl.Series]:
    """Return one row per 802.11 record (fields renamed, airtime, the station/AP it concerns; MAC
    addresses as codes) and the addresses the codes index (`share`: the records' share_ns, if known)."""
    df = _filled(packets, NEEDS)
    air = (airtime(df).get_column("share_ns") if share is None else share).fill_null(0)
    # MAC addresses as integer codes inside the module (a quarter of the strings' memory on millions
    # of frames); sorted, so ordering by code is ordering by address.  Tables get the strings back.
    macs = _mac_codes(df, ("wlan_ta", "wlan_ra", "wlan_bssid"))
    mac_enum = pl.Enum(macs)
    group = pl.Series(macs.str.slice(1, 1).is_in(list("13579bdfBDF")).arg_true(), dtype=pl.UInt32)

    def code(c: str) -> pl.Expr:
        return pl.col(c).cast(mac_enum).to_physical().cast(pl.UInt32)

    d = df.select(
        "frame", "ts_ns",
        # A decoding error past the MAC header (an IP header cut by a fragment) leaves the 802.11
        # fields good; one inside it leaves them null.  Only a bad FCS makes present fields suspect.
        pl.col("fcs_bad").fill_null(False).alias("bad"),
        pl.col("wlan_type").cast(pl.Int32).alias("type"), pl.col("wlan_subtype").cast(pl.Int32).alias("sub"),
        code("wlan_ta").alias("ta"), code("wlan_ra").alias("ra"), code("wlan_bssid").alias("bssid_f"),
        pl.col("wlan_to_ds").fill_null(False).alias("to_ds"), pl.col("wlan_from_ds").fill_null(False).alias("from_ds"),
        pl.col("wlan_retry").fill_null(False).alias("retry"), pl.col("wlan_seq").cast(pl.Int32).alias("seq"),
        pl.col("wlan_frag").cast(pl.Int32).alias("frag"), pl.col("wlan_tid").cast(pl.Int32).alias("tid"),
        pl.col("phy_rate_mbps").cast(pl.Float64).alias("rate"),
        pl.col("signal_dbm").cast(pl.Float64).alias("signal"), pl.col("noise_dbm").cast(pl.Float64).alias("noise"),
        "ampdu_ref", pl.col("wlan_ba_ssn").cast(pl.Int32).alias("ba_ssn"), pl.col("wlan_ba_bitmap").alias("ba_bm"),
        pl.col("wlan_reason").alias("reason"), pl.col("wlan_status").alias("status"),
    ).with_columns(air.alias("air_ns")).with_row_index("_i")
    del air
    d = d.filter(pl.col("type").is_not_null())
    # One PPDU per record, or per run of records with the same A-MPDU reference.
    new_ppdu = pl.col("ampdu_ref").is_null() | (pl.col("ampdu_ref") != pl.col("ampdu_ref").shift(1)).fill_null(True)
    d = d.with_columns(new_ppdu.cum_sum().alias("ppdu"))
    good = d.filter(~pl.col("bad")).select("type", "sub", "ta", "ra", "bssid_f", "to_ds", "from_ds")
    aps = pl.concat([
        good.filter((pl.col("type") == 0) & pl.col("sub").is_in([5, 8]) & (pl.col("ta") == pl.col("bssid_f")))
        .select(pl.col("ta").alias("a")),
        good.filter((pl.col("type") == 2) & pl.col("from_ds") & ~pl.col("to_ds")).select(pl.col("ta").alias("a")),
        good.filter((pl.col("type") == 2) & pl.col("to_ds") & ~pl.col("from_ds")).select(pl.col("ra").alias("a")),
    ]).filter(_unicast("a", group)).unique().get_column("a")
    del good
    # The transmitter of an ACK/CTS: the RA of the record it answers (the one just before, sent by its RA;
    # for a CTS, an RTS); a CTS-to-self's is its own RA.
    cts_self = (pl.col("type") == 1) & (pl.col("sub") == 12) & ~cts_answers_rts()
    eff_ta = (pl.when(cts_self).then(pl.col("ra"))
              .when(pl.col("ta").is_null() & (pl.col("type") == 1) & (pl.col("ra") == pl.col("ta").shift(1))
                    & ~pl.col("bad").shift(1).fill_null(True))
              .then(pl.col("ra").shift(1)).otherwise(pl.col("ta")))
    # the DS bits served only to find the APs
    d = d.with_columns(eff_ta.alias("ta_e"), cts_self.alias("cts_self")).drop("to_ds", "from_ds")
    ta_ap, ra_ap = pl.col("ta_e").is_in(aps.implode()), pl.col("ra").is_in(aps.implode())
    down = ta_ap & ~ra_ap & _unicast("ra", group)
    up = ra_ap & ~ta_ap & _unicast("ta_e", group)
    d = d.with_columns(
        pl.when(down).then(pl.col("ra")).when(up).then(pl.col("ta_e")).alias("station"),
        pl.when(down).then(pl.col("ta_e")).when(up).then(pl.col("ra")).alias("ap"),
        pl.when(down).then(pl.lit("down")).when(up).then(pl.lit("up")).alias("direction"))
    # A bad-FCS frame counts only if its station is one that good frames show.
    stations = d.filter(~pl.col("bad") & pl.col("station").is_not_null()).get_column("station").unique()
    d = d.with_columns(pl.when(pl.col("station").is_in(stations.implode())).then(pl.col("station")).alias("station"))
    return d.with_columns(pl.when(pl.col("station").is_not_null()).then(pl.col("ap")).alias("ap"),
                          pl.when(pl.col("station").is_not_null()).then(pl.col("direction")).alias("direction")
                          ).drop("ta_e"), macs


def _with_bss(d: pl.DataFrame) -> pl.DataFrame:
    """Return `_prepare`d records with ``bss``: the BSS (AP code) whose station row counts the record, null
    for records concerning no station (module docstring, "Several BSSs")."""
    member = (~pl.col("bad") & pl.col("station").is_not_null()
              & ((pl.col("type") == 2) | ((pl.col("type") == 0) & pl.col("sub").is_in(list(MGMT_EVENTS)))))
    who = pl.coalesce("station", pl.when(pl.col("cts_self") & ~pl.col("bad")).then(pl.col("ra")))
    # probe responses and other management frames say nothing of the BSS it is in: counted where it is then
    scan = (pl.col("type") == 0) & ~pl.col("sub").is_in(list(MGMT_EVENTS))
    own = d.select("_i", "ts_ns", "ap", who.alias("who"), member.alias("member"), scan.alias("scan")).filter(
        pl.col("who").is_not_null())
    seen = own.filter(pl.col("member")).select(pl.col("ts_ns").alias("m_ts"), "who", pl.col("ap").alias("m_ap"))
    pairs = seen.select("who", pl.col("m_ap").alias("ap"), pl.lit(True).alias("in_bss")).unique()
    own = own.join(pairs, on=["who", "ap"], how="left").with_columns(
        pl.when(~pl.col("scan")).then(pl.col("in_bss")).alias("in_bss"))
    bss = own.filter(pl.col("in_bss").is_not_null()).select("_i", pl.col("ap").alias("bss"))
    rest = own.filter(pl.col("in_bss").is_null()).sort("ts_ns")
    if rest.height:
        bss = pl.concat([bss, _borrowed_bss(own, rest, seen.sort("m_ts"))])
    return d.join(bss, on="_i", how="left", maintain_order="left")


def _borrowed_bss(own: pl.DataFrame, rest: pl.DataFrame, seen: pl.DataFrame) -> pl.DataFrame:
    """Return {_i, bss} of the records `rest` whose AP is no BSS of their station: the BSS of its nearest
    earlier member record (`seen`), else the next one, else the AP of most of its records (`own`)."""
    near = [rest.join_asof(seen, left_on="ts_ns", right_on="m_ts", by="who", strategy=how,
                           check_sortedness=False).get_column("m_ap").alias(how) for how in ("backward", "forward")]
    # ties broken by the lowest address, so that the tables do not depend on hashing order
    most = (own.filter(pl.col("ap").is_not_null()).group_by("who", "ap").len()
            .sort(["who", "len", "ap"], descending=[False, True, False]).unique("who", keep="first")
            .select("who", pl.col("ap").alias("most")))
    return (rest.with_columns(*near).join(most, on="who", how="left")
            .select("_i", pl.coalesce("backward", "forward", "most").cast(pl.UInt32).alias("bss")))


_NEXT = {"type": "r_type", "sub": "r_sub", "ra": "r_ra", "ts_ns": "r_ts", "bad": "r_bad"}


def _after_ppdu(d: pl.DataFrame, x: pl.DataFrame) -> pl.DataFrame:
    """Return `x` (rows with a ``ppdu`` of `d`) with ppdu_end, the last time of its PPDU, and the type, subtype,
    RA, time and FCS verdict of the first record of the next PPDU (r_type, r_sub, r_ra, r_ts, r_bad)."""
    p = d.get_column("ppdu")
    if d.height and not p.null_count() and not d.get_column("ts_ns").null_count() and p[0] == 1 \
            and bool(p.diff().drop_nulls().is_in([0, 1]).all()):
        # `_prepare` numbers the PPDUs 1, 2, ... in record order: each is a run, found by its start
        starts = np.flatnonzero(np.diff(p.to_numpy(), prepend=0))
        at = x.get_column("ppdu").cast(pl.Int64).to_numpy()
        nxt = pl.Series(np.where(at < len(starts), starts[np.minimum(at, len(starts) - 1)], -1)).to_frame("_n") \
            .select(pl.when(pl.col("_n") >= 0).then(pl.col("_n"))).to_series()
        end = np.maximum.reduceat(d.get_column("ts_ns").to_numpy(), starts)[at - 1]
        return x.with_columns(pl.Series("ppdu_end", end, d.schema["ts_ns"]),
                              *(d.get_column(c).gather(nxt).alias(a) for c, a in _NEXT.items()))
    ends = d.group_by("ppdu").agg(pl.col("ts_ns").max().alias("ppdu_end"))
    first = d.select("ppdu", *_NEXT).group_by("ppdu").agg(pl.all().first()).select(
        (pl.col("ppdu") - 1).alias("ppdu"), *(pl.col(c).alias(a) for c, a in _NEXT.items()))
    return x.join(ends, on="ppdu", how="left").join(first, on="ppdu", how="left")


def _confirmed(d: pl.DataFrame, data: pl.DataFrame) -> pl.Series:
    """Return, per row of `data` (good data frames of `d`), whether an ACK or a Block Ack confirmed it."""
    # ACK: the first record after the transmission's PPDU.
    x = _after_ppdu(d, data.select("_i", "ppdu", "ta", "ra", "seq"))
    ack = ((pl.col("r_type") == 1) & (pl.col("r_sub") == 13) & ~pl.col("r_bad") & (pl.col("r_ra") == pl.col("ta"))
           & ((pl.col("r_ts") - pl.col("ppdu_end")) <= ACK_WINDOW_NS)).fill_null(False)
    x = x.with_columns(ack.alias("ack"))
    # Block Ack: the first one from the RA to the TA after the PPDU, within BA_WINDOW_NS, bit set.
    ba = (d.filter(~pl.col("bad") & (pl.col("type") == 1) & (pl.col("sub") == 9) & pl.col("ba_ssn").is_not_null())
          .select(pl.col("ts_ns").alias("b_ts"), pl.col("ta").alias("ra"), pl.col("ra").alias("ta"), "ba_ssn", "ba_bm")
          .sort("b_ts"))
    if ba.height:
        x = x.sort("ppdu_end").join_asof(ba, left_on="ppdu_end", right_on="b_ts", by=["ta", "ra"],
                                         strategy="forward", tolerance=BA_WINDOW_NS, check_sortedness=False)
        off = (pl.col("seq") - pl.col("ba_ssn")) % 4096
        nbits = pl.col("ba_bm").str.len_chars() * 4
        byte = pl.col("ba_bm").str.slice(off // 8 * 2, 2).str.to_integer(base=16, strict=False)
        bit = ((byte.cast(pl.Int64) // (2 ** (off % 8)).cast(pl.Int64)) % 2 == 1)
        x = x.with_columns((pl.col("ack") | ((off < nbits) & bit).fill_null(False)).alias("ack"))
    return x.sort("_i").get_column("ack")


def _data(d: pl.DataFrame) -> pl.DataFrame:
    """Return the good data frames concerning a station, with MPDU identity (unwrapped seq) and confirmation."""
    data = d.filter(~pl.col("bad") & (pl.col("type") == 2) & pl.col("station").is_not_null()).select(
        "_i", "frame", "ts_ns", "ppdu", "ta", "ra", "tid", "seq", "frag", "retry", "rate", "air_ns", "station", "ap",
        "bss", "direction")
    space = ["ta", "ra", "tid"]
    step = ((pl.col("seq").cast(pl.Int64).diff().fill_null(0) + 2048) % 4096 - 2048)
    data = data.with_columns((pl.col("seq").first().cast(pl.Int64) + step.cum_sum()).over(space).alias("useq"))
    return data.with_columns(_confirmed(d, data).alias("acked"))


_MPDU = ["station", "bss", "direction", "ta", "ra", "tid", "useq", "frag"]
_NUL = np.iinfo(np.int64).min


def _numbered(data: pl.DataFrame, key: list[str]) -> tuple[np.ndarray, np.ndarray, int] | None:
    """Return per row of `data` the number of its `key` values (0..n-1 in order of first appearance), the row
    where they first appear, and n, by the compiled hash table (`_tcpk.hash_ids`) over a hash of the key
    columns; None without the kernel or when two distinct keys share a hash (a group-by decides then)."""
    if not tcpmod.KERNEL or data.height == 0:
        return None
    # every key column as int64 with null as a value no column holds (direction: 1 = up)
    cols = data.select(pl.col(c).cast(pl.Int64).fill_null(_NUL) if c != "direction" else
                       (pl.col(c) == "up").cast(pl.Int64).fill_null(_NUL) for c in key)
    ids, rep, n = tcpmod.hash_ids(cols.select(pl.struct(key).hash()).to_series().to_numpy())
    if not tcpmod.same_keys([cols.get_column(c).to_numpy() for c in key], rep):
        return None
    return ids, rep, n


def _failed(data: pl.DataFrame) -> pl.DataFrame:
    """Return one row per data MPDU: station, direction, attempts, and whether it failed after the retry limit."""
    num = _numbered(data, _MPDU)
    if num is None:
        out = data.group_by(_MPDU).agg(
            pl.len().alias("attempts"), pl.col("acked").any().alias("acked"),
            pl.col("retry").last().alias("last_retry"), pl.col("frame").last().alias("last_frame"),
            pl.col("retry").first().alias("first_retry"))
    else:
        # the group-by's aggregates from the MPDU numbers: counts, any, and the first and last row of each
        ids, rep, n = num
        first = rep == np.arange(len(rep))
        last = np.full(n, -1, np.int64)
        np.maximum.at(last, ids, np.arange(len(ids)))
        retry = data.get_column("retry").fill_null(False).to_numpy()
        acked = np.bincount(ids, data.get_column("acked").fill_null(False).to_numpy(), n) > 0
        out = data.filter(pl.Series(first)).select(_MPDU).with_columns(
            pl.Series("attempts", np.bincount(ids, minlength=n), pl.UInt32), pl.Series("acked", acked),
            pl.Series("last_retry", retry[last]), data.get_column("frame").gather(last).alias("last_frame"),
            pl.Series("first_retry", retry[first]))
    return out.with_columns((~pl.col("acked") & pl.col("last_retry") & (pl.col("attempts") >= FAIL_MIN_ATTEMPTS))
                            .alias("failed"))


def _msdu_fragments(data: pl.DataFrame) -> pl.DataFrame:
    """Return one row per data MSDU (an MPDU without its fragment number): station, bss, direction and n, its
    fragments (highest fragment number + 1; null when none is known)."""
    key = _MPDU[:-1]
    num = _numbered(data, key)
    if num is None:
        return data.group_by(key).agg((pl.col("frag").max() + 1).alias("n"))
    ids, rep, n = num
    # the highest fragment number of each: NaN (null) ignored, NaN where all are
    top = np.full(n, np.nan)
    np.fmax.at(top, ids, data.get_column("frag").cast(pl.Float64).fill_null(np.nan).to_numpy())
    frags = pl.Series("n", top, nan_to_null=True).cast(data.schema["frag"]) + 1
    return data.filter(pl.Series(rep == np.arange(len(rep)))).select(key).with_columns(frags)


def _stations(d: pl.DataFrame, data: pl.DataFrame, capture_file: str) -> pl.DataFrame:
    """Return one row per station and BSS it belongs to (module docstring), AP and station as codes."""
    key = ["station", "bss"]
    att = d.filter(pl.col("station").is_not_null()).select(
        "station", "bss", "ts_ns", "air_ns", "bad", "direction", "signal", "noise", "type", "sub")
    good = att.filter(~pl.col("bad"))
    total_air = int(d.get_column("air_ns").sum() or 0)
    down, up = pl.col("direction") == "down", pl.col("direction") == "up"
    base = att.group_by(key).agg(
        pl.col("ts_ns").min().alias("first_ts_ns"), pl.col("ts_ns").max().alias("last_ts_ns"),
        pl.col("air_ns").sum().alias("airtime_ns"),
        pl.col("bad").sum().cast(pl.Int64).alias("fcs_bad"))
    g = good.group_by(key).agg(
        down.sum().cast(pl.Int64).alias("frames_down"), up.sum().cast(pl.Int64).alias("frames_up"),
        pl.col("signal").filter(up).median().alias("signal_dbm_median"),
        pl.col("noise").filter(up).median().alias("noise_dbm_median"),
        ((pl.col("type") == 1) & (pl.col("sub") == 11)).sum().cast(pl.Int64).alias("rts"),
        ((pl.col("type") == 1) & (pl.col("sub") == 12)).sum().cast(pl.Int64).alias("cts"))
    del att, good
    # CTS-to-self frames a station sent: its RA is the station (the rows concern no station)
    c2s = (d.filter(pl.col("cts_self") & ~pl.col("bad")).group_by(pl.col("ra").alias("station"), "bss")
           .agg(pl.len().cast(pl.Int64).alias("cts_to_self")))
    dd = data.group_by(key).agg(
        pl.len().cast(pl.Int64).alias("data_frames"), pl.col("retry").sum().cast(pl.Int64).alias("retries"),
        pl.col("retry").filter(down).mean().alias("retry_fraction_down"),
        pl.col("retry").filter(up).mean().alias("retry_fraction_up"),
        pl.col("rate").filter(down).mean().alias("rate_mean_down_mbps"),
        pl.col("rate").filter(down).median().alias("rate_median_down_mbps"),
        pl.col("rate").filter(up).mean().alias("rate_mean_up_mbps"),
        pl.col("rate").filter(up).median().alias("rate_median_up_mbps"),
        pl.col("air_ns").sum().alias("data_airtime_ns"))
    single = (pl.col("attempts") == 1) & ~pl.col("first_retry")
    mp = _failed(data).group_by(key).agg(
        pl.len().cast(pl.Int64).alias("data_mpdus"), pl.col("failed").sum().cast(pl.Int64).alias("failed_mpdus"),
        pl.col("failed").filter(pl.col("direction") == "down").sum().cast(pl.Int64).alias("failed_mpdus_down"),
        pl.col("first_retry").sum().cast(pl.Int64).alias("unseen_tx_min"),
        (~pl.col("acked")).filter(single).mean().alias("ack_miss_fraction"))
    msdu = (_msdu_fragments(data)
            .group_by(key).agg(pl.col("n").filter(pl.col("direction") == "down").mean()
                               .alias("fragments_per_msdu_down"),
                               pl.col("n").filter(pl.col("direction") == "up").mean()
                               .alias("fragments_per_msdu_up")))
    out = base
    for t in (g, dd, mp, msdu, c2s):
        out = out.join(t, on=key, how="left")
    zero = ["frames_down", "frames_up", "data_frames", "retries", "data_mpdus", "failed_mpdus", "failed_mpdus_down",
            "unseen_tx_min", "rts", "cts", "cts_to_self", "data_airtime_ns"]
    out = out.with_columns(pl.col(c).fill_null(0) for c in zero)
    data_total = out.get_column("data_airtime_ns").sum()
    return out.with_columns(
        pl.lit(capture_file).alias("capture_file"),
        _fraction(pl.col("retries"), pl.col("data_frames")).alias("retry_fraction"),
        (pl.col("airtime_ns") / total_air if total_air else pl.lit(None, pl.Float64)).alias("airtime_share"),
        (pl.col("data_airtime_ns") / data_total if data_total else pl.lit(None, pl.Float64))
        .alias("data_airtime_share"),
        _fraction(pl.col("fcs_bad"), pl.col("frames_down") + pl.col("frames_up") + pl.col("fcs_bad"))
        .alias("fcs_bad_rate"),
        _fraction(pl.col("rts"), pl.col("data_frames")).alias("rts_ratio"),
    ).rename({"bss": "bssid"}).sort("station", "first_ts_ns", "bssid")


def _fraction(num: pl.Expr, den: pl.Expr) -> pl.Expr:
    """Return num / den, null where den is 0 or null (a fraction without a denominator is unknown, not NaN)."""
    return pl.when(den > 0).then(num / den)


def _series(d: pl.DataFrame, capture_file: str, bin_ns: int) -> pl.DataFrame:
    d = d.select((pl.col("ts_ns") // bin_ns * bin_ns).alias("bin_start_ns"), "ts_ns", "station", "bss", "air_ns", "bad",
                 "type", "direction", "rate", "retry", "signal", "noise")
    total = d.group_by("bin_start_ns").agg(pl.col("air_ns").sum().alias("_all"))
    att = d.filter(pl.col("station").is_not_null())
    ok = ~pl.col("bad")
    is_data = ok & (pl.col("type") == 2)
    up = ok & (pl.col("direction") == "up")
    s = att.group_by("station", "bin_start_ns").agg(
        ok.sum().cast(pl.Int64).alias("frames"),
        is_data.sum().cast(pl.Int64).alias("data_frames"),
        pl.col("rate").filter(is_data & (pl.col("direction") == "down")).mean().alias("phy_rate_mbps"),
        _fraction(pl.col("retry").filter(is_data).sum(), is_data.sum()).alias("retry_fraction"),
        pl.col("air_ns").sum().alias("airtime_ns"),
        pl.col("signal").filter(up).median().alias("signal_dbm"),
        pl.col("noise").filter(up).median().alias("noise_dbm"),
        pl.col("bad").sum().cast(pl.Int64).alias("fcs_bad"))
    s = s.join(total, on="bin_start_ns", how="left").join(_bin_bss(att), on=["station", "bin_start_ns"], how="left")
    s = s.with_columns(
        pl.when(pl.col("_all") > 0).then(pl.col("airtime_ns") / pl.col("_all")).alias("airtime_share"),
        pl.lit(capture_file).alias("capture_file"))
    return s.drop("_all").sort("station", "bin_start_ns")


def _bin_bss(att: pl.DataFrame) -> pl.DataFrame:
    """Return {station, bin_start_ns, bssid}: the BSS of most of the station's good data frames in the bin
    (of most of its good frames without data), ties going to the BSS of the later frame."""
    ok = ~pl.col("bad")
    per = att.filter(ok).group_by("station", "bin_start_ns", "bss").agg(
        (pl.col("type") == 2).sum().alias("_data"), pl.len().alias("_n"), pl.col("ts_ns").max().alias("_last"))
    return (per.sort(["station", "bin_start_ns", "_data", "_n", "_last"], descending=[False, False, True, True, True])
            .unique(["station", "bin_start_ns"], keep="first").select("station", "bin_start_ns",
                                                                       pl.col("bss").alias("bssid")))


def _rate_changes(d: pl.DataFrame, data: pl.DataFrame, capture_file: str) -> pl.DataFrame:
    # First transmissions, one per PPDU (an A-MPDU's subframes share one rate).
    f = data.filter(~pl.col("retry") & pl.col("rate").is_not_null()).unique("ppdu", keep="first", maintain_order=True)
    grp = ["station", "direction"]
    runs = (f.with_columns((pl.col("rate") != pl.col("rate").shift(1)).fill_null(True).cum_sum().over(grp).alias("run"))
            .group_by(*grp, "run").agg(pl.col("rate").first(), pl.col("ts_ns").first(), pl.col("frame").first(),
                                       pl.len().cast(pl.Int64).alias("ppdus"))
            .filter(pl.col("ppdus") >= MIN_RUN).sort(*grp, "run"))
    # Adjacent runs left at the same rate (a probe between them was dropped) are one run.
    runs = runs.with_columns(
        (pl.col("rate") != pl.col("rate").shift(1)).fill_null(True).cum_sum().over(grp).alias("held"))
    held = runs.group_by(*grp, "held").agg(pl.col("rate").first(), pl.col("ts_ns").first(), pl.col("frame").first(),
                                           pl.col("ppdus").sum()).sort(*grp, "held")
    ch = held.with_columns(pl.col("rate").shift(1).over(grp).alias("from_mbps")) \
        .filter(pl.col("from_mbps").is_not_null())
    return ch.select(pl.lit(capture_file).alias("capture_file"), "station", "ts_ns", "frame", "direction",
                     "from_mbps", pl.col("rate").alias("to_mbps"), "ppdus").sort("ts_ns")


def _mgmt(d: pl.DataFrame, data: pl.DataFrame, capture_file: str) -> pl.DataFrame:
    m = d.filter(~pl.col("bad") & (pl.col("type") == 0) & pl.col("sub").is_in(list(MGMT_EVENTS)))
    from_bss = pl.col("ta") == pl.col("bssid_f")
    ev = m.select(
        "frame", "ts_ns",
        pl.when(from_bss).then(pl.col("ra")).otherwise(pl.col("ta")).alias("station"),
        pl.col("bssid_f").alias("bssid"),
        pl.when(from_bss).then(pl.lit("down")).when(pl.col("ra") == pl.col("bssid_f")).then(pl.lit("up"))
        .alias("direction"),
        pl.col("sub").replace_strict(MGMT_EVENTS, return_dtype=pl.String).alias("event"),
        pl.when(pl.col("sub").is_in([10, 12])).then(pl.col("reason")).alias("reason"),
        pl.when(pl.col("sub").is_in([1, 3, 11])).then(pl.col("status")).alias("status"))
    # the data frame just before a station's first with a new AP is its last with the old one
    prev = [pl.col(c).shift(1).over("station").alias(a) for c, a in (("ap", "prev_bssid"), ("frame", "prev_frame"),
                                                                     ("ts_ns", "prev_ts"))]
    ch = (data.select("frame", "ts_ns", "station", "ap", "direction").with_columns(prev)
          .filter(pl.col("prev_bssid").is_not_null() & (pl.col("ap") != pl.col("prev_bssid")))
          .select("frame", "ts_ns", "station", pl.col("ap").alias("bssid"), "direction",
                  pl.lit("bssid_change").alias("event"), "prev_bssid", "prev_frame",
                  (pl.col("ts_ns") - pl.col("prev_ts")).alias("gap_ns")))
    out = pl.concat([ev, ch], how="diagonal_relaxed") if ch.height else ev
    return out.with_columns(pl.lit(capture_file).alias("capture_file")).sort("frame")


def station_tables(packets: pl.DataFrame, capture_file: str | None = None,
                   bin_ns: int = 100_000_000) -> dict[str, pl.DataFrame]:
    """Return the stations, station_series, rate_changes and mgmt_events tables of one air capture's packets."""
    if capture_file is None:
        capture_file = (packets.get_column("capture_file")[0]
                        if "capture_file" in packets.columns and packets.height else "")
    if packets.height == 0:
        return {name: conform(None, cols) for name, cols in TABLES.items()}
    return _tables_of(*_prepare(packets), capture_file, bin_ns)


def _tables_of(d: pl.DataFrame, macs: pl.Series, capture_file: str, bin_ns: int) -> dict[str, pl.DataFrame]:
    """Return `station_tables` from one air capture's `_prepare`d records and their MAC addresses."""
    d = _with_bss(d)
    data = _data(d)
    stations = _decode(_stations(d, data, capture_file), macs, ("station", "bssid"))
    rate_changes = _decode(_rate_changes(d, data, capture_file), macs, ("station",))
    mgmt = _decode(_mgmt(d, data, capture_file), macs, ("station", "bssid", "prev_bssid"))
    # the data frames are no longer needed: free them before the series' working table
    del data
    series = _decode(_series(d, capture_file, bin_ns), macs, ("station", "bssid"))
    return {
        "stations": conform(stations, STATIONS),
        "station_series": conform(series, STATION_SERIES),
        "rate_changes": conform(rate_changes, RATE_CHANGES),
        "mgmt_events": conform(mgmt, MGMT),
    }


def build(tl: Timeline) -> dict[str, pl.DataFrame]:
    """Return every station table over the timeline's air captures (ts_ns on the reference clock)."""
    parts: dict[str, list[pl.DataFrame]] = {name: [] for name in TABLES}
    for e in tl.entries("air"):
        # only the columns `_prepare` reads, and the packet table lives only while it reads them
        if tl.packets(e, columns=["frame"]).height == 0:
            tabs = station_tables(tl.packets(e, columns=list(NEEDS)), e.file, tl.bin_ns)
        else:
            tabs = _tables_of(*_prepare(tl.packets(e, columns=list(NEEDS)), capture_airtime(tl, e)["share_ns"]),
                              e.file, tl.bin_ns)
        for name, df in tabs.items():
            parts[name].append(df)
    return {name: (pl.concat(parts[name]) if parts[name] else conform(None, cols)) for name, cols in TABLES.items()}
