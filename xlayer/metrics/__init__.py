"""Per-layer metric tables computed from a timeline: the cross-layer join, flows, TCP events, stations, host state."""
