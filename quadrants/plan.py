"""`python -m quadrants.plan [overrides...]`: the memory plan of a sweep's runs, per GPU and per
phase; the command line lives in quadrants/launch/memory_plan.py."""

from quadrants.launch.memory_plan import main

if __name__ == "__main__":
    main()
