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


_NAMED_MAX = 5      # captures named in one line; the notes and the JSON name them all


def _why(file: str, err: str) -> str:
    # "BundleError: x.pcap: capture file is missing from the bundle" -> "missing"
    if "capture file is missing" in err:
        return "missing"
    rest = err.partition(": ")[2]
    return rest.removeprefix(f"{file}: ") or err


def _named(files: list[str], errors: dict[str, str]) -> str:
    text = ", ".join(f"{f} ({_why(f, errors[f])})" for f in files[:_NAMED_MAX])
    more = len(files) - _NAMED_MAX
    return text + (f" and {more} more" if more > 0 else "")


def require_packets(tl: Any, errors: dict[str, str] | None = None) -> None:
    """Return None if some packet capture was read; else raise BundleError (exit 2) naming them.

    `tl` is a timeline (its bundle and read errors) or a bundle with `errors` given."""
    from xlayer.bundle.manifest import BundleError

    bundle = getattr(tl, "bundle", tl)
    errors = tl.errors if errors is None else errors
    where = bundle.path if bundle.path is not None else "the bundle"
    packets = [e.file for e in bundle.captures if e.is_packets]
    if not packets:
        raise BundleError(f"{where}: no packet capture (air or wired) in the bundle; nothing to analyze")
    unread = [f for f in packets if f in errors]
    if len(unread) == len(packets):
        raise BundleError(f"{where}: none of its {len(packets)} packet captures could be read, nothing to analyze: "
                          f"{_named(unread, errors)}")


def unread_note(tl: Any) -> str | None:
    """Return one line naming the bundle's captures that were not read (the rest analyzed), or None."""
    unread = [e.file for e in tl.bundle.captures if e.file in tl.errors]
    if not unread:
        return None
    return (f"{len(unread)} of {len(tl.bundle.captures)} captures not read, the rest analyzed: "
            f"{_named(unread, tl.errors)}")
