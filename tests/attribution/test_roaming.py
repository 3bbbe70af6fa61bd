"""Issue 14 item 4: a station roaming between two APs is a handoff naming the roam, its gap and its losses.

The captures are crafted here (tests/helpers/wifigen.py): radiotap + 802.11 beacons of two BSSs, a
station's data with AP A, an authentication and reassociation with AP B, data with B; and the AP's
wired side, where the packets sent to the station while it had no AP never reach the air.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.common import REPO
from tests.helpers.wifigen import MS, Air, air_bundle
from xlayer.attribution.analyze import analyze
from xlayer.attribution.causes import handoff
from xlayer.attribution.causes.base import Context
from xlayer.attribution.drops import DropConfig
from xlayer.metrics import open_timeline

A, B = "02:00:00:00:0a:01", "02:00:00:00:0b:01"
STA, STAY_A, STAY_B = "02:00:00:00:00:01", "02:00:00:00:00:02", "02:00:00:00:00:03"
T0_NS = 1_700_000_000 * 10**9
LOST = 30                   # packets the AP's wired side got for STA during its gap


def _two_bss(air: Air, end: float = 2.0) -> None:
    air.beacons(A, "net", 0, end)
    air.beacons(B, "net", 0.05, end)


def _hop(to: str, resume: float) -> Air:
    """Return two BSSs and STA with data with A until 0.99 s, reassociating with `to` at 1.1 s, data from `resume`."""
    air = Air()
    _two_bss(air)
    air.stream(A, STA, 0.0, 1.0)
    air.reassociate(1.1, STA, A, to)
    air.stream(to, STA, resume, 2.0)
    return air


def _roam_bundle(d: Path, wired: bool = True) -> Path:
    """STA: data with A until 0.99 s, reassociation with B at 1.1 s, data with B from 1.302 s (312 ms without data)."""
    air = Air()
    _two_bss(air)
    last_a = air.stream(A, STA, 0.0, 1.0)
    assert last_a == 0.99
    for i in range(LOST):
        air.dropped(1.0 + i * 10 * MS, A, STA)
    air.reassociate(1.1, STA, A, B)
    air.stream(B, STA, 1.302, 2.0)
    air.stream(A, STAY_A, 0.005, 2.0)       # a station that stays
    return air_bundle(d, air, wired=wired)


def _ctx(bundle: Path) -> Context:
    return Context(open_timeline(bundle), DropConfig())


def test_roam_is_named_with_its_gap_losses_and_frames(tmp_path):
    b = _roam_bundle(tmp_path / "roam")
    ctx = _ctx(b)
    (r,) = handoff.roams(ctx)
    r = handoff.losses(ctx, r)
    assert (r["station"], r["from_bssid"], r["to_bssid"]) == (STA, A, B)
    assert r["gap_ns"] == 312_000_000
    assert r["last_ts_ns"] == T0_NS + 990_000_000 and r["first_ts_ns"] == T0_NS + 1_302_000_000
    assert r["dropped"] == LOST and r["lost"] == LOST
    assert [j["event"] for j in r["joins"]] == ["auth", "auth", "reassoc_req", "reassoc_resp"]
    # the window proposed is the roam's time without data, for the roaming station only
    (w,) = handoff.propose(ctx)
    assert (w.start_ns, w.end_ns, w.stations, w.kind) == (r["last_ts_ns"], r["first_ts_ns"], [STA], "event")
    assert w.flows == ctx.flows_of([STA]) and len(w.flows) == 1
    f = handoff.score(ctx, w)
    assert f.summary == f"station {STA} roamed from AP {A} to AP {B}: 312 ms without data, {LOST} packets lost"
    (n,) = f.numbers["roams"]
    assert (n["gap_ms"], n["lost"], n["from_bssid"], n["to_bssid"]) == (312.0, LOST, A, B)
    # the evidence frames: last data with A, the 4 joining frames, first data with B -- each what it says
    what = [(x.frame, x.what.split(" with ")[0]) for x in f.frames]
    assert what[0] == (r["last_frame"], "last data frame") and what[-1] == (r["first_frame"], "first data frame")
    assert [w for _, w in what[1:-1]] == ["auth", "auth", "reassoc_req", "reassoc_resp"]
    # the other station is not part of it
    assert handoff.score(ctx, handoff.Window(w.start_ns, w.end_ns, stations=[STAY_A])) is None


def test_roam_in_analyze_json(tmp_path):
    """The CLI's JSON has a handoff incident at the roam, its numbers in the evidence."""
    b = _roam_bundle(tmp_path / "roam")
    r = subprocess.run([sys.executable, "-m", "xlayer", "analyze", str(b), "--json"], capture_output=True,
                       text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    incs = [i for i in json.loads(r.stdout)["incidents"] if "handoff" in i["evidence"]]
    assert len(incs) == 1
    ev = incs[0]["evidence"]["handoff"]
    assert "roamed from AP" in ev["summary"] and ev["stations"] == [STA]
    (n,) = ev["numbers"]["roams"]
    assert n["gap_ns"] == 312_000_000 and n["lost"] == LOST
    assert incs[0]["start"] == pytest.approx(1_700_000_000.99) and incs[0]["end"] == pytest.approx(1_700_000_001.302)


def test_air_only_roam_has_its_gap_and_no_losses_it_cannot_see(tmp_path):
    """Without the AP's wired side nothing says what was lost: 0, never a guess."""
    ctx = _ctx(_roam_bundle(tmp_path / "roam", wired=False))
    (r,) = handoff.roams(ctx)
    r = handoff.losses(ctx, r)
    assert r["gap_ns"] == 312_000_000 and r["lost"] == 0 and r["dropped"] == 0


def test_tcp_retransmissions_around_the_roam_are_its_losses(tmp_path):
    """Segments the AP got during the gap and the server sent again after it: lost once, not twice."""
    air = _hop(B, 1.302)
    for i in range(3):
        air.wired_tcp(1.0 + i * MS, A, STA, 1000 + 100 * i)
        air.wired_tcp(1.5 + i * MS, A, STA, 1000 + 100 * i)          # the server's retransmission
    ctx = _ctx(air_bundle(tmp_path / "tcp", air, wired=True))
    (r,) = handoff.roams(ctx)
    r = handoff.losses(ctx, r)
    assert any(f.startswith("tcp ") for f in r["flows"])
    assert (r["retransmissions"], r["dropped"], r["lost"]) == (3, 3, 3)


def test_no_roam_when_stations_stay(tmp_path):
    """A station that never changes BSS, and two APs whose stations stay, give no roam and no handoff."""
    air = Air()
    _two_bss(air)
    air.stream(A, STAY_A, 0.0, 2.0)
    air.stream(B, STAY_B, 0.003, 2.0)
    air.probe_response(0.5, B, STAY_A, "net")          # scanning is not roaming
    b = air_bundle(tmp_path / "stay", air, wired=True)
    ctx = _ctx(b)
    assert handoff.roams(ctx) == [] and handoff.propose(ctx) == []
    st = ctx.table("stations")
    assert sorted(st.select("station", "bssid").rows()) == [(STAY_A, A), (STAY_B, B)]
    assert not any("handoff" in [f.cause for f in i.findings] for i in analyze(b).incidents)


def test_reassociation_to_the_same_ap_is_no_roam_but_a_rejoin(tmp_path):
    """Data with A until 0.99 s, reassociation with A at 1.1 s, data from 1.3 s: no roam; the station lost
    its association and joined A again, 310 ms without data (its downlink: it sends none)."""
    ctx = _ctx(air_bundle(tmp_path / "same", _hop(A, 1.3)))
    assert handoff.roams(ctx) == []
    (r,) = handoff.rejoins(ctx)
    assert (r["station"], r["from_bssid"], r["to_bssid"], r["gap_ns"]) == (STA, A, A, 310_000_000)


def test_a_rejoin_runs_from_the_stations_own_last_data_while_its_mac_still_acknowledges(tmp_path):
    """A station whose association is lost on its side (missed beacons) still acknowledges the AP's frames,
    but sends no data until it has joined again: the rejoin runs from its last uplink frame (0.79 s) to its
    first after the reassociation (1.3 s), the AP's acknowledged downlink in between notwithstanding."""
    air = Air()
    air.beacons(A, "net", 0, 2.0)
    air.stream(A, STA, 0.0, 2.0)                       # the AP keeps sending; STA's MAC keeps answering
    for i in range(80):
        air.data(0.005 + i * 10 * MS, A, STA, down=False)
    air.reassociate(1.1, STA, A, A)
    for i in range(69):
        air.data(1.305 + i * 10 * MS, A, STA, down=False)
    air.stream(A, STAY_A, 0.003, 2.0)
    ctx = _ctx(air_bundle(tmp_path / "rejoin", air))
    assert handoff.roams(ctx) == []
    (r,) = handoff.rejoins(ctx)
    assert (r["last_ts_ns"] - T0_NS, r["first_ts_ns"] - T0_NS) == (795_000_000, 1_305_000_000)
    assert handoff.propose(ctx) == []           # no window of its own: it explains the drops it made
    flows = ctx.flows_of([STA])
    drop = handoff.Window(T0_NS + 800_000_000, T0_NS + 1_300_000_000, flows, [STA], drop={f: {} for f in flows})
    f = handoff.score(ctx, drop)
    assert f.cause == "handoff" and f.stations == [STA] and f.confidence == 0.9
    # ... and not the drop of another station's flows
    other = "udp 10.0.0.1:5000>10.9.9.9:5000"
    assert handoff.score(ctx, handoff.Window(drop.start_ns, drop.end_ns, [other], [], drop={other: {}})) is None
    assert f.summary == f"station {STA} lost its association with AP {A} and joined it again: 510 ms without data, " \
                        "0 packets lost"
    assert [x.what for x in f.frames] == [f"last data frame with {A}", f"auth with {A}", f"auth with {A}",
                                          f"reassoc_req with {A}", f"reassoc_resp with {A}",
                                          f"first data frame with {A} again"]


def test_roam_seen_by_its_reassociation_only(tmp_path):
    """Data with B unseen (the sniffer stays on A's channel): the reassociation response names the roam,
    with no gap to give."""
    air = Air()
    _two_bss(air)
    air.stream(A, STA, 0.0, 1.0)
    air.reassociate(1.1, STA, A, B)
    ctx = _ctx(air_bundle(tmp_path / "resp", air))
    (r,) = handoff.roams(ctx)
    assert (r["from_bssid"], r["to_bssid"], r["gap_ns"], r["first_frame"]) == (A, B, None, None)
    (w,) = handoff.propose(ctx)
    f = handoff.score(ctx, w)
    assert f.summary.endswith(f"to AP {B}: no data with the new AP seen, 0 packets lost")


def test_roam_back_is_a_second_roam(tmp_path):
    air = Air()
    _two_bss(air, 3.0)
    air.stream(A, STA, 0.0, 1.0)
    air.reassociate(1.1, STA, A, B)
    air.stream(B, STA, 1.2, 2.0)
    air.reassociate(2.05, STA, B, A)
    air.stream(A, STA, 2.5, 3.0)
    rs = handoff.roams(_ctx(air_bundle(tmp_path / "back", air)))
    assert [(r["from_bssid"], r["to_bssid"], r["gap_ns"]) for r in rs] == [
        (A, B, 210_000_000), (B, A, 510_000_000)]


def _silent_bundle(d: Path, answered: bool, rts: int = 0) -> Path:
    """STA: data with A until 0.99 s, then nothing from it; under a Block Ack agreement A asks it with a
    BlockAckReq every 5 ms (answered by a BlockAck from STA when `answered`), then with `rts` RTSs that
    nothing answers; STAY_A keeps its data."""
    from scapy.layers.dot11 import Dot11

    air = Air()
    air.beacons(A, "net", 0, 2.0)
    air.stream(A, STA, 0.0, 1.0)
    air.stream(A, STAY_A, 0.005, 2.0)
    for i in range(150):
        t = 1.002 + i * 5 * MS
        air.add(t, Dot11(type=1, subtype=8, addr1=STA, addr2=A) / b"\x04\x00\x00\x00")
        if answered:
            air.add(t + 0.05 * MS, Dot11(type=1, subtype=9, addr1=A, addr2=STA) / (b"\x04\x00\x00\x00" + bytes(8)))
    for i in range(rts):
        air.add(1.8 + i * 1 * MS, Dot11(type=1, subtype=11, addr1=STA, addr2=A, ID=500))
    return air_bundle(d, air)


def test_unanswered_block_ack_requests_are_a_lost_association(tmp_path):
    """A station gone under a Block Ack agreement: the AP sends BlockAckReqs, not the data again; 150 of
    them unanswered after its last frame are the lost association, and the finding says what they were."""
    ctx = _ctx(_silent_bundle(tmp_path / "b", answered=False))
    lost = [x for x in handoff._lost(ctx) if x["station"] == STA]
    assert len(lost) == 1 and lost[0]["bars"] == 150 and lost[0]["unanswered"] == 150
    assert lost[0]["ts_ns"] == T0_NS + 990_000_000        # the last data frame it acknowledged
    f = handoff.score(ctx, handoff.Window(T0_NS + 980_000_000, T0_NS + 2_000_000_000))
    assert f is not None and f.cause == "handoff"
    assert "0 data transmissions and 150 Block Ack requests, unanswered" in f.summary
    assert f.numbers["block_ack_requests"] == 150


def test_answered_block_ack_requests_are_no_lost_association(tmp_path):
    """The same requests answered by the station's BlockAcks: it is alive, no handoff."""
    ctx = _ctx(_silent_bundle(tmp_path / "b", answered=True))
    assert [x for x in handoff._lost(ctx) if x["station"] == STA] == []


def test_unanswered_rts_are_a_lost_association(tmp_path):
    """Under RTS/CTS the AP's RTSs to a gone station get no CTS and no data follows: they count too, and
    the finding names each kind."""
    ctx = _ctx(_silent_bundle(tmp_path / "b", answered=False, rts=40))
    (lost,) = [x for x in handoff._lost(ctx) if x["station"] == STA]
    assert (lost["bars"], lost["rts"], lost["unanswered"]) == (150, 40, 190)
    f = handoff.score(ctx, handoff.Window(T0_NS + 980_000_000, T0_NS + 2_000_000_000))
    assert "0 data transmissions and 150 Block Ack requests, 40 RTS, unanswered" in f.summary
    assert (f.numbers["block_ack_requests"], f.numbers["rts"]) == (150, 40)
