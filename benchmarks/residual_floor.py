"""The residual's floor: how far the trajectory that minimises the equation loss's residual
lies from the solution (not a CI test).

With a sample's initial state (and its inputs) held, Gauss–Newton minimises the relative
residual of ``trainer/losses/equation.py`` over the snapshots 1.. (``refine.least_squares``:
sparse direct solves over all snapshots at once) to rounding, from the initial state held; the
minimiser is the residual's own discrete solution. Its distance to the solution bounds what the
residual can teach a model (self-improvement) and what refinement at inference can reach
(issue 31, item 5). Per family and resolution ``n²`` (2D,
``--snapshots`` snapshots), over ``--samples`` draws of the default parameters:

- **solve → ref**: the FEM solve against a reference, the same problem solved on the grid of
  ``2 (n - 1) + 1`` points (its spacing and time step halved), sampled at the coarse points.
  Both start from one initial draw: the fine grid's, which the coarse solve takes at its
  points. This is the data's own error;
- **min → solve**, **min → ref**: the minimiser against the solve (what nRMSE against the data
  sees) and against the reference, for the time rule of each ``--stencils`` entry
  (:data:`~pdeladder.trainer.losses.equation.STENCIL` snapshots per inner interval; 2 is the
  implicit midpoint rule, the reference rule measured in the same run);
- **held**: the initial state held, against the solve (the trivial prediction).

nRMSE: per sample ``‖a - b‖ / ‖b‖`` over the predicted channels and all snapshots, then the
mean. The observed order of **min → ref** between resolutions is printed beside it.

A steady family (``darcy``) has no time rule: its minimiser starts from a zero output, and
its "held" column is 1. **min s** is the minimisation's wall seconds per sample, beside the
FEM solve's (**FEM s**, the whole ``run``).

``python benchmarks/residual_floor.py [--families heat,burgers,advection_diffusion]
[--resolutions 17,33,65] [--samples 3] [--steps 20] [--out DIR]`` writes ``floor.json`` and
``floor.md`` into ``--out``.
"""

from mpi4py import MPI  # noqa: F401  (before DOLFINx)

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
from _data import coarse_from_fine  # benchmarks/_data.py (the script folder is on sys.path)

from pdeladder.solvers.registry import get_family
from pdeladder.trainer import refine
from pdeladder.trainer.losses import equation


def nrmse(a: torch.Tensor, b: torch.Tensor) -> float:
    """Mean over samples of ``‖a - b‖ / ‖b‖``, ``(b, C, T, X, Y, Z)``."""
    return float(((a - b).flatten(1).norm(dim=1) / b.flatten(1).norm(dim=1)).mean())


def solved(name: str, n: int, snapshots: int, samples: int) -> tuple[torch.Tensor, ...]:
    """``(coarse solve, reference, params, seconds)``: ``samples`` draws of the default
    parameters at ``n²`` and at ``(2 (n - 1) + 1)²`` from one initial draw (the fine grid's),
    fields ``(b, C, T, n, n, 1)`` float64, and the coarse solve's wall seconds per sample."""
    fam = get_family(name)
    grid, fine = fam.grid(2, n, snapshots), fam.grid(2, 2 * (n - 1) + 1, snapshots)
    coarse, reference, params, seconds = [], [], [], 0.0
    with coarse_from_fine(name, fine, grid):
        fam.run(fam.parse_params({}), grid, seed=samples)  # compiles the forms: not timed
        for seed in range(samples):
            p = fam.parse_params({})
            start = time.perf_counter()
            coarse.append(fam.run(p, grid, seed=seed).fields)
            seconds += time.perf_counter() - start
            reference.append(fam.run(p, fine, seed=seed).fields[:, :, ::2, ::2])
            params.append(p.vector())

    def order(f: list[np.ndarray]) -> torch.Tensor:  # (b, T, C, ...) -> (b, C, T, ...)
        return torch.as_tensor(np.stack(f)).transpose(1, 2).double()

    solves = order(coarse), order(reference), torch.as_tensor(np.stack(params)).double()
    return (*solves, seconds / samples)


def minimiser(name: str, solve: torch.Tensor, params, n: int, snapshots: int, steps: int):
    """The residual's minimiser and its final relative residual (to the trivial prediction):
    at most ``steps`` Gauss–Newton iterations (``refine.least_squares``) from the inputs and
    the initial state held (a steady family's: a zero output)."""
    fam = get_family(name)
    grid = fam.grid(2, n, snapshots)
    predicted = torch.tensor([c.role != "input" for c in fam.channels_for(2)])
    held = solve[:, :, :1].expand_as(solve).clone()
    if fam.steady:
        held = torch.where(predicted[None, :, None, None, None, None], 0.0, solve)
    done = refine.least_squares(name, held, held, params, predicted, grid, steps)
    return done.fields, float(done.residual[:, -1].max())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--families", default="heat,burgers,advection_diffusion")
    ap.add_argument("--resolutions", default="17,33,65")
    ap.add_argument("--snapshots", type=int, default=11)
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20, help="most Gauss–Newton iterations")
    ap.add_argument("--stencils", default="2,4", help="time rules compared (2: midpoint)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("runs/bench-floor"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    stencils = [int(s) for s in args.stencils.split(",")]
    resolutions = [int(r) for r in args.resolutions.split(",")]
    rows = []
    for name in args.families.split(","):
        fam = get_family(name)
        predicted = torch.tensor([c.role != "input" for c in fam.channels_for(2)])
        snapshots = 1 if fam.steady else args.snapshots
        for n in resolutions:
            start = time.perf_counter()
            solve, reference, params, fem_s = solved(name, n, snapshots, args.samples)
            row = {"family": name, "n": n, "solve_s": time.perf_counter() - start, "fem_s": fem_s}
            ours, ref = solve[:, predicted], reference[:, predicted]
            row["solve_ref"] = nrmse(ours, ref)
            row["held"] = nrmse(ours[:, :, :1].expand_as(ours), ours) if not fam.steady else 1.0
            for stencil in stencils:
                equation.STENCIL = stencil
                equation.interval_weights.cache_clear()
                start = time.perf_counter()
                fields, residual = minimiser(name, solve, params, n, snapshots, args.steps)
                row[f"min_solve_{stencil}"] = nrmse(fields[:, predicted], ours)
                row[f"min_ref_{stencil}"] = nrmse(fields[:, predicted], ref)
                row[f"residual_{stencil}"] = residual
                row[f"refine_s_{stencil}"] = (time.perf_counter() - start) / args.samples
            rows.append(row)
            print(json.dumps({k: round(v, 5) if isinstance(v, float) else v
                              for k, v in row.items()}), flush=True)  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "floor.json").write_text(json.dumps(rows, indent=1))
    (args.out / "floor.md").write_text(report(rows, stencils, resolutions))
    print(report(rows, stencils, resolutions))


def report(rows: list[dict], stencils: list[int], resolutions: list[int]) -> str:
    """The Markdown table: per family and resolution, the data's error, the trivial prediction,
    the FEM solve's seconds per sample and each rule's minimiser, with the observed order of
    min → ref and its seconds per sample."""
    head = "| family | n | held | solve → ref | FEM s |"
    for s in stencils:
        head += f" min → solve ({s}) | min → ref ({s}) | order ({s}) | min s ({s}) |"
    lines = [head, "|" + "---|" * (5 + 4 * len(stencils))]
    for r in rows:
        line = (f"| {r['family']} | {r['n']}² | {r['held']:.3g} | {r['solve_ref']:.3g} "
                f"| {r['fem_s']:.3g} |")  # fmt: skip
        for s in stencils:
            prev = next((p for p in rows if p["family"] == r["family"]
                         and p["n"] == (r["n"] + 1) // 2), None)  # fmt: skip
            order = math.log2(prev[f"min_ref_{s}"] / r[f"min_ref_{s}"]) if prev else None
            text = f"{order:.2f}" if order is not None else ""
            line += (f" {r[f'min_solve_{s}']:.3g} | {r[f'min_ref_{s}']:.3g} | {text} "
                     f"| {r[f'refine_s_{s}']:.3g} |")  # fmt: skip
        lines.append(line)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
