"""Interference: frames corrupted on the air (bad FCS) well above the capture's usual rate.

A sniffer sees interference and collisions as frames whose FCS fails; when their share rises in a
window while the stations' rates do not fall, something other than distance is corrupting frames.
Evidence: bad-FCS frames of all frames the air captures recorded in the window (from 0.5 s before)
against outside every drop window.  Retries alone are not counted here: they are `mac_retries`.
"""
from __future__ import annotations

import polars as pl

from xlayer.attribution.causes.base import LEAD_NS, Context, Window, clip01, frames
from xlayer.attribution.incidents import CauseFinding

NAME = "interference"
COLOR = "#7f7f7f"          # its incidents in the report
MEANING = "frames were corrupted on the air (bad FCS) well above the usual rate"
MIN_FRAMES = 100


def score(ctx: Context, w: Window) -> CauseFinding | None:
    """Return the evidence of corrupted frames in the window."""
    s, e = w.start_ns - LEAD_NS, w.end_ns
    best = None
    af = ctx.table("air_frames")
    for file in af["capture_file"].unique(maintain_order=True).to_list():
        p = af.filter(pl.col("capture_file") == file)
        inside = p.filter((pl.col("ts_ns") >= s) & (pl.col("ts_ns") < e))
        if inside.height < MIN_FRAMES:
            continue
        bad = inside.filter(pl.col("fcs_bad").fill_null(False))
        rate_in = bad.height / inside.height
        out = p
        for a, b in ctx.quiet:
            out = out.filter((pl.col("ts_ns") < a) | (pl.col("ts_ns") >= b))
        rate_out = float(out["fcs_bad"].fill_null(False).mean()) if out.height else 0.0
        conf = clip01((rate_in - 0.02) / 0.15) * 0.75
        if rate_in < 2 * rate_out:
            conf *= 0.3
        if best is None or conf > best[0]:
            best = (conf, file, inside.height, bad, rate_in, rate_out)
    if best is None or best[0] < 0.05:
        return None
    conf, file, n, bad, rate_in, rate_out = best
    text = f"{bad.height:,} of {n:,} frames at {file} failed their FCS ({rate_in:.1%}, against {rate_out:.1%} outside)"
    return CauseFinding(NAME, conf, text, {"capture_file": file, "frames": n, "fcs_bad": bad.height,
                                           "fcs_bad_rate": rate_in, "fcs_bad_rate_outside": rate_out},
                        frames=frames(bad, "bad FCS"))
