"""The `xlayer` command: the argument parser of every command in `xlayer.cli.COMMANDS`, and `main`."""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from xlayer.cli import COMMANDS


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the `xlayer` command."""
    p = argparse.ArgumentParser(prog="xlayer", description="Multi-layer capture analysis of Wi-Fi and "
                                "wired networks: why did throughput drop?")
    sub = p.add_subparsers(dest="cmd", required=True)
    for mod in COMMANDS:
        mod.register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    args = build_parser().parse_args(argv)
    if getattr(args, "file", None) is not None and not os.path.exists(args.file):
        print(f"xlayer: {args.file}: no such file", file=sys.stderr)
        return 2
    try:
        return int(args.func(args))
    except BrokenPipeError:
        # the reader of our output went away (`| head`): nothing more to say, and no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
