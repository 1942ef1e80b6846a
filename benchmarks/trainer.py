"""Trainer benchmark, one run: training-step throughput of our operator against
``neuraloperator``'s FNO, like for like, and peak memory with and without activation
checkpointing.  ``pip install .[bench]``; ``python benchmarks/trainer.py [--device cuda]``.

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

from pdeladder.trainer.layers.spectral import ModeSelection
from pdeladder.trainer.models import LadderOperator, OperatorConfig


def step_time(model, make_inputs, target, steps: int) -> float:
    opt = torch.optim.AdamW(model.parameters(), 1e-3)
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--modes", type=int, default=8)
    args = ap.parse_args()
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
