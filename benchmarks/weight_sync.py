"""Weight sync from an FSDP2-sharded policy into each rank's full rollout copy: gathering the whole
state dict first (`get_model_state_dict(full_state_dict=True)` + `load_state_dict`, what quadrants
did before) against streaming one gathered tensor at a time
(`quadrants.rollout.weights.copy_weights`, what the HF replica and the vLLM engine do now).

Two gloo ranks (torchrun, started by this script) each hold a random Qwen2 model (default 175 M
parameters, 0.65 GiB in fp32) sharded by FSDP2 plus a full replica. For each method it prints the
median sync time over `--repeats` syncs and the peak extra resident memory of rank 0 during a sync
(RSS sampled every millisecond, above the RSS just before it), and the ratio streaming / gathered,
both measured in the same run. On a GPU the same peak is device memory; not run here.

    python benchmarks/weight_sync.py [--hidden 1024] [--layers 8] [--vocab 32000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import threading
import time


class PeakRSS:
    """The highest resident set size of this process while inside the `with`
    block, above its start."""

    def __init__(self) -> None:
        import psutil

        self._process = psutil.Process()
        self.extra = 0

    def __enter__(self) -> PeakRSS:
        self._start = self._process.memory_info().rss
        self._peak = self._start
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._done.is_set():
            self._peak = max(self._peak, self._process.memory_info().rss)
            time.sleep(0.001)

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self._peak = max(self._peak, self._process.memory_info().rss)
        self.extra = self._peak - self._start


def rank_main(args: argparse.Namespace) -> None:
    import gc

    import torch
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from quadrants.distributed.collectives import DistEnv, shard_model
    from quadrants.rollout.weights import copy_weights

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    env = DistEnv(dist.get_rank(), dist.get_world_size(), 0, sharded=True)
    config = Qwen2Config(
        hidden_size=args.hidden,
        intermediate_size=args.hidden * 3,
        num_hidden_layers=args.layers,
        num_attention_heads=8,
        num_key_value_heads=8,
        vocab_size=args.vocab,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    replica = copy.deepcopy(model)
    model = shard_model(model, env)
    params = sum(p.numel() for p in replica.parameters())

    def gathered() -> None:
        replica.load_state_dict(
            get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
        )

    def streamed() -> None:
        copy_weights(replica, model)

    results = {}
    for name, sync in (("gathered", gathered), ("streamed", streamed)):
        times, peaks = [], []
        for _ in range(args.repeats):
            gc.collect()
            dist.barrier()
            with PeakRSS() as peak:
                started = time.perf_counter()
                sync()
                times.append(time.perf_counter() - started)
            peaks.append(peak.extra)
        results[name] = {"seconds": statistics.median(times), "peak_extra_bytes": max(peaks)}
    # both methods leave the replica equal to the sharded policy
    for name, value in get_model_state_dict(
        model, options=StateDictOptions(full_state_dict=True)
    ).items():
        assert torch.equal(replica.state_dict()[name], value), name
    if env.rank == 0:
        print(json.dumps({"params": params, **results}))
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank:
        rank_main(args)
        return
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        __file__,
        "--rank",
        "--hidden",
        str(args.hidden),
        "--layers",
        str(args.layers),
        "--vocab",
        str(args.vocab),
        "--repeats",
        str(args.repeats),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode != 0:
        sys.exit(f"the 2-rank run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    gib = 2**30
    print(
        f"2 gloo ranks, FSDP2-sharded Qwen2 of {result['params'] / 1e6:.0f} M parameters "
        f"({result['params'] * 4 / gib:.2f} GiB fp32), sync into each rank's full copy; rank 0:"
    )
    print(f"{'method':<10} {'sync s':>8} {'peak extra GiB':>15}")
    for name in ("gathered", "streamed"):
        r = result[name]
        print(f"{name:<10} {r['seconds']:>8.3f} {r['peak_extra_bytes'] / gib:>15.3f}")
    g, s = result["gathered"], result["streamed"]
    print(
        f"streamed / gathered: time {s['seconds'] / g['seconds']:.2f}x, "
        f"peak extra memory {s['peak_extra_bytes'] / max(g['peak_extra_bytes'], 1):.2f}x"
    )


if __name__ == "__main__":
    main()
