"""`python -m xlayer` runs the command line."""
import sys

from xlayer.cli.main import main

sys.exit(main())
