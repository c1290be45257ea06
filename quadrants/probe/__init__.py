"""The hindsight-credit probe: how much the outcome depends on each token,
measured by branching rollouts.

    python -m quadrants.probe outputs/quadrants/<sweep>/quadrant=PHR  # newest checkpoint of a run
    python -m quadrants.probe tiny probe.positions=16 probe.continuations=8

Estimators: quadrants.probe.credit. Layout: plan (positions, cost), branching (rollouts), estimates
(per position), report (metrics, credit.csv, figures), runner (MLflow run, training hook).
See docs/probe.md.
"""
