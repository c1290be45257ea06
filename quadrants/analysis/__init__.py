"""Finished runs -> paper-style tables and figures.

`python -m quadrants.analysis` (or `python -m analysis`) reads an MLflow store, selects a sweep (or
an experiment, a parent run, tags), and writes the comparison table (Markdown, CSV, LaTeX), the
figures (PNG, SVG), an HTML page of sample responses and a paired comparison, then logs all of it
on the sweep's parent run.

Modules: `load` (MLflow -> pandas), `stats` (mean and CI over seeds), `tables` (the comparison table
and its renderings), `paired` (method A - method B), `figures` (matplotlib), `samples_html`,
`report` (one call that does everything), `power` (variance components over seeds and the
minimal detectable paired difference) and `power_report` (a pilot sweep -> its power analysis:
`python -m analysis power`, whose command line is quadrants/launch/analysis_power.py). The
command line (`python -m quadrants.analysis`, or `python -m analysis`) lives in
quadrants/launch/analysis.py.
"""
