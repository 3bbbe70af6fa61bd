"""The `xlayer sim` command (argument parsing; the work is in `xlayer.testbeds.sim`)."""
from __future__ import annotations

import argparse
import sys


def cmd_sim(args: argparse.Namespace) -> int:
    """Run `xlayer sim`; return 0 if the scenario showed its effect, 1 if not, 2 if it could not run."""
    from xlayer.testbeds.sim import (
        SimError,
        get_scenario,
        list_scenarios,
        ns3_available,
        run_scenario,
    )

    if args.list:
        for name, summary in list_scenarios():
            print(f"{name:20s} {summary}")
        return 0
    if not args.scenario or not args.output:
        print("xlayer: sim needs SCENARIO and -o DIR (or --list)", file=sys.stderr)
        return 2
    ok, why = ns3_available()
    if not ok:
        print(f"xlayer: sim: {why}", file=sys.stderr)
        return 2
    try:
        sc = get_scenario(args.scenario, args.seconds, seed=args.seed, standard=args.standard,
                          stations=args.stations)
        if args.ssid is not None:
            sc.ssid = args.ssid          # run_scenario checks it (1..32 bytes)
        truth = run_scenario(args.scenario, args.output, seed=args.seed, scenario=sc,
                             keep_work=args.keep_work, encrypt=args.encrypt,
                             log=lambda m: print(f"xlayer sim: {m}", file=sys.stderr, flush=True))
    except (SimError, KeyError) as exc:
        print(f"xlayer: sim: {exc.args[0] if isinstance(exc, KeyError) else exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("xlayer: sim interrupted", file=sys.stderr)
        return 130
    s = truth["summary"]
    print(f"{args.scenario} (seed {args.seed}, {truth['seconds']:g} s simulated, {truth['run']['wall_s']} s wall): "
          f"{s['downlink_packets']} downlink packets, {s['delivered']} delivered, "
          f"{s['ap_queue_drops']} AP queue drops, {s['retry_limit_drops']} retry-limit drops, "
          f"{s['mpdu_retries']} MAC retries, {s['rto_expirations']} RTOs, "
          f"{s['spurious_retransmissions']} spurious retransmissions; goodput "
          + ", ".join(f"{k} {v:.2f} Mbit/s" for k, v in s["goodput_mbps"].items() if v is not None))
    if not truth["expect"]["holds"]:
        print(f"xlayer: sim: the intended effect did not show: {truth['expect']['detail']}", file=sys.stderr)
        return 1
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the `sim` arguments to parser `p`."""
    from xlayer.testbeds.sim.scenarios import SCENARIOS

    p.add_argument("scenario", nargs="?", choices=list(SCENARIOS), metavar="SCENARIO",
                   help="one of: " + ", ".join(SCENARIOS))
    p.add_argument("-o", "--output", metavar="DIR", help="bundle directory (created)")
    p.add_argument("--seed", type=int, default=1, help="random seed, >= 1 (same seed, same bytes; default 1); "
                   "scenario random also draws its setup and causes from it")
    p.add_argument("--seconds", type=float, default=None, help="simulated time (default: the scenario's)")
    p.add_argument("--standard", choices=("g", "n", "ac", "ax"), default=None,
                   help="run on 802.11g, n (HT20), ac (VHT80) or ax (HE80), with A-MPDU and Block Ack from n "
                   "on, distances rescaled to keep each link's SNR (default: what the scenario or seed draws)")
    p.add_argument("--stations", type=int, default=None, metavar="N",
                   help="number of stations, for the scenarios that take one (baseline, default 1; "
                        "saturation and saturation_rts, default 5)")
    p.add_argument("--ssid", default=None, help="the BSS's SSID in beacons and probe responses, 1 to 32 "
                   "bytes (default: xlayer-sim)")
    p.add_argument("--encrypt", metavar="PASSPHRASE", default=None,
                   help="write the air capture as a sniffer of a WPA2-PSK (CCMP) network sees it: a 4-way "
                        "handshake after each association, data frames encrypted; PASSPHRASE is 8 to 63 "
                        "printable ASCII characters and is stored nowhere: analysis needs it again "
                        "(--wpa-pwd PASSPHRASE:SSID)")
    p.add_argument("--list", action="store_true", help="name the scenarios, one line each")
    p.add_argument("--keep-work", action="store_true", help="keep the child's logs in DIR/.sim-work")
    p.set_defaults(func=cmd_sim)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `sim` subcommand to the xlayer parser."""
    p = sub.add_parser(
        "sim", help="simulate a scenario in ns-3 and write a bundle with its ground truth",
        description="Simulate server -- AP -- stations in ns-3 (802.11g/n, or ac/ax with --standard; TCP/UDP downloads) with a "
                    "passive sniffer; write sniffer.pcap, ap_wired.pcap, server.pcap, client.pcap and "
                    "server-tcp.jsonl, each on its own simulated clock, as a bundle, and truth.json "
                    "(clocks, packet fates, MAC attempts, TCP timeouts, events, expected causes). "
                    "Needs the PyPI package ns3. Exit 1 if the scenario's intended effect did not show.")
    add_arguments(p)
