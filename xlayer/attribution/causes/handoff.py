"""Handoff: a station left its AP (a roam to another AP, deauthentication, disassociation, or a lost association).

A *roam*: the station's data frames (``attempts``, every air capture together), or a successful
(re)association response (``mgmt_events``), move from BSSID A to BSSID B.  Its numbers: the time
without data, from its last data frame with A to its first with B; the packets of its flows lost
within `AROUND_NS` of that gap (the larger of the distinct TCP segments its flows retransmitted and
its packets the join found dropped at the AP or unacknowledged on the air: one loss is often both;
a packet that reached the AP's wired side inside the gap and never went on the air is one too: the
join calls it ``unknown``, as no later packet of the station left that AP, and the roam says why);
the (re)association and authentication frames with B in the gap, as evidence.  Other explicit
evidence is a management frame (deauthentication or disassociation, with its reason code).  A lost
association sends nothing: the station falls silent (no frame from it at the sniffer, not even an ACK)
while the AP keeps sending it data that nobody acknowledges.  Either way the station's flows stop; the
window runs from the event until the station is heard again (or the captures end), and it starts a new
incident.

A *rejoin*: a station that had data with an AP (re)associates with that same AP.  It lost its association
on its own side (missed beacons, a driver or firmware reset) though the AP never left.  It is told with a
roam's numbers, from the station's own last data frame: its MAC still acknowledges the AP's frames while
it is away.  It explains a drop of its own station's flows as far as the station was away: away for the
share `threshold` of the window, a flow falls that far by that alone (averaged over the stations whose
flows dropped, each counted up to that share).  A rejoin starts no window of its own: it is found in the
drops it explains, and it follows its station's weakening link or MAC retries there
(`xlayer.attribution.causality`).
"""
from __future__ import annotations

import polars as pl

from xlayer.attribution.causes.base import LEAD_NS, NS, Context, Window, frames
from xlayer.attribution.incidents import CauseFinding, FrameRef

NAME = "handoff"
COLOR = "#1f77b4"          # its incidents in the report
MEANING = "a station left its AP: a roam to another AP, deauthentication, disassociation or a lost association"
EXPLICIT = ("deauth", "disassoc")
JOINS = ("auth", "assoc_req", "assoc_resp", "reassoc_req", "reassoc_resp")   # a station joining a BSS
AROUND_NS = NS              # the roam's losses are counted this long either side of its time without data
NOT_DELIVERED = ("dropped_at_ap", "air_unacked")
MIN_UNANSWERED = 7          # the AP's data to a silent station: about one MPDU's retry limit
MIN_SILENCE_NS = NS
MIN_REJOIN_CONF = 0.05      # below this a rejoin (away a few ms) makes no finding


def _lost(ctx: Context) -> list[dict]:
    """Return stations that fell silent while the AP still sent to them: {station, ts_ns, frame, file, unanswered}."""
    # asked by `propose` and again by `score` in every window: one pass over the air frames
    return ctx.memo("handoff:lost", lambda: _find_lost(ctx))


def _find_lost(ctx: Context) -> list[dict]:
    out = []
    att = ctx.table("attempts")
    end = ctx.span[1]
    af = ctx.table("air_frames")
    for file in af["capture_file"].unique(maintain_order=True).to_list():
        # a capture's rows copied with only the columns read below (not every column the analysis keeps)
        p = af.lazy().filter(pl.col("capture_file") == file).select(
            "ts_ns", "frame", "wlan_ta", "wlan_ra", "wlan_type", "wlan_subtype").collect()
        a = att.lazy().filter(pl.col("capture_file") == file).select(
            "ts_ns", "station", "direction", "acked_by", "ack_frame").collect() if att.height else att
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
            # Under a Block Ack agreement the AP asks for the missing Block Ack with BlockAckReqs
            # rather than sending the data again, and under RTS/CTS it sends RTSs that no CTS answers
            # and no data follows: unanswered, they are the same sign.
            asks = p.filter((pl.col("wlan_type") == 1) & pl.col("wlan_subtype").is_in([8, 11])
                            & (pl.col("wlan_ra") == st) & (pl.col("ts_ns") > t_up))
            bars = int((asks["wlan_subtype"] == 8).sum())
            rts = asks.height - bars
            unanswered = after.height + bars + rts
            if unanswered >= MIN_UNANSWERED and end - t_up >= MIN_SILENCE_NS:
                out.append({"station": st, "ts_ns": t_up, "frame": last_frame, "file": last_file,
                            "unanswered": unanswered, "bars": bars, "rts": rts, "until_ns": end})
    return out


def _bss_sequence(ctx: Context) -> pl.DataFrame:
    """Return {station, ts_ns, capture_file, frame, ap, data, up} of every data transmission of a station (data;
    up: sent by the station) and successful (re)association response (not data) of every air capture, by
    station and time."""
    att = ctx.table("attempts")
    parts = []
    if att.height:
        # A station is with an AP while data passes between them: frames one side acknowledged.  The
        # AP's unanswered retries to a station that already left, or the station's to an AP that no
        # longer hears it, prove nothing (they would end its time with the old AP late, or look like
        # a roam back).
        # lazily: only the columns selected are copied for the rows kept, not every column the analysis keeps
        parts.append(att.lazy().filter(pl.col("direction").is_in(["down", "up"]) & pl.col("acked").fill_null(False)
                                       & pl.col("station").is_not_null()).select(
            "station", "ts_ns", "capture_file", "frame",
            pl.when(pl.col("direction") == "down").then(pl.col("ta")).otherwise(pl.col("ra")).alias("ap"),
            pl.lit(True).alias("data"), (pl.col("direction") == "up").alias("up")).collect())
    me = ctx.table("mgmt_events")
    if me.height:
        parts.append(me.filter(pl.col("event").is_in(["assoc_resp", "reassoc_resp"]) & (pl.col("status") == 0)
                               & pl.col("station").is_not_null() & pl.col("bssid").is_not_null()).select(
            "station", "ts_ns", "capture_file", "frame", pl.col("bssid").alias("ap"), pl.lit(False).alias("data"),
            pl.lit(False).alias("up")))
    if not parts:
        return pl.DataFrame(schema={"station": pl.Utf8, "ts_ns": pl.Int64, "capture_file": pl.Utf8,
                                    "frame": pl.Int64, "ap": pl.Utf8, "data": pl.Boolean, "up": pl.Boolean})
    return pl.concat(parts, how="vertical_relaxed").sort("station", "ts_ns", "capture_file", "frame")


def roams(ctx: Context) -> list[dict]:
    """Return every roam (module docstring), in time order: station, from/to BSSID, the last data frame with
    the old AP and the first with the new one (ts, capture file, frame; first: null if none was seen) and
    gap_ns (null without data with the new AP); `losses` adds the rest."""
    return ctx.memo("handoff:roams", lambda: _roams(ctx))


def _roams(ctx: Context) -> list[dict]:
    seq = _bss_sequence(ctx)
    # Once a station is seen (re)associating with an AP, frames it still exchanges with another (it
    # acknowledges any frame addressed to it that it hears, associated or not) are no roam back
    # until it associates there again.
    seq = (seq.with_columns(pl.when(~pl.col("data")).then(pl.col("ap")).forward_fill().over("station")
                            .alias("_assoc"))
           .filter(pl.col("_assoc").is_null() | (pl.col("ap") == pl.col("_assoc"))).drop("_assoc"))
    prev = pl.col("ap").shift(1).over("station")
    ch = seq.select("station", "ts_ns", "ap", prev.alias("from_bssid")).filter(
        pl.col("from_bssid").is_not_null() & (pl.col("ap") != pl.col("from_bssid"))).select(
        "station", pl.col("ts_ns").alias("at"), "from_bssid", pl.col("ap").alias("to_bssid"))
    if ch.height == 0:
        return []
    data = seq.filter(pl.col("data")).sort("ts_ns")
    ch = ch.sort("at")
    last = ch.join_asof(data.select("station", pl.col("ts_ns").alias("last_ts_ns"),
                                    pl.col("capture_file").alias("last_file"), pl.col("frame").alias("last_frame"),
                                    pl.col("ap").alias("from_bssid"), pl.col("ts_ns").alias("_l")),
                        left_on="at", right_on="_l", by=["station", "from_bssid"], strategy="backward",
                        check_sortedness=False)
    # the first data with the new AP, unless the station has moved again before it
    nxt = pl.col("at").shift(-1).over("station", order_by="at")
    both = last.with_columns(nxt.alias("_next")).join_asof(
        data.select("station", pl.col("ts_ns").alias("first_ts_ns"), pl.col("capture_file").alias("first_file"),
                    pl.col("frame").alias("first_frame"), pl.col("ap").alias("to_bssid"), pl.col("ts_ns").alias("_f")),
        left_on="at", right_on="_f", by=["station", "to_bssid"], strategy="forward", check_sortedness=False)
    seen = pl.col("_next").is_null() | (pl.col("first_ts_ns") < pl.col("_next"))
    both = both.with_columns(*(pl.when(seen).then(pl.col(c)).alias(c) for c in ("first_ts_ns", "first_file",
                                                                                "first_frame")))
    out = []
    for r in both.sort("at").iter_rows(named=True):
        if r["last_ts_ns"] is None:
            continue            # only a response before any data: a station's first association
        r["gap_ns"] = None if r["first_ts_ns"] is None else r["first_ts_ns"] - r["last_ts_ns"]
        out.append({k: v for k, v in r.items() if not k.startswith("_")})
    return out


def rejoins(ctx: Context) -> list[dict]:
    """Return every rejoin, in time order: a station that had data with an AP (re)associating with the same AP,
    its association lost on its side (missed beacons, a driver reset) though the AP never left it.  Keys as
    `roams` (from_bssid = to_bssid): the last data with the AP before the join, the first after it."""
    return ctx.memo("handoff:rejoins", lambda: _rejoins(ctx))


def _rejoins(ctx: Context) -> list[dict]:
    seq = _bss_sequence(ctx)
    if seq.height == 0:
        return []
    prev = lambda c: pl.col(c).shift(1).over("station")  # noqa: E731 - one shift, two columns
    joins = seq.with_columns(prev("data").alias("_pd"), prev("ap").alias("_pa")).filter(
        ~pl.col("data") & pl.col("_pd").fill_null(False) & (pl.col("_pa") == pl.col("ap"))).select(
        "station", "ap", pl.col("ts_ns").alias("at"))
    if joins.height == 0:
        return []
    # A station that lost its association still acknowledges the AP's frames (the MAC answers any frame
    # addressed to it) but hands nothing up and sends no data: its own data frames mark when it was there
    # (all its data where it sends none)
    data = seq.filter(pl.col("data"))
    own = data.filter(pl.col("up"))
    data = pl.concat([own, data.join(own.select("station").unique(), on="station", how="anti")]).sort("ts_ns")
    d = lambda pre: data.select("station", "ap", pl.col("ts_ns").alias(f"{pre}_ts_ns"),  # noqa: E731
                                pl.col("capture_file").alias(f"{pre}_file"), pl.col("frame").alias(f"{pre}_frame"),
                                pl.col("ts_ns").alias("_t"))
    both = (joins.sort("at").join_asof(d("last"), left_on="at", right_on="_t", by=["station", "ap"],
                                       strategy="backward", check_sortedness=False).drop("_t")
            .join_asof(d("first"), left_on="at", right_on="_t", by=["station", "ap"], strategy="forward",
                       check_sortedness=False).drop("_t"))
    out = []
    for r in both.sort("at").iter_rows(named=True):
        if r["last_ts_ns"] is None:
            continue
        gap = None if r["first_ts_ns"] is None else r["first_ts_ns"] - r["last_ts_ns"]
        out.append({"station": r["station"], "at": r["at"], "from_bssid": r["ap"], "to_bssid": r["ap"],
                    **{k: r[k] for k in ("last_ts_ns", "last_file", "last_frame", "first_ts_ns", "first_file",
                                         "first_frame")}, "gap_ns": gap})
    return out


def losses(ctx: Context, r: dict) -> dict:
    """Return the roam `r` (of `roams`) with its flows, losses around its time without data (retransmissions,
    dropped, lost) and the frames joining the new BSS (joins); counted once, when first asked."""
    if "lost" not in r:
        # only the roams a window asks about: a capture flapping between APs does not cost a pass each
        r.update(_losses(ctx, r))
    return r


def _losses(ctx: Context, r: dict) -> dict:
    """Return the losses and joining frames of roam `r` (see `losses`)."""
    st, r = r["station"], dict(r)
    end = r["first_ts_ns"] if r["first_ts_ns"] is not None else max(r["at"], r["last_ts_ns"])
    s, e = r["last_ts_ns"] - AROUND_NS, end + AROUND_NS
    r["flows"] = ctx.flows_of([st])
    rt = ctx.between("retransmissions", s, e)
    r["retransmissions"] = (rt.filter(pl.col("flow").is_in(r["flows"])).select("flow", "seq").unique().height
                            if rt.height and r["flows"] else 0)
    dropped = 0
    gap = (pl.col("ts_ns") >= r["last_ts_ns"]) & (pl.col("ts_ns") <= end)
    stranded = (pl.col("fate") == "unknown") & pl.col("first_air_frame").is_null() & gap
    for name in ("downlink", "uplink"):
        t = ctx.between(name, s, e)
        if t.height:
            lost = pl.col("fate").is_in(list(NOT_DELIVERED)) | (stranded if name == "downlink" else False)
            dropped += t.filter((pl.col("station") == st) & lost).height
    r["dropped"] = dropped
    r["lost"] = max(r["retransmissions"], dropped)
    me = ctx.between("mgmt_events", r["last_ts_ns"], end + 1)
    joins = (me.filter((pl.col("station") == st) & (pl.col("bssid") == r["to_bssid"]) & pl.col("event").is_in(JOINS))
             if me.height else me)
    r["joins"] = joins.select("capture_file", "frame", "ts_ns", "event", "status").to_dicts() if joins.height else []
    return {k: r[k] for k in ("flows", "retransmissions", "dropped", "lost", "joins")}


def _roam_text(r: dict) -> str:
    """Return one sentence naming a roam (or a rejoin: the same AP both sides) and its numbers."""
    if r["from_bssid"] == r["to_bssid"]:
        gap = (f"{r['gap_ns'] / 1e6:,.0f} ms without data" if r["gap_ns"] is not None
               else "no data with it after that seen")
        return (f"station {r['station']} lost its association with AP {r['to_bssid']} and joined it again: {gap}, "
                f"{r['lost']:,} packets lost")
    gap = (f"{r['gap_ns'] / 1e6:,.0f} ms without data" if r["gap_ns"] is not None
           else "no data with the new AP seen")
    return (f"station {r['station']} roamed from AP {r['from_bssid']} to AP {r['to_bssid']}: {gap}, "
            f"{r['lost']:,} packets lost")


def _roam_numbers(r: dict) -> dict:
    """Return a roam's numbers for the finding JSON."""
    keys = ("station", "from_bssid", "to_bssid", "gap_ns", "last_ts_ns", "last_file", "last_frame", "first_ts_ns",
            "first_file", "first_frame", "lost", "retransmissions", "dropped")
    out = {k: r[k] for k in keys}
    out["gap_ms"] = None if r["gap_ns"] is None else r["gap_ns"] / 1e6
    out["joins"] = [{"capture_file": j["capture_file"], "frame": j["frame"], "event": j["event"]} for j in r["joins"]]
    return out


def _roam_frames(r: dict) -> list[FrameRef]:
    """Return the roam's evidence frames: the last data with the old AP, the joining frames, the first with the new."""
    again = " again" if r["from_bssid"] == r["to_bssid"] else ""
    out = [FrameRef(r["last_file"], int(r["last_frame"]), f"last data frame with {r['from_bssid']}")]
    out += [FrameRef(j["capture_file"], int(j["frame"]), f"{j['event']} with {r['to_bssid']}") for j in r["joins"]]
    if r["first_frame"] is not None:
        out.append(FrameRef(r["first_file"], int(r["first_frame"]), f"first data frame with {r['to_bssid']}{again}"))
    return out


def _roam_end(ctx: Context, r: dict) -> int:
    """Return the end of a roam's event window: its first data with the new AP, else the captures' end."""
    return int(r["first_ts_ns"]) if r["first_ts_ns"] is not None else ctx.span[1]


def _explicit(ctx: Context) -> pl.DataFrame:
    me = ctx.table("mgmt_events")
    return me.filter(pl.col("event").is_in(list(EXPLICIT))) if me.height else me


def score(ctx: Context, w: Window) -> CauseFinding | None:
    """Return the evidence of a station leaving its AP in (or just before) the window."""
    s, e = w.start_ns - LEAD_NS, w.end_ns
    rs = [losses(ctx, r) for r in roams(ctx) if r["last_ts_ns"] < e and _roam_end(ctx, r) >= s
          and (not w.stations or r["station"] in w.stations)]
    if rs:
        text = _roam_text(rs[0]) + (f"; {len(rs) - 1} more roam(s)" if len(rs) > 1 else "")
        stations = sorted({r["station"] for r in rs})
        return CauseFinding(NAME, 0.9, text, {"roams": [_roam_numbers(r) for r in rs]}, stations=stations,
                            flows=ctx.flows_of(stations), frames=[f for r in rs for f in _roam_frames(r)][:6])
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
            bars, rts = lost["bars"], lost["rts"]
            data = lost["unanswered"] - bars - rts
            asks = ", ".join(f"{n:,} {what}" for n, what in ((bars, "Block Ack requests"), (rts, "RTS")) if n)
            what = (f"{data:,} data transmissions and {asks}, unanswered," if asks
                    else f"{data:,} unanswered data transmissions")
            text = f"{lost['station']} fell silent (association lost): the AP sent it {what} after its last frame"
            return CauseFinding(NAME, 0.85, text, {"station": lost["station"], "unanswered": lost["unanswered"],
                                                   "block_ack_requests": bars, "rts": rts},
                                stations=[lost["station"]], flows=ctx.flows_of([lost["station"]]),
                                frames=[FrameRef(lost["file"], lost["frame"], "last frame from the station")])
    # A rejoin explains the drop of its own station's flows, as far as the station was away: a flow away for
    # a share `threshold` of the window fell that far by that alone.  Over the stations whose flows dropped.
    dropped = set(w.drop)
    rj = [losses(ctx, r) for r in rejoins(ctx) if r["last_ts_ns"] < e and _roam_end(ctx, r) >= s
          and (not w.stations or r["station"] in w.stations)
          and (not dropped or not dropped.isdisjoint(ctx.flows_of([r["station"]])))]
    if not rj:
        return None
    span = max(w.end_ns - w.start_ns, 1)
    away: dict[str, int] = {}
    for r in rj:
        gone = min(_roam_end(ctx, r), w.end_ns) - max(r["last_ts_ns"], w.start_ns)
        away[r["station"]] = away.get(r["station"], 0) + max(gone, 0)
    hit = ctx.stations_of(sorted(dropped)) if dropped else sorted(away)
    conf = 0.9 * sum(min(1.0, away.get(st, 0) / (ctx.cfg.threshold * span)) for st in hit) / max(len(hit), 1)
    if conf < MIN_REJOIN_CONF:
        return None
    rj.sort(key=lambda r: -away[r["station"]])
    text = _roam_text(rj[0]) + (f"; {len(rj) - 1} more rejoin(s)" if len(rj) > 1 else "")
    stations = sorted(away)
    return CauseFinding(NAME, conf, text, {"rejoins": [_roam_numbers(r) for r in rj]}, stations=stations,
                        flows=ctx.flows_of(stations), frames=[f for r in rj for f in _roam_frames(r)][:6])


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
    for r in roams(ctx):
        out.append(Window(int(r["last_ts_ns"]), max(_roam_end(ctx, r), int(r["last_ts_ns"]) + 1),
                          ctx.flows_of([r["station"]]), [r["station"]], kind="event", proposer=NAME))
    for lost in _lost(ctx):
        out.append(Window(lost["ts_ns"], lost["until_ns"], ctx.flows_of([lost["station"]]), [lost["station"]],
                          kind="event", proposer=NAME))
    return out
