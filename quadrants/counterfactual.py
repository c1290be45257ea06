"""`python -m quadrants.counterfactual`: the command line lives in launch/counterfactual.py."""

from quadrants.launch.counterfactual import main

if __name__ == "__main__":
    main()
