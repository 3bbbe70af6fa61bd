"""How long each frame held the air: MPDU length from the capture, PPDU duration from length, rate and PHY.

One place computes airtime for the clock alignment (`xlayer.timeline.match`), the AP queue join and the
per-station metrics.  Per frame:

* MPDU length on the air (802.11 header to FCS): the record's wire length minus the radio header,
  plus the 4-byte FCS when the capture dropped it, minus the radiotap data padding.  The 802.11 frame
  starts at the radiotap header's it_len, which may run past the end of the fields its presence words
  name (drivers pad the header: AirPcap's 0x0000588e has fields up to byte 20 and it_len 24), and may
  differ between records of one layout.  Radiotap records: the header length is the record's own
  it_len (the packet column ``rt_len``), exactly.  Records without it (other radio headers; packet
  tables written before ``rt_len`` existed): the header length of each (link type, layout) is learnt
  over the capture from frames whose MPDU length is fixed (ACK and CTS 14 bytes; RTS, PS-Poll and
  CF-End 20; Null and QoS Null data: their MAC header + FCS), as the median of wire length minus that
  length; for radiotap it is never less than the end of the fields (which it is where no such frame
  was captured).  Other radio headers without such frames: learnt from unprotected data frames, whose
  MPDU length follows from their IP length, else the link type's usual length.
* PSDU length: the MPDU, or for an A-MPDU all its subframes seen (4-byte delimiter each, padded to
  4 bytes but the last, as 802.11-2020 9.7.1 and ns-3 do for HT).  VHT and HE PPDUs always carry an
  A-MPDU (a lone MPDU is an S-MPDU: delimiter + MPDU) and their TXTIME counts the A-MPDU up to the
  EOF padding (APEP_LENGTH, 10.12.7), in which every subframe, the last too, is padded to 4 bytes.
  One A-MPDU (the records sharing a radiotap A-MPDU reference number) is one PPDU: one preamble,
  data symbols for all its subframes, its duration shared among its MPDUs by their bytes.  The Block
  Ack that answers it is a record of its own (a control frame at a non-HT rate) with its own airtime.
* PPDU duration (IEEE 802.11-2020 TXTIME formulas; `ppdu_duration_ns`):
  DSSS/HR-DSSS (15.3.7, 16.3.4): 192 µs long or 96 µs short PLCP preamble+header, then
  ceil(8·L / rate) µs.  OFDM/ERP-OFDM (17.4.3, 18.5.2): 16 µs preamble + 4 µs SIGNAL +
  4 µs · ceil((16 + 8·L + 6) / N_DBPS), N_DBPS = 4 µs · rate; + 6 µs signal extension at 2.4 GHz.
  HT mixed format (19.4.3): 16 + 4 (L-SIG) + 8 (HT-SIG) + 4 (HT-STF) + 4·N_LTF µs, then N_SYM
  symbols of 4 µs (3.6 µs short GI), N_SYM = ceil((16 + 8·L + 6·N_ES) / N_DBPS), N_DBPS = symbol
  time · rate, N_ES = ceil(rate / 320 Mbit/s) (long GI; 350 with the short GI: where the MCS tables
  step to two BCC encoders, as ns-3 reads them); + 6 µs signal extension at 2.4 GHz.
  VHT (21.4.3): 16 + 4 (L-SIG) + 8 (VHT-SIG-A) + 4 (VHT-STF) + 4·N_LTF + 4 (VHT-SIG-B) µs, then
  the same data part.  HE SU (27.4.3): 20 + 4 (RL-SIG) + 8 (HE-SIG-A) + 4 (HE-STF) µs +
  N_LTF · (HE-LTF + GI), with the 2x HE-LTF (6.4 µs) at GI 0.8 and 1.6 µs and the 4x (12.8 µs) at
  3.2 µs (the SU combinations 27.3.11.10 allows; radiotap does not always say which), then N_SYM
  symbols of 12.8 µs + GI, N_ES = 1, no packet extension (nominal padding 0 µs), BCC.
  Short GI (HT, VHT): the standard's TXTIME rounds the data part up to whole 4 µs symbols (the
  L-SIG length); the signal itself ends after N_SYM · 3.6 µs, which is what the air carries and
  what this module returns (`lsig_rounding` gives the TXTIME).  ns-3 3.44 differs from the standard
  in two places, and its traced durations with it: no VHT-SIG-B in VHT SU PPDUs (4 µs shorter) and
  every HE-LTF 8 µs long whatever the GI.

Rates come from the parsers' ``phy_rate_mbps`` (with ``phy``, ``nss``, ``sgi``, ``he_gi_us``); a frame
without a rate or a length has no airtime (``known`` false).  N_DBPS is rate × symbol time, except for
VHT and HE frames with their MCS and bandwidth, whose N_DBPS comes from the MCS tables (N_SD · N_BPSCS
· R · N_SS): their rates are rounded to 0.1 Mbit/s, which can miss N_DBPS by a bit.
"""
from __future__ import annotations

import numpy as np
import polars as pl

__all__ = ["COLUMNS", "airtime", "airtime_ns", "mpdu_bytes", "ppdu_duration_ns", "radio_header_len", "table_ndbps"]

# the packet columns `airtime` reads (a caller may read only these of a capture; absent ones take defaults)
COLUMNS: tuple[str, ...] = (
    "wirelen", "linktype", "rt_layout", "rt_len", "rt_flags", "phy_rate_mbps", "phy", "nss", "sgi", "he_gi_us",
    "mcs", "bw_mhz", "freq_mhz", "chan_flags", "ampdu_ref", "ampdu_flags", "wlan_type", "wlan_subtype", "wlan_to_ds", "wlan_from_ds",
    "wlan_order", "wlan_amsdu", "wlan_seq", "ip_len", "fcs_bad")

_NLTF = np.array([1, 1, 2, 4, 4, 6, 6, 8, 8], dtype=np.float64)   # HT/VHT/HE LTFs for NSS 0..8
_FIXED_HEADER = {105: 0, 119: 144, 163: 64}                       # raw 802.11, Prism, AVS (usual length)
_CTL_FIXED = {12: 14, 13: 14, 10: 20, 11: 20, 14: 20, 15: 20}   # control subtype -> MPDU bytes, FCS included
_DSSS_RATES = (2, 4, 11, 22)                                      # 2 x (1, 2, 5.5, 11) Mbit/s
_SLICE = 1 << 17                                                  # records per pass of the TXTIME formulas
_PPDU_SLICE = 200_000                                             # records per pass of airtime (whole PPDUs)
_AIRTIME_SCHEMA = {"mpdu_bytes": pl.Int64, "ppdu_bytes": pl.Int64, "ppdu_ns": pl.Int64, "share_ns": pl.Int64,
                   "upto_ns": pl.Int64}


def radio_header_len(layout: str | None) -> int | None:
    """Return the radiotap header length a presence-word layout implies (None if it cannot tell)."""
    if not layout:
        return None
    try:
        from parsers.layers.radiotap import _layout

        words = tuple(int(w, 16) for w in layout.split(",") if w)
        if not words:
            return None
        lay = _layout(words, ())
    except Exception:  # noqa: BLE001 - a layout we cannot read just gives no length
        return None
    if lay.defer or lay.need_skip is not None:
        return None
    return int(lay.end)


def _mac_header_len() -> pl.Expr:
    qos = (pl.col("wlan_type") == 2) & ((pl.col("wlan_subtype").cast(pl.Int32) & 8) != 0)
    return (24 + 6 * (pl.col("wlan_to_ds") & pl.col("wlan_from_ds")).fill_null(False).cast(pl.Int64)
            + 2 * qos.fill_null(False).cast(pl.Int64)
            + 4 * (qos & pl.col("wlan_order")).fill_null(False).cast(pl.Int64))


def mpdu_bytes(df: pl.DataFrame) -> pl.Series:
    """Return each record's MPDU length on the air in bytes, FCS included (null where unknown)."""
    if df.height == 0:
        return pl.Series("mpdu_bytes", [], pl.Int64)
    return _mpdu_with(df, _radio_headers(df))


def _mpdu_inputs(df: pl.DataFrame) -> pl.LazyFrame:
    """Return per record: wire length, link type, radiotap layout, radiotap it_len (`rt`, null where
    unknown), FCS flag, header pad, IP-estimated MPDU length and the MPDU length of frames whose length
    is fixed."""
    cols = set(df.columns)

    def col(name: str, default: object, dtype: pl.DataType) -> pl.Expr:
        return pl.col(name) if name in cols else pl.lit(default, dtype)

    fcs = (col("rt_flags", 0, pl.UInt8).fill_null(0).cast(pl.Int32) & 0x10) != 0
    pad = (col("rt_flags", 0, pl.UInt8).fill_null(0).cast(pl.Int32) & 0x20) != 0
    hdr = _mac_header_len()
    # Unprotected data frames decoded into IP: 802.11 header + LLC/SNAP + IP packet + FCS.
    est = (pl.when((pl.col("wlan_type") == 2) & pl.col("ip_len").is_not_null() & (pl.col("ip_len") > 0)
                   & ~col("wlan_amsdu", False, pl.Boolean).fill_null(False))
           .then(hdr + 8 + pl.col("ip_len").cast(pl.Int64) + 4))
    # Frames whose MPDU length (FCS included) the 802.11 standard fixes: they tell the radio header's
    # length exactly (good FCS only; Null data only outside A-MPDUs, whose records may keep subframe padding).
    ctl, sub = pl.col("wlan_type") == 1, pl.col("wlan_subtype").cast(pl.Int32)
    fixed = (pl.when(col("fcs_bad", False, pl.Boolean).fill_null(False)).then(None)
             .when(ctl & sub.is_in(list(_CTL_FIXED))).then(sub.replace_strict(_CTL_FIXED, default=None))
             .when((pl.col("wlan_type") == 2) & sub.is_in([4, 12])
                   & col("ampdu_ref", None, pl.UInt32).is_null()).then(hdr + 4))
    return df.lazy().select(
        pl.col("wirelen").cast(pl.Int64).alias("wirelen"),
        col("linktype", 127, pl.UInt16).fill_null(127).cast(pl.Int64).alias("lt"),
        col("rt_layout", "", pl.String).fill_null("").alias("lay"),
        # a column filled in as null by a reader of older tables may have dtype Null: cast it
        pl.when(col("linktype", 127, pl.UInt16).fill_null(127) == 127)
        .then(col("rt_len", None, pl.UInt16).cast(pl.Int64)).alias("rt"),
        fcs.alias("fcs"),
        # radiotap Flags 0x20: the driver padded the 802.11 header to 4 bytes (not sent on the air)
        pl.when(pad & (pl.col("wlan_type") == 2)).then((4 - hdr % 4) % 4).otherwise(0).alias("pad"),
        est.alias("est"),
        fixed.cast(pl.Int64).alias("fixed"),
    )


def _header_counts(d: pl.LazyFrame, known: str) -> pl.DataFrame:
    """Return per (link type, layout, radio header length v) how many records whose MPDU length the
    column `known` gives imply that header length."""
    return (d.filter(pl.col(known).is_not_null())
            .group_by("lt", "lay", (pl.col("wirelen") - pl.col(known) - pl.col("pad")
                                    + pl.when(pl.col("fcs")).then(0).otherwise(4)).alias("v"))
            .agg(pl.len().cast(pl.Int64).alias("n")).collect())


def _median(counts: list[pl.DataFrame], name: str) -> pl.DataFrame:
    """Return per (link type, layout) the median header length of summed `_header_counts`, as `name`."""
    grp = ["lt", "lay"]
    c = (pl.concat(counts).group_by(*grp, "v").agg(pl.col("n").sum()).sort(*grp, "v")
         .with_columns(pl.col("n").cum_sum().over(grp).alias("cum"), pl.col("n").sum().over(grp).alias("tot")))
    # the median: mean of the values at ranks (tot - 1) // 2 and tot // 2 (0-based), as polars' median
    return c.group_by(grp).agg(
        pl.col("v").filter(pl.col("cum") > (pl.col("tot") - 1) // 2).first().alias("v1"),
        pl.col("v").filter(pl.col("cum") > pl.col("tot") // 2).first().alias("v2"),
    ).select(*grp, ((pl.col("v1") + pl.col("v2")) / 2).round(0).cast(pl.Int64).alias(name))


def _radio_headers(df: pl.DataFrame) -> pl.DataFrame:
    """Return the radio header's length per (link type, layout), learnt over the records of `df` without
    an rt_len: radiotap from frames of fixed MPDU length (the median), never less than the end of the
    fields its presence words name (that end alone where no such frame is seen); other radio headers
    from frames whose MPDU length is known (median), else the link type's usual one."""
    # One pass over the whole capture in slices (the medians are learnt over all of it): per slice
    # the (link type, layout) keys and the count of each header length seen; the medians follow from
    # the summed counts, exactly as over all the records at once.
    keys, counts, fixed = [], [], []
    size = df.height
    for lo in range(0, max(size, 1), _PPDU_SLICE):
        # records with their own header length neither need a learnt one nor teach one
        d = _mpdu_inputs(df.slice(lo, _PPDU_SLICE)).filter(pl.col("rt").is_null())
        keys.append(d.select("lt", "lay").unique().collect())
        counts.append(_header_counts(d, "est"))
        fixed.append(_header_counts(d.filter(pl.col("lt") == 127), "fixed"))
    exact = [(lt, lay, radio_header_len(lay) if lt == 127 else _FIXED_HEADER.get(lt) if lt == 105 else None)
             for lt, lay in pl.concat(keys).unique().iter_rows()]
    hd = pl.DataFrame({"lt": [e[0] for e in exact], "lay": [e[1] for e in exact],
                       "h_exact": [e[2] for e in exact]},
                      schema={"lt": pl.Int64, "lay": pl.String, "h_exact": pl.Int64})
    learnt = _median(counts, "h_learnt")
    # radiotap: the 802.11 frame starts at it_len, at or past the end of the fields (padding)
    it_len = pl.when(pl.col("lt") == 127).then(pl.max_horizontal("h_exact", "h_fixed")).otherwise("h_exact")
    return (hd.join(learnt, on=["lt", "lay"], how="left")
            .join(_median(fixed, "h_fixed"), on=["lt", "lay"], how="left")
            .with_columns(pl.coalesce(it_len, "h_learnt",
                                      pl.col("lt").replace_strict(_FIXED_HEADER, default=None, return_dtype=pl.Int64))
                          .alias("h"))
            .select("lt", "lay", "h"))


def _mpdu_with(df: pl.DataFrame, hd: pl.DataFrame) -> pl.Series:
    """Return `mpdu_bytes` of `df`'s records: the radio header is the record's rt_len where it has one,
    else the length `_radio_headers` learnt for its (link type, layout)."""
    d = _mpdu_inputs(df).join(hd.lazy(), on=["lt", "lay"], how="left", maintain_order="left")
    out = d.select(
        (pl.col("wirelen") - pl.coalesce("rt", "h") - pl.col("pad") + pl.when(pl.col("fcs")).then(0).otherwise(4))
        .clip(lower_bound=10).alias("mpdu_bytes")).collect()
    return out.get_column("mpdu_bytes")


_VHT_NDBPS_20 = np.array([26, 52, 78, 104, 156, 208, 234, 260, 312, 1040 / 3])   # 1 SS, 52 data subcarriers
_VHT_NSD = {20: 52, 40: 108, 80: 234, 160: 468}
_HE_NSD = {20: 234, 40: 468, 80: 980, 160: 1960}
_HE_BITS_RATE = np.array([1 / 2, 1, 3 / 2, 2, 3, 4, 9 / 2, 5, 6, 20 / 3, 15 / 2, 25 / 3])   # N_BPSCS · R


def _names(phy: np.ndarray) -> np.ndarray:
    """Return the PHY names as a NumPy string array (converted only when not one already)."""
    phy = np.asarray(phy)
    return phy if phy.dtype.kind == "U" else phy.astype(str)


def _phy_names(phy: pl.Series) -> np.ndarray:
    """Return the PHY names of a column without nulls as a NumPy string array."""
    # through the few distinct names: converting a million Python strings costs five times as much
    names = phy.unique().sort()
    return np.array(names.to_list(), dtype=str)[names.search_sorted(phy).to_numpy()]


def table_ndbps(phy: np.ndarray, mcs: np.ndarray, nss: np.ndarray, bw_mhz: np.ndarray) -> np.ndarray:
    """Return N_DBPS of VHT and HE frames from their MCS, streams and bandwidth (NaN for others)."""
    phy = _names(phy)
    m = np.asarray(mcs, dtype=np.float64)
    n = np.asarray(nss, dtype=np.float64)
    bw = np.asarray(bw_mhz, dtype=np.float64)
    ok = np.isfinite(m) & np.isfinite(n) & np.isfinite(bw) & (n >= 1)
    mi = np.where(ok, m, 0).astype(np.int64)
    vht_sd = np.select([bw == w for w in _VHT_NSD], list(_VHT_NSD.values()), np.nan)
    he_sd = np.select([bw == w for w in _HE_NSD], list(_HE_NSD.values()), np.nan)
    vht = ok & (phy == "vht") & (mi <= 9)
    he = ok & (phy == "he") & (mi <= 11)
    out = np.full(len(phy), np.nan)
    out = np.where(vht, _VHT_NDBPS_20[np.clip(mi, 0, 9)] * vht_sd / 52.0 * n, out)
    return np.where(he, _HE_BITS_RATE[np.clip(mi, 0, 11)] * he_sd * n, out)


def ppdu_duration_ns(psdu_bytes: np.ndarray, rate_mbps: np.ndarray, phy: np.ndarray, nss: np.ndarray,
                     short_preamble: np.ndarray, sgi: np.ndarray, he_gi_us: np.ndarray,
                     band_2ghz: np.ndarray, *, lsig_rounding: bool = False,
                     ndbps: np.ndarray | None = None) -> np.ndarray:
    """Return the PPDU duration in ns of each (PSDU length, PHY parameters); NaN where unknown.

    For VHT and HE the PSDU length is APEP_LENGTH (the A-MPDU before its EOF padding).  Short GI:
    the data part ends after N_SYM · 3.6 µs, or with `lsig_rounding` at the standard's TXTIME (the
    data part rounded up to whole 4 µs symbols).  `ndbps`: N_DBPS where finite (`table_ndbps`),
    else rate × symbol time.
    """
    L = np.asarray(psdu_bytes, dtype=np.float64)
    rate = np.asarray(rate_mbps, dtype=np.float64)
    rate = np.where(np.isfinite(rate) & (rate > 0), rate, np.nan)
    phy = _names(phy)
    nltf = _NLTF[np.clip(np.asarray(nss, dtype=np.int64), 0, 8)]
    ht, vht, he = phy == "ht", phy == "vht", phy == "he"
    mimo = ht | vht
    short_gi = mimo & np.asarray(sgi, dtype=bool)
    dsss = ~(mimo | he) & np.isin(np.round(rate * 2), _DSSS_RATES)
    gi = np.where(np.isfinite(he_gi_us), he_gi_us, 0.8)
    tsym = np.where(he, 12.8 + gi, np.where(short_gi, 3.6, 4.0))
    from_rate = np.maximum(np.round(rate * tsym), 1.0)
    if ndbps is not None:
        given = np.asarray(ndbps, dtype=np.float64)
        from_rate = np.where(np.isfinite(given) & (given > 0), given, from_rate)
    ndbps = from_rate
    # BCC encoders: the HT/VHT MCS tables step to another one past about 320 Mbit/s (long GI) or
    # 350 (short GI); HE SU has one (27.3.12: N_ES 1 with BCC)
    nes = np.where(he, 1.0, np.maximum(1.0, np.ceil(np.round(rate, 3) / np.where(short_gi, 350.0, 320.0))))
    nsym = np.ceil((16.0 + 8.0 * L + 6.0 * nes) / ndbps)
    ofdm_us = nsym * tsym
    if lsig_rounding:
        ofdm_us = np.where(short_gi, 4.0 * np.ceil(np.round(ofdm_us / 4.0, 9)), ofdm_us)
    # HE-LTF: 2x (6.4 µs) with GI 0.8 or 1.6, 4x (12.8 µs) with GI 3.2
    he_ltf = np.where(gi > 2.0, 12.8, 6.4) + gi
    pre = np.where(ht, 32.0 + 4.0 * nltf,
                   np.where(vht, 36.0 + 4.0 * nltf,
                            np.where(he, 36.0 + nltf * he_ltf, 20.0)))
    ext = np.where(np.asarray(band_2ghz, dtype=bool) & ~he & ~vht, 6.0, 0.0)
    ofdm = pre + ofdm_us + ext
    dsss_us = np.where(np.asarray(short_preamble, dtype=bool) & (rate > 1.5), 96.0, 192.0) \
        + np.ceil(np.round(8.0 * L / rate, 6))
    us = np.where(dsss, dsss_us, ofdm)
    return np.where(np.isfinite(us) & np.isfinite(L), us * 1000.0, np.nan)


def airtime(df: pl.DataFrame) -> pl.DataFrame:
    """Return per record: mpdu_bytes, ppdu_bytes, ppdu_ns (whole PPDU, null if unknown), share_ns (this
    MPDU's byte share of its PPDU: sums over records count each PPDU once) and upto_ns (PPDU start to
    this MPDU's end, null where a missed later subframe makes it unknown)."""
    if df.height == 0:
        return pl.DataFrame(schema=_AIRTIME_SCHEMA)
    # The radio-header lengths are learnt over the whole capture (one cheap pass); the rest works on
    # one PPDU at a time, so slices cut between PPDUs give the same result in bounded memory.
    hd = _radio_headers(df)
    ref = df.get_column("ampdu_ref") if "ampdu_ref" in df.columns else None
    bounds = _ppdu_slices(ref, df.height, _PPDU_SLICE)
    if len(bounds) == 1:
        return _airtime_slice(df, _mpdu_with(df, hd))
    parts = []
    for lo, hi in bounds:
        part = df.slice(lo, hi - lo)
        parts.append(_airtime_slice(part, _mpdu_with(part, hd)))
    return pl.concat(parts, rechunk=True)


def _ppdu_slices(ref: pl.Series | None, n: int, size: int) -> list[tuple[int, int]]:
    """Return (start, end) record ranges of about `size` records, never cutting through an A-MPDU."""
    if n <= size:
        return [(0, n)]
    if ref is None:
        cuts = list(range(size, n, size))
    else:
        # Cut only before a record that no A-MPDU reference spans (one seen both before and at or
        # after it): every window over `ampdu_ref` then sees the same records in its slice as over all.
        span = (pl.DataFrame({"r": ref}).with_row_index("i").filter(pl.col("r").is_not_null())
                .group_by("r").agg(pl.col("i").min().alias("lo"), pl.col("i").max().alias("hi")))
        inside = np.zeros(n + 1, dtype=np.int64)
        np.add.at(inside, span.get_column("lo").to_numpy().astype(np.int64) + 1, 1)
        np.add.at(inside, span.get_column("hi").to_numpy().astype(np.int64) + 1, -1)
        starts = np.flatnonzero(np.cumsum(inside[:n]) == 0)
        idx = np.searchsorted(starts, np.arange(size, n, size))
        cuts = sorted({int(starts[i]) for i in idx if i < len(starts)} - {0})
    edges = [0, *cuts, n]
    return [(lo, hi) for lo, hi in zip(edges[:-1], edges[1:]) if hi > lo]


def _airtime_slice(df: pl.DataFrame, mpdu: pl.Series) -> pl.DataFrame:
    """Return `airtime` of records holding whole PPDUs, given their MPDU lengths."""
    cols = set(df.columns)

    def col(name: str, default: object, dtype: pl.DataType) -> pl.Expr:
        return (pl.col(name) if name in cols else pl.lit(default, dtype)).alias(name)

    d = df.select(
        col("ampdu_ref", None, pl.UInt32), col("ampdu_flags", None, pl.UInt16).cast(pl.Int32),
        col("wlan_seq", None, pl.UInt16).cast(pl.Int32),
        col("phy_rate_mbps", None, pl.Float64).cast(pl.Float64).alias("rate"),
        col("phy", "", pl.String).fill_null("").alias("phy"),
        col("nss", 1, pl.UInt8).cast(pl.Int64).fill_null(1).clip(1, 8).alias("nss"),
        col("mcs", None, pl.UInt8).cast(pl.Float64).alias("mcs"),
        col("bw_mhz", None, pl.UInt16).cast(pl.Float64).alias("bw_mhz"),
        ((col("rt_flags", 0, pl.UInt8).fill_null(0).cast(pl.Int32) & 0x02) != 0).alias("short"),
        col("sgi", False, pl.Boolean).fill_null(False).alias("sgi"),
        col("he_gi_us", None, pl.Float32).cast(pl.Float64).alias("gi"),
        (col("freq_mhz", None, pl.UInt16).cast(pl.Int32).is_between(2300, 2600)
         | (col("freq_mhz", None, pl.UInt16).is_null()
            & ((col("chan_flags", 0, pl.UInt16).fill_null(0).cast(pl.Int32) & 0x0080) != 0))).alias("g24"),
    ).with_columns(mpdu.alias("mpdu"))
    runs = _runs(d.get_column("ampdu_ref"))
    d = _per_ppdu(d) if runs is None else _per_ppdu_runs(d, runs)
    ppdu_b = d["ppdu_bytes"].cast(pl.Float64).fill_null(np.nan).to_numpy()
    upto_b = d["upto_bytes"].cast(pl.Float64).fill_null(np.nan).to_numpy()
    dur = np.empty(d.height, dtype=np.float64)
    upto = np.empty(d.height, dtype=np.float64)
    # The formulas work element by element: in slices, their temporaries (and the PHY names as Python
    # strings) stay small on millions of frames.
    for lo in range(0, d.height, _SLICE):
        p = d.slice(lo, _SLICE)
        # the PHY names converted from Python strings once, not by each of the three formulas
        phy = _phy_names(p["phy"])
        args = (p["rate"].to_numpy(), phy, p["nss"].to_numpy(), p["short"].to_numpy(),
                p["sgi"].to_numpy(), p["gi"].fill_null(np.nan).to_numpy(), p["g24"].fill_null(False).to_numpy())
        nd = table_ndbps(phy, p["mcs"].fill_null(np.nan).to_numpy(), p["nss"].to_numpy(),
                         p["bw_mhz"].fill_null(np.nan).to_numpy())
        hi = lo + p.height
        dur[lo:hi] = ppdu_duration_ns(ppdu_b[lo:hi], *args, ndbps=nd)
        upto[lo:hi] = ppdu_duration_ns(upto_b[lo:hi], *args, ndbps=nd)
        del p, args, phy
    upto = np.where(d["tail_ok"].to_numpy(), np.minimum(upto, dur), np.nan)
    share = dur * d["sub"].cast(pl.Float64).fill_null(np.nan).to_numpy() / ppdu_b
    return pl.DataFrame({
        "mpdu_bytes": d["mpdu"],
        "ppdu_bytes": d["ppdu_bytes"],
        "ppdu_ns": pl.Series(np.round(dur), dtype=pl.Float64, nan_to_null=True).cast(pl.Int64),
        "share_ns": pl.Series(np.round(share), dtype=pl.Float64, nan_to_null=True).cast(pl.Int64),
        "upto_ns": pl.Series(np.round(upto), dtype=pl.Float64, nan_to_null=True).cast(pl.Int64),
    }, schema=_AIRTIME_SCHEMA)


def _per_ppdu(d: pl.DataFrame) -> pl.DataFrame:
    """Return `d` with sub (PSDU bytes of the record's subframe), ppdu_bytes, upto_bytes and tail_ok,
    grouping the records of an A-MPDU by their reference number wherever they lie."""
    d = d.with_row_index("_i")
    sub = 4 + (pl.col("mpdu") + 3) // 4 * 4       # A-MPDU subframe: delimiter + MPDU padded to 4 bytes
    is_last = pl.col("_i") == pl.col("_i").max().over("ampdu_ref")
    # VHT and HE: always an A-MPDU (a lone MPDU as an S-MPDU), every subframe padded (APEP_LENGTH)
    vht_he = pl.col("phy").is_in(["vht", "he"])
    sub_bytes = pl.when(vht_he).then(sub).when(pl.col("ampdu_ref").is_null()).then(pl.col("mpdu")) \
        .when(is_last).then(4 + pl.col("mpdu")).otherwise(sub)
    d = d.with_columns(sub_bytes.alias("sub")).with_columns(
        pl.when(pl.col("ampdu_ref").is_not_null()).then(pl.col("sub").sum().over("ampdu_ref"))
        .otherwise(pl.col("sub")).alias("ppdu_bytes"),
        # bytes of the PPDU up to and including this subframe (record order is transmission order)
        pl.when(pl.col("ampdu_ref").is_not_null()).then(pl.col("sub").cum_sum().over("ampdu_ref", order_by="_i"))
        .otherwise(pl.col("sub")).alias("upto_bytes"))
    # Is everything sent after this subframe in its A-MPDU in the capture?  Only then is the time
    # from this MPDU's end to the PPDU's end known: a subframe the sniffer missed after it would
    # make its end look later than it was.  Evidence: the last subframe (radiotap flag 0x08, when
    # the driver says it knows the last one, 0x04) was seen, and sequence numbers run on by 1.
    nxt = pl.col("wlan_seq").shift(-1).over("ampdu_ref", order_by="_i")
    flags = pl.col("ampdu_flags").fill_null(0)
    bad = (pl.when(is_last).then(((flags & 0x04) != 0) & ((flags & 0x08) == 0))
           .otherwise(((nxt - pl.col("wlan_seq") + 4096) % 4096 != 1).fill_null(True)))
    d = d.with_columns(pl.when(pl.col("ampdu_ref").is_not_null())
                       .then(bad.cast(pl.Int32).cum_sum(reverse=True).over("ampdu_ref", order_by="_i") == 0)
                       .otherwise(True).alias("tail_ok"))
    return d


def _runs(ref: pl.Series) -> np.ndarray | None:
    """Return the first record of each A-MPDU (a run of records of one reference number; a record
    without one is a run alone), or None when a reference number's records are not all consecutive."""
    n = len(ref)
    null = ref.is_null().to_numpy()
    r = ref.fill_null(0).to_numpy()
    new = np.ones(n, dtype=bool)
    new[1:] = null[1:] | null[:-1] | (r[1:] != r[:-1])
    # a reference seen again after others (two radios in one file, a counter that wrapped) groups
    # records apart: only grouping by value (`_per_ppdu`) gives them one PPDU
    if np.count_nonzero(new & ~null) != ref.drop_nulls().n_unique():
        return None
    return np.flatnonzero(new)


def _per_ppdu_runs(d: pl.DataFrame, starts: np.ndarray) -> pl.DataFrame:
    """Return `_per_ppdu(d)` where every A-MPDU's records are consecutive (`_runs`), by sums over runs."""
    n = d.height
    ends = np.append(starts[1:], n)
    length = ends - starts
    last = np.zeros(n, dtype=bool)
    last[ends - 1] = True
    null = d.get_column("ampdu_ref").is_null().to_numpy()
    mpdu = d.get_column("mpdu")
    unknown = mpdu.is_null().to_numpy()
    m = mpdu.fill_null(0).cast(pl.Int64).to_numpy()
    padded = 4 + (m + 3) // 4 * 4
    vht_he = d.get_column("phy").is_in(["vht", "he"]).fill_null(False).to_numpy()
    sub = np.where(vht_he, padded, np.where(null, m, np.where(last, 4 + m, padded)))
    sub = np.where(unknown, 0, sub)          # a subframe of unknown length adds nothing to its PPDU's sums
    total = np.add.reduceat(sub, starts)
    cum = np.cumsum(sub)
    upto = cum - np.repeat(cum[starts] - sub[starts], length)
    ppdu = np.where(null, sub, np.repeat(total, length))
    seq = d.get_column("wlan_seq")
    q = seq.fill_null(0).cast(pl.Int64).to_numpy()
    q_known = ~seq.is_null().to_numpy()
    follows = np.zeros(n, dtype=bool)                   # the next record's sequence number is this one's + 1
    follows[:-1] = ((q[1:] - q[:-1] + 4096) % 4096 == 1) & q_known[1:] & q_known[:-1]
    flags = d.get_column("ampdu_flags").fill_null(0).cast(pl.Int64).to_numpy()
    bad = np.where(last, ((flags & 0x04) != 0) & ((flags & 0x08) == 0), ~follows)
    cum_bad = np.cumsum(bad)
    bad_from_here = np.repeat(cum_bad[ends - 1], length) - cum_bad + bad
    return d.with_columns(_ints("sub", sub, unknown), _ints("ppdu_bytes", ppdu, null & unknown),
                          _ints("upto_bytes", upto, unknown), pl.Series("tail_ok", null | (bad_from_here == 0)))


def _ints(name: str, values: np.ndarray, missing: np.ndarray) -> pl.Series:
    """Return `values` as an Int64 column, null where `missing`."""
    s = pl.Series(name, values, dtype=pl.Int64)
    return s.set(pl.Series(missing), None) if missing.any() else s


def airtime_ns(df: pl.DataFrame) -> pl.Series:
    """Return each record's PPDU duration in ns (an A-MPDU's whole PPDU on each subframe; null if unknown)."""
    return airtime(df).get_column("ppdu_ns").alias("airtime_ns")
