#!/usr/bin/env python3
"""Generate a large, deterministic 802.11n radiotap capture and its Ethernet twin with ns-3.

Topology::

    server ==CSMA 1 Gb/s== AP ~~802.11n 5 GHz, 40 MHz, 2x2, MinstrelHt~~ sta0, sta1, sta2
                                                   (sniffer: passive, promiscuous PHY)

Traffic: one TCP bulk download (BulkSend -> PacketSink, 1448-byte MSS) from the server to each
station, plus an uplink UDP CBR flow from sta0 to the server. The stations sit at different
distances (one walks away) so Minstrel-HT spreads over many MCSs and A-MPDU subframes get lost and
retried.

Outputs ``OUTDIR/air.pcap`` (DLT 127, radiotap, as heard by a passive sniffer next to the AP) and
``OUTDIR/wired.pcap`` (DLT 1, the server's CSMA device). The simulation stops as soon as the sniffer
has recorded ``--min-frames`` frames (or after ``--seconds`` of simulated time, whichever is first).

Needs the PyPI package ``ns3`` (``pip install ns3``). Usage::

    python benchmarks/make_ns3_capture.py -o /tmp/ns3big            # ~500k air frames
    python benchmarks/make_ns3_capture.py -o /tmp/ns3small --small  # a few thousand frames
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

# The capture writers (C++, compiled into ns-3 by cppyy) and the pcap checks live in xlayer.testbeds.sim,
# which the simulated experiments (`xlayer sim`) use too: run from a checkout, import it from there.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Written under these names and renamed only once the parent has checked them, so that a failed
# run never leaves a plausible-looking air.pcap behind.
_PARTIAL = ".part"

if TYPE_CHECKING:
    from xlayer.testbeds.sim.pcapfile import PcapSummary


@dataclass(frozen=True)
class Scenario:
    """Everything that determines the generated captures."""

    outdir: Path
    seconds: float
    min_frames: int
    seed: int
    udp_rate: str = "8Mbps"
    # Distances from the AP in metres; sta2 also walks away at walk_speed m/s.
    sta_distances: tuple[float, float, float] = (6.0, 22.0, 28.0)
    walk_speed: float = 0.25
    # Nakagami shape for small-scale fading (0 = none); lower is harsher.
    fading_m: float = 3.0


def _simulate(sc: Scenario) -> dict[str, object]:
    """Build and run the ns-3 scenario, writing air.pcap.part and wired.pcap.part into sc.outdir."""
    # Imported here so that only the child process ever loads cppyy/ns-3.
    from ns import ns  # noqa: PLC0415

    from xlayer.testbeds.sim import native  # noqa: PLC0415
    from xlayer.testbeds.sim.world import wired_link  # noqa: PLC0415

    sinks = native.load()

    ns.RngSeedManager.SetSeed(sc.seed)
    ns.RngSeedManager.SetRun(1)

    # 1448-byte MSS + 32-byte TCP header with timestamps = 1500-byte IP packets, as on a real LAN.
    ns.Config.SetDefault("ns3::TcpSocket::SegmentSize", ns.UintegerValue(1448))
    # Buffers above the bandwidth-delay product so TCP keeps the AP queue busy (big A-MPDUs).
    ns.Config.SetDefault("ns3::TcpSocket::SndBufSize", ns.UintegerValue(2 << 20))
    ns.Config.SetDefault("ns3::TcpSocket::RcvBufSize", ns.UintegerValue(2 << 20))
    ns.Config.SetDefault("ns3::TcpSocket::DelAckCount", ns.UintegerValue(2))

    server = ns.NodeContainer()
    server.Create(1)
    ap = ns.NodeContainer()
    ap.Create(1)
    stas = ns.NodeContainer()
    stas.Create(3)
    sniffer = ns.NodeContainer()
    sniffer.Create(1)

    # Wired side: CSMA writes DLT_EN10MB pcaps, which is what a SPAN port capture looks like; the
    # same 1 Gbit/s link as `xlayer sim`'s.
    csma, wired_nodes, wired_devs = wired_link(ns, server, ap)

    # Wireless side.
    channel = ns.YansWifiChannelHelper.Default()
    if sc.fading_m > 0:
        # Per-frame fading makes losses random rather than a fixed function of distance, which
        # is what keeps Minstrel-HT moving between rates and A-MPDU subframes being retried.
        m = ns.DoubleValue(sc.fading_m)
        channel.AddPropagationLoss("ns3::NakagamiPropagationLossModel", "m0", m, "m1", m, "m2", m)
    phy = ns.YansWifiPhyHelper()
    phy.SetChannel(channel.Create())
    phy.Set("ChannelSettings", ns.StringValue("{38, 40, BAND_5GHZ, 0}"))
    phy.Set("Antennas", ns.UintegerValue(2))
    phy.Set("MaxSupportedTxSpatialStreams", ns.UintegerValue(2))
    phy.Set("MaxSupportedRxSpatialStreams", ns.UintegerValue(2))

    wifi = ns.WifiHelper()
    wifi.SetStandard(ns.WIFI_STANDARD_80211n)
    wifi.SetRemoteStationManager("ns3::MinstrelHtWifiManager")
    wifi.ConfigHtOptions("ShortGuardIntervalSupported", ns.BooleanValue(True))

    ssid = ns.Ssid("xlayer-bench")
    mac = ns.WifiMacHelper()
    mac.SetType("ns3::StaWifiMac", "Ssid", ns.SsidValue(ssid), "ActiveProbing", ns.BooleanValue(False))
    sta_devs = wifi.Install(phy, mac, stas)
    mac.SetType("ns3::ApWifiMac", "Ssid", ns.SsidValue(ssid))
    ap_devs = wifi.Install(phy, mac, ap)
    # A STA looking for an SSID nobody serves never associates, so it never transmits: a monitor.
    mac.SetType(
        "ns3::StaWifiMac",
        "Ssid",
        ns.SsidValue(ns.Ssid("xlayer-nobody")),
        "ActiveProbing",
        ns.BooleanValue(False),
    )
    sniff_devs = wifi.Install(phy, mac, sniffer)

    # Positions are set on the installed models: allocators made in Python can be freed under ns-3.
    mobility = ns.MobilityHelper()
    mobility.SetMobilityModel("ns3::ConstantPositionMobilityModel")
    fixed = ns.NodeContainer()
    fixed.Add(server)
    fixed.Add(ap)
    fixed.Add(stas.Get(0))
    fixed.Add(stas.Get(1))
    fixed.Add(sniffer)
    mobility.Install(fixed)
    walker = ns.MobilityHelper()
    walker.SetMobilityModel("ns3::ConstantVelocityMobilityModel")
    walker.Install(stas.Get(2))

    def place(node: object, x: float, y: float) -> None:
        node.GetObject[ns.MobilityModel]().SetPosition(ns.Vector(x, y, 0.0))

    place(server.Get(0), -5.0, 0.0)
    place(ap.Get(0), 0.0, 0.0)
    d0, d1, d2 = sc.sta_distances
    place(stas.Get(0), d0, 0.0)
    place(stas.Get(1), 0.0, d1)
    place(stas.Get(2), -d2, 0.0)
    stas.Get(2).GetObject[ns.ConstantVelocityMobilityModel]().SetVelocity(
        ns.Vector(-sc.walk_speed, 0.0, 0.0)
    )
    # Close to the AP so it decodes nearly all downlink, but the far stations' uplink less well.
    place(sniffer.Get(0), 1.5, 1.5)

    internet = ns.InternetStackHelper()
    internet.Install(server)
    internet.Install(ap)
    internet.Install(stas)

    addr = ns.Ipv4AddressHelper()
    addr.SetBase(ns.Ipv4Address("10.10.1.0"), ns.Ipv4Mask("255.255.255.0"))
    wired_ifs = addr.Assign(wired_devs)
    addr.SetBase(ns.Ipv4Address("10.10.2.0"), ns.Ipv4Mask("255.255.255.0"))
    sta_ifs = addr.Assign(sta_devs)
    ap_ifs = addr.Assign(ap_devs)
    ns.Ipv4GlobalRoutingHelper.PopulateRoutingTables()

    apps = []
    port = 5000
    for i in range(stas.GetN()):
        sink = ns.PacketSinkHelper(
            "ns3::TcpSocketFactory", ns.InetSocketAddress(ns.Ipv4Address.GetAny(), port + i).ConvertTo()
        )
        sink_app = sink.Install(stas.Get(i))
        sink_app.Start(ns.Seconds(0.0))
        bulk = ns.BulkSendHelper(
            "ns3::TcpSocketFactory", ns.InetSocketAddress(sta_ifs.GetAddress(i), port + i).ConvertTo()
        )
        bulk.SetAttribute("MaxBytes", ns.UintegerValue(0))
        bulk.SetAttribute("SendSize", ns.UintegerValue(1448 * 8))
        bulk_app = bulk.Install(server.Get(0))
        # Staggered starts so the three slow-starts do not collide in the same instant.
        bulk_app.Start(ns.Seconds(0.5 + 0.2 * i))
        apps += [sink, sink_app, bulk, bulk_app]

    udp_port = 6000
    udp_sink = ns.PacketSinkHelper(
        "ns3::UdpSocketFactory", ns.InetSocketAddress(ns.Ipv4Address.GetAny(), udp_port).ConvertTo()
    )
    udp_sink_app = udp_sink.Install(server.Get(0))
    udp_sink_app.Start(ns.Seconds(0.0))
    onoff = ns.OnOffHelper(
        "ns3::UdpSocketFactory", ns.InetSocketAddress(wired_ifs.GetAddress(0), udp_port).ConvertTo()
    )
    onoff.SetConstantRate(ns.DataRate(sc.udp_rate), 1200)
    onoff_app = onoff.Install(stas.Get(0))
    onoff_app.Start(ns.Seconds(0.4))
    apps += [udp_sink, udp_sink_app, onoff, onoff_app]

    # The capture sinks are C++ (xlayer.testbeds.sim.native) for two reasons. Speed: a Python sink would run
    # once per MPDU. Control of the files: with EnablePcap, ns-3 owns the pcap writers and only
    # flushes them when the PHY or device object is finally deleted, which after Simulator::Destroy
    # depends on when Python drops its references (a run that skipped that lost the last few KiB of
    # air.pcap). Here the writers are ours and are closed explicitly.
    # The sniffer's monitor-mode view, radiotap through ns-3's RadiotapHeader: microsecond pcap,
    # timestamps and TSFT on simulation time (what ns-3's own pcap helper writes), the real CRC-32 in
    # the FCS, stop once min_frames are written.
    ok = sinks.OpenAir(sniff_devs.Get(0), str(sc.outdir / ("air.pcap" + _PARTIAL)), 0, False, -1, -1,
                       True, sc.min_frames, False)
    # Server side of the CSMA link, promiscuous: every frame on the wire, like a SPAN port (with
    # the 4-byte trailer ns-3 appends, as before).
    ok &= sinks.OpenWired(0, wired_devs.Get(0), str(sc.outdir / ("wired.pcap" + _PARTIAL)), 0, False,
                          -1, False, "")
    if not ok:
        raise RuntimeError("could not open the capture files")

    ns.Simulator.Stop(ns.Seconds(sc.seconds))
    t0 = time.monotonic()
    ns.Simulator.Run()
    wall = time.monotonic() - t0
    stop_at = sinks.AirStopTime()
    if stop_at >= 0:
        stopped = f"{stop_at:.3f} s (frame budget reached)"
    else:
        stopped = f"{sc.seconds:.3f} s (time limit)"
    print(f"ns-3: simulated until {stopped}, sniffer saw {sinks.AirFrames()} frames, "
          f"run took {wall:.1f} s wall", flush=True)
    sinks.CloseAll()
    ns.Simulator.Destroy()
    # Handed back so that Python frees none of the ns-3 objects before the child's os._exit.
    return dict(locals())


def _run_child(sc: Scenario) -> int:
    """Run the simulation in a forked child that leaves with os._exit, and return its status."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            keepalive = _simulate(sc)  # noqa: F841 - held on purpose until os._exit
            code = 0
        except BaseException as exc:  # noqa: BLE001 - must never unwind into the parent's code
            print(f"simulation failed: {exc!r}", file=sys.stderr, flush=True)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            # cppyy's interpreter teardown can crash after the work is done; skip it.
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _publish(outdir: Path, name: str) -> PcapSummary:
    """Check a capture the child wrote and give it its final name."""
    from xlayer.testbeds.sim.pcapfile import count_pcap  # noqa: PLC0415 - only after the child is done

    part = outdir / (name + _PARTIAL)
    summary = count_pcap(part)
    final = outdir / name
    os.replace(part, final)
    return replace(summary, path=final)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-o", "--outdir", type=Path, required=True, help="directory for air.pcap and wired.pcap")
    p.add_argument(
        "--seconds",
        type=float,
        default=None,
        help="upper bound on simulated time (default 120, or 3 with --small)",
    )
    p.add_argument(
        "--min-frames",
        type=int,
        default=None,
        help="stop once the sniffer has recorded this many frames; 0 = run for --seconds "
        "(default 500000, or 5000 with --small)",
    )
    p.add_argument("--seed", type=int, default=1, help="ns-3 RNG seed (same seed, same bytes)")
    p.add_argument("--small", action="store_true", help="quick capture of a few thousand frames for tests")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Generate the captures and print their frame counts and sizes."""
    args = parse_args(argv)
    seconds = args.seconds if args.seconds is not None else (3.0 if args.small else 120.0)
    min_frames = args.min_frames if args.min_frames is not None else (5000 if args.small else 500_000)
    if args.seed < 1:
        raise SystemExit("--seed must be >= 1 (ns-3 rejects seed 0)")
    outdir: Path = args.outdir.resolve()
    outdir.mkdir(parents=True, exist_ok=True)
    for name in ("air.pcap", "wired.pcap"):
        for stale in (outdir / name, outdir / (name + _PARTIAL)):
            stale.unlink(missing_ok=True)

    sc = Scenario(outdir=outdir, seconds=seconds, min_frames=min_frames, seed=args.seed)
    t0 = time.monotonic()
    code = _run_child(sc)
    if code != 0:
        print(f"ns-3 child exited with status {code}", file=sys.stderr)
        return 1
    air = _publish(outdir, "air.pcap")
    wired = _publish(outdir, "wired.pcap")
    wall = time.monotonic() - t0

    for s in (air, wired):
        print(
            f"{s.path}: {s.frames} frames, {s.size} bytes ({s.size / 2**20:.1f} MiB), "
            f"DLT {s.linktype}, t={s.first_ts:.6f}..{s.last_ts:.6f} s"
        )
    print(f"generation took {wall:.1f} s wall")
    if min_frames and air.frames < min_frames:
        print(
            f"warning: air.pcap has {air.frames} < --min-frames {min_frames}; raise --seconds",
            file=sys.stderr,
        )
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
