"""What `xlayer analyze` finds: incidents (windows where throughput dropped) and the causes scored for each.

An `Incident` is a time window on the reference clock where one or more flows fell well below their
own baseline (or ran far below what the link could carry for the whole run), with every cause that
found evidence in that window, ranked by confidence.  Each `CauseFinding` keeps the numbers behind
its score, a one-sentence summary, the stations and flows it concerns, and example frames (capture
file and frame number) a person can open in Wireshark.  `Analysis.as_json()` is the `--json` output.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from xlayer.text import NS


def seconds(ns: int | None) -> float | None:
    """Return epoch ns as epoch seconds (the presentation edge), None stays None."""
    return None if ns is None else ns / NS


@dataclass
class FrameRef:
    """One example packet: where to find it, and why it is cited."""

    capture_file: str
    frame: int
    what: str

    def as_json(self) -> dict[str, Any]:
        return {"capture_file": self.capture_file, "frame": int(self.frame), "what": self.what}


@dataclass
class CauseFinding:
    """One cause's verdict on one window: confidence 0..1, a sentence, the numbers, who, example frames."""

    cause: str
    confidence: float
    summary: str
    numbers: dict[str, Any] = field(default_factory=dict)
    stations: list[str] = field(default_factory=list)
    flows: list[str] = field(default_factory=list)
    frames: list[FrameRef] = field(default_factory=list)
    explained_by: str | None = None     # the cause whose measured effect produced this one (causality)
    because: str = ""                   # the measurement that says so, one sentence

    def as_json(self) -> dict[str, Any]:
        return {"cause": self.cause, "confidence": round(float(self.confidence), 3), "summary": self.summary,
                "numbers": self.numbers, "stations": self.stations, "flows": self.flows,
                "frames": [f.as_json() for f in self.frames]}


@dataclass
class Incident:
    """A window where throughput dropped, and the causes found for it, best first."""

    start_ns: int
    end_ns: int
    kind: str                                   # "drop" (below its own baseline) or "sustained" (whole run)
    flows: list[str]
    stations: list[str] = field(default_factory=list)
    drop: dict[str, Any] = field(default_factory=dict)      # per flow: baseline and in-window goodput
    findings: list[CauseFinding] = field(default_factory=list)

    @property
    def cause(self) -> str | None:
        """Return the best-ranked cause, or None when nothing explains the window."""
        return self.findings[0].cause if self.findings else None

    @property
    def confidence(self) -> float:
        return self.findings[0].confidence if self.findings else 0.0

    def as_json(self) -> dict[str, Any]:
        frames = [f.as_json() for c in self.findings for f in c.frames]
        roots = [c.cause for c in self.findings if c.explained_by is None]
        return {"start": seconds(self.start_ns), "end": seconds(self.end_ns), "kind": self.kind,
                "cause": self.cause, "confidence": round(self.confidence, 3),
                "root": roots[0] if roots else None,
                "consequences": [{"cause": c.cause, "explained_by": c.explained_by, "because": c.because}
                                 for c in self.findings if c.explained_by is not None],
                "causes": [{"cause": c.cause, "confidence": round(float(c.confidence), 3)} for c in self.findings],
                "flows": self.flows, "stations": self.stations, "drop": self.drop,
                "evidence": {c.cause: {"summary": c.summary, "numbers": c.numbers, "stations": c.stations,
                                       "flows": c.flows} for c in self.findings},
                "frames": frames}


@dataclass
class Analysis:
    """Incidents ranked, per-flow summary and the alignment they are on."""

    incidents: list[Incident]
    flows: list[dict[str, Any]]
    alignment: dict[str, Any]
    tags: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # flows drop detection left out, with the numbers that decided it (`drops.left_out`)
    flows_left_out: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """Return {"incidents": [...], "flows": [...], "flows_left_out": [...], "alignment": {...}, ...}
        (times: reference epoch seconds)."""
        return {"incidents": [i.as_json() for i in self.incidents], "flows": self.flows,
                "flows_left_out": self.flows_left_out,
                "alignment": self.alignment, "tags": self.tags, "notes": self.notes}
