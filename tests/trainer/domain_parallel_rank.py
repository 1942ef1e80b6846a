"""One rank of the domain-parallel exactness check (run by test_domain_parallel.py).

``python domain_parallel_rank.py RANK WORLD INIT_URL OUT_JSON``: joins a gloo group of WORLD
processes and, for every case of its world size and both mixings (every rank the whole kept
block, or each its share), compares the sharded model (each rank its slab of the same samples)
with the unsharded one computed in the same process on the whole samples: outputs, input
gradients, parameter gradients, one FSDP2 + AdamW step, the bytes handed to collectives (the
all-reduce of each kept block, padded to equal shares of its modes when shared) and the
collectives a checkpointed training step runs. Rank 0 writes
``{case: {quantity: relative error or count}}`` as JSON.
"""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from pdeladder.slabs import DomainTiling
from pdeladder.slabs import padding as pad_of
from pdeladder.trainer.distributed.collectives import sum_replicated
from pdeladder.trainer.distributed.parallelize import ParallelDims, parallelize, split_samples
from pdeladder.trainer.layers.fft import ModeSelection
from pdeladder.trainer.models.operator import LadderOperator, OperatorConfig
from pdeladder.trainer.training.loop import load_training_state, save_training_state

#: (name, grid (T, X, Y, Z), modes, ranks along (t, x), batch, padding, checkpointing)
CASES = {
    2: [
        ("1d x uneven", (5, 17, 1, 1), (2, 4, 1, 1), (1, 2), 2, 0.25, False),
        ("1d t", (5, 16, 1, 1), (2, 4, 1, 1), (2, 1), 1, 0.25, True),
        ("2d x", (6, 9, 7, 1), (2, 3, 3, 1), (1, 2), 2, 0.25, False),
        ("2d x no padding", (6, 9, 7, 1), (2, 3, 3, 1), (1, 2), 2, 0.0, True),
        ("3d t", (4, 8, 6, 5), (2, 3, 2, 2), (2, 1), 2, 0.25, False),
        ("2d steady x", (1, 12, 9, 1), (1, 4, 3, 1), (1, 2), 3, 0.25, False),
    ],
    4: [
        ("1d x 17 over 4", (9, 17, 1, 1), (3, 4, 1, 1), (1, 4), 2, 0.0, False),
        ("1d x 40 over 4 padded", (5, 40, 1, 1), (2, 6, 1, 1), (1, 4), 1, 0.25, True),
        ("2d t×x", (6, 9, 7, 1), (2, 3, 3, 1), (2, 2), 2, 0.25, True),
        ("3d x", (3, 24, 5, 4), (2, 3, 2, 2), (1, 4), 1, 0.25, False),
        # 2, 2, 2, 3 points, then 0, 1, 1, 1 of the 3 padding points: padding apart from them
        ("2d x, padding split", (4, 9, 6, 1), (2, 3, 2, 1), (1, 4), 2, 0.25, True),
        ("1d t 9 over 4", (9, 8, 1, 1), (3, 3, 1, 1), (4, 1), 2, 0.0, False),
        # 2 kept modes over 4 ranks: two mix one mode each, two none (and still take part)
        ("1d x, ranks without modes", (3, 12, 1, 1), (1, 2, 1, 1), (1, 4), 2, 0.0, True),
    ],
}
MIXINGS = ("whole", "share")
#: (name, grid, modes, ranks along (t, x), FSDP2 over, mixing): an FSDP2 + AdamW step on a
#: (dp, domain) mesh, parameters sharded over all ranks or over the dp groups only.
STEPS = {
    2: [
        ("step dp1×x2", (5, 13, 6, 1), (2, 3, 2, 1), (1, 2), "all", "whole"),
        ("step dp1×x2, shared modes", (5, 13, 6, 1), (2, 3, 2, 1), (1, 2), "all", "share"),
        ("step dp1×x2, replicated over domain", (5, 13, 6, 1), (2, 3, 2, 1), (1, 2), "dp", "whole"),
    ],
    4: [
        ("step dp2×x2", (5, 13, 6, 1), (2, 3, 2, 1), (1, 2), "all", "whole"),
        ("step dp2×x2, sharded over dp", (5, 13, 6, 1), (2, 3, 2, 1), (1, 2), "dp", "share"),
        ("step dp1×t2x2", (5, 13, 6, 1), (2, 3, 2, 1), (2, 2), "all", "share"),
    ],
}
IN, OUT, FAMILIES = 3, 2, 2
CPU = torch.device("cpu")


def config(modes, padding) -> OperatorConfig:
    return OperatorConfig(
        IN, OUT, width=6, layers=2, modes=modes, families=FAMILIES, padding=padding
    )


def case_data(grid, batch, seed):
    """The whole samples, the family ids and the loss weights, identical on every rank."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, IN, *grid, generator=g)
    weight = torch.rand(batch, OUT, *grid, generator=g)
    return x, torch.arange(batch) % FAMILIES, weight


def local(t: torch.Tensor, slab) -> torch.Tensor:
    return t[(..., *(slice(lo, hi) for lo, hi in zip(slab.lo, slab.hi, strict=True)))]


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach(), b.detach()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def loss_of(pred, weight, domain=None):
    """``Σ w · pred²`` over the global grid: the slabs' sums, all-reduced."""
    return sum_replicated((weight * pred.square()).sum(), domain)


def check_case(name, grid, modes, ranks, batch, padding, checkpointing, mixing, meshes):
    dims = ParallelDims.of(dist.get_world_size(), DomainTiling(*ranks, padding=padding))
    domain = meshes(dims)
    torch.manual_seed(1)
    plain = LadderOperator(config(modes, padding))
    torch.manual_seed(1)
    sharded = LadderOperator(config(modes, padding))
    sharded.checkpointing = checkpointing
    split_samples(sharded, domain, mixing)  # the transform only: parameters stay whole here
    x, family, weight = case_data(grid, batch, seed=2)
    slab = domain.slab(grid)

    x_plain = x.clone().requires_grad_()
    out_plain = plain(x_plain, family)
    loss_of(out_plain, weight).backward()

    x_slab = local(x, slab).clone().requires_grad_()
    domain.sent.clear()
    with torch.no_grad():
        sharded(x_slab, family, slab)
    forward_bytes = domain.sent["all_reduce"]
    out_slab = sharded(x_slab, family, slab)
    loss = loss_of(out_slab, local(weight, slab), domain)
    loss.backward()
    shares = torch.cat([p.grad.flatten() for p in sharded.parameters()])
    dist.all_reduce(shares, group=domain.group)
    kept = ModeSelection.of(slab.padded(pad_of(grid, padding)).shape, modes).block_shape
    rows = int(torch.tensor(kept).prod())
    if mixing == "share":
        rows = -(-rows // domain.size) * domain.size  # k equal shares
    return {
        "output": rel(out_slab, local(out_plain, slab)),
        "input_grad": rel(x_slab.grad, local(x_plain.grad, slab)),
        "param_grad": rel(shares, torch.cat([p.grad.flatten() for p in plain.parameters()])),
        "loss": rel(loss.detach(), loss_of(out_plain, weight).detach()),
        "forward_bytes": forward_bytes,
        "expected_forward_bytes": 2 * 8 * batch * 6 * rows,
    }


def check_checkpointed_collectives(grid, modes, ranks, batch, mixing, meshes) -> dict:
    """The collectives one training pass (forward and backward) runs with and without
    checkpointing, by kind, and the input and parameter gradients of the two."""
    domain = meshes(ParallelDims.of(dist.get_world_size(), DomainTiling(*ranks, padding=0.25)))
    x, family, weight = case_data(grid, batch, seed=2)
    slab = domain.slab(grid)
    runs, grads = {}, {}
    for checkpointing in (True, False):
        torch.manual_seed(1)
        model = LadderOperator(config(modes, 0.25))
        model.checkpointing = checkpointing
        split_samples(model, domain, mixing)
        x_slab = local(x, slab).clone().requires_grad_()
        domain.runs.clear()
        loss_of(model(x_slab, family, slab), local(weight, slab), domain).backward()
        runs[checkpointing] = dict(domain.runs)
        grads[checkpointing] = torch.cat(
            [x_slab.grad.flatten(), *(p.grad.flatten() for p in model.parameters())]
        )
    return {
        "layers": len(model.blocks),
        "checkpointed": runs[True],
        "plain": runs[False],
        "grad_vs_plain": rel(grads[True], grads[False]),
    }


def check_step(name, grid, modes, ranks, shard, mixing, meshes):
    world_size = dist.get_world_size()
    dims = ParallelDims.of(world_size, DomainTiling(*ranks, padding=0.25), shard, mixing)
    domain = meshes(dims)
    x, family, weight = case_data(grid, 2 * dims.dp, seed=3)  # two samples per dp group
    torch.manual_seed(4)
    plain = LadderOperator(config(modes, 0.25))
    torch.manual_seed(4)
    model = parallelize(LadderOperator(config(modes, 0.25)), dims, domain, torch.device("cpu"))
    # The unsharded data-parallel step: the mean over dp groups of each group's loss.
    losses = [
        loss_of(plain(x[2 * g : 2 * g + 2], family[2 * g : 2 * g + 2]), weight[2 * g : 2 * g + 2])
        for g in range(dims.dp)
    ]
    torch.stack(losses).mean().backward()
    grads_plain = torch.cat([p.grad.flatten() for p in plain.parameters()])
    torch.nn.utils.clip_grad_norm_(plain.parameters(), 1.0)
    opt = torch.optim.AdamW(
        plain.parameters(), lr=1e-3, weight_decay=1e-4
    )  # the curriculum default
    opt.step()

    g = dims.dp_rank(dist.get_rank())
    slab = domain.slab(grid)
    rows = slice(2 * g, 2 * g + 2)
    pred = model(local(x[rows], slab), family[rows], slab)
    loss_of(pred, local(weight[rows], slab), domain).backward()
    grads = torch.cat([p.grad.full_tensor().flatten() for p in model.parameters()])
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt = torch.optim.AdamW(
        model.parameters(), lr=1e-3, weight_decay=1e-4
    )  # the curriculum default
    opt.step()
    after = torch.cat([p.full_tensor().flatten() for p in model.parameters()])
    return {
        "param_grad": rel(grads, grads_plain),
        "params_after_step": rel(
            after, torch.cat([p.detach().flatten() for p in plain.parameters()])
        ),
    }


def check_losses_on_two_point_slabs(meshes) -> dict:
    """On 9 x points over 4 ranks (2, 2, 2 and 3: halos from neighbours holding the fewest
    points allowed), the H1 loss and the heat residual equal the unsharded ones, values and
    gradients."""
    from pdeladder.solvers.grid import Grid
    from pdeladder.trainer.losses.data import relative_errors
    from pdeladder.trainer.losses.equation import relative_residual

    dims = ParallelDims.of(4, DomainTiling(x=4, padding=0.25))
    domain = meshes(dims)
    grid = Grid(1, 9, 6, 0.5)
    shape = (grid.snapshots, *grid.shape)
    slab = domain.slab(shape)
    g = torch.Generator().manual_seed(8)
    pred, target = torch.randn(2, 1, *shape, generator=g), torch.randn(2, 1, *shape, generator=g)
    params = torch.tensor([[0.01, 0.2], [0.02, 0.3]])
    out = {}
    for name, fn in (
        ("h1", lambda p, t, **kw: relative_errors(p, t, h1=True, **kw)),
        ("residual", lambda p, t, **kw: relative_residual("heat", p, t, params, grid, **kw)),
    ):
        whole = pred.clone().requires_grad_()
        value = fn(whole, target)
        value.sum().backward()
        part = local(pred, slab).clone().requires_grad_()
        sharded = fn(part, local(target, slab), slab=slab)
        sharded.sum().backward()
        out[f"{name} value"] = rel(sharded, value)
        out[f"{name} grad"] = rel(part.grad, local(whole.grad, slab))
    return out


def check_resume_on_another_mesh(folder: str, meshes) -> dict:
    """A training state saved on a ``dp = world_size`` mesh (FSDP2 only) loads into a
    ``dp = 1 × domain = world_size`` mesh, its parameters sharded over all ranks or whole on
    each: the same parameters and optimizer state."""
    world_size = dist.get_world_size()
    grid, modes = (5, 13, 6, 1), (2, 3, 2, 1)
    states = []
    split = DomainTiling(x=world_size, padding=0.25)
    for dims in (
        ParallelDims(world_size),
        ParallelDims.of(world_size, split),
        ParallelDims.of(world_size, split, "dp"),
    ):
        torch.manual_seed(5 if not states else 6)  # different weights before the load
        model = LadderOperator(config(modes, 0.25))
        model = parallelize(model, dims, meshes(dims) if dims.domain.size > 1 else None, CPU)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        if not states:
            x, family, weight = case_data(grid, 2, seed=7)
            rows = slice(dist.get_rank(), dist.get_rank() + 1)
            loss_of(model(x[rows], family[rows]), weight[rows]).backward()
            opt.step()
            save_training_state(folder, model, opt, {"step": 1})
        else:
            load_training_state(folder, model, opt)
        params = torch.cat([p.full_tensor().flatten() for p in model.parameters()])
        moments = torch.cat(
            [
                opt.state[p][name].full_tensor().flatten()
                for p in model.parameters()
                for name in ("exp_avg", "exp_avg_sq")
            ]
        )
        states.append((params, moments))
    (p0, m0), *loaded = states
    return {
        f"{quantity}, {held}": rel(value, first)
        for held, (p1, m1) in zip(("sharded", "whole"), loaded, strict=True)
        for quantity, value, first in (("params", p1, p0), ("optimizer_state", m1, m0))
    }


def main() -> None:
    rank, world_size, init, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world_size)
    built = {}

    def meshes(dims):  # one mesh per tiling: building one creates process groups
        if dims.domain not in built:
            built[dims.domain] = dims.build("cpu")[1]
        return built[dims.domain]

    results = {
        f"{c[0]}, {mixing}": check_case(*c, mixing, meshes)
        for c in CASES[world_size]
        for mixing in MIXINGS
    }
    results |= {c[0]: check_step(*c, meshes) for c in STEPS[world_size]}
    split = {2: (2, 1), 4: (2, 2)}[world_size]  # time, and time × x
    collectives = {
        mixing: check_checkpointed_collectives((6, 9, 7, 1), (2, 3, 3, 1), split, 2, mixing, meshes)
        for mixing in MIXINGS
    }
    if world_size == 4:
        results["losses, two-point slabs"] = check_losses_on_two_point_slabs(meshes)
    if world_size == 2:
        results["resume on another mesh"] = check_resume_on_another_mesh(
            str(Path(out).with_name("state")), meshes
        )
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"exactness": results, "collectives": collectives}, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
