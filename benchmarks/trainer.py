"""Trainer benchmark, one run: training-step throughput of our operator against
``neuraloperator``'s FNO, like for like, and peak memory with and without activation
checkpointing.  ``pip install .[bench]``; ``python benchmarks/trainer.py [--device cuda]``.
``--workers 2`` also times a data-parallel step on 2 gloo processes, the parameters replicated
(DDP) and sharded (FSDP2), against one process with the same per-rank batch (a quick-start
refine batch, one thread per process), as wall time and as CPU time per rank (the latter holds
on a shared machine, where the ranks wait for each other's cores).

Like for like: batch 4, 2D trajectories ``(t, x, y) = (11, 64, 64)`` (one 3D ``(t, x, y)``
transform in both), width 32, 4 Fourier layers, 25 % zero padding of every axis, GELU, a
pointwise linear skip and no channel MLP in each block, lifting and projection MLPs with twice
the width, and the **same kept frequencies**: ours keeps ``|k| < m`` per axis (``2m - 1`` signed
frequencies on ``t`` and ``x``, ``m`` non-negative ones on the half axis ``y``); the FNO's
``n_modes`` counts kept frequencies per axis and keeps ``n // 2 + 1`` on its last (half) axis,
so ``n_modes = (2m - 1, 2m - 1, 2m - 2)`` selects the same set. Inputs: 4 data channels each; we
append the 4 coordinates ``(t, x, y, z)``, the FNO its 3 grid coordinates. The ratio printed is
FNO step time / our step time (> 1: we are faster), the median of ``--repeats`` interleaved runs.
"""

import argparse
import time

import torch

from pdeladder.curriculum.settings import LearningRate
from pdeladder.trainer.layers.spectral import ModeSelection
from pdeladder.trainer.models import LadderOperator, OperatorConfig


def step_time(model, make_inputs, target, steps: int, make_opt=None) -> float:
    opt = (make_opt or (lambda p: torch.optim.AdamW(p, LearningRate().initial)))(model.parameters())
    for i in range(steps + 2):
        if i == 2:
            t0 = time.perf_counter()
            if target.is_cuda:
                torch.cuda.synchronize()
        loss = (model(*make_inputs()) - target).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    if target.is_cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / steps


def peak_memory(model, inputs, device) -> int:
    """Peak bytes of one forward + backward: the CUDA allocator's peak on GPU; on CPU the bytes
    of the tensors autograd keeps for the backward pass (what activation checkpointing saves)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        model(*inputs).square().mean().backward()
        return torch.cuda.max_memory_allocated() - base
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(*inputs).square().mean()
    loss.backward()
    return sum(saved.values())


def interleaved(runs: dict, repeats: int) -> dict[str, float]:
    """Median step time of each ``runs[name]()``, the runs alternated (fair under a loaded
    machine: both see the same background)."""
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(repeats):
        for k, run in runs.items():
            times[k].append(run())
    return {k: sorted(v)[len(v) // 2] for k, v in times.items()}


#: the quick-start's refine stage: width 16, modes 8, batch 8 of 11 snapshots on 33 x 33
QUICKSTART = OperatorConfig(
    in_channels=16, out_channels=6, width=16, layers=4, modes=(8, 8, 8, 1), families=4
)
QUICKSTART_BATCH = (8, 11, 33, 33, 1)


def rank_step(rank: int, world_size: int, init: str, shard: str, steps: int, out) -> None:
    """One rank of the data-parallel timing: ``out.put((wall, cpu))`` seconds a step (rank 0)."""
    import torch.distributed as dist

    from pdeladder.slabs import DomainTiling
    from pdeladder.trainer.distributed.parallelize import ParallelDims, parallelize
    from pdeladder.trainer.training.loop import adamw

    torch.set_num_threads(1)
    if world_size > 1:
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = LadderOperator(QUICKSTART)
    if world_size > 1:
        dims = ParallelDims.of(world_size, DomainTiling(), shard)
        model = parallelize(model, dims, None, torch.device("cpu"))
    b, t, *space = QUICKSTART_BATCH
    x = torch.randn(b, QUICKSTART.in_channels, t, *space)
    fam, target = (
        torch.zeros(b, dtype=torch.long),
        torch.randn(b, QUICKSTART.out_channels, t, *space),
    )
    make_opt = lambda p: adamw(p, LearningRate().initial)  # noqa: E731
    step_time(model, lambda: (x, fam), target, 2, make_opt)  # warm-up
    cpu = time.process_time()
    wall = step_time(model, lambda: (x, fam), target, steps, make_opt)
    if rank == 0:
        out.put((wall, (time.process_time() - cpu) / steps))
    if world_size > 1:
        dist.destroy_process_group()


def data_parallel(world_size: int, steps: int, folder: str) -> None:
    """Print the ``world_size``-rank step (DDP, FSDP2) against one process's, same per-rank batch."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    times = {}
    for name, n, shard in (
        ("one process", 1, "none"),
        ("DDP", world_size, "none"),
        ("FSDP2", world_size, "all"),
    ):
        out, init = ctx.Queue(), f"file://{folder}/rendezvous-{name.replace(' ', '-')}"
        procs = [
            ctx.Process(target=rank_step, args=(r, n, init, shard, steps, out)) for r in range(n)
        ]
        for proc in procs:
            proc.start()
        times[name] = out.get(timeout=1800)  # a rank that fails raises in its own process
        for proc in procs:
            proc.join()
    (wall1, cpu1) = times["one process"]
    print(f"one process: {wall1 * 1e3:.0f} ms a step ({cpu1 * 1e3:.0f} ms CPU)")
    for name in ("DDP", "FSDP2"):
        wall, cpu = times[name]
        print(
            f"{world_size} workers, {name}: {wall * 1e3:.0f} ms a step = {wall / wall1:.2f}x, "
            f"CPU per rank {cpu / cpu1:.2f}x (target <= 1.3x)"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--modes", type=int, default=8)
    ap.add_argument("--workers", type=int, default=0, help="also time a step on this many ranks")
    args = ap.parse_args()
    if args.workers > 1:
        import tempfile

        with tempfile.TemporaryDirectory() as folder:
            data_parallel(args.workers, args.steps, folder)
    device = torch.device(args.device)
    torch.manual_seed(0)
    b, t, n, width, layers, m = 4, 11, args.size, 32, 4, args.modes
    cfg = OperatorConfig(
        in_channels=4, out_channels=1, width=width, layers=layers, modes=(m, m, m, 1)
    )
    ours = LadderOperator(cfg).to(device)
    x = torch.randn(b, 4, t, n, n, 1, device=device)
    fam = torch.zeros(b, dtype=torch.long, device=device)
    target = torch.randn(b, 1, t, n, n, 1, device=device)

    from neuralop.models import FNO

    fno = FNO(
        n_modes=(2 * m - 1, 2 * m - 1, 2 * m - 2),
        in_channels=4,
        out_channels=1,
        hidden_channels=width,
        n_layers=layers,
        domain_padding=0.25,
        use_channel_mlp=False,
    ).to(device)
    xf = x[..., 0].clone()
    kept_ours = ModeSelection.of((t, n, n, 1), cfg.modes).block_shape[:3]
    kept_fno = fno.fno_blocks.convs[0].weight.shape[2:]
    print(f"kept frequencies per layer: ours {kept_ours}, FNO {tuple(kept_fno)}")
    med = interleaved(
        {
            "ours": lambda: step_time(ours, lambda: (x, fam), target, args.steps),
            "fno": lambda: step_time(fno, lambda: (xf,), target[..., 0], args.steps),
        },
        args.repeats,
    )
    print(
        f"step time (median of {args.repeats}): ours {med['ours'] * 1e3:.1f} ms, "
        f"neuraloperator FNO {med['fno'] * 1e3:.1f} ms, "
        f"throughput ratio {med['fno'] / med['ours']:.2f}x (target >= 1.0x)"
    )

    ours.checkpointing = False
    plain = peak_memory(ours, (x, fam), device)
    ours.checkpointing = True
    ckpt = peak_memory(ours, (x, fam), device)
    print(
        f"peak memory: {plain / 2**20:.1f} MiB plain, {ckpt / 2**20:.1f} MiB with activation "
        f"checkpointing, ratio {ckpt / plain:.2f} (target <= 0.5)"
    )


if __name__ == "__main__":
    main()
