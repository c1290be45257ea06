"""`python -m quadrants.export`: the command line lives in quadrants/launch/export.py."""

from quadrants.launch.export import main

if __name__ == "__main__":
    main()
