"""What the commands that read a whole bundle share: the BUNDLE argument (a bundle directory, or capture
files read as a temporary bundle: `xlayer.bundle.adhoc`), their timeline options and their progress line."""
from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

BUNDLE_HELP = ("bundle directory (or its bundle.json); or capture files without a bundle (pcap or pcapng, "
               "gzipped or not, and ss -tin text): read as a temporary bundle, each file its own vantage, air or "
               "wired as its link type says")


def add_bundle_argument(p: argparse.ArgumentParser, optional: bool = False) -> None:
    """Add the BUNDLE argument (a bundle, or capture files) to a command; return None."""
    p.add_argument("bundle", metavar="BUNDLE|CAPTURE", nargs="*" if optional else "+", help=BUNDLE_HELP)


def bundle_from_args(args: argparse.Namespace) -> Any:
    """Return what `args.bundle` names: a bundle's path as given, or an in-memory bundle of capture files.

    Capture files are said in one line on stderr (what was read as what, and how to keep it as a bundle);
    raise BundleError (one line, exit 2) on a missing, unreadable or unknown file."""
    import os
    import sys

    from xlayer.bundle.adhoc import adhoc_bundle, is_bundle_path
    from xlayer.bundle.manifest import MANIFEST, BundleError
    from xlayer.text import safe_text

    paths = [args.bundle] if isinstance(args.bundle, str) else list(args.bundle)
    if len(paths) == 1 and is_bundle_path(paths[0]):
        if os.path.isdir(paths[0]) and not os.path.lexists(os.path.join(paths[0], MANIFEST)):
            raise BundleError(f"{paths[0]}: no {MANIFEST} here (not an xlayer bundle); to read captures without a "
                              f"bundle, name the files (xlayer {args.cmd} {os.path.join(paths[0], '*.pcap')})")
        return paths[0]
    adhoc = adhoc_bundle(paths)
    print(f"xlayer: {safe_text(adhoc.announcement())}", file=sys.stderr)
    if getattr(args, "title", False) is None:
        # the report's default title names the bundle's directory: here only where the files happen to be
        args.title = f"xlayer report: {adhoc.title()}"
    return adhoc.bundle


def add_timeline_options(p: argparse.ArgumentParser) -> None:
    """Add the options that say how a bundle is read (clock, decoder, bins, cache) to a command; return None."""
    p.add_argument("--bin", type=float, default=0.1, metavar="SECONDS", help="series bin width (default 0.1 s)")
    p.add_argument("--reference", metavar="CLOCK|VANTAGE|FILE", help="the clock to put everything on")
    p.add_argument("--decoder", choices=("fast", "reference"), default="fast",
                   help="fast (columnar, the default) or reference (per frame; for checking)")
    p.add_argument("--no-cache", action="store_true",
                   help="decode the captures again and keep nothing (default: reuse and fill the decode cache, "
                   "$XLAYER_CACHE_DIR or ~/.cache/xlayer; `xlayer cache clear` empties it; never used with keys)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    add_key_options(p)


KEYS_HELP = ("WPA keys to decrypt protected 802.11 frames natively (no tshark); repeatable. Keys are never "
             "printed or stored, and with keys the decode cache is not used. Prefer --keys FILE: an option's "
             "value is visible to other users in the process list")


def add_key_options(p: argparse.ArgumentParser, about: str = KEYS_HELP) -> None:
    """Add the WPA key options (--wpa-pwd, --wpa-psk, --tk, --keys) to a command; return None."""
    g = p.add_argument_group("decryption", about)
    g.add_argument("--wpa-pwd", action="append", default=[], metavar="PASSPHRASE:SSID",
                   help="WPA/WPA2-Personal passphrase and SSID (':' or '%%' inside either written %%3a, %%25)")
    g.add_argument("--wpa-psk", action="append", default=[], metavar="PMK_HEX",
                   help="PMK in hex (32 or 48 bytes): WPA3-SAE, OWE and 802.1X users give the PMK")
    g.add_argument("--tk", action="append", default=[], metavar="HEX", help="temporal key in hex (16 or 32 bytes)")
    g.add_argument("--keys", action="append", default=[], metavar="FILE",
                   help="keys file in Wireshark's 80211_keys format (\"wpa-pwd\",\"PASSPHRASE:SSID\" lines)")


def keys_from_args(args: argparse.Namespace) -> list[Any]:
    """Return the keys the key options give (parsers.crypto keys); raise BundleError (one line, exit 2,
    the secret never in it) on a bad spec or keys file."""
    from parsers.crypto import KeySpecError, parse_key, parse_keys_file
    from xlayer.bundle.manifest import BundleError

    keys: list[Any] = []
    try:
        for opt, kind in (("wpa_pwd", "wpa-pwd"), ("wpa_psk", "wpa-psk"), ("tk", "tk")):
            for i, spec in enumerate(getattr(args, opt, None) or [], 1):
                keys.append(parse_key(f"{kind}:{spec}", label=f"--{kind} #{i}"))
        for path in getattr(args, "keys", None) or []:
            keys += parse_keys_file(path)
    except KeySpecError as exc:
        raise BundleError(f"bad key: {exc}") from None
    return keys


def bundle_keys(bundle: Any) -> list[Any]:
    """Return the keys of the keys file a bundle's manifest names (none: []); warn on one line on stderr
    if other users may read it; raise BundleError (one line, exit 2) if it is refused or unreadable."""
    import os
    import stat
    import sys

    from parsers.crypto import KeySpecError, parse_keys_file
    from xlayer.bundle.manifest import BundleError
    from xlayer.text import safe_text

    path = bundle.keys_path() if hasattr(bundle, "keys_path") else None
    if path is None:
        return []
    mode = os.stat(path).st_mode
    if mode & (stat.S_IRGRP | stat.S_IROTH):
        print(f"xlayer: warning: keys file {safe_text(bundle.keys_file)} can be read by other users "
              f"(mode {stat.S_IMODE(mode):o}); chmod 600 it", file=sys.stderr)
    try:
        return parse_keys_file(path)
    except KeySpecError as exc:
        raise BundleError(f"bad keys file: {exc}") from None


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
    """Return the timeline of `args.bundle` (`bundle_from_args`) as the timeline options say (metric tables
    on demand)."""
    from xlayer.bundle.manifest import Bundle, open_bundle
    from xlayer.metrics import open_timeline

    keys = keys_from_args(args)
    bundle = bundle_from_args(args)
    if not isinstance(bundle, Bundle):
        bundle = open_bundle(bundle)
    keys += bundle_keys(bundle)
    if keys:
        args.no_cache = True        # nothing derived from a secret goes into the cache
    return open_timeline(bundle, reference=args.reference, decoder=args.decoder,
                         bin_ns=int(round(args.bin * 1e9)), progress=step, cache=not args.no_cache,
                         keys=keys or None)


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
