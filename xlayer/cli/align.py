"""The `xlayer align` command: put every capture of a bundle on the reference clock's timeline."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def cmd_align(args: argparse.Namespace) -> int:
    """Print the clock alignment of a bundle (JSON or a table); return the exit code."""
    from xlayer.bundle import open_bundle
    from xlayer.cli.common import bundle_keys, keys_from_args, require_packets
    from xlayer.text import safe_text
    from xlayer.timeline.align import align_bundle
    from xlayer.timeline.open import DecryptedTables

    keys = keys_from_args(args)
    bundle = open_bundle(args.bundle)
    keys += bundle_keys(bundle)
    al = align_bundle(bundle, reference=args.reference, decoder=args.decoder,
                      min_matches=args.min_matches, use_tsft=not args.no_tsft,
                      tables=DecryptedTables(bundle, args.decoder, keys) if keys else None)
    # no capture read: nothing was aligned (exit 2 naming them), not an empty table
    require_packets(bundle, {c.file: n.removeprefix("not read: ") for c in al.captures
                             for n in getattr(c, "notes", []) if n.startswith("not read: ")})
    if args.json:
        json.dump(al.as_json(), sys.stdout, indent=2, allow_nan=False)
        print()
        return 0
    print(safe_text(al.table()).replace("\\x0a", "\n"))
    print(f"({al.seconds:.2f} s)")
    return 0


def register(subparsers: Any) -> None:
    """Add the `align` command to the xlayer argument parser; return None."""
    p = subparsers.add_parser(
        "align", help="estimate each capture's clock offset and skew against the reference clock",
        description="For every capture of BUNDLE not on the reference clock, estimate offset and skew "
        "from the packets seen at both ends (lower bounds of the one-way delay in both directions, "
        "their midpoint; the same 802.11 frame heard by two sniffers; manifest clock_overrides win). "
        "Reference time of a local stamp t: t - offset_s - skew_ppm*1e-6*(t - anchor_ts).")
    p.add_argument("bundle", metavar="BUNDLE", help="bundle directory (or its bundle.json)")
    p.add_argument("--json", action="store_true",
                   help='print {"reference": VANTAGE, "captures": [{file, vantage, offset_s, skew_ppm, '
                   'anchor_ts, matched, residual_us, method}]}')
    p.add_argument("--reference", metavar="CLOCK|VANTAGE|FILE",
                   help="the clock to align to (default: the server's, else the best-matched wired capture's)")
    p.add_argument("--min-matches", type=int, default=3, metavar="N",
                   help="fewest matched packets for a fit (default 3); fewer: 'unmatched'")
    p.add_argument("--no-tsft", action="store_true", help="use the sniffers' host stamps, not TSFT")
    p.add_argument("--decoder", choices=("fast", "reference"), default="fast",
                   help="fast (columnar, the default) or reference (per frame, for checking)")
    from xlayer.cli.common import add_key_options

    add_key_options(p)
    p.set_defaults(func=cmd_align)
