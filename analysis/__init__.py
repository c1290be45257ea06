"""`python -m analysis`: an alias of `python -m quadrants.analysis`, kept for the documented
command.

The analysis itself (MLflow runs -> tables, figures, reports) is the package `quadrants.analysis`;
its command line lives in quadrants/launch/analysis.py."""
