"""`python -m quadrants.tracking deliver RUN_DIR`: the command line lives in
quadrants/launch/tracking.py."""

from quadrants.launch.tracking import main

if __name__ == "__main__":
    main()
