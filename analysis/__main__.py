"""`python -m analysis` (alias of `python -m quadrants.analysis`): the command line lives in
quadrants/launch/analysis_command.py (the report, and `power` for the power of a pilot sweep)."""

import sys

from quadrants.launch.analysis_command import main

if __name__ == "__main__":
    sys.exit(main())
