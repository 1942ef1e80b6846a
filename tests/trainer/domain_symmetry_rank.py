"""One rank of the sharded-symmetry checks (run by test_domain_symmetry.py).

``python domain_symmetry_rank.py RANK WORLD INIT_URL OUT_JSON``: joins a gloo group of WORLD
processes, each holding an x slab of the same samples (made identically on every rank from one
seed), and compares with the whole samples in the same process: every element of the 1D, 2D and
3D groups moved across the ranks (:func:`move`) against :meth:`BoxSymmetry.apply`; augmentation
of slabs against augmentation of whole samples; symmetrized prediction on slabs (the model's
transforms sharded) against symmetrized prediction on whole samples. Rank 0 writes
``{case: value}`` as JSON: the largest difference over the ranks (0 for the moves: exact), and
counts that show what was exercised.
"""

import copy
import json
import sys
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from pdeladder.dataset.collate import make_batch
from pdeladder.dataset.slots import SlotLayout
from pdeladder.slabs import DomainTiling
from pdeladder.solvers.registry import get_family
from pdeladder.solvers.symmetry import box_group
from pdeladder.trainer.distributed.collectives import DomainGroup
from pdeladder.trainer.distributed.parallelize import split_samples
from pdeladder.trainer.distributed.symmetry import move
from pdeladder.trainer.inference import predict
from pdeladder.trainer.models.operator import LadderOperator, OperatorConfig
from pdeladder.trainer.processor import DataProcessor
from pdeladder.trainer.training.augment import Augmentation

CHANNELS, VECTORS = ["s", "vx", "vy", "vz"], [("vx", "vy", "vz")]
#: name: (dim, points per axis, x cuts of the tiling or None: even), per world size
MOVES = {
    2: [("1d", 1, 9, None), ("2d", 2, 7, None), ("3d", 3, 5, None), ("2d cut 5|2", 2, 7, (0, 5, 7))],
    3: [("1d", 1, 9, None), ("2d", 2, 7, None), ("3d", 3, 7, None), ("2d cut 2|3|2", 2, 7, (0, 2, 5, 7))],
}  # fmt: skip
#: name: (dim, points per axis, snapshots, x cuts or None), per world size
PREDICTIONS = {
    2: [("2d", 2, 9, 3, None), ("3d", 3, 6, 2, None)],
    3: [("2d", 2, 9, 3, None), ("2d cut 4|2|3", 2, 9, 3, (0, 4, 6, 9)), ("3d", 3, 6, 2, None)],
}
PADDING = 0.25


def slab_rows(x: torch.Tensor, slab, x_dim: int) -> torch.Tensor:
    """The rows of the whole ``x`` that ``slab`` holds along x (tensor dimension ``x_dim``)."""
    return x.narrow(x_dim, slab.lo[1], slab.hi[1] - slab.lo[1]).contiguous()


def check_moves(world: int, rank: int) -> dict[str, float]:
    """Largest |sharded − whole| over every element, layout and case (exact: 0)."""
    out = {}
    for name, dim, n, cuts in MOVES[world]:
        tiling = DomainTiling(x=world, x_cuts=cuts)
        domain = DomainGroup(None, tiling, tuple(range(world)), rank)
        shape = tuple(n if a < dim else 1 for a in range(3))
        slab = domain.slab((3, *shape))
        g_ = torch.Generator().manual_seed(dim)
        whole = torch.randn(2, len(CHANNELS), 3, *shape, generator=g_)  # (B, C, T, X, Y, Z)
        worst, moved_x = 0.0, 0
        for g in box_group(dim):
            got = move(slab_rows(whole, slab, 3), g, CHANNELS, VECTORS, 1, slab)
            want = slab_rows(g.apply(whole, CHANNELS, VECTORS, 1), slab, 3)
            worst = max(worst, (got - want).abs().max().item())
            moved_x += g.perm[0] != 0 or g.flips[0]
        out[f"move {name}"] = worst
        out[f"move {name}: elements moving x"] = moved_x
    return out


def burgers(dim: int, n: int, snapshots: int, seed: int):
    """(layout, batch) of two random Burgers samples of ``n`` points per axis (random fields:
    the sharded and whole runs must agree on any input, solved or not)."""
    fam = get_family("burgers")
    layout = SlotLayout.for_families(["burgers"], [dim])
    grid = fam.grid(dim, n, snapshots)
    rng = np.random.default_rng(seed)
    channels = len(fam.channels_for(dim))
    fields = rng.standard_normal((2, snapshots, channels, *grid.shape)).astype(np.float32)
    params = np.stack([fam.Params().vector()] * 2)
    return layout, make_batch(layout, "burgers", grid, fields, params, solved=True)


def slab_batch(batch: dict, slab) -> dict:
    return {**batch, "fields": slab_rows(batch["fields"], slab, 3)}


def check_augmentation(world: int, rank: int) -> dict[str, float]:
    """Augmented slabs against the slabs of augmented whole samples, 8 steps of 2D Burgers."""
    layout, batch = burgers(2, 7, 3, seed=1)
    domain = DomainGroup(None, DomainTiling(x=world), tuple(range(world)), rank)
    grid = batch["grid"]
    slab = domain.slab(grid.space_time)
    processor = DataProcessor(layout)
    whole, sharded = Augmentation(processor, 7, 0), Augmentation(processor, 7, 0, domain)
    worst, moved_x = 0.0, 0
    for step in range(8):
        want = whole(batch, step)
        got = sharded(slab_batch(batch, slab), step)
        for key in ("fields", "normalised"):
            if key in want:
                diff = got[key] - slab_rows(want[key], slab, 3)
                worst = max(worst, diff.abs().max().item())
        moved_x += sum(g.perm[0] != 0 or g.flips[0] for g in whole.elements("burgers", 2, step, 2))
    return {"augment 2d": worst, "augment 2d: samples moved in x": moved_x}


def check_predictions(world: int, rank: int) -> dict[str, float]:
    """Symmetrized prediction on slabs against the whole samples', relative to its largest."""
    out = {}
    for name, dim, n, snapshots, cuts in PREDICTIONS[world]:
        layout, batch = burgers(dim, n, snapshots, seed=dim)
        torch.manual_seed(0)
        modes = (2, 3, 3 if dim > 1 else 1, 3 if dim > 2 else 1)
        config = OperatorConfig(
            in_channels=layout.in_channels, out_channels=len(layout.slots), width=6, layers=2,
            modes=modes, families=1, padding=PADDING,
        )  # fmt: skip
        model = LadderOperator(config).eval()
        domain = DomainGroup(None, DomainTiling(x=world), tuple(range(world)), rank)
        sharded = copy.deepcopy(model)
        split_samples(sharded, domain)
        grid = batch["grid"]
        tiling = DomainTiling(x=world, padding=PADDING, x_cuts=cuts)  # predict's slab
        slab = tiling.slab(grid.space_time, rank).held_by(domain)
        processor = DataProcessor(layout)
        want = slab_rows(predict(model, processor, batch, symmetrize=True), slab, 3)
        got = predict(sharded, processor, slab_batch(batch, slab), slab, True)
        out[f"symmetrized {name}"] = ((got - want).abs().max() / want.abs().max()).item()
    return out


def main() -> None:
    rank, world, init, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    torch.set_num_threads(1)
    results = {
        **check_moves(world, rank),
        **check_augmentation(world, rank),
        **check_predictions(world, rank),
    }
    values = torch.tensor(list(results.values()), dtype=torch.float64)
    dist.all_reduce(values, op=dist.ReduceOp.MAX)  # counts are alike on every rank
    if rank == 0:
        Path(out).write_text(json.dumps(dict(zip(results, values.tolist(), strict=True))))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
