"""The kernel's own counters, read before and after a lab run: the ground truth of what happened.

`tc -s qdisc` says what the AP queue dropped and how often it was over its rate; `/proc/net/netstat`
and `/proc/net/snmp` in each namespace say what TCP did (timeouts, spurious RTOs and their undo,
D-SACKs, retransmitted segments).  Analyzers are judged against these numbers.
"""
from __future__ import annotations

import json

from xlayer.testbeds.lab.topology import LabError, nsexec, sh

# Always reported, even when zero: the counters the scenarios are about.
KEY_COUNTERS = {
    "TcpExt": ("TCPTimeouts", "TCPSpuriousRTOs", "TCPLossUndo", "TCPSACKReorder", "TCPDSACKRecv",
               "TCPDSACKOldSent", "TCPDSACKUndo", "TCPFastRetrans", "TCPSlowStartRetrans",
               "TCPLostRetransmit", "TCPLossProbes", "TCPLossProbeRecovery", "TCPSackRecovery",
               "TCPSACKReneging", "TCPFullUndo", "TCPPartialUndo", "TCPSpuriousRtxHostQueues"),
    "Tcp": ("RetransSegs", "OutSegs", "InSegs", "InErrs", "OutRsts"),
    "Udp": ("InDatagrams", "OutDatagrams", "NoPorts", "InErrors", "RcvbufErrors", "SndbufErrors"),
    "Ip": ("InReceives", "ForwDatagrams", "OutDiscards", "OutRequests"),
}
QDISC_FIELDS = ("bytes", "packets", "drops", "overlimits", "requeues")


def parse_proc_counters(text: str) -> dict[str, dict[str, int]]:
    """Return {section: {counter: value}} from /proc/net/netstat or /proc/net/snmp text."""
    out: dict[str, dict[str, int]] = {}
    lines = [ln.split() for ln in text.splitlines() if ln.strip()]
    # the files pair a header line with a value line, both starting with "Section:"
    for head, vals in zip(lines[::2], lines[1::2]):
        if not head or head[0] != vals[0] or not head[0].endswith(":"):
            continue
        sect = out.setdefault(head[0][:-1], {})
        for k, v in zip(head[1:], vals[1:]):
            try:
                sect[k] = int(v)
            except ValueError:
                continue
    return out


def read_counters(ns: str) -> dict[str, dict[str, int]]:
    """Return the namespace's /proc/net/netstat and /proc/net/snmp counters by section."""
    p = sh(nsexec(ns, ["cat", "/proc/net/netstat", "/proc/net/snmp"]))
    return parse_proc_counters(p.stdout)


def counter_delta(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Return after - before per counter: every non-zero change plus the KEY_COUNTERS."""
    out: dict[str, dict[str, int]] = {}
    for sect, vals in after.items():
        keep = KEY_COUNTERS.get(sect, ())
        d = {k: v - before.get(sect, {}).get(k, 0) for k, v in vals.items()}
        d = {k: v for k, v in d.items() if v != 0 or k in keep}
        if d:
            out[sect] = dict(sorted(d.items()))
    return out


def read_qdiscs(ns: str, dev: str) -> list[dict]:
    """Return `tc -s -j qdisc show dev DEV` in the namespace (kind, handle, bytes, drops, backlog...)."""
    p = sh(nsexec(ns, ["tc", "-s", "-j", "qdisc", "show", "dev", dev]))
    try:
        return json.loads(p.stdout or "[]")
    except ValueError as exc:
        raise LabError(f"tc -j output is not JSON: {p.stdout[:200]!r}") from exc


def qdisc_delta(before: list[dict], after: list[dict]) -> list[dict]:
    """Return per qdisc (matched by handle): counter deltas, and backlog/qlen at the end."""
    prev = {q.get("handle"): q for q in before}
    out = []
    for q in after:
        b = prev.get(q.get("handle"), {})
        out.append({"kind": q.get("kind"), "handle": q.get("handle"), "options": q.get("options", {}),
                    **{k: q.get(k, 0) - b.get(k, 0) for k in QDISC_FIELDS},
                    "backlog_bytes_after": q.get("backlog", 0), "qlen_after": q.get("qlen", 0)})
    return out


def causes_of(scenario: str, truth: dict) -> list[dict]:
    """Return what an analyzer should attribute in a lab run ([] for the steady ones), from what happened.

    Same shape as the simulated bundles' ``causes`` (field-guide names, reference epoch seconds): a
    delay spike whose retransmission the kernel undid (TCPLossUndo / TCPSpuriousRTOs) is a spurious
    RTO over the spike; an unresponsive UDP stream that made the bottleneck queue drop is queue
    overflow over the transfers.  A plain queue overflow under one TCP flow is TCP's ordinary
    congestion control, not a drop of throughput: no cause.
    """
    srv = truth.get("counters", {}).get("server", {}).get("TcpExt", {})
    drops = sum(int(q.get("drops", 0) or 0) for q in truth.get("qdisc", {}).get("router_out", []))
    win = truth.get("window", {})
    out: list[dict] = []
    if scenario == "delay_spike" and (srv.get("TCPLossUndo", 0) or srv.get("TCPSpuriousRTOs", 0)):
        for ev in truth.get("events", []):
            if ev.get("kind") == "rate_drop":
                out.append({"cause": "spurious_rto", "role": "primary", "start_ts": ev["start_ns"] / 1e9,
                            "end_ts": ev["end_ns"] / 1e9, "flows": ["tcp"], "stations": [],
                            "evidence": "the link nearly stalls; the server's RTO fires and the kernel undoes it"})
    if scenario == "udp_flood" and drops:
        out.append({"cause": "ap_queue_overflow", "role": "primary", "start_ts": win["transfers_start_ns"] / 1e9,
                    "end_ts": win["transfers_end_ns"] / 1e9, "flows": ["tcp", "udp"], "stations": [],
                    "evidence": f"the unresponsive UDP stream fills the bottleneck queue: {drops} drops"})
    return out
