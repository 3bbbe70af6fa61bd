"""What one bundle of a campaign gives: the `xlayer analyze` analysis and per-layer summaries, as small tables.

`analyze_bundle` is the Dask task: it runs in a worker process, never raises for a bad bundle (it returns
an error result, one escaped line) and returns only small polars tables, which the driver writes.

Tables (one Parquet file per bundle each, `xlayer.campaign.store`):
- ``summary``: one row: per-layer summaries of the analysis window (goodput, RTT, one-way delay, jitter,
  loss, retry fraction, PHY rate) and what the theory bounds need (payload, stations, RTS, A-MPDU size).
- ``intervals``: one row per second of the window: goodput, RTT, retry fraction and PHY rate (study 004).
- ``incidents``: one row per incident (cause, confidence, times from the bundle's first packet).
- ``flows``: the data flows the analysis read goodput from.
- ``records``: one row per capture: records read, malformed, bytes skipped (every record accounted for).
"""
from __future__ import annotations

import os
from typing import Any

import polars as pl

NS = 1_000_000_000
INTERVAL_NS = NS            # per-interval series: one row per second (study 004)

SUMMARY_METRICS = ("goodput_bps", "rtt_ms", "owd_ms", "jitter_ms", "loss", "retry_fraction", "phy_rate_mbps")


def one_line(exc: BaseException) -> str:
    """Return an exception as one escaped line (type and message)."""
    from xlayer.text import safe_text

    text = " ".join(str(exc).split()) or type(exc).__name__
    return safe_text(text if type(exc).__name__ in ("BundleError", "CaptureError") else f"{type(exc).__name__}: {text}")


def analyze_bundle(path: str, window: tuple[float, float] | None = None) -> dict[str, Any]:
    """Return {"status": "done", "tables": {...}, "meta": {...}} for one bundle, or {"status": "error",
    "error": one line} when it cannot be analyzed."""
    try:
        return _analyze(path, window)
    except Exception as exc:  # noqa: BLE001 - a bad bundle is a row of the campaign, never its end
        return {"status": "error", "error": one_line(exc)}


def _analyze(path: str, window: tuple[float, float] | None) -> dict[str, Any]:
    from xlayer.attribution.analyze import analyze
    from xlayer.attribution.drops import DropConfig
    from xlayer.bundle.manifest import open_bundle
    from xlayer.metrics import open_timeline

    bundle = open_bundle(path)
    cache = os.environ.get("XLAYER_CAMPAIGN_NO_CACHE") is None
    with open_timeline(bundle, cache=cache) as tl:
        _require_packets(tl)
        an = analyze(tl, DropConfig(window=window))
        caps = tl.table("captures")
        t0 = int(caps["first_ts_ns"].min() or 0)
        t1 = int(caps["last_ts_ns"].max() or 0)
        lo, hi = (t0, t1 + 1) if window is None else (t0 + int(window[0] * NS), t0 + int(window[1] * NS))
        chosen = pl.DataFrame({"flow": [f["flow"] for f in an.flows], "capture_file": [f["capture_file"] for f in an.flows]},
                              schema={"flow": pl.String, "capture_file": pl.String})
        series = (tl.table("flow_series").join(chosen, on=["flow", "capture_file"], how="semi")
                  .filter((pl.col("bin_start_ns") >= lo) & (pl.col("bin_start_ns") < hi)))
        tables = {
            "summary": _summary(tl, an, series, chosen, lo, hi),
            "intervals": _intervals(tl, series, t0, lo, hi),
            "incidents": _incidents(an, t0),
            "flows": _flows(an, t0),
            "records": _records(tl),
        }
        unread = {f: one_line(Exception(e)) for f, e in tl.errors.items()}
    meta = {"incidents": len(an.incidents), "flows": len(an.flows), "notes": len(an.notes), "unread": unread,
            "records": _counts(tables["records"]), "first_ts_ns": t0, "duration_s": (t1 - t0) / NS}
    return {"status": "done", "tables": tables, "meta": meta}


def _require_packets(tl: Any) -> None:
    """Return None if some packet capture was read; else raise BundleError saying so."""
    from xlayer.bundle.manifest import BundleError

    packets = [e.file for e in tl.bundle.captures if e.is_packets]
    if not packets:
        raise BundleError("no packet capture (air or wired) in the bundle; nothing to analyze")
    if all(f in tl.errors for f in packets):
        raise BundleError(f"none of its {len(packets)} packet captures could be read: "
                          + "; ".join(f"{f}: {tl.errors[f]}" for f in packets[:3]))


def _in(df: pl.DataFrame, col: str, lo: int, hi: int) -> pl.DataFrame:
    """Return the rows of `df` whose `col` time is in [lo, hi)."""
    return df.filter((pl.col(col) >= lo) & (pl.col(col) < hi))


def _f(x: Any) -> float | None:
    """Return a polars scalar as a float (None stays None)."""
    return None if x is None else float(x)


def _attempts(tl: Any, lo: int, hi: int) -> pl.DataFrame:
    """Return the air's data-MPDU transmissions in the window (none without an air capture)."""
    if not tl.entries("air"):
        return pl.DataFrame(schema={"ts_ns": pl.Int64, "retry": pl.Boolean, "rate_mbps": pl.Float64,
                                    "ampdu_ref": pl.Int64, "capture_file": pl.String})
    return _in(tl.table("attempts"), "ts_ns", lo, hi)


def _summary(tl: Any, an: Any, series: pl.DataFrame, chosen: pl.DataFrame, lo: int, hi: int) -> pl.DataFrame:
    """Return the bundle's one summary row."""
    span = (series["bin_start_ns"] + series["bin_ns"]).max() - series["bin_start_ns"].min() if series.height else None
    goodput = series["goodput_bytes"].sum() * 8 * NS / span if span else None
    rtt = _in(tl.table("rtt"), "ts_ns", lo, hi)["rtt_ns"]
    owd = _in(tl.table("owd"), "ts_ns", lo, hi)
    loss = tl.table("loss").filter((pl.col("window_end_ns") > lo) & (pl.col("window_start_ns") < hi))
    att = _attempts(tl, lo, hi)
    flows = tl.table("flows").join(chosen, on=["flow", "capture_file"], how="semi")
    packets = flows["packets"].sum()
    stations = tl.table("stations") if tl.entries("air") else pl.DataFrame(schema={"data_mpdus": pl.Int64, "rts": pl.Int64})
    per_ampdu = att.filter(pl.col("ampdu_ref").is_not_null()).group_by("capture_file", "ampdu_ref").len()["len"]
    return pl.DataFrame([{
        "goodput_bps": _f(goodput),
        "rtt_ms": _f(rtt.mean() / 1e6) if rtt.len() else None,
        "owd_ms": _f(owd["owd_ns"].mean() / 1e6) if owd.height else None,
        "jitter_ms": _f(owd["jitter_ns"].mean() / 1e6) if owd.height and owd["jitter_ns"].null_count() < owd.height else None,
        "loss": _f(loss["lost"].sum() / loss["sent"].sum()) if loss.height and loss["sent"].sum() else None,
        "retry_fraction": _f(att["retry"].cast(pl.Float64).mean()) if att.height else None,
        "phy_rate_mbps": _f(att["rate_mbps"].quantile(0.5, "lower")) if att.height else None,
        "payload_bytes": _f(flows["payload_bytes"].sum() / packets) if packets else None,
        "stations": int((stations["data_mpdus"].fill_null(0) > 0).sum()),
        "rts": bool(stations["rts"].fill_null(0).sum() > 0),
        "ampdu": _f(per_ampdu.mean()) if per_ampdu.len() else 1.0,
        "incidents": len(an.incidents),
        "window_s": (hi - lo) / NS,
    }], schema={"goodput_bps": pl.Float64, "rtt_ms": pl.Float64, "owd_ms": pl.Float64, "jitter_ms": pl.Float64,
                "loss": pl.Float64, "retry_fraction": pl.Float64, "phy_rate_mbps": pl.Float64,
                "payload_bytes": pl.Float64, "stations": pl.Int64, "rts": pl.Boolean, "ampdu": pl.Float64,
                "incidents": pl.Int64, "window_s": pl.Float64})


def _intervals(tl: Any, series: pl.DataFrame, t0: int, lo: int, hi: int) -> pl.DataFrame:
    """Return one row per second of the window: goodput (bit/s over the time the flows were seen in it),
    median RTT, retry fraction and median PHY rate."""
    iv = ((pl.col("_t") - t0) // INTERVAL_NS).cast(pl.Int64).alias("interval")
    g = (series.with_columns(pl.col("bin_start_ns").alias("_t")).with_columns(iv)
         .group_by("interval", "flow").agg(pl.col("goodput_bytes").sum(), pl.col("bin_ns").sum())
         .group_by("interval").agg((pl.col("goodput_bytes").sum() * 8 * NS / pl.col("bin_ns").max()).alias("goodput_bps")))
    r = (_in(tl.table("rtt"), "ts_ns", lo, hi).with_columns(pl.col("ts_ns").alias("_t")).with_columns(iv)
         .group_by("interval").agg((pl.col("rtt_ns").median() / 1e6).alias("rtt_ms")))
    a = (_attempts(tl, lo, hi).with_columns(pl.col("ts_ns").alias("_t")).with_columns(iv)
         .group_by("interval").agg(pl.col("retry").cast(pl.Float64).mean().alias("retry_fraction"),
                                   pl.col("rate_mbps").median().cast(pl.Float64).alias("phy_rate_mbps")))
    out = g.join(r, on="interval", how="full", coalesce=True).join(a, on="interval", how="full", coalesce=True)
    return out.with_columns((pl.col("interval").cast(pl.Float64)).alias("t_s")).sort("interval").select(
        "interval", "t_s", pl.col("goodput_bps").cast(pl.Float64), pl.col("rtt_ms").cast(pl.Float64),
        pl.col("retry_fraction").cast(pl.Float64), pl.col("phy_rate_mbps").cast(pl.Float64))


def _incidents(an: Any, t0: int) -> pl.DataFrame:
    """Return one row per incident: kind, cause (None: unexplained), confidence, start and end (s from t0)."""
    return pl.DataFrame([{"incident": k, "kind": i.kind, "cause": i.cause or "unexplained",
                          "confidence": float(i.confidence), "start_s": (i.start_ns - t0) / NS,
                          "end_s": (i.end_ns - t0) / NS} for k, i in enumerate(an.incidents)],
                        schema={"incident": pl.Int64, "kind": pl.String, "cause": pl.String, "confidence": pl.Float64,
                                "start_s": pl.Float64, "end_s": pl.Float64})


def _flows(an: Any, t0: int) -> pl.DataFrame:
    """Return the analysis' data flows (escaped names: they come from the captures)."""
    from xlayer.text import safe_text

    return pl.DataFrame([{"flow": safe_text(f["flow"]), "vantage": safe_text(f["vantage"]),
                          "goodput_bps": _f(f["goodput_bps"]), "packets": int(f["packets"] or 0),
                          "start_s": f["start"] - t0 / NS, "end_s": f["end"] - t0 / NS} for f in an.flows],
                        schema={"flow": pl.String, "vantage": pl.String, "goodput_bps": pl.Float64,
                                "packets": pl.Int64, "start_s": pl.Float64, "end_s": pl.Float64})


def _records(tl: Any) -> pl.DataFrame:
    """Return per capture read: records decoded, malformed, bytes skipped, and whether it could not be read."""
    from xlayer.text import safe_text

    rows = []
    for e in tl.bundle.captures:
        st = tl.read_stats.get(e.file)
        # a capture without read statistics (host-state text is counted by its own reader): nulls, not zeros
        rows.append({"capture_file": safe_text(e.file), "records": st.records if st else None,
                     "decoded": st.decoded if st else None, "malformed": st.malformed if st else None,
                     "skipped_bytes": st.skipped_bytes if st else None, "unread": e.file in tl.errors})
    return pl.DataFrame(rows, schema={"capture_file": pl.String, "records": pl.Int64, "decoded": pl.Int64,
                                      "malformed": pl.Int64, "skipped_bytes": pl.Int64, "unread": pl.Boolean})


def _counts(records: pl.DataFrame) -> dict[str, int]:
    """Return the bundle's record counts summed over its captures."""
    return {k: int(records[k].sum() or 0) for k in ("records", "decoded", "malformed", "skipped_bytes")} | {
        "unread_captures": int(records["unread"].sum())}
