"""What container readers hand to decoders: chunks of record positions, and the counts they keep."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


class CaptureError(Exception):
    """The file is not a capture we can read (unknown format, refused header)."""


@dataclass
class Interface:
    """One capture interface (pcap: the file header; pcapng: an IDB)."""

    linktype: int
    snaplen: int
    name: str | None = None
    description: str | None = None
    tsresol_num: int = 1          # ts_ns = ticks * num // den  (exact rational)
    tsresol_den: int = 1000
    tsoffset_s: int = 0
    fcs_len: int | None = None    # pcap linktype FCS bits / pcapng if_fcslen
    section: int = 0


@dataclass
class RecordChunk:
    """A batch of records: every array has one entry per record; offsets index into `data`."""

    data: np.ndarray        # uint8 view of the bytes the offsets refer to (usually the whole mmap)
    offset: np.ndarray      # int64 absolute offset of the first packet byte
    caplen: np.ndarray      # int64 captured bytes present in the file
    wirelen: np.ndarray     # int64 original length
    ts_ns: np.ndarray       # int64 epoch ns
    linktype: np.ndarray    # int64 link type of the record's interface
    iface: np.ndarray       # int64 interface id
    frame: np.ndarray       # int64 1-based record number in the file
    comments: dict[int, str] = field(default_factory=dict)  # row -> packet comment (pcapng)
    has_ts: np.ndarray | None = None  # bool per record: False = no time stamp (pcapng SPB, ts_ns 0); None = all
    fcs_first: np.ndarray | None = None  # int64 per record: where an FCS check began (-1: none made)
    fcs_ok: np.ndarray | None = None     # bool per record: that check's verdict (frame to record end)
    # header bytes gathered ahead by the walk thread: name -> (position per record, (n, width) bytes)
    ahead: dict[str, tuple[np.ndarray, np.ndarray]] | None = None

    def __len__(self) -> int:
        return len(self.offset)


@dataclass
class ContainerStats:
    """Counts a container reader keeps while walking a file."""

    format: str = ""
    records: int = 0                 # packet records read (rows emitted)
    blocks: dict[str, int] = field(default_factory=dict)  # pcapng block type name -> count
    skipped_bytes: int = 0           # bytes not turned into rows (bad tail, unknown blocks' bodies excluded)
    truncated_tail: bool = False     # the file ends inside a record
    error: str | None = None         # why reading stopped early, if it did
    sections: int = 0
    comments: list[str] = field(default_factory=list)  # section/file comments
    warnings: list[str] = field(default_factory=list)


class RecordWalker:
    """What the pcap and pcapng readers share: how a walk that ends before the end of the file is counted."""

    size: int
    stats: ContainerStats

    def _stop(self, at: int, why: str) -> None:
        """Reading ends at offset `at` on an error: the rest of the file is skipped."""
        self.stats.error = why
        self.stats.skipped_bytes += self.size - int(at)

    def _cut(self, at: int) -> None:
        """The file ends inside the record at offset `at`."""
        self.stats.truncated_tail = True
        self.stats.skipped_bytes += self.size - int(at)
