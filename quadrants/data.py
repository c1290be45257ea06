"""`python -m quadrants.data`: the command line lives in quadrants/launch/data.py."""

from quadrants.launch.data import main

if __name__ == "__main__":
    main()
