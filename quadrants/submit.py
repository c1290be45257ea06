"""`python -m quadrants.submit`: the command line lives in quadrants/launch/submit.py."""

from quadrants.launch.submit import main

if __name__ == "__main__":
    main()
