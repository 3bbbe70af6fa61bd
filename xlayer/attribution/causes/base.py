"""What every cause module gets: the analysis context (tables, windows, who is who) and small helpers."""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from xlayer.attribution.incidents import FrameRef
from xlayer.text import NS

if TYPE_CHECKING:
    from xlayer.attribution.drops import DropConfig
    from xlayer.timeline.open import Timeline

LEAD_NS = 500_000_000          # causes precede their effect: evidence is read from this long before a window


@dataclass
class Window:
    """A time window to explain: its flows and stations, and who proposed it (None: a goodput drop)."""

    start_ns: int
    end_ns: int
    flows: list[str] = field(default_factory=list)
    stations: list[str] = field(default_factory=list)
    kind: str = "drop"                  # drop | sustained | event
    proposer: str | None = None
    drop: dict[str, Any] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return (self.end_ns - self.start_ns) / NS


class Context:
    """A timeline seen by the causes: tables, window filters, flow <-> station, incident-free baselines."""

    def __init__(self, tl: Timeline, cfg: DropConfig) -> None:
        self.tl = tl
        self.cfg = cfg
        self._cache: dict[str, Any] = {}
        self.quiet: list[tuple[int, int]] = []     # drop windows: "outside" statistics leave them out

    def table(self, name: str) -> pl.DataFrame:
        """Return a metric table of the timeline, only its columns the analysis reads (read once, then kept)."""
        key = f"table:{name}"
        if key not in self._cache:
            if not hasattr(self.tl, "table_columns"):      # a stand-in holding its tables in memory
                df = self.tl.table(name)
                self._cache[key] = df.select(_kept(df.columns))
            else:
                self._cache[key] = self.tl.table(name, columns=_kept(self.tl.table_columns(name)))
        return self._cache[key]

    def steady_key(self, *parts: object) -> str:
        """Return a memo key for a statistic of the steady state: `parts` and the drop windows left out."""
        return "steady:" + repr((parts, tuple(self.quiet)))

    def memo(self, key: str, make: Callable[[], Any]) -> Any:
        """Return what `make()` returned the first time `key` was asked for in this analysis (kept
        across `release`: a cause's whole-bundle result, worked out once for its proposal and every window)."""
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def release(self) -> None:
        """Drop the tables read so far (each is read again when next asked for); what was computed from them stays.

        A spilled table is mapped, and every page of it a cause touched counts in the process's RSS for as
        long as the table is held: kept for the whole analysis, the pages each cause read add up (on a
        1 M-frame bundle, 530 MB of mapped pages by the end of the proposals).  Mapping it again costs
        its file's footer, and the pages come back from the page cache."""
        for key in [k for k in self._cache if k.startswith("table:")]:
            del self._cache[key]

    def _sorted(self, name: str, col: str) -> bool:
        """Return whether a table's `col` ascends with no null (its time windows are then slices)."""
        key = f"sorted:{name}:{col}"
        if key not in self._cache:
            s = self.table(name).get_column(col)
            # (an epoch time in ns: a window's bounds compare with it as they are)
            self._cache[key] = s.dtype == pl.Int64 and s.null_count() == 0 and s.is_sorted()
        return self._cache[key]

    def between(self, name: str, start_ns: int, end_ns: int, col: str = "ts_ns") -> pl.DataFrame:
        """Return the rows of a table whose `col` lies in [start_ns, end_ns)."""
        df = self.table(name)
        if df.height == 0:
            return df
        if self._sorted(name, col):
            # the same rows as the filter below, without copying them (called per window and per cause)
            s = df.get_column(col)
            lo = int(s.search_sorted(start_ns, side="left"))
            hi = max(int(s.search_sorted(end_ns, side="left")), lo)
            return df.slice(lo, hi - lo)
        return df.filter((pl.col(col) >= start_ns) & (pl.col(col) < end_ns))

    def outside(self, name: str, col: str = "ts_ns", columns: Sequence[str] | None = None,
                where: pl.Expr | None = None) -> pl.DataFrame:
        """Return the rows of a table outside every drop window (the steady state to compare with) that
        also meet `where` if given, only `columns` (in the table's order) if given."""
        df = self.table(name)
        keep = None if columns is None else [c for c in df.columns if c in set(columns)]
        if not self.quiet and where is None:
            return df if keep is None else df.select(keep)
        # one filter (one copy of the rows kept), not one per window nor one per condition
        quiet = pl.all_horizontal([(pl.col(col) < s) | (pl.col(col) >= e) for s, e in self.quiet]
                                  + ([] if where is None else [where]))
        if keep is None:
            return df.filter(quiet)
        # lazily: only the columns asked for are copied (of `attempts`, a few of the sixteen it keeps)
        return df.lazy().filter(quiet).select(keep).collect()

    @property
    def span(self) -> tuple[int, int]:
        """Return the first and last packet time of the bundle (reference clock)."""
        if "span" not in self._cache:
            caps = self.table("captures").filter(pl.col("packets") > 0)
            self._cache["span"] = (int(caps["first_ts_ns"].min() or 0), int(caps["last_ts_ns"].max() or 0))
        return self._cache["span"]

    @property
    def flow_station(self) -> dict[str, str]:
        """Return each flow's station (MAC) from the cross-layer join: the receiver downlink, the sender uplink."""
        if "flow_station" not in self._cache:
            m: dict[str, Counter] = {}
            for name in ("downlink", "uplink"):
                df = self.table(name)
                if df.height == 0:
                    continue
                for flow, st, n in df.filter(pl.col("flow").is_not_null() & pl.col("station").is_not_null()) \
                        .group_by("flow", "station").len().iter_rows():
                    m.setdefault(flow, Counter())[st] += n
            self._cache["flow_station"] = {f: c.most_common(1)[0][0] for f, c in m.items()}
        return self._cache["flow_station"]

    def stations_of(self, flows: list[str]) -> list[str]:
        """Return the stations the flows go to or come from (known through the join), in order."""
        out: list[str] = []
        for f in flows:
            st = self.flow_station.get(f)
            if st is not None and st not in out:
                out.append(st)
        return out

    def flows_of(self, stations: list[str]) -> list[str]:
        """Return the data flows of the stations."""
        return sorted(f for f, s in self.flow_station.items() if s in stations)

    @property
    def data_flows(self) -> list[str]:
        """Return the flows drop detection considers (data flows)."""
        from xlayer.attribution.drops import data_flows

        if "data_flows" not in self._cache:
            self._cache["data_flows"] = data_flows(self.table("flows"), self.cfg)["flow"].to_list()
        return self._cache["data_flows"]


# a quoted identifier: the form every column name takes in the source ("ts_ns", 'station')
_QUOTED_NAME = re.compile(r"""(["'])([A-Za-z_][A-Za-z0-9_]*)\1""")


@lru_cache(maxsize=1)
def read_names() -> frozenset[str]:
    """Return every quoted identifier in the attribution package's source: the names of the columns it can read.

    The analysis reads its tables by literal column names (``pl.col("ts_ns")``, ``df["station"]``); the
    Context keeps only the table columns named somewhere in this source (of a 1 M-frame bundle's attempts,
    downlink and uplink tables, about a third of the bytes are columns no cause reads).  The source is
    scanned as text, not parsed: a quoted name in a comment or a docstring keeps its column too, which
    costs memory, never a column read (parsing and walking every module took 0.2-0.3 s a run).
    """
    names: set[str] = set()
    for path in Path(__file__).resolve().parents[1].rglob("*.py"):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, ValueError):
            return frozenset()      # a source not readable as a whole: keep every column rather than guess
        names.update(m[1] for m in _QUOTED_NAME.findall(text))
    return frozenset(names)


def _kept(names: list[str]) -> list[str]:
    """Return the columns of a table the Context keeps: those the analysis names (`read_names`); a table
    none of whose columns are named keeps its first, which holds its height; without the source to
    read (an install of compiled files only) every column is kept."""
    if not read_names():
        return list(names)
    return [c for c in names if c in read_names()] or names[:1]


def clip01(x: float) -> float:
    """Return x limited to [0, 1]."""
    return 0.0 if x != x else max(0.0, min(1.0, float(x)))


def rose(w: Window, inside: float, outside: float | None, ramp: float, own: str | None = None) -> float:
    """Return how far a level rose in a window against outside the drops, as a factor in [0, 1]
    (`ramp`: the rise that counts fully); 1 for events, for the condition's own span (a sustained
    window proposed by the cause `own`, or by none), or with nothing outside.

    A drop is a fall from the steady state: a condition at the same level outside it was part of that
    state and does not explain the fall.  A span another cause proposed (a slow station's, a walk's)
    is a change of its own, and a whole-run condition that held as much before it explains it no more."""
    if not must_rise(w, own) or outside is None:
        return 1.0
    return clip01((inside - outside) / ramp)


def must_rise(w: Window, own: str | None = None) -> bool:
    """Return whether a condition found in `w` must have risen there to explain it (`rose`): not in
    an event, nor in a sustained span proposed by the condition `own` itself (or by none)."""
    return not (w.kind == "event" or (w.kind == "sustained" and w.proposer in (None, own)))


def frames(df: pl.DataFrame, what: str, n: int = 3, file_col: str = "capture_file",
           frame_col: str = "frame") -> list[FrameRef]:
    """Return up to n example frames of a table's rows (first ones in time) as FrameRef."""
    if df.height == 0 or file_col not in df.columns or frame_col not in df.columns:
        return []
    # a row without its capture cannot be found by a reader: never shown as "None #N"
    rows = df.filter(pl.col(frame_col).is_not_null() & pl.col(file_col).is_not_null()).head(n)
    return [FrameRef(str(f), int(fr), what) for f, fr in zip(rows[file_col].to_list(), rows[frame_col].to_list())]


def mbps(bps: float | None) -> str:
    """Return a bit rate as text in Mbit/s."""
    return "-" if bps is None else f"{bps / 1e6:.1f} Mbit/s"
