"""`python -m quadrants.evaluate`: the command line lives in quadrants/launch/evaluate.py."""

from quadrants.launch.evaluate import main

if __name__ == "__main__":
    main()
