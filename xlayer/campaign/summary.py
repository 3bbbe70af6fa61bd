"""Statistics of a campaign per service condition (a combination of tag values), from its per-bundle tables.

Per condition and metric (`xlayer.campaign.task.SUMMARY_METRICS`, one value per bundle): n, mean, standard
deviation (n - 1), the half-width of the 95 % confidence interval of the mean (Student t with n - 1 degrees
of freedom below 30 bundles, 1.96 from 30 on, as study 002), median, p5 and p95 (linear interpolation).
Also: incidents per cause, the per-second goodput distribution over time (study 004) and CDFs, a class
by mean goodput (study 003: > 100 kB/s good, 30-100 bad, < 30 unacceptable; kB = 1000 bytes), and the
theory bounds (`xlayer.campaign.theory.bounds`) for the condition's parameters beside its mean goodput.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import polars as pl

from xlayer.campaign.store import Store
from xlayer.campaign.task import SUMMARY_METRICS
from xlayer.text import safe_text

# two-sided 95 % Student t quantiles t(0.975, df), df = 1..29
T975 = (12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281, 2.2010, 2.1788,
        2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860, 2.0796, 2.0739, 2.0687, 2.0639,
        2.0595, 2.0555, 2.0518, 2.0484, 2.0452)
NORMAL_FROM = 30
NONE = "(none)"         # a condition tag a bundle does not have
CDF_POINTS = 21         # quantiles 0, 0.05, ..., 1 of the per-second goodput
# tags that override what the measurements say about a condition's theory parameters
OVERRIDES = {"standard": "standard", "access": "standard", "rate_mbps": "rate_mbps",
             "payload_bytes": "payload_bytes", "stations": "stations", "rts": "rts", "ampdu": "ampdu"}


@dataclass
class Thresholds:
    """Class limits on mean goodput, kB/s: above `good` good, from `bad` up to it bad, below unacceptable."""

    good: float = 100.0
    bad: float = 30.0

    def classify(self, bps: float | None) -> str | None:
        """Return the class of a goodput in bit/s (None: no goodput)."""
        if bps is None:
            return None
        kbs = bps / 8 / 1000
        return "good" if kbs > self.good else "bad" if kbs >= self.bad else "unacceptable"


def t_quantile(n: int) -> float | None:
    """Return the 95 % CI factor for a mean of n values (None below 2)."""
    if n < 2:
        return None
    return T975[n - 2] if n < NORMAL_FROM else 1.96


def stats(values: list[float]) -> dict[str, Any]:
    """Return n, mean, std, ci95 (half-width), ci_low, ci_high, median, p5, p95 of the non-null values."""
    s = pl.Series([v for v in values if v is not None and math.isfinite(v)], dtype=pl.Float64)
    n = s.len()
    if n == 0:
        return {"n": 0, "mean": None, "std": None, "ci95": None, "ci_low": None, "ci_high": None,
                "median": None, "p5": None, "p95": None}
    mean = float(s.mean())
    std = float(s.std(ddof=1)) if n > 1 else None
    t = t_quantile(n)
    half = t * std / math.sqrt(n) if t is not None and std is not None else None
    q = {k: float(s.quantile(p, "linear")) for k, p in (("median", 0.5), ("p5", 0.05), ("p95", 0.95))}
    return {"n": n, "mean": mean, "std": std, "ci95": half, "ci_low": None if half is None else mean - half,
            "ci_high": None if half is None else mean + half, **q}


def _conditions(tags: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Return `tags` with every --by tag as a column (NONE where a bundle lacks it) and `condition` text."""
    cols = [pl.lit(NONE).alias(t) if t not in tags.columns else pl.col(t).fill_null(NONE) for t in by]
    df = tags.with_columns(cols) if by else tags
    label = pl.concat_str([pl.lit(f"{t}=") + pl.col(t) for t in by], separator=", ") if by else pl.lit("all bundles")
    return df.with_columns(label.alias("condition"))


def summarize(out: str | os.PathLike, by: list[str], thresholds: Thresholds | None = None) -> dict[str, Any]:
    """Return the campaign's summary per condition of the `by` tags (see the module doc) as JSON-able data."""
    thresholds = thresholds or Thresholds()
    store = Store.read(out)
    tags = _conditions(store.tags(), by)
    summary = store.table("summary")
    incidents = store.table("incidents")
    intervals = store.table("intervals")
    conds = []
    for cond in tags.select(by + ["condition"]).unique().sort(by or "condition").iter_rows(named=True):
        members = tags.filter(pl.col("condition") == cond["condition"])
        keys = members["bundle"].to_list()
        conds.append(_condition(cond, members, _rows(summary, keys), _rows(incidents, keys), _rows(intervals, keys),
                                by, thresholds))
    b = store.bundles.values()
    return {"campaign": safe_text(str(out)), "by": by, "thresholds_kB_per_s": {"good": thresholds.good,
                                                                               "bad": thresholds.bad},
            "bundles": {"done": sum(x["status"] == "done" for x in b), "error": sum(x["status"] == "error" for x in b)},
            "errors": {safe_text(x.get("path") or ""): x.get("error") for x in b if x["status"] == "error"},
            "records": {k: sum((x.get("records") or {}).get(k, 0) for x in b)
                        for k in ("records", "decoded", "malformed", "skipped_bytes", "unread_captures")},
            "conditions": conds}


def _rows(df: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Return the rows of a campaign table that belong to bundles `keys`."""
    return df.filter(pl.col("bundle").is_in(keys)) if df.height else df


def _condition(cond: dict[str, Any], members: pl.DataFrame, summary: pl.DataFrame, incidents: pl.DataFrame,
               intervals: pl.DataFrame, by: list[str], thresholds: Thresholds) -> dict[str, Any]:
    """Return one condition's statistics."""
    metrics = {m: stats(summary[m].to_list() if m in summary.columns else []) for m in SUMMARY_METRICS}
    per_cause = (incidents.group_by("cause").agg(pl.len().alias("count")).sort("cause").to_dicts()
                 if incidents.height else [])
    n = members.height
    bounds = theory(members, summary)
    mean = metrics["goodput_bps"]["mean"]
    ratio = {f"measured_over_{k.removesuffix('_bps')}": (mean / v if mean is not None and v else None)
             for k, v in bounds.items() if k.endswith("_bps")}
    return {"condition": safe_text(cond["condition"]), "tags": {t: safe_text(cond[t]) for t in by}, "n": n,
            "bundles": [safe_text(x) for x in members["bundle_name"].to_list()],
            "metrics": metrics, "class": thresholds.classify(mean),
            "incidents": {safe_text(r["cause"]): {"count": r["count"], "per_bundle": r["count"] / n} for r in per_cause},
            "bounds": bounds, **ratio, "intervals": _over_time(intervals), "cdf": _cdf(summary, intervals)}


def _over_time(intervals: pl.DataFrame) -> list[dict[str, Any]]:
    """Return per second of the window: n bundles, mean, median, p5, p95 of goodput (study 004)."""
    if intervals.height == 0:
        return []
    g = pl.col("goodput_bps").filter(pl.col("goodput_bps").is_finite())
    per = intervals.group_by("interval").agg(
        g.len().alias("n"), g.mean().alias("mean"), g.median().alias("median"),
        g.quantile(0.05, "linear").alias("p5"), g.quantile(0.95, "linear").alias("p95")).sort("interval")
    return per.to_dicts()


def _cdf(summary: pl.DataFrame, intervals: pl.DataFrame) -> dict[str, Any]:
    """Return the CDFs of goodput: per bundle (every value, sorted) and per second (CDF_POINTS quantiles)."""
    per_bundle = sorted(v for v in (summary["goodput_bps"].to_list() if summary.height else [])
                        if v is not None and math.isfinite(v))
    n = len(per_bundle)
    g = (intervals["goodput_bps"].drop_nulls().filter(intervals["goodput_bps"].drop_nulls().is_finite())
         if intervals.height else pl.Series([], dtype=pl.Float64))
    qs = [k / (CDF_POINTS - 1) for k in range(CDF_POINTS)]
    return {"bundles": [[v, (i + 1) / n] for i, v in enumerate(per_bundle)],
            "seconds": [[float(g.quantile(q, "linear")), q] for q in qs] if g.len() else []}


def _tag_value(members: pl.DataFrame, tag: str) -> str | None:
    """Return the one value every bundle of the condition has for `tag`, or None."""
    if tag not in members.columns:
        return None
    vals = members[tag].unique().to_list()
    return vals[0] if len(vals) == 1 and vals[0] is not None else None


def parameters(members: pl.DataFrame, summary: pl.DataFrame) -> dict[str, Any]:
    """Return the condition's theory parameters: from the measurements (median PHY rate, mean payload,
    median active stations, RTS seen, mean A-MPDU size, standard by aggregation), tags overriding."""
    def col(name: str) -> pl.Series:
        return summary[name].drop_nulls() if summary.height and name in summary.columns else pl.Series([], dtype=pl.Float64)

    rate, payload, sta, ampdu = col("phy_rate_mbps"), col("payload_bytes"), col("stations"), col("ampdu")
    p: dict[str, Any] = {
        "rate_mbps": float(rate.quantile(0.5, "lower")) if rate.len() else None,
        "payload_bytes": int(round(payload.mean())) if payload.len() else None,
        "stations": max(1, int(round(sta.median()))) if sta.len() else 1,
        "rts": bool(col("rts").any()) if col("rts").len() else False,
        "ampdu": max(1, int(round(ampdu.mean()))) if ampdu.len() else 1,
    }
    p["standard"] = "n" if p["ampdu"] > 1 else "g"
    p["from_tags"] = []
    for tag, name in OVERRIDES.items():
        v = _tag_value(members, tag)
        if v is None or (name == "standard" and "standard" in p["from_tags"]):
            continue
        try:
            p[name] = (v if name == "standard" else v.lower() in ("1", "true", "yes", "on") if name == "rts"
                       else float(v) if name == "rate_mbps" else int(v))
        except ValueError:
            continue
        p["from_tags"].append(name)
    return p


def theory(members: pl.DataFrame, summary: pl.DataFrame) -> dict[str, Any]:
    """Return the condition's parameters and bounds ({"bianchi_bps", "max_bps"}, or why there is none)."""
    p = parameters(members, summary)
    out: dict[str, Any] = {"parameters": p}
    if p["rate_mbps"] is None or p["payload_bytes"] is None:
        return out | {"note": "no PHY rate or payload measured"}
    try:
        from xlayer.campaign.theory import bounds
    except ImportError as exc:
        return out | {"note": f"theory bounds unavailable: {safe_text(exc)}"}
    try:
        b = bounds(p["standard"], p["rate_mbps"], p["payload_bytes"], p["stations"], rts=p["rts"], ampdu=p["ampdu"])
    except (ValueError, KeyError, ArithmeticError) as exc:
        return out | {"note": f"no bound for these parameters: {safe_text(exc)}"}
    return out | {"bianchi_bps": float(b["bianchi_bps"]), "max_bps": float(b["max_bps"])}


def _num(x: float | None, scale: float = 1.0, fmt: str = ".2f") -> str:
    return "-" if x is None else format(x / scale, fmt)


def summary_text(s: dict[str, Any]) -> str:
    """Return the summary as readable text: one block per condition."""
    lines = [f"campaign {s['campaign']}: {s['bundles']['done']} bundles analyzed, {s['bundles']['error']} failed; "
             f"records {s['records']['records']:,} read, {s['records']['malformed']:,} malformed, "
             f"{s['records']['skipped_bytes']:,} bytes skipped"]
    units = {"goodput_bps": ("Mbit/s", 1e6), "rtt_ms": ("ms", 1), "owd_ms": ("ms", 1), "jitter_ms": ("ms", 1),
             "loss": ("", 1), "retry_fraction": ("", 1), "phy_rate_mbps": ("Mbit/s", 1)}
    for c in s["conditions"]:
        lines.append(f"{c['condition']}: n={c['n']}, class {c['class'] or '-'}")
        lines.append(f"  {'metric':16s} {'n':>3s} {'mean':>9s} {'std':>9s} {'95% CI':>21s} {'median':>9s} "
                     f"{'p5':>9s} {'p95':>9s}")
        for m, st in c["metrics"].items():
            unit, k = units[m]
            ci = "-" if st["ci95"] is None else f"[{_num(st['ci_low'], k)}, {_num(st['ci_high'], k)}]"
            lines.append(f"  {m + (' ' + unit if unit else ''):16s} {st['n']:>3d} {_num(st['mean'], k):>9s} "
                         f"{_num(st['std'], k):>9s} {ci:>21s} {_num(st['median'], k):>9s} {_num(st['p5'], k):>9s} "
                         f"{_num(st['p95'], k):>9s}")
        b = c["bounds"]
        if "bianchi_bps" in b:
            p = b["parameters"]
            lines.append(f"  theory (802.11{str(p['standard']).removeprefix('802.11')}, {p['rate_mbps']:g} Mbit/s, {p['payload_bytes']} B, "
                         f"{p['stations']} station(s), RTS {'on' if p['rts'] else 'off'}, A-MPDU {p['ampdu']}): "
                         f"measured / Bianchi {_num(c.get('measured_over_bianchi'))}, "
                         f"measured / max {_num(c.get('measured_over_max'))}")
        else:
            lines.append(f"  theory: {b.get('note')}")
        inc = ", ".join(f"{k} {v['count']}" for k, v in c["incidents"].items())
        lines.append(f"  incidents: {inc or 'none'}")
    for path, err in s["errors"].items():
        lines.append(f"failed: {path}: {err}")
    return "\n".join(lines)
