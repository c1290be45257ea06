"""`torchrun ... -m quadrants.distributed_main [overrides]` and `srun python -m ...`: one
run over several ranks; the entry point lives in quadrants/launch/distributed_main.py."""

from quadrants.launch.distributed_main import main

if __name__ == "__main__":
    main()
