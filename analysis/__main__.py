"""`python -m analysis` (alias of `python -m quadrants.analysis`): the command line lives in
quadrants/launch/analysis.py, which hands `python -m analysis power` (the power of a pilot sweep)
to quadrants/launch/analysis_power.py."""

import sys

from quadrants.launch.analysis import main

if __name__ == "__main__":
    sys.exit(main())
