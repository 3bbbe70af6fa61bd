"""The simulated campaign the campaign tests share: 4 conditions x 10 seeds of short ns-3 runs, made once
per machine (cached beside `tests.helpers.common.sim_bundle`'s bundles, under a file lock)."""
from __future__ import annotations

import sys
from pathlib import Path

from tests.helpers.common import sim_bundle

CONDITIONS = (("steady", "g"), ("steady", "n"), ("rts_cts", "g"), ("rts_cts", "n"))
SEEDS = tuple(range(1, 11))
SECONDS = 2.0


def campaign_sim(scenario: str, standard: str, seed: int, seconds: float = SECONDS) -> Path:
    """Return the directory of one simulated bundle of the campaign (simulated once per machine)."""
    return sim_bundle(scenario, seed, seconds, standard=standard)


def campaign_sims() -> list[Path]:
    """Return every bundle of the simulated campaign (conditions x seeds)."""
    return [campaign_sim(sc, std, seed) for sc, std in CONDITIONS for seed in SEEDS]


if __name__ == "__main__":
    # make the cache ahead of a test run: python -m tests.campaign.sims [PART NPARTS]
    part, nparts = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) > 2 else (0, 1)
    todo = [(sc, std, seed) for sc, std in CONDITIONS for seed in SEEDS]
    for i, (sc, std, seed) in enumerate(todo):
        if i % nparts == part:
            print(campaign_sim(sc, std, seed), flush=True)
