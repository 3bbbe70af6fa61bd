"""Live capture on the local host into a bundle: dumpcap (or tcpdump) per interface, `ss` sampling.

One `CaptureSession` starts one packet-capture child per interface (`ip netns exec NS ...` for an
interface inside a network namespace) and one `xlayer.acquire.sampler.SsSampler` thread per `ss` vantage,
watches them, and on stop (duration, a signal, a full disk, a failed child) stops every child so that
its file ends on a whole record, then writes `bundle.json` (shared bundle spec, `xlayer.bundle.manifest`).

Why the details are as they are:
* Children run in their own process group, so a terminal's Ctrl-C reaches only us; we then forward
  SIGINT ourselves, in order, and each dumpcap finishes its file (pcapng statistics block included).
  Anything still alive after a grace period gets SIGTERM, then SIGKILL, and the manifest says so.
* A full disk must still leave a valid bundle.  A small reserve file is written at start and removed
  just before the final manifest is written, so that the manifest write finds room even when the
  captures ate every byte; a record cut short by ENOSPC is cut off the file (`trim_partial_tail`) so
  every packet left is readable.
* All captures of one session are stamped by the same kernel clock (network namespaces share it), so
  every entry names the host's clock, not its vantage's: no alignment is needed between them.
"""
from __future__ import annotations

import contextlib
import errno
import glob
import json
import mmap
import os
import platform
import re
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parsers.formats.detect import PCAPNG_BYTE_ORDERS, PCAPNG_MAGIC, pcap_magic
from xlayer.bundle.manifest import MANIFEST, Bundle, CaptureEntry, utc_now, write_manifest

ARPHRD_IEEE80211_RADIOTAP = 803
RESERVE_FILE = ".xlayer-reserve"
RESERVE_BYTES = 256 << 10
READY_TIMEOUT_S = 10.0
# libpcap on Linux hands packets over in blocks (TPACKET_V3) that the kernel retires when full or
# after the read timeout (dumpcap: 250 ms); a block still open at SIGINT is lost with its packets.
# Waiting this long between the stop request and SIGINT gets every packet before the request saved.
FLUSH_WAIT_S = 0.6
STOP_GRACE_S = 5.0
TERM_GRACE_S = 2.0
# Names end up in file names and argument lists: a safe alphabet, and never a leading '-' (an option)
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,39}$")
# Linux allows up to 15 bytes without '/', ':' or blanks; we also refuse a leading '-' or '.'
_IFACE_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@+-]{0,14}$")


class CaptureSetupError(Exception):
    """The capture cannot start as asked (bad argument, missing tool or interface, not monitor mode)."""


# ---------------------------------------------------------------------------------------------
# what to capture

@dataclass
class IfaceSpec:
    """One interface to capture: kind (air|wired), vantage name, interface, optional namespace."""

    kind: str
    vantage: str
    iface: str
    netns: str | None = None
    notes: str = ""
    channel: int | None = None


@dataclass
class SsSpec:
    """One `ss -tin` sampler: vantage name, optional namespace, filter tokens, interval in seconds."""

    vantage: str
    netns: str | None = None
    filter: list[str] = field(default_factory=list)
    interval: float = 0.05


def parse_iface_spec(text: str, kind: str, default_netns: str | None = None) -> IfaceSpec:
    """Return the IfaceSpec that `[VANTAGE=][NS:]IFACE` names (vantage defaults: sniffer / the iface)."""
    vantage, sep, rest = text.partition("=")
    if not sep:
        vantage, rest = "", text
    netns, sep, iface = rest.rpartition(":")
    if not sep:
        netns, iface = "", rest
    if not iface:
        raise CaptureSetupError(f"{text!r}: no interface name (expected [VANTAGE=][NS:]IFACE)")
    check_iface_name(iface, f"{text!r}: ")
    vantage = vantage or ("sniffer" if kind == "air" else iface)
    _check_name(vantage, "vantage")
    ns = netns or default_netns
    if ns is not None:
        _check_name(ns, "namespace")
    return IfaceSpec(kind=kind, vantage=vantage, iface=iface, netns=ns)


def parse_ss_spec(text: str, filter: list[str], interval: float) -> SsSpec:
    """Return the SsSpec that `VANTAGE[=NS]` names."""
    vantage, _, ns = text.partition("=")
    _check_name(vantage, "vantage")
    if ns:
        _check_name(ns, "namespace")
    if interval <= 0:
        raise CaptureSetupError("--interval must be positive")
    return SsSpec(vantage=vantage, netns=ns or None, filter=list(filter), interval=interval)


def _check_name(name: str, what: str) -> None:
    if not _NAME_RE.match(name):
        raise CaptureSetupError(f"{what} {name[:60]!r}: use 1-40 characters of A-Z a-z 0-9 _ . -, "
                                "starting with a letter, digit or _")


def check_iface_name(iface: str, where: str = "") -> str:
    """Return `iface` if it is a usable interface name; raise CaptureSetupError otherwise.

    Interface names go into argument lists (ip, iw, dumpcap, tcpdump) and /sys paths: 1-15
    characters of A-Z a-z 0-9 _ . @ + -, never starting with '-' (an option) or '.'.
    """
    if not isinstance(iface, str) or not _IFACE_RE.match(iface):
        raise CaptureSetupError(f"{where}{str(iface)[:60]!r} is not a valid interface name (1-15 characters "
                                "of A-Z a-z 0-9 _ . @ + -, starting with a letter, digit or _)")
    return iface


def check_capture_filter(bpf: str | None) -> str | None:
    """Return the capture (BPF) filter if it can be handed to a capture tool; raise CaptureSetupError.

    The filter is always passed as one argument that the tool cannot take for an option (dumpcap
    `-f FILTER`, tcpdump `-- FILTER`); an expression starting with '-' is refused all the same, as
    no pcap-filter expression does.
    """
    if bpf is None:
        return None
    if not isinstance(bpf, str) or not bpf.strip():
        raise CaptureSetupError("--filter: the capture filter is empty")
    if bpf.lstrip().startswith("-"):
        raise CaptureSetupError(f"--filter {bpf[:60]!r}: a capture filter cannot start with '-' "
                                "(it would look like an option)")
    if any(c in bpf for c in "\x00\n\r"):
        raise CaptureSetupError("--filter: the capture filter contains a NUL or line break")
    return bpf


def in_netns(netns: str | None, argv: list[str]) -> list[str]:
    """Return argv prefixed with `ip netns exec NS` when a namespace is given."""
    return ["ip", "netns", "exec", netns, *argv] if netns else list(argv)


def _run(argv: list[str], timeout: float = 5.0) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


# ---------------------------------------------------------------------------------------------
# interface facts

def link_info(iface: str, netns: str | None = None) -> dict[str, Any]:
    """Return `ip -d -j -s link show` for one interface; raise CaptureSetupError if it is absent."""
    argv = ["ip", *(["-n", netns] if netns else []), "-d", "-j", "-s", "link", "show", "dev", iface]
    try:
        p = _run(argv)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CaptureSetupError(f"cannot run ip: {exc}") from exc
    if p.returncode != 0:
        where = f" in namespace {netns}" if netns else ""
        msg = (p.stderr.strip().splitlines() or ["unknown error"])[0]
        raise CaptureSetupError(f"interface {iface}{where}: {msg}")
    try:
        return json.loads(p.stdout)[0]
    except (ValueError, IndexError) as exc:
        raise CaptureSetupError(f"interface {iface}: cannot read `ip -j link` output") from exc


def rx_dropped(iface: str, netns: str | None = None) -> int | None:
    """Return the interface's rx_dropped counter (/sys/class/net/IFACE/statistics), or None."""
    if netns is None:
        with contextlib.suppress(OSError, ValueError):
            return int(Path(f"/sys/class/net/{iface}/statistics/rx_dropped").read_text())
    # Inside a namespace /sys shows the caller's namespace; ip -n reads the same counter there.
    with contextlib.suppress(CaptureSetupError, KeyError, TypeError):
        info = link_info(iface, netns)
        stats = info.get("stats64") or info.get("stats")
        return int(stats["rx"]["dropped"])
    return None


def monitor_state(iface: str, netns: str | None = None) -> tuple[bool, str]:
    """Return (is_monitor, how it was decided) for an interface, from iw or the ARPHRD link type."""
    iw = shutil.which("iw")
    if iw:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            p = _run(in_netns(netns, [iw, "dev", iface, "info"]))
            if p.returncode == 0:
                m = re.search(r"^\s*type\s+(\S+)", p.stdout, re.M)
                if m:
                    return m.group(1) == "monitor", f"iw dev {iface} info: type {m.group(1)}"
    info = link_info(iface, netns)
    lt = info.get("link_type", "?")
    # ip prints ARPHRD 803 as "ieee802.11/radiotap"
    return lt == "ieee802.11/radiotap", f"link type {lt} (monitor mode is ieee802.11/radiotap, ARPHRD 803)"


def check_monitor(iface: str, netns: str | None = None) -> None:
    """Return None if the interface is in monitor mode; raise CaptureSetupError saying why not."""
    ok, why = monitor_state(iface, netns)
    if not ok:
        raise CaptureSetupError(
            f"--air {iface}: not in monitor mode ({why}); set it up first, e.g. "
            f"`xlayer monitor {iface} --channel N`, or capture it with --wired")


def wifi_channel(iface: str, netns: str | None = None) -> int | None:
    """Return the channel `iw dev IFACE info` reports, or None."""
    iw = shutil.which("iw")
    if not iw:
        return None
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        p = _run(in_netns(netns, [iw, "dev", iface, "info"]))
        m = re.search(r"^\s*channel\s+(\d+)", p.stdout, re.M)
        if m:
            return int(m.group(1))
    return None


def clock_info() -> dict[str, Any]:
    """Return what disciplines the host clock: chrony, systemd-timesyncd or ntpd output, or a note."""
    probes = [("chrony", ["chronyc", "-n", "tracking"]),
              ("timedatectl", ["timedatectl", "show"]),
              ("ntpd", ["ntpq", "-p"])]
    for source, argv in probes:
        if not shutil.which(argv[0]):
            continue
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            p = _run(argv, timeout=3.0)
            if p.returncode == 0 and p.stdout.strip():
                return {"source": source, "tracking": p.stdout.strip(), "command": argv}
    return {"source": "none", "tracking": None,
            "note": "no clock discipline found (chronyc, timedatectl and ntpq absent or silent); "
                    "timestamps are the free-running host clock"}


# ---------------------------------------------------------------------------------------------
# capture files: count records, cut a partly written last one

def scan_capture_file(path: str | os.PathLike) -> tuple[str | None, int, int, int]:
    """Return (format, whole records, byte offset after the last whole block, file size)."""
    size = os.path.getsize(path)
    if size < 24:
        return None, 0, 0, size
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
        magic = m[:4]
        if magic == PCAPNG_MAGIC:
            return ("pcapng",) + _scan_pcapng(m, size) + (size,)
        pcap = pcap_magic(magic)
        if pcap is not None:
            return ("pcap",) + _scan_pcap(m, size, pcap.byte_order) + (size,)
    return None, 0, 0, size


def _scan_pcap(m: mmap.mmap, size: int, end: str) -> tuple[int, int]:
    off, n = 24, 0
    hdr = struct.Struct(end + "IIII")
    while off + 16 <= size:
        incl = hdr.unpack_from(m, off)[2]
        if off + 16 + incl > size:
            break
        off += 16 + incl
        n += 1
    return n, off


def _scan_pcapng(m: mmap.mmap, size: int) -> tuple[int, int]:
    off, n, end = 0, 0, "<"
    while off + 12 <= size:
        btype = struct.unpack_from(end + "I", m, off)[0]
        if m[off:off + 4] == PCAPNG_MAGIC:
            # each section header carries its own byte order
            end = PCAPNG_BYTE_ORDERS.get(m[off + 8:off + 12], ">")
        blen = struct.unpack_from(end + "I", m, off + 4)[0]
        if blen < 12 or blen % 4 or off + blen > size:
            break
        if struct.unpack_from(end + "I", m, off + blen - 4)[0] != blen:
            break
        if btype in (2, 3, 6):          # packet, simple packet, enhanced packet blocks
            n += 1
        off += blen
    return n, off


def trim_partial_tail(path: str | os.PathLike) -> int:
    """Cut a partly written last record off a pcap/pcapng file; return the bytes removed."""
    fmt, _, good, size = scan_capture_file(path)
    if fmt is None or good >= size:
        return 0
    os.truncate(path, good)
    return size - good


# ---------------------------------------------------------------------------------------------
# packet-capture children

_DUMPCAP_STATS = re.compile(r"Packets received/dropped on interface '(?P<iface>[^']*)': (?P<rx>\d+)/(?P<drop>\d+)"
                            r"(?: \(pcap:(?P<pcap>\d+)/dumpcap:(?P<dumpcap>\d+)/flushed:(?P<flushed>\d+)"
                            r"/ps_ifdrop:(?P<ps_ifdrop>\d+)\))?")
_DISK_FULL = re.compile(r"no space left|ENOSPC|disk (is )?full", re.I)


def pick_tool(tool: str = "auto") -> str:
    """Return the capture program to use: dumpcap preferred, tcpdump as fallback."""
    order = {"auto": ["dumpcap", "tcpdump"], "dumpcap": ["dumpcap"], "tcpdump": ["tcpdump"]}[tool]
    for name in order:
        if shutil.which(name):
            return name
    raise CaptureSetupError(f"no capture program found ({' or '.join(order)}); "
                            "apt-get install wireshark-common (dumpcap) or tcpdump")


def capture_argv(tool: str, iface: str, out_stem: Path, snaplen: int | None = None,
                 bpf: str | None = None, ring_size_mb: float | None = None,
                 ring_seconds: float | None = None, ring_files: int | None = None) -> tuple[list[str], str]:
    """Return (argument list, file glob) for capturing `iface` with dumpcap or tcpdump.

    No value can reach the tool as an option: the interface name is checked, dumpcap gets the filter
    as `-f FILTER` and tcpdump after `--` (the end of its options), each as a single argument.
    """
    check_iface_name(iface)
    check_capture_filter(bpf)
    ring = ring_size_mb is not None or ring_seconds is not None
    if tool == "dumpcap":
        path = f"{out_stem}.pcapng"
        argv = ["dumpcap", "-i", iface, "-w", path, "-q", "-n"]
        if snaplen:
            argv += ["-s", str(snaplen)]
        if bpf:
            argv += ["-f", bpf]
        if ring_size_mb is not None:
            argv += ["-b", f"filesize:{max(1, int(ring_size_mb * 1000))}"]   # dumpcap counts kB
        if ring_seconds is not None:
            argv += ["-b", f"duration:{max(1, int(ring_seconds))}"]
        if ring and ring_files:
            argv += ["-b", f"files:{ring_files}"]
        # a ring names its files STEM_NNNNN_YYYYmmddHHMMSS.pcapng
        return argv, (f"{glob.escape(str(out_stem))}_*.pcapng" if ring else glob.escape(path))
    path = f"{out_stem}.pcap"
    # -U: write each packet as it comes, so a stop or a crash loses at most the record in flight
    argv = ["tcpdump", "-i", iface, "-w", path, "-U", "-n", "-Z", "root", "--immediate-mode"]
    if snaplen:
        argv += ["-s", str(snaplen)]
    if ring_size_mb is not None:
        argv += ["-C", str(max(1, int(round(ring_size_mb))))]
    if ring_seconds is not None:
        # -G needs a time pattern in the name, else every rotation overwrites the same file
        path = f"{out_stem}_%Y%m%d%H%M%S.pcap"
        argv[argv.index("-w") + 1] = path
        argv += ["-G", str(max(1, int(ring_seconds)))]
    if ring and ring_files:
        argv += ["-W", str(ring_files)]
    if bpf:
        argv += ["--", bpf]
    return argv, (f"{glob.escape(str(out_stem))}*.pcap" if ring else glob.escape(path))


class _Child:
    """One capture process: its argument list, its drained stderr, and how it ended."""

    def __init__(self, spec: IfaceSpec, tool: str, argv: list[str], pattern: str):
        self.spec, self.tool, self.argv, self.pattern = spec, tool, argv, pattern
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []
        self.ready = threading.Event()
        self.stopped_by = ""
        self.rx_dropped_before: int | None = None
        self.cut: dict[str, int] = {}          # file -> bytes of a partial last record removed
        self.rx_dropped_after: int | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> None:
        # process_group=0: the child leaves our group, so the terminal's SIGINT is ours to forward
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, process_group=0)
        self._reader = threading.Thread(target=self._drain, daemon=True,
                                        name=f"stderr-{self.spec.vantage}")
        self._reader.start()

    def _drain(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.lines.append(line)
            # dumpcap: "Capturing on 'eth0'"; tcpdump: "tcpdump: listening on eth0, link-type ..."
            if line.startswith("Capturing on") or "listening on " in line:
                self.ready.set()
        self.ready.set()        # EOF: it exited; start() looks at the return code

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def stderr_text(self) -> str:
        if self._reader is not None:
            self._reader.join(timeout=2.0)
        return "\n".join(self.lines)

    def disk_full(self) -> bool:
        return bool(_DISK_FULL.search(self.stderr_text()))

    def failure(self) -> str:
        """Return the child's own words about why it stopped (its last meaningful stderr lines)."""
        skip = ("Capturing on", "File:", "Packets captured", "Packets received", "Running as user",
                "listening on", "tcpdump: verbose output")
        lines = [ln for ln in self.lines if ln.strip() and not any(k in ln for k in skip)]
        return " ".join(lines[-4:])[:500] or f"exit status {self.proc.returncode if self.proc else '?'}"

    def stats(self) -> dict[str, Any]:
        """Return the packets captured/dropped the tool reported when it stopped."""
        text = self.stderr_text()
        out: dict[str, Any] = {}
        if self.tool == "dumpcap":
            m = re.search(r"Packets captured: (\d+)", text)
            if m:
                out["packets_captured"] = int(m.group(1))
            m = _DUMPCAP_STATS.search(text)
            if m:
                out["packets_received"] = int(m.group("rx"))
                out["packets_dropped"] = int(m.group("drop"))
                if m.group("pcap") is not None:
                    out["drops"] = {k: int(m.group(k)) for k in ("pcap", "dumpcap", "flushed", "ps_ifdrop")}
        else:
            for key, pat in (("packets_captured", r"(\d+) packets? captured"),
                             ("packets_received", r"(\d+) packets? received by filter"),
                             ("packets_dropped", r"(\d+) packets? dropped by kernel"),
                             ("dropped_by_interface", r"(\d+) packets? dropped by interface")):
                m = re.search(pat, text)
                if m:
                    out[key] = int(m.group(1))
        return out


# ---------------------------------------------------------------------------------------------
# the session

@dataclass
class CaptureConfig:
    """Everything `xlayer capture` was asked to do."""

    out_dir: Path
    ifaces: list[IfaceSpec] = field(default_factory=list)
    samplers: list[SsSpec] = field(default_factory=list)
    snaplen: int | None = None
    bpf: str | None = None
    ring_size_mb: float | None = None
    ring_seconds: float | None = None
    ring_files: int | None = None
    tags: dict[str, str] = field(default_factory=dict)
    tool: str = "auto"
    command: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)     # more top-level manifest keys


@dataclass
class CaptureResult:
    """How a capture ended: the bundle written, why it stopped, and what went wrong on the way."""

    bundle: Bundle
    stop_reason: str
    errors: list[str]
    manifest_path: Path | None
    manifest_error: str | None = None

    @property
    def exit_code(self) -> int:
        """Return 0 for a stop on request (duration, signal), 1 otherwise."""
        ok = self.stop_reason in ("duration", "SIGINT", "SIGTERM") and self.manifest_error is None
        return 0 if ok else 1


class CaptureSession:
    """Starts, watches and stops the capture children of one bundle; `finish()` writes the manifest."""

    def __init__(self, config: CaptureConfig):
        self.cfg = config
        self.out = Path(config.out_dir)
        self.children: list[_Child] = []
        self.samplers: list[tuple[SsSpec, Any, threading.Thread, str]] = []
        self.errors: list[str] = []
        self.reason: str | None = None
        self.stop_event = threading.Event()
        self.started_ns: int | None = None
        self.stopped_ns: int | None = None
        self.host = socket.gethostname()
        self.clock: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None
        self._sampler_errors: dict[str, BaseException] = {}

    # --- start ---

    def check(self) -> None:
        """Return None if every interface, namespace and tool is usable; raise CaptureSetupError."""
        cfg = self.cfg
        if not cfg.ifaces and not cfg.samplers:
            raise CaptureSetupError("nothing to capture: give --air, --wired or --tcp-state")
        if (self.out / MANIFEST).exists():
            raise CaptureSetupError(f"{self.out} already holds a bundle ({MANIFEST}); choose another directory")
        seen: set[str] = set()
        for s in cfg.ifaces:
            key = f"{s.vantage}-{s.iface}"
            if key in seen:
                raise CaptureSetupError(f"{s.iface} at vantage {s.vantage} is given twice")
            seen.add(key)
            link_info(s.iface, s.netns)         # raises if the interface or namespace is missing
            if s.kind == "air":
                check_monitor(s.iface, s.netns)
        for s in cfg.samplers:
            if s.vantage in {x.vantage for x in cfg.samplers if x is not s}:
                raise CaptureSetupError(f"--tcp-state {s.vantage} is given twice")
            if s.netns and not Path(f"/run/netns/{s.netns}").exists():
                raise CaptureSetupError(f"--tcp-state {s.vantage}: no network namespace {s.netns!r}")
        if cfg.ifaces:
            pick_tool(cfg.tool)
        if cfg.samplers and not shutil.which("ss"):
            raise CaptureSetupError("ss not found (apt-get install iproute2)")
        if cfg.ifaces and os.geteuid() != 0:
            raise CaptureSetupError("capturing packets needs root (or dumpcap's capabilities)")

    def start(self) -> None:
        """Start every child, wait until each captures; raise CaptureSetupError (nothing left running)."""
        self.check()
        self.out.mkdir(parents=True, exist_ok=True)
        self.clock = clock_info()
        self._write_reserve()
        try:
            tool = pick_tool(self.cfg.tool) if self.cfg.ifaces else ""
            for s in self.cfg.ifaces:
                if s.kind == "air" and s.channel is None:
                    s.channel = wifi_channel(s.iface, s.netns)
                argv, pattern = capture_argv(tool, s.iface, self.out / f"{s.vantage}-{s.iface}",
                                             self.cfg.snaplen, self.cfg.bpf, self.cfg.ring_size_mb,
                                             self.cfg.ring_seconds, self.cfg.ring_files)
                child = _Child(s, tool, in_netns(s.netns, argv), pattern)
                child.rx_dropped_before = rx_dropped(s.iface, s.netns)
                child.start()
                self.children.append(child)
            deadline = time.monotonic() + READY_TIMEOUT_S
            for child in self.children:
                # a stop asked for while starting ends the wait; finish() then stops what started
                while not child.ready.wait(0.05) and time.monotonic() < deadline:
                    if self.stop_event.is_set():
                        break
                if self.stop_event.is_set() and child.alive():
                    continue
                if not child.alive():
                    child.proc.wait()
                    raise CaptureSetupError(f"{child.tool} on {child.spec.iface} stopped at once: "
                                            f"{child.failure()}")
                if not child.ready.is_set():
                    raise CaptureSetupError(f"{child.tool} on {child.spec.iface} did not start capturing "
                                            f"within {READY_TIMEOUT_S:g} s: {child.failure()}")
            for spec in self.cfg.samplers:
                self._start_sampler(spec)
        except BaseException:
            self._stop_children()
            self._stop_samplers()
            self._drop_reserve()
            raise
        self.started_ns = time.time_ns()
        self._watcher = threading.Thread(target=self._watch, daemon=True, name="capture-watch")
        self._watcher.start()
        with contextlib.suppress(Exception):
            # best effort: a first manifest, so that even a SIGKILLed capture leaves a described bundle
            write_manifest(self.out, self.bundle(running=True))

    def _start_sampler(self, spec: SsSpec) -> None:
        from xlayer.acquire.sampler import SamplerError, SsSampler

        name = f"{spec.vantage}-ss.txt"
        sampler = SsSampler(self.out / name, spec.interval, spec.filter, netns=spec.netns)
        # The sampler's first ss run fails loudly on a bad namespace or filter: surface it now.
        first = threading.Event()

        def target() -> None:
            try:
                sampler.run(self.stop_event, handle_signals=False)
            except BaseException as exc:      # noqa: BLE001 - reported through the manifest
                self._sampler_errors[spec.vantage] = exc
                if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
                    self.request_stop("disk_full", f"ss sampler {spec.vantage}: {exc.strerror}")
                else:
                    self.request_stop("error", f"ss sampler {spec.vantage}: {exc}")
            finally:
                first.set()

        t = threading.Thread(target=target, daemon=True, name=f"ss-{spec.vantage}")
        t.start()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline and sampler.stats.samples == 0 and not first.is_set():
            time.sleep(0.01)
        err = self._sampler_errors.get(spec.vantage)
        if isinstance(err, SamplerError):
            raise CaptureSetupError(f"--tcp-state {spec.vantage}: {err}")
        self.samplers.append((spec, sampler, t, name))

    # --- watch and stop ---

    def request_stop(self, reason: str, error: str | None = None) -> None:
        """Ask the session to stop; the first reason given is the one recorded."""
        with self._lock:
            if error:
                self.errors.append(error)
            if self.reason is None:
                self.reason = reason
        self.stop_event.set()

    def _watch(self) -> None:
        while not self.stop_event.wait(0.1):
            for child in self.children:
                if child.proc.poll() is not None:
                    child.stopped_by = "exited"
                    what = f"{child.tool} on {child.spec.iface} exited with status {child.proc.returncode}"
                    if child.disk_full():
                        self.request_stop("disk_full", f"{what}: disk full ({child.failure()})")
                    else:
                        self.request_stop("error", f"{what}: {child.failure()}")
                    break

    def wait(self, duration: float | None = None) -> str:
        """Block until a stop is requested or `duration` seconds pass; return the stop reason."""
        if not self.stop_event.wait(duration):
            self.request_stop("duration")
        return self.reason or "duration"

    def _stop_children(self) -> None:
        # SIGINT first (dumpcap and tcpdump finish their file on it), then escalate per child.
        if any(c.alive() for c in self.children):
            time.sleep(FLUSH_WAIT_S)
        for child in self.children:
            if child.alive():
                child.stopped_by = "SIGINT"
                child.signal(signal.SIGINT)
        for sig, grace in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, TERM_GRACE_S)):
            deadline = time.monotonic() + grace
            for child in self.children:
                if child.proc is None:
                    continue
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.proc.wait(max(0.0, deadline - time.monotonic()))
            for child in self.children:
                if child.alive():
                    child.stopped_by = signal.Signals(sig).name
                    self.errors.append(f"{child.tool} on {child.spec.iface} ignored "
                                       f"{'SIGINT' if sig == signal.SIGTERM else 'SIGTERM'}; sent "
                                       f"{signal.Signals(sig).name}")
                    child.signal(sig)
        for child in self.children:
            if child.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.proc.wait(TERM_GRACE_S)

    def _stop_samplers(self) -> None:
        self.stop_event.set()
        for spec, _, t, _ in self.samplers:
            t.join(timeout=10.0)
            if t.is_alive():
                self.errors.append(f"ss sampler {spec.vantage} did not stop within 10 s")

    def stop(self, reason: str = "duration") -> None:
        """Stop the samplers and the capture children (idempotent); `reason` is kept if none was set."""
        self.request_stop(reason)
        # everything up to this moment is in the captures (see FLUSH_WAIT_S)
        self.stopped_ns = self.stopped_ns or time.time_ns()
        self._stop_samplers()
        self._stop_children()
        if self._watcher is not None:
            self._watcher.join(timeout=1.0)

    # --- manifest ---

    def _write_reserve(self) -> None:
        with contextlib.suppress(OSError):
            with open(self.out / RESERVE_FILE, "wb") as fh:
                fh.write(b"\0" * RESERVE_BYTES)
                fh.flush()
                os.fsync(fh.fileno())

    def _drop_reserve(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.out / RESERVE_FILE)

    def _packet_entries(self, running: bool) -> tuple[list[CaptureEntry], list[dict[str, Any]]]:
        entries, ifaces = [], []
        for child in self.children:
            s = child.spec
            files = sorted(glob.glob(child.pattern))
            stats = {} if running else child.stats()
            clean = not running and child.stopped_by in ("SIGINT", "") and child.proc.returncode == 0
            for i, f in enumerate(files):
                cut = child.cut.get(f, 0)
                fmt, n, _, size = scan_capture_file(f) if not running else (None, None, 0, None)
                notes = [s.notes] if s.notes else []
                if cut:
                    notes.append(f"the last record was cut short ({cut} bytes removed so the file reads "
                                 "to its end)")
                if len(files) > 1:
                    notes.append(f"ring file {i + 1} of {len(files)}")
                last = i == len(files) - 1
                entries.append(CaptureEntry(
                    kind=s.kind, vantage=s.vantage, file=os.path.relpath(f, self.out), clock=self.host,
                    format=fmt or ("pcapng" if child.tool == "dumpcap" else "pcap"),
                    channel=s.channel, iface=s.iface, netns=s.netns, notes="; ".join(notes),
                    complete=None if running else (clean and not cut),
                    packets=n, bytes=size,
                    if_drops=stats.get("packets_dropped") if last else None,
                ))
            if running:
                continue
            child.rx_dropped_after = rx_dropped(s.iface, s.netns)
            before, after = child.rx_dropped_before, child.rx_dropped_after
            ifaces.append({
                "vantage": s.vantage, "iface": s.iface, "netns": s.netns, "kind": s.kind,
                "tool": child.tool, "argv": child.argv, "exit_status": child.proc.returncode,
                "stopped_by": child.stopped_by or "exited", "files": [os.path.relpath(f, self.out) for f in files],
                **stats,
                "rx_dropped": {"before": before, "after": after,
                               "delta": None if before is None or after is None else after - before,
                               "source": f"/sys/class/net/{s.iface}/statistics/rx_dropped"},
            })
        return entries, ifaces

    def _state_entries(self) -> tuple[list[CaptureEntry], list[dict[str, Any]]]:
        entries, info = [], []
        for spec, sampler, _, name in self.samplers:
            err = self._sampler_errors.get(spec.vantage)
            st = sampler.stats
            entries.append(CaptureEntry(
                kind="tcp_state", vantage=spec.vantage, file=name, clock=self.host, format="ss",
                netns=spec.netns, interval_s=spec.interval, filter=" ".join(spec.filter) or None,
                complete=err is None, packets=None, notes=f"ss stopped: {err}" if err else ""))
            info.append({"vantage": spec.vantage, "command": st.command, "samples": st.samples,
                         "errors": st.errors, "missed_slots": st.missed_slots,
                         "mean_gap_s": st.mean_gap_s, "max_run_s": round(st.max_run_s, 4)})
        return entries, info

    def bundle(self, running: bool = False) -> Bundle:
        """Return the manifest of this session (`running`: the provisional one written at start)."""
        pk, ifaces = self._packet_entries(running)
        ss, samplers = self._state_entries()
        cap: dict[str, Any] = {
            "started_ns": self.started_ns, "command": self.cfg.command, "errors": list(self.errors),
            "tool": self.children[0].tool if self.children else None, "snaplen": self.cfg.snaplen,
            "filter": self.cfg.bpf, "kernel": platform.release(),
        }
        if running:
            cap["state"] = "running"
        else:
            cap.update(stopped_ns=self.stopped_ns, stop_reason=self.reason or "duration",
                       interfaces=ifaces, samplers=samplers)
        ring = {k: v for k, v in (("size_mb", self.cfg.ring_size_mb), ("seconds", self.cfg.ring_seconds),
                                  ("files", self.cfg.ring_files)) if v is not None}
        if ring:
            cap["ring"] = ring
        return Bundle(captures=pk + ss, tags=dict(self.cfg.tags), created=utc_now(), host=self.host,
                      clocks={self.host: self.clock}, capture=cap, extra=dict(self.cfg.extra))

    def _repair_files(self) -> None:
        # a child stopped by a full disk or SIGKILL can leave half a record at the end of its file
        for child in self.children:
            for f in glob.glob(child.pattern):
                try:
                    child.cut[f] = trim_partial_tail(f)
                    os.chmod(f, 0o644)      # dumpcap makes 0600; a bundle is meant to be shared
                except OSError as exc:
                    self.errors.append(f"cannot check {os.path.basename(f)}: {exc.strerror or exc}")

    def finish(self, reason: str = "duration") -> CaptureResult:
        """Stop everything and write bundle.json; return how it went (manifest errors included)."""
        self.stop(reason)
        self._repair_files()
        try:
            b = self.bundle()
        except Exception as exc:        # noqa: BLE001 - a manifest must be attempted regardless
            self.errors.append(f"cannot describe every capture: {exc}")
            b = Bundle(tags=dict(self.cfg.tags), created=utc_now(), host=self.host,
                       capture={"started_ns": self.started_ns, "stopped_ns": self.stopped_ns,
                                "stop_reason": self.reason or "error", "errors": list(self.errors)})
        # free the reserve only now: the manifest is the one write that must find room
        self._drop_reserve()
        path, err = None, None
        try:
            path = write_manifest(self.out, b)
        except OSError as exc:
            err = f"cannot write {self.out / MANIFEST}: {exc.strerror or exc}"
        except Exception as exc:        # noqa: BLE001 - an invalid manifest is reported, not raised
            err = f"cannot write {self.out / MANIFEST}: {exc}"
        return CaptureResult(bundle=b, stop_reason=b.capture.get("stop_reason", "error") if b.capture else "error",
                             errors=list(self.errors), manifest_path=path, manifest_error=err)

    def close(self) -> None:
        """Stop any child still running, without writing a manifest (for error paths)."""
        self.request_stop("error")
        self._stop_samplers()
        self._stop_children()
        self._drop_reserve()


def run_capture(config: CaptureConfig, duration: float | None = None, handle_signals: bool = True,
                on_ready: Callable[[CaptureSession], None] | None = None) -> CaptureResult:
    """Capture until `duration` passes, SIGINT/SIGTERM, a full disk or a failure; return the result."""
    session = CaptureSession(config)
    old: dict[int, Any] = {}
    if handle_signals:
        def on_signal(signum, frame):  # noqa: ARG001 - signal handler signature
            session.request_stop(signal.Signals(signum).name)
        for sig in (signal.SIGINT, signal.SIGTERM):
            old[sig] = signal.signal(sig, on_signal)
    try:
        session.start()
        if on_ready is not None:
            on_ready(session)
        session.wait(duration)
        return session.finish()
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if session.children and any(c.alive() for c in session.children):
            session.close()


# ---------------------------------------------------------------------------------------------
# monitor mode (cannot be exercised without wireless hardware)

def monitor_commands(iface: str, channel: int, new_name: str | None = None,
                     phy: str | None = None) -> list[list[str]]:
    """Return the iw/ip commands that put `iface` (or a new monitor interface on its phy) on a channel."""
    if new_name:
        return [["iw", "phy", phy or "", "interface", "add", new_name, "type", "monitor"],
                ["ip", "link", "set", new_name, "up"],
                ["iw", "dev", new_name, "set", "channel", str(channel)]]
    return [["ip", "link", "set", iface, "down"],
            ["iw", "dev", iface, "set", "type", "monitor"],
            ["ip", "link", "set", iface, "up"],
            ["iw", "dev", iface, "set", "channel", str(channel)]]


def phy_of(iface: str) -> str:
    """Return the wiphy name (phyN) of a wireless interface; raise CaptureSetupError if none."""
    check_iface_name(iface)
    p = Path(f"/sys/class/net/{iface}/phy80211/name")
    if p.exists():
        return p.read_text().strip()
    if shutil.which("iw"):
        q = _run(["iw", "dev", iface, "info"])
        m = re.search(r"wiphy (\d+)", q.stdout)
        if m:
            return f"phy{m.group(1)}"
    raise CaptureSetupError(f"{iface} is not a wireless interface (no phy80211)")


def is_wireless(iface: str) -> bool:
    """Return True if `iface` is a wireless (cfg80211) interface: /sys/class/net/IFACE/wireless or
    phy80211 exists, or `iw dev IFACE info` names its wiphy. Changes nothing."""
    check_iface_name(iface)
    base = Path("/sys/class/net") / iface
    if (base / "wireless").exists() or (base / "phy80211").exists():
        return True
    if shutil.which("iw"):
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            p = _run(["iw", "dev", iface, "info"])
            return p.returncode == 0 and re.search(r"^\s*wiphy \d+", p.stdout, re.M) is not None
    return False


def setup_monitor(iface: str, channel: int, new_name: str | None = None) -> str:
    """Put a monitor interface on `channel` with iw; return its name. Raise CaptureSetupError on failure.

    Every check (names, channel, iw present, IFACE wireless) comes before the first command that
    changes anything: a wired interface is refused, never taken down.
    """
    check_iface_name(iface)
    if new_name is not None:
        check_iface_name(new_name, "--add: ")
    if not isinstance(channel, int) or isinstance(channel, bool) or not 1 <= channel <= 233:
        raise CaptureSetupError(f"--channel {channel!r}: expected a channel number 1-233")
    if not shutil.which("iw"):
        raise CaptureSetupError("iw not found (apt-get install iw)")
    if not is_wireless(iface):
        raise CaptureSetupError(f"{iface} is not a wireless interface (no /sys/class/net/{iface}/wireless "
                                "and `iw dev` does not list it); nothing was changed")
    phy = phy_of(iface) if new_name else None
    for argv in monitor_commands(iface, channel, new_name, phy):
        p = _run(argv, timeout=10.0)
        if p.returncode != 0:
            raise CaptureSetupError(f"{' '.join(argv)}: {p.stderr.strip() or 'failed'}")
    name = new_name or iface
    check_monitor(name)
    return name
