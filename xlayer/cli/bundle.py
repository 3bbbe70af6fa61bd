"""The `xlayer bundle` commands: assemble a bundle from capture files, and show what one holds."""
from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import re
import shutil
import socket
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xlayer.bundle.manifest import (
    MANIFEST,
    PACKET_FORMATS,
    STATE_FORMATS,
    Bundle,
    BundleError,
    CaptureEntry,
    open_bundle,
    utc_now,
    write_manifest,
)
from xlayer.bundle.tables import describe, guess_format
from xlayer.text import iso_label, iso_ns, safe_text, utc_label

_VANTAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_KIND_OPTION = {"air": "--air", "wired": "--wired", "tcp_state": "--tcp-state"}


class Refusal(Exception):
    """A request the command turns down before touching anything: printed as one line, exit 2."""




# ---------------------------------------------------------------------------------------------
# `bundle new`: pure planning, then copying at the edge

@dataclass
class Placement:
    """One input file and where it goes in the bundle."""

    src: Path
    entry: CaptureEntry


def split_assignment(text: str, option: str, what: str = "VANTAGE=FILE") -> tuple[str, str]:
    """Return (left, right) of 'left=right'; raise Refusal naming the option if there is no '='."""
    left, eq, right = text.partition("=")
    if not eq:
        raise Refusal(f"{option} {text!r}: expected {what}")
    if not left:
        raise Refusal(f"{option} {text!r}: the part before '=' is empty (expected {what})")
    if not right:
        raise Refusal(f"{option} {text!r}: the part after '=' is empty (expected {what})")
    return left, right


def check_vantage(name: str, option: str) -> str:
    """Return name if it is a short vantage name; raise Refusal otherwise."""
    if not _VANTAGE.match(name):
        raise Refusal(f"{option}: vantage {name!r} must be a short name of letters, digits, '_', '.', '-'")
    return name


def kind_phrase(kind: str) -> str:
    """Return a capture kind with its article: 'an air capture', 'a wired capture', 'a TCP state capture'."""
    words = kind.replace("_", " ").replace("tcp", "TCP")
    return f"{'an' if words[:1] in ('a', 'e', 'i', 'o', 'u') else 'a'} {words} capture"


def _format_for(kind: str, src: Path, option: str) -> str:
    try:
        fmt = guess_format(src)
    except BundleError as exc:
        raise Refusal(f"{option}: {exc}") from None
    allowed = PACKET_FORMATS if kind in ("air", "wired") else STATE_FORMATS
    if fmt not in allowed:
        raise Refusal(f"{option} {src}: {kind_phrase(kind)} must be {' or '.join(allowed)}, "
                      f"but this file looks like {fmt}")
    return fmt


def plan_placements(inputs: list[tuple[str, str]]) -> list[Placement]:
    """Return where each (kind, 'VANTAGE=FILE') input goes; raise Refusal on a bad or clashing input."""
    out: list[Placement] = []
    names: dict[str, str] = {}
    for kind, text in inputs:
        option = _KIND_OPTION[kind]
        vantage, file = split_assignment(text, option)
        check_vantage(vantage, option)
        src = Path(file)
        if not src.exists():
            raise Refusal(f"{option} {vantage}={file}: no such file")
        if not src.is_file():
            raise Refusal(f"{option} {vantage}={file}: not a regular file")
        name = src.name
        if name == MANIFEST or name.startswith(f".{MANIFEST}."):
            raise Refusal(f"{option} {vantage}={file}: the name {name!r} is reserved for the bundle itself")
        if name in names:
            raise Refusal(f"{option} {vantage}={file}: would land on the same file name {name!r} as "
                          f"{names[name]}; rename one of them")
        names[name] = f"{option} {vantage}={file}"
        fmt = _format_for(kind, src, f"{option} {vantage}={file}")
        out.append(Placement(src, CaptureEntry(kind=kind, vantage=vantage, file=name, format=fmt)))
    return out


def _targets(entries: list[CaptureEntry], key: str, option: str) -> list[CaptureEntry]:
    # A vantage names all its captures; a file name picks one (e.g. to give it a clock of its own).
    hit = [e for e in entries if e.vantage == key] or [e for e in entries if e.file == key]
    if not hit:
        raise Refusal(f"{option} {key}=...: no capture at vantage or with file name {key!r}")
    return hit


def apply_options(entries: list[CaptureEntry], channels: list[str], clocks: list[str],
                  notes: list[str]) -> None:
    """Set channel, clock and notes on the entries the options name; raise Refusal on a bad option."""
    for text in channels:
        key, value = split_assignment(text, "--channel", "VANTAGE=CHANNEL")
        try:
            ch = int(value)
        except ValueError:
            raise Refusal(f"--channel {text!r}: the channel must be a whole number") from None
        if not 0 < ch < 1000:
            raise Refusal(f"--channel {text!r}: channel {ch} is out of range")
        air = [e for e in _targets(entries, key, "--channel") if e.kind == "air"]
        if not air:
            raise Refusal(f"--channel {text!r}: {key!r} has no air capture")
        for e in air:
            e.channel = ch
    for text in clocks:
        key, value = split_assignment(text, "--clock", "VANTAGE=CLOCK")
        for e in _targets(entries, key, "--clock"):
            e.clock = value
    for text in notes:
        key, value = split_assignment(text, "--note", "VANTAGE=TEXT")
        for e in _targets(entries, key, "--note"):
            e.notes = value


def parse_tags(tags: list[str]) -> dict[str, str]:
    """Return the --tag KEY=VALUE options as a dict (a later KEY wins); raise Refusal on a bad one."""
    out: dict[str, str] = {}
    for text in tags:
        key, eq, value = text.partition("=")
        if not eq or not key:
            raise Refusal(f"--tag {text!r}: expected KEY=VALUE")
        out[key] = value
    return out


def _place(src: Path, dest: Path, link: bool) -> str:
    """Put src at dest (copy, or hard link with link=True); return how it was done."""
    if link:
        try:
            os.link(src, dest)
            return "hard-linked"
        except OSError as exc:
            # Across file systems, or where hard links are not allowed: copied, since a bundle may not
            # hold a symlink to a file outside it (it would be refused when read).
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EACCES):
                raise
    # Copy under a temporary name first, so an interrupted copy never looks like a whole capture.
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    os.close(fd)
    try:
        shutil.copy2(src, tmp)
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return "copied"


def _remove(files: list[Path]) -> None:
    # Leave the directory as it was: a half-made bundle without its manifest helps nobody.
    for f in files:
        with contextlib.suppress(OSError):
            f.unlink()


KEYS_FILE = "keys.txt"


def keys_text(args: argparse.Namespace) -> str | None:
    """Return the bundle's keys file text (80211_keys lines) from the key options, or None if none are
    given; raise Refusal (the secret never in its message) on a bad spec or keys file."""
    from parsers.crypto import KeySpecError, parse_key, parse_keys_file

    lines = []
    try:
        for path in args.keys:
            parse_keys_file(path)           # checked whole before anything is written
            with open(path, encoding="utf-8", errors="replace") as fh:
                lines += [ln.rstrip("\n") for ln in fh]
        for opt, kind in (("wpa_pwd", "wpa-pwd"), ("wpa_psk", "wpa-psk"), ("tk", "tk")):
            for i, spec in enumerate(getattr(args, opt), 1):
                parse_key(f"{kind}:{spec}", label=f"--{kind} #{i}")
                lines.append(f'"{kind}","{spec.replace(chr(34), "%22")}"')
    except KeySpecError as exc:
        raise Refusal(f"bad key: {exc}") from None
    except OSError as exc:
        raise Refusal(f"{exc.filename}: cannot read keys file: {exc.strerror or exc}") from None
    return "\n".join(lines) + "\n" if lines else None


def _write_private(dest: Path, text: str) -> None:
    """Write text to dest readable by its owner only, whole or not at all."""
    tmp = dest.with_name(f".{dest.name}.part")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def cmd_new(args: argparse.Namespace) -> int:
    """Assemble a bundle directory from capture files; return the exit code."""
    dest_dir = Path(args.dir)
    try:
        inputs = ([("air", a) for a in args.air] + [("wired", a) for a in args.wired]
                  + [("tcp_state", a) for a in args.tcp_state])
        if not inputs:
            raise Refusal("nothing to put in the bundle: give --air, --wired or --tcp-state VANTAGE=FILE")
        tags = parse_tags(args.tag)
        plan = plan_placements(inputs)
        entries = [p.entry for p in plan]
        apply_options(entries, args.channel, args.clock, args.note)
        if dest_dir.exists() and not dest_dir.is_dir():
            raise Refusal(f"{dest_dir}: exists and is not a directory")
        if (dest_dir / MANIFEST).exists() and not args.force:
            raise Refusal(f"{dest_dir}: already holds a {MANIFEST} (use --force to replace it)")
        todo = []
        for p in plan:
            dest = dest_dir / p.entry.file
            if dest.exists() or dest.is_symlink():
                if dest.exists() and os.path.samefile(p.src, dest):
                    todo.append((p, None))  # the input already sits in the bundle directory
                    continue
                if not args.force:
                    raise Refusal(f"{dest}: already exists (use --force to overwrite)")
            todo.append((p, dest))
        bundle = Bundle(captures=entries, tags=tags, created=utc_now(), host=socket.gethostname())
        keys = keys_text(args)
        if keys is not None:
            if (dest_dir / KEYS_FILE).exists() and not args.force:
                raise Refusal(f"{dest_dir / KEYS_FILE}: already exists (use --force to overwrite)")
            bundle.extra["keys_file"] = KEYS_FILE
    except Refusal as exc:
        print(f"xlayer bundle new: {safe_text(exc)}", file=sys.stderr)
        return 2

    placed: list[Path] = []
    try:
        dest_dir.mkdir(parents=True, exist_ok=True)
        done = []
        for p, dest in todo:
            if dest is None:
                done.append(("kept", p.entry))
                continue
            if args.force and (dest.exists() or dest.is_symlink()):
                dest.unlink()
            how = _place(p.src, dest, args.link)
            placed.append(dest)
            done.append((how, p.entry))
        if keys is not None:
            _write_private(dest_dir / KEYS_FILE, keys)
            placed.append(dest_dir / KEYS_FILE)
        write_manifest(dest_dir, bundle)
    except KeyboardInterrupt:
        _remove(placed)
        print("xlayer bundle new: interrupted; no bundle written", file=sys.stderr)
        return 130
    except (OSError, BundleError) as exc:
        _remove(placed)
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        name = getattr(exc, "filename", None)
        print(f"xlayer bundle new: {safe_text(f'{name}: {why}' if name else why)}", file=sys.stderr)
        return 1
    for how, e in done:
        print(f"{how} {safe_text(e.file)} ({e.kind}, vantage {safe_text(e.vantage)}, {e.format})")
    plural = "" if len(entries) == 1 else "s"
    if keys is not None:
        print(f"wrote the keys to {safe_text(dest_dir / KEYS_FILE)} (readable by you only); the manifest names it")
    print(f"wrote {safe_text(dest_dir / MANIFEST)} with {len(entries)} capture{plural}")
    return 0


# ---------------------------------------------------------------------------------------------
# `bundle show`

def _add_times(d: dict[str, Any]) -> dict[str, Any]:
    first, last = d.get("first_ts_ns"), d.get("last_ts_ns")
    d["first_ts"] = iso_ns(first)
    d["last_ts"] = iso_ns(last)
    d["duration_s"] = (last - first) / 1e9 if first is not None and last is not None else None
    return d


def render_show(d: dict[str, Any]) -> list[str]:
    """Return the text lines of `bundle show` for an xlayer.bundle.describe() result (all text escaped)."""
    from parsers.decode.registry import linktype_name

    t = safe_text
    created = iso_label(d.get("created")) or t(d.get("created"))     # the manifest's text, if not a UTC time
    lines = [f"bundle: {t(d.get('path'))}", f"created: {created}", f"host: {t(d.get('host'))}"]
    tags = d.get("tags") or {}
    lines.append("tags:" if tags else "tags: (none)")
    lines += [f"  {t(k)}: {t(v)}" for k, v in tags.items()]
    lines.append(f"captures: {len(d['captures'])}")
    for c in d["captures"]:
        lines.append(f"  {t(c['file'])}")
        lines += [f"    kind: {c['kind']}", f"    vantage: {t(c['vantage'])}", f"    clock: {t(c['clock'])}",
                  f"    format: {t(c.get('format'))}"]
        for k in ("channel", "iface", "netns", "filter", "interval_s", "complete", "packets", "if_drops"):
            if c.get(k) is not None:
                lines.append(f"    {k}: {t(c[k])}")
        if c.get("file_bytes") is not None:
            lines.append(f"    size: {c['file_bytes']} bytes")
        if c.get("records") is not None:
            lines.append(f"    records: {c['records']}")
        if c.get("malformed") is not None:
            lines.append(f"    malformed: {c['malformed']}")
        if c.get("linktypes"):
            lines.append("    link types: " + ", ".join(f"{lt} {linktype_name(int(lt))} ({n})"
                                                       for lt, n in c["linktypes"].items()))
        for itf in c.get("interfaces") or []:
            if itf.get("name") or itf.get("description"):
                desc = f" ({t(itf['description'])})" if itf.get("description") else ""
                lines.append(f"    interface {itf.get('id')}: {t(itf.get('name'))}{desc}, "
                             f"link type {itf.get('linktype')}")
        if c.get("first_ts") is not None:
            lines += [f"    first: {utc_label(c['first_ts_ns'], 9)}", f"    last: {utc_label(c['last_ts_ns'], 9)}",
                      f"    duration: {c['duration_s']:.6f} s"]
        elif c.get("error") is None:
            lines.append("    time span: -")
        if c.get("truncated_tail"):
            lines.append("    note: the file ends inside its last record (cut short)")
        if c.get("read_error"):
            lines.append(f"    note: reading stopped early: {t(c['read_error'])}")
        if c.get("notes"):
            lines.append(f"    notes: {t(c['notes'])}")
        if c.get("error"):
            lines.append(f"    error: {t(c['error'])}")
    lines.append("clocks:")
    clocks, overrides = d.get("clocks") or {}, d.get("clock_overrides") or {}
    # grouped in one pass: a manifest of thousands of captures, each on its own clock, stays linear
    by_clock: dict[str, list[str]] = {}
    for c in d["captures"]:
        by_clock.setdefault(c["clock"], []).append(t(c["file"]))
    for name in dict.fromkeys([*by_clock, *clocks, *overrides]):
        files = by_clock.get(name, [])
        lines.append(f"  {t(name)}: {', '.join(files) if files else '(no capture)'}")
        info = clocks.get(name) or {}
        if info.get("source") is not None:
            lines.append(f"    source: {t(info['source'])}")
        if info.get("tracking"):
            lines.append("    tracking:")
            lines += [f"      {t(ln)}" for ln in str(info["tracking"]).splitlines()]
        if name in overrides:
            ov = overrides[name]
            lines.append("    override: " + ", ".join(f"{t(k)} {t(v)}" for k, v in ov.items()))
        if not info and name not in overrides:
            lines.append("    (no synchronisation information)")
    run = d.get("capture")
    if run:
        lines.append("capture run:")
        for k in ("started_ns", "stopped_ns"):
            if run.get(k) is not None and isinstance(run[k], int):
                lines.append(f"  {k[:-3]}: {utc_label(run[k], 9)}")
        if run.get("stop_reason"):
            lines.append(f"  stop reason: {t(run['stop_reason'])}")
        if run.get("command"):
            lines.append(f"  command: {t(' '.join(map(str, run['command'])))}")
        for err in run.get("errors") or []:
            lines.append(f"  error: {t(err)}")
    return lines


def cmd_show(args: argparse.Namespace) -> int:
    """Print a bundle's tags, captures (with what reading them found) and clocks; return the exit code."""
    try:
        bundle = open_bundle(args.dir)
    except BundleError as exc:
        print(f"xlayer bundle show: {safe_text(exc)}", file=sys.stderr)
        return 2
    try:
        d = describe(bundle, decoder=args.decoder)
    except KeyboardInterrupt:
        return 130
    for c in d["captures"]:
        _add_times(c)
    if args.json:
        # ensure_ascii escapes every control character, so the JSON is terminal-safe as it is.
        json.dump(d, sys.stdout, indent=2, default=str)
        print()
    else:
        print("\n".join(render_show(d)))
    bad = sum(1 for c in d["captures"] if c.get("error"))
    if bad:
        print(f"xlayer bundle show: {bad} of {len(d['captures'])} captures could not be read (missing or "
              "unreadable: see their error)", file=sys.stderr)
    return 1 if bad else 0


def register(subparsers: Any) -> None:
    """Add the `bundle` command group (new, show) to the xlayer argument parser; return None."""
    pb = subparsers.add_parser("bundle", help="make or inspect an experiment bundle (captures + bundle.json)")
    sub = pb.add_subparsers(dest="bundle_cmd", required=True)
    pn = sub.add_parser("new", help="copy capture files into a directory and write its bundle.json",
                        description="Copy (or link) capture files into DIR and write DIR/bundle.json. "
                        "Formats are recognised from file content.")
    pn.add_argument("dir", metavar="DIR", help="bundle directory to create or fill (made if missing)")
    for kind, opt in _KIND_OPTION.items():
        pn.add_argument(opt, dest=kind, action="append", default=[], metavar="VANTAGE=FILE",
                        help=f"{kind_phrase(kind)} taken at VANTAGE (repeatable)")
    pn.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE",
                    help="describe the run (access, device, os, transport, run...)")
    pn.add_argument("--channel", action="append", default=[], metavar="VANTAGE=N",
                    help="802.11 channel of the air capture(s) at VANTAGE")
    pn.add_argument("--clock", action="append", default=[], metavar="VANTAGE=CLOCK",
                    help="clock name of the captures at VANTAGE, or of one capture file "
                    "(default: the vantage name)")
    pn.add_argument("--note", action="append", default=[], metavar="VANTAGE=TEXT",
                    help="free-text note for the captures at VANTAGE, or for one capture file")
    pn.add_argument("--link", action="store_true", help="hard-link the files instead of copying them "
                    "(copied where a hard link cannot be made, e.g. across file systems)")
    pn.add_argument("--force", action="store_true", help="replace an existing bundle.json and files")
    from xlayer.cli.common import add_key_options

    add_key_options(pn, "WPA keys for the commands that read the bundle to decrypt its air captures with: "
                    f"written to DIR/{KEYS_FILE}, readable by you only, which the manifest names (keys_file)")
    pn.set_defaults(func=cmd_new)
    ps = sub.add_parser("show", help="tags, captures (records, time span, link types) and clocks of a bundle")
    ps.add_argument("dir", metavar="DIR", help="bundle directory (or its bundle.json)")
    ps.add_argument("--json", action="store_true", help="print the description as one JSON object")
    ps.add_argument("--decoder", choices=("fast", "reference"), default="fast",
                    help="fast (columnar, the default) or reference (per frame, for checking)")
    ps.set_defaults(func=cmd_show)
