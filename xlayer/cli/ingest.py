"""The `xlayer ingest` and `xlayer info` commands: one capture to Parquet, or what a capture holds."""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from tqdm import tqdm

import xlayer.ingest as ingest_mod
from parsers.decode.ingest import IngestStats, iter_tables
from parsers.decode.registry import linktype_name
from parsers.formats.records import CaptureError
from xlayer.cli.common import add_key_options, keys_from_args
from xlayer.cli.wifi import WifiSummary
from xlayer.signals import stop_on_signals, stopped
from xlayer.text import safe_text, utc_label


def _print_counts(st: IngestStats, out=sys.stdout) -> None:
    print(f"records read: {st.records}", file=out)
    print(f"decoded: {st.decoded}", file=out)
    print(f"malformed: {st.malformed}", file=out)
    print(f"passed to the reference decoder: {st.fallback}", file=out)
    print(f"skipped bytes: {st.skipped_bytes}", file=out)
    if st.truncated_tail:
        print("note: the file ends inside its last record (cut short); that record was skipped", file=out)
    if st.error:
        print(f"note: reading stopped early: {safe_text(st.error)}", file=out)
    for w in st.warnings:
        print(f"warning: {safe_text(w)}", file=out)
    for reason, n in st.malformed_reasons.most_common(10):
        print(f"  malformed x{n}: {safe_text(reason)}", file=out)
    if st.decryption:
        from xlayer.timeline.open import decryption_note

        print(f"decryption: {decryption_note(st.decryption)}", file=out)


def _rows_in(parquet: str) -> int:
    """Return the number of rows a Parquet file holds (0 if it cannot be read)."""
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(parquet).metadata.num_rows
    except (OSError, ValueError):
        return 0


def cmd_ingest(args: argparse.Namespace) -> int:
    """Write a capture as Parquet and print the counts; return the exit code."""
    keys = keys_from_args(args)
    if keys and args.decoder == "tshark":
        print("xlayer: the tshark decoder is never given keys; decrypt with --decoder fast or reference",
              file=sys.stderr)
        return 2
    stop_on_signals()
    st = IngestStats()
    try:
        written = ingest_mod.ingest_to_parquet(args.file, args.output, decoder=args.decoder, stats=st,
                                               progress=not args.quiet, keys=keys or None)
    except CaptureError as exc:
        print(f"xlayer: {safe_text(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"xlayer: cannot write {args.output}: {exc.strerror or exc}; no output file left",
              file=sys.stderr)
        return 1
    except BaseException as exc:
        if not stopped(exc):
            raise
        print(f"xlayer: interrupted; {args.output} holds the {_rows_in(args.output)} records written so far",
              file=sys.stderr)
        _print_counts(st, sys.stderr)
        return 130
    print(f"wrote {written} rows to {args.output}")
    _print_counts(st)
    return 0


def _scan(path: str, decoder: str, progress: bool, keys: list | None = None) -> tuple[IngestStats, WifiSummary]:
    """Return the counts of a full decoding pass over a capture and the summary of its 802.11 frames."""
    st, wifi = IngestStats(), WifiSummary()
    size = os.path.getsize(path)
    # tqdm disables itself when stderr is not a terminal (disable=None); small files need no bar
    with tqdm(total=size, unit="B", unit_scale=True, desc=os.path.basename(path), leave=False,
              disable=None if progress and size > (64 << 20) else True) as bar:
        for df in iter_tables(path, decoder=decoder, stats=st, progress=bar.update, keys=keys):
            wifi.add(df)
    return st, wifi


def cmd_info(args: argparse.Namespace) -> int:
    """Print what a capture holds; return the exit code."""
    keys = keys_from_args(args)
    st, wifi = _scan(args.file, args.decoder, progress=not args.quiet and not args.json, keys=keys or None)
    if args.json:
        json.dump({**st.as_dict(), "wifi": wifi.as_dict() if wifi.frames else None}, sys.stdout, indent=2,
                  default=str)
        print()
        return 0
    print(f"file: {safe_text(st.path)}")
    print(f"format: {st.format}, {st.file_bytes} bytes")
    for itf in st.interfaces:
        lt = itf["linktype"]
        name = f" name {safe_text(itf['name'])}" if itf.get("name") else ""
        print(f"interface {itf['id']}: link type {lt} ({linktype_name(lt)}), snaplen {itf['snaplen']}{name}")
    for lt, n in sorted(st.linktypes.items()):
        print(f"link type {lt} ({linktype_name(int(lt))}): {n} records")
    print(f"time span: {utc_label(st.first_ts_ns)} .. {utc_label(st.last_ts_ns)}"
          + (f" ({(st.last_ts_ns - st.first_ts_ns) / 1e9:.6f} s)" if st.first_ts_ns is not None else ""))
    if st.rt_layouts:
        print("radiotap layouts (presence words: records):")
        for lay, n in st.rt_layouts.most_common():
            print(f"  {lay}: {n}")
    for line in wifi.lines():
        print(line)
    _print_counts(st)
    return 0


def register(sub: Any) -> None:
    """Add the `ingest` and `info` commands to the xlayer argument parser; return None."""
    pi = sub.add_parser("ingest", help="decode a pcap/pcapng file into a Parquet packet table")
    pi.add_argument("file", metavar="CAPTURE", help="pcap or pcapng file (any link type xlayer reads)")
    pi.add_argument("-o", "--output", required=True, help="Parquet file to write")
    pi.add_argument("--decoder", choices=("fast", "reference", "tshark"), default="fast",
                    help="fast (columnar, the default), reference (per frame, for checking) or tshark (needs tshark)")
    pi.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    add_key_options(pi)
    pi.set_defaults(func=cmd_ingest)
    pf = sub.add_parser("info", help="link types, counts, time span and radiotap layouts of a capture")
    pf.add_argument("file", metavar="CAPTURE", help="pcap or pcapng file")
    pf.add_argument("--json", action="store_true", help="print the counts as one JSON object")
    pf.add_argument("--decoder", choices=("fast", "reference"), default="fast",
                    help="fast (columnar, the default) or reference (per frame, for checking)")
    pf.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    add_key_options(pf)
    pf.set_defaults(func=cmd_info)
