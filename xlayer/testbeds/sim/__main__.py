"""`python -m xlayer.testbeds.sim SCENARIO -o DIR [--seed N] [--seconds S]` (same as `xlayer sim`)."""
import sys

from xlayer.cli.sim import main

sys.exit(main())
