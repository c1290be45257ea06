"""`python -m quadrants.status`: the command line lives in quadrants/launch/status.py."""

from quadrants.launch.status import main

if __name__ == "__main__":
    main()
