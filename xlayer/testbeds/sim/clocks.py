"""Simulated capture clocks: each capture's own offset, skew and timestamp jitter, and their truth.

The truth convention, the one `xlayer.timeline.align*` estimates (and `bundle.json`'s ``clock_overrides``
carries): a local timestamp ``t`` (epoch seconds on the capture's clock) maps to the reference clock
(the server's) as

    reference_time = t - offset_s - skew_ppm * 1e-6 * (t - anchor_ts)

The simulator makes that exact rather than approximate: with ``s = skew_ppm * 1e-6`` and the anchor
``A``, the capture's ideal local clock at reference time ``R`` is ``L = (R + offset_s - s*A) / (1 - s)``,
the inverse of the formula above.  Timestamps written to a capture are ``L`` plus jitter drawn from
N(0, jitter_us) and truncated at ``jitter_max_us``, then kept non-decreasing within the file (a
kernel never stamps a packet before the previous one; this can add at most a few ns beyond the bound).

Reference time is ``EPOCH_BASE_S + t_sim`` (simulation time t_sim), so timestamps look like real epoch
times; every anchor is ``EPOCH_BASE_S``.  The radiotap TSFT field of the air capture is a third clock of
the sniffer, a free-running µs counter: apply the same convention to ``t = TSFT / 1e6``.

Everything here is exact integer/rational arithmetic: ``offset_ns`` is the offset in integer ns (the
float ``offset_s`` is its rounding), and `to_reference_ns` inverts a timestamp without float error.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from fractions import Fraction

EPOCH_BASE_S = 1_700_000_000
EPOCH_BASE_NS = EPOCH_BASE_S * 10**9
CONVENTION = "reference_time = t - offset_s - skew_ppm*1e-6*(t - anchor_ts)"

OFFSET_RANGE_S = 3.0
SKEW_RANGE_PPM = 50.0
JITTER_US = 20.0
JITTER_SIGMAS = 3.0
# TSF counters of real NICs have been running since the driver loaded: minutes to days.
TSF_START_RANGE_S = (600.0, 86_400.0)


@dataclass(frozen=True)
class Clock:
    """One capture clock: where its timestamps come from and how they map to the reference."""

    name: str
    offset_ns: int
    skew_ppm: float          # an exact decimal with at most 6 decimals (so Fraction(str()) is exact)
    anchor_ns: int = EPOCH_BASE_NS
    jitter_us: float = 0.0   # standard deviation of the timestamp jitter
    jitter_max_us: float = 0.0
    unit: str = "s"          # "us" for a TSFT counter: t = value / 1e6

    @property
    def skew(self) -> Fraction:
        """Return s = skew_ppm * 1e-6 exactly."""
        return Fraction(repr(self.skew_ppm)) / 10**6

    def local_ns(self, reference_ns: int) -> int:
        """Return the ideal (jitter-free) local timestamp, in ns, of reference time `reference_ns`."""
        s = self.skew
        return round((Fraction(reference_ns) + self.offset_ns - s * self.anchor_ns) / (1 - s))

    def native(self, base_ns: int = EPOCH_BASE_NS) -> tuple[int, float]:
        """Return (l0_ns, rate) for the C++ clock: local = l0 + round(t_sim_ns * rate) + jitter."""
        return self.local_ns(base_ns), float(1 / (1 - self.skew))

    def to_reference_ns(self, local_ns: int) -> int:
        """Return the reference time (epoch ns) of local timestamp `local_ns`, by the convention."""
        return round(local_ns - self.offset_ns - self.skew * (local_ns - self.anchor_ns))

    def truth(self) -> dict:
        """Return this clock's entry in truth.json (exact values alongside the float ones)."""
        d = {
            "clock": self.name,
            "offset_s": self.offset_ns / 1e9,
            "skew_ppm": self.skew_ppm,
            "anchor_ts": self.anchor_ns // 10**9 if self.anchor_ns % 10**9 == 0 else self.anchor_ns / 1e9,
            "jitter_us": self.jitter_us,
            "jitter_max_us": self.jitter_max_us,
            "offset_ns": self.offset_ns,
            "anchor_ns": self.anchor_ns,
        }
        if self.unit != "s":
            d["unit"] = self.unit
        return d


def to_reference_s(t: float, clock: dict) -> float:
    """Apply the truth convention to local epoch seconds `t` with a truth.json clock entry."""
    return t - clock["offset_s"] - clock["skew_ppm"] * 1e-6 * (t - clock["anchor_ts"])


def to_reference_ns(t_ns: int, clock: dict) -> int:
    """Apply the truth convention exactly to integer ns `t_ns` with a truth.json clock entry."""
    s = Fraction(repr(clock["skew_ppm"])) / 10**6
    anchor = clock.get("anchor_ns", round(Fraction(repr(clock["anchor_ts"])) * 10**9))
    offset = clock.get("offset_ns", round(Fraction(repr(clock["offset_s"])) * 10**9))
    return round(t_ns - offset - s * (t_ns - anchor))


def _rng(seed: int, name: str) -> random.Random:
    return random.Random(f"xlayer-sim-clock:{seed}:{name}")


def random_clock(seed: int, name: str, *, reference: bool = False, jitter_us: float = JITTER_US) -> Clock:
    """Return capture clock `name` for `seed`: offset uniform in ±3 s, skew uniform in ±50 ppm.

    The reference clock (the server's) has offset 0 and skew 0 and keeps its jitter.
    """
    r = _rng(seed, name)
    if reference:
        off, skew = 0, 0.0
    else:
        off = round(r.uniform(-OFFSET_RANGE_S, OFFSET_RANGE_S) * 1e9)
        skew = round(r.uniform(-SKEW_RANGE_PPM, SKEW_RANGE_PPM), 6)
    return Clock(name, off, skew, jitter_us=jitter_us, jitter_max_us=JITTER_SIGMAS * jitter_us)


def random_tsf_clock(seed: int, name: str) -> Clock:
    """Return the sniffer's TSF clock: a µs counter that started minutes to a day before, ±50 ppm."""
    r = _rng(seed, name)
    skew = round(r.uniform(-SKEW_RANGE_PPM, SKEW_RANGE_PPM), 6)
    start_ns = round(r.uniform(*TSF_START_RANGE_S) * 1e9)
    s = Fraction(repr(skew)) / 10**6
    # local(base) = start  <=>  offset = (start - base) * (1 - s)   (anchor = base)
    off = round((start_ns - EPOCH_BASE_NS) * (1 - s))
    return Clock(name, off, skew, unit="us")


def jitter_seed(seed: int, index: int) -> int:
    """Return the 64-bit seed of one capture's jitter generator."""
    return (seed * 0x9E3779B97F4A7C15 + index * 0xBF58476D1CE4E5B9 + 1) % 2**64
