"""Entry points and launch plumbing: Hydra set-up, sweep callbacks and manifest, SLURM
submission and status, the evaluate/probe command lines, and the job that turns a composed config
into a run."""
