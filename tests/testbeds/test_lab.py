"""`xlayer lab`: every scenario runs in namespaces and its truth shows the effect it is built for."""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.common import REPO

# short runs where the effects still show (see xlayer/LAB.md for the measured margins)
SECONDS = {"baseline": 3, "queue_overflow": 3, "delay_spike": 4, "udp_flood": 3}


@pytest.fixture(scope="module")
def lab_ok() -> None:
    lab = pytest.importorskip("xlayer.testbeds.lab")
    try:
        lab.check_lab_possible()
    except lab.LabError as exc:
        pytest.skip(str(exc))


def run_lab(name: str, out: Path, *extra: str) -> dict:
    """Run one scenario through the CLI; return its truth.json after checking the bundle."""
    # (bounded by the timeout; that it stopped at its duration is what the bundle's stop reason says)
    p = subprocess.run([sys.executable, "-m", "xlayer", "lab", name, "-o", str(out),
                        "--seconds", str(SECONDS[name]), *extra],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    truth = json.loads((out / "truth.json").read_text())
    m = json.loads((out / "bundle.json").read_text())
    assert m["capture"]["stop_reason"] == "duration"
    vantages = {(c["kind"], c["vantage"]) for c in m["captures"]}
    assert vantages == {("wired", "server"), ("wired", "router_in"), ("wired", "router_out"),
                        ("wired", "client"), ("tcp_state", "server")}
    for c in m["captures"]:
        assert (out / c["file"]).stat().st_size > 0
        if c["vantage"] == "router_out":
            assert "AP's radio side" in c["notes"]
    # the namespaces are gone
    suffix = truth["topology"]["namespaces"]["server"].split("-")[1]
    assert suffix not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return truth


@pytest.fixture(scope="module")
def baseline(lab_ok, tmp_path_factory) -> dict:
    return run_lab("baseline", tmp_path_factory.mktemp("lab") / "baseline")


def test_list_names_every_scenario() -> None:
    p = subprocess.run([sys.executable, "-m", "xlayer", "lab", "--list"], cwd=REPO, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0
    names = [ln.split()[0] for ln in p.stdout.splitlines()]
    assert names == ["baseline", "queue_overflow", "delay_spike", "udp_flood"]


def test_baseline_has_no_drops(baseline) -> None:
    s = baseline["summary"]
    assert s["tc_drops"] == 0 and s["TCPTimeouts"] == 0
    assert s["tcp_goodput_bps"] > 0.8 * baseline["parameters"]["bottleneck"]["rate_bps"]
    assert baseline["expect"]["holds"]


def test_queue_overflow_drops(lab_ok, tmp_path) -> None:
    t = run_lab("queue_overflow", tmp_path / "b")
    assert t["summary"]["tc_drops"] > 0
    assert t["counters"]["server"]["Tcp"]["RetransSegs"] > 0


def test_delay_spike_gives_spurious_rtos_without_loss(lab_ok, tmp_path) -> None:
    t = run_lab("delay_spike", tmp_path / "b")
    s = t["summary"]
    assert s["TCPSpuriousRTOs"] > 0 or s["TCPLossUndo"] > 0, s
    assert s["tc_drops"] == 0
    (ev,) = t["events"]
    assert ev["kind"] == "rate_drop" and 1.0e9 < ev["end_ns"] - ev["start_ns"] < 1.5e9
    assert t["window"]["transfers_start_ns"] < ev["start_ns"] < ev["end_ns"] < t["window"]["transfers_end_ns"]


def test_udp_flood_starves_tcp(baseline, tmp_path) -> None:
    t = run_lab("udp_flood", tmp_path / "b")
    assert t["summary"]["tcp_goodput_bps"] < 0.5 * baseline["summary"]["tcp_goodput_bps"]
    assert t["summary"]["tc_drops"] > 0
    assert t["summary"]["udp_goodput_bps"] > 0.5 * t["parameters"]["bottleneck"]["rate_bps"]


def test_python_fallback_traffic(lab_ok, tmp_path) -> None:
    t = run_lab("queue_overflow", tmp_path / "b", "--traffic", "python")
    assert t["parameters"]["traffic_tool"] == "python"
    assert t["summary"]["tc_drops"] > 0 and t["transfers"][0]["bytes"] > 0


def test_sigint_tears_the_lab_down(lab_ok, tmp_path) -> None:
    p = subprocess.Popen([sys.executable, "-m", "xlayer", "lab", "baseline", "-o", str(tmp_path / "b"),
                          "--seconds", "20"], cwd=REPO, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                         text=True)
    suffix = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = p.stderr.readline()
        m = re.search(r"namespaces xlab-(\w+)-", line)
        suffix = suffix or (m and m.group(1))
        if "running baseline" in line or not line:
            break
    assert suffix, "the lab did not say which namespaces it built"
    time.sleep(1.0)
    pids = set()
    for role in ("server", "router", "client"):
        out = subprocess.run(["ip", "netns", "pids", f"xlab-{suffix}-{role}"], capture_output=True, text=True)
        pids |= {int(x) for x in out.stdout.split()}
    assert pids, "no transfer or capture process runs in the lab's namespaces"
    p.send_signal(signal.SIGINT)
    try:
        p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        pytest.fail("the lab did not stop on SIGINT")
    assert p.returncode == 130
    assert suffix not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    alive = {pid for pid in pids if Path(f"/proc/{pid}").exists()}
    assert not alive, f"processes of the lab outlived it: {alive}"
