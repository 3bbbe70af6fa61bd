"""The `xlayer lab` command (argument parsing; the work is in `xlayer.testbeds.lab`)."""
from __future__ import annotations

import argparse
import sys


def cmd_lab(args: argparse.Namespace) -> int:
    """Run `xlayer lab`; return 0 if the scenario showed its effect, 1 if not, 2 if it could not run."""
    from xlayer.testbeds.lab import (
        LabError,
        LabInterrupted,
        list_scenarios,
        run_scenario,
    )

    if args.list:
        for name, summary in list_scenarios():
            print(f"{name:15s} {summary}")
        return 0
    if not args.scenario or not args.output:
        print("xlayer: lab needs SCENARIO and -o DIR (or --list)", file=sys.stderr)
        return 2
    try:
        truth = run_scenario(args.scenario, args.output, seconds=args.seconds, snaplen=args.snaplen or None,
                             traffic=args.traffic, command=["xlayer", *sys.argv[1:]],
                             log=lambda m: print(f"xlayer lab: {m}", file=sys.stderr, flush=True))
    except LabError as exc:
        print(f"xlayer: lab: {exc}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, LabInterrupted):
        print("xlayer: lab interrupted; namespaces removed, no truth written", file=sys.stderr)
        return 130
    s = truth["summary"]
    print(f"{args.scenario}: {truth['run_seconds']} s; tc drops {s['tc_drops']}, TCPTimeouts "
          f"{s['TCPTimeouts']}, TCPSpuriousRTOs {s['TCPSpuriousRTOs']}, TCPLossUndo {s['TCPLossUndo']}, "
          + ", ".join(f"{t['name']} goodput {(t.get('goodput_bps') or 0) / 1e6:.2f} Mbit/s"
                      for t in truth["transfers"]))
    if not truth["expect"]["holds"]:
        print(f"xlayer: lab: the intended effect did not show: {truth['expect']['detail']}", file=sys.stderr)
        return 1
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `lab` subcommand to the xlayer parser."""
    from xlayer.testbeds.lab.scenarios import SCENARIOS

    p = sub.add_parser(
        "lab", help="run a scenario through network namespaces and record a bundle with its truth",
        description="Build server -- router (AP queue) -- client namespaces, run real TCP/UDP "
                    "transfers, capture them at four vantages plus ss at the server, and write the "
                    "kernel's counters as truth.json. Needs root. Exit 1 if the scenario's intended "
                    "effect did not show in its truth.")
    p.add_argument("scenario", nargs="?", choices=list(SCENARIOS), metavar="SCENARIO",
                   help="one of: " + ", ".join(SCENARIOS))
    p.add_argument("-o", "--output", metavar="DIR", help="bundle directory (created)")
    p.add_argument("--seconds", type=float, default=None, help="transfer duration (default 10)")
    p.add_argument("--snaplen", type=int, default=96, help="bytes kept per packet (0: all; default 96)")
    p.add_argument("--traffic", choices=("auto", "iperf3", "python"), default="auto",
                   help="transfer tool (auto: iperf3 if installed, else a Python sender/receiver)")
    p.add_argument("--list", action="store_true", help="name the scenarios, one line each")
    p.set_defaults(func=cmd_lab)
