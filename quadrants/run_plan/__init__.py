"""The run plan: a composed configuration parsed and checked once (`RunPlan.parse`), what every
part of a run starts from (quadrants/run_plan/parse.py)."""

from quadrants.run_plan.parse import RunPlan

__all__ = ["RunPlan"]
