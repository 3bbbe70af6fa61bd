"""Three network namespaces, server -- router ("AP") -- client, joined by veth pairs.

Names carry a random suffix so that parallel runs never collide; interface names stay within Linux's
15 characters.  The router forwards, and its egress toward the client holds a `tbf` queue that plays
the AP's downlink queue.  Every veth has `gso_max_segs 1`: the stack then hands the wire (and the
captures) MTU-sized segments instead of 64 KB GSO super-packets, as a real NIC's wire would show.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import time
from dataclasses import dataclass, field


class LabError(Exception):
    """The lab cannot run here (not root, no namespaces, no tc) or a step of it failed."""


def sh(argv: list[str], timeout: float = 10.0, check: bool = True) -> subprocess.CompletedProcess:
    """Run one command (an argument list); return it, raising LabError if `check` and it failed."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LabError(f"{' '.join(argv)}: {exc}") from exc
    if check and p.returncode != 0:
        raise LabError(f"{' '.join(argv)}: {p.stderr.strip() or f'exit status {p.returncode}'}")
    return p


def nsexec(ns: str, argv: list[str]) -> list[str]:
    """Return argv run inside namespace `ns`."""
    return ["ip", "netns", "exec", ns, *argv]


@dataclass
class Topology:
    """The lab network: namespace and interface names, addresses; `up()` builds it, `down()` removes it."""

    suffix: str = field(default_factory=lambda: secrets.token_hex(3))
    server_ip: str = "10.71.1.2"
    router_in_ip: str = "10.71.1.1"
    router_out_ip: str = "10.71.2.1"
    client_ip: str = "10.71.2.2"
    created: list[str] = field(default_factory=list)

    @property
    def ns(self) -> dict[str, str]:
        """Return the namespace names by role (server, router, client)."""
        return {r: f"xlab-{self.suffix}-{r}" for r in ("server", "router", "client")}

    @property
    def ifaces(self) -> dict[str, str]:
        """Return the interface names by vantage (server, router_in, router_out, client)."""
        return {"server": f"xl{self.suffix}-srv", "router_in": f"xl{self.suffix}-rin",
                "router_out": f"xl{self.suffix}-rout", "client": f"xl{self.suffix}-cli"}

    def vantage_ns(self, vantage: str) -> str:
        """Return the namespace an interface of the given vantage lives in."""
        return self.ns["router" if vantage.startswith("router") else vantage]

    def describe(self) -> dict:
        """Return the topology as JSON-able data for the manifest and truth.json."""
        return {"namespaces": self.ns, "interfaces": self.ifaces,
                "addresses": {"server": self.server_ip, "router_in": self.router_in_ip,
                              "router_out": self.router_out_ip, "client": self.client_ip},
                "path": "server --veth-- router_in [router, ip_forward] router_out --veth-- client",
                "ap_queue": f"tbf on {self.ifaces['router_out']} egress (router -> client)"}

    def up(self) -> None:
        """Create namespaces, veth pairs, addresses and routes; raise LabError on failure."""
        ns, itf = self.ns, self.ifaces
        for role in ("server", "router", "client"):
            sh(["ip", "netns", "add", ns[role]])
            self.created.append(ns[role])
            # no IPv6: router solicitations and DAD would only add noise to the captures
            sh(nsexec(ns[role], ["sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1",
                                 "net.ipv6.conf.default.disable_ipv6=1"]), check=False)
            sh(["ip", "-n", ns[role], "link", "set", "lo", "up"])
        sh(["ip", "link", "add", itf["server"], "netns", ns["server"], "type", "veth",
            "peer", "name", itf["router_in"], "netns", ns["router"]])
        sh(["ip", "link", "add", itf["router_out"], "netns", ns["router"], "type", "veth",
            "peer", "name", itf["client"], "netns", ns["client"]])
        for vantage, addr in (("server", self.server_ip), ("router_in", self.router_in_ip),
                              ("router_out", self.router_out_ip), ("client", self.client_ip)):
            n = self.vantage_ns(vantage)
            sh(["ip", "-n", n, "addr", "add", f"{addr}/24", "dev", itf[vantage]])
            sh(["ip", "-n", n, "link", "set", itf[vantage], "gso_max_segs", "1", "up"])
        sh(["ip", "-n", ns["server"], "route", "add", "default", "via", self.router_in_ip])
        sh(["ip", "-n", ns["client"], "route", "add", "default", "via", self.router_out_ip])
        sh(nsexec(ns["router"], ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"]))
        self._wait_reachable()

    def _wait_reachable(self) -> None:
        # veths come up asynchronously; wait for carrier on both ends before traffic starts
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            states = [sh(["ip", "-n", self.vantage_ns(v), "-br", "link", "show", "dev", i], check=False).stdout
                      for v, i in self.ifaces.items()]
            if all(" UP " in s for s in states):
                return
            time.sleep(0.05)
        raise LabError("the lab's veth interfaces did not come up within 5 s")

    def tc(self, action: str, rate_bps: int, burst_bytes: int, limit_bytes: int) -> list[str]:
        """Return the tc command that adds or changes the router's egress tbf toward the client."""
        return nsexec(self.ns["router"], ["tc", "qdisc", action, "dev", self.ifaces["router_out"], "root",
                                          "tbf", "rate", f"{int(rate_bps)}bit", "burst", str(int(burst_bytes)),
                                          "limit", str(int(limit_bytes))])

    def down(self) -> None:
        """Delete the namespaces this topology created (their veths go with them); never raises."""
        for name in reversed(self.created):
            with contextlib.suppress(LabError):
                sh(["ip", "netns", "delete", name], check=False)
        self.created.clear()


def check_lab_possible() -> None:
    """Return None if namespaces, veth and tbf work here; raise LabError saying what is missing."""
    if os.geteuid() != 0:
        raise LabError("the lab needs root (network namespaces, veth, tc)")
    for tool in ("ip", "tc"):
        if sh(["which", tool], check=False).returncode != 0:
            raise LabError(f"{tool} not found (apt-get install iproute2)")
    probe = Topology()
    try:
        sh(["ip", "netns", "add", probe.ns["router"]])
        probe.created.append(probe.ns["router"])
        sh(["ip", "-n", probe.ns["router"], "link", "add", probe.ifaces["router_out"], "type", "veth",
            "peer", "name", probe.ifaces["client"]])
        sh(probe.tc("add", 10_000_000, 3000, 100_000))
    except LabError as exc:
        raise LabError(f"network namespaces / veth / tbf do not work here: {exc}") from exc
    finally:
        probe.down()
