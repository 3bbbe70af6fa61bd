"""Real transfers from the lab's server to its client: iperf3, or a small Python sender/receiver.

Data always flows server -> client (a download through the AP), so the router's egress queue toward the
client is the one that fills.  With iperf3 the client runs ``iperf3 -c ... -R`` and the server side
sends; the Python fallback (``python -m xlayer.testbeds.lab.traffic``, run with ``ip netns exec``) keeps the same
direction and ports, so the lab works where iperf3 is not installed.

TCP uses cubic explicitly (per socket: a namespace may not change its default congestion control to
one outside the host's allowed list), because the scenarios are tuned for a loss-based sender.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xlayer.testbeds.lab.topology import LabError, nsexec, sh

TCP_PORT = 5201
UDP_PORT = 5202
UDP_PAYLOAD = 1400


@dataclass
class Flow:
    """One transfer: proto tcp|udp, port, app rate in bit/s (None: as fast as TCP goes), receive window."""

    name: str
    proto: str
    port: int
    rate_bps: int | None = None
    window_bytes: int | None = None
    cc: str = "cubic"


def _popen(argv: list[str]) -> subprocess.Popen:
    # own process group: a Ctrl-C at the terminal reaches the lab, which then stops these in order
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            process_group=0, text=True)


def wait_listening(ns: str, proto: str, port: int, timeout: float = 5.0) -> None:
    """Return once something listens on `port` in namespace `ns`; raise LabError after `timeout`."""
    flag = "-Hltn" if proto == "tcp" else "-Hlun"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sh(nsexec(ns, ["ss", flag, "sport", "=", f":{port}"]), check=False).stdout.strip():
            return
        time.sleep(0.02)
    raise LabError(f"nothing listens on {proto} port {port} in {ns} after {timeout:g} s")


class Runner:
    """Runs a set of flows for `seconds` with iperf3 or the Python fallback; `results()` reports them."""

    def __init__(self, topo: Any, flows: list[Flow], seconds: float, tool: str = "auto"):
        if tool == "auto":
            tool = "iperf3" if shutil.which("iperf3") else "python"
        if tool == "iperf3" and not shutil.which("iperf3"):
            raise LabError("iperf3 not found (apt-get install iperf3, or use --traffic python)")
        self.topo, self.flows, self.seconds, self.tool = topo, flows, seconds, tool
        self.passive: dict[str, subprocess.Popen] = {}
        self.active: dict[str, subprocess.Popen] = {}
        self.started_ns: int | None = None

    # --- argument lists ---

    def _iperf_client(self, f: Flow) -> list[str]:
        argv = ["iperf3", "-c", self.topo.server_ip, "-p", str(f.port), "-R", "-J",
                "-t", f"{self.seconds:g}", "--connect-timeout", "3000"]
        if f.proto == "udp":
            argv += ["-u", "-b", str(int(f.rate_bps or 1_000_000)), "-l", str(UDP_PAYLOAD)]
        else:
            argv += ["-C", f.cc]
            if f.rate_bps:
                argv += ["-b", str(int(f.rate_bps))]
            if f.window_bytes:
                argv += ["-w", str(int(f.window_bytes))]
        return argv

    def _py(self, *args: str) -> list[str]:
        # `ip netns exec` keeps the cwd, not necessarily the import path: name the package's root
        root = str(Path(__file__).resolve().parents[3])
        return ["env", f"PYTHONPATH={root}", sys.executable, "-m", "xlayer.testbeds.lab.traffic", *args]

    # --- run ---

    def prepare(self) -> None:
        """Start the listening side of every flow and wait until each listens."""
        ns = self.topo.ns
        for f in self.flows:
            if self.tool == "iperf3":
                p = _popen(nsexec(ns["server"], ["iperf3", "-s", "-1", "-J", "-p", str(f.port)]))
                self.passive[f.name] = p
                wait_listening(ns["server"], "tcp", f.port)     # iperf3's control channel is TCP
            elif f.proto == "tcp":
                argv = self._py("tcp-send", "--port", str(f.port), "--seconds", f"{self.seconds:g}",
                                "--cc", f.cc) + (["--rate", str(f.rate_bps)] if f.rate_bps else [])
                self.passive[f.name] = _popen(nsexec(ns["server"], argv))
                wait_listening(ns["server"], "tcp", f.port)
            else:
                argv = self._py("udp-recv", "--port", str(f.port), "--seconds", f"{self.seconds + 10:g}")
                self.passive[f.name] = _popen(nsexec(ns["client"], argv))
                wait_listening(ns["client"], "udp", f.port)

    def start(self) -> int:
        """Start the active side of every flow; return the start time (epoch ns)."""
        ns = self.topo.ns
        self.started_ns = time.time_ns()
        for f in self.flows:
            if self.tool == "iperf3":
                argv = nsexec(ns["client"], self._iperf_client(f))
            elif f.proto == "tcp":
                argv = nsexec(ns["client"], self._py("tcp-recv", "--host", self.topo.server_ip, "--port",
                                                     str(f.port), "--timeout", f"{self.seconds + 20:g}")
                              + (["--rcvbuf", str(f.window_bytes)] if f.window_bytes else []))
            else:
                argv = nsexec(ns["server"], self._py("udp-send", "--host", self.topo.client_ip, "--port",
                                                     str(f.port), "--rate", str(int(f.rate_bps or 1e6)),
                                                     "--seconds", f"{self.seconds:g}"))
            self.active[f.name] = _popen(argv)
        return self.started_ns

    def results(self, timeout: float) -> list[dict[str, Any]]:
        """Wait for every flow to end (at most `timeout` s); return one result dict per flow."""
        deadline = time.monotonic() + timeout
        out = []
        for f in self.flows:
            act = self.active[f.name]
            try:
                a_out, a_err = act.communicate(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill()
                raise LabError(f"transfer {f.name} did not finish within {timeout:g} s") from None
            pas = self.passive[f.name]
            try:
                p_out, p_err = pas.communicate(timeout=max(3.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pas.kill()
                p_out, p_err = pas.communicate()
            res = {"name": f.name, "proto": f.proto, "port": f.port, "tool": self.tool,
                   "direction": "server -> client", "app_rate_bps": f.rate_bps,
                   "window_bytes": f.window_bytes, "cc": f.cc if f.proto == "tcp" else None}
            if self.tool == "iperf3":
                res.update(_iperf_result(f, a_out, a_err))
            else:
                recv = a_out if f.proto == "tcp" else p_out
                send = p_out if f.proto == "tcp" else a_out
                res.update(_py_result(f, recv, send, a_err + p_err))
            out.append(res)
        return out

    def kill(self) -> None:
        """Stop every process of the flows that is still running (SIGTERM, then SIGKILL)."""
        procs = list(self.active.values()) + list(self.passive.values())
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, 15)
        for p in procs:
            try:
                p.wait(2.0)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, 9)
                p.wait(2.0)


def _iperf_result(f: Flow, out: str, err: str) -> dict[str, Any]:
    try:
        d = json.loads(out)
    except ValueError:
        raise LabError(f"iperf3 for {f.name} gave no JSON: {(err or out).strip()[:300]}") from None
    if d.get("error"):
        raise LabError(f"iperf3 for {f.name}: {d['error']}")
    end = d.get("end", {})
    if f.proto == "tcp":
        recv, sent = end.get("sum_received", {}), end.get("sum_sent", {})
        return {"bytes": recv.get("bytes"), "seconds": recv.get("seconds"),
                "goodput_bps": recv.get("bits_per_second"), "retransmits": sent.get("retransmits"),
                "sender_bytes": sent.get("bytes")}
    s = end.get("sum_received") or end.get("sum") or {}
    total = end.get("sum") or {}
    return {"bytes": s.get("bytes"), "seconds": s.get("seconds"), "goodput_bps": s.get("bits_per_second"),
            "packets": total.get("packets"), "lost_packets": total.get("lost_packets"),
            "lost_percent": total.get("lost_percent"), "jitter_ms": total.get("jitter_ms")}


def _py_result(f: Flow, recv: str, send: str, err: str) -> dict[str, Any]:
    try:
        r = json.loads(recv.strip().splitlines()[-1])
        s = json.loads(send.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise LabError(f"python transfer {f.name} failed: {err.strip()[-300:]}") from None
    res = {"bytes": r["bytes"], "seconds": r["seconds"], "goodput_bps": r["goodput_bps"],
           "sender_bytes": s.get("bytes")}
    if f.proto == "udp":
        sent = s.get("packets") or 0
        res.update(packets=sent, lost_packets=max(0, sent - r.get("packets", 0)),
                   lost_percent=100.0 * max(0, sent - r.get("packets", 0)) / sent if sent else None)
    return res


# ---------------------------------------------------------------------------------------------
# the Python fallback, run as `python -m xlayer.testbeds.lab.traffic ROLE ...` inside a namespace

def _emit(d: dict) -> None:
    print(json.dumps(d), flush=True)


def tcp_send(port: int, seconds: float, rate: int | None, cc: str) -> dict:
    """Accept one connection and send for `seconds` (paced to `rate` bit/s if given); return counts."""
    with socket.create_server(("0.0.0.0", port), reuse_port=False) as srv:
        srv.settimeout(30)
        conn, _ = srv.accept()
    with conn:
        with contextlib.suppress(OSError):
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
        buf = b"\0" * 16384
        sent, t0 = 0, time.monotonic()
        while (now := time.monotonic()) - t0 < seconds:
            if rate and sent * 8 > rate * (now - t0):
                time.sleep(min(0.002, sent * 8 / rate - (now - t0)))
                continue
            sent += conn.send(buf)
        conn.shutdown(socket.SHUT_WR)
        with contextlib.suppress(OSError):
            conn.settimeout(10)
            while conn.recv(4096):
                pass
    return {"bytes": sent, "seconds": time.monotonic() - t0}


def tcp_recv(host: str, port: int, timeout: float, rcvbuf: int | None) -> dict:
    """Connect and read until EOF; return bytes and goodput between the first and last byte."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)   # before connect: sets the window
    sock.settimeout(timeout)
    sock.connect((host, port))
    n, first, last = 0, None, None
    with sock:
        while chunk := sock.recv(65536):
            last = time.time_ns()
            first = first or last
            n += len(chunk)
    secs = (last - first) / 1e9 if first and last and last > first else 0.0
    return {"bytes": n, "seconds": secs, "goodput_bps": n * 8 / secs if secs else 0.0}


def udp_send(host: str, port: int, rate: int, seconds: float, size: int = UDP_PAYLOAD) -> dict:
    """Send datagrams of `size` bytes at `rate` bit/s for `seconds`, unresponsive; return counts."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    n, t0 = 0, time.monotonic()
    while (now := time.monotonic()) - t0 < seconds:
        due = n * size * 8 / rate
        if due > now - t0:
            time.sleep(min(0.002, due - (now - t0)))
            continue
        with contextlib.suppress(BlockingIOError, ConnectionRefusedError):
            sock.sendto(n.to_bytes(8, "big") + b"\0" * (size - 8), (host, port))
        n += 1
    return {"packets": n, "bytes": n * size, "seconds": time.monotonic() - t0}


def udp_recv(port: int, seconds: float, idle: float = 1.0) -> dict:
    """Receive datagrams until `idle` s pass without one (or `seconds` in all); return counts."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("0.0.0.0", port))
    n = nbytes = 0
    first = last = None
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sock.settimeout(idle if n else max(0.1, end - time.monotonic()))
        try:
            data = sock.recv(65536)
        except socket.timeout:
            if n:
                break
            continue
        last = time.time_ns()
        first = first or last
        n += 1
        nbytes += len(data)
    secs = (last - first) / 1e9 if first and last and last > first else 0.0
    return {"packets": n, "bytes": nbytes, "seconds": secs, "goodput_bps": nbytes * 8 / secs if secs else 0.0}


def main(argv: list[str] | None = None) -> int:
    """Run one side of a fallback transfer and print its counts as one JSON line; return 0."""
    p = argparse.ArgumentParser(prog="python -m xlayer.testbeds.lab.traffic")
    p.add_argument("role", choices=("tcp-send", "tcp-recv", "udp-send", "udp-recv"))
    p.add_argument("--host")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--rate", type=int, default=None)
    p.add_argument("--rcvbuf", type=int, default=None)
    p.add_argument("--cc", default="cubic")
    a = p.parse_args(argv)
    if a.role == "tcp-send":
        _emit(tcp_send(a.port, a.seconds, a.rate, a.cc))
    elif a.role == "tcp-recv":
        _emit(tcp_recv(a.host, a.port, a.timeout, a.rcvbuf))
    elif a.role == "udp-send":
        _emit(udp_send(a.host, a.port, a.rate or 1_000_000, a.seconds))
    else:
        _emit(udp_recv(a.port, a.seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
