"""The `xlayer capture` and `xlayer monitor` commands (argument parsing; the work is in `capture`)."""
from __future__ import annotations

import argparse
import shlex
import sys

import xlayer.acquire.capture as cap
from xlayer.acquire.sampler import SsFilterError, check_ss_filter
from xlayer.bundle.validate import MAX_CAPTURES

DEFAULT_RING_FILES = 1000    # per interface, when a ring is asked for without --ring-files


def _tag(text: str) -> tuple[str, str]:
    k, sep, v = text.partition("=")
    if not sep or not k:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE")
    return k, v


def _positive(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return v


def config_from_args(args: argparse.Namespace, argv: list[str] | None = None) -> cap.CaptureConfig:
    """Return the CaptureConfig the parsed arguments describe; raise CaptureSetupError if invalid."""
    ifaces = [cap.parse_iface_spec(t, "air", args.netns) for t in args.air or []]
    ifaces += [cap.parse_iface_spec(t, "wired", args.netns) for t in args.wired or []]
    # shlex only splits the filter into tokens (quoting-aware); nothing is ever run by a shell.
    # The tokens must follow ss's filter grammar: checked here, before anything runs.
    try:
        tokens = check_ss_filter(shlex.split(args.ss_filter)) if args.ss_filter else []
    except (ValueError, SsFilterError) as exc:
        raise cap.CaptureSetupError(f"--ss-filter: {exc}") from None
    samplers = [cap.parse_ss_spec(t, tokens, args.interval) for t in args.tcp_state or []]
    cap.check_capture_filter(args.filter)
    if args.snaplen is not None and args.snaplen <= 0:
        raise cap.CaptureSetupError(f"--snaplen {args.snaplen}: must be a positive number of bytes")
    if args.ring_files is not None and args.ring_files <= 0:
        raise cap.CaptureSetupError(f"--ring-files {args.ring_files}: must be at least 1")
    if args.ring_files and args.ring_size is None and args.ring_seconds is None:
        raise cap.CaptureSetupError("--ring-files needs --ring-size or --ring-seconds")
    ring_files = args.ring_files
    if args.ring_size is not None or args.ring_seconds is not None:
        # every ring file is a capture of the manifest, which holds at most MAX_CAPTURES of them: a ring
        # without a bound would outgrow it in a long run and leave no manifest
        most = max(1, (MAX_CAPTURES - len(samplers)) // max(1, len(ifaces)))
        if ring_files is None:
            ring_files = min(DEFAULT_RING_FILES, most)
        elif ring_files > most:
            raise cap.CaptureSetupError(f"--ring-files {ring_files}: at most {most} with {len(ifaces)} "
                                        f"interface(s) (a bundle lists at most {MAX_CAPTURES:,} captures)")
    return cap.CaptureConfig(
        out_dir=args.output, ifaces=ifaces, samplers=samplers, snaplen=args.snaplen, bpf=args.filter,
        ring_size_mb=args.ring_size, ring_seconds=args.ring_seconds, ring_files=ring_files,
        tags=dict(args.tag or []), tool=args.tool,
        command=["xlayer", *(argv if argv is not None else sys.argv[1:])])


def cmd_capture(args: argparse.Namespace) -> int:
    """Run `xlayer capture`; return the exit code (2: cannot start, 1: stopped by a failure)."""
    try:
        cfg = config_from_args(args)
        result = cap.run_capture(cfg, duration=args.duration, handle_signals=True,
                                 on_ready=lambda s: print(f"xlayer: capturing into {s.out} "
                                                          f"({len(s.children)} interfaces, "
                                                          f"{len(s.samplers)} ss samplers); "
                                                          "Ctrl-C stops", file=sys.stderr, flush=True))
    except cap.CaptureSetupError as exc:
        print(f"xlayer: {exc}", file=sys.stderr)
        return 2
    for err in result.errors:
        print(f"xlayer: {err}", file=sys.stderr)
    if result.stop_reason == "disk_full":
        print("xlayer: the disk is full: capture stopped; every packet written is kept", file=sys.stderr)
    if result.manifest_error:
        print(f"xlayer: {result.manifest_error}; the captures are in {cfg.out_dir} without a manifest",
              file=sys.stderr)
    else:
        n = len(result.bundle.captures)
        pk = sum(c.packets or 0 for c in result.bundle.captures if c.is_packets)
        print(f"xlayer: stopped ({result.stop_reason}); {n} files, {pk} packets; "
              f"manifest {result.manifest_path}", file=sys.stderr)
    return result.exit_code


def cmd_monitor(args: argparse.Namespace) -> int:
    """Run `xlayer monitor`; return the exit code."""
    try:
        name = cap.setup_monitor(args.iface, args.channel, args.add)
    except cap.CaptureSetupError as exc:
        print(f"xlayer: {exc}", file=sys.stderr)
        return 2
    print(f"{name} is in monitor mode on channel {args.channel}; capture it with --air {name}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `capture` and `monitor` subcommands to the xlayer parser."""
    p = sub.add_parser(
        "capture", help="capture packets and ss samples on this host into a bundle",
        description="Start dumpcap (tcpdump as fallback) on each interface and an ss sampler per "
                    "--tcp-state vantage, for --duration seconds or until SIGINT/SIGTERM, and write "
                    "a bundle (captures + bundle.json). Interfaces: [VANTAGE=][NS:]IFACE, where NS is "
                    "a network namespace (captured with `ip netns exec NS dumpcap ...`).")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="bundle directory (created)")
    p.add_argument("--air", action="append", metavar="[VANTAGE=][NS:]IFACE",
                   help="a monitor-mode interface (radiotap); vantage defaults to 'sniffer'")
    p.add_argument("--wired", action="append", metavar="[VANTAGE=][NS:]IFACE",
                   help="a wired interface; repeatable; vantage defaults to the interface name")
    p.add_argument("--netns", default=None, help="namespace for interfaces that do not name one")
    p.add_argument("-f", "--filter", default=None, metavar="BPF", help="capture filter, passed as one argument (dumpcap -f, tcpdump after --)")
    p.add_argument("--snaplen", type=int, default=None, help="bytes kept per packet (default: all)")
    p.add_argument("--ring-size", type=_positive, default=None, metavar="MB",
                   help="start a new file every MB megabytes")
    p.add_argument("--ring-seconds", type=_positive, default=None, metavar="S",
                   help="start a new file every S seconds")
    p.add_argument("--ring-files", type=int, default=None, metavar="N",
                   help=f"keep only the newest N ring files per interface (default with a ring: "
                   f"{DEFAULT_RING_FILES}; a bundle lists at most {MAX_CAPTURES:,} captures)")
    p.add_argument("--tcp-state", action="append", metavar="VANTAGE[=NS]",
                   help="sample `ss -tin` at this vantage (in namespace NS); repeatable")
    p.add_argument("--interval", type=_positive, default=0.05, metavar="S",
                   help="ss sampling interval (default 0.05 s)")
    p.add_argument("--ss-filter", default=None, metavar="EXPR",
                   help="ss filter, split into tokens and checked against ss's filter grammar (states, "
                        "dport/sport/dst/src/dev, and/or/not, parentheses), e.g. 'dport = :5201'")
    p.add_argument("--tag", action="append", type=_tag, metavar="K=V", help="bundle tag; repeatable")
    p.add_argument("--duration", type=_positive, default=None, metavar="S",
                   help="stop after S seconds (default: at SIGINT/SIGTERM)")
    p.add_argument("--tool", choices=("auto", "dumpcap", "tcpdump"), default="auto",
                   help="capture program (auto: dumpcap, else tcpdump)")
    p.set_defaults(func=cmd_capture)

    m = sub.add_parser(
        "monitor", help="put a wireless interface in monitor mode on a channel (iw)",
        description="Set up a monitor-mode interface with iw: either IFACE itself (ip link down, iw "
                    "set type monitor, up, set channel) or, with --add NAME, a new monitor interface "
                    "on IFACE's phy. IFACE must be wireless (checked before anything changes). Untested: the "
                    "development machine has no wireless hardware.")
    m.add_argument("iface", metavar="IFACE", help="the wireless interface (e.g. wlan0)")
    m.add_argument("--channel", type=int, required=True, metavar="N",
                   help="802.11 channel to listen on (e.g. 1, 6, 11, 36)")
    m.add_argument("--add", metavar="NAME", default=None,
                   help="add a new monitor interface NAME on IFACE's phy instead of converting IFACE")
    m.set_defaults(func=cmd_monitor)
