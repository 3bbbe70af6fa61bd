"""The C++ half of the simulator: capture writers and ground-truth recorders, compiled into ns-3 by cppyy.

The C++ source is ``xlsim.cc`` beside this module (package data); `load` reads it and compiles it into
the running ns-3 with ``cppyy.cppdef``.  This module is only that Python side.

Everything that runs once per packet is C++ (a Python trace sink would be called hundreds of thousands
of times).  The module keeps one simulation's state in globals: one simulation runs per process
(`xlayer.testbeds.sim.run` starts a fresh child for each), which is also what ns-3 itself assumes.

What it provides (namespace ``xlsim``):

* **Clocks.**  ``SetClock(id, l0_ns, rate, sigma_ns, bound_ns, seed)``: a capture's local clock maps
  true simulation time ``t`` (ns) to ``l0 + round(t * rate) + jitter``, jitter ~ N(0, sigma) redrawn
  until ``|jitter| <= bound``, one draw per instant (the MPDUs of one A-MPDU share a stamp), and
  timestamps kept non-decreasing (a capture's kernel clock never goes back; the clamp never takes a
  stamp outside the bound).  ``xlayer.testbeds.sim.clocks`` computes l0 and rate so that the truth's
  convention inverts the ideal clock exactly.
* **Pcap writers** (our own, so files are closed explicitly and timestamps are ours): classic pcap,
  little endian, nanosecond or microsecond magic, snaplen applied per record.
* **Air capture**: the sniffer PHY's ``MonitorSnifferRx`` written as radiotap (DLT 127) through ns-3's
  own ``RadiotapHeader`` (fields set in presence-bit order: TSFT, Flags, Rate, Channel, dBm signal and
  noise, MCS, A-MPDU status).  The pcap timestamp is the end of reception (as ns-3 and real drivers
  stamp it); TSFT is the first bit of the PPDU on the sniffer's own TSF clock (``PhyRxPayloadBegin``
  minus the preamble and PHY header), or, with no TSF clock, ``Now`` in µs as ns-3's helper writes it.
  A-MPDU subframes lose their delimiter *and padding* (ns-3's helper keeps the padding), and the FCS
  holds the real CRC-32 (ns-3 leaves it zero) whenever the record is not cut by the snaplen.
  Optional frame budget: ``Simulator::Stop`` once that many frames are written.
* **Wired captures**: a CSMA device's ``PromiscSniffer`` (DLT 1), optionally without the 4-byte
  trailer ns-3 appends (a host capture never shows the FCS).
* **Client capture**: a station's view as a Linux managed-mode interface gives it: Ethernet II
  frames (DLT 1) built from the MSDUs its MAC delivers (``MacRx``, stamped at delivery) and accepts
  for sending (``MacTx``, stamped when handed to the driver, as tcpdump sees outgoing packets).
* **Packet ids**: every IPv4 transmission of the server and the stations gets a ByteTag with a fresh
  id (``pid``), logged with its IPv4/TCP/UDP identity; every later record names its pid.
* **Truth logs** (CSV, true simulation time in ns, joined by pid in Python): every MPDU every
  hooked Wi-Fi device puts on the air (``PhyTxPsduBegin``), every sniffer record, MAC events (enqueue
  with the queue length, delivery, drops with their reason, queue drops, association changes), every
  record of every wired/client capture with its IPv4/TCP/UDP identity, and the server's TCP segments,
  RTO expirations and congestion-state changes.
* **TCP sampler**: tcp_info-style JSON lines for every socket of a node, every ``interval``.
* **Injections**: a station that cannot decode anything for a while (a post-reception error model
  switched on and off), and a node that starts walking at a given time.
"""
from __future__ import annotations

from pathlib import Path

# The C++ source, shipped as package data beside this module (setup.cfg [options.package_data]).
CPP_FILE = Path(__file__).with_name("xlsim.cc")

_loaded = None


def load():
    """Compile the C++ part into the running ns-3 (once per process) and return its namespace."""
    global _loaded
    if _loaded is None:
        from ns import ns  # noqa: F401,PLC0415 - loads ns-3's libraries and headers first
        import cppyy  # noqa: PLC0415

        if not cppyy.cppdef(CPP_FILE.read_text(encoding="utf-8")):
            raise RuntimeError("xlayer.testbeds.sim: compiling the C++ sinks failed")
        _loaded = cppyy.gbl.xlsim
    return _loaded
