"""What the captures recorded, as tables the causes and the report read instead of the packet tables.

`air_frames` keeps one row per frame an air capture recorded: who sent it to whom, its frame type, its
FCS verdict and its airtime (`xlayer.timeline.airtime`); `networks` the SSIDs and BSSIDs the air captures
announce (beacons, probe responses); `captures` each packet capture's span and count on the reference
clock.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from parsers.schema import SCHEMA
from xlayer.metrics.schema import Column, conform, register
from xlayer.metrics.stations import NEEDS as STATION_NEEDS
from xlayer.metrics.stations import capture_airtime
from xlayer.timeline.airtime import airtime_ns

if TYPE_CHECKING:
    from xlayer.timeline.open import Timeline

NEEDS: tuple[str, ...] = (*STATION_NEEDS, "wlan_ssid")

_C = Column
AIR_FRAMES = register("air_frames", (
    _C("capture_file", pl.Utf8, "", "air capture"),
    _C("frame", pl.Int64, "", "frame number in the capture"),
    _C("ts_ns", pl.Int64, "ns", "stamp, reference clock"),
    _C("wlan_type", pl.UInt8, "", "802.11 frame type (0 management, 1 control, 2 data)"),
    _C("wlan_subtype", pl.UInt8, "", "802.11 frame subtype (control: 11 RTS, 12 CTS, 13 ACK)"),
    _C("wlan_ta", pl.Utf8, "", "transmitter address (null where the frame carries none: CTS, ACK)"),
    _C("wlan_ra", pl.Utf8, "", "receiver address"),
    _C("fcs_bad", pl.Boolean, "", "the frame's FCS failed (null: no FCS captured)"),
    _C("airtime_ns", pl.Int64, "ns", "PPDU duration from length, rate and preamble (null if unknown)"),
), "one frame recorded by an air capture (every record, malformed ones included)")
NETWORKS = register("networks", (
    _C("capture_file", pl.Utf8, "", "air capture"),
    _C("ssid", pl.Utf8, "", "network name as announced (capture text: escape before showing)"),
    _C("bssid", pl.Utf8, "", "AP address announcing it"),
    _C("frames", pl.Int64, "", "beacons and probe responses carrying this SSID from this BSSID"),
), "an SSID announced by a BSSID in an air capture")
CAPTURES = register("captures", (
    _C("capture_file", pl.Utf8, "", "packet capture"),
    _C("vantage", pl.Utf8, "", "where it was taken"),
    _C("kind", pl.Utf8, "", "air or wired"),
    _C("packets", pl.Int64, "", "records read"),
    _C("first_ts_ns", pl.Int64, "ns", "first stamp, reference clock"),
    _C("last_ts_ns", pl.Int64, "ns", "last stamp, reference clock"),
), "one packet capture of the bundle: its records and span on the reference clock")

TABLES = {"air_frames": AIR_FRAMES, "networks": NETWORKS, "captures": CAPTURES}


def air_frames(p: pl.DataFrame, capture_file: str, ppdu_ns: pl.Series | None = None) -> pl.DataFrame:
    """Return the air_frames rows of one air capture's packet table (`ppdu_ns`: its airtime, if known)."""
    air = airtime_ns(p) if ppdu_ns is None else ppdu_ns.alias("airtime_ns")
    df = p.with_columns(air, pl.lit(capture_file, pl.Utf8).alias("capture_file"))
    return conform(df.select([c.name for c in AIR_FRAMES]), AIR_FRAMES)


def networks(p: pl.DataFrame, capture_file: str) -> pl.DataFrame:
    """Return the networks one air capture's beacons and probe responses announce, most frames first."""
    df = (p.filter((pl.col("wlan_type") == 0) & pl.col("wlan_subtype").is_in([5, 8])
                   & pl.col("wlan_ssid").is_not_null())
          .group_by("wlan_ssid", "wlan_bssid").agg(pl.len().alias("frames"))
          .sort(["frames", "wlan_ssid", "wlan_bssid"], descending=[True, False, False])
          .select(pl.lit(capture_file, pl.Utf8).alias("capture_file"), pl.col("wlan_ssid").alias("ssid"),
                  pl.col("wlan_bssid").alias("bssid"), "frames"))
    return conform(df, NETWORKS)


def build(tl: Timeline) -> dict[str, pl.DataFrame]:
    """Return the air_frames, networks and captures tables of the timeline."""
    frames, nets, caps = [], [], []
    for e in tl.entries():
        ts = tl.packets(e, columns=["ts_ns"])["ts_ns"]
        caps.append({"capture_file": e.file, "vantage": e.vantage, "kind": e.kind, "packets": ts.len(),
                     "first_ts_ns": ts.min(), "last_ts_ns": ts.max()})
        if e.kind != "air":
            continue
        p = tl.packets(e, columns=list(NEEDS))
        for c in NEEDS:
            if c not in p.columns:
                p = p.with_columns(pl.lit(None, dtype=SCHEMA[c]).alias(c))
        # the airtime the stations table computed of the same records (or computes now, for it)
        frames.append(air_frames(p, e.file, capture_airtime(tl, e)["ppdu_ns"]))
        nets.append(networks(p, e.file))
        del p
    return {"air_frames": pl.concat(frames) if frames else conform(None, AIR_FRAMES),
            "networks": pl.concat(nets) if nets else conform(None, NETWORKS),
            "captures": conform(pl.DataFrame(caps, schema_overrides={"first_ts_ns": pl.Int64, "last_ts_ns": pl.Int64})
                                if caps else None, CAPTURES)}
