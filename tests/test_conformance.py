"""Every schema column of every corpus capture against tshark, and the two decoders against each other.

A cell that differs from tshark must be listed in EXCEPTIONS with the reason we differ.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass

import pytest

from parsers import read_capture
from parsers.compare import diff_tables
from parsers.records import CaptureError
from parsers.schema import NAMES
from parsers.tshark import tshark_table

from .conftest import CORPUS, capture_files, corpus_or_skip, tshark_or_skip, tshark_refuses

# `malformed` holds our reasons; tshark's notion differs (it is checked in test_malformed).
COMPARED = [c for c in NAMES if c != "malformed"]


@dataclass(frozen=True)
class Exc:
    """A known, explained difference: file glob, column, frames (None = every frame), ours/theirs."""

    files: str
    column: str
    reason: str
    frames: tuple[int, ...] | None = None
    when: str = "any"   # any | theirs_null (tshark has no value) | ours_null (we have none)


EXCEPTIONS: list[Exc] = [
    Exc("*", "nss", "tshark shows NSS only for VHT (wlan_radio.11ac.nss); for HT we derive it from the "
        "MCS index (streams = MCS // 8 + 1, IEEE 802.11-2020 19.5) and for HE from the radiotap HE "
        "data6 NSTS field", when="theirs_null"),
]


def _explained(rel: str, frame: int, col: str, ours, theirs) -> bool:
    for e in EXCEPTIONS:
        if e.column != col or not fnmatch.fnmatch(rel, e.files):
            continue
        if e.frames is not None and frame not in e.frames:
            continue
        if e.when == "theirs_null" and theirs is not None:
            continue
        if e.when == "ours_null" and ours is not None:
            continue
        return True
    return False


FILES = capture_files()


@pytest.mark.parametrize("rel", FILES)
def test_matches_tshark(rel: str) -> None:
    corpus_or_skip()
    tshark_or_skip()
    path = CORPUS / rel
    if tshark_refuses(rel):
        with pytest.raises(CaptureError) as err:
            read_capture(path)
        assert path.name in str(err.value)
        return
    ours = read_capture(path)
    theirs = tshark_table(path)
    assert ours.height == theirs.height, f"{rel}: {ours.height} rows, tshark {theirs.height}"
    diffs = [d for d in diff_tables(ours, theirs, COMPARED) if not _explained(rel, *d)]
    shown = "\n".join(f"  frame {f} {c}: ours={a!r} tshark={b!r}" for f, c, a, b in diffs[:40])
    assert not diffs, f"{rel}: {len(diffs)} unexplained differences from tshark:\n{shown}"


@pytest.mark.parametrize("rel", FILES)
def test_fast_equals_reference(rel: str) -> None:
    corpus_or_skip()
    path = CORPUS / rel
    try:
        fast = read_capture(path, decoder="fast")
    except CaptureError:
        with pytest.raises(CaptureError):
            read_capture(path, decoder="reference")
        return
    ref = read_capture(path, decoder="reference")
    diffs = diff_tables(fast, ref, NAMES)
    shown = "\n".join(f"  frame {f} {c}: fast={a!r} reference={b!r}" for f, c, a, b in diffs[:40])
    assert not diffs, f"{rel}: {len(diffs)} cells differ between decoders:\n{shown}"
