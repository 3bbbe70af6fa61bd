"""The campaign's HTML report (Bokeh, every script inline: it works offline).

Panels (figure names in brackets): per-condition bars of each metric's mean with 95 % CI whiskers
[``bars_<metric>``], the theory bounds as markers on the goodput bars; the CDF of per-bundle goodput per
condition [``cdf``]; per-second goodput over time, median and p5-p95 band [``over_time``]; incidents per
bundle by cause and condition as a heat map [``causes``].  A table links each bundle to its own report
(``BUNDLE/report.html``, made by ``xlayer report BUNDLE -o BUNDLE/report.html``).  A metric no bundle
measured has no panel, and the page says so.
"""
from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Any

from xlayer.campaign.summary import Thresholds, summarize
from xlayer.campaign.task import SUMMARY_METRICS

UNITS = {"goodput_bps": ("goodput, Mbit/s", 1e-6), "rtt_ms": ("RTT, ms", 1.0), "owd_ms": ("one-way delay, ms", 1.0),
         "jitter_ms": ("jitter, ms", 1.0), "loss": ("loss ratio", 1.0), "retry_fraction": ("retry fraction", 1.0),
         "phy_rate_mbps": ("PHY rate, Mbit/s", 1.0)}
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")

TEMPLATE = """
{% block preamble %}<style>body{font-family:sans-serif;margin:1em 2em} table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:2px 6px;font-size:90%} .dim{color:#666}</style>{% endblock %}
{% block contents %}
{{ header }}
{{ embed(roots.panels) }}
{{ omitted }}
<h2>Bundles</h2>
{{ bundles }}
{% endblock %}
"""


def _bars(s: dict[str, Any], metric: str) -> Any:
    """Return the bar chart of one metric's mean per condition with CI whiskers (and bounds for goodput)."""
    from bokeh.models import ColumnDataSource, Whisker
    from bokeh.plotting import figure

    label, k = UNITS[metric]
    conds = [c for c in s["conditions"] if c["metrics"][metric]["mean"] is not None]
    names = [c["condition"] for c in conds]
    m = [c["metrics"][metric] for c in conds]
    src = ColumnDataSource({"x": names, "mean": [x["mean"] * k for x in m],
                            "lo": [(x["ci_low"] if x["ci_low"] is not None else x["mean"]) * k for x in m],
                            "hi": [(x["ci_high"] if x["ci_high"] is not None else x["mean"]) * k for x in m],
                            "n": [x["n"] for x in m]})
    f = figure(x_range=names, height=300, sizing_mode="stretch_width", name=f"bars_{metric}",
               title=f"{label}: mean per condition, 95 % CI", tools="hover,save", tooltips=[("mean", "@mean"), ("n", "@n")])
    f.vbar(x="x", top="mean", width=0.7, source=src, color=PALETTE[0], alpha=0.7)
    f.add_layout(Whisker(base="x", lower="lo", upper="hi", source=src))
    if metric == "goodput_bps":
        for key, color, what in (("bianchi_bps", "#d62728", "Bianchi saturation"), ("max_bps", "#2ca02c", "802.11 maximum")):
            xs = [c["condition"] for c in conds if c["bounds"].get(key) is not None]
            ys = [c["bounds"][key] * k for c in conds if c["bounds"].get(key) is not None]
            if xs:
                f.scatter(xs, ys, marker="dash", size=40, line_width=3, color=color, legend_label=what)
        if f.legend:
            f.legend.location = "top_right"
    f.xaxis.major_label_orientation = 0.5 if len(names) > 3 else 0
    f.yaxis.axis_label = label
    f.y_range.start = 0
    return f


def _cdf(s: dict[str, Any]) -> Any:
    """Return the CDF of per-bundle goodput, one step line per condition."""
    from bokeh.plotting import figure

    f = figure(height=300, sizing_mode="stretch_width", name="cdf", title="goodput per bundle: CDF per condition",
               tools="pan,wheel_zoom,reset,save")
    for i, c in enumerate(s["conditions"]):
        pts = c["cdf"]["bundles"]
        if pts:
            pts = [[pts[0][0], 0.0], *pts]      # the curve rises from 0 at the smallest value
            f.step([p[0] / 1e6 for p in pts], [p[1] for p in pts], mode="after", line_width=2,
                   color=PALETTE[i % len(PALETTE)], legend_label=c["condition"])
    f.xaxis.axis_label, f.yaxis.axis_label = "goodput, Mbit/s", "fraction of bundles"
    return f


def _over_time(s: dict[str, Any]) -> Any:
    """Return per-second goodput over time per condition: median line, p5-p95 band."""
    from bokeh.plotting import figure

    f = figure(height=300, sizing_mode="stretch_width", name="over_time",
               title="goodput per second over time: median and p5-p95 over the bundles", tools="pan,wheel_zoom,reset,save")
    for i, c in enumerate(s["conditions"]):
        iv = [r for r in c["intervals"] if r["median"] is not None]
        if not iv:
            continue
        color = PALETTE[i % len(PALETTE)]
        x = [r["interval"] for r in iv]
        f.varea(x=x, y1=[r["p5"] / 1e6 for r in iv], y2=[r["p95"] / 1e6 for r in iv], color=color, alpha=0.2)
        f.line(x, [r["median"] / 1e6 for r in iv], color=color, line_width=2, legend_label=c["condition"])
    f.xaxis.axis_label, f.yaxis.axis_label = "second from the bundle's first packet", "goodput, Mbit/s"
    return f


def _causes(s: dict[str, Any]) -> Any:
    """Return the heat map of incidents per bundle, by cause (x) and condition (y)."""
    from bokeh.models import ColumnDataSource, LinearColorMapper
    from bokeh.plotting import figure

    causes = sorted({k for c in s["conditions"] for k in c["incidents"]}) or ["(no incident)"]
    names = [c["condition"] for c in s["conditions"]]
    rows = [(cause, c["condition"], c["incidents"].get(cause, {}).get("per_bundle", 0.0))
            for c in s["conditions"] for cause in causes]
    src = ColumnDataSource({"cause": [r[0] for r in rows], "condition": [r[1] for r in rows], "rate": [r[2] for r in rows]})
    top = max([r[2] for r in rows] + [1e-9])
    cmap = LinearColorMapper(palette=("#f7fbff", "#c6dbef", "#6baed6", "#2171b5", "#08306b"), low=0, high=top)
    f = figure(x_range=causes, y_range=names, height=120 + 40 * len(names), sizing_mode="stretch_width",
               name="causes", title="incidents per bundle, by cause and condition", tools="hover,save",
               tooltips=[("cause", "@cause"), ("condition", "@condition"), ("per bundle", "@rate")])
    f.rect(x="cause", y="condition", width=1, height=1, source=src, fill_color={"field": "rate", "transform": cmap},
           line_color="#ccc")
    f.xaxis.major_label_orientation = 0.5
    return f


def _bundles_html(out: Path, page: Path) -> str:
    """Return the table of bundles: name, status, tags, a link to its own report (or how to make it)."""
    from xlayer.campaign.store import Store

    rows = []
    for b in Store.read(out).bundles.values():
        path = Path(b.get("path") or "")
        rep = path / "report.html"
        if b.get("status") == "done" and rep.is_file():
            link = f'<a href="{html.escape(Path(os.path.relpath(rep, page.parent)).as_posix())}">report</a>'
        elif b.get("status") == "done":
            link = f"<span class=dim>none yet: xlayer report {html.escape(str(path))} -o {html.escape(str(rep))}</span>"
        else:
            link = html.escape(str(b.get("error") or ""))
        tags = ", ".join(f"{k}={v}" for k, v in (b.get("tags") or {}).items())
        rows.append(f"<tr><td>{html.escape(str(b.get('name')))}</td><td>{html.escape(str(b.get('status')))}</td>"
                    f"<td>{html.escape(tags)}</td><td>{link}</td></tr>")
    return "<table><tr><th>bundle</th><th>status</th><th>tags</th><th>its report</th></tr>" + "".join(rows) + "</table>"


def render_campaign(out: str | os.PathLike, page: Path, by: list[str],
                    thresholds: Thresholds | None = None) -> tuple[str, list[str], dict[str, str], int]:
    """Return the page's HTML, the figure names drawn, the panels left out (name: why), the conditions."""
    from bokeh.embed import file_html
    from bokeh.layouts import column
    from bokeh.resources import INLINE

    s = summarize(out, by, thresholds)
    figs, omitted = [], {}
    for m in SUMMARY_METRICS:
        if any(c["metrics"][m]["mean"] is not None for c in s["conditions"]):
            figs.append(_bars(s, m))
        else:
            omitted[f"bars_{m}"] = "no bundle measured it"
    for name, make, has in (("cdf", _cdf, any(c["cdf"]["bundles"] for c in s["conditions"])),
                            ("over_time", _over_time, any(c["intervals"] for c in s["conditions"])),
                            ("causes", _causes, bool(s["conditions"]))):
        if has:
            figs.append(make(s))
        else:
            omitted[name] = "no data"
    if not figs:
        from bokeh.models import Spacer

        figs = [Spacer(width=1, height=1)]
    header = (f"<h1>xlayer campaign: {html.escape(Path(out).name)}</h1><p>{s['bundles']['done']} bundles analyzed, "
              f"{s['bundles']['error']} failed; conditions by {html.escape(', '.join(by) or 'nothing (all bundles)')}; "
              f"{s['records']['malformed']:,} malformed records, {s['records']['skipped_bytes']:,} bytes skipped</p>"
              + _ratios_html(s))
    omitted_html = ("<p>Left out: " + "; ".join(f"{html.escape(k)}: {html.escape(v)}" for k, v in omitted.items())
                    + "</p>") if omitted else ""
    text = file_html(column(*figs, name="panels", sizing_mode="stretch_width"), resources=INLINE,
                     title=f"xlayer campaign {Path(out).name}", template=TEMPLATE,
                     template_variables={"header": header, "omitted": omitted_html, "bundles": _bundles_html(Path(out), page)})
    return text, [getattr(f, "name", "") for f in figs], omitted, len(s["conditions"])


def _ratios_html(s: dict[str, Any]) -> str:
    """Return the table of measured goodput over the theory bounds per condition."""
    def num(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}"

    rows = "".join(
        f"<tr><td>{html.escape(c['condition'])}</td><td>{c['n']}</td><td>{html.escape(str(c['class']))}</td>"
        f"<td>{num(c['metrics']['goodput_bps']['mean'] and c['metrics']['goodput_bps']['mean'] / 1e6)}</td>"
        f"<td>{num(c.get('measured_over_bianchi'))}</td><td>{num(c.get('measured_over_max'))}</td>"
        f"<td>{html.escape(str(c['bounds'].get('note', '')))}</td></tr>" for c in s["conditions"])
    return ("<table><tr><th>condition</th><th>n</th><th>class</th><th>mean goodput, Mbit/s</th>"
            "<th>measured / Bianchi</th><th>measured / max</th><th>note</th></tr>" + rows + "</table>")


def write_campaign_report(out: str | os.PathLike, page: Path, by: list[str], thresholds: Thresholds | None = None) -> int:
    """Write the campaign report to `page` whole (temporary file + rename); return the number of conditions."""
    from xlayer.report.page import write_page

    text, _names, _omitted, n = render_campaign(out, page, by, thresholds)
    write_page(text, page)
    return n
