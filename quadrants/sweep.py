"""`python -m quadrants.sweep [-m] [overrides...]`: one run, or a Hydra multirun; the command line
lives in quadrants/launch/sweep.py."""

from quadrants.launch.sweep import main

if __name__ == "__main__":
    main()
