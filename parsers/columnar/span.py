"""The hand-off between layer decoders: which rows continue, where their next layer's bytes lie."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Span:
    """Rows of a chunk whose next layer starts at `start`.

    `end` is where the captured bytes of this layer stop (exclusive, absolute offset in the buffer);
    `claimed` is where the enclosing header says they stop (larger than `end` when the snap length cut
    the frame). `kind` names what the bytes are: an EtherType for network layers (0x0800, 0x86DD, ...),
    an IP protocol number for transport layers. `cut` is True where the record was cut by the snap
    length (caplen < wirelen): missing bytes there are expected, not malformed.
    """

    rows: np.ndarray
    start: np.ndarray
    end: np.ndarray
    claimed: np.ndarray
    kind: np.ndarray
    cut: np.ndarray

    def __len__(self) -> int:
        return len(self.rows)

    def take(self, mask: np.ndarray) -> "Span":
        """Return the sub-span where mask is True."""
        return Span(self.rows[mask], self.start[mask], self.end[mask], self.claimed[mask],
                    self.kind[mask], self.cut[mask])

    def moved(self, start: np.ndarray, kind: np.ndarray | None = None, end: np.ndarray | None = None,
              claimed: np.ndarray | None = None) -> "Span":
        """Return the same rows with a new start (and optionally kind/end/claimed)."""
        return Span(self.rows, start, self.end if end is None else end,
                    self.claimed if claimed is None else claimed,
                    self.kind if kind is None else kind, self.cut)


def handed_on(result: Span | list[Span] | None) -> list[Span]:
    """Return the non-empty spans of what a layer decoder hands on (None, one Span or several)."""
    if result is None:
        return []
    if isinstance(result, Span):
        return [result] if len(result) else []
    return [s for s in result if len(s)]


def concat(spans: list[Span]) -> Span:
    """Return one span holding the rows of several."""
    if not spans:
        z = np.zeros(0, np.int64)
        return Span(z, z, z, z, z, np.zeros(0, bool))
    return Span(*(np.concatenate([getattr(s, f) for s in spans])
                  for f in ("rows", "start", "end", "claimed", "kind", "cut")))


def in_row_order(span: Span) -> Span:
    """Return the span with its rows ascending (rows are unique within a span).

    Decoders that split rows into groups hand them on group by group; writing columns at ascending
    rows is much cheaper (runs become slices, long index arrays become masks), so order them back.
    """
    rows = span.rows
    if len(rows) < 2 or bool((rows[1:] > rows[:-1]).all()):
        return span
    slot = np.full(int(rows.max()) + 1, -1, np.int64)
    slot[rows] = np.arange(len(rows))
    order = slot[slot >= 0]
    if len(order) != len(rows):     # a row twice: leave the order alone rather than lose one
        return span
    return Span(rows[order], span.start[order], span.end[order], span.claimed[order], span.kind[order],
                span.cut[order])


# `kind` codes for link payloads that are not EtherTypes.
KIND_DOT11 = -1       # an 802.11 MAC frame
KIND_NONE = -2        # nothing decodable follows
