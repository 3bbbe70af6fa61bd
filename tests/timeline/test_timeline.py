"""The timeline: captures on the reference clock, host state joined to flows, `xlayer metrics` output.

Checked against ns-3 truth (true event times of every packet at every vantage) and on the lab
bundles (real Linux TCP, `ss` samples on the server).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from tests.helpers.common import REPO, sim_bundle
from xlayer.metrics import open_timeline, table_names
from xlayer.metrics.export import parquet_schema
from xlayer.timeline.flowkey import flow_name, with_flow

ROOT = REPO
SAMPLES = ROOT / "samples"


def test_flow_names_one_rule() -> None:
    df = pl.DataFrame({"ip_src": ["10.0.0.2", "10.0.0.1", "2001:db8::1", None, "10.0.0.1"],
                       "ip_dst": ["10.0.0.1", "10.0.0.2", "2001:db8::2", "10.0.0.1", "10.0.0.2"],
                       "ip_proto": [6, 6, 17, 6, 1], "sport": [80, 5000, 53, 1, None],
                       "dport": [5000, 80, 4000, 2, None]})
    out = with_flow(df)
    assert out["flow"].to_list()[:3] == [flow_name(6, "10.0.0.2", 80, "10.0.0.1", 5000),
                                         flow_name(6, "10.0.0.1", 5000, "10.0.0.2", 80),
                                         "udp [2001:db8::1]:53>[2001:db8::2]:4000"]
    # both directions share one conversation and differ in dir
    assert out["conn"][0] == out["conn"][1] and {out["dir"][0], out["dir"][1]} == {"a", "b"}
    assert out["flow"][3] is None and out["conn"][3] is None
    assert out["flow"][4] == "icmp 10.0.0.1>10.0.0.2"


def test_sim_timeline_matches_true_times() -> None:
    """Every ap_wired and sniffer record lands within 200 µs of its true time on the reference clock."""
    d = sim_bundle("delay_spike", 1)
    tl = open_timeline(d)
    truth = pl.read_parquet(d / "truth_packets.parquet")
    ap = tl.packets("ap_wired").select("frame", "ts_ns", "ts_local_ns")
    j = truth.join(ap, left_on="ap_wired_frame", right_on="frame")
    err = (j["ts_ns"] - j["t_ap_wired_ns"]).abs()
    moved = (j["ts_ns"] - j["ts_local_ns"]).abs()
    print(f"\nap_wired: {j.height} packets, max |error| {err.max() / 1e3:.1f} us, clock moved by "
          f"{moved.median() / 1e6:.3f} ms")
    assert j.height > 3000
    assert err.max() <= 200_000
    assert moved.median() > 1_000_000        # the capture's own clock was off: the timeline moved it
    att = pl.read_parquet(d / "truth_attempts.parquet").filter(pl.col("sniffed"))
    air = tl.packets("sniffer").select("frame", "ts_ns")
    k = att.join(air, left_on="sniffer_frame", right_on="frame")
    e2 = (k["ts_ns"] - k["t_sniffer_ns"]).abs()
    print(f"sniffer: {k.height} attempts, max |error| {e2.max() / 1e3:.1f} us")
    assert k.height > 3000 and e2.max() <= 200_000


def test_host_state_joined_to_flows_sim() -> None:
    d = sim_bundle("delay_spike", 1)
    tl = open_timeline(d)
    h = tl.table("host_state")
    truth = json.loads((d / "truth.json").read_text())
    flows = {flow_name(6, f["src"], f["sport"], f["dst"], f["dport"]) for f in truth["flows"] if f["proto"] == "tcp"}
    data = h.filter(pl.col("flow").is_not_null())
    assert set(data["flow"].unique()) == flows
    assert data["in_packets"].all()
    # the samples' flow is the direction the packets carry data in at the server
    srv = tl.packets("server").filter(pl.col("tcp_len") > 0)
    assert set(srv["flow"].unique()) >= flows
    # on the server's own clock (the reference): unchanged stamps
    assert (h["ts_ns"] == h["ts_local_ns"]).all()


def test_host_state_lab_and_listen_sockets() -> None:
    d = SAMPLES / "lab-delay_spike"
    tl = open_timeline(d)
    h = tl.table("host_state")
    raw = tl.host_state()
    assert h.height == raw.height          # every sample kept, joined or not
    listening = h.filter((pl.col("src") == "*") | (pl.col("dst") == "*"))
    assert listening["flow"].null_count() == listening.height
    joined = h.filter(pl.col("flow").is_not_null())
    assert joined.height and joined["in_packets"].all()
    srv_flows = set(tl.packets("server").filter(pl.col("tcp_len") > 0)["flow"].unique())
    assert set(joined["flow"].unique()) <= srv_flows


def test_metrics_cli_writes_documented_tables(tmp_path: Path) -> None:
    d = sim_bundle("delay_spike", 1)
    out = tmp_path / "m"
    r = subprocess.run([sys.executable, "-m", "xlayer", "metrics", str(d), "-o", str(out), "-q"],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    man = json.loads((out / "metrics.json").read_text())
    assert man["complete"] is True
    assert set(man["tables"]) == set(table_names())
    assert {p.name for p in out.glob("*.parquet")} == {t["file"] for t in man["tables"].values()}
    assert not list(out.glob("*.part"))
    for name, t in man["tables"].items():
        df = pl.read_parquet(out / t["file"])
        assert df.height == t["rows"]
        assert dict(df.schema) == parquet_schema(name), name
        assert [c["name"] for c in t["columns"]] == df.columns
        assert all(c["doc"] for c in t["columns"]), name
    assert man["alignment"]["reference"] == "server"


def test_metrics_cli_errors(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "xlayer", "metrics", str(tmp_path / "nope"), "-o", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "nope" in r.stderr
    r = subprocess.run([sys.executable, "-m", "xlayer", "metrics", str(SAMPLES / "lab-baseline"), "-o",
                        str(tmp_path / "o"), "--tables", "no_such_table"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2 and "no_such_table" in r.stderr and "Traceback" not in r.stderr


def test_metrics_sigterm_leaves_whole_files(tmp_path: Path) -> None:
    """SIGTERM part-way: every Parquet file listed is whole, nothing half-written is left."""
    d = sim_bundle("delay_spike", 1)
    out = tmp_path / "m"
    p = subprocess.Popen([sys.executable, "-m", "xlayer", "metrics", str(d), "-o", str(out), "-q"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    # stop it once the manifest exists (reading and aligning are done), before the tables are
    deadline = time.time() + 120
    while not (out / "metrics.json").exists() and p.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    assert "Traceback" not in err
    man = json.loads((out / "metrics.json").read_text())
    if p.returncode == 0:
        assert man["complete"] is True      # it finished before the signal arrived
    else:
        assert p.returncode == 130 and man["complete"] is False and "interrupted" in err
    assert {q.name for q in out.glob("*.parquet")} == {t["file"] for t in man["tables"].values()}
    assert not list(out.glob("*.part"))
    for t in man["tables"].values():
        assert pl.read_parquet(out / t["file"]).height == t["rows"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount a small tmpfs (disk-full test)")
def test_metrics_disk_full(tmp_path: Path) -> None:
    d = sim_bundle("delay_spike", 1)
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)]).returncode:
        pytest.skip("cannot mount tmpfs here")
    try:
        r = subprocess.run([sys.executable, "-m", "xlayer", "metrics", str(d), "-o", str(mnt / "m"), "-q"],
                           capture_output=True, text=True, timeout=600, cwd=ROOT)
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
        man = json.loads((mnt / "m" / "metrics.json").read_text())
        assert man["complete"] is False
        assert {q.name for q in (mnt / "m").glob("*.parquet")} == {t["file"] for t in man["tables"].values()}
        assert not list((mnt / "m").glob("*.part"))
    finally:
        subprocess.run(["umount", str(mnt)])
