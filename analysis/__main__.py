"""`python -m analysis`: the command line lives in quadrants/launch/analysis.py; `python -m analysis
power` (the power of a pilot sweep) in quadrants/launch/analysis_power.py."""

import sys

if __name__ == "__main__":
    if sys.argv[1:2] == ["power"]:
        from quadrants.launch.analysis_power import main as power_main

        sys.exit(power_main(sys.argv[2:]))
    from quadrants.launch.analysis import main

    sys.exit(main())
