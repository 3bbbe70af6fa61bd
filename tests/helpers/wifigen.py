"""Crafted 802.11 captures for tests: radiotap + 802.11 frames of several BSSs, written by scapy in tmp dirs."""
from __future__ import annotations

import json
from pathlib import Path

from scapy.layers.dot11 import (
    Dot11,
    Dot11Ack,
    Dot11Auth,
    Dot11Beacon,
    Dot11Elt,
    Dot11EltRates,
    Dot11ProbeResp,
    Dot11ReassoReq,
    Dot11ReassoResp,
    RadioTap,
)
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import LLC, SNAP, Ether
from scapy.utils import wrpcap

T0 = 1_700_000_000.0        # capture start, Unix seconds
MS = 1e-3


def _ticks(start: float, end: float, every: float) -> list[float]:
    """Return start, start + every, ... before end, on whole microseconds (pcap stamps; no drift from sums)."""
    n = int(round((end - start) / every))
    ts = [round(start + i * every, 6) for i in range(n + 1)]
    return [t for t in ts if t < end - 1e-9]


class Air:
    """An air capture being written: frames with their stamps (seconds after `T0`) and sequence numbers."""

    def __init__(self) -> None:
        self.frames: list[tuple[float, object]] = []
        self.wired: list[tuple[float, object]] = []      # the AP's wired side: downlink packets before the air
        self.seq: dict[str, int] = {}
        self.ip_id = 0

    def add(self, t: float, dot11) -> None:
        """Record one frame at `t` seconds after T0 (a 54 Mbit/s radiotap header in front)."""
        self.frames.append((t, RadioTap(present="Rate", Rate=108) / dot11))

    def _sc(self, ta: str) -> int:
        n = self.seq.get(ta, 0)
        self.seq[ta] = n + 1
        return (n % 4096) << 4

    def beacons(self, ap: str, ssid: str, start: float, end: float, every: float = 100 * MS) -> None:
        """Add the beacons of BSS `ap` from `start` to `end`."""
        for t in _ticks(start, end, every):
            self.add(t, Dot11(type=0, subtype=8, addr1="ff:ff:ff:ff:ff:ff", addr2=ap, addr3=ap, SC=self._sc(ap))
                     / Dot11Beacon(cap=0x0401) / Dot11Elt(ID=0, info=ssid.encode()))

    def _ip(self, sta: str, down: bool, port: int):
        """Return the next UDP packet between the server and `sta` (its address from the station's MAC)."""
        self.ip_id = (self.ip_id + 1) % 65536
        src, dst = "10.0.0.1", "10.1.%d.%d" % (int(sta[-5:-3], 16), int(sta[-2:], 16))
        src, dst = (src, dst) if down else (dst, src)
        return IP(src=src, dst=dst, id=self.ip_id) / UDP(sport=port, dport=port) / (b"x" * 200)

    def data(self, t: float, ap: str, sta: str, down: bool = True, port: int = 5000) -> None:
        """Add one UDP data frame between `ap` and `sta`, the ACK answering it 100 us later, and (downlink)
        the packet on the AP's wired side 1 ms before."""
        ta, ra = (ap, sta) if down else (sta, ap)
        ip = self._ip(sta, down, port)
        self.add(t, Dot11(type=2, subtype=0, FCfield=0x02 if down else 0x01, addr1=ra, addr2=ta, addr3=ap,
                          SC=self._sc(ta)) / LLC() / SNAP() / ip)
        self.add(t + 0.1 * MS, Dot11(type=1, subtype=13, addr1=ta) / Dot11Ack())
        if down:
            self.wired.append((t - 1 * MS, Ether(src="02:00:00:00:ee:01", dst=ap) / ip.copy()))

    def dropped(self, t: float, ap: str, sta: str, port: int = 5000) -> None:
        """Add a downlink packet the AP's wired side saw at `t` and that never went on the air."""
        self.wired.append((t, Ether(src="02:00:00:00:ee:01", dst=ap) / self._ip(sta, True, port)))

    def wired_tcp(self, t: float, ap: str, sta: str, seq: int, size: int = 100) -> None:
        """Add a TCP segment from the server to `sta` on the AP's wired side only (never on the air)."""
        ip = self._ip(sta, True, 80)[IP]
        self.wired.append((t, Ether(src="02:00:00:00:ee:01", dst=ap) / IP(src=ip.src, dst=ip.dst, id=ip.id)
                           / TCP(sport=80, dport=4000, seq=seq, flags="A") / (b"y" * size)))

    def probe_response(self, t: float, ap: str, sta: str, ssid: str) -> None:
        """Add a probe response from `ap` to `sta` (a scanning station hears other BSSs)."""
        self.add(t, Dot11(type=0, subtype=5, addr1=sta, addr2=ap, addr3=ap, SC=self._sc(ap))
                 / Dot11ProbeResp(cap=0x0401) / Dot11Elt(ID=0, info=ssid.encode()))

    def stream(self, ap: str, sta: str, start: float, end: float, every: float = 10 * MS) -> float:
        """Add downlink data every `every` seconds from `start` while before `end`; return the last one's time."""
        ts = _ticks(start, end, every)
        for t in ts:
            self.data(t, ap, sta)
        return ts[-1]

    def reassociate(self, t: float, sta: str, old: str, new: str) -> list[float]:
        """Add an authentication exchange and a successful reassociation of `sta` with `new`; return the stamps."""
        ts = [t, t + 1 * MS, t + 10 * MS, t + 12 * MS]
        self.add(ts[0], Dot11(type=0, subtype=11, addr1=new, addr2=sta, addr3=new, SC=self._sc(sta))
                 / Dot11Auth(algo=0, seqnum=1, status=0))
        self.add(ts[1], Dot11(type=0, subtype=11, addr1=sta, addr2=new, addr3=new, SC=self._sc(new))
                 / Dot11Auth(algo=0, seqnum=2, status=0))
        self.add(ts[2], Dot11(type=0, subtype=2, addr1=new, addr2=sta, addr3=new, SC=self._sc(sta))
                 / Dot11ReassoReq(cap=0x0401, current_AP=old) / Dot11Elt(ID=0, info=b"net"))
        self.add(ts[3], Dot11(type=0, subtype=3, addr1=sta, addr2=new, addr3=new, SC=self._sc(new))
                 / Dot11ReassoResp(cap=0x0401, status=0, AID=1) / Dot11EltRates(rates=[0x82, 0x84]))
        return ts

    def write(self, path: Path, wired: bool = False) -> Path:
        """Write the frames (`wired`: the AP's wired packets) in time order as a pcap; return its path."""
        pkts = []
        for t, p in sorted(self.wired if wired else self.frames, key=lambda x: x[0]):
            p.time = T0 + t
            pkts.append(p)
        wrpcap(str(path), pkts, linktype=1 if wired else 127)
        return path


def air_bundle(directory: Path, air: Air, wired: bool = False) -> Path:
    """Write a bundle holding `air` as its air capture (`wired`: and the AP's wired side, same clock);
    return its directory."""
    directory.mkdir(parents=True, exist_ok=True)
    air.write(directory / "air.pcap")
    caps = [{"kind": "air", "vantage": "sniffer", "file": "air.pcap", "clock": "sniffer", "format": "pcap",
             "channel": 1}]
    if wired:
        air.write(directory / "ap_wired.pcap", wired=True)
        caps.append({"kind": "wired", "vantage": "ap_wired", "file": "ap_wired.pcap", "clock": "sniffer",
                     "format": "pcap"})
    manifest = {"xlayer_bundle": 1, "host": "crafted", "tags": {}, "captures": caps}
    (directory / "bundle.json").write_text(json.dumps(manifest))
    return directory
