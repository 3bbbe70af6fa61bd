"""Build and run one scenario in ns-3 (child process side).

Run as ``python -m xlayer.testbeds.sim.world JOB.json``: the job holds the scenario's physical setup, the seed,
the clocks and the work directory.  The child writes the captures (``*.pcap.part``), the TCP samples
and the truth logs (``log/*.csv``) there, then ``result.json``, and leaves with ``os._exit`` (cppyy's
teardown can crash after the work is done).  Only this process ever imports ns-3.

ns-3 objects created from Python are kept referenced in `keep` until the exit: ns-3 holds raw
pointers to some of them, and Python freeing one mid-run crashes at random later.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

# Clock ids shared with the C++ side (xlsim::SetClock) and xlayer.testbeds.sim.run.
CLOCK_IDS = {"server": 0, "ap": 1, "sniffer": 2, "client": 3, "sniffer_tsf": 4}

WIRED_NET, WIFI_NET = "10.10.1.0", "10.10.2.0"
NO_NS3 = 3   # the child's exit status when ns-3 cannot be imported


def _addr(ns, ifc, i: int) -> str:
    a = ifc.GetAddress(i)
    return f"{(a.Get() >> 24) & 255}.{(a.Get() >> 16) & 255}.{(a.Get() >> 8) & 255}.{a.Get() & 255}"


def _mac(dev) -> str:
    raw = str(dev.GetAddress())
    # Address prints as "07-06-00:00:00:00:00:01" (type-length-bytes); keep the six bytes.
    return raw.split("-")[-1].lower()


def wired_link(ns, server, ap, delay_ms: float | None = None) -> tuple:
    """Join NodeContainers `server` and `ap` at 1 Gbit/s; return (helper, node container, devices), for
    the caller to keep.  Without `delay_ms`: CSMA with a 500 ns delay (a CSMA channel stays busy for tx
    time + Delay, so it cannot carry a long one); with it: point-to-point with that one-way delay."""
    # Built with Add: cppyy cannot pick NodeContainer's variadic constructors from Python.
    nodes = ns.NodeContainer()
    nodes.Add(server)
    nodes.Add(ap)
    if delay_ms is not None:
        p2p = ns.PointToPointHelper()
        p2p.SetDeviceAttribute("DataRate", ns.StringValue("1Gbps"))
        p2p.SetChannelAttribute("Delay", ns.TimeValue(ns.MicroSeconds(int(round(delay_ms * 1000)))))
        return p2p, nodes, p2p.Install(nodes)
    csma = ns.CsmaHelper()
    csma.SetChannelAttribute("DataRate", ns.StringValue("1Gbps"))
    csma.SetChannelAttribute("Delay", ns.TimeValue(ns.NanoSeconds(500)))
    return csma, nodes, csma.Install(nodes)


AP_TX_DBM = 16.0206   # YansWifiPhy's default TxPowerStart/End (every device but the interferers)
DETECT_DBM = -90.0    # preamble detection: 4 dB above the -94 dBm noise floor (20 MHz, 7 dB NF)

# Per standard: ns-3 standard, ChannelSettings (channel 0: ns-3's default 80 MHz channel, 42, whose
# primary 20 MHz is channel 36), channel width (MHz) and free-space loss at 1 m (dB).
STANDARDS = ("g", "n", "ac", "ax")
CHANNEL = {"g": "{1, 20, BAND_2_4GHZ, 0}", "n": "{36, 20, BAND_5GHZ, 0}",
           "ac": "{0, 80, BAND_5GHZ, 0}", "ax": "{0, 80, BAND_5GHZ, 0}"}
WIDTH_MHZ = {"g": 20, "n": 20, "ac": 80, "ax": 80}
REF_LOSS_DB = {"g": 40.05, "n": 46.6777, "ac": 46.6777, "ax": 46.6777}


def path_loss_db(sc: dict, d: float) -> float:
    """Return the channel's log-distance loss (dB) over `d` metres (no fading; 1 m at least)."""
    return REF_LOSS_DB[sc["standard"]] + 10.0 * sc["path_loss_exponent"] * math.log10(max(d, 1.0))


def distance_scale(std_from: str, std_to: str, exponent: float, *, same_width: bool = False) -> float:
    """Return the factor that keeps a link's SNR when a scenario written for `std_from` runs on
    `std_to` (path-loss exponent `exponent`); `same_width`: for 20 MHz frames (beacons) only."""
    # SNR = AP_TX_DBM - path_loss_db(d) - noise.  path_loss_db differs between the standards by the
    # reference loss at 1 m (2.4 vs 5 GHz: 6.63 dB), and Yans's thermal noise grows with the channel
    # width (-174 dBm/Hz + 10 log10(width) + 7 dB noise figure: 80 MHz is 6.02 dB above 20 MHz) while
    # the receive sensitivity per MCS (the SNR the error model needs) stays.  Equal SNR: the extra dB
    # must come out of 10 * exponent * log10(d), so d scales by 10 ** (-extra / (10 * exponent)).
    # g -> ac at exponent 3: 12.65 dB, x0.379 (120 m -> 45 m); n -> ac: 6.02 dB, x0.63; exponent 4
    # (the walks): x0.483 and x0.707.  Non-HT frames (beacons, control responses) stay 20 MHz wide.
    extra = REF_LOSS_DB[std_to] - REF_LOSS_DB[std_from]
    if not same_width:
        extra += 10.0 * math.log10(WIDTH_MHZ[std_to] / WIDTH_MHZ[std_from])
    return 10.0 ** (-extra / (10.0 * exponent))


def interferer_geometry(sc: dict, it: dict) -> dict:
    """Return where interferer `it` and its peer stand, its transmit power and what it delivers at the
    victim station, the AP and the sniffer (dBm): on the victim's line from the AP, `offset_m` beyond
    it, as loud there as the AP minus `sinr_db`."""
    st = next(s for s in sc["stations"] if s["name"] == it["near"])
    d_sta = math.hypot(st["x"], st["y"]) or 1.0
    ux, uy = st["x"] / d_sta, st["y"] / d_sta
    pos = (st["x"] + ux * it["offset_m"], st["y"] + uy * it["offset_m"])
    peer = (pos[0] + ux * 0.5, pos[1] + uy * 0.5)
    at_sta = AP_TX_DBM - path_loss_db(sc, d_sta) - it["sinr_db"]
    tx = at_sta + path_loss_db(sc, it["offset_m"])
    return {"position": [round(pos[0], 3), round(pos[1], 3)], "peer_position": [round(peer[0], 3), round(peer[1], 3)],
            "tx_power_dbm": round(tx, 3), "rx_dbm_at_station": round(at_sta, 3),
            "ap_rx_dbm_at_station": round(AP_TX_DBM - path_loss_db(sc, d_sta), 3),
            "rx_dbm_at_ap": round(tx - path_loss_db(sc, math.hypot(*pos)), 3),
            "rx_dbm_at_sniffer": round(tx - path_loss_db(sc, math.hypot(pos[0] - 1.5, pos[1] - 1.5)), 3),
            "detection_threshold_dbm": DETECT_DBM}


def _interferer(ns, x, sc: dict, it: dict, index: int, chan, keep: list) -> dict:
    """Build hidden node `it` and schedule its burst; return what the truth says about it.

    It is an ad hoc pair on the BSS's channel: 802.11g on g; 802.11a on n's 20 MHz channel 36; on ac and
    ax a pair of the same standard on the same 80 MHz channel (a neighbour's network the AP cannot hear:
    ns-3's Yans receiver counts a 20 MHz 802.11a frame against an 80 MHz reception as nearly nothing, a
    trial lost 17 of 4,000 frames against 3 without it, where the 80 MHz pair lost all of them)."""
    geo = interferer_geometry(sc, it)
    std = sc["standard"]
    g, wide = std == "g", std in ("ac", "ax")
    nodes = ns.NodeContainer()
    nodes.Create(2)
    phy = ns.YansWifiPhyHelper()
    phy.SetChannel(chan)
    phy.Set("ChannelSettings", ns.StringValue(CHANNEL[std] if g or wide else "{36, 20, BAND_5GHZ, 0}"))
    phy.Set("TxPowerStart", ns.DoubleValue(geo["tx_power_dbm"]))
    phy.Set("TxPowerEnd", ns.DoubleValue(geo["tx_power_dbm"]))
    wifi = ns.WifiHelper()
    wifi.SetStandard(ns.WIFI_STANDARD_80211g if g else
                     {"ac": ns.WIFI_STANDARD_80211ac, "ax": ns.WIFI_STANDARD_80211ax}[std] if wide
                     else ns.WIFI_STANDARD_80211a)
    broadcast = it["rate_manager"] == "constant"
    if broadcast:
        # the scenario names ERP-OFDM modes (VHT/HE MCS on ac/ax: `scenarios.for_standard`); 802.11a has
        # the same OFDM rates without the "Erp"
        mode = ns.StringValue(it["data_mode"] if g or wide else it["data_mode"].replace("ErpOfdm", "Ofdm"))
        wifi.SetRemoteStationManager("ns3::ConstantRateWifiManager", "DataMode", mode, "ControlMode", mode,
                                     "NonUnicastMode", mode)
    else:
        # ns-3 3.44's MinstrelHt aborts on HE rates (as for the BSS: `scenarios.for_standard`)
        wifi.SetRemoteStationManager({"ac": "ns3::MinstrelHtWifiManager", "ax": "ns3::IdealWifiManager"}.get(
            std, "ns3::MinstrelWifiManager"))
    mac = ns.WifiMacHelper()
    mac.SetType("ns3::AdhocWifiMac")      # an IBSS of its own: never the AP's BSSID (ns-3 sends no beacons)
    devs = wifi.Install(phy, mac, nodes)
    ns.WifiHelper.AssignStreams(devs, 400 + 10 * index)
    mob = ns.MobilityHelper()
    mob.SetMobilityModel("ns3::ConstantPositionMobilityModel")
    mob.Install(nodes)
    for i, (px, py) in enumerate((geo["position"], geo["peer_position"])):
        nodes.Get(i).GetObject[ns.MobilityModel]().SetPosition(ns.Vector(px, py, 0.0))
    keep += [nodes, phy, wifi, mac, devs, mob]
    a, b = nodes.Get(0), nodes.Get(1)
    if not x.AddInterferer(devs.Get(0), devs.Get(1), a.GetId(), b.GetId(), float(it["start_s"]),
                           float(it["end_s"]), float(it["packets_per_s"]), int(it["size"]), broadcast):
        raise RuntimeError(f"could not start interferer {it['name']}")
    return {"name": it["name"], "near": it["near"], "node": a.GetId(), "peer_node": b.GetId(),
            "mac": _mac(devs.Get(0)), "peer_mac": _mac(devs.Get(1)), **geo}


def _defaults(ns, sc: dict) -> None:
    """Set the ns-3 defaults of scenario `sc` (before anything is created)."""
    sd = ns.Config.SetDefault
    sd("ns3::TcpL4Protocol::SocketType", ns.StringValue(sc["tcp_cc"]))
    sd("ns3::TcpSocket::SegmentSize", ns.UintegerValue(sc["segment_size"]))
    sd("ns3::TcpSocket::SndBufSize", ns.UintegerValue(sc["tcp_snd_buf"]))
    sd("ns3::TcpSocket::RcvBufSize", ns.UintegerValue(sc["tcp_rcv_buf"]))
    sd("ns3::TcpSocket::DelAckCount", ns.UintegerValue(2))
    if sc.get("del_ack_timeout_ms") is not None:
        sd("ns3::TcpSocket::DelAckTimeout", ns.TimeValue(ns.MicroSeconds(int(sc["del_ack_timeout_ms"] * 1000))))
    if sc.get("bar_after_missed_ba") is not None:
        sd("ns3::QosTxop::UseExplicitBarAfterMissedBlockAck", ns.BooleanValue(bool(sc["bar_after_missed_ba"])))
    if sc.get("max_ampdu_bytes") is not None:
        sd("ns3::WifiMac::BE_MaxAmpduSize", ns.UintegerValue(int(sc["max_ampdu_bytes"])))
    if sc.get("rto_granularity_ms") is not None:
        sd("ns3::TcpSocketBase::ClockGranularity",
           ns.TimeValue(ns.MicroSeconds(int(sc["rto_granularity_ms"] * 1000))))
    sd("ns3::TcpSocketBase::MinRto", ns.TimeValue(ns.MicroSeconds(int(sc["min_rto_ms"] * 1000))))
    sd("ns3::WifiMacQueue::MaxSize", ns.StringValue(f"{sc['queue_packets']}p"))
    sd("ns3::WifiMacQueue::MaxDelay", ns.TimeValue(ns.MicroSeconds(int(sc["queue_max_delay_ms"] * 1000))))
    if sc["frag_threshold"] is not None:
        sd("ns3::WifiRemoteStationManager::FragmentationThreshold", ns.UintegerValue(sc["frag_threshold"]))
    if sc["rts_threshold"] is not None:
        sd("ns3::WifiRemoteStationManager::RtsCtsThreshold", ns.UintegerValue(sc["rts_threshold"]))
    if sc["frame_retry_limit"] is not None:
        sd("ns3::WifiMac::FrameRetryLimit", ns.UintegerValue(sc["frame_retry_limit"]))
    if sc["max_missed_beacons"] is not None:
        sd("ns3::StaWifiMac::MaxMissedBeacons", ns.UintegerValue(sc["max_missed_beacons"]))
    # ns-3 ignores any PPDU weaker than -82 dBm (ThresholdPreambleDetectionModel::MinimumRssi), so
    # nothing ever arrives at the SNR of the low rates; real receivers decode 6 Mbit/s OFDM near
    # -90 dBm and 1 Mbit/s DSSS below that.
    sd("ns3::ThresholdPreambleDetectionModel::MinimumRssi", ns.DoubleValue(sc["min_rssi_dbm"]))
    if sc["rate_manager"] == "constant":
        sd("ns3::ConstantRateWifiManager::DataMode", ns.StringValue(sc["data_mode"]))
        sd("ns3::ConstantRateWifiManager::ControlMode", ns.StringValue(sc["control_mode"] or sc["data_mode"]))


def _traffic_and_run(ns, x, sc: dict, work: Path, files: dict, server_node, stas, server_ip, sta_ip,
                     keep: list) -> tuple[float, dict]:
    """Install the scenario's flows and the TCP sampler, run the simulation and close the captures;
    return (wall seconds of the run, bytes each flow's sink received)."""
    # --- traffic ---
    index = {st["name"]: i for i, st in enumerate(sc["stations"])}
    apps = []
    sinks = {}
    first_tcp = None
    for fl in sc["flows"]:
        i = index[fl["station"]]
        factory = "ns3::TcpSocketFactory" if fl["proto"] == "tcp" else "ns3::UdpSocketFactory"
        up = fl.get("uplink", False)
        if up and fl["proto"] != "udp":
            raise ValueError(f"flow {fl['name']}: uplink flows are UDP only")
        # downlink: server -> station; uplink: station -> server
        src_node, dst_node = (stas.Get(i), server_node) if up else (server_node, stas.Get(i))
        dst_ip = server_ip if up else sta_ip(i)
        sink = ns.PacketSinkHelper(factory, ns.InetSocketAddress(ns.Ipv4Address.GetAny(), fl["port"]).ConvertTo())
        sink_app = sink.Install(dst_node)
        sink_app.Start(ns.Seconds(0.0))
        remote = ns.InetSocketAddress(dst_ip, fl["port"]).ConvertTo()
        if fl["proto"] == "tcp":
            src = ns.BulkSendHelper(factory, remote)
            src.SetAttribute("MaxBytes", ns.UintegerValue(0))
            src.SetAttribute("SendSize", ns.UintegerValue(sc["segment_size"] * 8))
            # BulkSend opens its socket in StartApplication: hook it right after.
            x.ScheduleTcpHook(server_node, server_node.GetId(), fl["start_s"] + 1e-6)
            first_tcp = fl["start_s"] if first_tcp is None else min(first_tcp, fl["start_s"])
        else:
            src = ns.OnOffHelper(factory, remote)
            src.SetConstantRate(ns.DataRate(int(fl["rate_bps"])), int(fl["size"]))
        src_app = src.Install(src_node)
        src_app.Start(ns.Seconds(fl["start_s"]))
        if fl["stop_s"] is not None:
            src_app.Stop(ns.Seconds(fl["stop_s"]))
        sinks[fl["name"]] = sink_app.Get(0)
        apps += [sink, sink_app, src, src_app]
    keep += apps
    if first_tcp is not None:
        x.StartSampler(str(work / files["tcp"]), server_node.GetId(), first_tcp + 2e-6,
                       sc["sample_interval_s"], CLOCK_IDS["server"])
    else:
        # No TCP socket to sample (UDP-only scenarios): the bundle still gets its (empty) state file.
        (work / files["tcp"]).write_bytes(b"")

    ns.Simulator.Stop(ns.Seconds(sc["seconds"]))
    t0 = time.monotonic()
    ns.Simulator.Run()
    wall = time.monotonic() - t0
    x.CloseAll()

    sink_rx = {}
    for name, app in sinks.items():
        sink_rx[name] = int(x.SinkRx(app))
    return wall, sink_rx


def _wifi_helpers(ns, sc: dict, chan) -> tuple:
    """Return (phy, wifi) helpers for the scenario's standard and rate manager on channel `chan`."""
    std = sc["standard"]
    phy = ns.YansWifiPhyHelper()
    phy.SetChannel(chan)
    phy.Set("ChannelSettings", ns.StringValue(CHANNEL[std]))
    wifi = ns.WifiHelper()
    # ac/ax: A-MPDU (BE_MaxAmpduSize) and Block Ack stay ns-3's defaults, as for n.
    wifi.SetStandard({"g": ns.WIFI_STANDARD_80211g, "n": ns.WIFI_STANDARD_80211n,
                      "ac": ns.WIFI_STANDARD_80211ac, "ax": ns.WIFI_STANDARD_80211ax}[std])
    wifi.SetRemoteStationManager({"minstrel": "ns3::MinstrelWifiManager",
                                  "minstrel_ht": "ns3::MinstrelHtWifiManager",
                                  "ideal": "ns3::IdealWifiManager",
                                  "constant": "ns3::ConstantRateWifiManager"}[sc["rate_manager"]])
    if std != "g":
        # HT and VHT short GI (HE's GI is HeConfiguration's: ns-3's default 3.2 us)
        wifi.ConfigHtOptions("ShortGuardIntervalSupported", ns.BooleanValue(True))
    # No traffic-control queue above the Wi-Fi device: the AP's WifiMacQueue is the AP queue.
    wifi.DisableFlowControl()
    return phy, wifi


def _install_mobility(ns, sc: dict, still, stas, keep: list) -> Callable:
    """Return place(node, x, y), once the `still` node containers stand still and the stations stand or
    walk (as the scenario says), their mobility helpers kept alive in `keep`."""
    fixed = ns.MobilityHelper()
    fixed.SetMobilityModel("ns3::ConstantPositionMobilityModel")
    moving = ns.MobilityHelper()
    moving.SetMobilityModel("ns3::ConstantVelocityMobilityModel")
    keep += [fixed, moving]
    for c in still:
        fixed.Install(c)
    for i, st in enumerate(sc["stations"]):
        (moving if st["walk_at_s"] is not None else fixed).Install(stas.Get(i))

    def place(node, px: float, py: float) -> None:
        node.GetObject[ns.MobilityModel]().SetPosition(ns.Vector(px, py, 0.0))

    return place


def _install_bss(ns, sc: dict, phy, wifi, stas, aps, sniffer, keep: list, *, active_probing: bool = False,
                 sniffer_gain_db: float | None = None) -> tuple:
    """Return (station, AP, sniffer) devices of one SSID installed on the nodes (helpers kept alive in `keep`)."""
    # The SSID goes into beacons and probe responses as raw bytes (ns-3 keeps at most 32).
    ssid = ns.Ssid(sc["ssid"])
    mac = ns.WifiMacHelper()
    mac.SetType("ns3::StaWifiMac", "Ssid", ns.SsidValue(ssid), "ActiveProbing", ns.BooleanValue(active_probing))
    sta_devs = wifi.Install(phy, mac, stas)
    mac.SetType("ns3::ApWifiMac", "Ssid", ns.SsidValue(ssid))
    ap_devs = wifi.Install(phy, mac, aps)
    # A station looking for an SSID nobody serves never associates, so never transmits: a monitor.
    mac.SetType("ns3::StaWifiMac", "Ssid", ns.SsidValue(ns.Ssid("xlayer-nobody")),
                "ActiveProbing", ns.BooleanValue(False))
    if sniffer_gain_db is not None:
        phy.Set("RxGain", ns.DoubleValue(sniffer_gain_db))
    sniff_devs = wifi.Install(phy, mac, sniffer)
    keep += [phy, wifi, ssid, mac, sta_devs, ap_devs, sniff_devs]
    return sta_devs, ap_devs, sniff_devs


def _container(ns, *items):
    """Return a NodeContainer or NetDeviceContainer (by the first item's kind) holding `items`."""
    c = ns.NodeContainer() if hasattr(items[0], "GetId") else ns.NetDeviceContainer()
    for it in items:
        c.Add(it)
    return c


def _simulate_aps(ns, x, job: dict, sc: dict, work: Path, keep: list) -> dict:
    """Build and run the world of several APs (scenario field ``aps``); return what `simulate` returns.

    server --CSMA-- switch --CSMA-- AP1, AP2 (each bridging its wired port and its Wi-Fi BSS, one IP
    subnet, same SSID, same channel): a station keeps its address when it moves to another AP.  Stations
    probe actively, so one that misses its AP's beacons scans and joins the best AP it hears; after every
    association it sends a gratuitous ARP, so the learning switch sends its packets to its new AP.
    """
    aps_spec = sc["aps"]
    # --- nodes: server 0, APs 1.., switch, stations, sniffer last ---
    server = ns.NodeContainer()
    server.Create(1)
    aps = ns.NodeContainer()
    aps.Create(len(aps_spec))
    switch = ns.NodeContainer()
    switch.Create(1)
    stas = ns.NodeContainer()
    stas.Create(len(sc["stations"]))
    sniffer = ns.NodeContainer()
    sniffer.Create(1)
    keep += [server, aps, switch, stas, sniffer]

    # --- wired: one 2-node CSMA link per port of the switch (a switch port sees only its own traffic) ---
    links = [wired_link(ns, server.Get(0), switch.Get(0))]
    links += [wired_link(ns, switch.Get(0), aps.Get(i)) for i in range(aps.GetN())]
    keep += links
    server_dev = links[0][2].Get(0)
    ap_wired = [links[1 + i][2].Get(1) for i in range(aps.GetN())]
    bridge = ns.BridgeHelper()
    keep.append(bridge)
    keep.append(bridge.Install(switch.Get(0), _container(ns, *[lk[2].Get(1) if k == 0 else lk[2].Get(0)
                                                                for k, lk in enumerate(links)])))

    # --- wireless: one channel, every AP on it with the same SSID ---
    channel = ns.YansWifiChannelHelper()
    channel.SetPropagationDelay("ns3::ConstantSpeedPropagationDelayModel")
    channel.AddPropagationLoss("ns3::LogDistancePropagationLossModel",
                               "Exponent", ns.DoubleValue(sc["path_loss_exponent"]),
                               "ReferenceLoss", ns.DoubleValue(REF_LOSS_DB[sc["standard"]]))
    if sc["fading_m"] > 0:
        m = ns.DoubleValue(sc["fading_m"])
        channel.AddPropagationLoss("ns3::NakagamiPropagationLossModel", "m0", m, "m1", m, "m2", m)
    chan = channel.Create()
    phy, wifi = _wifi_helpers(ns, sc, chan)
    # Active probing: after MaxMissedBeacons the station scans with probe requests and joins the AP it
    # hears best (passive scanning would wait for beacons).  The monitor has a better antenna than the
    # stations' (as a survey setup has): it hears both BSSs.
    sta_devs, ap_devs, sniff_devs = _install_bss(ns, sc, phy, wifi, stas, aps, sniffer, keep, active_probing=True,
                                                 sniffer_gain_db=float(sc.get("sniffer_rx_gain_db", 0.0)))
    keep += [channel, chan]
    ns.WifiHelper.AssignStreams(sta_devs, 100)
    ns.WifiHelper.AssignStreams(ap_devs, 200)
    ns.WifiHelper.AssignStreams(sniff_devs, 300)
    for i in range(aps.GetN()):
        keep.append(bridge.Install(aps.Get(i), _container(ns, ap_wired[i], ap_devs.Get(i))))

    # --- positions ---
    place = _install_mobility(ns, sc, (server, aps, switch, sniffer), stas, keep)
    place(server.Get(0), -10.0, 0.0)
    place(switch.Get(0), -5.0, 0.0)
    for i, a in enumerate(aps_spec):
        place(aps.Get(i), a["x"], a["y"])
    sx, sy = sc["sniffer_position"]
    place(sniffer.Get(0), sx, sy)
    for i, st in enumerate(sc["stations"]):
        place(stas.Get(i), st["x"], st["y"])

    # --- IP: the server and the stations on one subnet; the APs and the switch are bridges ---
    internet = ns.InternetStackHelper()
    internet.Install(server)
    internet.Install(stas)
    addr = ns.Ipv4AddressHelper()
    addr.SetBase(ns.Ipv4Address(WIFI_NET), ns.Ipv4Mask("255.255.255.0"))
    srv_ifs = addr.Assign(_container(ns, server_dev))
    sta_ifs = addr.Assign(sta_devs)
    keep += [internet, addr, srv_ifs, sta_ifs]
    hosts = [server.Get(0)] + [stas.Get(i) for i in range(stas.GetN())]
    ok = all(x.StaticArp(a, b) for a in hosts for b in hosts if a.GetId() != b.GetId())
    for i in range(stas.GetN()):
        ok &= x.AnnounceAfterAssociation(sta_devs.Get(i), stas.Get(i))

    # --- captures, clocks and truth logs ---
    for name, c in job["clocks"].items():
        x.SetClock(CLOCK_IDS[name], int(c["l0_ns"]), float(c["rate"]), float(c["sigma_ns"]),
                   float(c["bound_ns"]), int(c["seed"]))
    x.SetLogDir(str(work / "log"))
    files = job["files"]
    ok &= x.OpenAir(sniff_devs.Get(0), str(work / files["sniffer"]), sc["snaplen_air"], True,
                    CLOCK_IDS["sniffer"], CLOCK_IDS["sniffer_tsf"], True, 0, True)
    ok &= x.OpenWired(0, server_dev, str(work / files["server"]), sc["snaplen_wired"], True,
                      CLOCK_IDS["server"], True, "wired_server")
    ok &= x.OpenWired(1, ap_wired[0], str(work / files["ap_wired"]), sc["snaplen_wired"], True,
                      CLOCK_IDS["ap"], True, "wired_ap")
    # The other APs' wired ports: truth logs only (their pcaps stay in the work directory).
    for i in range(1, aps.GetN()):
        ok &= x.OpenWired(1 + i, ap_wired[i], str(work / f"ap{i + 1}_wired.pcap"), sc["snaplen_wired"], True,
                          CLOCK_IDS["ap"], True, f"wired_ap{i + 1}")
    # A bridged AP forwards the server's own frames: the station's peer on Ethernet is the server.
    ok &= x.OpenClient(sta_devs.Get(0), server_dev, str(work / files["client"]), sc["snaplen_wired"],
                       CLOCK_IDS["client"])
    ok &= x.HookIp(server.Get(0))
    for i in range(stas.GetN()):
        ok &= x.HookIp(stas.Get(i))
    for i in range(aps.GetN()):
        ok &= x.HookWifi(ap_devs.Get(i), aps.Get(i).GetId(), True)
    for i in range(stas.GetN()):
        ok &= x.HookWifi(sta_devs.Get(i), stas.Get(i).GetId(), False)
    if not ok:
        raise RuntimeError("could not open the captures, fill the ARP caches or hook the Wi-Fi devices")

    # --- walks: a walking station heads for the point its scenario names and stops there (without
    # one: straight away from the origin, as in the one-AP world) ---
    for i, st in enumerate(sc["stations"]):
        if st["walk_at_s"] is not None and st["speed_mps"]:
            tx_, ty_ = st.get("toward") or (2 * st["x"], 2 * st["y"])
            dx, dy = tx_ - st["x"], ty_ - st["y"]
            norm = (dx * dx + dy * dy) ** 0.5 or 1.0
            x.ScheduleVelocity(stas.Get(i), stas.Get(i).GetId(), float(st["walk_at_s"]),
                               st["speed_mps"] * dx / norm, st["speed_mps"] * dy / norm)
            if st.get("toward"):
                x.ScheduleVelocity(stas.Get(i), stas.Get(i).GetId(),
                                   float(st["walk_at_s"]) + norm / st["speed_mps"], 0.0, 0.0)

    wall, sink_rx = _traffic_and_run(ns, x, sc, work, files, server.Get(0), stas, srv_ifs.GetAddress(0),
                                     sta_ifs.GetAddress, keep)
    ap_nodes = [{"name": a["name"], "node": aps.Get(i).GetId(), "wired_ip": None,
                 "wired_mac": _mac(ap_wired[i]), "wifi_ip": None, "bssid": _mac(ap_devs.Get(i)),
                 "position": [a["x"], a["y"]]} for i, a in enumerate(aps_spec)]
    result = {
        "sim_wall_s": wall, "sim_seconds": sc["seconds"], "air_frames": int(x.AirFrames()),
        "tcp_samples": int(x.SamplerRows()), "sink_rx_bytes": sink_rx,
        "nodes": {
            "server": {"node": server.Get(0).GetId(), "ip": _addr(ns, srv_ifs, 0), "mac": _mac(server_dev)},
            "ap": ap_nodes[0],
            "aps": ap_nodes,
            "switch": {"node": switch.Get(0).GetId()},
            "stations": [{"name": st["name"], "node": stas.Get(i).GetId(), "ip": _addr(ns, sta_ifs, i),
                          "mac": _mac(sta_devs.Get(i))} for i, st in enumerate(sc["stations"])],
            "sniffer": {"node": sniffer.Get(0).GetId(), "mac": _mac(sniff_devs.Get(0)), "position": [sx, sy]},
        },
    }
    (work / "result.json").write_text(json.dumps(result, indent=1))
    job["_keep"] = keep
    return result


def simulate(job: dict) -> dict:
    """Build the scenario in `job`, run it, write its files; return what the parent needs to know."""
    from ns import ns  # noqa: PLC0415

    from xlayer.testbeds.sim import native  # noqa: PLC0415

    x = native.load()
    sc = job["scenario"]
    work = Path(job["workdir"])
    (work / "log").mkdir(parents=True, exist_ok=True)
    keep: list = []

    ns.RngSeedManager.SetSeed(int(job["seed"]))
    ns.RngSeedManager.SetRun(1)

    _defaults(ns, sc)
    if sc.get("aps"):
        return _simulate_aps(ns, x, job, sc, work, keep)

    # --- nodes: server 0, AP 1, stations 2.., sniffer last ---
    server = ns.NodeContainer()
    server.Create(1)
    ap = ns.NodeContainer()
    ap.Create(1)
    stas = ns.NodeContainer()
    stas.Create(len(sc["stations"]))
    sniffer = ns.NodeContainer()
    sniffer.Create(1)
    keep += [server, ap, stas, sniffer]

    # --- wired: CSMA, or point-to-point with the scenario's delay ---
    csma, wired_nodes, wired_devs = wired_link(ns, server, ap, sc.get("wired_delay_ms"))
    keep += [csma, wired_nodes, wired_devs]

    # --- wireless ---
    std = sc["standard"]
    channel = ns.YansWifiChannelHelper()
    channel.SetPropagationDelay("ns3::ConstantSpeedPropagationDelayModel")
    # Free-space loss at 1 m: 40.05 dB at 2.412 GHz, 46.68 dB at 5.18 GHz; log-distance beyond.
    channel.AddPropagationLoss("ns3::LogDistancePropagationLossModel",
                               "Exponent", ns.DoubleValue(sc["path_loss_exponent"]),
                               "ReferenceLoss", ns.DoubleValue(REF_LOSS_DB[std]))
    if sc["fading_m"] > 0:
        m = ns.DoubleValue(sc["fading_m"])
        channel.AddPropagationLoss("ns3::NakagamiPropagationLossModel", "m0", m, "m1", m, "m2", m)
    chan = channel.Create()
    keep.append(chan)
    phy, wifi = _wifi_helpers(ns, sc, chan)
    sta_devs, ap_devs, sniff_devs = _install_bss(ns, sc, phy, wifi, stas, ap, sniffer, keep)
    keep.append(channel)
    # Fixed random streams per device: the same seed gives the same run whatever else changes.
    ns.WifiHelper.AssignStreams(sta_devs, 100)
    ns.WifiHelper.AssignStreams(ap_devs, 200)
    ns.WifiHelper.AssignStreams(sniff_devs, 300)

    # --- positions: set on the installed models (Python-made allocators can be freed under ns-3) ---
    place = _install_mobility(ns, sc, (server, ap, sniffer), stas, keep)
    place(server.Get(0), -10.0, 0.0)
    place(ap.Get(0), 0.0, 0.0)
    place(sniffer.Get(0), 1.5, 1.5)
    for i, st in enumerate(sc["stations"]):
        place(stas.Get(i), st["x"], st["y"])

    # --- IP ---
    internet = ns.InternetStackHelper()
    internet.Install(server)
    internet.Install(ap)
    internet.Install(stas)
    addr = ns.Ipv4AddressHelper()
    addr.SetBase(ns.Ipv4Address(WIRED_NET), ns.Ipv4Mask("255.255.255.0"))
    wired_ifs = addr.Assign(wired_devs)
    addr.SetBase(ns.Ipv4Address(WIFI_NET), ns.Ipv4Mask("255.255.255.0"))
    ap_ifs = addr.Assign(ap_devs)
    sta_ifs = addr.Assign(sta_devs)
    ns.Ipv4GlobalRoutingHelper.PopulateRoutingTables()
    # Static ARP: no address resolution on the air.  A lost broadcast ARP request (no MAC retries)
    # would otherwise drop a far station's first packets at the AP's ARP queue (3 packets deep) for
    # up to a second: real, but a confounder no scenario here is about.
    neigh = ns.NeighborCacheHelper()
    neigh.PopulateNeighborCache()
    keep += [internet, addr, wired_ifs, ap_ifs, sta_ifs, neigh]

    # --- captures, clocks and truth logs (before traffic starts) ---
    for name, c in job["clocks"].items():
        x.SetClock(CLOCK_IDS[name], int(c["l0_ns"]), float(c["rate"]), float(c["sigma_ns"]),
                   float(c["bound_ns"]), int(c["seed"]))
    x.SetLogDir(str(work / "log"))
    files = job["files"]
    ok = x.OpenAir(sniff_devs.Get(0), str(work / files["sniffer"]), sc["snaplen_air"], True,
                   CLOCK_IDS["sniffer"], CLOCK_IDS["sniffer_tsf"], True, 0, True)
    ok &= x.OpenWired(0, wired_devs.Get(0), str(work / files["server"]), sc["snaplen_wired"], True,
                      CLOCK_IDS["server"], True, "wired_server")
    ok &= x.OpenWired(1, wired_devs.Get(1), str(work / files["ap_wired"]), sc["snaplen_wired"], True,
                      CLOCK_IDS["ap"], True, "wired_ap")
    ok &= x.OpenClient(sta_devs.Get(0), ap_devs.Get(0), str(work / files["client"]), sc["snaplen_wired"],
                       CLOCK_IDS["client"])
    ok &= x.HookIp(server.Get(0))
    for i in range(stas.GetN()):
        ok &= x.HookIp(stas.Get(i))
    ok &= x.HookWifi(ap_devs.Get(0), ap.Get(0).GetId(), True)
    for i in range(stas.GetN()):
        ok &= x.HookWifi(sta_devs.Get(i), stas.Get(i).GetId(), False)
    if not ok:
        raise RuntimeError("could not open the captures or hook the Wi-Fi devices")

    # --- hidden nodes (after every other node: the others keep their ids and streams) ---
    hidden = [_interferer(ns, x, sc, it, i, chan, keep) for i, it in enumerate(sc.get("interferers", []))]

    # --- injections ---
    for i, st in enumerate(sc["stations"]):
        node = stas.Get(i)
        if st["walk_at_s"] is not None and st["speed_mps"]:
            dx, dy = st["x"], st["y"]
            norm = (dx * dx + dy * dy) ** 0.5 or 1.0
            x.ScheduleVelocity(node, node.GetId(), float(st["walk_at_s"]),
                               st["speed_mps"] * dx / norm, st["speed_mps"] * dy / norm)
        for start, end in st["deaf"]:
            x.ScheduleDeaf(sta_devs.Get(i), node.GetId(), float(start), float(end))

    wall, sink_rx = _traffic_and_run(ns, x, sc, work, job["files"], server.Get(0), stas, wired_ifs.GetAddress(0),
                                     sta_ifs.GetAddress, keep)

    stations = []
    for i, st in enumerate(sc["stations"]):
        stations.append({"name": st["name"], "node": stas.Get(i).GetId(), "ip": _addr(ns, sta_ifs, i),
                         "mac": _mac(sta_devs.Get(i))})
    result = {
        "sim_wall_s": wall,
        "sim_seconds": sc["seconds"],
        "air_frames": int(x.AirFrames()),
        "tcp_samples": int(x.SamplerRows()),
        "sink_rx_bytes": sink_rx,
        "nodes": {
            "server": {"node": server.Get(0).GetId(), "ip": _addr(ns, wired_ifs, 0),
                       "mac": _mac(wired_devs.Get(0))},
            "ap": {"node": ap.Get(0).GetId(), "wired_ip": _addr(ns, wired_ifs, 1),
                   "wired_mac": _mac(wired_devs.Get(1)), "wifi_ip": _addr(ns, ap_ifs, 0),
                   "bssid": _mac(ap_devs.Get(0))},
            "stations": stations,
            "sniffer": {"node": sniffer.Get(0).GetId(), "mac": _mac(sniff_devs.Get(0)),
                        "position": [1.5, 1.5]},
        },
    }
    if hidden:
        for i, h in enumerate(hidden):
            h["frames_queued"] = int(x.InterfererSent(i))
        result["nodes"]["interferers"] = hidden
    (work / "result.json").write_text(json.dumps(result, indent=1))
    job["_keep"] = keep  # referenced until os._exit
    return result


def main(argv: list[str]) -> None:
    """Child entry point: run the job file argv[0]; exit 0 on success, 1 on failure (never returns)."""
    code = 1
    try:
        job = json.loads(Path(argv[0]).read_text())
        try:
            from ns import ns  # noqa: F401,PLC0415
        except Exception as exc:  # noqa: BLE001 - any failure to load ns-3 means the same here
            print(f"cannot import ns-3 (from ns import ns): {exc!r}", file=sys.stderr, flush=True)
            code = NO_NS3
            raise SystemExit(code) from None
        simulate(job)
        code = 0
    except SystemExit:
        pass
    except BaseException as exc:  # noqa: BLE001 - must never unwind into cppyy's teardown
        import traceback

        traceback.print_exc()
        print(f"xlayer sim: simulation failed: {exc!r}", file=sys.stderr, flush=True)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
