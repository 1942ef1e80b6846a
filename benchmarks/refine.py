"""Refinement at inference, measured on a trained model and its store (not a CI test).

``evaluate --refine N`` improves each predicted rollout by at most N iterations against its
family's PDE residual (trainer/refine.py: Gauss–Newton up to a direct solve's size, L-BFGS
beyond). This benchmark scores a checkpoint on every group of a store the model knows
(``evaluate_checkpoint``: the held-out samples of the groups it trained on, at most 16 per
group), unrefined and refined, and prints per group:

- the persistence baseline (steady Darcy: the training mean field), the model's nRMSE, the
  refined nRMSE after each of ``--steps``' counts (the curve of one refinement of the largest)
  and the improvement factor unrefined / refined at the largest;
- the refinement's wall time per sample against the FEM solve of the group's samples (the
  family's solver on the same grid, parameters and seeds, re-solved in this run after one
  warm-up solve that compiles the forms), and their ratio;
- the fewest of ``--steps``' counts that lower the nRMSE 2x, and the time ratio there (the
  refinement timed again with that many iterations).

Both run on ``--threads`` CPU threads (default 1: the FEM solve is serial, and on a shared
machine torch's threads over these small tensors wait on each other: 2 threads under load 8
ran a 33² heat refinement 13x slower than 1).

The issue's targets (31, item 4): >= 2x lower nRMSE on every time-dependent family at <= 10x
the FEM solve's wall time. Writes ``refine.json`` and ``refine.png`` (nRMSE against steps, one
curve per group) into ``--out``.

``python benchmarks/refine.py --checkpoint runs/quickstart/stages/refine/model
--store stores/quickstart.zarr [--steps 1,2,5,10] [--threads 1] [--out runs/bench-refine]``
(``make demo`` leaves that model and store).
"""

from mpi4py import MPI  # noqa: F401  (before DOLFINx)

import argparse
import json
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from pdeladder.dataset.store import open_store
from pdeladder.solvers.registry import get_family
from pdeladder.trainer import evaluate_checkpoint
from pdeladder.trainer.figures import plot_refinement

#: Samples of each group re-solved to time the FEM solve.
SOLVES = 4


def solve_seconds(store_url: str, path: str) -> float:
    """Wall seconds per FEM solve of group ``path``'s first samples (after one warm-up)."""
    group = open_store(store_url).group(path)
    fam = get_family(group.family)
    params, seeds = group.params(), group.column("seed")
    fam.run(fam.Params.from_vector(params[0]), group.grid, int(seeds[0]))  # forms compiled
    start = time.perf_counter()
    n = min(SOLVES, len(seeds))
    for i in range(n):
        fam.run(fam.Params.from_vector(params[i]), group.grid, int(seeds[i]))
    return (time.perf_counter() - start) / n


def seconds(args: argparse.Namespace, path: str, n: int, most: int, refinement: dict) -> float:
    """Seconds per sample of group ``path``'s refinement by ``n`` iterations: the run's own at
    ``most``, else timed again (Gauss–Newton's time is not proportional to its iterations:
    a linear residual's is all in the first)."""
    if n == most:
        return refinement["seconds_per_sample"]
    again = evaluate_checkpoint(args.checkpoint, args.store, refine=n, groups=[path])
    return again["groups"][path]["refinement"]["seconds_per_sample"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", type=Path, required=True)
    ap.add_argument("--store", required=True)
    ap.add_argument("--steps", default="1,2,5,10", help="iteration counts reported")
    ap.add_argument("--groups", nargs="*", help="group paths (default: every group it knows)")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads of torch")
    ap.add_argument("--out", type=Path, default=Path("runs/bench-refine"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    counts = sorted({int(s) for s in args.steps.split(",")})
    report = evaluate_checkpoint(
        args.checkpoint, args.store, refine=counts[-1], groups=args.groups or None
    )
    rows = {}
    for path, r in report["groups"].items():
        curve, refinement = r["refinement"]["curve"], r["refinement"]
        fem = solve_seconds(args.store, path)
        halved = [n for n in counts if curve[n] <= r["unrefined"]["nrmse"] / 2]
        rows[path] = {
            "baseline": r["baseline_nrmse"],
            "unrefined": r["unrefined"]["nrmse"],
            "refined": {n: curve[n] for n in counts},
            "improvement": r["unrefined"]["nrmse"] / r["nrmse"],
            "refine_s": refinement["seconds_per_sample"],
            "fem_s": fem,
            "time_ratio": refinement["seconds_per_sample"] / fem,
            "steps_to_2x": halved[0] if halved else None,
            "time_ratio_at_2x": (
                seconds(args, path, halved[0], counts[-1], refinement) / fem if halved else None
            ),
            "samples": r["samples"],
            "steady": open_store(args.store).group(path).grid.snapshots == 1,
        }
    table = Table(
        "group", "baseline", "model",
        *[f"refined {n}" for n in counts],
        "model / refined", "refine s", "FEM s", "time ratio", "2x at", "time ratio there",
        title=f"Refinement at inference ({args.checkpoint}); nRMSE on held-out samples",
    )  # fmt: skip
    for path, row in rows.items():
        table.add_row(
            path, f"{row['baseline']:.3g}", f"{row['unrefined']:.3g}",
            *[f"{v:.3g}" for v in row["refined"].values()],
            f"{row['improvement']:.2f}x" + (" (steady)" if row["steady"] else ""),
            f"{row['refine_s']:.3g}", f"{row['fem_s']:.3g}", f"{row['time_ratio']:.0f}x",
            *(
                (str(row["steps_to_2x"]), f"{row['time_ratio_at_2x']:.1f}x")
                if row["steps_to_2x"]
                else ("-", "-")
            ),
        )  # fmt: skip
    Console(width=200).print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "refine.json").write_text(
        json.dumps({"groups": rows, "steps": counts, "threads": args.threads}, indent=2)
    )
    plot_refinement(report, args.out / "refine.png")
    print(f"written: {args.out / 'refine.json'}, {args.out / 'refine.png'}")


if __name__ == "__main__":
    main()
