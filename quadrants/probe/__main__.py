"""`python -m quadrants.probe TARGET [overrides...]`: measure hindsight credit by branching; the
command line lives in quadrants/launch/probe.py."""

from quadrants.launch.probe import main

if __name__ == "__main__":
    main()
