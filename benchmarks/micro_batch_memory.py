"""Peak memory of one mini-batch's forward + backward against `train.micro_batch_size`.

One mini-batch of --rows sequences x (--prompt + --length) tokens through a randomly initialised
Qwen2 (hidden --hidden, 4 layers, quadrants' character vocabulary), DAPO loss, gradients accumulated
over micro-batches of each size given (0 = the whole mini-batch in one piece), each in a fresh
process. Peak extra memory = peak RSS during `backward_minibatch` minus peak RSS before it (model,
batch and old log-probs already built). The gradients of every micro-batch size are compared with
the unsplit one.

    python benchmarks/micro_batch_memory.py [--rows 64] [--length 448] [--micro 0 16 4]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

MB = 1024**2


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child(micro: int, rows: int, prompt: int, length: int, hidden: int, out_path: str) -> None:
    import torch
    from common import update_context  # benchmarks/ is the script's directory

    from quadrants.models.policy import behaviour_pass
    from quadrants.models.tiny import random_tiny_policy
    from quadrants.objectives.batch import make_token_batch
    from quadrants.train.update import backward_minibatch

    torch.set_num_threads(2)
    model, _ = random_tiny_policy(
        0, hidden_size=hidden, intermediate_size=hidden * 4, max_position_embeddings=4096
    )
    gen = torch.Generator().manual_seed(0)
    sequences = torch.randint(3, 60, (rows, prompt + length), generator=gen)
    response_mask = torch.ones(rows, length, dtype=torch.bool)
    attention = torch.ones(rows, prompt + length, dtype=torch.bool)
    logp, entropy = behaviour_pass(
        model, sequences, attention, length, temperature=1.0, chunk_size=256, batch_size=4
    )
    batch = make_token_batch(
        sequences=sequences,
        attention_mask=attention,
        response_mask=response_mask,
        old_logp=logp,
        entropy=entropy,
        rewards=(torch.arange(rows) % 2).float(),
        group_ids=torch.arange(rows) // 8,
    )
    ctx = update_context(model, "dapo", micro=micro)
    model.train()
    baseline = peak_rss_bytes()
    start = time.perf_counter()
    backward_minibatch(ctx.model, ctx.objective, ctx.forwards, ctx.update, batch, None)
    seconds = time.perf_counter() - start
    peak = peak_rss_bytes()
    torch.save({n: p.grad for n, p in model.named_parameters()}, out_path)
    print(json.dumps({"extra_mb": (peak - baseline) / MB, "seconds": seconds}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--length", type=int, default=448)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--micro", type=int, nargs="+", default=[0, 16, 4])
    parser.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*(int(x) for x in args.child[:5]), args.child[5])
        return
    import torch

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"mini-batch {args.rows} x ({args.prompt} + {args.length}) tokens, hidden "
        f"{args.hidden}, 2 threads; load {load}"
    )
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for micro in args.micro:
            out = os.path.join(tmp, f"grad_{micro}.pt")
            cmd = [
                sys.executable,
                os.path.abspath(__file__),
                "--child",
                str(micro),
                str(args.rows),
                str(args.prompt),
                str(args.length),
                str(args.hidden),
                out,
            ]
            done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
            if done.returncode != 0:
                raise RuntimeError(done.stderr[-3000:])
            results[micro] = json.loads(done.stdout.strip().splitlines()[-1])
            label = "whole mini-batch" if micro == 0 else f"micro-batches of {micro}"
            print(
                f"  {label:22s} peak extra {results[micro]['extra_mb']:8,.0f} MB   wall "
                f"{results[micro]['seconds']:6.1f} s",
                flush=True,
            )
        reference = torch.load(os.path.join(tmp, f"grad_{args.micro[0]}.pt"))
        for micro in args.micro[1:]:
            grads = torch.load(os.path.join(tmp, f"grad_{micro}.pt"))
            worst = max(
                ((grads[n] - g).abs().max() / g.abs().max().clamp_min(1e-12)).item()
                for n, g in reference.items()
            )
            print(f"  micro {micro}: max |grad - unsplit| / max |grad| per tensor {worst:.2e}")


if __name__ == "__main__":
    main()
