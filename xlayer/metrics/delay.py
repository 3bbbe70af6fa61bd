"""Where each downlink packet's delay went: wired path, AP queue, MAC access, its own first transmission, retries.

A packet going to a station passes the wired path (server capture -> the AP's wired capture), waits
in the AP's queue, waits for the medium, is sent, and is sent again until acknowledged.  From the
cross-layer join (`downlink`: wired arrival at the AP, first transmission start, end of the first and
of the last transmission seen) and the one-way delays (`owd`: server -> AP wired side):

* ``wired_ns``: the one-way delay from the upstream wired capture to the AP's wired capture (null
  without one);
* ``queue_ns``: arrival at the AP to the moment the packet reached the head of the AP's transmit
  line.  The AP sends one MPDU at a time, so that moment is the later of its arrival and the end of
  the last downlink MPDU completed before its first transmission began; until then it waited for the
  MPDUs ahead of it (its own station's and others': whoever the AP served meanwhile);
* ``access_ns``: head of line to the first transmission's start: deferral and backoff (other
  stations' frames, the AP's contention);
* ``air_ns``: the first transmission's airtime;
* ``fragments_ns`` and ``retry_ns``: end of the first transmission to the end of the last, split into
  the further fragments of a fragmented MSDU and its retransmissions with their backoffs and ACK
  timeouts.  Further fragments follow in one burst (SIFS, ACK, SIFS, the next fragment), so each costs
  at most the first transmission's airtime and an ACK exchange; when the MSDU was also retried, the
  time beyond that burst is the retries';
* ``service_ns`` = access + air + fragments + retry: how long the AP's transmit line was this packet's;
* ``queue_retry_ns``: the part of ``queue_ns`` during which the AP was retransmitting other MPDUs
  (the union of every downlink packet's retry span), so retry time can be told from queueing proper.

Packets the air capture did not see (dropped at the AP, missed by the sniffer) have null
components.  The AP's queue is not observed directly: these are read from the air, so an MPDU the
sniffer missed entirely makes the next packet's queue wait look like service.  The attribution reads
this table to order causes by the delay they made (`xlayer.attribution.causality`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from xlayer.metrics.schema import Column, conform, register

if TYPE_CHECKING:
    from xlayer.timeline.open import Timeline

NEEDS: tuple[str, ...] = ()
_C = Column

DELAY = register("delay", (
    _C("capture_file", pl.Utf8, "", "the AP's wired capture holding the packet (downlink table)"),
    _C("frame", pl.Int64, "", "frame number in that capture"),
    _C("ts_ns", pl.Int64, "ns", "arrival at the AP's wired side, reference clock"),
    _C("flow", pl.Utf8, "", "flow (xlayer.timeline.flowkey)"),
    _C("station", pl.Utf8, "", "the receiving station's 802.11 address"),
    _C("wired_ns", pl.Int64, "ns", "one-way delay from the upstream wired capture to the AP's (null: none)"),
    _C("queue_ns", pl.Int64, "ns", "arrival to head of the AP's transmit line (MPDUs ahead of it)"),
    _C("queue_retry_ns", pl.Int64, "ns", "part of queue_ns while the AP was retransmitting other MPDUs"),
    _C("access_ns", pl.Int64, "ns", "head of line to the first transmission's start (deferral, backoff)"),
    _C("air_ns", pl.Int64, "ns", "the first transmission's airtime"),
    _C("fragments_ns", pl.Int64, "ns", "the MSDU's further 802.11 fragments after the first transmission"),
    _C("retry_ns", pl.Int64, "ns", "its retransmissions with their backoffs and ACK timeouts"),
    _C("service_ns", pl.Int64, "ns", "access + air + fragments + retry: the AP's transmit line held by it"),
    _C("ap_ns", pl.Int64, "ns", "arrival at the AP to the end of the last transmission (queue + service)"),
), "one downlink packet's delay split into wired path, AP queue, MAC access, first transmission and retries")

TABLES = {"delay": DELAY}


# SIFS before the ACK and again before the next fragment, and the ACK itself at the lowest mandatory
# rate: OFDM (16 us SIFS, counting 2.4 GHz's 6 us signal extension; 14-byte ACK at 6 Mbit/s = 20 us
# preamble + 6 symbols of 4 us = 44 us) and DSSS (10 us SIFS; 192 us long preamble + 112 bits at 1 Mbit/s)
OFDM_ACK_EXCHANGE_NS = 2 * 16_000 + 44_000
DSSS_ACK_EXCHANGE_NS = 2 * 10_000 + 304_000
DSSS_RATES_MBPS = (1.0, 2.0, 5.5, 11.0)


def covered(starts: np.ndarray, ends: np.ndarray):  # noqa: ANN201 (returns a vectorised function)
    """Return F(t): how long, up to each t, at least one interval [start, end) was open (ns)."""
    if len(starts) == 0:
        return lambda t: np.zeros(len(t), dtype=np.int64)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order].astype(np.int64), np.maximum(ends[order], starts[order]).astype(np.int64)
    e = np.maximum.accumulate(e)
    new = np.ones(len(s), bool)
    new[1:] = s[1:] > e[:-1]                      # a gap before it: a new merged interval starts
    idx = np.flatnonzero(new)
    ms, me = s[idx], np.maximum.reduceat(e, idx)
    before = np.concatenate([[0], np.cumsum(me - ms)])

    def f(t: np.ndarray) -> np.ndarray:
        k = np.maximum(np.searchsorted(ms, t, side="right") - 1, 0)   # last merged interval starting <= t
        inside = np.clip(t - ms[k], 0, me[k] - ms[k])
        return np.where(t >= ms[0], before[k] + inside, 0)

    return f


def _per_capture(files: pl.Series) -> list[np.ndarray | slice]:
    """Return the row indices of each air capture file (null as one more), or one slice of all rows if one."""
    codes = files.fill_null("").rank("dense").cast(pl.Int64).to_numpy() if files.len() else np.zeros(0, np.int64)
    if files.len() == 0 or codes.max() == codes.min():
        return [slice(None)]
    order = np.argsort(codes, kind="stable")
    cuts = np.flatnonzero(np.diff(codes[order])) + 1
    return np.split(order, cuts)


def _wired_ns(out: pl.DataFrame, owd: pl.DataFrame, wired: list[str]) -> pl.Series:
    """Return per row of `out` (capture_file, frame) the owd_ns of the first `owd` row whose b side is that
    packet and whose a side is one of the `wired` captures (null if none)."""
    res = np.zeros(out.height, np.int64)
    found = np.zeros(out.height, bool)
    ofile = out.get_column("capture_file")
    for f in ofile.unique().drop_nulls().to_list():
        # per capture file, on the frame numbers: sorted integer arrays instead of a join on strings
        w = (owd.lazy().filter((pl.col("capture_file_b") == f) & pl.col("capture_file_a").is_in(wired)
                               & pl.col("frame_b").is_not_null())
             .select("frame_b", "owd_ns").collect())
        if w.height == 0:
            continue
        fb = w.get_column("frame_b").to_numpy()
        frames, first = np.unique(fb, return_index=True)     # the first row of each frame number, in owd order
        vals = w.get_column("owd_ns").gather(first)
        rows = np.flatnonzero((ofile == f).to_numpy())
        fr = out.get_column("frame").gather(rows).to_numpy()
        k = np.minimum(np.searchsorted(frames, fr), len(frames) - 1)
        hit = frames[k] == fr
        v = vals.gather(k[hit])
        ok = v.is_not_null().to_numpy()
        res[rows[hit][ok]] = v.drop_nulls().to_numpy()
        found[rows[hit][ok]] = True
    return pl.Series("wired_ns", res, pl.Int64).scatter(np.flatnonzero(~found), None)


def decompose(down: pl.DataFrame, owd: pl.DataFrame | None = None, wired: list[str] | None = None) -> pl.DataFrame:
    """Return the `delay` table of a `downlink` table (and of the `owd` rows from the `wired` captures)."""
    m = down.filter(pl.col("first_air_ts_ns").is_not_null() & pl.col("sojourn_ns").is_not_null()
                    & pl.col("last_air_ts_ns").is_not_null())
    if m.height == 0:
        return conform(None, DELAY)
    arrive = m["ts_ns"].to_numpy().astype(np.int64)
    tx0 = arrive + m["sojourn_ns"].to_numpy().astype(np.int64)
    first_end = np.maximum(m["first_air_ts_ns"].to_numpy().astype(np.int64), tx0)
    done = np.maximum(m["last_air_ts_ns"].to_numpy().astype(np.int64), first_end)
    after = done - first_end
    att = m["n_attempts"].fill_null(1).cast(pl.Int64).to_numpy()
    frags = np.maximum(m["n_fragments"].fill_null(1).cast(pl.Int64).to_numpy(), 1)
    retried = np.maximum(att - frags, 0)
    # A further fragment follows its predecessor's ACK after a SIFS, in one burst: it costs its own
    # airtime (at most the first's) and an ACK exchange.  Time past that is what retries cost (an ACK
    # timeout, a doubled backoff, the resend), which a split by count understates several times over.
    rate0 = m["rates_mbps"].list.first().fill_null(0.0).to_numpy() if "rates_mbps" in m.columns \
        else np.zeros(len(arrive))
    exchange = np.where(np.isin(rate0, DSSS_RATES_MBPS), DSSS_ACK_EXCHANGE_NS, OFDM_ACK_EXCHANGE_NS)
    per_fragment = (first_end - tx0) + exchange
    frag_t = np.where(retried > 0, np.minimum(after, (frags - 1) * per_fragment), after)
    retry = after - np.where(frags > 1, frag_t, 0)
    # Completions are per air capture: two air captures (two APs' channels) are two transmit lines.
    hol = np.empty(len(arrive), dtype=np.int64)
    waited_retry = np.zeros(len(arrive), dtype=np.int64)
    for i in _per_capture(m.get_column("air_capture_file")):
        d = np.sort(done[i])
        k = np.searchsorted(d, tx0[i], side="left")          # completions strictly before the start
        prev = np.where(k > 0, d[np.maximum(k - 1, 0)], np.iinfo(np.int64).min)
        hol[i] = np.minimum(np.maximum(arrive[i], prev), tx0[i])
        rs = done[i] - retry[i]
        retrying = covered(rs[retry[i] > 0], done[i][retry[i] > 0])
        waited_retry[i] = np.clip(retrying(hol[i]) - retrying(arrive[i]), 0, hol[i] - arrive[i])
    out = m.select("capture_file", "frame", "ts_ns", "flow", "station").with_columns(
        pl.Series("queue_ns", hol - arrive), pl.Series("queue_retry_ns", waited_retry),
        pl.Series("access_ns", tx0 - hol), pl.Series("air_ns", first_end - tx0),
        pl.Series("fragments_ns", after - retry), pl.Series("retry_ns", retry), pl.Series("service_ns", done - hol),
        pl.Series("ap_ns", done - arrive))
    if owd is not None and owd.height and wired:
        out = out.with_columns(_wired_ns(out, owd, wired))
    return conform(out.sort("ts_ns", "capture_file", "frame"), DELAY)


def build(tl: Timeline) -> dict[str, pl.DataFrame]:
    """Return the delay table of the timeline's downlink packets."""
    return {"delay": decompose(tl.table("downlink"), tl.table("owd"), [e.file for e in tl.entries("wired")])}
