#!/usr/bin/env python3
"""ns-3 saturation runs beside Bianchi's model: measured / model for n = 2, 5, 10, basic and RTS/CTS.

Each case is `xlayer sim saturation` (or ``saturation_rts``) with ``--stations n``: 802.11g at a fixed
54 Mbit/s, every station sending UDP uplink at more than the channel carries, all within 3 m of the AP
(no hidden nodes).  Measured: the IP bytes per second arriving in the server's own capture
(server.pcap, read with xlayer's parser) once the stations' queues are full, and ns-3's sink counters.
Model: `xlayer.campaign.theory.bianchi` for the parameters ns-3 ran (ERP-OFDM 54 Mbit/s, ACK/RTS/CTS at
24 Mbit/s, slot 9 us, SIFS 10 us + 6 us signal extension, CWmin 15, CWmax 1023, 1500-byte IP packets),
plain (the paper's) and with EIFS after collisions and frozen backoff counters (ns-3's reference
model).  Prints a table; asserts nothing.

    python benchmarks/bianchi.py                       # n = 2, 5, 10, basic and RTS, 5 s each
    python benchmarks/bianchi.py --stations 3 --seconds 3 --keep /tmp/sat
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SERVER_IP = "10.10.1.1"
SETTLE_NS = 250_000_000        # after the first uplink packet: the stations' queues have filled


def measured_bps(bundle: Path) -> float:
    """Return the IP bits per second of UDP reaching the server in its capture, after the queues filled."""
    import polars as pl

    import parsers

    srv = parsers.read_capture(bundle / "server.pcap")
    up = srv.filter((pl.col("ip_dst") == SERVER_IP) & (pl.col("ip_proto") == 17) & pl.col("malformed").is_null())
    t0 = up.get_column("ts_ns").min() + SETTLE_NS
    win = up.filter(pl.col("ts_ns") >= t0)
    return float(win.get_column("ip_len").sum()) * 8 / ((win.get_column("ts_ns").max() - t0) / 1e9)


def run_case(n: int, rts: bool, seconds: float, seed: int, out: Path) -> dict:
    """Simulate one case into `out`; return its measurements and the model's numbers."""
    from xlayer.campaign.theory import bianchi, phy_for
    from xlayer.testbeds.sim import run_scenario
    from xlayer.testbeds.sim.scenarios import SATURATION_PAYLOAD, get_scenario

    name = "saturation_rts" if rts else "saturation"
    t0 = time.monotonic()
    truth = run_scenario(name, out, seed=seed, scenario=get_scenario(name, seconds, stations=n))
    wall = time.monotonic() - t0
    ip_bytes = SATURATION_PAYLOAD + 28
    phy = phy_for("g", 54)
    plain = bianchi(n, phy, ip_bytes, rts=rts)
    ns3_ref = bianchi(n, phy, ip_bytes, rts=rts, eifs=True, frozen_backoff=True)
    return {"n": n, "access": "rts" if rts else "basic", "measured": measured_bps(out),
            "counters": sum(truth["summary"]["goodput_mbps"].values()) * 1e6 * ip_bytes / SATURATION_PAYLOAD,
            "plain": plain["throughput_bps"], "ns3_ref": ns3_ref["throughput_bps"], "p": plain["p"],
            "collided": collided_fraction(truth["mac"], rts), "wall_s": wall}


def collided_fraction(mac: dict, rts: bool) -> float:
    """Return the fraction of the stations' attempts that collided (the model's p): data MPDUs sent again
    (basic access), or RTS frames that got no CTS (RTS/CTS: a collision costs an RTS, the data is not retried)."""
    if rts:
        return 1 - mac["cts_sent"] / mac["rts_sent"] if mac["rts_sent"] else float("nan")
    st = mac["stations"]
    attempts = sum(s["uplink_attempts"] for s in st.values())
    return sum(s["uplink_retries"] for s in st.values()) / attempts if attempts else float("nan")


def main(argv: list[str] | None = None) -> int:
    """Run the cases, print the table; return 0 (2 if ns-3 is missing)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stations", type=int, nargs="+", default=[2, 5, 10])
    ap.add_argument("--seconds", type=float, default=5.0, help="simulated seconds per case (traffic from 1 s)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--access", choices=("basic", "rts", "both"), default="both")
    ap.add_argument("--keep", metavar="DIR", help="keep the bundles here (default: a temporary directory)")
    args = ap.parse_args(argv)

    from xlayer.testbeds.sim import SimError

    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bianchi-"))
    modes = {"basic": [False], "rts": [True], "both": [False, True]}[args.access]
    print(f"{'n':>3} {'access':6} {'measured':>9} {'counters':>9} {'model':>9} {'meas/model':>10} "
          f"{'ns3-ref':>9} {'meas/ref':>8} {'p':>6} {'collided':>8} {'wall s':>7}   (Mbit/s of IP packets)")
    try:
        for rts in modes:
            for n in args.stations:
                try:
                    r = run_case(n, rts, args.seconds, args.seed, root / f"n{n}-{'rts' if rts else 'basic'}")
                except SimError as exc:
                    print(f"bianchi: {exc}", file=sys.stderr)
                    return 2
                print(f"{r['n']:3d} {r['access']:6} {r['measured'] / 1e6:9.3f} {r['counters'] / 1e6:9.3f} "
                      f"{r['plain'] / 1e6:9.3f} {r['measured'] / r['plain']:10.3f} {r['ns3_ref'] / 1e6:9.3f} "
                      f"{r['measured'] / r['ns3_ref']:8.3f} {r['p']:6.3f} {r['collided']:8.3f} "
                      f"{r['wall_s']:7.1f}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
