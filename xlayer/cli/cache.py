"""The `xlayer cache` commands: where the decode cache is, what it holds, and emptying it."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from xlayer.text import safe_text


def cmd_cache(args: argparse.Namespace) -> int:
    """List or clear the decode cache; return the exit code."""
    from xlayer.timeline import cache

    root = cache.cache_root()
    try:
        if args.action == "clear":
            n, size = cache.clear(root)
            print(f"removed {n} cache entr{'y' if n == 1 else 'ies'} ({size / 1e6:.1f} MB) from {safe_text(root)}")
            return 0
        rows = cache.entries(root)
    except OSError as exc:
        print(f"xlayer: {safe_text(root)}: {safe_text(exc.strerror or exc)}", file=sys.stderr)
        return 1
    print(f"cache: {safe_text(root)} ({len(rows)} entr{'y' if len(rows) == 1 else 'ies'}, "
          f"{sum(r['bytes'] for r in rows) / 1e6:.1f} MB)")
    for r in rows:
        print(f"  {r['key']}  {r['bytes'] / 1e6:9.1f} MB  {safe_text(r['bundle'])}")
    return 0


def register(subparsers: Any) -> None:
    """Add the `cache` command to the xlayer argument parser; return None."""
    p = subparsers.add_parser(
        "cache", help="list or empty the decode cache (decoded, aligned captures and metric tables)",
        description="analyze, metrics and report decode and align a bundle's captures once and keep the "
        "tables in the decode cache ($XLAYER_CACHE_DIR, else $XDG_CACHE_HOME/xlayer, else ~/.cache/xlayer), "
        "keyed by the captures' content; the next command on the same captures reads them back.")
    p.add_argument("action", choices=("list", "clear"), nargs="?", default="list",
                   help="list the entries (default) or remove them all")
    p.set_defaults(func=cmd_cache)
