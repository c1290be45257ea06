"""Peak extra memory of chunked vs direct full-vocabulary entropy at Qwen2.5's vocabulary.

`entropy_from_logits` (row chunks, default chunk size) against `entropy_from_logits_direct` (the
whole [N, V] tensor at once) at V = 151,936 and N = 4,096 tokens, float32 logits (2.5 GB).

How memory is measured: each case runs in a fresh subprocess that allocates and fills the logits,
reads its peak RSS (getrusage ru_maxrss), calls the function, and reads the peak RSS again. The
difference is the peak extra memory the call needed on top of its input. Buffers this large are
mmap-ed by the allocator and returned to the OS when freed, so RSS follows live tensors closely.

Cases:
- forward under torch.no_grad (the trainer's behaviour pass that fixes the quadrant partition), at
  N = --tokens; both results are also compared with a float64 entropy on every 16th row;
- forward + backward (an entropy term inside the loss) at N = --backward-tokens, smaller because the
  direct version keeps several [N, V] buffers plus logits.grad; gradients are compared on every
  64th row.

- the LM head fused with log-prob and entropy (ops/fused_head.py, what the trainer's update and
  behaviour pass use), forward + backward from hidden states [N, H] and a head [V, H] at
  N = --head-tokens (4,096) and H = --hidden (896, Qwen2.5-0.5B's width), against the same
  computation with the logits materialised: `logits` (h W^T, then the chunked reduction of
  ops/entropy.py: the path the trainer took before) and `direct` (h W^T, then the whole-tensor
  formula under autograd; skipped when MemAvailable is short). Every case allocates the head's
  gradient [V, H] (any trainer keeps one); its size is printed, and the ratio is given with it and
  without it. Gradients (hidden and head, every 64th row) are compared with `logits`.

Wall time includes page-faulting fresh memory, which is slow on some VMs: user and system CPU
seconds are printed beside it.

    python benchmarks/entropy_memory.py [--tokens 4096] [--vocab 151936] [--backward-tokens 512]
                                        [--head-tokens 4096] [--hidden 896]
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

SEED = 0
REFERENCE_ROW_STRIDE = 16
GRAD_ROW_STRIDE = 64
BLOCK_ROWS = 256
MB = 1024**2


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def cpu_seconds() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def mem_available_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def make_logits(tokens: int, vocab: int):
    """Seeded [N, V] float32 logits with a spread of entropies.

    A [256, V] standard-normal block is tiled down the rows and each row is scaled by its own
    factor in 0.5..8 (near-uniform to peaked rows). Filling in place keeps the peak at one [N, V]
    buffer, and tiling is several times faster than drawing N * V normals.
    """
    import torch

    gen = torch.Generator().manual_seed(SEED)
    block = torch.randn(BLOCK_ROWS, vocab, generator=gen)
    logits = torch.empty(tokens, vocab)
    for start in range(0, tokens, BLOCK_ROWS):
        rows = logits[start : start + BLOCK_ROWS]
        rows.copy_(block[: rows.shape[0]])
    logits.mul_(0.5 + 7.5 * torch.rand(tokens, 1, generator=gen))
    return logits


def float64_entropy(logits):
    """-sum p log p in float64, 128 rows at a time."""
    import torch

    parts = []
    for rows in logits.split(128):
        log_probs = torch.log_softmax(rows.double(), dim=-1)
        parts.append(-(log_probs.exp() * log_probs).sum(-1))
    return torch.cat(parts)


def child(fn_name: str, mode: str, tokens: int, vocab: int, out_path: str) -> None:
    """Run one case and print a JSON line; results go to out_path for the parent to compare."""
    import torch

    from quadrants.ops.entropy import entropy_from_logits, entropy_from_logits_direct

    torch.set_num_threads(2)
    fn = entropy_from_logits if fn_name == "chunked" else entropy_from_logits_direct
    logits = make_logits(tokens, vocab)
    weights = torch.randn(tokens, generator=torch.Generator().manual_seed(SEED + 1))
    if mode == "backward":
        logits.requires_grad_(True)

    baseline = peak_rss_bytes()
    user0, sys0 = cpu_seconds()
    start = time.perf_counter()
    if mode == "forward":
        with torch.no_grad():
            out = fn(logits)
    else:
        out = fn(logits)
        (out * weights).sum().backward()
    seconds = time.perf_counter() - start
    user1, sys1 = cpu_seconds()
    peak = peak_rss_bytes()

    saved = {"entropy": out.detach()}
    if mode == "backward":
        saved["grad_sample"] = logits.grad[::GRAD_ROW_STRIDE].clone()
    elif fn_name == "chunked":  # after the measurement: the float64 truth on a subset of rows
        saved["reference"] = float64_entropy(logits[::REFERENCE_ROW_STRIDE])
    torch.save(saved, out_path)
    stats = {
        "baseline_mb": baseline / MB,
        "extra_mb": (peak - baseline) / MB,
        "seconds": seconds,
        "user_s": user1 - user0,
        "sys_s": sys1 - sys0,
    }
    print(json.dumps(stats))


def head_child(fn_name: str, tokens: int, vocab: int, hidden_size: int, out_path: str) -> None:
    """Forward + backward of logp and entropy from hidden states through the
    head; prints a JSON line."""
    import torch

    from quadrants.ops.entropy import entropy_from_logits_direct, logprobs_and_entropy
    from quadrants.ops.fused_head import head_logprobs_and_entropy

    torch.set_num_threads(2)
    gen = torch.Generator().manual_seed(SEED)
    hidden = torch.randn(tokens, hidden_size, generator=gen).requires_grad_(True)
    weight = (
        torch.randn(vocab, hidden_size, generator=gen).mul_(0.05).requires_grad_(True)
    )  # no transient copy
    ids = torch.randint(0, vocab, (tokens,), generator=gen)
    g_logp, g_entropy = torch.randn(tokens, generator=gen), torch.randn(tokens, generator=gen)
    baseline = peak_rss_bytes()
    user0, sys0 = cpu_seconds()
    start = time.perf_counter()
    if fn_name == "fused":
        logp, entropy = head_logprobs_and_entropy(hidden, weight, ids)
    elif fn_name == "logits":
        logp, entropy = logprobs_and_entropy(hidden @ weight.T, ids)
    else:
        logits = hidden @ weight.T
        entropy = entropy_from_logits_direct(logits)
        logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, None]).squeeze(-1)
    (logp * g_logp + entropy * g_entropy).sum().backward()
    seconds = time.perf_counter() - start
    user1, sys1 = cpu_seconds()
    peak = peak_rss_bytes()
    torch.save(
        {
            "entropy": entropy.detach(),
            "grad_sample": hidden.grad[::GRAD_ROW_STRIDE].clone(),
            "weight_grad_sample": weight.grad[::GRAD_ROW_STRIDE].clone(),
        },
        out_path,
    )
    print(
        json.dumps(
            {
                "extra_mb": (peak - baseline) / MB,
                "seconds": seconds,
                "user_s": user1 - user0,
                "sys_s": sys1 - sys0,
            }
        )
    )


def head_report(tokens: int, vocab: int, hidden_size: int, workdir: str) -> None:
    import torch

    logits_mb = tokens * vocab * 4 / MB
    grad_mb = vocab * hidden_size * 4 / MB
    print(
        f"== fused LM head, forward + backward: N = {tokens:,}, H = {hidden_size}, logits "
        f"{logits_mb:,.0f} MB, head gradient {grad_mb:,.0f} MB"
    )
    results = {}
    for name, buffers in (("fused", 0.5), ("logits", 2.5), ("direct", 7)):
        if not enough_memory(tokens * vocab * 4, buffers):
            print(
                f"   {name:8s} skipped: MemAvailable "
                f"{mem_available_bytes() / MB:,.0f} MB is too small"
            )
            continue
        out_path = os.path.join(workdir, f"head_{name}.pt")
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            "--head-child",
            name,
            str(tokens),
            str(vocab),
            str(hidden_size),
            out_path,
        ]
        env = dict(os.environ)
        env["PYTHONPATH"] = (
            os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
            + os.pathsep
            + env.get("PYTHONPATH", "")
        )
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            raise RuntimeError(
                f"head {name} failed (exit {done.returncode}):\n{done.stderr[-2000:]}"
            )
        results[name] = {**json.loads(done.stdout.strip().splitlines()[-1]), "path": out_path}
        res = results[name]
        print(
            f"   {name:8s} peak extra {res['extra_mb']:8,.0f} MB   wall {res['seconds']:6.2f} s"
            f"  (cpu user {res['user_s']:5.1f} s, sys {res['sys_s']:5.1f} s)"
        )
    fused = results["fused"]
    for other in ("logits", "direct"):
        if other in results:
            ratio = fused["extra_mb"] / results[other]["extra_mb"]
            without = (fused["extra_mb"] - grad_mb) / (results[other]["extra_mb"] - grad_mb)
            verdict = "meets" if ratio <= 1 / 8 else "misses"
            print(
                f"   fused/{other}: {ratio:.3f} (goal <= 0.125: {verdict} it); without the head "
                f"gradient both have: {without:.3f}"
            )
    if "logits" in results:
        a, b = torch.load(fused["path"]), torch.load(results["logits"]["path"])
        for key in ("entropy", "grad_sample", "weight_grad_sample"):
            diff = (a[key] - b[key]).abs().max().item()
            print(
                f"   max |fused - logits| {key} {diff:.3e} (max |value| "
                f"{b[key].abs().max().item():.3e})"
            )
    print()


def run_case(fn_name: str, mode: str, tokens: int, vocab: int, workdir: str) -> dict:
    out_path = os.path.join(workdir, f"{fn_name}_{mode}.pt")
    cmd = [sys.executable, os.path.abspath(__file__), "--child"]
    cmd += [fn_name, mode, str(tokens), str(vocab), out_path]
    env = dict(os.environ)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = repo + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"{fn_name} {mode} failed (exit {done.returncode}):\n{done.stderr[-2000:]}"
        )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["path"] = out_path
    return result


def enough_memory(logits_bytes: int, buffers: float) -> bool:
    """MemAvailable covers the input plus `buffers` temporaries of its size, with 10 % slack."""
    return mem_available_bytes() > 1.1 * logits_bytes * (1 + buffers)


def report(label: str, mode: str, tokens: int, vocab: int, workdir: str) -> None:
    import torch

    logits_mb = tokens * vocab * 4 / MB
    print(f"== {label}: N = {tokens:,} tokens, logits {logits_mb:,.0f} MB float32")
    # the direct forward holds ~3 [N, V] temporaries, forward + backward ~5 plus logits.grad
    if not enough_memory(tokens * vocab * 4, 4 if mode == "forward" else 8):
        print(f"   skipped: MemAvailable {mem_available_bytes() / MB:,.0f} MB is too small\n")
        return
    chunked = run_case("chunked", mode, tokens, vocab, workdir)
    direct = run_case("direct", mode, tokens, vocab, workdir)
    for name, res in (("chunked", chunked), ("direct", direct)):
        print(
            f"   {name:8s} peak extra {res['extra_mb']:8,.0f} MB   wall {res['seconds']:6.2f} s"
            f"  (cpu user {res['user_s']:5.1f} s, sys {res['sys_s']:5.1f} s)"
        )
    ratio = chunked["extra_mb"] / direct["extra_mb"]
    verdict = "meets" if ratio <= 1 / 8 else "misses"
    print(
        f"   memory ratio chunked/direct {ratio:.3f} (goal <= 0.125: {verdict} it); "
        f"wall-time ratio {chunked['seconds'] / direct['seconds']:.2f}"
    )
    if mode == "backward":
        without = [res["extra_mb"] - logits_mb for res in (chunked, direct)]
        print(
            f"   both include logits.grad ({logits_mb:,.0f} MB); without it: "
            f"chunked {without[0]:,.0f} MB, direct {without[1]:,.0f} MB"
        )
    a, b = torch.load(chunked["path"]), torch.load(direct["path"])
    diff = (a["entropy"] - b["entropy"]).abs().max().item()
    low, high = b["entropy"].min().item(), b["entropy"].max().item()
    print(f"   max |chunked - direct| entropy {diff:.3e} nats (entropies {low:.3f} .. {high:.3f})")
    if mode == "forward":
        truth = a["reference"]
        for name, res in (("chunked", a), ("direct", b)):
            err = (res["entropy"][::REFERENCE_ROW_STRIDE].double() - truth).abs().max().item()
            print(f"   max |{name} - float64| on every {REFERENCE_ROW_STRIDE}th row {err:.3e} nats")
    else:
        grad_diff = (a["grad_sample"] - b["grad_sample"]).abs().max().item()
        grad_max = b["grad_sample"].abs().max().item()
        print(
            f"   max |chunked - direct| gradient on every {GRAD_ROW_STRIDE}th row {grad_diff:.3e}"
            f" (max |grad| {grad_max:.3e})"
        )
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tokens", type=int, default=4096, help="rows N for the no-grad forward; 0 skips"
    )
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument(
        "--backward-tokens", type=int, default=512, help="rows N for forward + backward; 0 skips"
    )
    parser.add_argument(
        "--head-tokens", type=int, default=4096, help="rows N for the fused head; 0 skips"
    )
    parser.add_argument("--hidden", type=int, default=896, help="hidden size H for the fused head")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--head-child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.head_child:
        name, tokens, vocab, hidden, out_path = args.head_child
        head_child(name, int(tokens), int(vocab), int(hidden), out_path)
        return
    if args.child:
        fn_name, mode, tokens, vocab, out_path = args.child
        child(fn_name, mode, int(tokens), int(vocab), out_path)
        return

    import torch

    from quadrants.ops.entropy import DEFAULT_CHUNK_SIZE

    chunk_mb = DEFAULT_CHUNK_SIZE * args.vocab * 4 / MB
    available_gib = mem_available_bytes() / 2**30
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"entropy memory: V = {args.vocab:,}, chunk_size = {DEFAULT_CHUNK_SIZE}", end=" ")
    print(f"({chunk_mb:.0f} MB per [chunk, V] float32 buffer)")
    print(f"torch {torch.__version__}, 2 threads, MemAvailable {available_gib:.1f} GiB")
    print(f"load average {load} (wall times are noisy on a shared machine)")
    print("peak extra = peak RSS during the call - peak RSS once the logits exist")
    print("(each case in a fresh process)\n")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir:
        if args.tokens > 0:
            report("forward under no_grad", "forward", args.tokens, args.vocab, workdir)
        if args.backward_tokens > 0:
            report("forward + backward", "backward", args.backward_tokens, args.vocab, workdir)
        if args.head_tokens > 0:
            head_report(args.head_tokens, args.vocab, args.hidden, workdir)
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
