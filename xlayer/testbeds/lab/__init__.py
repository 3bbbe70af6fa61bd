"""The lab: real TCP/UDP through network namespaces with an emulated AP queue, captured as a bundle
with the kernel's own counters as ground truth (`truth.json`).  See docs/pages/guides/lab.md."""
from __future__ import annotations

from xlayer.testbeds.lab.run import LabInterrupted, list_scenarios, run_scenario
from xlayer.testbeds.lab.scenarios import SCENARIOS, Scenario
from xlayer.testbeds.lab.topology import LabError, Topology, check_lab_possible

__all__ = ["SCENARIOS", "LabError", "LabInterrupted", "Scenario", "Topology", "check_lab_possible",
           "list_scenarios", "run_scenario"]
