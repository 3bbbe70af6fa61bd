"""One lab run: build the network, start the captures, run the transfers and events, write the truth.

The order matters: the captures are capturing before the counters' "before" snapshot, the "after"
snapshot is taken once the transfers ended and the queue drained, and the captures stop last, so that
every packet the counters account for is in the pcaps.  Whatever happens -- an error, SIGINT, SIGTERM
-- the `finally` kills the transfers, stops the captures and deletes the namespaces.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from xlayer.bundle.manifest import MANIFEST
from xlayer.acquire.capture import CaptureConfig, CaptureSession, CaptureSetupError, IfaceSpec, SsSpec
from xlayer.acquire.sampler import port_filter
import xlayer.testbeds.lab.truth as tr
from xlayer.testbeds.lab.scenarios import SCENARIOS, Scenario
from xlayer.testbeds.lab.topology import LabError, Topology, check_lab_possible, sh
from xlayer.testbeds.lab.traffic import TCP_PORT, Runner

TRUTH = "truth.json"
ROUTER_OUT_NOTE = ("the router's interface toward the client: it plays the AP's radio side; its egress "
                   "tbf is the AP queue, so a packet seen at router_in and never here was dropped by "
                   "that queue, and the time between the two is its queueing delay")


class LabInterrupted(Exception):
    """SIGTERM arrived during a lab run (SIGINT arrives as KeyboardInterrupt)."""


def _on_term(signum, frame):  # noqa: ARG001 - signal handler signature
    raise LabInterrupted()


def capture_config(topo: Topology, sc: Scenario, out: Path, snaplen: int | None,
                   command: list[str], seconds: float) -> CaptureConfig:
    """Return the capture set-up of a lab run: four wired vantages and ss at the server."""
    itf = topo.ifaces
    ifaces = [IfaceSpec("wired", v, itf[v], topo.vantage_ns(v),
                        notes=ROUTER_OUT_NOTE if v == "router_out" else "")
              for v in ("server", "router_in", "router_out", "client")]
    samplers = [SsSpec("server", topo.ns["server"], port_filter(TCP_PORT), 0.05)]
    tags = {"lab": sc.name, "access": "emulated", "transport": "+".join(f.proto for f in sc.flows),
            "bottleneck": f"tbf {sc.rate_bps // 1_000_000} Mbit/s, {sc.limit_bytes} B",
            "seconds": f"{seconds:g}"}
    return CaptureConfig(out_dir=out, ifaces=ifaces, samplers=samplers, snaplen=snaplen, tags=tags,
                         command=command,
                         extra={"lab": {"scenario": sc.name, "summary": sc.summary, "truth": TRUTH,
                                        "topology": topo.describe()}})


def snapshot(topo: Topology) -> dict[str, Any]:
    """Return the kernel counters of every namespace and the AP queue's qdisc statistics."""
    return {"time_ns": time.time_ns(),
            "counters": {role: tr.read_counters(ns) for role, ns in topo.ns.items()},
            "qdiscs": tr.read_qdiscs(topo.ns["router"], topo.ifaces["router_out"])}


def _change_rate(topo: Topology, sc: Scenario, rate_bps: int) -> tuple[int, int]:
    t0 = time.time_ns()
    sh(topo.tc("change", rate_bps, sc.burst_bytes, sc.limit_bytes))
    return t0, time.time_ns()


def _run_events(topo: Topology, sc: Scenario, start_ns: int) -> list[dict[str, Any]]:
    """Apply the scenario's rate spikes on schedule; return their time windows (epoch ns)."""
    events = []
    for sp in sc.spikes:
        _sleep_until(start_ns + int(sp.at_s * 1e9))
        a0, a1 = _change_rate(topo, sc, sp.rate_bps)
        _sleep_until(a1 + int(sp.for_s * 1e9))
        b0, b1 = _change_rate(topo, sc, sc.rate_bps)
        # the change takes effect somewhere inside the tc command's run: take its midpoint
        events.append({"kind": "rate_drop", "qdisc": f"tbf on {topo.ifaces['router_out']}",
                       "vantage": "router_out", "rate_bps": sp.rate_bps, "normal_rate_bps": sc.rate_bps,
                       "start_ns": (a0 + a1) // 2, "end_ns": (b0 + b1) // 2,
                       "start_uncertainty_ns": (a1 - a0) // 2, "end_uncertainty_ns": (b1 - b0) // 2})
    return events


def _sleep_until(t_ns: int) -> None:
    while (left := t_ns - time.time_ns()) > 0:
        time.sleep(min(left / 1e9, 0.05))


def summarize(after_minus_before: dict[str, Any], qdiscs: list[dict], transfers: list[dict]) -> dict[str, Any]:
    """Return the headline numbers of a run: tc drops, the server's TCP counters, goodputs."""
    srv = after_minus_before.get("server", {})
    ext, tcp = srv.get("TcpExt", {}), srv.get("Tcp", {})
    s: dict[str, Any] = {"tc_drops": sum(q["drops"] for q in qdiscs),
                         "tc_overlimits": sum(q["overlimits"] for q in qdiscs)}
    for k in ("TCPTimeouts", "TCPSpuriousRTOs", "TCPLossUndo", "TCPDSACKRecv", "TCPSACKReorder",
              "TCPFastRetrans", "TCPLossProbes"):
        s[k] = ext.get(k, 0)
    s["RetransSegs"] = tcp.get("RetransSegs", 0)
    for t in transfers:
        s[f"{t['proto']}_goodput_bps"] = t.get("goodput_bps")
    return s


def run_scenario(name: str, out_dir: str | os.PathLike, seconds: float | None = None,
                 snaplen: int | None = 96, traffic: str = "auto",
                 command: list[str] | None = None, log=None) -> dict[str, Any]:
    """Run one scenario into a bundle at out_dir (captures, bundle.json, truth.json); return the truth."""
    if name not in SCENARIOS:
        raise LabError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    sc = SCENARIOS[name]
    secs = float(seconds if seconds is not None else sc.default_seconds)
    if secs < sc.min_seconds:
        raise LabError(f"{name} needs --seconds >= {sc.min_seconds:g}")
    out = Path(out_dir)
    if (out / MANIFEST).exists() or (out / TRUTH).exists():
        raise LabError(f"{out} already holds a bundle; choose another directory")
    check_lab_possible()
    say = log or (lambda msg: None)
    t_start = time.monotonic()
    topo = Topology()
    runner: Runner | None = None
    session: CaptureSession | None = None
    old_term = signal.signal(signal.SIGTERM, _on_term)
    try:
        say(f"building namespaces xlab-{topo.suffix}-*")
        topo.up()
        sh(topo.tc("add", sc.rate_bps, sc.burst_bytes, sc.limit_bytes))
        runner = Runner(topo, sc.flows, secs, traffic)
        runner.prepare()
        session = CaptureSession(capture_config(topo, sc, out, snaplen,
                                                command or ["xlayer", "lab", name], secs))
        try:
            session.start()
        except CaptureSetupError as exc:
            raise LabError(f"capture: {exc}") from exc
        before = snapshot(topo)
        say(f"running {name} for {secs:g} s with {runner.tool}")
        start_ns = runner.start()
        events = _run_events(topo, sc, start_ns)
        transfers = runner.results(timeout=secs + 30)
        end_ns = time.time_ns()
        _drain(topo, timeout=3.0)
        after = snapshot(topo)
        result = session.finish("duration")
        session = None
        if result.manifest_error:
            raise LabError(result.manifest_error)
        if result.stop_reason != "duration":
            raise LabError(f"capture stopped early ({result.stop_reason}): {'; '.join(result.errors)}")
        deltas = {role: tr.counter_delta(before["counters"][role], after["counters"][role])
                  for role in topo.ns}
        qd = tr.qdisc_delta(before["qdiscs"], after["qdiscs"])
        truth: dict[str, Any] = {
            "xlayer_lab_truth": 1, "scenario": name, "summary_text": sc.summary,
            "parameters": {**sc.parameters(), "seconds": secs, "traffic_tool": runner.tool,
                           "snaplen": snaplen, "congestion_control": "cubic"},
            "topology": topo.describe(),
            "window": {"transfers_start_ns": start_ns, "transfers_end_ns": end_ns,
                       "counters_before_ns": before["time_ns"], "counters_after_ns": after["time_ns"]},
            "events": events, "transfers": transfers,
            "qdisc": {"router_out": qd}, "counters": deltas,
        }
        truth["summary"] = summarize(deltas, qd, transfers)
        ok, why = sc.check(truth)
        truth["expect"] = {"holds": ok, "detail": why}
        truth["causes"] = tr.causes_of(name, truth)
        truth["run_seconds"] = round(time.monotonic() - t_start, 2)
        _write_json(out / TRUTH, truth)
        return truth
    finally:
        signal.signal(signal.SIGTERM, old_term)
        if runner is not None:
            runner.kill()
        if session is not None:
            with contextlib.suppress(Exception):
                session.close()
        topo.down()


def _drain(topo: Topology, timeout: float) -> None:
    # wait until the AP queue is empty, so the "after" counters and the captures agree
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        q = tr.read_qdiscs(topo.ns["router"], topo.ifaces["router_out"])
        if all(x.get("qlen", 0) == 0 for x in q):
            break
        time.sleep(0.05)
    time.sleep(0.2)


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def list_scenarios() -> list[tuple[str, str]]:
    """Return (name, one-line summary) for every scenario."""
    return [(s.name, s.summary) for s in SCENARIOS.values()]


__all__ = ["LabError", "LabInterrupted", "list_scenarios", "run_scenario", "check_lab_possible"]
