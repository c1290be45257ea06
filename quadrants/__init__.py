"""quadrants: token-level credit assignment in RLVR (the four-quadrant
ablation, HAPO, baselines).

Importing it sets nothing in the process (no environment variable, no torch setting): what a CPU
run tunes lives in quadrants/cpu and is applied only when a run's device is the CPU."""
