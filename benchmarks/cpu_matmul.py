"""float32 CPU linear maps: torch's default (MKL) against oneDNN (cpu/matmul.py), interleaved.

For each shape, the forward x·Wᵀ and the two gradients g·W and gᵀx, timed alternately with
`train.cpu.matmul=torch` and `onednn` in the same process, round after round; each figure is the
median over rounds, with oneDNN's ratio to torch. The shapes are the multiplies of the two workloads
of benchmarks/vs_trl.py: the tiny Qwen2 (hidden 256, MLP 688, q-k-v 512) in the decode (64 rows)
and the update (1,984 response positions), and SmolLM2-135M (hidden 576, MLP 1536, vocabulary
49,152) in the decode (16 rows) and the update (256 positions).

    python benchmarks/cpu_matmul.py [--rounds 20] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import torch

from quadrants.cpu.matmul import cpu_vendor, linear, linear_grads, set_cpu_matmul

SHAPES = {  # name: (rows, in features, out features)
    "tiny decode gate-up": (64, 256, 1376),
    "tiny decode down": (64, 688, 256),
    "tiny decode q-k-v": (64, 256, 512),
    "tiny update gate-up": (1984, 256, 1376),
    "tiny update down": (1984, 688, 256),
    "tiny update o": (1984, 256, 256),
    "smollm2 decode gate-up": (16, 576, 3072),
    "smollm2 decode head": (16, 576, 49152),
    "smollm2 update gate-up": (256, 576, 3072),
    "smollm2 update down": (256, 1536, 576),
    "smollm2 update head": (256, 576, 49152),
}


def timed(fn, repeats: int) -> float:
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"{cpu_vendor() or 'unknown vendor'} {platform.machine()}, "
        f"{torch.backends.cpu.get_cpu_capability()}, torch {torch.__version__}, {args.threads} "
        f"threads, {args.rounds} rounds; load average {load}"
    )
    print(f"{'':24s} {'pass':>8s} {'torch ms':>9s} {'onednn ms':>10s} {'ratio':>6s}")
    generator = torch.Generator().manual_seed(0)
    for name, (rows, fan_in, fan_out) in SHAPES.items():
        x = torch.randn(rows, fan_in, generator=generator)
        weight = torch.randn(fan_out, fan_in, generator=generator) / fan_in**0.5
        grad = torch.randn(rows, fan_out, generator=generator)
        passes = {
            "forward": lambda x=x, weight=weight: linear(x, weight),
            "g·W": lambda x=x, weight=weight, grad=grad: linear_grads(
                grad, x, weight, weight_grad=False
            ),
            "gᵀx": lambda x=x, weight=weight, grad=grad: linear_grads(
                grad, x, weight, input_grad=False
            ),
        }
        # about 20 ms of work per timing, at least one call
        flops = 2 * rows * fan_in * fan_out
        repeats = max(1, int(20e-3 * 150e9 / flops))
        for label, fn in passes.items():
            times: dict[str, list[float]] = {"torch": [], "onednn": []}
            for backend in times:  # warm-up (oneDNN builds its primitive on first use)
                set_cpu_matmul(backend)
                fn()
            for r in range(args.rounds):
                for backend in ("torch", "onednn") if r % 2 == 0 else ("onednn", "torch"):
                    set_cpu_matmul(backend)
                    times[backend].append(timed(fn, repeats))
            ours, base = statistics.median(times["onednn"]), statistics.median(times["torch"])
            print(
                f"{name:24s} {label:>8s} {base * 1e3:9.3f} {ours * 1e3:10.3f} {ours / base:6.2f}",
                flush=True,
            )
    print(f"load average at the end {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
