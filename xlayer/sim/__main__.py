"""`python -m xlayer.sim SCENARIO -o DIR [--seed N] [--seconds S]` (same as `xlayer sim`)."""
import sys

from ..sim_cli import main

sys.exit(main())
