"""`python -m quadrants.analysis`: the command line lives in quadrants/launch/analysis.py."""

import sys

from quadrants.launch.analysis import main

if __name__ == "__main__":
    sys.exit(main())
