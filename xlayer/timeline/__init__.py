"""One timeline: a bundle's captures decoded once, put on one clock, with the packet tables the metrics read."""
from xlayer.timeline.open import Timeline, open_timeline

__all__ = ["Timeline", "open_timeline"]
