"""quadrants: token-level credit assignment in RLVR (the four-quadrant
ablation, HAPO, baselines)."""

import os

# How long torch's idle OpenMP threads (GNU libgomp, the Linux wheels' runtime) busy-wait for the
# next parallel region before sleeping. libgomp's own default, 300,000 spins, is fastest alone
# but costs 2.3x per step when another job shares the cores; passive waiting (0 spins) costs
# 1.35x alone, because every small matrix multiply of the decode then wakes a sleeping thread.
# 1,000 spins is within ~8 % of the default alone and within ~20 % of passive when shared
# (docs/performance.md, "OpenMP waiting"). libgomp reads these variables when torch is first
# imported, hence here; an explicit OMP_WAIT_POLICY or GOMP_SPINCOUNT wins.
DEFAULT_GOMP_SPINCOUNT = "1000"
if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["GOMP_SPINCOUNT"] = DEFAULT_GOMP_SPINCOUNT
