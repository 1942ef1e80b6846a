"""One rank of the scale model's communication check (run by test_scale.py).

``python scale_rank.py RANK WORLD INIT_URL OUT_JSON``: joins a gloo group of WORLD processes
(one domain group), parallelizes the model as training does (the sharded transform, FSDP2) and
runs one forward and backward pass with the data loss on this rank's x slab, with and without
checkpointing, L2 and H1. Each rank writes ``{case: DomainGroup.sent}`` to ``OUT_JSON.RANK``.
"""

import json
import sys

import torch
import torch.distributed as dist

from pdeladder.trainer.distributed.parallelize import ParallelDims, parallelize
from pdeladder.trainer.distributed.slab import DomainLayout
from pdeladder.trainer.losses.data import relative_loss
from pdeladder.trainer.models.operator import LadderOperator, OperatorConfig

#: (name, sample (T, C, X, Y, Z), modes, batch, checkpointing, loss)
CASES = [
    ("2d l2", (5, 2, 13, 6, 1), (2, 3, 2, 1), 2, False, "l2"),
    ("2d h1 checkpointed", (5, 2, 13, 6, 1), (2, 3, 2, 1), 2, True, "h1"),
    ("3d h1", (3, 2, 12, 5, 4), (2, 3, 2, 2), 1, False, "h1"),
    ("1d l2 checkpointed", (6, 2, 20, 1, 1), (3, 4, 1, 1), 3, True, "l2"),
]


def config(modes) -> OperatorConfig:
    return OperatorConfig(3, 2, width=6, layers=3, modes=modes, families=1)


def main() -> None:
    rank, world, init, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    dims = ParallelDims.of(world, DomainLayout(x=world, padding=0.25))
    domain = dims.build("cpu")[1]
    results = {}
    for name, (t, _, x, y, z), modes, batch, checkpointing, loss in CASES:
        grid = (t, x, y, z)
        torch.manual_seed(0)
        model = parallelize(LadderOperator(config(modes)), dims, domain, torch.device("cpu"))
        model.checkpointing = checkpointing
        slab = domain.slab(grid)
        g = torch.Generator().manual_seed(1)
        inputs = torch.randn(batch, 3, *grid, generator=g)
        target = torch.randn(batch, 2, *grid, generator=g)
        box = (
            slice(None),
            slice(None),
            *(slice(lo, hi) for lo, hi in zip(slab.lo, slab.hi, strict=True)),
        )
        family = torch.zeros(batch, dtype=torch.long)
        mask = torch.ones(batch, 2, dtype=torch.bool)
        domain.sent.clear()
        pred = model(inputs[box], family, slab)
        relative_loss(pred, target[box], mask, h1=loss == "h1", slab=slab, domain=domain).backward()
        results[name] = dict(domain.sent)
    with open(f"{out}.{rank}", "w") as f:
        json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
