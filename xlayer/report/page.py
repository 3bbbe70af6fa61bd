"""The `xlayer report` page: one self-contained HTML file (Bokeh, works offline) showing a bundle and its incidents.

Panels share one time axis (UTC on the bundle's reference clock) and each shades every incident
window: goodput per flow; PHY rate, MAC retry fraction, airtime share and RSSI per station; AP
queue sojourn and drops; the downlink delay split into wired path, AP queue, waiting behind other
packets' retries, MAC access, airtime, fragments and retries (the `delay` table the attribution
orders causes by); TCP retransmissions by class; and, from host TCP samples, cwnd and
srtt/rto with the flow's one-way delay beside rto (a delay above the RTO means a spurious timeout).
A panel with no data for the bundle is left out and the page says why.  Tables list the incidents
with their evidence, the flows, the clock alignment and the bundle's tags.

Every text that may come from a capture or a manifest (SSIDs, station, flow and file names,
notes, tags) is HTML-escaped before it reaches the page; plot text is drawn on a canvas by Bokeh.
Long series are binned (percentiles per bin for queue sojourn, maximum per bin for one-way delay)
so no glyph holds more than `MAX_POINTS` points and a million-packet bundle gives a page of a few MB.

Rows without a time (null or not finite) are left out of every panel, so no axis stretches to the
year 1677 (a null cast to an integer); a numeric warning raised while a panel is drawn becomes a note
on the page, not text on the terminal.  Every number the page shows of the analysis is the value
`xlayer analyze --json` prints (confidences rounded as there), and a rate says what it measures:
offered (at the first capture on the flow's path), forwarded (a capture between, or an air capture
seeing the transmissions) or delivered (the last wired capture on the path), over which span.
"""
from __future__ import annotations

import html
import math
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from xlayer.attribution.causes import CAUSES
from xlayer.attribution.incidents import Analysis, Incident
from xlayer.text import NS, utc_text
from xlayer.timeline.align import equal_delay_sentence

MAX_POINTS = 20_000          # per glyph: the browser stays responsive, the page stays a few MB
MAX_SERIES = 10              # lines per panel (largest first); the rest are named in a note
PANEL_HEIGHT = 230
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")
CAUSE_COLORS = {m.NAME: m.COLOR for m in CAUSES}
RETRANS_COLORS = {"rto": "#d62728", "spurious": "#e377c2", "fast": "#ff7f0e", "reorder": "#2ca02c",
                  "network_duplicate": "#7f7f7f"}

# Panel keys in page order, with their titles (the test checks these titles are drawn).
PANELS: dict[str, str] = {
    "goodput": "Goodput per flow",
    "phy_rate": "PHY rate per station (AP to station data)",
    "retry": "MAC retry fraction per station",
    "airtime": "Airtime share per station",
    "rssi": "Signal strength (RSSI) per station",
    "sojourn": "AP queue: sojourn time and drops",
    "delay": "Where downlink delay went (mean per bin, stacked)",
    "retrans": "TCP retransmissions by class",
    "cwnd": "Congestion window (host samples)",
    "rto": "RTO and sRTT (host samples) beside the one-way delay",
}


class _NoData(Exception):
    """A panel has nothing to draw for this bundle; the message says why (shown on the page)."""


@dataclass
class Report:
    """What build_report wrote: the panels drawn, those left out (title: why), and the page size."""

    path: Path
    panels: list[str]
    omitted: dict[str, str]
    size_bytes: int
    notes: list[str] = field(default_factory=list)


@dataclass
class _Ctx:
    """What every panel needs: the timeline, the shared x range, and where the data lies in time."""

    tl: Any
    x_range: Any
    incidents: list[Incident]
    flows: list[dict[str, Any]] = field(default_factory=list)     # the analysis' data flows
    roles: dict[tuple[str, str], str] = field(default_factory=dict)   # (flow, capture_file) -> flow_roles
    t_min: float = math.inf            # ms, extent of everything drawn
    t_max: float = -math.inf
    notes: list[str] = field(default_factory=list)

    def extent(self, x_ms: np.ndarray) -> None:
        x = x_ms[np.isfinite(x_ms)]
        if len(x):
            self.t_min = min(self.t_min, float(x.min()))
            self.t_max = max(self.t_max, float(x.max()))


# ---------------------------------------------------------------------------------------------
# text


def esc(s: object) -> str:
    """Return text safe to place in HTML (element content or a quoted attribute)."""
    return html.escape("" if s is None else str(s), quote=True)


def _num(v: Any) -> str:
    """Return a number written for a person (3 significant digits, thousands separated)."""
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-3):
            return f"{v:.3g}"
        return f"{v:,.3f}".rstrip("0").rstrip(".") if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def conf_text(c: float) -> str:
    """Return a confidence as `xlayer analyze --json` prints it (rounded to 3 places)."""
    return str(round(float(c), 3))


# a number's unit, from its key's ending: (ending, unit, scale to that unit)
_UNITS = (("_mbps", "Mbit/s", 1.0), ("_bps", "Mbit/s", 1e-6), ("_ms", "ms", 1.0), ("_us", "µs", 1.0),
          ("_db", "dB", 1.0), ("_dbm", "dBm", 1.0))


def label(key: str) -> str:
    """Return a JSON key written for a person: underscores as spaces, a unit ending as its unit in brackets."""
    k = str(key)
    for end, unit, _ in _UNITS:
        if k.endswith(end):
            return f"{k[:-len(end)].replace('_', ' ')} ({unit})"
    if k.endswith("_ns"):
        return f"{k[:-3].replace('_', ' ')} (ms)"
    if k.endswith("_s") and k not in ("start_s", "end_s"):
        return f"{k[:-2].replace('_', ' ')} (s)"
    return k.replace("_", " ")


def _value(key: str, v: Any) -> str:
    """Return one named value written for a person: bit/s as Mbit/s, ns as ms, epoch seconds as UTC time."""
    k = str(key)
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        for end, _, scale in _UNITS:
            if k.endswith(end):
                return _num(float(v) * scale)
        if k.endswith("_ns") and abs(v) < 1e12:
            return _num(v / 1e6)
        if (k in ("start", "end", "first", "last") or k.endswith(("_s", "_time"))) and 1e9 <= v < 1e10:
            return utc_text(v * NS, 3)
    return _flat(v)


def _flat(v: Any, depth: int = 0) -> str:
    """Return a dict/list/scalar as one line of plain text (keys as `label`s, numbers formatted)."""
    if isinstance(v, dict):
        if depth > 2:
            return "{…}"
        return "; ".join(f"{label(k)}: {_value(k, x) if not isinstance(x, (dict, list)) else _flat(x, depth + 1)}"
                         for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return ", ".join(_flat(x, depth + 1) for x in v)
    return _num(v)


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], cls: str = "") -> str:
    """Return an HTML table; cells must already be HTML (escaped), headers are escaped here."""
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{esc(cls)}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


# ---------------------------------------------------------------------------------------------
# data helpers


def _width(span_ns: int, base_ns: int, max_points: int) -> int:
    """Return a bin width (a multiple of base_ns) giving at most max_points bins over span_ns."""
    base_ns = max(int(base_ns), 1)
    k = max(1, math.ceil(max(span_ns, 1) / (base_ns * max_points)))
    return base_ns * k


def _ms(ns: np.ndarray) -> np.ndarray:
    return np.asarray(ns, dtype=np.float64) / 1e6


def _timed(df: pl.DataFrame, col: str) -> pl.DataFrame:
    """Return the rows of df whose time column is set (a null time has no place on the axis)."""
    return df.filter(pl.col(col).is_not_null()) if col in df.columns else df


def _gapped(x_ns: np.ndarray, y: np.ndarray, gap_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """Return x (ms) and y with NaN inserted where consecutive points are over gap_ns apart (a line break).

    Points without a finite time are dropped: cast to an integer they would be the year 1677."""
    x_ns = np.asarray(x_ns)
    y = np.asarray(y, dtype=np.float64)
    if x_ns.dtype.kind == "f":
        ok = np.isfinite(x_ns)
        x_ns, y = x_ns[ok].astype(np.int64), y[ok]
    else:
        x_ns = x_ns.astype(np.int64)
    if len(x_ns) < 2:
        return _ms(x_ns), y
    cut = np.nonzero(np.diff(x_ns) > gap_ns)[0] + 1
    x = _ms(x_ns)
    return np.insert(x, cut, np.nan), np.insert(y, cut, np.nan)


def _thin(x: np.ndarray, y: np.ndarray, max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """Return at most max_points points keeping, per slice, the extremes (spikes survive thinning)."""
    n = len(x)
    if n <= max_points:
        return x, y
    k = math.ceil(n / (max_points // 2))
    m = n // k * k
    xs, ys = x[:m].reshape(-1, k), y[:m].reshape(-1, k)
    yy = np.where(np.isnan(ys), -np.inf, ys)
    hi = yy.argmax(axis=1)
    yy = np.where(np.isnan(ys), np.inf, ys)
    lo = yy.argmin(axis=1)
    rows = np.arange(len(xs))
    first, second = np.minimum(lo, hi), np.maximum(lo, hi)
    keep = np.column_stack([np.ones(len(rows), bool), second != first]).ravel()   # flat slice: one point
    ox = np.column_stack([xs[rows, first], xs[rows, second]]).ravel()[keep]
    oy = np.column_stack([ys[rows, first], ys[rows, second]]).ravel()[keep]
    return np.concatenate([ox, x[m:]]), np.concatenate([oy, y[m:]])


def _table_or_empty(tl: Any, name: str) -> pl.DataFrame:
    try:
        return tl.table(name)
    except KeyError:
        return pl.DataFrame()


def _vantage_of(tl: Any, capture_file: str) -> str:
    for e in tl.bundle.captures:
        if e.file == capture_file:
            return e.vantage
    return capture_file


ROLES = {"offered": "offered: at the first capture on the flow's path (what its sender put on it)",
         "forwarded": "forwarded: at a capture between the sender and the last capture",
         "forwarded on the air": "forwarded on the air: the transmissions an air capture saw (not what arrived)",
         "delivered": "delivered: at the last capture on the flow's path"}


def flow_roles(tl: Any) -> dict[tuple[str, str], str]:
    """Return {(flow, capture_file): role}: what a rate of the flow measured at that capture is (`ROLES`).

    The path order is the `owd` table's (upstream -> downstream pairs of captures); a flow seen at one
    capture only, or never matched between two, has no role: its rate is what that capture saw.
    """
    owd = _table_or_empty(tl, "owd")
    if owd.is_empty():
        return {}
    pairs = owd.select("flow", "capture_file_a", "capture_file_b").unique()
    ends = pl.concat([
        pairs.select("flow", pl.col("capture_file_a").alias("capture_file"), pl.lit(True).alias("up"),
                     pl.lit(False).alias("down")),
        pairs.select("flow", pl.col("capture_file_b").alias("capture_file"), pl.lit(False).alias("up"),
                     pl.lit(True).alias("down"))])
    at = ends.group_by("flow", "capture_file").agg(pl.col("up").any(), pl.col("down").any())
    air = [e.file for e in tl.bundle.captures if e.kind == "air"]
    role = (pl.when(~pl.col("down")).then(pl.lit("offered"))
            .when(pl.col("capture_file").is_in(air)).then(pl.lit("forwarded on the air"))
            .when(~pl.col("up")).then(pl.lit("delivered")).otherwise(pl.lit("forwarded")))
    return {(f, c): r for f, c, r in at.select("flow", "capture_file", role.alias("r")).iter_rows()}


def network_names(tl: Any) -> list[dict[str, Any]]:
    """Return the networks the air captures announce: SSID, BSSID and how many beacons/probe responses said so."""
    return _table_or_empty(tl, "networks").to_dicts()


# ---------------------------------------------------------------------------------------------
# figures


def _figure(ctx: _Ctx, key: str, y_label: str, title: str | None = None) -> Any:
    from bokeh.models import DatetimeTickFormatter
    from bokeh.plotting import figure

    p = figure(title=title or PANELS[key], name=key, x_axis_type="datetime", x_range=ctx.x_range,
               height=PANEL_HEIGHT, sizing_mode="stretch_width", y_axis_label=y_label,
               tools="xpan,xwheel_zoom,box_zoom,reset,save", active_drag="xpan", active_scroll="xwheel_zoom",
               min_border_left=80, min_border_right=110, toolbar_location="right")
    p.xaxis.formatter = DatetimeTickFormatter(seconds="%H:%M:%S", milliseconds="%H:%M:%S.%3N",
                                              minsec="%H:%M:%S", minutes="%H:%M", hourmin="%H:%M")
    p.xaxis.axis_label = "time (UTC, reference clock)"
    p.xaxis.axis_label_text_font_size = "8pt"
    p.title.text_font_size = "11pt"
    return p


def _legend(p: Any) -> None:
    """Move the panel's legend above its frame (it hides no data there, and frames keep one width)."""
    if not p.legend:
        return
    lg = p.legend[0]
    p.center.remove(lg)
    lg.orientation = "horizontal"
    lg.ncols = min(3, len(lg.items))
    lg.location = "top_left"
    lg.click_policy = "hide"
    lg.label_text_font_size = "8pt"
    lg.glyph_height = lg.glyph_width = 12
    lg.label_height = 12
    lg.spacing = 2
    lg.padding = 2
    lg.margin = 2
    lg.border_line_alpha = 0
    p.add_layout(lg, "above")


def _hover(p: Any, renderers: list[Any], y_fmt: str, unit: str) -> None:
    from bokeh.models import HoverTool

    if renderers:
        p.add_tools(HoverTool(renderers=renderers, formatters={"@x": "datetime"},
                              tooltips=[("", "$name"), ("time", "@x{%H:%M:%S.%3N}"),
                                        ("value", f"@y{{{y_fmt}}} {unit}")]))


def _line(ctx: _Ctx, p: Any, x_ns: np.ndarray, y: np.ndarray, label: str, color: str, gap_ns: int,
          **kw: Any) -> Any:
    from bokeh.models import ColumnDataSource

    x, yy = _gapped(x_ns, y, gap_ns)
    x, yy = _thin(x, yy)
    ctx.extent(x)
    src = ColumnDataSource({"x": x, "y": yy})
    kw.setdefault("line_width", 1.6)
    return p.line("x", "y", source=src, color=color, legend_label=label, name=label, **kw)


def _shade(ctx: _Ctx, p: Any, label: bool) -> None:
    """Shade every incident window on a panel (and number them on the first panel)."""
    from bokeh.models import BoxAnnotation, Label

    for i, inc in enumerate(ctx.incidents, 1):
        color = CAUSE_COLORS.get(inc.cause or "", "#999999")
        p.add_layout(BoxAnnotation(left=inc.start_ns / 1e6, right=inc.end_ns / 1e6, fill_color=color,
                                   fill_alpha=0.13, line_color=color, line_alpha=0.5, line_width=1))
        if label:
            p.add_layout(Label(x=inc.start_ns / 1e6, y=4, y_units="screen", x_offset=3,
                               text=f"#{i} {inc.cause or 'unexplained'}", text_font_size="8pt",
                               text_color=color))


# ---------------------------------------------------------------------------------------------
# panels


def _panel_goodput(ctx: _Ctx) -> Any:
    fs = _timed(_table_or_empty(ctx.tl, "flow_series"), "bin_start_ns")
    if fs.is_empty():
        raise _NoData("no flow carried IP packets in any capture")
    # One capture per flow: the one the analysis read it at (its flows table), else the one that saw
    # the most new payload (where the flow is best seen).
    per = fs.group_by("flow", "capture_file", "vantage").agg(pl.col("goodput_bytes").sum().alias("g"))
    read = pl.DataFrame([{"flow": str(f["flow"]), "capture_file": str(f["capture_file"])} for f in ctx.flows
                         if f.get("flow") is not None and f.get("capture_file") is not None],
                        schema={"flow": pl.String, "capture_file": pl.String})
    chosen = per.join(read, on=["flow", "capture_file"], how="semi")
    rest = (per.filter(~pl.col("flow").is_in(chosen["flow"].implode()))
            .sort(["flow", "g"], descending=[False, True]).unique("flow", keep="first", maintain_order=True))
    tot = pl.concat([chosen, rest]).sort(["g", "flow"], descending=[True, False])
    top = float(tot["g"].max() or 0)
    if top <= 0:
        raise _NoData("no flow carried payload (goodput is zero everywhere)")
    keep = tot.filter(pl.col("g") >= 0.01 * top)
    if keep.height > MAX_SERIES:
        ctx.notes.append(f"goodput panel: {keep.height - MAX_SERIES} smaller flows not drawn")
        keep = keep.head(MAX_SERIES)
    bin_ns = int(fs["bin_ns"].max() or ctx.tl.bin_ns)
    p = _figure(ctx, "goodput", "Mbit/s")
    rs = []
    for i, r in enumerate(keep.iter_rows(named=True)):
        s = (fs.filter((pl.col("flow") == r["flow"]) & (pl.col("capture_file") == r["capture_file"]))
             .sort("bin_start_ns"))
        span = int(s["bin_start_ns"].max() - s["bin_start_ns"].min())
        w = _width(span, bin_ns, MAX_POINTS)
        if w > bin_ns:
            # Equal-width bins with empty ones as zeros: the coarse bin's goodput is their mean.
            s = (s.with_columns((pl.col("bin_start_ns") // w * w).alias("bin_start_ns"))
                 .group_by("bin_start_ns").agg(pl.col("goodput_bps").mean()).sort("bin_start_ns"))
        x = s["bin_start_ns"].to_numpy() + w // 2
        role = ctx.roles.get((r["flow"], r["capture_file"]))
        name = f"{r['flow']} @ {r['vantage']}" + (f" ({role})" if role else "")
        rs.append(_line(ctx, p, x, s["goodput_bps"].to_numpy() / 1e6, name, PALETTE[i % len(PALETTE)],
                        gap_ns=20 * NS))
    _hover(p, rs, "0.00", "Mbit/s")
    p.y_range.start = 0
    return p


def _stations(ctx: _Ctx) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Return station_series and the stations drawn (largest first) with their labels; raise _NoData."""
    if not ctx.tl.entries("air"):
        raise _NoData("the bundle has no air (802.11 radio) capture")
    ss = _timed(_table_or_empty(ctx.tl, "station_series"), "bin_start_ns")
    if ss.is_empty():
        raise _NoData("no station exchanged frames with an AP in the air capture(s)")
    many = ss["capture_file"].n_unique() > 1
    who = (ss.group_by("capture_file", "station").agg(pl.col("frames").sum().alias("n"))
           .sort(["n", "station"], descending=[True, False]))
    if who.height > MAX_SERIES:
        ctx.notes.append(f"station panels: {who.height - MAX_SERIES} stations with fewer frames not drawn")
        who = who.head(MAX_SERIES)
    labels = [f"{st} @ {_vantage_of(ctx.tl, f)}" if many else st
              for f, st in zip(who["capture_file"].to_list(), who["station"].to_list())]
    return ss, who.with_columns(pl.Series("label", labels, pl.String))


def _station_panel(ctx: _Ctx, key: str, col: str, y_label: str, scale: float, how: str, fmt: str,
                   unit: str, empty: str) -> Any:
    ss, who = _stations(ctx)
    base = ctx.tl.bin_ns
    p = _figure(ctx, key, y_label)
    rs = []
    for i, r in enumerate(who.iter_rows(named=True)):
        s = (ss.filter((pl.col("capture_file") == r["capture_file"]) & (pl.col("station") == r["station"])
                       & pl.col(col).is_not_null() & pl.col(col).is_not_nan())
             .sort("bin_start_ns"))
        if s.is_empty():
            continue
        span = int(s["bin_start_ns"].max() - s["bin_start_ns"].min())
        w = _width(span, base, MAX_POINTS)
        if w > base:
            agg = pl.col(col).median() if how == "median" else pl.col(col).mean()
            s = (s.with_columns((pl.col("bin_start_ns") // w * w).alias("bin_start_ns"))
                 .group_by("bin_start_ns").agg(agg).sort("bin_start_ns"))
        x = s["bin_start_ns"].to_numpy() + w // 2
        rs.append(_line(ctx, p, x, s[col].to_numpy() * scale, r["label"], PALETTE[i % len(PALETTE)],
                        gap_ns=max(5 * w, 2 * NS)))
    if not rs:
        raise _NoData(empty)
    _hover(p, rs, fmt, unit)
    return p


def _incident_drops(ctx: _Ctx) -> list[tuple[int, str]]:
    """Return (incident number, text) for incidents whose queue-overflow evidence counted AP drops, with its span."""
    out = []
    for i, inc in enumerate(ctx.incidents, 1):
        for c in inc.findings:
            n = c.numbers or {}
            if c.cause == "ap_queue_overflow" and isinstance(n.get("offered"), int) and "span_s" in n:
                out.append((i, f"{n['dropped']:,} of {n['offered']:,} in the {n['span_s']:.1f} s its evidence counts"))
    return out


def _panel_sojourn(ctx: _Ctx) -> Any:
    from bokeh.models import ColumnDataSource, LinearAxis, Range1d

    dl = _timed(_table_or_empty(ctx.tl, "downlink"), "ts_ns")
    if dl.is_empty():
        raise _NoData("no downlink packet could be followed from the AP's wired side to the air "
                      "(the bundle needs the AP's wired capture and an air capture)")
    soj = dl.filter(pl.col("sojourn_ns").is_not_null())
    lost = dl.filter(pl.col("fate").is_in(["dropped_at_ap", "air_unacked"]))
    if soj.is_empty() and lost.is_empty():
        raise _NoData("no downlink packet has a queueing time or a drop at the AP")
    t = dl["ts_ns"].drop_nulls()
    span = int(t.max() - t.min()) if len(t) else 0
    w = _width(span, ctx.tl.bin_ns, 5000)
    title = PANELS["sojourn"]
    n_drop = int((lost["fate"] == "dropped_at_ap").sum())
    whole = (f"over the whole capture, {utc_text(int(t.min()), 1)} to {utc_text(int(t.max()), 1)}"
             if len(t) else "")
    title += (f" ({n_drop:,} of {dl.height:,} downlink packets dropped at the AP {whole}"
              if n_drop else f" (none of {dl.height:,} downlink packets dropped at the AP {whole}")
    title += "".join(f"; #{i}: {c}" for i, c in _incident_drops(ctx)) + ")"
    p = _figure(ctx, "sojourn", "sojourn (ms)", title)
    rs = []
    if not soj.is_empty():
        b = (soj.with_columns((pl.col("ts_ns") // w * w).alias("b"))
             .group_by("b").agg(pl.col("sojourn_ns").quantile(0.5, "nearest").alias("p50"),
                                pl.col("sojourn_ns").quantile(0.95, "nearest").alias("p95"),
                                pl.col("sojourn_ns").max().alias("max"))
             .sort("b"))
        x = b["b"].to_numpy() + w // 2
        for col, color, label, dash in (("max", "#bbbbbb", "max", "dotted"), ("p95", "#d62728", "p95", "solid"),
                                        ("p50", "#1f77b4", "median", "solid")):
            rs.append(_line(ctx, p, x, b[col].to_numpy() / 1e6, f"sojourn {label} per {w / 1e6:g} ms bin", color,
                            gap_ns=max(5 * w, 2 * NS), line_dash=dash))
    if not lost.is_empty():
        d = (lost.with_columns((pl.col("ts_ns") // w * w).alias("b"))
             .group_by("b").agg((pl.col("fate") == "dropped_at_ap").sum().alias("dropped_at_ap"),
                                (pl.col("fate") == "air_unacked").sum().alias("air_unacked"))
             .sort("b"))
        top = max(int(d["dropped_at_ap"].max() or 0), int(d["air_unacked"].max() or 0), 1)
        p.extra_y_ranges = {"drops": Range1d(0, top * 1.15)}
        p.add_layout(LinearAxis(y_range_name="drops", axis_label="packets per bin"), "right")
        x = _ms(d["b"].to_numpy() + w // 2)
        ctx.extent(x)
        for col, color, label in (("dropped_at_ap", "#8c564b", "dropped at the AP"),
                                  ("air_unacked", "#ff7f0e", "failed on the air (never ACKed)")):
            if int(d[col].sum()):
                src = ColumnDataSource({"x": x, "y": d[col].to_numpy().astype(np.float64)})
                rs.append(p.vbar(x="x", top="y", width=w / 1e6 * 0.9, source=src, color=color, alpha=0.7,
                                 legend_label=f"{label} per bin", name=label, y_range_name="drops"))
    _hover(p, rs, "0.0", "")
    p.y_range.start = 0
    return p


# the `delay` table's parts, bottom to top, with their colours and labels
DELAY_PARTS = (("wired_ns", "#7f7f7f", "wired path"), ("queue_load_ns", "#1f77b4", "AP queue (packets ahead)"),
               ("queue_retry_ns", "#ff9896", "AP queue (behind others' retries)"),
               ("access_ns", "#2ca02c", "MAC access"), ("air_ns", "#9467bd", "first transmission"),
               ("fragments_ns", "#bcbd22", "further fragments"), ("retry_ns", "#d62728", "own retries"))


def _panel_delay(ctx: _Ctx) -> Any:
    from bokeh.models import ColumnDataSource

    d = _timed(_table_or_empty(ctx.tl, "delay"), "ts_ns")
    if d.is_empty():
        raise _NoData("no downlink packet was followed from the AP's wired side to its last transmission "
                      "(the bundle needs the AP's wired capture and an air capture)")
    t = d["ts_ns"]
    w = _width(int(t.max() - t.min()), ctx.tl.bin_ns, 2000)
    d = d.with_columns((pl.col("queue_ns") - pl.col("queue_retry_ns")).clip(lower_bound=0).alias("queue_load_ns"),
                       pl.col("wired_ns").fill_null(0).clip(lower_bound=0))
    cols = [c for c, _, _ in DELAY_PARTS]
    b = d.with_columns((pl.col("ts_ns") // w * w).alias("b")).group_by("b").agg(
        *(pl.col(c).mean() for c in cols)).sort("b")
    x = _ms(b["b"].to_numpy() + w // 2)
    ctx.extent(x)
    src = ColumnDataSource({"x": x, **{c: b[c].fill_null(0).to_numpy() / 1e6 for c in cols}})
    p = _figure(ctx, "delay", "mean delay (ms)", PANELS["delay"] + f" ({d.height:,} packets, {w / 1e6:g} ms bins)")
    # (areas take no hover in Bokeh: the legend names the parts, the delay table has the numbers)
    rs = p.varea_stack(stackers=cols, x="x", color=[c for _, c, _ in DELAY_PARTS], alpha=0.8,
                       legend_label=[lab for _, _, lab in DELAY_PARTS], source=src)
    for r, (_, _, lab) in zip(rs, DELAY_PARTS):
        r.name = lab
    p.y_range.start = 0
    return p


def _nearest_sender(ctx: _Ctx, rt: pl.DataFrame) -> pl.DataFrame:
    """Return the retransmissions of each flow counted at one capture: the sender-side one the flow passes first."""
    # Upstream order comes from the one-way delay pairs (a capture with fewer captures upstream of it
    # for the flow is nearer the sender); first-packet time breaks ties, alignment error and all.
    owd = _table_or_empty(ctx.tl, "owd")
    if not owd.is_empty():
        up = (owd.select("flow", "capture_file_a", "capture_file_b").unique()
              .group_by("flow", "capture_file_b").agg(pl.len().alias("upstream"))
              .rename({"capture_file_b": "capture_file"}))
    else:
        up = pl.DataFrame(schema={"flow": pl.String, "capture_file": pl.String, "upstream": pl.UInt32})
    flows = _table_or_empty(ctx.tl, "flows")
    first = (flows.select("flow", "capture_file", "first_ts_ns") if not flows.is_empty()
             else pl.DataFrame(schema={"flow": pl.String, "capture_file": pl.String, "first_ts_ns": pl.Int64}))
    per = (rt.group_by("flow", "capture_file")
           .agg((pl.col("side") == "sender").sum().alias("sender"), pl.len().alias("n"))
           .join(up, on=["flow", "capture_file"], how="left")
           .join(first, on=["flow", "capture_file"], how="left")
           .with_columns(pl.col("upstream").fill_null(0), pl.col("first_ts_ns").fill_null(np.iinfo(np.int64).max))
           .with_columns((pl.col("sender") > 0).alias("sender"))
           .sort(["flow", "sender", "upstream", "first_ts_ns", "n"], descending=[False, True, False, False, True])
           .unique("flow", keep="first", maintain_order=True))
    return rt.join(per.select("flow", "capture_file"), on=["flow", "capture_file"], how="semi")


def _panel_retrans(ctx: _Ctx) -> Any:
    from bokeh.models import ColumnDataSource

    rt = _timed(_table_or_empty(ctx.tl, "retransmissions"), "ts_ns")
    if rt.is_empty():
        raise _NoData("no TCP segment was retransmitted in any capture")
    rt = _nearest_sender(ctx, rt)
    span = int(rt["ts_ns"].max() - rt["ts_ns"].min())
    w = _width(span, ctx.tl.bin_ns, 2000)
    classes = [c for c in RETRANS_COLORS if c in set(rt["class"].to_list())]
    classes += sorted(set(rt["class"].drop_nulls().to_list()) - set(classes))
    b = (rt.with_columns((pl.col("ts_ns") // w * w).alias("b"))
         .group_by("b").agg([(pl.col("class") == c).sum().cast(pl.Float64).alias(c) for c in classes]).sort("b"))
    x = _ms(b["b"].to_numpy() + w // 2)
    ctx.extent(x)
    data = {"x": x, **{c: b[c].to_numpy() for c in classes}}
    counted = ", ".join(sorted(set(rt["capture_file"].to_list())))
    p = _figure(ctx, "retrans", f"segments per {w / 1e6:g} ms",
                f"{PANELS['retrans']} ({rt.height:,} segments, counted at the capture nearest each sender: {counted})")
    rs = p.vbar_stack(classes, x="x", width=w / 1e6 * 0.9, source=ColumnDataSource(data),
                      color=[RETRANS_COLORS.get(c, "#333333") for c in classes], legend_label=classes,
                      name=classes)
    from bokeh.models import HoverTool

    p.add_tools(HoverTool(renderers=rs, formatters={"@x": "datetime"},
                          tooltips=[("class", "$name"), ("time", "@x{%H:%M:%S.%3N}"), ("segments", "@$name")]))
    p.y_range.start = 0
    return p


def _sockets(ctx: _Ctx) -> tuple[pl.DataFrame, list[tuple[str, str]]]:
    hs = ctx.tl.host_state()
    if hs.is_empty():
        raise _NoData("the bundle has no host TCP state samples (a tcp_state capture)")
    hs = _table_or_empty(ctx.tl, "host_state")
    if hs.is_empty() or "flow" not in hs.columns:
        raise _NoData("no host TCP state sample could be tied to a flow")
    socks = (hs.filter(pl.col("flow").is_not_null()).group_by("vantage", "flow").agg(pl.len().alias("n"))
             .sort(["n", "flow"], descending=[True, False]))
    pairs = [(r["vantage"], r["flow"]) for r in socks.iter_rows(named=True)]
    if len(pairs) > 4:
        ctx.notes.append(f"host panels: {len(pairs) - 4} sockets with fewer samples not drawn")
    return hs, pairs[:4]


def _host_line(ctx: _Ctx, p: Any, s: pl.DataFrame, col: str, scale: float, label: str, color: str,
               **kw: Any) -> Any | None:
    s = _timed(s.filter(pl.col(col).is_not_null()), "ts_ns").sort("ts_ns")
    if s.is_empty():
        return None
    t = s["ts_ns"].to_numpy()
    gap = int(np.median(np.diff(t)) * 20) if len(t) > 2 else 10 * NS
    return _line(ctx, p, t, s[col].to_numpy().astype(np.float64) * scale, label, color, gap_ns=max(gap, NS), **kw)


def _panel_cwnd(ctx: _Ctx) -> Any:
    hs, pairs = _sockets(ctx)
    p = _figure(ctx, "cwnd", "segments")
    rs = []
    for i, (v, f) in enumerate(pairs):
        s = hs.filter((pl.col("vantage") == v) & (pl.col("flow") == f))
        r = _host_line(ctx, p, s, "cwnd", 1.0, f"cwnd {f} @ {v}", PALETTE[i % len(PALETTE)])
        if r is not None:
            rs.append(r)
        th = s.filter(pl.col("ssthresh").is_not_null())["ssthresh"]
        if len(th) and int(th.max()) < 1_000_000:      # Linux's "infinite" initial ssthresh is not drawn
            r = _host_line(ctx, p, s, "ssthresh", 1.0, f"ssthresh {f} @ {v}", PALETTE[i % len(PALETTE)],
                           line_dash="dashed", line_alpha=0.6)
            if r is not None:
                rs.append(r)
    if not rs:
        raise _NoData("the host samples carry no congestion window")
    _hover(p, rs, "0", "segments")
    p.y_range.start = 0
    return p


def _owd_for(ctx: _Ctx, flow: str, vantage: str) -> tuple[pl.DataFrame, str] | None:
    """Return a host's flow's one-way delay per packet from that host to the farthest capture, and the path.

    The owd table pairs captures hop by hop (or every pair); from the host's capture (else the flow's
    first) the path follows, at each capture, the nearest next one (smallest median delay), up to the
    last capture that is not an air sniffer; a packet's delay is the direct pair's, else the sum over
    the hops it was seen at, joined by frame numbers.
    """
    owd = _table_or_empty(ctx.tl, "owd")
    if owd.is_empty():
        return None
    o = owd.filter((pl.col("flow") == flow) & pl.col("owd_ns").is_not_null())
    if o.is_empty():
        return None
    pairs = (o.group_by("capture_file_a", "capture_file_b", "vantage_a", "vantage_b")
             .agg(pl.col("owd_ns").median().alias("m")).sort("m"))
    heads = pairs.filter(pl.col("vantage_a") == vantage)
    if heads.is_empty():
        # No capture at the host: start where nothing is upstream of the flow.
        heads = pairs.filter(~pl.col("capture_file_a").is_in(pairs["capture_file_b"].implode()))
        if heads.is_empty():
            heads = pairs
    hop = heads.row(0, named=True)
    path, seen = [hop], {hop["capture_file_a"], hop["capture_file_b"]}
    while True:
        nxt = pairs.filter((pl.col("capture_file_a") == path[-1]["capture_file_b"])
                           & ~pl.col("capture_file_b").is_in(list(seen)))
        if nxt.is_empty() or len(path) > 8:
            break
        path.append(nxt.row(0, named=True))
        seen.add(path[-1]["capture_file_b"])
    # End at the last capture on the path that is not a passive air sniffer (the receiver's own view
    # is the delay TCP meets), and take the direct pair when the table has it.
    kind = {e.file: e.kind for e in ctx.tl.bundle.captures}
    ends = [i for i, h in enumerate(path) if kind.get(h["capture_file_b"]) != "air"]
    if ends:
        path = path[:ends[-1] + 1]
    direct = pairs.filter((pl.col("capture_file_a") == path[0]["capture_file_a"])
                          & (pl.col("capture_file_b") == path[-1]["capture_file_b"]))
    if len(path) > 1 and not direct.is_empty():
        path = [direct.row(0, named=True)]
    cur = None
    for h in path:
        rows = o.filter((pl.col("capture_file_a") == h["capture_file_a"])
                        & (pl.col("capture_file_b") == h["capture_file_b"]))
        if cur is None:
            cur = rows.select("ts_ns", "owd_ns", pl.col("frame_b").alias("frame"))
        else:
            hop = rows.select(pl.col("frame_a").alias("frame"), pl.col("frame_b"), pl.col("owd_ns").alias("d"))
            cur = (cur.join(hop, on="frame", how="inner")
                   .select("ts_ns", (pl.col("owd_ns") + pl.col("d")).alias("owd_ns"), pl.col("frame_b").alias("frame")))
    names = [path[0]["vantage_a"]] + [h["vantage_b"] for h in path]
    where = f"{names[0]} to {names[-1]}" + (f" (via {', '.join(names[1:-1])})" if len(names) > 2 else "")
    return cur.select("ts_ns", "owd_ns"), where


def _panel_rto(ctx: _Ctx) -> Any:
    from bokeh.models import ColumnDataSource

    hs, pairs = _sockets(ctx)
    p = _figure(ctx, "rto", "ms")
    rs = []
    no_owd = []
    for i, (v, f) in enumerate(pairs):
        color = PALETTE[i % len(PALETTE)]
        s = hs.filter((pl.col("vantage") == v) & (pl.col("flow") == f))
        for col, label, kw in (("rto_us", "rto", {"line_width": 2.2}), ("srtt_us", "srtt", {"line_dash": "dashed"})):
            r = _host_line(ctx, p, s, col, 1e-3, f"{label} {f} @ {v}", color, **kw)
            if r is not None:
                rs.append(r)
        got = _owd_for(ctx, f, v)
        if got is None:
            no_owd.append(f)
            continue
        o, where = got
        o = o.filter(pl.col("owd_ns").is_not_null() & pl.col("ts_ns").is_not_null()).sort("ts_ns")
        label = f"one-way delay {where}"
        if o.height > MAX_POINTS:
            # The largest delay of a bin is what meets the RTO: keep the maximum per bin.
            span = int(o["ts_ns"].max() - o["ts_ns"].min())
            w = _width(span, 1_000_000, MAX_POINTS)
            o = (o.with_columns((pl.col("ts_ns") // w * w + w // 2).alias("ts_ns"))
                 .group_by("ts_ns").agg(pl.col("owd_ns").max()).sort("ts_ns"))
            label += f" (max per {w / 1e6:g} ms)"
        x = _ms(o["ts_ns"].to_numpy())
        ctx.extent(x)
        src = ColumnDataSource({"x": x, "y": o["owd_ns"].to_numpy() / 1e6})
        rs.append(p.scatter("x", "y", source=src, size=2.5, color="#555555" if i == 0 else color, alpha=0.6,
                            legend_label=label, name=label))
    if not rs:
        raise _NoData("the host samples carry no rto or srtt")
    if no_owd:
        ctx.notes.append("rto panel: no one-way delay for " + ", ".join(no_owd)
                         + " (the flow was not seen at two aligned captures)")
    _hover(p, rs, "0.0", "ms")
    p.y_range.start = 0
    # Before the first RTT sample the RTO is 1-3 s; let the range fit what follows (reset keeps it, zoom out shows all).
    ys = [np.asarray(r.data_source.data["y"], dtype=np.float64) for r in rs]
    ys = [y[np.isfinite(y)] for y in ys]
    ys = [y for y in ys if len(y)]
    if ys:
        top = max(float(np.quantile(y, 0.98)) for y in ys)
        peak = max(float(y.max()) for y in ys)
        owd_peak = max((float(np.nanmax(r.data_source.data["y"])) for r in rs
                        if r.glyph.__class__.__name__ == "Scatter"), default=0.0)
        end = max(top, owd_peak) * 1.15
        if 0 < end < peak:
            p.y_range.end = end
    return p


def _panels(ctx: _Ctx) -> list[tuple[str, Callable[[], Any]]]:
    return [
        ("goodput", lambda: _panel_goodput(ctx)),
        ("phy_rate", lambda: _station_panel(ctx, "phy_rate", "phy_rate_mbps", "Mbit/s", 1.0, "mean", "0.0", "Mbit/s",
                                            "no data frame from the AP to a station carried a PHY rate")),
        ("retry", lambda: _station_panel(ctx, "retry", "retry_fraction", "fraction retried", 1.0, "mean", "0.00", "",
                                         "no station sent or received data frames")),
        ("airtime", lambda: _station_panel(ctx, "airtime", "airtime_share", "share of the air", 1.0, "mean", "0.00", "",
                                           "no airtime could be computed")),
        ("rssi", lambda: _station_panel(ctx, "rssi", "signal_dbm", "dBm", 1.0, "median", "0", "dBm",
                                        "the radio headers carry no signal strength of the stations' frames")),
        ("sojourn", lambda: _panel_sojourn(ctx)),
        ("delay", lambda: _panel_delay(ctx)),
        ("retrans", lambda: _panel_retrans(ctx)),
        ("cwnd", lambda: _panel_cwnd(ctx)),
        ("rto", lambda: _panel_rto(ctx)),
    ]


# ---------------------------------------------------------------------------------------------
# tables


def _frames_html(frames: Sequence[Any], limit: int = 6) -> str:
    out = [f"{esc(f.capture_file)} #{int(f.frame)} <span class=dim>{esc(f.what)}</span>" for f in frames[:limit]]
    if len(frames) > limit:
        out.append(f"<span class=dim>… {len(frames) - limit} more</span>")
    return "<br>".join(out)


def _incidents_html(analysis: Analysis, t0_ns: int | None) -> str:
    if not analysis.incidents and not analysis.flows:
        # nothing was watched: "no drop" would claim more than was looked at
        n = len(analysis.flows_left_out)
        if n == 0:
            return ("<p>No incident, and none could be seen: no packet capture carried an IP flow (drop "
                    "detection reads flows from packet captures; see the notes).</p>")
        return (f"<p>No incident, and none could be seen: no flow met drop detection's rate and duration "
                f"({n} flow{'s' if n != 1 else ''} left out, see Flows and the notes).</p>")
    if not analysis.incidents:
        return "<p>No incident: no flow's goodput fell well below its own baseline.</p>"
    rows = []
    for i, inc in enumerate(analysis.incidents, 1):
        color = CAUSE_COLORS.get(inc.cause or "", "#999999")
        rel = "" if t0_ns is None else f"<br><span class=dim>+{(inc.start_ns - t0_ns) / NS:.2f} s</span>"
        others = ", ".join(f"{esc(c.cause)} {conf_text(c.confidence)}" for c in inc.findings[1:]) or "-"
        top = inc.findings[0] if inc.findings else None
        ev = []
        for c in inc.findings:
            nums = esc(_flat(c.numbers)) if c.numbers else ""
            who = ", ".join(esc(x) for x in [*c.stations, *c.flows])
            # the JSON's "because" repeats the explaining cause's summary, shown beside it already
            why = (f"<br><span class=dim>a consequence: explained by {esc(c.explained_by)}</span>"
                   if c.explained_by else "")
            ev.append(f"<li><b>{esc(c.cause)}</b> ({conf_text(c.confidence)}): {esc(c.summary)}" + why
                      + (f"<br><span class=dim>{nums}</span>" if nums else "")
                      + (f"<br><span class=dim>concerns: {who}</span>" if who else "")
                      + (f"<br>{_frames_html(c.frames)}" if c.frames else "") + "</li>")
        drop = "".join(f"<li>{esc(k)}: {esc(_flat(v) if isinstance(v, dict) else _value(k, v))}</li>"
                       for k, v in inc.drop.items())
        detail = (f"<details><summary>{esc(top.summary) if top else 'no cause found evidence'}</summary>"
                  f"<ul>{''.join(ev)}</ul>" + (f"<p class=dim>drop per flow:</p><ul>{drop}</ul>" if drop else "")
                  + "</details>")
        rows.append([f'<span class=swatch style="background:{color}"></span>{i}',
                     f"{esc(utc_text(inc.start_ns, 3))}{rel}",
                     f"{(inc.end_ns - inc.start_ns) / NS:.2f}",
                     esc(inc.kind),
                     f"<b>{esc(inc.cause or 'unexplained')}</b> {conf_text(inc.confidence)}",
                     others,
                     "<br>".join(esc(f) for f in inc.flows),
                     "<br>".join(esc(s) for s in inc.stations) or "-",
                     detail])
    return _table(["#", "start (UTC)", "duration (s)", "kind", "cause (confidence)", "other causes", "flows",
                   "stations", "evidence"], rows, "incidents")


def _generic_html(rows: Sequence[dict[str, Any]], limit: int = 50) -> str:
    """Return rows of dicts as a table: headers are the keys as `label`s (units in brackets)."""
    if not rows:
        return "<p>-</p>"
    keys: list[str] = []
    for r in rows:
        for k in r:
            if k not in keys:
                keys.append(k)
    body = [[esc(_value(k, r.get(k, ""))) for k in keys] for r in rows[:limit]]
    more = f"<p class=dim>… {len(rows) - limit} more not shown</p>" if len(rows) > limit else ""
    return _table([label(k) for k in keys], body) + more


def mbit(bps: Any) -> str:
    """Return a bit rate in Mbit/s with two decimals, as the flows table shows it ("-" when unknown)."""
    if not isinstance(bps, (int, float)) or isinstance(bps, bool) or not math.isfinite(bps):
        return "-"
    return f"{bps / 1e6:,.2f}"


def _flows_html(flows: Sequence[dict[str, Any]], roles: dict[tuple[str, str], str], limit: int = 50) -> str:
    """Return the analysis' data flows as a table: where each was read, what its rate is, over which span."""
    if not flows:
        return "<p>No flow met drop detection's rate and duration (see below and the notes).</p>"
    rows = []
    for f in flows[:limit]:
        role = roles.get((f.get("flow"), f.get("capture_file")))
        start, end = f.get("start"), f.get("end")
        span = (f"{end - start:.2f}" if isinstance(start, (int, float)) and isinstance(end, (int, float)) else "-")
        rows.append([esc(f.get("flow", "")),
                     esc(f.get("vantage") or "-") + (f"<br><span class=dim>{esc(f['capture_file'])}</span>"
                                                      if f.get("capture_file") else ""),
                     esc(ROLES.get(role, "as this capture saw it (no other capture matched the flow)")),
                     esc(f.get("station") or "-"),
                     esc(_value("start", start)) if start is not None else "-",
                     span, mbit(f.get("goodput_bps")),
                     esc(_num(f["packets"])) if isinstance(f.get("packets"), int) else "-"])
    more = f"<p class=dim>… {len(flows) - limit} more not shown</p>" if len(flows) > limit else ""
    return ("<p class=dim>The flows drop detection read, each at one capture: goodput is new payload over "
            "the flow's first to last packet there.</p>"
            + _table(["flow", "measured at", "rate measured", "station", "first packet (UTC)", "over (s)",
                      "goodput (Mbit/s)", "packets"], rows, "flows") + more)


_LEFT_OUT = {"no_payload": "no payload (not a data flow)", "below_rate": "below --min-rate",
             "too_short": "shorter than --min-flow-duration",
             "below_rate_and_too_short": "below --min-rate and shorter than --min-flow-duration"}


def _left_out_html(rows_in: Sequence[dict[str, Any]], limit: int = 50) -> str:
    """Return the flows drop detection left out as a table, each with the numbers that decided it."""
    if not rows_in:
        return ""
    rows = []
    for f in rows_in[:limit]:
        rate = f.get("rate_bps")
        rows.append([esc(f.get("flow", "")),
                     esc(f.get("vantage") or "-") + (f"<br><span class=dim>{esc(f['capture_file'])}</span>"
                                                      if f.get("capture_file") else ""),
                     esc(_num(f["payload_bytes"])) if isinstance(f.get("payload_bytes"), int) else "-",
                     f"{f['duration_s']:.2f}" if isinstance(f.get("duration_s"), (int, float)) else "-",
                     "-" if not isinstance(rate, (int, float)) else f"{rate / 1e3:,.1f}",
                     esc(_LEFT_OUT.get(f.get("reason") or "", f.get("reason") or "-"))])
    more = f"<p class=dim>… {len(rows_in) - limit} more not shown</p>" if len(rows_in) > limit else ""
    return ("<p class=dim>Flows seen but left out of drop detection (lower --min-rate or --min-flow-duration "
            "to consider them), at the capture that saw most of each:</p>"
            + _table(["flow", "seen at", "payload (bytes)", "over (s)", "payload rate (kbit/s)", "left out because"],
                     rows, "flows_left_out") + more)


def _alignment_html(tl: Any) -> str:
    al = tl.alignment
    rows = []
    for c in al.captures:
        rows.append([esc(c.file), esc(c.vantage), esc(c.clock),
                     "-" if c.offset_s is None else f"{c.offset_s:+.9f}",
                     "-" if c.skew_ppm is None else f"{c.skew_ppm:+.3f}",
                     "-" if c.skew_se_ppm is None else f"{c.skew_se_ppm:.3f}",
                     f"{c.matched:,}",
                     "-" if c.residual_us is None else f"{c.residual_us:.1f}",
                     "-" if c.uncertainty_us is None else f"{c.uncertainty_us:,.1f}",
                     esc(c.status), esc(c.method), "<br>".join(esc(n) for n in c.notes)])
    doubt = [c for c in al.captures if c.status != "aligned"]
    head = (f"<p>Reference: <b>{esc(al.reference)}</b> (clock {esc(al.reference_clock)}); every time on this "
            "page is on that clock.</p>")
    if doubt:
        head += ("<p><b>Not aligned well:</b> " + "; ".join(f"{esc(c.file)}: {esc(c.status)}" for c in doubt)
                 + ". Times of these captures may be off by the uncertainty shown.</p>")
    path = equal_delay_sentence(al.as_json())
    if path:
        head += f"<p>{esc(path[0].upper() + path[1:])}.</p>"
    return head + _table(["file", "vantage", "clock", "offset (s)", "skew (ppm)", "skew std. error (ppm)", "matched",
                          "residual (µs)",
                          "uncertainty (µs)", "status", "method", "notes"], rows)


def _header_html(tl: Any, analysis: Analysis, nets: list[dict[str, Any]], t0: int | None, t1: int | None,
                 title: str) -> str:
    b = tl.bundle
    tags = {**b.tags, **(analysis.tags or {})}
    tag_html = " ".join(f'<span class=tag>{esc(k)}={esc(v)}</span>' for k, v in tags.items()) or "-"
    if nets:
        net_html = ", ".join(f"<b class=ssid>{esc(n['ssid'])}</b> <span class=dim>({esc(n['bssid'])}, "
                             f"{n['frames']:,} frames)</span>" for n in nets[:20])
        if len(nets) > 20:
            net_html += f" <span class=dim>… {len(nets) - 20} more</span>"
    else:
        net_html = "<span class=dim>none announced (no beacon or probe response captured)</span>"
    caps = ", ".join(f"{esc(e.file)} <span class=dim>({esc(e.kind)}, {esc(e.vantage)})</span>" for e in b.captures)
    span = "-" if t0 is None else f"{esc(utc_text(t0, 3))} to {esc(utc_text(t1, 3))} ({(t1 - t0) / NS:.1f} s)"
    n = len(analysis.incidents)
    verdict = (f"{n} incident{'s' if n != 1 else ''}" + (": " + ", ".join(
        f"#{i} {esc(inc.cause or 'unexplained')}" for i, inc in enumerate(analysis.incidents[:8], 1)) if n else ""))
    return (f"<h1>{esc(title)}</h1>"
            f"<table class=meta><tr><th>bundle</th><td>{esc(b.path)}</td></tr>"
            f"<tr><th>networks (SSID)</th><td>{net_html}</td></tr>"
            f"<tr><th>captures</th><td>{caps}</td></tr>"
            f"<tr><th>time span</th><td>{span}</td></tr>"
            f"<tr><th>tags</th><td>{tag_html}</td></tr>"
            f"<tr><th>found</th><td><b>{verdict}</b></td></tr>"
            f"<tr><th>doubts, exclusions</th><td>{_doubts_html(tl, analysis)}</td></tr></table>")


def _doubts_html(tl: Any, analysis: Analysis, shown: int = 4) -> str:
    """Return what the reader must know before trusting the page: captures not aligned well, then the
    analysis notes (read errors, sniffer capture loss, protected traffic, flows left out), the first few."""
    al = getattr(tl, "alignment", None)
    poor = [c for c in (al.captures if al is not None else []) if (c.status or "aligned") != "aligned"]
    items = [f"clock of {c.file}: {c.status}" for c in poor] + list(analysis.notes)
    if not items:
        return "<span class=dim>none</span>"
    head = "".join(f"<li>{esc(x)}</li>" for x in items[:shown])
    more = (f"<li class=dim>… {len(items) - shown} more below (Clock alignment, Notes)</li>"
            if len(items) > shown else "")
    return f"<ul class=notes>{head}{more}</ul>"


CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; font-size: 13px; margin: 12px 18px; color: #222; }
h1 { font-size: 20px; margin: 4px 0 8px; } h2 { font-size: 16px; margin: 18px 0 6px; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 4px 0; }
td, th { border: 1px solid #ddd; padding: 3px 6px; vertical-align: top; text-align: left; }
th { background: #f4f4f4; } table.meta th { width: 130px; } .dim { color: #777; font-size: 12px; }
.tag { display: inline-block; background: #eef; border-radius: 3px; padding: 0 4px; margin: 1px;
       font-family: monospace; }
.ssid { font-family: monospace; } .swatch { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
details summary { cursor: pointer; } ul { margin: 2px 0; padding-left: 18px; } .notes li { color: #555; }
"""

TEMPLATE = """
{% block preamble %}<style>{{ css }}</style>{% endblock %}
{% block contents %}
{{ header }}
<h2>Incidents</h2>
{{ incidents }}
<h2>Timeline</h2>
<p class=dim>Shaded: incident windows (colour of their first cause). Drag to pan, wheel to zoom the time axis of every
panel at once; click a legend entry to hide its line.</p>
{{ embed(roots.panels) if has_panels }}
{{ omitted }}
<h2>Flows</h2>
{{ flows }}
<h2>Clock alignment</h2>
{{ alignment }}
{{ notes }}
{% endblock %}
"""


def render_report(tl: Any, analysis: Analysis, *, title: str | None = None,
                  progress: Callable[[str], None] | None = None) -> tuple[str, list[str], dict[str, str], list[str]]:
    """Return the page's HTML, the panels drawn, the panels left out (title: why) and notes."""
    from bokeh.embed import file_html
    from bokeh.layouts import column
    from bokeh.models import Range1d
    from bokeh.resources import INLINE

    step = progress or (lambda s: None)
    ctx = _Ctx(tl=tl, x_range=Range1d(0, 1), incidents=list(analysis.incidents), flows=list(analysis.flows))
    try:
        ctx.roles = flow_roles(tl)
    except Exception as exc:  # noqa: BLE001 - a label must not cost the whole page
        ctx.notes.append(f"flow roles could not be read: {type(exc).__name__}: {exc}")
    step("network names")
    try:
        nets = network_names(tl)
    except Exception as exc:  # noqa: BLE001 - a header detail must not cost the whole page
        nets = []
        ctx.notes.append(f"network names could not be read: {type(exc).__name__}: {exc}")
    figs, drawn, omitted = [], [], {}
    for key, make in _panels(ctx):
        step(f"panel: {key}")
        try:
            with warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always")
                fig = make()
        except _NoData as why:
            omitted[PANELS[key]] = str(why)
            continue
        finally:
            # A numeric warning is a flaw of this panel's data: the page says so, the terminal stays clean.
            for w in said:
                if issubclass(w.category, RuntimeWarning):
                    ctx.notes.append(f"{PANELS[key]}: {w.category.__name__}: {w.message}")
                else:
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        figs.append(fig)
        drawn.append(PANELS[key])
    for inc in ctx.incidents:
        ctx.extent(np.array([inc.start_ns / 1e6, inc.end_ns / 1e6]))
    t0 = t1 = None
    if math.isfinite(ctx.t_min):
        pad = max((ctx.t_max - ctx.t_min) * 0.01, 1.0)
        ctx.x_range.start, ctx.x_range.end = ctx.t_min - pad, ctx.t_max + pad
        t0, t1 = int(ctx.t_min * 1e6), int(ctx.t_max * 1e6)
    for i, f in enumerate(figs):
        _shade(ctx, f, label=i == 0)
        _legend(f)
    step("writing page")
    notes = list(dict.fromkeys(ctx.notes)) + [str(n) for n in analysis.notes]
    notes += [f"{f}: could not be read: {e}" for f, e in tl.errors.items()]
    title = title or f"xlayer report: {Path(str(tl.bundle.path or 'bundle')).name}"
    omitted_html = ("<p><b>Panels left out</b> (no data in this bundle):</p><ul class=notes>"
                    + "".join(f"<li>{esc(k)}: {esc(v)}</li>" for k, v in omitted.items()) + "</ul>") if omitted else ""
    notes_html = ("<h2>Notes</h2><ul class=notes>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>"
                  if notes else "")
    root = column(*figs, name="panels", sizing_mode="stretch_width") if figs else None
    if root is None:
        from bokeh.models import Spacer

        root = Spacer(name="panels", width=1, height=1)
    page = file_html(root, resources=INLINE, title=title, template=TEMPLATE, template_variables={
        "css": CSS, "header": _header_html(tl, analysis, nets, t0, t1, title),
        "incidents": _incidents_html(analysis, t0), "has_panels": True, "omitted": omitted_html,
        "flows": _flows_html(analysis.flows, ctx.roles) + _left_out_html(analysis.flows_left_out),
        "alignment": _alignment_html(tl), "notes": notes_html})
    return page, drawn, omitted, notes


def build_report(tl: Any, analysis: Analysis, path: str | os.PathLike, *, title: str | None = None,
                 progress: Callable[[str], None] | None = None) -> Report:
    """Write the bundle's HTML report to path; return what it holds (panels drawn and left out, size)."""
    page, drawn, omitted, notes = render_report(tl, analysis, title=title, progress=progress)
    out = Path(path)
    write_page(page, out)
    return Report(path=out, panels=drawn, omitted=omitted, size_bytes=out.stat().st_size, notes=notes)


def write_page(page: str, out: Path) -> None:
    """Write the page to `out` whole or not at all (OutputError naming its directory); return None.

    Written to a temporary file beside it and renamed: an interrupt or a full disk leaves the earlier
    file (if any) and no temporary file.
    """
    from xlayer.metrics.export import remove_stale_temps, whole_file, writing_into

    with writing_into(out.absolute().parent):
        remove_stale_temps(out.parent, {out.name})
        with whole_file(out) as tmp:
            tmp.write_text(page, encoding="utf-8")
            os.replace(tmp, out)
