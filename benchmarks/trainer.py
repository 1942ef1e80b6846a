"""Trainer benchmark, one run: training-step throughput of our operator against
``neuraloperator``'s FNO on the same shape, and peak memory with and without activation
checkpointing.  ``pip install .[bench]``; ``python benchmarks/trainer.py [--device cuda]``.

Shapes: batch 4, 2D trajectories ``(t, x, y) = (11, 64, 64)``, width 32, 4 layers, 8 modes per
axis (our operator: time + space modes, input/output as the curriculum's heat stage; the FNO:
the same 3D ``(t, x, y)`` transform through its ``n_modes=(8, 8, 8)``).
"""

import argparse
import time

import torch

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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--size", type=int, default=64)
    args = ap.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    b, t, n, width = 4, 11, args.size, 32
    cfg = OperatorConfig(in_channels=4, out_channels=1, width=width, layers=4, modes=(8, 8, 8, 1))
    ours = LadderOperator(cfg).to(device)
    x = torch.randn(b, 4, t, n, n, 1, device=device)
    fam = torch.zeros(b, dtype=torch.long, device=device)
    target = torch.randn(b, 1, t, n, n, 1, device=device)
    t_ours = step_time(ours, lambda: (x, fam), target, args.steps)

    from neuralop.models import FNO

    fno = FNO(
        n_modes=(8, 8, 8),
        in_channels=4 + 4,
        out_channels=1,
        hidden_channels=width,
        n_layers=4,
        domain_padding=0.25,
    ).to(device)
    xf = torch.randn(b, 8, t, n, n, device=device)
    t_fno = step_time(fno, lambda: (xf,), target[..., 0], args.steps)
    print(
        f"step time: ours {t_ours * 1e3:.1f} ms, neuraloperator FNO {t_fno * 1e3:.1f} ms, "
        f"throughput ratio {t_fno / t_ours:.2f}x (target >= 1.0x)"
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
