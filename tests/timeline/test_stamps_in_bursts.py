"""Stamps taken in a burst: a sniffer host's lateness on busy air, and subframes queued out of the air.

A host stamps frames in the order it takes them, never one before the one it took earlier: frames that
arrive closer together than its stamping noise are stamped late, by an amount that follows the traffic.
The TSFT map must follow the frames stamped on their own (`xlayer.timeline.match._stamp_line_map`).
Out of the air, the later subframes of an A-MPDU are kept on the delay floor unless their host link
queued them behind the first (`xlayer.timeline.align._behind_in_aggregate`).
"""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest

import xlayer.timeline.match as mm
from xlayer.timeline.align import _behind_in_aggregate

NS = 1_000_000_000


def _busy_then_quiet(rng: np.random.Generator, seconds: float) -> np.ndarray:
    """Return frame times (ns): a quiet first third (a frame every 0.4-1 ms), then bursts of 2-30 frames
    1-8 us apart with 0.2-2 ms between bursts."""
    t, out = 0.0, []
    while t < seconds * NS / 3:
        t += rng.uniform(4e5, 1e6)
        out.append(t)
    while t < seconds * NS:
        t += rng.uniform(2e5, 2e6)
        for _ in range(int(rng.integers(2, 31))):
            t += rng.uniform(1e3, 8e3)
            out.append(t)
    return np.asarray(out)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_tsft_map_follows_the_frames_stamped_on_their_own(seed: int) -> None:
    # The TSF counter runs 31 ppm fast and the host clock 17 ppm slow, both against true time; the host
    # stamps each frame's end with 20 us of noise (within 60 us) kept non-decreasing, which lifts the
    # stamps in the bursts by ~15 us on average.  The running median of stamp - TSFT this replaced put
    # the mapped stamps 25-31 us off there; the line through frames after idle gaps stays within 6 us.
    rng = np.random.default_rng(seed)
    r = _busy_then_quiet(rng, 6.0)
    dur = np.full(len(r), 120e3)
    tsft = np.floor((r * (1 + 31e-6) + 3_600 * NS) / 1_000).astype(np.int64)   # us, first bit of the PPDU
    base = 1_700_000_000 * NS
    ideal = (r + dur) * (1 - 17e-6)                       # ns after `base`
    jitter = np.clip(rng.normal(0.0, 20e3, len(r)), -60e3, 60e3)
    rel = np.maximum.accumulate(np.round(ideal + jitter).astype(np.int64))
    lift = rel - np.round(ideal + jitter)
    assert np.mean(lift[r > 2.0 * NS]) > 10e3, "the bursts must lift the stamps for this test to mean anything"
    mapped, point, info = mm.map_tsft(base + rel, tsft, np.ones(len(r), dtype=bool), dur,
                                      np.ones(len(r), dtype=bool))
    assert mapped is not None, info
    end = (mapped - base) if point == "end" else (mapped - base) + dur
    err = (end - ideal) / 1e3
    assert np.abs(err).max() < 6.0, (point, np.percentile(err, [0, 50, 100]))
    # and the mapped clock runs at the host's rate: no tilt between the quiet third and the bursts
    third = r < 2.0 * NS
    assert abs(float(np.median(err[third]) - np.median(err[~third]))) < 2.0


def _aggregates(rng: np.random.Generator, n: int, wire_ns: float) -> pl.DataFrame:
    """Return reverse-direction matches (out of the air: U the sniffer, K the AP's wired side) of n
    A-MPDUs of 4-20 subframes 12 us apart; the host forwards each subframe at the earliest after its end
    and after the previous one's wire time `wire_ns`, then stamps it with 20 us of noise."""
    rows = []
    for a in range(n):
        start = a * 3e6
        k = int(rng.integers(4, 21))
        ends = start + 100e3 + 12e3 * np.arange(1, k + 1)
        out, free = [], -np.inf
        for e in ends:
            free = max(e, free) + wire_ns
            out.append(free)
        for e, o in zip(ends, out):
            rows.append((0, -1, start, e, o + rng.normal(0, 20e3)))
    cp, d, us, ue, ks = map(np.asarray, zip(*rows))
    return pl.DataFrame({"cp": cp.astype(np.int32), "dir": d.astype(np.int8), "tUs": us.astype(np.int64),
                         "tUe": ue.astype(np.int64), "tKs": np.round(ks).astype(np.int64),
                         "tKe": np.round(ks).astype(np.int64)})


def test_subframes_a_slow_wire_queued_are_left_out_of_the_air_floor() -> None:
    rng = np.random.default_rng(7)
    # a wire faster than the air: every subframe leaves as it ends, every position stays
    fast = _aggregates(rng, 400, 4e3)
    assert not _behind_in_aggregate(fast, -1).any()
    # a wire slower than the air (30 us a packet against 12 us a subframe): position k waits (k-1)*18 us;
    # every position after the first is left out (the second's 18 us are several standard errors of
    # the median over 400 aggregates with 20 us of stamp noise)
    slow = _aggregates(rng, 400, 30e3)
    behind = _behind_in_aggregate(slow, -1).to_numpy()
    pos = slow.with_columns(pl.col("tUe").rank("ordinal").over("tUs").alias("p"))["p"].to_numpy()
    assert not behind[pos == 1].any()
    assert behind[pos >= 2].all()
    # only the direction out of the air is screened
    assert not _behind_in_aggregate(slow, 1).any()
