"""Handoff: a station left its AP (deauthentication, disassociation, a new BSSID, or a lost association).

Explicit evidence is a management frame (deauthentication or disassociation, with its reason code)
or the station's data moving to another BSSID (`mgmt_events`).  A lost association sends nothing:
the station falls silent (no frame from it at the sniffer, not even an ACK) while the AP keeps
sending it data that nobody acknowledges.  Either way the station's flows stop; the window runs from
the event until the station is heard again (or the captures end), and it starts a new incident.
"""
from __future__ import annotations

import polars as pl

from xlayer.attribution.causes.base import LEAD_NS, NS, Context, Window, frames
from xlayer.attribution.incidents import CauseFinding, FrameRef

NAME = "handoff"
COLOR = "#1f77b4"          # its incidents in the report
MEANING = "a station left its AP: deauthentication, disassociation, a new BSSID or a lost association"
EXPLICIT = ("deauth", "disassoc", "bssid_change")
MIN_UNANSWERED = 7          # the AP's data to a silent station: about one MPDU's retry limit
MIN_SILENCE_NS = NS


def _lost(ctx: Context) -> list[dict]:
    """Return stations that fell silent while the AP still sent to them: {station, ts_ns, frame, file, unanswered}."""
    out = []
    att = ctx.table("attempts")
    end = ctx.span[1]
    af = ctx.table("air_frames")
    for file in af["capture_file"].unique(maintain_order=True).to_list():
        p = af.filter(pl.col("capture_file") == file)
        a = att.filter(pl.col("capture_file") == file) if att.height else att
        if a.height == 0:
            continue
        for st in a["station"].drop_nulls().unique().to_list():
            # Signs of life: any frame it sent, or an ACK / Block Ack it returned (those carry no TA).
            sent = p.filter(pl.col("wlan_ta") == st).select("ts_ns", "frame")
            acks = a.filter((pl.col("station") == st) & pl.col("acked_by").is_in(["ack", "blockack"])
                            & pl.col("ack_frame").is_not_null())
            # ... and its packets that reached the AP's wired side (the sniffer may no longer hear it).
            up = ctx.table("uplink")
            up = up.filter((pl.col("station") == st) & pl.col("frame").is_not_null()) if up.height else up
            alive = pl.concat([sent, acks.select(pl.col("ts_ns"), pl.col("ack_frame").alias("frame"))])
            if alive.height == 0:
                continue
            last = alive.sort("ts_ns").tail(1)
            t_up, last_file, last_frame = int(last["ts_ns"][0]), file, int(last["frame"][0])
            if up.height and int(up["ts_ns"].max()) > t_up:
                u = up.sort("ts_ns").tail(1)
                t_up, last_file, last_frame = int(u["ts_ns"][0]), str(u["capture_file"][0]), int(u["frame"][0])
            after = a.filter((pl.col("station") == st) & (pl.col("direction") == "down") & (pl.col("ts_ns") > t_up))
            if after.height >= MIN_UNANSWERED and end - t_up >= MIN_SILENCE_NS:
                out.append({"station": st, "ts_ns": t_up, "frame": last_frame, "file": last_file,
                            "unanswered": after.height, "until_ns": end})
    return out


def _explicit(ctx: Context) -> pl.DataFrame:
    me = ctx.table("mgmt_events")
    return me.filter(pl.col("event").is_in(list(EXPLICIT))) if me.height else me


def score(ctx: Context, w: Window) -> CauseFinding | None:
    """Return the evidence of a station leaving its AP in (or just before) the window."""
    s, e = w.start_ns - LEAD_NS, w.end_ns
    ex = _explicit(ctx)
    if ex.height:
        ex = ex.filter((pl.col("ts_ns") >= s) & (pl.col("ts_ns") < e))
        if w.stations:
            ex = ex.filter(pl.col("station").is_in(w.stations))
    if ex.height:
        r = ex.row(0, named=True)
        why = f" (reason {r['reason']})" if r["reason"] is not None else ""
        text = f"{r['station']}: {r['event']}{why}" + (f", {ex.height - 1} more" if ex.height > 1 else "")
        stations = sorted(ex["station"].drop_nulls().unique().to_list())
        return CauseFinding(NAME, 0.9, text, {"events": ex.select("event", "station", "bssid", "reason").to_dicts()},
                            stations=stations, flows=ctx.flows_of(stations), frames=frames(ex, "management event"))
    for lost in _lost(ctx):
        if s <= lost["ts_ns"] < e and (not w.stations or lost["station"] in w.stations):
            text = (f"{lost['station']} fell silent (association lost): the AP sent it {lost['unanswered']:,} "
                    f"unanswered data transmissions after its last frame")
            return CauseFinding(NAME, 0.85, text, {"station": lost["station"], "unanswered": lost["unanswered"]},
                                stations=[lost["station"]], flows=ctx.flows_of([lost["station"]]),
                                frames=[FrameRef(lost["file"], lost["frame"], "last frame from the station")])
    return None


def propose(ctx: Context) -> list[Window]:
    """Return one event window per handoff: from the event until the station is heard again or the end."""
    out = []
    end = ctx.span[1]
    ex = _explicit(ctx)
    for r in ex.iter_rows(named=True) if ex.height else []:
        st = r["station"]
        later = ctx.table("attempts").filter((pl.col("station") == st) & (pl.col("ts_ns") > r["ts_ns"] + NS))
        until = int(later["ts_ns"].min()) if later.height else end
        out.append(Window(int(r["ts_ns"]), until, ctx.flows_of([st]), [st], kind="event", proposer=NAME))
    for lost in _lost(ctx):
        out.append(Window(lost["ts_ns"], lost["until_ns"], ctx.flows_of([lost["station"]]), [lost["station"]],
                          kind="event", proposer=NAME))
    return out
