"""What symmetrized prediction buys and costs, measured on a trained model and its store (not a
CI test).

``evaluate --symmetrize`` scores the mean of ``g⁻¹ model(g inputs)`` over the box's symmetry
group: 2, 8 and 48 forward passes per sample in 1D, 2D and 3D (docs/trainer.md, "Symmetrized
prediction"). This benchmark evaluates a checkpoint on every group of a store the model knows
twice, the network alone and symmetrized, each timed whole (``evaluate_checkpoint``: the
held-out samples of the groups it trained on, at most 16 per group), and prints per group and
in total:

- the persistence baseline (steady Darcy: the training mean field) beside both nRMSEs, and the
  relative gain ``1 - symmetrized / network``;
- the number of passes, and the evaluation's wall time with and without, and their ratio;
- the nRMSE gained per extra second of evaluation (the gain's share of the baseline's error
  removed, per second), which the default is chosen by.

Both on ``--threads`` CPU threads (default 1, as evaluate's scoring runs on a small machine).
Writes ``symmetrize.json`` into ``--out``.

``python benchmarks/symmetrize.py --checkpoint runs/quickstart/stages/refine/model
--store stores/quickstart.zarr [--threads 1] [--out runs/bench-symmetrize]``
(``make demo`` leaves that model and store).
"""

import argparse
import json
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from pdeladder.dataset.format import group_key
from pdeladder.trainer import evaluate_checkpoint

#: Forward passes of one symmetrized prediction, by dimension: 2^d reflections times d! axis
#: permutations.
PASSES = {1: 2, 2: 8, 3: 48}


def timed(checkpoint: str, store: str, symmetrize: bool) -> tuple[dict, float]:
    """The report of one evaluation and its wall seconds."""
    start = time.perf_counter()
    report = evaluate_checkpoint(checkpoint, store, symmetrize=symmetrize)
    return report, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--store", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("runs/bench-symmetrize"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    timed(args.checkpoint, args.store, False)  # warm-up: imports, first reads, allocator
    net, t_net = timed(args.checkpoint, args.store, False)
    sym, t_sym = timed(args.checkpoint, args.store, True)
    rows = {}
    for path, a in net["groups"].items():
        b = sym["groups"][path]
        rows[path] = {
            "passes": PASSES[int(group_key(path)[2])],
            "samples": a["samples"],
            "baseline": a["baseline_nrmse"],
            "network": a["nrmse"],
            "symmetrized": b["nrmse"],
            "gain": 1 - b["nrmse"] / a["nrmse"],
        }
    mean = {k: sum(r[k] for r in rows.values()) / len(rows) for k in ("network", "symmetrized")}
    extra = t_sym - t_net
    result = {
        "checkpoint": args.checkpoint,
        "store": args.store,
        "threads": args.threads,
        "groups": rows,
        "seconds": {"network": t_net, "symmetrized": t_sym, "ratio": t_sym / t_net},
        "mean_nrmse": mean,
        "mean_gain": 1 - mean["symmetrized"] / mean["network"],
        "nrmse_gained_per_extra_second": (mean["network"] - mean["symmetrized"]) / extra
        if extra > 0
        else float("nan"),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "symmetrize.json").write_text(json.dumps(result, indent=2))

    table = Table(title="symmetrized prediction: held-out nRMSE (baseline) and cost")
    for col in ("group", "samples", "passes", "baseline", "network", "symmetrized", "gain"):
        table.add_column(col, justify="left" if col == "group" else "right")
    for path, r in rows.items():
        table.add_row(
            path,
            str(r["samples"]),
            str(r["passes"]),
            f"{r['baseline']:.3f}",
            f"{r['network']:.4f}",
            f"{r['symmetrized']:.4f}",
            f"{100 * r['gain']:+.1f} %",
        )
    console = Console(width=120)
    console.print(table)
    s = result["seconds"]
    console.print(
        f"mean nRMSE {mean['network']:.4f} -> {mean['symmetrized']:.4f} "
        f"({100 * result['mean_gain']:+.1f} %); evaluation {s['network']:.1f} s -> "
        f"{s['symmetrized']:.1f} s ({s['ratio']:.2f}x); "
        f"{result['nrmse_gained_per_extra_second']:.2e} nRMSE per extra second"
    )


if __name__ == "__main__":
    main()
