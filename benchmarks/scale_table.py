"""docs/scale.md's table and plot, from the scale model (trainer/distributed/scale.py).

``python benchmarks/scale_table.py [--out docs/img/scale.png]``: for cubic 3D samples of
1e9 .. 1e12 space-time points (training: bf16, checkpointing, disk offload, FSDP2, batch 1) and
5e12 (inference, forward only), the fewest x domain ranks whose largest rank fits an H100 and an
H200 (8 per node), with memory per device, communication per step and its share of the step's
lower bound, and the largest memory part. Prints a markdown table; writes the PNG.
"""

import argparse
import math
from dataclasses import replace
from pathlib import Path

from pdeladder.errors import UserInputError
from pdeladder.trainer.distributed.scale import PRESETS, Run, estimate, smallest_tiling
from pdeladder.trainer.models.operator import OperatorConfig

#: width 32, 4 layers, 8 modes per axis; no padding: periodic samples (see docs/scale.md on why)
CONFIG = OperatorConfig(5, 4, width=32, layers=4, modes=(8, 8, 8, 8), padding=0.0)
T, C = 100, 4
SIZES = [(1e9, True), (1e10, True), (1e11, True), (1e12, True), (5e12, False)]


def sample(points: float) -> tuple[int, int, int, int, int]:
    side = round((points / T) ** (1 / 3))
    return (T, C, side, side, side)


def rows(device: str) -> list[dict]:
    out = []
    for points, training in SIZES:
        run = Run(
            CONFIG,
            sample(points),
            precision="bf16",
            checkpointing=training,
            offload="disk" if training else "none",
            training=training,
        )
        try:
            e = smallest_tiling(run, PRESETS[device])
        except UserInputError:  # no x tiling fits: report the thinnest slabs' figures
            k = run.sample[2] // 2
            e = estimate(replace(run, ranks=k, domain=k), PRESETS[device])
        biggest = max(
            (k for k in e.memory if k not in ("peak", "offloaded")), key=e.memory.__getitem__
        )
        wire = sum(e.wire.values())
        out.append(
            {
                "fits": e.fits,
                "points": points,
                "training": training,
                "shape": run.sample,
                "ranks": e.run["domain"],
                "nodes": e.nodes,
                "peak_gb": e.memory["peak"] / 1e9,
                "offloaded_gb": e.memory.get("offloaded", 0) / 1e9,
                "wire_gb": wire / 1e9,
                "step_s": e.seconds["step_lower_bound"],
                "share": e.seconds["communication_share"],
                "largest": biggest,
                "flops": sum(e.flops.values()),
                "mixing_share": e.flops["mixing"] / sum(e.flops.values()),
            }
        )
    return out


def scan(device: str, points: float) -> list[tuple[int, dict]]:
    """Per-rank peak parts against the domain ranks, for the plot."""
    base = Run(CONFIG, sample(points), precision="bf16", checkpointing=True, offload="disk")
    ks = [2**i for i in range(int(math.log2(base.sample[2] // 2)) + 1)]
    return [(k, estimate(replace(base, ranks=k, domain=k), PRESETS[device]).memory) for k in ks]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs/img/scale.png"))
    args = parser.parse_args()
    print(
        "| device | points | run | sample (T, C, X, Y, Z) | x ranks | nodes | peak GB/device "
        "| offloaded GB | wire GB/step | step ≥ s | comm share | largest part | mixing FLOPs |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for device in ("h100", "h200"):
        for r in rows(device):
            print(
                f"| {device} | {r['points']:.0e} | {'train' if r['training'] else 'infer'} | "
                f"{r['shape']} | {r['ranks']}{'' if r['fits'] else ' (max; does not fit)'} | {r['nodes']} | {r['peak_gb']:.1f} | "
                f"{r['offloaded_gb']:.1f} | {r['wire_gb']:.2f} | {r['step_s']:.3g} | "
                f"{r['share']:.0%} | {r['largest']} | {r['mixing_share']:.1%} |"
            )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    parts = ("data", "activations", "recompute", "working", "transform", "unsharded")
    series = scan("h100", 1e11)
    ks = [k for k, _ in series]
    bottom = [0.0] * len(ks)
    for part in parts:
        values = [m[part] / 1e9 for _, m in series]
        ax.bar(range(len(ks)), values, bottom=bottom, label=part)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.axhline(PRESETS["h100"].memory / 1e9, color="k", ls="--", label="H100 80 GB")
    ax.set_xticks(range(len(ks)), [str(k) for k in ks])
    ax.set_yscale("log")
    ax.set_xlabel("x domain ranks")
    ax.set_ylabel("predicted peak per rank (GB)")
    ax.set_title(
        "1e11 points (100 × 1000³, 4 ch), bf16, checkpointing + disk offload; log scale", fontsize=9
    )
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
