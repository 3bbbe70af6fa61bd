"""What the commands that read a whole bundle share: their timeline options and their progress line."""
from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


def add_timeline_options(p: argparse.ArgumentParser) -> None:
    """Add the options that say how a bundle is read (clock, decoder, bins, cache) to a command; return None."""
    p.add_argument("--bin", type=float, default=0.1, metavar="SECONDS", help="series bin width (default 0.1 s)")
    p.add_argument("--reference", metavar="CLOCK|VANTAGE|FILE", help="the clock to put everything on")
    p.add_argument("--decoder", choices=("fast", "reference"), default="fast",
                   help="fast (columnar, the default) or reference (per frame; for checking)")
    p.add_argument("--no-cache", action="store_true",
                   help="decode the captures again and keep nothing (default: reuse and fill the decode cache, "
                   "$XLAYER_CACHE_DIR or ~/.cache/xlayer; `xlayer cache clear` empties it)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


@contextmanager
def steps(desc: str, quiet: bool) -> Iterator[Callable[[str], None]]:
    """Yield a function that shows one step of a long command on the progress line (none if quiet)."""
    from tqdm import tqdm

    with tqdm(total=None, desc=desc, unit=" steps", disable=quiet or None, leave=False) as bar:
        def step(what: str) -> None:
            bar.set_postfix_str(what)
            bar.update(1)

        yield step


def open_from_args(args: argparse.Namespace, step: Callable[[str], None]) -> Any:
    """Return the timeline of `args.bundle` as the timeline options say (metric tables on demand)."""
    from xlayer.metrics import open_timeline

    return open_timeline(args.bundle, reference=args.reference, decoder=args.decoder,
                         bin_ns=int(round(args.bin * 1e9)), progress=step, cache=not args.no_cache)
