"""Domain-parallel benchmark, one run: one training sample split over ``k`` gloo processes.

``python benchmarks/domain_parallel.py [--size 128] [--steps 3]``. For a fixed 2D sample
``(T, X, Y) = (11, size, size)`` (width 16, 4 Fourier layers, 25 % padding, batch 1, activation
checkpointing, FSDP2 over the ranks) it measures, for ``k = 1, 2, 4`` domain ranks:

- each rank's peak tensor memory: peak resident memory (``ru_maxrss``) less the resident
  memory before the first step, beside the memory model's prediction
  (:func:`pdeladder.trainer.distributed.memory.peak_bytes`); target ``peak(k) ≤ 1.15 ·
  peak(1) / k`` plus the rank's share of parameters and optimizer state;
- the bytes each rank hands to the spectral layers' all-reduce per forward pass, against the
  formula ``8 · B · width · M`` per layer (a ring all-reduce moves ``2 (k-1)/k`` of it), at this
  size and at twice the size (it must not change);
- the step time, ``k = 2`` against ``k = 1`` on the same sample (target ≥ 1.6x on two cores),
  with FSDP2 over all ranks and with the parameters replicated over the domain ranks;
- in one process, disk offload against checkpointing alone (target ≤ 1.10x the step time).

It prints a table of ratios, writes ``domain_parallel.json`` and a PNG of memory per rank to
``--out`` (default ``runs/bench``).
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

WIDTH, LAYERS, MODES, T = 16, 4, (4, 8, 8, 1), 11


def config():
    from pdeladder.trainer.models.operator import OperatorConfig

    return OperatorConfig(4, 2, width=WIDTH, layers=LAYERS, modes=MODES, families=1)


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def rank_main(
    rank: int, world: int, init: str, out: str, size: int, steps: int, shard: str
) -> None:
    """One rank: ``steps`` training steps on its slab; writes its figures to ``out.rank``."""
    import torch.distributed as dist

    from pdeladder.trainer.distributed.parallelize import ParallelDims, parallelize
    from pdeladder.trainer.distributed.slab import DomainLayout
    from pdeladder.trainer.layers.fft import ModeSelection
    from pdeladder.trainer.models.operator import LadderOperator

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    cfg = config()
    dims = ParallelDims.of(world, DomainLayout(x=world, padding=cfg.padding), shard)
    domain = dims.build("cpu")[1] if world > 1 else None
    torch.manual_seed(0)
    model = LadderOperator(cfg)
    model.checkpointing = True
    model = parallelize(model, dims, domain, torch.device("cpu"))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    grid = (T, size, size, 1)
    slab = domain.slab(grid) if domain else None
    local = slab.local_shape if slab else grid
    x = torch.randn(1, cfg.in_channels, *local)
    family = torch.zeros(1, dtype=torch.long)
    before = rss_mb()
    times = []
    for _ in range(steps + 1):  # the first step warms up (lazy buffers, FFT plans); not timed
        dist.barrier()
        t0 = time.perf_counter()
        loss = model(x, family, slab).square().sum()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        dist.barrier()
        times.append(time.perf_counter() - t0)
    sent = 0
    if domain is not None:
        domain.sent.clear()
        with torch.no_grad():
            model(x, family, slab)
        sent = domain.sent["all_reduce"]
    pad = tuple(round(cfg.padding * n + 0.4999) if n > 1 else 0 for n in grid)
    kept = ModeSelection.of(tuple(n + p for n, p in zip(grid, pad, strict=True)), cfg.modes)
    m = 1
    for n in kept.block_shape:
        m *= n
    result = {
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before,
        "step_s": sorted(times[1:])[len(times[1:]) // 2],
        "forward_bytes": sent,
        "formula_bytes": 8 * 1 * WIDTH * m * LAYERS if world > 1 else 0,
    }
    Path(f"{out}.{rank}").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


def run_ranks(k: int, size: int, steps: int, folder: str, shard: str = "all") -> list[dict]:
    """``k`` rank processes on one sample, FSDP2 over ``shard`` ("all" ranks or "dp")."""
    init, out = f"file://{folder}/rdv-{k}-{size}-{shard}", f"{folder}/out-{k}-{size}-{shard}"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = [init, out, str(size), str(steps), shard]
    procs = [
        subprocess.Popen([sys.executable, __file__, "--rank", str(r), str(k), *args], env=env)
        for r in range(k)
    ]
    if any(p.wait() for p in procs):
        raise SystemExit(f"a rank of k={k} failed")
    return [json.loads(Path(f"{out}.{r}").read_text()) for r in range(k)]


def offload_ratio(size: int, steps: int) -> float:
    """Step time with disk offload over checkpointing alone, one process, interleaved."""
    from pdeladder.trainer.models.operator import LadderOperator

    torch.set_num_threads(1)
    x = torch.randn(1, 4, T, size, size, 1)
    family = torch.zeros(1, dtype=torch.long)
    best = {"none": float("inf"), "disk": float("inf")}
    for _ in range(steps):
        for mode in best:
            torch.manual_seed(0)
            model = LadderOperator(config())
            model.checkpointing, model.offload = True, mode
            t0 = time.perf_counter()
            model(x, family).square().sum().backward()
            best[mode] = min(best[mode], time.perf_counter() - t0)
    return best["disk"] / best["none"]


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = sorted(results["memory"], key=int)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for i, k in enumerate(ks):
        peaks = results["memory"][k]["measured_mb"]
        ax.bar([i * 5 + r for r in range(len(peaks))], peaks, color="C0")
        ax.hlines(results["memory"][k]["predicted_mb"], i * 5 - 0.4, i * 5 + len(peaks) - 0.6, "C1")
    ax.set_xticks([i * 5 + (int(k) - 1) / 2 for i, k in enumerate(ks)], [f"k = {k}" for k in ks])
    ax.set_ylabel("peak resident memory above start (MiB)")
    ax.set_title(f"one 2D sample {T}×{results['size']}²: bars, each rank; lines, memory model")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    if sys.argv[1:2] == ["--rank"]:
        r, k, init, out, size, steps, shard = sys.argv[2:9]
        rank_main(int(r), int(k), init, out, int(size), int(steps), shard)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("runs/bench"))
    args = parser.parse_args()
    from pdeladder.trainer.distributed.memory import peak_bytes
    from pdeladder.trainer.distributed.slab import DomainLayout

    args.out.mkdir(parents=True, exist_ok=True)
    results = {"size": args.size, "memory": {}}
    with tempfile.TemporaryDirectory() as folder:
        runs = {k: run_ranks(k, args.size, args.steps, folder) for k in (1, 2, 4)}
        double = run_ranks(2, 2 * args.size, 1, folder)
        replicated = run_ranks(2, args.size, args.steps, folder, shard="dp")
    base = max(r["peak_mb"] for r in runs[1])
    print(f"sample (T, X, Y) = ({T}, {args.size}, {args.size}), width {WIDTH}, {LAYERS} layers")
    print("k  peak/rank MiB (max)  vs peak(1)/k  model MiB  comm bytes vs formula  step s")
    for k, ranks in runs.items():
        layout = DomainLayout(x=k, padding=config().padding)
        grid = (T, args.size, args.size, 1)
        predicted = peak_bytes(config(), grid, 2, 1, layout, k, True) / 2**20
        peak = max(r["peak_mb"] for r in ranks)
        comm = ranks[0]["forward_bytes"] / max(ranks[0]["formula_bytes"], 1)
        results["memory"][str(k)] = {
            "measured_mb": [r["peak_mb"] for r in ranks],
            "predicted_mb": predicted,
            "ratio_to_ideal": peak / (base / k),
            "step_s": max(r["step_s"] for r in ranks),
            "comm_vs_formula": comm if k > 1 else None,
        }
        print(
            f"{k}  {peak:10.1f}           {peak / (base / k):5.2f}x       {predicted:8.1f}  "
            f"{comm if k > 1 else float('nan'):8.4f}x             "
            f"{results['memory'][str(k)]['step_s']:.3f}"
        )
    speedup = results["memory"]["1"]["step_s"] / results["memory"]["2"]["step_s"]
    speedup_hsdp = results["memory"]["1"]["step_s"] / max(r["step_s"] for r in replicated)
    grid_free = double[0]["forward_bytes"] / runs[2][0]["forward_bytes"]
    results |= {
        "speedup_k2": speedup,
        "speedup_k2_replicated_over_domain": speedup_hsdp,
        "comm_at_double_size": grid_free,
        "disk_offload_step_ratio": offload_ratio(args.size, args.steps),
    }
    print(f"step time k=1 / k=2: {speedup:.2f}x (target >= 1.6x), FSDP2 over all ranks")
    print(f"step time k=1 / k=2: {speedup_hsdp:.2f}x, parameters replicated over the domain ranks")
    print(f"all-reduce bytes at twice the grid / at this grid: {grid_free:.3f} (target 1)")
    print(
        f"disk offload / checkpointing step time: {results['disk_offload_step_ratio']:.2f}x (<= 1.10x)"
    )
    (args.out / "domain_parallel.json").write_text(json.dumps(results, indent=1))
    plot(results, args.out / "memory_per_rank.png")
    print(f"wrote {args.out / 'domain_parallel.json'} and memory_per_rank.png")


if __name__ == "__main__":
    main()
