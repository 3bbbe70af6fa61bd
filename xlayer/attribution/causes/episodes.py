"""The episode of a cause around a drop: runs of elevated steps, bridged across short quiet gaps.

A cause that measures its own episode (``episode`` in its module) marks each step of a series around
the drop 1 (elevated), -1 (not) or 0 (too little seen to say); the episode is the run of elevated
steps that touches the drop, with quiet runs no longer than the drops' own merge gap bridged, as drop
windows are merged.
"""
from __future__ import annotations

from xlayer.text import NS

STEP_NS = NS // 10        # steps of an episode's series
MAX_NS = 2 * NS           # an episode is looked for this far either side of the drop


def span(state: list[int], lo: int, start_ns: int, end_ns: int, merge_gap_s: float,
         step_ns: int = STEP_NS) -> tuple[int, int] | None:
    """Return (start_ns, end_ns) of the elevated run around [start_ns, end_ns) in steps from `lo`,
    or None when no step inside the window is elevated."""
    gap = max(1, round(merge_gap_s * NS / step_ns))
    first = (start_ns - lo) // step_ns
    last = (end_ns - 1 - lo) // step_ns
    inside = [k for k in range(max(first, 0), min(last, len(state) - 1) + 1) if state[k] == 1]
    if not inside:
        return None
    a, b = _grow(state, inside[0], -1, gap), _grow(state, inside[-1], +1, gap)
    return lo + a * step_ns, lo + (b + 1) * step_ns


def _grow(state: list[int], k: int, d: int, gap: int) -> int:
    """Return the last elevated step reached from step k going in direction d, across runs of at most
    `gap` steps that are not elevated."""
    quiet = 0
    j = k
    while 0 <= j + d < len(state) and quiet <= gap:
        j += d
        if state[j] == 1:
            k, quiet = j, 0
        else:
            quiet += 1
    return k
