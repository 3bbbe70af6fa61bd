"""Clock fits from matched packets: lower bounds of one-way delay, and their midpoint.

Conventions (shared with `xlayer.timeline.align`): a clock's error against the reference is the line

    theta(t) = a_ns + s * (t - anchor_ns)          (t: the clock's own time, int64 ns)

so that the reference time of a local stamp is ``t - theta(t)``; ``offset_s = a_ns / 1e9`` and
``skew_ppm = s * 1e6``.  Every array here is float64 of nanoseconds *relative to the anchor*, never
float64 epoch nanoseconds (that would cost ~0.2 us of precision).

For a packet that went from the known clock K to the unknown clock U, ``y = t_U - t_K`` equals
``theta + delay >= theta``; for one that went U -> K, ``y = theta - delay <= theta``.  Forward points
therefore lie above theta(t) and reverse points below it (Moon, Skelly and Towsley, "Estimation and
removal of clock skew from network delay measurements", INFOCOM 1999: the line below all forward
points that maximises its value at the mean time, found on the lower convex hull; the same above
the reverse points; theta is midway between the two).

Jitter of the timestamps puts a few points below the true envelope, and the hull line rests on the
two most extreme of them: fine for the offset, not for the skew over a capture of a few seconds.
So the hull line is only the start: the points within a band just above it (the packets that met
no queue, scattered by jitter alone; the band's width comes from the jitter measured on first
differences) are fitted by least squares, the band is re-centred on that line and fitted again.
Queued packets (far above the envelope) never enter the band, however many they are.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

# Smallest jitter scale assumed (ns): below this, timestamp resolution and kernel scheduling rule.
SIGMA_FLOOR_NS = 2_000.0
# Largest band above the envelope (ns): beyond this a packet surely met a queue.
BAND_CAP_NS = 2_000_000.0
HULL_BINS = 512
# No clock is assumed off by more than this (crystals: tens of ppm); it bounds the hull line's slope.
MAX_SKEW = 500e-6


@dataclass
class Line:
    """theta(x) = a + b*x with x in ns relative to the anchor; a in ns, b dimensionless."""

    a: float
    b: float

    def __call__(self, x: np.ndarray | float) -> np.ndarray | float:
        return self.a + self.b * x


@dataclass
class EnvelopeFit:
    """The band of near-envelope points of one direction and the least-squares line through them."""

    line: Line
    kept: np.ndarray            # bool mask over the input points
    sigma: float                # ns, residual scale of the kept points
    slope_var: float            # variance of the slope estimate (inf if the kept points span no time)
    hull: Line                  # the Moon/Skelly/Towsley line (lower bound) it started from

    @property
    def n_kept(self) -> int:
        return int(self.kept.sum())


@dataclass
class ClockFit:
    """The fitted theta line of one clock against a known one, with what it rests on."""

    a: float                    # ns at the anchor
    s: float                    # skew (dimensionless)
    method: str                 # two-way, one-way, simultaneous
    n: int                      # matched points used (both directions)
    n_fwd: int = 0
    n_rev: int = 0
    residual_ns: float = math.nan
    delay_ns: float = math.nan  # two-way: estimated one-way delay between the vantages (central)
    offset_only: bool = False   # the skew could not be measured and was taken as 0
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# building blocks


def lower_hull(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Return indices (into x sorted ascending) of the lower convex hull's vertices, left to right."""
    idx: list[int] = []
    for i in range(len(x)):
        while len(idx) >= 2:
            i0, i1 = idx[-2], idx[-1]
            # Drop i1 if it lies on or above the segment i0 -> i.
            if (y[i1] - y[i0]) * (x[i] - x[i0]) >= (y[i] - y[i0]) * (x[i1] - x[i0]):
                idx.pop()
            else:
                break
        idx.append(i)
    return np.asarray(idx, dtype=np.int64)


def _is_sorted(x: np.ndarray) -> bool:
    return len(x) < 2 or bool(np.all(x[1:] >= x[:-1]))


def bin_minima(x: np.ndarray, y: np.ndarray, nbins: int = HULL_BINS) -> tuple[np.ndarray, np.ndarray]:
    """Return the lowest point of each of nbins equal-time bins, sorted by x (vectorised)."""
    if len(x) <= nbins:
        o = np.argsort(x, kind="stable")
        return x[o], y[o]
    lo, hi = float(x.min()), float(x.max())
    width = (hi - lo) / nbins or 1.0
    b = np.minimum(((x - lo) / width).astype(np.int64), nbins - 1)
    if _is_sorted(x):
        # Points in time order (as two_way passes them): bins are runs, no sort needed.  The
        # lowest point of a run, the first of equals as the stable sort below takes.
        starts = np.flatnonzero(np.concatenate([[True], b[1:] != b[:-1]]))
        mins = np.minimum.reduceat(y, starts)
        run = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(y))))
        at = np.flatnonzero(y == mins[run])
        first = np.concatenate([[True], run[at][1:] != run[at][:-1]])
        sel = at[first]
        return x[sel], y[sel]
    o = np.lexsort((y, b))
    bs = b[o]
    first = np.ones(len(bs), dtype=bool)
    first[1:] = bs[1:] != bs[:-1]
    sel = o[first]
    xs, ys = x[sel], y[sel]
    o2 = np.argsort(xs, kind="stable")
    return xs[o2], ys[o2]


def moon_line(x: np.ndarray, y: np.ndarray, max_slope: float = MAX_SKEW) -> Line:
    """Return the line below all points (x, y) with the largest value at mean(x): the LP optimum.

    The objective of Moon et al.'s linear program, sum(y_i - a - b*x_i), is maximal for the line
    that is highest at the mean abscissa; that line carries the lower-hull edge spanning the mean.
    Computed on per-bin minima, which keeps the hull walk short on millions of points.  The slope
    is bounded by max_slope (the LP with |b| <= max_slope): a direction whose packets met a queue
    for most of the capture must not tilt the line by the queue's growth.
    """
    xm = float(np.mean(x))
    xs, ys = bin_minima(x, y)
    h = lower_hull(xs, ys)
    if len(h) == 1 or xs[h[-1]] == xs[h[0]]:
        return Line(float(ys[h].min()), 0.0)
    hx, hy = xs[h], ys[h]
    k = int(np.searchsorted(hx, xm, side="right")) - 1
    k = min(max(k, 0), len(h) - 2)
    b = (hy[k + 1] - hy[k]) / (hx[k + 1] - hx[k])
    if abs(b) > max_slope:
        b = math.copysign(max_slope, b)
        return Line(float(np.min(hy - b * hx)), float(b))
    return Line(float(hy[k] - b * hx[k]), float(b))


def jitter_sigma(x: np.ndarray, y: np.ndarray) -> float:
    """Return a robust scale (ns) of point-to-point noise: MAD of first differences in time order."""
    if len(x) < 3:
        return math.inf
    d = np.diff(y) if _is_sorted(x) else np.diff(y[np.argsort(x, kind="stable")])
    return float(1.4826 * np.median(np.abs(d)) / math.sqrt(2.0))


def _ls(x: np.ndarray, y: np.ndarray) -> tuple[Line, float, float]:
    """Return the least-squares line, its residual std (ns) and the slope's variance."""
    n = len(x)
    if n == 0:
        return Line(math.nan, 0.0), math.inf, math.inf
    xm = float(x.mean())
    dx = x - xm
    sxx = float(dx @ dx)
    if n < 3 or sxx <= 0.0:
        a = float(np.mean(y))
        return Line(a - 0.0 * xm, 0.0), float(np.std(y)) if n > 1 else 0.0, math.inf
    b = float(dx @ (y - y.mean())) / sxx
    a = float(y.mean()) - b * xm
    r = y - (a + b * x)
    sig = float(np.sqrt(r @ r / max(n - 2, 1)))
    return Line(a, b), sig, max(sig, SIGMA_FLOOR_NS / 4) ** 2 / sxx


def envelope_fit(x: np.ndarray, y: np.ndarray, sigma: float) -> EnvelopeFit:
    """Fit the lower envelope of (x, y): hull line, then the least-squares line of the band above it.

    sigma: the jitter scale (ns) of one delay sample (see jitter_sigma); it sets the band's width.
    """
    sig = min(max(sigma, SIGMA_FLOOR_NS), BAND_CAP_NS / 8)
    hull = moon_line(x, y)
    # The hull rests on the most negative jitter (about -4 sigma on thousands of points); the
    # unqueued cloud reaches some 8 sigma above it.
    kept = (y - hull(x)) <= 8.0 * sig
    line, s_ls, _ = _ls(x[kept], y[kept])
    for _ in range(3):
        r = y - line(x)
        rs = max(min(s_ls, 2 * sig), SIGMA_FLOOR_NS / 2)
        new = (r <= 3.0 * rs) & (r >= -6.0 * rs)
        if new.sum() < 2:
            break
        same = np.array_equal(new, kept)
        kept = new
        line, s_ls, _ = _ls(x[kept], y[kept])
        if same:
            break
    line, s_ls, var = _ls(x[kept], y[kept])
    return EnvelopeFit(line=line, kept=kept, sigma=s_ls, slope_var=var, hull=hull)


def _combine_slopes(fits: list[EnvelopeFit], signs: list[float]) -> tuple[float, bool]:
    """Return the inverse-variance mean of the fits' slopes (times sign) and whether any was usable."""
    w = [1.0 / f.slope_var for f in fits if math.isfinite(f.slope_var) and f.slope_var > 0]
    if not w:
        return 0.0, False
    num = sum(sg * f.line.b / f.slope_var for f, sg in zip(fits, signs)
              if math.isfinite(f.slope_var) and f.slope_var > 0)
    return num / sum(w), True


ENVELOPE_QUANTILE = 0.1
# Slopes whose standard error exceeds this are not trusted: the skew is set to 0 (offset only).
MAX_SLOPE_SE = 20e-6


def two_way(xf: np.ndarray, yf: np.ndarray, xr: np.ndarray, yr: np.ndarray) -> ClockFit:
    """Fit theta from forward points (above it) and reverse points (below it); midpoint offset.

    A forward point below the reverse envelope (or a reverse one above the forward envelope) by more
    than the jitter allows would mean a negative delay: a wrong match, as matching by size and order
    can make.  Such points are dropped and the fit redone.
    """
    # In time order once: the hull's bins and the jitter's differences then need no sort.
    of, orr = np.argsort(xf, kind="stable"), np.argsort(xr, kind="stable")
    xf, yf, xr, yr = xf[of], yf[of], xr[orr], yr[orr]
    del of, orr
    sig = min(jitter_sigma(xf, yf), jitter_sigma(xr, yr))
    tol = max(6.0 * min(sig, BAND_CAP_NS), 50_000.0)
    dropped = 0
    for _ in range(12):
        fit = _two_way(xf, yf, xr, yr, sig)
        # forward points cannot lie below the reverse envelope, nor reverse ones above the forward one
        okf = yf >= fit.a - fit.delay_ns + fit.s * xf - tol
        okr = yr <= fit.a + fit.delay_ns + fit.s * xr + tol
        bad = int((~okf).sum() + (~okr).sum())
        if bad == 0 or okf.sum() < 2 or okr.sum() < 2:
            break
        dropped += bad
        xf, yf, xr, yr = xf[okf], yf[okf], xr[okr], yr[okr]
    if dropped >= 0.01 * (len(xf) + len(xr) + dropped):
        fit.notes.append(f"{dropped} matched packets on the wrong side of the line (negative delay) left out")
    fit.n += dropped
    return fit


def _two_way(xf: np.ndarray, yf: np.ndarray, xr: np.ndarray, yr: np.ndarray, sig: float) -> ClockFit:
    ff = envelope_fit(xf, yf, sig)
    fr = envelope_fit(xr, -yr, sig)          # the reverse upper envelope, mirrored
    b, ok = _combine_slopes([ff, fr], [1.0, -1.0])
    se = math.sqrt(1.0 / sum(1.0 / f.slope_var for f in (ff, fr)
                             if math.isfinite(f.slope_var) and f.slope_var > 0)) if ok else math.inf
    offset_only = not ok or se > MAX_SLOPE_SE
    if offset_only:
        b = 0.0
    kf, kr = ff.kept, fr.kept
    # The level of each envelope: a low quantile of the band (the high one for the reverse
    # direction) rather than its mean, so that packets that met a small queue and still fell in
    # the band pull it less.  Both directions use the same estimator, so its bias under jitter is
    # the same both ways and cancels in the midpoint.
    q = ENVELOPE_QUANTILE if min(kf.sum(), kr.sum()) >= 20 else 0.5
    af = float(np.quantile(yf[kf] - b * xf[kf], q))
    ar = float(np.quantile(yr[kr] - b * xr[kr], 1.0 - q))
    a = 0.5 * (af + ar)
    res = np.concatenate([yf[kf] - af - b * xf[kf], yr[kr] - ar - b * xr[kr]])
    fit = ClockFit(a=a, s=b, method="two-way", n=len(xf) + len(xr), n_fwd=len(xf), n_rev=len(xr),
                   residual_ns=float(np.sqrt(np.mean(res ** 2))), delay_ns=0.5 * (af - ar),
                   offset_only=offset_only)
    if fit.delay_ns < -3 * max(ff.sigma, fr.sigma, SIGMA_FLOOR_NS):
        fit.notes.append(f"forward and reverse envelopes cross by {-fit.delay_ns / 1e3:.1f} us")
    return fit


def one_way(x: np.ndarray, y: np.ndarray, forward: bool) -> ClockFit:
    """Fit theta from one direction only, taking the unqueued delay as zero (a bound, not a midpoint)."""
    sig = jitter_sigma(x, y)
    f = envelope_fit(x, y if forward else -y, sig)
    b = f.line.b if forward else -f.line.b
    offset_only = not math.isfinite(f.slope_var) or math.sqrt(f.slope_var) > MAX_SLOPE_SE
    if offset_only:
        b = 0.0
    k = f.kept
    a = float(np.mean(y[k] - b * x[k]))
    res = y[k] - a - b * x[k]
    return ClockFit(a=a, s=b, method="one-way", n=len(x), n_fwd=len(x) if forward else 0,
                    n_rev=0 if forward else len(x), residual_ns=float(np.sqrt(np.mean(res ** 2))),
                    offset_only=offset_only,
                    notes=["one direction only: the minimum delay between the vantages is taken as 0"])


def simultaneous(x: np.ndarray, y: np.ndarray) -> ClockFit:
    """Fit theta from points seen at both clocks at the same instant (the same frame on the air)."""
    # Robust start: least squares on per-bin medians, then trimmed least squares on the points.
    n = len(x)
    nb = max(1, min(64, n // 16))
    o = np.argsort(x, kind="stable")
    xs, ys = x[o], y[o]
    parts = np.array_split(np.arange(n), nb)
    mx = np.array([np.median(xs[p]) for p in parts if len(p)])
    my = np.array([np.median(ys[p]) for p in parts if len(p)])
    line, _, _ = _ls(mx, my)
    if not math.isfinite(line.a):
        line = Line(float(np.median(y)), 0.0)
    kept = np.ones(n, dtype=bool)
    for _ in range(4):
        r = y - line(x)
        scale = max(1.4826 * float(np.median(np.abs(r - np.median(r)))), SIGMA_FLOOR_NS / 2)
        kept = np.abs(r - np.median(r)) <= 4.0 * scale
        if kept.sum() < 2:
            kept[:] = True
        line, _, var = _ls(x[kept], y[kept])
    line, sig, var = _ls(x[kept], y[kept])
    offset_only = not math.isfinite(var) or math.sqrt(var) > MAX_SLOPE_SE
    b = 0.0 if offset_only else line.b
    a = float(np.mean(y[kept] - b * x[kept]))
    res = y[kept] - a - b * x[kept]
    return ClockFit(a=a, s=b, method="simultaneous", n=n, n_fwd=n, n_rev=n,
                    residual_ns=float(np.sqrt(np.mean(res ** 2))), offset_only=offset_only)
