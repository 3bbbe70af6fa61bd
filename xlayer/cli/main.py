"""The `xlayer` command: the argument parser of every command in `xlayer.cli.COMMANDS`, and `main`."""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from parsers.formats.records import CaptureError
from xlayer.bundle.manifest import BundleError
from xlayer.cli import COMMANDS
from xlayer.signals import stopped
from xlayer.text import package_version, safe_text


class _Version(argparse.Action):
    """`--version`: the installed version, looked up only when asked (reading package metadata costs ~40 ms)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        print(f"xlayer {package_version()}")      # on stdout, as argparse's own version action
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the `xlayer` command."""
    p = argparse.ArgumentParser(prog="xlayer", description="Multi-layer capture analysis of Wi-Fi and "
                                "wired networks: why did throughput drop?")
    p.add_argument("--version", action=_Version, nargs=0, help="show the program's version number and exit")
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
    # What every command does with a bad bundle or capture (one line, exit 2) and an interrupt (exit 130);
    # a command catches these itself only to say more (what it left behind).
    try:
        return int(args.func(args))
    except (BundleError, CaptureError) as exc:
        print(f"xlayer: {safe_text(exc)}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader of our output went away (`| head`): nothing more to say, and no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except BaseException as exc:
        if not stopped(exc):
            raise
        print("xlayer: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
