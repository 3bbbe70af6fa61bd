"""Clock fits from matched packets: the minimum-delay envelopes of both directions, and theta between them.

Conventions (shared with `xlayer.timeline.align`): a clock's error against the reference is the line

    theta(t) = a_ns + s * (t - anchor_ns)          (t: the clock's own time, int64 ns)

so that the reference time of a local stamp is ``t - theta(t)``; ``offset_s = a_ns / 1e9`` and
``skew_ppm = s * 1e6``.  Every array here is float64 of nanoseconds *relative to the anchor*, never
float64 epoch nanoseconds (that would cost ~0.2 us of precision).

For a packet that went from the known clock K to the unknown clock U, ``y = t_U - t_K`` equals
``theta + delay``; for one that went U -> K, ``y = theta - delay``.  A delay is never below a floor
(propagation, serialization, the least medium access) and queues and MAC retries only ever add to
it, so forward points lie on or above ``theta + floor_f`` and reverse points on or below
``theta - floor_r``: theta lies between the lower envelope of the forward points and the upper
envelope of the reverse ones, and its slope (the skew) is theirs.

The floor of a direction (`floor_fit`).  The span is cut into up to FLOOR_WINDOWS windows and the
lowest point of each is taken; among the lines of their lower convex hull (slope within MAX_SKEW)
the floor is the one that the most windows' minima touch within the jitter (6 sigma): packets that
met no queue recur at the same line, the lowest packets of a queue that never drained do not.  The
points within a band about that line are fitted by least squares (band re-centred, fitted again):
queued packets, however many and however long they waited, never enter it.  A floor touched in at
least MIN_COVERAGE of the windows holding points (two windows at least) is *credible*.

The jitter.  The band's width comes from the jitter measured on differences between points at least
JITTER_LAG_NS apart (capped at JITTER_CAP_NS: differences of queued delays measure the queue, not the
stamps; packets closer together than the stamping noise share it, a kernel never stamping one before
the one it took earlier), then from the scatter of a credible floor itself.  A floor's level is read at the band's ENVELOPE_QUANTILE and
moved up by that quantile of the jitter: packets that met a short queue sit in the band's upper
half only.

theta from the two floors (`two_way`):

* both credible: the midpoint of the two envelopes (exact when the floors are equal both ways);
  its uncertainty is half the gap between them.
* one credible (an AP queue kept full by an unresponsive stream: every downlink packet waits
  0.1-0.5 s, and the few that did not, at the start, make no floor): the skew comes from the
  credible direction alone, the offset from the midpoint of its envelope and the other
  direction's lowest points (a bound, less the jitter), not of a level that may be a sojourn away.
* `prefer` names a direction whose floor is ~0 (a frame's end at a sniffer to a host's stamp: no
  medium access, no airtime in between); if its floor is credible it gives theta alone, within
  ONE_SIDED_NS, where the other direction's floor holds the medium access and would bias a midpoint,
  and the skew alone: into the air a packet waits for its backoff, the frames it froze behind and its
  aggregate, a mix that changes with the load and tilts that floor.
* neither credible: the midpoint, "poor".

Every fit reports an uncertainty (ns: the part above, plus the scatter of the envelope levels used
and the skew's standard error times the distance to the farthest matched packet) and a status,
"aligned" or "poor: <reason>" (beyond POOR_NS, envelopes that cross, no floor either way).  Of the
uncertainty, the half gap between two credible floors (`path_ns`) is the assumption that the path's
one-way delays are equal, which every two-way method makes (NTP's, PTP's): a server across a WAN is
tens of milliseconds away both ways and its offset rests on it.  Where both floors are reached all
along (PATH_COVERAGE of the windows) and neither side is an air capture, a note says so and it alone
does not make the fit poor; floors reached only now and then may be the troughs of queues both ways,
and a gap across the air holds the medium access (a frame into the air waits for it, one out of it
does not): those gaps stay a poor fit's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

# Smallest jitter scale assumed (ns): below this, timestamp resolution and kernel scheduling rule.
SIGMA_FLOOR_NS = 2_000.0
# Largest band above the envelope (ns): beyond this a packet surely met a queue.
BAND_CAP_NS = 2_000_000.0
HULL_BINS = 512             # default bins of bin_minima
# No clock is assumed to run off another by more than this (crystals: tens of ppm each); it bounds
# the slope of a floor line.
MAX_SKEW = 200e-6
# Largest stamp jitter assumed for the floor's band (ns): first differences of delays that queue
# vary by the queue's service times, not by the stamps' jitter, and would widen the band to the queue.
JITTER_CAP_NS = 50_000.0
# The floor's band is at most this many jitter scales wide a side (the scale measured between
# packets far enough apart: see jitter_sigma).
BAND_SIGMAS = 2.0
# Points this far apart have independent stamping noise (beyond an interrupt's batch of packets).
JITTER_LAG_NS = 1_000_000


@dataclass
class Line:
    """theta(x) = a + b*x with x in ns relative to the anchor; a in ns, b dimensionless."""

    a: float
    b: float

    def __call__(self, x: np.ndarray | float) -> np.ndarray | float:
        return self.a + self.b * x


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
    uncertainty_ns: float = math.nan   # how far off the offset may be (see the module docstring)
    status: str = "aligned"            # "aligned" or "poor: <reason>"
    n_floor: int = 0                   # matched points on the envelopes (the unqueued ones) used
    coverage_fwd: float = math.nan     # share of time windows whose lowest point is on the floor
    coverage_rev: float = math.nan
    skew_se: float = math.inf          # standard error of s (inf: the skew was not measured)
    # of uncertainty_ns, the half gap between two credible floors: the offset is exact if the one-way
    # delays between the vantages are equal (NTP's assumption) and off by half their difference if not
    path_ns: float = 0.0
    # of uncertainty_ns, a bound even for equal one-way delays: one direction met a queue all along (the
    # offset midway between the other's floor and its lowest packets), or a floor is reached too seldom
    # to tell a path from a queue's troughs
    bound_ns: float = 0.0


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


def jitter_sigma(x: np.ndarray, y: np.ndarray) -> float:
    """Return a robust scale (ns) of point-to-point noise: MAD of the differences between each point and
    the first one at least JITTER_LAG_NS later, in time order."""
    if len(x) < 3:
        return math.inf
    if not _is_sorted(x):
        o = np.argsort(x, kind="stable")
        x, y = x[o], y[o]
    # Stamps of packets closer together than the stamping noise are not independent: a kernel never
    # stamps a packet before the one it took earlier, and one interrupt stamps a batch alike.  Their
    # first differences would show a fraction of the noise (2 us for 20 us stamps 12 us apart).
    j = np.searchsorted(x, x + JITTER_LAG_NS, side="left")
    ok = j < len(x)
    if ok.sum() < 2:
        j, ok = np.arange(1, len(x) + 1), np.arange(len(x)) < len(x) - 1
    d = y[j[ok]] - y[ok]
    return float(1.4826 * np.median(np.abs(d)) / math.sqrt(2.0))


def _dot(u: np.ndarray, v: np.ndarray) -> float:
    """Return the dot product of two vectors, summed by numpy rather than BLAS.

    BLAS threads waiting for busy cores made each dot product of a few thousand points take
    milliseconds on a loaded machine; numpy's own sum does not wait."""
    return float(np.einsum("i,i->", u, v))


def _ls(x: np.ndarray, y: np.ndarray) -> tuple[Line, float, float]:
    """Return the least-squares line, its residual std (ns) and the slope's variance."""
    n = len(x)
    if n == 0:
        return Line(math.nan, 0.0), math.inf, math.inf
    xm = float(x.mean())
    dx = x - xm
    sxx = _dot(dx, dx)
    if n < 3 or sxx <= 0.0:
        a = float(np.mean(y))
        return Line(a - 0.0 * xm, 0.0), float(np.std(y)) if n > 1 else 0.0, math.inf
    b = _dot(dx, y - y.mean()) / sxx
    a = float(y.mean()) - b * xm
    r = y - (a + b * x)
    sig = math.sqrt(_dot(r, r) / max(n - 2, 1))
    return Line(a, b), sig, max(sig, SIGMA_FLOOR_NS / 4) ** 2 / sxx


# The level of a floor is read at this quantile of its band (ENVELOPE_Z standard deviations of the
# jitter below its centre): short queues only ever push points up, into the band's upper half.
ENVELOPE_QUANTILE = 0.1
ENVELOPE_Z = 1.2816
# Slopes whose standard error exceeds this are not trusted: the skew is set to 0 (offset only).
MAX_SLOPE_SE = 20e-6
# Windows the span is cut into to see where a direction reaches its floor (at most; 8 points each).
FLOOR_WINDOWS = 64
# A floor is credible when it is reached in this share of the windows holding points, and in two
# windows at least: unqueued packets recur; the lowest of a queue that never drained do not line up.
MIN_COVERAGE = 0.2
MIN_FLOOR_WINDOWS = 2
# The unqueued delay of the one credible direction, taken as 0, may really be this much (ns).
ONE_SIDED_NS = 30_000.0
# A floor's growth with the packet's size above this (ns/byte: below 8 Mbit/s) is not serialization.
MAX_NS_PER_BYTE = 1_000.0
# A preferred floor is used only while the other direction's lies within twice this of it (ns).
PREFER_MAX_NS = 500_000.0
# An offset this uncertain (ns) makes the fit "poor".
POOR_NS = 100_000.0
# Floors both ways reached in this share of the windows or more: their gap is the path's round trip,
# the offset between them the equal-delay assumption (`ClockFit.path_ns`), not a poor fit.
PATH_COVERAGE = 0.5


@dataclass
class Floor:
    """The floor of one direction (points mirrored so that they lie above it): line, points on it."""

    line: Line
    kept: np.ndarray            # bool mask: the points on the floor (unqueued, up to jitter)
    sigma: float                # ns, scatter of the kept points about the line
    slope_var: float            # variance of the line's slope (inf if the kept points span no time)
    coverage: float             # share of the windows holding points whose lowest point is on it
    windows: int                # windows on the floor

    @property
    def n_kept(self) -> int:
        return int(self.kept.sum())

    @property
    def credible(self) -> bool:
        return self.coverage >= MIN_COVERAGE and self.windows >= MIN_FLOOR_WINDOWS


def _windows(x: np.ndarray) -> tuple[np.ndarray, int]:
    """Return each point's window index and the number of windows (equal time, ~8 points each at least)."""
    nb = int(min(FLOOR_WINDOWS, max(4, len(x) // 8)))
    lo, hi = float(x.min()), float(x.max())
    width = (hi - lo) / nb or 1.0
    return np.minimum(((x - lo) / width).astype(np.int64), nb - 1), nb


def _supported_line(xs: np.ndarray, ys: np.ndarray, tol: float) -> Line:
    """Return the line under the window minima (xs, ys) that the most of them lie within tol of.

    Candidates are the lower hull's edges (slope within MAX_SKEW) and the flat line under all:
    unqueued windows' minima are collinear up to jitter, a queue's minima are not.
    """
    h = lower_hull(xs, ys)
    cands = [Line(float(ys.min()), 0.0)]
    for i0, i1 in zip(h[:-1], h[1:]):
        if xs[i1] > xs[i0]:
            b = float((ys[i1] - ys[i0]) / (xs[i1] - xs[i0]))
            if abs(b) <= MAX_SKEW:
                cands.append(Line(float(ys[i0] - b * xs[i0]), b))
    best, score = cands[0], (-1, 0.0)
    for c in cands:
        r = ys - c(xs)
        a = c.a + min(float(r.min()), 0.0)          # under every minimum (the flat candidate is)
        r = ys - (a + c.b * xs)
        on = r <= tol
        sc = (int(on.sum()), -float(r[on].sum()))
        if sc > score:
            best, score = Line(a, c.b), sc
    return best


def floor_fit(x: np.ndarray, y: np.ndarray, sigma: float) -> Floor:
    """Return the floor of points (x, y) that lie above it: the line the unqueued packets rest on.

    sigma: the jitter scale (ns) of one delay sample (see jitter_sigma); it sets the band's width.
    """
    sig = min(max(sigma, SIGMA_FLOOR_NS), BAND_CAP_NS / 8)
    win, nb = _windows(x)
    xs, ys = bin_minima(x, y, nb)
    # Minima of unqueued windows scatter by the jitter's extremes (one point: anywhere in +-3 sigma).
    tol = 6.0 * sig
    line = _supported_line(xs, ys, tol)
    kept = (y - line(x)) <= tol
    line, s_ls, var = _ls(x[kept], y[kept])
    for _ in range(4):
        r = y - line(x)
        rs = max(min(s_ls, BAND_SIGMAS * sig), SIGMA_FLOOR_NS / 2)
        new = (r <= 3.0 * rs) & (r >= -4.0 * rs)
        if new.sum() < 2:
            break
        same = np.array_equal(new, kept)
        kept = new
        line, s_ls, var = _ls(x[kept], y[kept])
        if same:
            break
    on = int(np.count_nonzero(np.bincount(win[kept], minlength=nb)))
    occupied = int(np.count_nonzero(np.bincount(win, minlength=nb)))
    return Floor(line=line, kept=kept, sigma=s_ls, slope_var=var, coverage=on / max(occupied, 1), windows=on)


def _level(x: np.ndarray, y: np.ndarray, b: float, fl: Floor, jitter: float) -> tuple[float, np.ndarray]:
    """Return the floor's level at x = 0 under slope b, and the band of points it rests on.

    Packets that met a short queue fall in the band too, above the level only: the level is read
    off the band's low quantile ENVELOPE_QUANTILE and moved up by where that quantile of the
    jitter (scale `jitter`, ns) lies, rather than taken as the band's median.
    """
    r = y - b * x
    kept = fl.kept
    lvl = float(np.median(r[kept])) if kept.any() else float(np.min(r))
    rs = max(min(fl.sigma, BAND_CAP_NS / 8), SIGMA_FLOOR_NS / 2)
    for _ in range(3):
        band = np.abs(r - lvl) <= 3.0 * rs
        if band.sum() < 1:
            break
        kept = band
        if kept.sum() >= 20:
            lvl = float(np.quantile(r[kept], ENVELOPE_QUANTILE)) + ENVELOPE_Z * jitter
        else:
            lvl = float(np.median(r[kept]))
    return lvl, kept


def _slope(floors: list[tuple[Floor, float]]) -> tuple[float, float]:
    """Return the inverse-variance mean of the floors' slopes (times sign) and its standard error."""
    use = [(f, sg) for f, sg in floors if math.isfinite(f.slope_var) and f.slope_var > 0]
    if not use:
        return 0.0, math.inf
    w = sum(1.0 / f.slope_var for f, _ in use)
    return sum(sg * f.line.b / f.slope_var for f, sg in use) / w, math.sqrt(1.0 / w)


def _size_term(x: np.ndarray, y: np.ndarray, size: np.ndarray | None, sig: float) -> float:
    """Return how much (ns per byte) a direction's floor grows with the packet's size, 0 if it does not.

    A stamp at one end of a frame and at the other end of it elsewhere puts the frame's serialization
    into the delay: when the mix of sizes on the floor changes along the capture (ACKs, then data),
    that would tilt the floor by microseconds a second, i.e. ppm of skew.  Least squares on the floor
    band with the size as a third regressor; kept only if clear (3 standard errors).
    """
    if size is None or len(size) != len(y) or len(y) < 20:
        return 0.0
    fl = floor_fit(x, y, sig)
    k = fl.kept
    s = size[k]
    if k.sum() < 20 or float(np.ptp(s)) < 64:
        return 0.0
    # The normal equations of centred columns (the intercept separates), summed without BLAS.
    xc, sc, yc = x[k] - x[k].mean(), s - s.mean(), y[k] - y[k].mean()
    sxx, sxs, sss, sxy, ssy = _dot(xc, xc), _dot(xc, sc), _dot(sc, sc), _dot(xc, yc), _dot(sc, yc)
    det = sxx * sss - sxs * sxs
    if not det > 0.0:
        return 0.0
    bx, c = (sss * sxy - sxs * ssy) / det, (sxx * ssy - sxs * sxy) / det
    r = yc - bx * xc - c * sc
    dof = max(int(k.sum()) - 3, 1)
    se = math.sqrt(max(_dot(r, r) / dof * sxx / det, 0.0))
    return c if abs(c) <= MAX_NS_PER_BYTE and abs(c) > 3 * se else 0.0


def two_way(xf: np.ndarray, yf: np.ndarray, xr: np.ndarray, yr: np.ndarray, prefer: str | None = None,
            sizes: tuple[np.ndarray | None, np.ndarray | None] = (None, None), air: bool = False) -> ClockFit:
    """Fit theta from forward points (above it) and reverse points (below it): see the module docstring.

    prefer: "forward" or "reverse", the direction whose unqueued delay is about 0 (out of the air:
    a frame's end at a sniffer to a host's stamp) and whose credible floor then gives the offset.
    sizes: the packets' IP lengths per direction (or None): a floor that grows with the size is
    taken back to the direction's smallest packet (`_size_term`).
    air: one side is an air capture; the floors' gap then holds the medium access, which differs by
    direction, and is a bound (`ClockFit.bound_ns`), never the equal-delay assumption of a path.
    A forward point below the reverse envelope (or a reverse one above the forward envelope) by more
    than the jitter allows would mean a negative delay: a wrong match, as matching by size and order
    can make.  Such points are dropped and the fit redone.
    """
    # In time order once: the bins and the jitter's differences then need no sort.
    of, orr = np.argsort(xf, kind="stable"), np.argsort(xr, kind="stable")
    xf, yf, xr, yr = xf[of], yf[of], xr[orr], yr[orr]
    sig = min(jitter_sigma(xf, yf), jitter_sigma(xr, yr), JITTER_CAP_NS)
    tol = max(6.0 * min(sig, BAND_CAP_NS), 50_000.0)
    sf, sr = (None if s is None else s[o] for s, o in zip(sizes, (of, orr)))
    kf = _size_term(xf, yf, sf, sig)
    kr = _size_term(xr, -yr, sr, sig)
    if kf:
        yf = yf - kf * (sf - sf.min())
    if kr:
        yr = yr + kr * (sr - sr.min())
    dropped, depth = 0, 0.0
    for _ in range(12):
        fit, lo, hi = _two_way(xf, yf, xr, yr, sig, prefer, air)
        # forward points cannot lie below the reverse envelope, nor reverse ones above the forward one
        below = lo + fit.s * xf - yf
        above = yr - hi - fit.s * xr
        okf, okr = below <= tol, above <= tol
        bad = int((~okf).sum() + (~okr).sum())
        if bad == 0 or okf.sum() < 2 or okr.sum() < 2:
            break
        dropped += bad
        depth = max(depth, float(np.median(np.concatenate([below[~okf], above[~okr]]))))
        xf, yf, xr, yr = xf[okf], yf[okf], xr[okr], yr[okr]
    if dropped >= 0.01 * (len(xf) + len(xr) + dropped):
        fit.notes.append(f"{dropped} matched packets on the wrong side of the line (negative delay) left out")
        # Packets matched by their identity cannot arrive before they left: a line that puts a share
        # of them there does not describe these two clocks (floors that bend with the PHY rate, say).
        # How far it missed them is how far off it may be.
        fit.uncertainty_ns += depth
    for d, k in (("forward", kf), ("reverse", kr)):
        if k:
            fit.notes.append(f"the {d} floor changes with the packet's size by {k:+.2f} ns/byte: taken back to "
                             f"its smallest packets")
    fit.n += dropped
    return fit


def _two_way(xf: np.ndarray, yf: np.ndarray, xr: np.ndarray, yr: np.ndarray, sig: float,
             prefer: str | None = None, air: bool = False) -> tuple[ClockFit, float, float]:
    """Return the fit and the two bounds of theta at x = 0 (reverse envelope, forward envelope)."""
    ff = floor_fit(xf, yf, sig)
    fr = floor_fit(xr, -yr, sig)              # the reverse upper envelope, mirrored
    # The scatter of a credible floor is the stamps' jitter itself: a narrower band, refitted.
    floor_sig = min([f.sigma for f in (ff, fr) if f.credible] or [math.inf])
    if floor_sig < 0.8 * max(sig, SIGMA_FLOOR_NS):
        ff = floor_fit(xf, yf, floor_sig)
        fr = floor_fit(xr, -yr, floor_sig)
        sig = floor_sig
    cf, cr = ff.credible, fr.credible
    # A floor that is not credible may be a queue's slowly moving minimum: it gives no skew.
    floors = [(f, sg, d) for f, sg, ok, d in ((ff, 1.0, cf, "forward"), (fr, -1.0, cr, "reverse")) if ok or cf == cr]
    # Out of the air the delay is the same every time; into it, a packet waits for its backoff, for the
    # frames it froze behind and for its aggregate, a mix that changes with the load along the capture
    # and tilts that floor by ppm.  The clean direction's floor, when credible, gives the skew alone.
    if prefer in ("forward", "reverse") and {"forward": cf, "reverse": cr}[prefer]:
        floors = [x for x in floors if x[2] == prefer]
    b, se = _slope([(f, sg) for f, sg, _ in floors])
    offset_only = se > MAX_SLOPE_SE
    if offset_only:
        b = 0.0
    # The jitter of both directions is that of the same two clocks' stamps: the cleaner floor's.
    jitter = min(ff.sigma, fr.sigma) if cf == cr else (ff.sigma if cf else fr.sigma)
    hi, kf = _level(xf, yf, b, ff, jitter)    # theta <= forward envelope
    lo_m, kr = _level(xr, -yr, -b, fr, jitter)
    lo = -lo_m                                # theta >= reverse envelope
    half_gap = 0.5 * (hi - lo)
    jit = 2.0 * max(min(sig, JITTER_CAP_NS), SIGMA_FLOOR_NS)
    path = bound = 0.0
    # Where a direction has no credible floor, its lowest points still bound theta (less the jitter).
    hi_x = min(hi, float(np.min(yf - b * xf)) + jit)
    lo_x = max(lo, float(np.max(yr - b * xr)) - jit)
    credible = {"forward": cf, "reverse": cr}
    # The preferred floor is ~0 only where its host is next to the air (an AP's wired side, the
    # station): a far host (a server across a WAN) adds its path both ways, and the other
    # direction's floor or lowest points then lie far beyond a queue's reach from it.
    far_end = hi_x if prefer == "reverse" else lo_x
    near = abs(far_end - (lo if prefer == "reverse" else hi)) <= 2 * PREFER_MAX_NS
    if prefer in credible and credible[prefer] and near:
        a, how = (hi, "forward") if prefer == "forward" else (lo, "reverse")
        unc_core = ONE_SIDED_NS
    elif cf and cr:
        a, how = 0.5 * (hi + lo), ""
        # envelopes that cross by X put the offset anywhere within X of the midpoint, not exactly on it
        unc_core = abs(half_gap)
        # A path's floors are reached all along both ways; floors reached only now and then may be the
        # troughs of queues that never drained, and their gap is a bound, not a path.  So is the gap
        # across the air: into it a frame waits for the medium (and its aggregate), out of it not.
        if not air and half_gap > 0 and min(ff.coverage, fr.coverage) >= PATH_COVERAGE:
            path = unc_core
        else:
            bound = unc_core
    elif cf:
        a, how = 0.5 * (hi + lo_x), "forward"
        unc_core = bound = max(0.5 * (hi - lo_x), 0.0)
    elif cr:
        a, how = 0.5 * (hi_x + lo), "reverse"
        unc_core = bound = max(0.5 * (hi_x - lo), 0.0)
    else:
        a, how = 0.5 * (hi + lo), ""
        unc_core = bound = abs(half_gap)
    res = np.concatenate([yf[kf] - hi - b * xf[kf], yr[kr] - lo - b * xr[kr]])
    # The level of each envelope used is known to its scatter over sqrt(points); the skew's error
    # grows with the distance from the points it rests on to the farthest matched packet.
    # (selected by direction name: comparing the tuples would compare their arrays element-wise)
    used = [(f, k, x) for f, k, x, d in ((ff, kf, xf, "forward"), (fr, kr, xr, "reverse")) if how in ("", d)]
    scatter = sum(2.0 * f.sigma / math.sqrt(max(int(k.sum()), 1)) for f, k, _ in used)
    xk = np.concatenate([x[k] for _, k, x in used] or [xf])
    xc = float(xk.mean()) if len(xk) else 0.0
    reach = float(max(abs(min(xf.min(), xr.min()) - xc), abs(max(xf.max(), xr.max()) - xc)))
    drift = (se if not offset_only else MAX_SLOPE_SE) * reach
    unc = unc_core + scatter + drift
    fit = ClockFit(a=a, s=b, method="two-way", n=len(xf) + len(xr), n_fwd=len(xf), n_rev=len(xr),
                   residual_ns=float(np.sqrt(np.mean(res ** 2))) if len(res) else math.nan,
                   delay_ns=half_gap, offset_only=offset_only, uncertainty_ns=unc,
                   n_floor=int(kf.sum() + kr.sum()), coverage_fwd=ff.coverage, coverage_rev=fr.coverage,
                   skew_se=math.inf if offset_only else se, path_ns=path, bound_ns=bound)
    if how and not (cf and cr):
        other = "reverse" if how == "forward" else "forward"
        cov = fr.coverage if how == "forward" else ff.coverage
        fit.notes.append(f"the {other} direction met a queue nearly all along (unqueued in {100 * cov:.0f} % of "
                         f"the time): offset from the {how} envelope" + ("" if prefer == how else " and its lowest points"))
    reasons = []
    if not cf and not cr:
        reasons.append("no direction has packets that met no queue")
    if half_gap < -3 * max(ff.sigma, fr.sigma, SIGMA_FLOOR_NS):
        fit.notes.append(f"forward and reverse envelopes cross by {-2 * half_gap / 1e3:.1f} us")
        reasons.append(f"the two directions' envelopes cross by {-2 * half_gap / 1e3:.1f} us")
    if path > POOR_NS:
        fit.notes.append(f"offset midway between the floors both ways, {2 * path / 1e3:.0f} us apart: exact if "
                         f"the one-way delays of that path are equal, off by half their difference if not")
    # The equal-delay assumption is not a poor fit: every two-way method rests on it, and it is said above.
    if unc - path > POOR_NS:
        if how and not (cf and cr) and unc_core > POOR_NS:
            why = (f" (midway between the {how} floor and the queued direction's lowest packets, "
                   f"{2 * unc_core / 1e3:.0f} us apart)")
        elif cf and cr and not how and bound > POOR_NS:
            why = f" (midway between floors both ways reached only now and then, {2 * bound / 1e3:.0f} us apart)"
        elif path > POOR_NS:
            why = " besides the equal-delay assumption"
        else:
            why = ""
        reasons.append(f"offset uncertain by {(unc - path) / 1e3:.0f} us{why}")
    if reasons:
        fit.status = "poor: " + "; ".join(reasons)
    return fit, lo, hi


def one_way(x: np.ndarray, y: np.ndarray, forward: bool) -> ClockFit:
    """Fit theta from one direction only, taking the unqueued delay as zero (a bound, not a midpoint)."""
    sig = min(jitter_sigma(x, y), JITTER_CAP_NS)
    sgn = 1.0 if forward else -1.0
    f = floor_fit(x, sgn * y, sig)
    b = sgn * f.line.b
    offset_only = not math.isfinite(f.slope_var) or math.sqrt(f.slope_var) > MAX_SLOPE_SE
    if offset_only:
        b = 0.0
    lvl, k = _level(x, sgn * y, sgn * b, f, f.sigma)
    a = sgn * lvl
    res = y[k] - a - b * x[k]
    fit = ClockFit(a=a, s=b, method="one-way", n=len(x), n_fwd=len(x) if forward else 0,
                   n_rev=0 if forward else len(x), residual_ns=float(np.sqrt(np.mean(res ** 2))),
                   offset_only=offset_only, uncertainty_ns=1e6, n_floor=int(k.sum()),
                   notes=["one direction only: the minimum delay between the vantages is taken as 0"],
                   status="poor: packets seen one way only, the offset is a bound",
                   skew_se=math.inf if offset_only else math.sqrt(f.slope_var))
    if forward:
        fit.coverage_fwd = f.coverage
    else:
        fit.coverage_rev = f.coverage
    return fit


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
    resid = float(np.sqrt(np.mean(res ** 2)))
    span = float(x.max() - x.min()) if n else 0.0
    se = math.sqrt(var) if math.isfinite(var) and not offset_only else MAX_SLOPE_SE
    unc = 2.0 * resid / math.sqrt(max(int(kept.sum()), 1)) + se * span / 2
    fit = ClockFit(a=a, s=b, method="simultaneous", n=n, n_fwd=n, n_rev=n, residual_ns=resid,
                   offset_only=offset_only, uncertainty_ns=unc, n_floor=int(kept.sum()),
                   skew_se=math.inf if offset_only else se)
    if unc > POOR_NS:
        fit.status = f"poor: offset uncertain by {unc / 1e3:.0f} us"
    return fit
