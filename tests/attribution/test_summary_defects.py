"""Issue 11, item 7: what `xlayer analyze` says must be readable and must not hide flows.

1. The spurious-RTO sentence names each deciding method once, with its count (it repeated one
   method text per retransmission: 150 copies in one sentence on a real capture).
2. Data flows below the thresholds (`DropConfig.min_rate_bps`, `min_flow_duration_s`; `--min-rate`,
   `--min-flow-duration`) are named in the notes with the reason; a slow flow with TCP
   retransmissions gets a line of its own with its numbers.
3. With no flow to detect drops in, one note says why (no IP packet at all, or every flow below
   the thresholds).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.helpers.common import REPO, corpus_or_skip
from xlayer.attribution.analyze import analyze, flow_notes
from xlayer.attribution.causes import spurious_rto
from xlayer.attribution.causes.base import Context, Window
from xlayer.attribution.drops import DropConfig, data_flows, left_out
from xlayer.cli.analyze import summary_text

S = 1_000_000_000


class _Tables:
    """A stand-in timeline: only `table(name)`, empty for the tables not given."""

    EMPTY = {
        "owd": {"flow": pl.String, "ts_ns": pl.Int64, "owd_ns": pl.Int64},
        "host_state": {"flow": pl.String, "ts_ns": pl.Int64, "rto_us": pl.Int64},
        "downlink": {"flow": pl.String, "station": pl.String},
        "uplink": {"flow": pl.String, "station": pl.String},
        "retransmissions": {"flow": pl.String, "capture_file": pl.String, "vantage": pl.String,
                            "class": pl.String, "trigger": pl.String, "spurious": pl.Boolean},
        "air_frames": {"wlan_type": pl.UInt8},
    }

    def __init__(self, **tables: pl.DataFrame) -> None:
        self.tables = tables

    def table(self, name: str) -> pl.DataFrame:
        if name in self.tables:
            return self.tables[name]
        return pl.DataFrame(schema=self.EMPTY[name])


RT_SCHEMA = {"capture_file": pl.String, "vantage": pl.String, "frame": pl.Int64, "ts_ns": pl.Int64, "flow": pl.String,
             "class": pl.String, "trigger": pl.String, "spurious": pl.Boolean, "method": pl.String,
             "rto_estimate_ns": pl.Int64, "evidence_capture": pl.String, "evidence_frame": pl.Int64}


def _spurious_rows(n_rx: int, n_dsack: int) -> pl.DataFrame:
    """Return retransmissions rows: spurious timeouts, each with its own reasoning text (as the table has)."""
    n = n_rx + n_dsack
    methods = ([f"receiver_capture (trigger rto: {200 + i} ms after the original >= 0.9 x RTO estimate 200 ms)"
                for i in range(n_rx)]
               + [f"dsack (trigger rto: silence {300 + i} ms >= 0.9 x RTO estimate 200 ms)" for i in range(n_dsack)])
    return pl.DataFrame({
        "capture_file": ["server.pcap"] * n, "vantage": ["server"] * n, "frame": list(range(1, n + 1)),
        "ts_ns": [S + i * 1_000_000 for i in range(n)], "flow": ["tcp a:1>b:2"] * n, "class": ["spurious"] * n,
        "trigger": ["rto"] * n, "spurious": [True] * n, "method": methods,
        "rto_estimate_ns": [200_000_000] * n, "evidence_capture": ["client.pcap"] * n,
        "evidence_frame": list(range(1, n + 1)),
    }, schema=RT_SCHEMA)


# --- 1. the spurious-RTO sentence -------------------------------------------------------------------------


def test_spurious_rto_summary_names_each_method_once_with_its_count() -> None:
    ctx = Context(_Tables(retransmissions=_spurious_rows(140, 10)), DropConfig())
    f = spurious_rto.score(ctx, Window(S, 2 * S, ["tcp a:1>b:2"]))
    assert f is not None
    assert "(decided by receiver_capture x140, dsack x10)" in f.summary
    assert f.summary.count("receiver_capture") == 1 and f.summary.count("dsack") == 1
    assert "trigger" not in f.summary and len(f.summary) < 200, f.summary
    # the numbers: counts per method and trigger, one example of the reasoning; no list per retransmission
    assert f.numbers["spurious_retransmissions"] == 150
    assert f.numbers["methods"] == {"receiver_capture": 140, "dsack": 10}
    assert list(f.numbers["methods"]) == ["receiver_capture", "dsack"]          # most first
    assert f.numbers["triggers"] == {"rto": 150}
    assert f.numbers["method_example"].startswith("receiver_capture (trigger rto: 200 ms")
    assert len(json.dumps(f.as_json()["numbers"])) < 600


def test_spurious_rto_summary_of_one_retransmission_keeps_its_reasoning() -> None:
    ctx = Context(_Tables(retransmissions=_spurious_rows(1, 0)), DropConfig())
    f = spurious_rto.score(ctx, Window(S, 2 * S, ["tcp a:1>b:2"]))
    assert f is not None
    assert f.summary.endswith("(decided by receiver_capture (trigger rto: 200 ms after the original "
                              ">= 0.9 x RTO estimate 200 ms))")
    assert f.numbers["methods"] == {"receiver_capture": 1}


def test_spurious_rto_evidence_in_the_retransmissions_own_capture_names_that_capture() -> None:
    """Eifel and D-SACK evidence lies in the retransmission's own capture (evidence_capture null): the
    frame reference names that capture; it read "None #9775" on a random-scenario run."""
    rows = _spurious_rows(0, 2).with_columns(pl.lit(None, pl.String).alias("evidence_capture"),
                                              (pl.col("frame") + 100).alias("evidence_frame"))
    f = spurious_rto.score(Context(_Tables(retransmissions=rows), DropConfig()), Window(S, 2 * S, ["tcp a:1>b:2"]))
    assert f is not None
    ev = [(r.capture_file, r.frame) for r in f.frames if r.what == "evidence the original arrived"]
    assert ev == [("server.pcap", 101), ("server.pcap", 102)]
    assert all(r.capture_file not in (None, "None") for r in f.frames)


def test_spurious_rto_summary_of_a_shipped_sample() -> None:
    """sim-delay_spike: 89 spurious retransmissions once listed 12 method texts in the sentence."""
    an = analyze(REPO / "samples" / "sim-delay_spike")
    sp = [f for i in an.incidents for f in i.findings if f.cause == "spurious_rto"]
    assert sp
    assert sp[0].summary.endswith("(decided by receiver_capture x89)"), sp[0].summary
    assert sp[0].summary.count("decided by") == 1 and sp[0].numbers["methods"] == {"receiver_capture": 89}


# --- 2. flows left out of drop detection ----------------------------------------------------------------


def _flows(*rows: tuple[str, str, int, float, int]) -> pl.DataFrame:
    """Return a flows table from (flow, capture_file, payload_bytes, duration_s, packets) rows."""
    return pl.DataFrame({
        "flow": [r[0] for r in rows], "conn": [r[0] for r in rows], "proto": ["tcp"] * len(rows),
        "vantage": [r[1].split(".")[0] for r in rows], "capture_file": [r[1] for r in rows],
        "first_ts_ns": [S] * len(rows), "last_ts_ns": [S + int(r[3] * S) for r in rows],
        "payload_bytes": [r[2] for r in rows], "packets": [r[4] for r in rows],
    })


FAST = ("tcp 10.0.0.1:5001>10.0.0.2:40000", "server.pcap", 5_000_000, 4.0, 4000)      # 10 Mbit/s
SLOW = ("tcp 10.0.0.1:5002>10.0.0.2:40001", "server.pcap", 20_000, 4.0, 60)           # 40 kbit/s
SHORT = ("udp 10.0.0.1:53>10.0.0.2:40002", "server.pcap", 400_000, 0.4, 300)          # 8 Mbit/s, 0.4 s
ACKS = ("tcp 10.0.0.2:40000>10.0.0.1:5001", "server.pcap", 0, 4.0, 2000)


def test_thresholds_are_config_and_left_out_flows_carry_their_reason() -> None:
    flows = _flows(FAST, SLOW, SHORT, ACKS)
    assert data_flows(flows, DropConfig())["flow"].to_list() == [FAST[0]]
    out = {r["flow"]: r for r in left_out(flows, DropConfig()).iter_rows(named=True)}
    assert set(out) == {SLOW[0], SHORT[0], ACKS[0]}
    assert out[SLOW[0]]["reason"] == "below_rate" and out[SLOW[0]]["rate_bps"] == pytest.approx(40_000)
    assert out[SHORT[0]]["reason"] == "too_short" and out[SHORT[0]]["duration_s"] == pytest.approx(0.4)
    assert out[ACKS[0]]["reason"] == "no_payload"
    # the thresholds are the config's
    cfg = DropConfig(min_rate_bps=10_000, min_flow_duration_s=0.3)
    assert sorted(data_flows(flows, cfg)["flow"].to_list()) == sorted([FAST[0], SLOW[0], SHORT[0]])
    assert left_out(flows, cfg)["flow"].to_list() == [ACKS[0]]
    assert DropConfig().min_rate_bps == 100_000 and DropConfig().min_flow_duration_s == 1.0


def test_slow_flow_with_retransmissions_gets_its_own_note() -> None:
    """The issue's case: a flow holding most of the retransmissions, under 100 kbit/s, skipped without a word."""
    rt = pl.DataFrame({
        "capture_file": ["server.pcap"] * 24 + ["client.pcap"] * 20, "vantage": ["server"] * 24 + ["client"] * 20,
        "frame": list(range(44)), "ts_ns": [S] * 44, "flow": [SLOW[0]] * 44,
        "class": ["rto"] * 21 + ["spurious"] * 3 + ["rto"] * 20, "trigger": ["rto"] * 44,
        "spurious": [False] * 21 + [True] * 3 + [False] * 20, "method": ["x"] * 44,
        "rto_estimate_ns": [200_000_000] * 44, "evidence_capture": [None] * 44, "evidence_frame": [None] * 44,
    }, schema=RT_SCHEMA)
    flows = _flows(FAST, SLOW, SHORT, ACKS)
    tl = _Tables(flows=flows, retransmissions=rt)
    notes = flow_notes(tl, data_flows(flows, DropConfig()), DropConfig())
    own = [n for n in notes if SLOW[0] in n]
    assert len(own) == 1, notes
    assert own[0] == (f"left out of drop detection: {SLOW[0]} (40.0 kbit/s over 4.00 s: below --min-rate 100 kbit/s), "
                      "though it has 24 TCP retransmissions (3 spurious, 3 after a timeout) at server; "
                      "lower --min-rate to consider it")
    rest = [n for n in notes if SHORT[0] in n]
    assert rest == [f"left out of drop detection (1 flow below --min-rate or --min-flow-duration): {SHORT[0]} "
                    "(8.00 Mbit/s over 0.40 s: shorter than --min-flow-duration 1 s)"]
    assert not any(ACKS[0] in n for n in notes)          # an ACK direction is no data flow: not news
    # with the threshold lowered the flow is considered, and no note is left
    low = DropConfig(min_rate_bps=10_000, min_flow_duration_s=0.3)
    assert flow_notes(tl, data_flows(flows, low), low) == []


def test_many_left_out_flows_stay_bounded() -> None:
    rows = [(f"tcp 10.0.0.1:{6000 + i}>10.0.0.2:{7000 + i}", "server.pcap", 1000 + i, 2.0, 10) for i in range(50)]
    flows = _flows(FAST, *rows)
    rt = pl.concat([_spurious_rows(0, 0)] + [
        _spurious_rows(1, 0).with_columns(pl.lit(r[0]).alias("flow"), pl.lit("rto").alias("class"),
                                          pl.lit(False).alias("spurious")) for r in rows[:15]])
    notes = flow_notes(_Tables(flows=flows, retransmissions=rt), data_flows(flows, DropConfig()), DropConfig())
    assert len(notes) == 12, notes                          # 10 flows named, "5 more", one line for the rest
    assert notes[10] == "left out of drop detection: 5 more flows with TCP retransmissions"
    assert notes[11].startswith("left out of drop detection (35 flows below") and notes[11].endswith("; and 32 more")


def test_real_capture_slow_flow_named_then_analyzed_with_a_lower_rate(tmp_path: Path) -> None:
    """zeek's tcp_reassembly.pcap: an HTTP upload at 19 kbit/s with 17 retransmissions, 10 of them spurious."""
    pcap = corpus_or_skip() / "wired" / "zeek__tcp_reassembly.pcap"
    b = tmp_path / "b"
    r = subprocess.run([sys.executable, "-m", "xlayer", "bundle", "new", str(b), "--wired", f"w={pcap}"],
                       capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    up = "tcp 63.193.213.194:2564>128.3.97.175:80"
    r = subprocess.run([sys.executable, "-m", "xlayer", "analyze", str(b), "--json", "-q"], capture_output=True,
                       text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["flows"] == [] and out["incidents"] == []
    notes = out["notes"]
    assert any(n.startswith("no flow for drop detection: 2 flows seen, all below --min-rate 100 kbit/s") for n in notes)
    own = [n for n in notes if n.startswith(f"left out of drop detection: {up} (19.2 kbit/s over 14.37 s")]
    assert own and "17 TCP retransmissions (10 spurious, 10 after a timeout)" in own[0], notes
    # the same in the text summary
    r = subprocess.run([sys.executable, "-m", "xlayer", "analyze", str(b), "-q"], capture_output=True, text=True,
                       timeout=300, cwd=REPO)
    assert r.returncode == 0 and f"note: left out of drop detection: {up}" in r.stdout
    # --min-rate lowers the threshold: the flow is analyzed, its spurious timeouts found, no note about it
    r = subprocess.run([sys.executable, "-m", "xlayer", "analyze", str(b), "--json", "-q", "--min-rate", "10k"],
                       capture_output=True, text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert [f["flow"] for f in out["flows"]] == [up]
    assert "spurious_rto" in {i["cause"] for i in out["incidents"]}
    assert not any(up in n for n in out["notes"])


def test_cli_thresholds_documented_and_checked() -> None:
    r = subprocess.run([sys.executable, "-m", "xlayer", "analyze", "--help"], capture_output=True, text=True,
                       timeout=60, cwd=REPO)
    text = " ".join(r.stdout.split())
    assert "--min-rate BITS_PER_S" in text and "--min-flow-duration S" in text
    assert "default 100k" in text and "default 1)" in text
    r = subprocess.run([sys.executable, "-m", "xlayer", "analyze", "x", "--min-rate", "fast"], capture_output=True,
                       text=True, timeout=60, cwd=REPO)
    assert r.returncode == 2 and "not a rate in bit/s" in r.stderr


# --- 3. no flow at all --------------------------------------------------------------------------------


def test_no_ip_at_all_says_so() -> None:
    flows = _flows(FAST).clear()
    air = pl.DataFrame({"wlan_type": [0] * 5 + [2] * 7}, schema={"wlan_type": pl.UInt8})
    notes = flow_notes(_Tables(flows=flows, air_frames=air), data_flows(flows, DropConfig()), DropConfig())
    assert notes == ["no flow for drop detection: no capture carried IP packets (7 802.11 data frames on the air, "
                     "none readable as IP: protected, or not IP)"]


def test_every_flow_below_the_thresholds_says_so() -> None:
    flows = _flows(SLOW, SHORT, ACKS)
    notes = flow_notes(_Tables(flows=flows), data_flows(flows, DropConfig()), DropConfig())
    assert len(notes) == 1
    assert notes[0].startswith("no flow for drop detection: 3 flows seen, all below --min-rate 100 kbit/s or shorter "
                               "than --min-flow-duration 1 s (lower them to consider these flows): ")
    assert SLOW[0] in notes[0] and SHORT[0] in notes[0] and notes[0].endswith("; 1 without payload")


def test_air_only_capture_says_why_no_flow(tmp_path: Path) -> None:
    """An encrypted air capture (Wireshark's wpa-Induction.pcap): flows (0), and a note saying why."""
    pcap = corpus_or_skip() / "radiotap" / "wireshark__wpa-Induction.pcap"
    b = tmp_path / "air"
    r = subprocess.run([sys.executable, "-m", "xlayer", "bundle", "new", str(b), "--air", f"sniffer={pcap}"],
                       capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    an = analyze(b)
    assert an.flows == []
    why = [n for n in an.notes if n.startswith("no flow for drop detection")]
    assert why == ["no flow for drop detection: no capture carried IP packets (285 802.11 data frames on the air, "
                   "none readable as IP: 280 were protected (WPA/WEP) and no keys were given: give them with "
                   "--wpa-pwd PASSPHRASE:SSID (or --keys FILE) to decrypt; the other 5 not IP)"]
    text = summary_text(an)
    assert "flows (0):" in text and f"note: {why[0]}" in text
    assert an.as_json()["notes"] == an.notes


def test_captures_not_aligned_well_are_said_in_the_summary() -> None:
    """Issue 13 (3): a capture whose clock fit is poor or impossible is named where the reader starts."""
    from xlayer.attribution.incidents import Analysis

    caps = [{"file": "server.pcap", "status": "aligned", "uncertainty_us": 0.0},
            {"file": "sniffer.pcap", "status": "aligned", "uncertainty_us": 12.0},
            {"file": "client.pcap", "status": "poor: offset uncertain by 840 us", "uncertainty_us": 840.4},
            {"file": "x\u001b[31m.pcap", "status": "cannot align: no packet seen at both", "uncertainty_us": None}]
    text = summary_text(Analysis([], [], {"reference": "server", "captures": caps}))
    said = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("clock of ")]
    assert said[0] == "clock of client.pcap: poor: offset uncertain by 840 us (uncertainty 840 us)"
    assert said[1].endswith(": cannot align: no packet seen at both") and "\u001b" not in said[1]
    assert len(said) == 2            # the aligned ones are not listed


def test_offsets_resting_on_a_long_paths_equal_delays_are_said_once() -> None:
    """A server across a WAN: the AP-side captures are aligned, but their offsets take the path's one-way
    delays as equal.  One line says which and how long the path is; a short path (a LAN) is not worth it."""
    from xlayer.attribution.incidents import Analysis

    caps = [{"file": "server.pcap", "status": "aligned", "uncertainty_us": 0.0, "equal_delay_us": 0.0},
            {"file": "ap_wired.pcap", "status": "aligned", "uncertainty_us": 34_012.0, "equal_delay_us": 34_008.2},
            {"file": "sniffer.pcap", "status": "aligned", "uncertainty_us": 34_030.0, "equal_delay_us": 34_008.2},
            {"file": "lan.pcap", "status": "aligned", "uncertainty_us": 40.0, "equal_delay_us": 35.0}]
    text = summary_text(Analysis([], [], {"reference": "server", "captures": caps}))
    said = [ln.strip() for ln in text.splitlines() if "equally long both ways" in ln]
    assert said == ["clocks of ap_wired.pcap, sniffer.pcap: aligned taking the path between them and server as "
                    "equally long both ways (up to 34.0 ms each way; an asymmetric path moves their offsets by "
                    "half the difference)"]
    assert not [ln for ln in text.splitlines() if ln.strip().startswith("clock of ")]
