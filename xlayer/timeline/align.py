"""One timeline: clock alignment of a bundle's captures.

Every capture of a bundle is stamped by some clock (the manifest's `clock`, by default its vantage:
captures at one vantage share a clock).  `align_bundle` estimates, for every clock that is not the
reference, its offset and skew against the reference from the packets that captures on both clocks
saw, and `Alignment.apply` moves a packet table's `ts_ns` onto the reference clock.

The model.  For a local timestamp t (epoch seconds) of a capture, the reference-clock time is

    t - offset_s - skew_ppm * 1e-6 * (t - anchor_ts)

i.e. the clock reads `offset_s` ahead of the reference at `anchor_ts` (its own time) and runs fast
by `skew_ppm`.  Applying it is done in int64 nanoseconds; only the small terms are floats
(`to_reference_ns`), so epoch nanoseconds lose nothing to float64.

The reference.  The clock of the `server` vantage's packet capture when there is one (a server is
usually the best-kept clock, and the one a host-state sampler on it shares); otherwise the clock of
the wired capture with the most matched packets; otherwise that of the packet capture with the most
matches.  `align_bundle(b, reference=...)` picks another (a clock, vantage or file).

How a clock is fitted (`xlayer.timeline.match` for matching, `xlayer.timeline.fit` for the lines):

* wired <-> wired and air <-> wired, **two-way**: packets matched on the fields no hop rewrites
  (IPv4 id, addresses, protocol, lengths, ports, TCP seq/ack/flags/TSval...; unencrypted 802.11 data
  decodes into the same columns).  Per host pair the direction whose delays are larger is the one
  from the known clock to the unknown one.  The minimum-delay envelope of each direction (the line
  the packets that met no queue rest on, found on per-window minima: `xlayer.timeline.fit`) bound
  the clock's error from both sides; the offset is their midpoint (exact when the minimum delays
  both ways are equal), the skew their common slope.  A direction that queued nearly all along (a
  full AP queue) gives no credible envelope: then the other one gives the skew, and the offset lies
  midway to the queued direction's lowest points.  Between an air capture and a host, the direction
  out of the air (a frame's end to the host's stamp: no medium access, no airtime) gives the offset
  alone when its envelope is credible.  Host pairs seen one way only are sorted by their side of
  that line (or by TTL) and added.
* **one-way**: only one direction was seen; the unqueued delay is taken as 0 (an upper bound of the
  error by the minimum delay).
* air <-> air, **simultaneous**: the same frame (TA, RA, seq, frag, retry, type, TID, ...) and
  beacons heard by two sniffers at the same instant; a trimmed least-squares line.
* air frames carry their airtime (leaving a vantage = end of the first attempt's frame, an A-MPDU's
  subframe at its own end; reaching it = start of its exchange, RTS/CTS included) and, where present,
  TSFT mapped onto the sniffer's clock (see `xlayer.timeline.match`).  Out of the air, the positions
  of an aggregate that reached their host later after their end than its first subframe did (a host
  link slower than the air queued them) are left out of the floor (`_behind_in_aggregate`).
* protected data frames (no keys to decrypt them) match wired packets by size and order: the MPDU
  length minus 802.11 header, CCMP (16 B) or TKIP (20 B) overhead and LLC/SNAP is the IP length
  (`xlayer.timeline.size`), used only when the keyed matches give nothing.

Every pair of clocks with matches is fitted (in a bundle of more than `MAX_PARTNERS` + 1 clocks, each
clock with the `MAX_PARTNERS` others sharing the most packets with it, by per-host-pair counts, so a
bundle of hundreds of captures costs fits linear in its clocks, not their square); a clock is then reached from the reference along the
chain whose links are least uncertain in sum (a link's uncertainty is the fit's: for a two-way link
half the gap between its delay envelopes, where the truth must lie, plus its scatter and the skew's
drift; one-way links 1 ms), and the lines along the chain are composed (method "... via CLOCK").  So a station's clock may be aligned
through the sniffer (both short links) rather than straight to the server across the AP's queue.
`clock_overrides` in the manifest ({clock: {offset_s, skew_ppm, anchor_ts}}, the same convention;
anchor_ts defaults to 0, so give it whenever skew_ppm is not 0) win over any fit; they can anchor
chains too, but start 100 us behind the reference.

`method` in the result: `reference`, `override`, `two-way:ip`, `one-way:ip`, `simultaneous:802.11`,
`two-way:size`, optionally followed by ` offset-only` (the matches spanned too little time to
measure a skew: it is taken as 0), ` via CLOCK`, and ` (same clock as FILE)` for a capture that
had no matches of its own but shares a fitted clock (a host-state file, a second capture); `unmatched` when a clock has fewer than
`min_matches` matched packets to any known clock (offset, skew, anchor and residual are then None,
and `apply` leaves that capture's stamps as they are unless told otherwise).  `matched` counts the
matched packets of that capture used for its clock's fit (reference captures: all their matches);
`residual_us` is the RMS distance of the fitted packets from their lines, in microseconds.
`envelope_points` counts the matched packets on the delay floors its clock's last link rests on (the
unqueued ones), `uncertainty_us` how far off the offset may be (the links' uncertainties summed
along the chain; 0 for the reference, None when unknown: overrides, unmatched), `equal_delay_us` how
much of it is the assumption that a path's one-way delays are equal (two-way links between credible
floors, neither side an air capture: a server across a WAN is its round trip's half away; `fit`),
`confidence` maps the rest to 0..1 (0.5 at 100 us), `skew_se_ppm` is the skew's standard error (the fitted floors' slope
errors, root-sum-square along the chain; 0 for the reference, None when the skew was not measured
or was given: offset-only links, overrides, unmatched; a few hundred unqueued packets over a few
seconds with 20 us stamp jitter measure a skew to about 1 ppm), and `status` says whether to trust
it: "aligned"; "poor: <reason>" (the first link of the chain that is uncertain by more than 100 us
besides the equal-delay assumption,
has no credible envelope either way, or whose envelopes cross; or packets seen one way only);
"cannot align: <reason>" (unmatched: offset, skew and anchor are None).
An air capture whose host stamps mark a frame's start rather than its end (unusual) says so with
`"ts_point": "start"` in its manifest entry.
"""
from __future__ import annotations

import heapq
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

import xlayer.timeline.fit as fitm
import xlayer.timeline.match as mm
from xlayer.bundle.manifest import Bundle, BundleError, CaptureEntry, named, open_bundle
from xlayer.text import NS

MIN_SIMULTANEOUS = 20
MAX_PARTNERS = 8
OVERRIDE_COST_NS = 100_000.0
# An edge whose skew could not be measured gives a chain its skew (0) only where no other chain does.
OFFSET_ONLY_SKEW_COST_NS = 1e15


# ---------------------------------------------------------------------------------------------
# the clock model


def _split_ns(seconds: float) -> int:
    """Return epoch seconds as int ns without going through a float of ~1e18 (exact to < 1 ns)."""
    whole = math.floor(seconds)
    return int(whole) * NS + int(round((seconds - whole) * NS))


@dataclass
class ClockMap:
    """theta(t) = a_ns + s * (t - anchor_ns): how far a clock reads ahead of the reference at t."""

    anchor_ns: int
    a_ns: float
    s: float

    @classmethod
    def identity(cls) -> ClockMap:
        return cls(0, 0.0, 0.0)

    @classmethod
    def from_params(cls, offset_s: float, skew_ppm: float, anchor_ts: float) -> ClockMap:
        """Return the map of the documented convention (anchor_ts in epoch seconds of this clock)."""
        a = _split_ns(anchor_ts)
        return cls(a, float(offset_s) * NS, float(skew_ppm) * 1e-6)

    @property
    def offset_s(self) -> float:
        return self.a_ns / NS

    @property
    def skew_ppm(self) -> float:
        return self.s * 1e6

    @property
    def anchor_ts(self) -> float:
        return self.anchor_ns / NS

    def compose(self, then: ClockMap) -> ClockMap:
        """Return the map of (self, onto a clock K) followed by (then: K onto the final timeline)."""
        a = self.a_ns + then.a_ns + then.s * (float(self.anchor_ns - then.anchor_ns) - self.a_ns)
        return ClockMap(self.anchor_ns, a, self.s + then.s - self.s * then.s)

    def reanchor(self, anchor_ns: int) -> ClockMap:
        """Return the same line written with another anchor."""
        return ClockMap(int(anchor_ns), self.a_ns + self.s * float(int(anchor_ns) - self.anchor_ns), self.s)

    def inverse(self) -> ClockMap:
        """Return the map the other way: from the reference timeline back onto this clock."""
        sp = -self.s / (1.0 - self.s)
        anchor = self.anchor_ns - int(round(self.a_ns))
        delta = float(anchor - self.anchor_ns) + self.a_ns       # anchor - (self.anchor - a), small
        return ClockMap(anchor, -self.a_ns + sp * delta, sp)

    def to_reference_ns(self, ts_ns: Any) -> Any:
        """Return ts_ns (numpy array, polars Series/Expr or int) on the reference clock, int64 ns."""
        return to_reference_ns(ts_ns, self.a_ns / NS, self.s * 1e6, self.anchor_ns / NS,
                               _off_ns=int(round(self.a_ns)), _anchor_ns=self.anchor_ns)


def to_reference_ns(ts_ns: Any, offset_s: float, skew_ppm: float, anchor_ts: float, *,
                    _off_ns: int | None = None, _anchor_ns: int | None = None) -> Any:
    """Return `ts_ns - offset - skew*(ts - anchor)` in int64 ns for an int, numpy array or polars Series/Expr.

    Only the correction's small terms are floats: (ts - anchor) is formed in int64 before scaling.
    """
    off = _off_ns if _off_ns is not None else _split_ns(offset_s)
    anc = _anchor_ns if _anchor_ns is not None else _split_ns(anchor_ts)
    s = float(skew_ppm) * 1e-6
    if isinstance(ts_ns, pl.Expr):
        corr = ((ts_ns - anc).cast(pl.Float64) * s).round(0).cast(pl.Int64)
        return ts_ns - off - corr
    if isinstance(ts_ns, pl.Series):
        corr = ((ts_ns.cast(pl.Int64) - anc).cast(pl.Float64) * s).round(0).cast(pl.Int64)
        return (ts_ns.cast(pl.Int64) - off - corr).alias(ts_ns.name)
    if isinstance(ts_ns, (int, np.integer)):
        return int(ts_ns) - off - int(round((int(ts_ns) - anc) * s))
    arr = np.asarray(ts_ns, dtype=np.int64)
    corr = np.round((arr - np.int64(anc)).astype(np.float64) * s).astype(np.int64)
    return arr - np.int64(off) - corr


# ---------------------------------------------------------------------------------------------
# results


@dataclass
class CaptureAlignment:
    """The clock correction of one capture (all None but matched/method when unmatched)."""

    file: str
    vantage: str
    clock: str
    kind: str
    offset_s: float | None
    skew_ppm: float | None
    anchor_ts: float | None
    matched: int
    residual_us: float | None
    method: str
    notes: list[str] = field(default_factory=list)
    status: str = "aligned"              # "aligned", "poor: <reason>" or "cannot align: <reason>"
    confidence: float | None = None      # 0..1 from the uncertainty less equal_delay_us (1 for the reference)
    uncertainty_us: float | None = None  # how far off the offset may be, summed along the chain
    # of uncertainty_us, the links' equal-delay assumption (two-way fits between credible floors)
    equal_delay_us: float | None = None
    envelope_points: int = 0             # matched packets on the delay floors of its clock's fit
    skew_se_ppm: float | None = None     # standard error of the skew, root-sum-square along the chain

    @property
    def aligned(self) -> bool:
        return self.offset_s is not None

    def clock_map(self) -> ClockMap | None:
        if self.offset_s is None:
            return None
        return ClockMap.from_params(self.offset_s, self.skew_ppm or 0.0, self.anchor_ts or 0.0)

    def to_reference_ns(self, ts_ns: Any) -> Any:
        """Return ts_ns on the reference clock (unchanged if this capture is unmatched)."""
        if self.offset_s is None:
            return ts_ns
        return to_reference_ns(ts_ns, self.offset_s, self.skew_ppm or 0.0, self.anchor_ts or 0.0)

    def as_json(self) -> dict[str, Any]:
        return {"file": self.file, "vantage": self.vantage, "offset_s": self.offset_s,
                "skew_ppm": self.skew_ppm, "anchor_ts": self.anchor_ts, "matched": self.matched,
                "residual_us": self.residual_us, "method": self.method, "status": self.status,
                "confidence": self.confidence, "uncertainty_us": self.uncertainty_us,
                "equal_delay_us": self.equal_delay_us, "envelope_points": self.envelope_points,
                "skew_se_ppm": self.skew_se_ppm}


@dataclass
class Alignment:
    """The result of align_bundle: the reference and one CaptureAlignment per capture (manifest order)."""

    reference: str | None              # vantage of the reference capture
    reference_clock: str | None
    captures: list[CaptureAlignment]
    clocks: dict[str, dict[str, Any]] = field(default_factory=dict)   # per clock: fit details
    seconds: float = 0.0

    def capture(self, which: str) -> CaptureAlignment:
        """Return the entry of a capture named by file, or by vantage if only one capture is there."""
        found, _ = named(self.captures, which)
        if found is not None:
            return found
        raise KeyError(f"no single capture {which!r} in the alignment")

    def as_json(self) -> dict[str, Any]:
        """Return {"reference": VANTAGE, "captures": [{file, vantage, offset_s, ...}]}."""
        return {"reference": self.reference, "captures": [c.as_json() for c in self.captures]}

    def to_json(self, **kw: Any) -> str:
        return json.dumps(self.as_json(), **kw)

    def table(self) -> str:
        """Return a readable table of the result."""
        head = ("file", "vantage", "clock", "offset_s", "skew_ppm", "skew_se", "anchor_ts", "matched", "resid_us",
                "unc_us", "method", "status")
        rows = []
        for c in self.captures:
            rows.append((c.file, c.vantage, c.clock,
                         "-" if c.offset_s is None else f"{c.offset_s:+.9f}",
                         "-" if c.skew_ppm is None else f"{c.skew_ppm:+.3f}",
                         "-" if c.skew_se_ppm is None else f"{c.skew_se_ppm:.3f}",
                         "-" if c.anchor_ts is None else f"{c.anchor_ts:.3f}",
                         str(c.matched), "-" if c.residual_us is None else f"{c.residual_us:.1f}",
                         "-" if c.uncertainty_us is None else f"{c.uncertainty_us:.1f}", c.method, c.status))
        w = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
        lines = [f"reference: {self.reference} (clock {self.reference_clock})",
                 "  ".join(h.ljust(w[i]) for i, h in enumerate(head))]
        lines += ["  ".join(v.ljust(w[i]) if i in (0, 1, 2, 10, 11) else v.rjust(w[i]) for i, v in enumerate(r))
                  for r in rows]
        for c in self.captures:
            for n in c.notes:
                lines.append(f"note: {c.file}: {n}")
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# reading


def _read(bundle: Bundle, e: CaptureEntry, decoder: str) -> pl.DataFrame:
    import parsers

    path = bundle.file_path(e)
    if not path.is_file():
        raise BundleError(f"{e.file}: capture file is missing from the bundle")
    parts = []
    for chunk in parsers.iter_tables(path, decoder=decoder):
        parts.append(chunk.select([c for c in mm.READ_COLS if c in chunk.columns]))
    if not parts:
        from parsers.schema import SCHEMA

        return pl.DataFrame(schema={c: SCHEMA[c] for c in mm.READ_COLS if c in SCHEMA})
    return pl.concat(parts, rechunk=True)


# ---------------------------------------------------------------------------------------------
# fitting one clock against a known one


@dataclass
class _Edge:
    known: str
    unknown: str
    ip: list[tuple[str, str, pl.DataFrame]]        # (known file, unknown file, matches oriented K->U)
    fr: list[tuple[str, str, pl.DataFrame]]


def _orient_ip(j: pl.DataFrame, flip: bool) -> pl.DataFrame:
    """Return matches with K-side columns tKs,tKe and U-side tUs,tUe (flip: capture A is the unknown)."""
    if not flip:
        return j.rename({"tAs": "tKs", "tAe": "tKe", "tBs": "tUs", "tBe": "tUe", "ttl_a": "ttl_k", "ttl_b": "ttl_u"})
    return j.rename({"tAs": "tUs", "tAe": "tUe", "tBs": "tKs", "tBe": "tKe", "ttl_a": "ttl_u", "ttl_b": "ttl_k"})


def _air_exit(pairs: list[tuple[str, str, pl.DataFrame]], kinds: Mapping[str, str]) -> str | None:
    """Return the direction ("forward": K->U, "reverse") that leaves the air, if every pair has one air side."""
    sides = {(kinds.get(kf) == "air", kinds.get(uf) == "air") for kf, uf, _ in pairs}
    if sides == {(False, True)}:
        return "reverse"
    if sides == {(True, False)}:
        return "forward"
    return None


# A later subframe of an aggregate is left out of the air's floor when it reached its host this much
# (in standard errors of the median over the aggregates, and at least fitm.SIGMA_FLOOR_NS) later
# after its own end than the aggregate's first subframe did.
BEHIND_SE = 3.0


def _behind_in_aggregate(m: pl.DataFrame, out_dir: int) -> pl.Series:
    """Return per match whether it is a later subframe of an A-MPDU whose position queued on its way out
    of the air (column "behind").

    Out of the air a subframe's delay is measured from its own end.  A receiver that hands each one on
    as it ends (ns-3) keeps every position on the floor; a host link slower than the subframes arrive
    (an AP's wired port) queues the later ones behind the first, by an amount that follows the
    aggregate's size and the PHY rate and tilts a floor through them.  Which positions queue is read
    off the aggregates themselves: per position, the median of (host stamp gap, air end gap) to the
    aggregate's first subframe, the line's slope cancelled within one aggregate.
    """
    air_s, air_e, host = ("tKs", "tKe", "tUs") if out_dir == 1 else ("tUs", "tUe", "tKs")
    g = (m.select(pl.int_range(pl.len(), dtype=pl.UInt32).alias("_r"), "cp", "dir", air_s, air_e, host)
         .filter((pl.col("dir") == out_dir) & pl.col(air_e).is_not_null())
         .sort("cp", air_s, air_e)
         .with_columns(pl.col(air_e).rank("ordinal").over("cp", air_s).alias("pos"),
                       ((pl.col(host) - pl.col(host).first().over("cp", air_s))
                        - (pl.col(air_e) - pl.col(air_e).first().over("cp", air_s))).cast(pl.Float64)
                       .alias("excess"))
         .filter(pl.col("pos") > 1))
    flags = np.zeros(m.height, dtype=bool)
    if g.height:
        st = (g.group_by("pos")
              .agg(pl.col("excess").median().alias("med"),
                   (pl.col("excess") - pl.col("excess").median()).abs().median().alias("mad"),
                   pl.len().alias("n")))
        se = 1.2533 * 1.4826 * st["mad"].to_numpy() / np.sqrt(st["n"].to_numpy())
        bad = st["pos"].to_numpy()[st["med"].to_numpy() > np.maximum(BEHIND_SE * se, fitm.SIGMA_FLOOR_NS)]
        flags[g.filter(pl.col("pos").is_in(bad.tolist()))["_r"].to_numpy()] = True
    return pl.Series("behind", flags)


def _fit_edge(edge: _Edge, min_matches: int, size_only: bool = False,
              kinds: Mapping[str, str] | None = None) -> tuple[fitm.ClockFit, int, dict[str, int]] | None:
    """Return (fit, anchor_ns, matched per file) of the unknown clock against the known one, or None.

    kinds: capture kind by file; a frame's end at a sniffer reaches a host with no medium access
    and no airtime in between, so that direction's floor is preferred for the offset (fitm.two_way).
    """
    per_file: dict[str, int] = {}
    frs = [(kf, uf, d) for kf, uf, d in edge.fr if d.height]
    n_fr = sum(d.height for _, _, d in frs)
    ips = [(kf, uf, d) for kf, uf, d in edge.ip if d.height]
    n_ip = sum(d.height for _, _, d in ips)
    prefer = _air_exit(ips, kinds or {})
    # Serialization is in a wired edge's delays (stamps at a frame's two ends); an air frame's
    # airtime is already taken out by its stamps (xlayer.timeline.match).
    wired = bool(kinds) and all(kinds.get(kf) != "air" and kinds.get(uf) != "air" for kf, uf, _ in ips)
    air = bool(kinds) and not wired
    if n_fr >= max(min_matches, MIN_SIMULTANEOUS) or (n_fr >= min_matches and n_ip < min_matches):
        tK = np.concatenate([d["tK"].to_numpy() for _, _, d in frs])
        tU = np.concatenate([d["tU"].to_numpy() for _, _, d in frs])
        anchor = int(np.median(tU)) // NS * NS
        fit = fitm.simultaneous((tU - anchor).astype(np.float64), (tU - tK).astype(np.float64))
        fit.method = "simultaneous:802.11"
        for kf, uf, d in frs:
            per_file[kf] = per_file.get(kf, 0) + d.height
            per_file[uf] = per_file.get(uf, 0) + d.height
        return fit, anchor, per_file
    if n_ip < min_matches:
        return None
    for kf, uf, d in ips:
        per_file[kf] = per_file.get(kf, 0) + d.height
        per_file[uf] = per_file.get(uf, 0) + d.height
    m = pl.concat([d.select("tKs", "tKe", "tUs", "tUe", "pair", "orient", "ttl_k", "ttl_u",
                            pl.col("len").cast(pl.Int32) if "len" in d.columns else pl.lit(None, dtype=pl.Int32).alias("len"),
                            pl.lit(i, dtype=pl.Int32).alias("cp")) for i, (_, _, d) in enumerate(ips)],
                  rechunk=False)
    edge.ip.clear()
    del ips
    anchor = int(m["tUs"].median()) // NS * NS
    # A frame end may be unknown (null: see align_match); the midpoints only sort directions.
    m = m.with_columns(((pl.col("tUs") + pl.col("tUe").fill_null(pl.col("tUs")) - pl.col("tKs")
                         - pl.col("tKe").fill_null(pl.col("tKs"))).cast(pl.Float64) / 2).alias("y0"))
    g = m.group_by("cp", "pair", "orient").agg(pl.col("y0").median().alias("med"))
    both = g.group_by("cp", "pair").agg(pl.len().alias("k"),
                                        pl.col("orient").sort_by("med").last().alias("fwd_orient"))
    # Joined on two narrow columns only, then set beside the matches (a join of the whole frame
    # would copy every column of millions of rows).
    side = m.select("cp", "pair").join(both, on=["cp", "pair"], how="left", maintain_order="left")
    m = m.with_columns(side["k"], side["fwd_orient"])
    del side
    ttl_dir = (pl.when(pl.col("ttl_k") > pl.col("ttl_u")).then(1)
               .when(pl.col("ttl_k") < pl.col("ttl_u")).then(-1).otherwise(0))
    m = m.with_columns(pl.when(pl.col("k") == 2)
                       .then(pl.when(pl.col("orient") == pl.col("fwd_orient")).then(1).otherwise(-1))
                       .otherwise(ttl_dir).cast(pl.Int8).alias("dir")).drop("k", "fwd_orient")
    if prefer is not None:
        m = m.with_columns(_behind_in_aggregate(m, 1 if prefer == "forward" else -1))
    else:
        m = m.with_columns(pl.lit(False).alias("behind"))
    # x: the unknown clock's time relative to the anchor; y: t_U - t_K with the right frame ends.
    xy = m.select(
        "dir", "len", "behind",
        pl.when(pl.col("dir") >= 0).then(pl.col("tUs") - anchor).otherwise(pl.col("tUe") - anchor)
        .cast(pl.Float64).alias("x"),
        pl.when(pl.col("dir") >= 0).then(pl.col("tUs") - pl.col("tKe")).otherwise(pl.col("tUe") - pl.col("tKs"))
        .cast(pl.Float64).alias("y"))
    unk = m.filter(pl.col("dir") == 0).with_columns(xy.filter(pl.col("dir") == 0)["x"])
    del m

    def arr(xy: pl.DataFrame, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        sel = xy.filter((pl.col("dir") == d) & pl.col("y").is_not_null() & ~pl.col("behind"))
        ln = sel["len"]
        return (sel["x"].to_numpy(), sel["y"].to_numpy(),
                None if ln.null_count() else ln.cast(pl.Float64).to_numpy())

    xf, yf, sf = arr(xy, 1)
    xr, yr, sr = arr(xy, -1)
    del xy
    if len(xf) >= 2 and len(xr) >= 2:
        fit = fitm.two_way(xf, yf, xr, yr, prefer, sizes=(sf, sr) if wired else (None, None), air=air)
        if unk.height:
            # Host pairs seen one way only: their side of the fitted line says their direction.
            unk = unk.with_columns((pl.col("y0") - (fit.a + fit.s * pl.col("x"))).alias("r"))
            side = unk.group_by("cp", "pair", "orient").agg((pl.col("r").median() > 0).alias("up"))
            unk = unk.join(side, on=["cp", "pair", "orient"])
            up = unk.filter(pl.col("up") & pl.col("tKe").is_not_null())
            dn = unk.filter(~pl.col("up") & pl.col("tUe").is_not_null())
            xf = np.concatenate([xf, up["x"].to_numpy()])
            yf = np.concatenate([yf, (up["tUs"] - up["tKe"]).cast(pl.Float64).to_numpy()])
            xr = np.concatenate([xr, (dn["tUe"] - anchor).cast(pl.Float64).to_numpy()])
            yr = np.concatenate([yr, (dn["tUe"] - dn["tKs"]).cast(pl.Float64).to_numpy()])
            sf = None if sf is None or up["len"].null_count() else np.concatenate([sf, up["len"].to_numpy()])
            sr = None if sr is None or dn["len"].null_count() else np.concatenate([sr, dn["len"].to_numpy()])
            fit = fitm.two_way(xf, yf, xr, yr, prefer, sizes=(sf, sr) if wired else (None, None), air=air)
        fit.method = "two-way:size" if size_only else "two-way:ip"
    elif len(xf) + len(xr) >= max(min_matches, 2) and (len(xf) < 2 or len(xr) < 2) and (len(xf) or len(xr)):
        fwd = len(xf) >= len(xr)
        fit = fitm.one_way(xf if fwd else xr, yf if fwd else yr, forward=fwd)
        fit.method = "one-way:size" if size_only else "one-way:ip"
    else:
        # Direction unknown everywhere: the central line of the delays, taking them as 0.
        x = unk["x"].to_numpy()
        y = unk["y0"].to_numpy()
        if len(x) < min_matches:
            return None
        fit = fitm.simultaneous(x, y)
        fit.method = "one-way:ip"
        fit.notes.append("direction of the packets unknown: the delay between the vantages is taken as 0")
        fit.uncertainty_ns = max(fit.uncertainty_ns, 1e6)
        fit.status = "poor: the direction of the matched packets is unknown, the offset is a bound"
    return fit, anchor, per_file


# ---------------------------------------------------------------------------------------------
# the bundle


def _choose_reference(bundle: Bundle, packet: list[CaptureEntry], obs: dict[str, mm.Observations],
                      matched: dict[str, int], reference: str | None) -> tuple[str | None, str | None]:
    """Return (reference clock, vantage of the capture that names it)."""
    if reference is not None:
        for c in bundle.captures:
            if c.clock == reference:
                return c.clock, c.vantage
        e = bundle.entry(reference)
        return e.clock, e.vantage
    usable = [e for e in packet if e.file in obs]
    servers = [e for e in usable if e.vantage == "server"]
    if servers:
        return servers[0].clock, "server"
    for kinds in (("wired",), ("wired", "air")):
        cand = [e for e in usable if e.kind in kinds]
        if cand:
            best = max(cand, key=lambda e: matched.get(e.file, 0))
            return best.clock, best.vantage
    if bundle.captures:
        return bundle.captures[0].clock, bundle.captures[0].vantage
    return None, None


def _partner_pairs(obs: Mapping[str, mm.Observations], files: list[str],
                   clock_of: Mapping[str, str]) -> set[tuple[str, str]] | None:
    """Return the clock pairs worth fitting when there are more than MAX_PARTNERS + 1 clocks (else None:
    all): each clock with the MAX_PARTNERS others whose captures share the most packets with its own."""
    clocks = sorted({clock_of[f] for f in files})
    if len(clocks) <= MAX_PARTNERS + 1:
        return None
    # What two captures can share is bounded per host pair by the smaller of their counts (frames
    # for two sniffers, protected frames for the size matching): a cheap stand-in for the join.
    per: dict[str, dict[object, int]] = {c: {} for c in clocks}
    for f in files:
        o, cnt = obs[f], per[clock_of[f]]
        if o.ip.height:
            for pair, n in o.ip.group_by("pair").len().iter_rows():
                cnt[pair] = cnt.get(pair, 0) + n
        # frames two sniffers may share; protected frames and the wired packets they match by size
        for tag, t in (("fr", o.fr), ("size", o.sz), ("size", o.wired_sz)):
            if t is not None and t.height:
                cnt[tag] = cnt.get(tag, 0) + t.height
    keep: set[tuple[str, str]] = set()
    for a in clocks:
        ca = per[a]
        score = sorted(((-sum(min(n, per[b].get(k, 0)) for k, n in ca.items()), b) for b in clocks if b != a))
        keep.update(tuple(sorted((a, b))) for sc, b in score[:MAX_PARTNERS] if sc < 0)
    return keep


def align_bundle(bundle: Bundle | str | os.PathLike, reference: str | None = None, *, decoder: str = "fast",
                 min_matches: int = 3, use_tsft: bool = True,
                 tables: Mapping[str, pl.DataFrame] | None = None) -> Alignment:
    """Return the clock alignment of every capture of a bundle (see the module docstring).

    reference: a clock name, vantage or file whose clock is the reference (default: see above).
    tables: packet tables already read, by capture file (others are read from the bundle); each is
    looked up once, so a mapping may read its table only then.
    """
    import time

    t0 = time.perf_counter()
    if not isinstance(bundle, Bundle):
        bundle = open_bundle(bundle)
    packet = [e for e in bundle.captures if e.is_packets]
    obs: dict[str, mm.Observations] = {}
    errors: dict[str, str] = {}
    # Air captures first: whether any has protected frames decides if the wired ones keep what the
    # size-and-order matching needs, and per-frame keys are kept only where two sniffers can match.
    n_air = sum(e.kind == "air" for e in packet)
    need_sizes = False
    for e in sorted(packet, key=lambda e: e.kind != "air"):
        try:
            df = tables[e.file] if tables is not None and e.file in tables else _read(bundle, e, decoder)
        except Exception as exc:  # noqa: BLE001 - one unreadable capture must not stop the others
            errors[e.file] = f"{type(exc).__name__}: {exc}"
            continue
        ts_point = str(e.extra.get("ts_point", "end"))
        o = mm.observe(df, e.file, e.kind, ts_point=ts_point, use_tsft=use_tsft, sizes=need_sizes,
                       frames=n_air >= 2)
        del df
        need_sizes = need_sizes or (o.sz is not None and o.sz.height > 0)
        obs[e.file] = o

    # Per pair of clocks: the matches of every two of their captures, fitted at once and let go
    # (a fit does not depend on which clock becomes the reference; only the fits are kept).
    import xlayer.timeline.size as align_size

    clock_of = {e.file: e.clock for e in packet}
    kind_of = {e.file: e.kind for e in packet}
    files = [e.file for e in packet if e.file in obs]
    by_clocks: dict[tuple[str, str], list[tuple[str, str]]] = {}
    keep = _partner_pairs(obs, files, clock_of)
    for i, fa in enumerate(files):
        for fb in files[i + 1:]:
            cp = tuple(sorted((clock_of[fa], clock_of[fb])))
            if clock_of[fa] != clock_of[fb] and (keep is None or cp in keep):
                by_clocks.setdefault(cp, []).append((fa, fb))
    matched_any: dict[str, int] = {}
    adj: dict[str, list[tuple[str, float]]] = {c: [] for c in sorted({e.clock for e in bundle.captures})}
    adj_skew: dict[str, list[tuple[str, float]]] = {c: [] for c in adj}
    edge_fits: dict[tuple[str, str], tuple[fitm.ClockFit, int, dict[str, int]]] = {}
    for (ca, cb), fpairs in by_clocks.items():
        ip_m: dict[tuple[str, str], pl.DataFrame] = {}
        fr_m: dict[tuple[str, str], pl.DataFrame] = {}
        size_pairs: set[tuple[str, str]] = set()
        for fa, fb in fpairs:
            A, B = obs[fa], obs[fb]
            if A.kind == "air" and B.kind == "air":
                j = mm.match_frames(A, B)
                fr_m[(fa, fb)] = j
            else:
                j = mm.match_ip(A, B)
                if j.height < min_matches and A.kind != B.kind:
                    # Protected air captures with nothing keyed: sizes and order.
                    air, wired = (A, B) if A.kind == "air" else (B, A)
                    sm = align_size.match_sizes(air, wired)
                    if sm is not None and sm.height >= min_matches:
                        if air is A:
                            sm = sm.rename({"tAirS": "tAs", "tAirE": "tAe", "tW": "tBs"}).with_columns(
                                pl.col("tBs").alias("tBe"))
                        else:
                            sm = sm.rename({"tAirS": "tBs", "tAirE": "tBe", "tW": "tAs"}).with_columns(
                                pl.col("tAs").alias("tAe"))
                        j = sm.select("tAs", "tAe", "tBs", "tBe", "pair", "orient", "ttl_a", "ttl_b",
                                      pl.lit(None, dtype=pl.Int32).alias("len"))
                        size_pairs.add((fa, fb))
                ip_m[(fa, fb)] = j
            matched_any[fa] = matched_any.get(fa, 0) + j.height
            matched_any[fb] = matched_any.get(fb, 0) + j.height
        w = sum(j.height for j in ip_m.values()) + sum(j.height for j in fr_m.values())
        if w < min_matches or w == 0:
            continue
        edge = _edge(ca, cb, ip_m, fr_m, clock_of)
        size_only = _size_only(ca, cb, ip_m, size_pairs, clock_of)
        del ip_m, fr_m
        # Fit every linked pair of clocks once (x on the second clock's time); its cost is how
        # uncertain the offset is: for a two-way fit, half the gap between the two delay envelopes
        # (the truth lies between them), plus the scatter.  Chains are chosen by the sum of costs:
        # two short links (sniffer - server, station - sniffer) beat one long one (station - server
        # across the AP).
        res = _fit_edge(edge, min_matches, size_only=size_only, kinds=kind_of)
        del edge
        if res is None:
            continue
        edge_fits[(ca, cb)] = res
        cost = _edge_cost(res[0])
        adj.setdefault(ca, []).append((cb, cost))
        adj.setdefault(cb, []).append((ca, cost))
        cost = _skew_cost(res[0])
        adj_skew.setdefault(ca, []).append((cb, cost))
        adj_skew.setdefault(cb, []).append((ca, cost))

    for o in obs.values():                # only their counts are wanted from here on
        o.ip, o.fr, o.sz, o.wired_sz = o.ip.clear(), None, None, None
    ref_clock, ref_vantage = _choose_reference(bundle, packet, obs, matched_any, reference)

    # Known clocks: the reference (through its override, if any) and overridden ones.
    overrides: dict[str, ClockMap] = {}
    for clock, ov in bundle.clock_overrides.items():
        overrides[clock] = ClockMap.from_params(float(ov.get("offset_s") or 0.0), float(ov.get("skew_ppm") or 0.0),
                                                float(ov.get("anchor_ts") or 0.0))
    known: dict[str, ClockMap] = {}
    if ref_clock is not None:
        known[ref_clock] = overrides.get(ref_clock, ClockMap.identity())
    known.update(overrides)
    clocks = sorted({e.clock for e in bundle.captures})
    # Overridden clocks can anchor chains, but start 100 us behind the reference: a chain through a
    # hand-written override is taken only where it is clearly better than any path from the reference.
    maps: dict[str, ClockMap] = dict(known)
    info: dict[str, dict[str, Any]] = {}
    for c in known:
        info[c] = {"method": "override" if c in overrides else "reference", "via": None, "matched": {},
                   "residual_us": None, "uncertainty_ns": 0.0, "path_ns": 0.0, "status": "aligned", "n_floor": 0}
    # standard error of each chained clock's skew (the reference's and overrides' are taken as exact)
    skew_se: dict[str, float] = {c: 0.0 for c in known}
    for c, pred in _chains(adj, known, ref_clock):
        fit, edge_map, per_file = _edge_map(edge_fits, pred, c)
        m_c = edge_map.compose(maps[pred])
        maps[c] = m_c.reanchor(int(round(m_c.anchor_ns / NS)) * NS)     # a whole second
        skew_se[c] = math.hypot(skew_se.get(pred, 0.0), fit.skew_se)
        method = fit.method + (" offset-only" if fit.offset_only else "")
        if pred != ref_clock:
            method += f" via {pred}"
        info[c] = {"method": method, "via": pred, "matched": per_file,
                   "residual_us": round(fit.residual_ns / 1e3, 3) if math.isfinite(fit.residual_ns) else None,
                   "delay_us": round(fit.delay_ns / 1e3, 3) if math.isfinite(fit.delay_ns) else None,
                   "n": fit.n, "n_fwd": fit.n_fwd, "n_rev": fit.n_rev, "notes": list(fit.notes),
                   "n_floor": fit.n_floor, "coverage_fwd": _r3(fit.coverage_fwd),
                   "coverage_rev": _r3(fit.coverage_rev),
                   "uncertainty_ns": info[pred]["uncertainty_ns"] + _uncertainty(fit),
                   "path_ns": info[pred]["path_ns"] + fit.path_ns,
                   "status": _chain_status(fit, info[pred]["status"], pred, c),
                   "edge": {"offset_s": edge_map.offset_s, "skew_ppm": edge_map.skew_ppm,
                            "anchor_ts": edge_map.anchor_ts}}

    # The skew from its own chains: a bound in an offset says nothing of the floors' slopes.
    sk_maps: dict[str, ClockMap] = dict(known)
    sk_via: dict[str, str] = {}
    sk_se: dict[str, float] = {c: 0.0 for c in known}
    for c, pred in _chains(adj_skew, known, ref_clock):
        fit, edge_map, _ = _edge_map(edge_fits, pred, c)
        sk_maps[c] = edge_map.compose(sk_maps[pred])
        sk_se[c] = math.hypot(sk_se.get(pred, 0.0), fit.skew_se)
        sk_via[c] = pred
    off_via = {k: v["via"] for k, v in info.items() if v.get("via")}
    for c in sk_via:
        if c in off_via and _chain(sk_via, c) != _chain(off_via, c):
            m = maps[c]
            maps[c] = ClockMap(m.anchor_ns, m.a_ns, sk_maps[c].s)
            skew_se[c] = sk_se[c]
            info[c]["notes"].append(f"skew from the chain {' - '.join(reversed(_chain(sk_via, c)))}, offset from "
                                    f"{' - '.join(reversed(_chain(off_via, c)))}")

    # Per capture.
    first_of_clock: dict[str, str] = {}
    for c, inf in info.items():
        for f in inf.get("matched", {}):
            if clock_of.get(f) == c:
                first_of_clock.setdefault(c, f)
    out: list[CaptureAlignment] = []
    for e in bundle.captures:
        notes = []
        if e.file in errors:
            notes.append(f"not read: {errors[e.file]}")
        mp = maps.get(e.clock)
        inf = info.get(e.clock, {})
        if mp is None:
            why = ("the capture could not be read" if e.file in errors else
                   "not a packet capture, and no packet capture shares its clock" if not e.is_packets else
                   f"fewer than {min_matches} of its packets matched a capture on an aligned clock")
            out.append(CaptureAlignment(e.file, e.vantage, e.clock, e.kind, None, None, None,
                                        matched_any.get(e.file, 0) if e.file in obs else 0, None, "unmatched",
                                        notes, status=f"cannot align: {why}", confidence=0.0))
            continue
        method = inf["method"]
        if method == "reference":
            n = matched_any.get(e.file, 0)
            resid = 0.0
        elif method == "override":
            n = matched_any.get(e.file, 0)
            resid = None
            ov = bundle.clock_overrides[e.clock]
            # Report the manifest's numbers as written, not after a round trip through ppm * 1e-6.
            out.append(CaptureAlignment(e.file, e.vantage, e.clock, e.kind, float(ov.get("offset_s") or 0.0),
                                        float(ov.get("skew_ppm") or 0.0), float(ov.get("anchor_ts") or 0.0),
                                        int(n), resid, method, notes, status="aligned"))
            continue
        else:
            n = inf["matched"].get(e.file, 0)
            resid = inf["residual_us"]
            if n == 0 and first_of_clock.get(e.clock):
                method += f" (same clock as {first_of_clock[e.clock]})"
            notes.extend(inf.get("notes", []))
        unc = inf.get("uncertainty_ns")
        path = inf.get("path_ns", 0.0)
        ours = method == "reference" or n > 0
        se = skew_se.get(e.clock, math.inf)
        out.append(CaptureAlignment(e.file, e.vantage, e.clock, e.kind, mp.offset_s, mp.skew_ppm, mp.anchor_ts,
                                    int(n), resid, method, notes, status=inf.get("status", "aligned"),
                                    confidence=_confidence(None if unc is None else unc - path),
                                    uncertainty_us=None if unc is None else round(unc / 1e3, 1),
                                    equal_delay_us=None if unc is None else round(path / 1e3, 1),
                                    envelope_points=int(inf.get("n_floor", 0)) if ours else 0,
                                    skew_se_ppm=round(se * 1e6, 3) if math.isfinite(se) else None))
    clock_info = {}
    for c in clocks:
        mp = maps.get(c)
        ci = dict(info.get(c, {"method": "unmatched"}))
        if mp is not None:
            ci.update(offset_s=mp.offset_s, skew_ppm=mp.skew_ppm, anchor_ts=mp.anchor_ts)
        clock_info[c] = ci
    for f, o in obs.items():
        clock_info.setdefault(clock_of[f], {}).setdefault("observations", {})[f] = o.info
    return Alignment(ref_vantage, ref_clock, out, clock_info, seconds=time.perf_counter() - t0)


def equal_delay_sentence(alignment: Mapping[str, Any]) -> str | None:
    """Return the sentence naming the captures whose offsets rest on a path's equal one-way delays (more
    than 100 us of it: a server across a WAN), None when none does; `alignment` as `Alignment.as_json`."""
    far = [(c.get("file"), c.get("equal_delay_us")) for c in alignment.get("captures") or []
           if isinstance(c.get("equal_delay_us"), (int, float)) and c["equal_delay_us"] > 100.0]
    if not far:
        return None
    most = max(u for _, u in far)
    return (f"clocks of {', '.join(str(f) for f, _ in far)}: aligned taking the path between them and "
            f"{alignment.get('reference')} as equally long both ways (up to {most / 1e3:,.1f} ms each way; an "
            f"asymmetric path moves their offsets by half the difference)")


def _r3(v: float) -> float | None:
    return round(v, 3) if math.isfinite(v) else None


def _uncertainty(fit: fitm.ClockFit) -> float:
    """Return how far off (ns) an edge's offset may be (1 ms when the fit could not say)."""
    u = fit.uncertainty_ns
    return float(u) if math.isfinite(u) else 1e6


def _link_cost(fit: fitm.ClockFit) -> float:
    """Return an edge's uncertainty (ns) plus 1 us: the part of a chain's cost every link pays."""
    return _uncertainty(fit) + 1_000.0


def _edge_cost(fit: fitm.ClockFit) -> float:
    """Return the cost (ns) of an edge for choosing chains: its uncertainty, its bound counted twice,
    plus 1 us a link.

    A clock on the far side of a long path (a server across a WAN) crosses it in every chain, and each
    crossing is uncertain by about half its round trip.  Where the floors both ways are credible that
    is the equal-delay assumption, exact for a symmetric path; where one direction queued all along,
    the offset lies midway between a floor and the other direction's lowest packets, a bound that is
    off by half their least queueing even on a symmetric path, and where a floor is reached too seldom
    to tell a path from a queue's troughs the midpoint is a bound too (`ClockFit.bound_ns`).  Counted
    twice, it makes the chain cross the path where the floors are credible (measured on ns-3 runs of
    the random scenario: a sniffer's offset 16-25 us off through its own edge to the server, 4-11 us
    through the AP's wired capture)."""
    return _link_cost(fit) + (1e5 if fit.offset_only else 0.0) + fit.bound_ns


def _chains(adj: Mapping[str, list[tuple[str, float]]], known: Mapping[str, ClockMap],
            ref_clock: str | None) -> list[tuple[str, str]]:
    """Return (clock, predecessor) of every clock a chain reaches, in the order Dijkstra settles them
    from every known clock at once (the reference at 0, overrides OVERRIDE_COST_NS behind it)."""
    heap = [(0.0 if c == ref_clock else OVERRIDE_COST_NS, c, "") for c in known]
    heapq.heapify(heap)
    done: set[str] = set()
    order = []
    while heap:
        d, c, pred = heapq.heappop(heap)
        if c in done:
            continue
        done.add(c)
        if pred:
            order.append((c, pred))
        for nb, w in adj.get(c, []):
            if nb not in done and nb not in known:
                heapq.heappush(heap, (d + w, nb, c))
    return order


def _skew_cost(fit: fitm.ClockFit) -> float:
    """Return the cost (ns) of an edge for choosing the chain of a clock's skew: its uncertainty plus
    1 us a link (a bound in its offset does not count twice: its credible floor gives the slope); an
    edge whose skew was not measured (offset only: taken as 0) only where no measured chain exists."""
    return _link_cost(fit) + (OFFSET_ONLY_SKEW_COST_NS if fit.offset_only else 0.0)


def _edge_map(edge_fits: dict, pred: str, c: str) -> tuple[fitm.ClockFit, ClockMap, dict[str, int]]:
    """Return the fit between clocks `pred` and `c`, the map of c against pred, and the matches per file."""
    if (pred, c) in edge_fits:                  # fitted on c's time: c -> pred directly
        fit, anchor, per_file = edge_fits[(pred, c)]
        return fit, ClockMap(anchor, fit.a, fit.s), per_file
    fit, anchor, per_file = edge_fits[(c, pred)]    # fitted on pred's time (pred -> c): invert it
    return fit, ClockMap(anchor, fit.a, fit.s).inverse(), per_file


def _chain(via: Mapping[str, str], c: str) -> list[str]:
    """Return the clocks from `c` back to the start of its chain (`via`: each clock's predecessor)."""
    out = [c]
    while out[-1] in via and len(out) <= len(via):
        out.append(via[out[-1]])
    return out


def _chain_status(fit: fitm.ClockFit, before: str, known: str, clock: str) -> str:
    """Return the status of a clock reached from `known` (whose status is `before`) through `fit`."""
    if before.startswith("poor"):
        return before
    if fit.status.startswith("poor"):
        return fit.status + f" (clock {known} to {clock})"
    return "aligned"


def _confidence(unc_ns: float | None) -> float | None:
    """Return 0..1 from an offset's uncertainty: 0.5 at 100 us (1 at 0, 0.01 at 1 ms)."""
    if unc_ns is None or not math.isfinite(unc_ns):
        return None
    return round(1.0 / (1.0 + (unc_ns / fitm.POOR_NS) ** 2), 3)


def _size_only(known: str, unknown: str, ip_m: dict, size_pairs: set, clock_of: dict[str, str]) -> bool:
    keys = [k for k, j in ip_m.items() if j.height and {clock_of[k[0]], clock_of[k[1]]} == {known, unknown}]
    return bool(keys) and all(k in size_pairs for k in keys)


def _edge(known: str, unknown: str, ip_m: dict, fr_m: dict, clock_of: dict[str, str]) -> _Edge:
    e = _Edge(known, unknown, [], [])
    for (fa, fb), j in ip_m.items():
        ca, cb = clock_of[fa], clock_of[fb]
        if (ca, cb) == (known, unknown):
            e.ip.append((fa, fb, _orient_ip(j, False)))
        elif (ca, cb) == (unknown, known):
            e.ip.append((fb, fa, _orient_ip(j, True)))
    for (fa, fb), j in fr_m.items():
        ca, cb = clock_of[fa], clock_of[fb]
        if (ca, cb) == (known, unknown):
            e.fr.append((fa, fb, j.rename({"tA": "tK", "tB": "tU"})))
        elif (ca, cb) == (unknown, known):
            e.fr.append((fb, fa, j.rename({"tA": "tU", "tB": "tK"})))
    return e


__all__ = ["Alignment", "CaptureAlignment", "ClockMap", "align_bundle", "equal_delay_sentence", "to_reference_ns"]
