"""Losses and stencils across slab edges: on real gloo process groups, the halo exchange against
the global tensor, and the data losses, the equation loss and the held-out scores of every
family on slabs against the same computation on the whole sample, to 1e-6 relative in float32:
values and the gradients with respect to each rank's own points. Splits along t, x and t×x,
uneven ones (17 points over 4) among them.

One run of four processes checks every case (process start-up, with DOLFINx imported for the
families' residuals, is most of the cost): domain groups of all four, and of two (ranks 0, 1
and 2, 3, subgroups, so global and group ranks differ)."""

import json

from .conftest import run_ranks

RANK = r"""
from mpi4py import MPI  # noqa: F401  (before DOLFINx)
import itertools, json, sys
import numpy as np, torch, torch.distributed as dist
from pdeladder.solvers.registry import family_names, get_family
from pdeladder.trainer.distributed.collectives import DomainGroup
from pdeladder.trainer.distributed.halo import extended, with_halo
from pdeladder.slabs import DomainTiling, bounds
from pdeladder.trainer.losses import equation_loss, relative_errors, relative_loss
from pdeladder.dataset.collate import make_batch
from pdeladder.dataset.slots import SlotLayout
from pdeladder.trainer.processor import DataProcessor
from pdeladder.trainer.training.validation import sample_scores

rank, world_size, init, out, plan = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world_size)
torch.set_num_threads(1)
families = [get_family(n) for n in family_names()]
results = {}


def rel(a, b):
    a, b = a.detach(), b.detach()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def box(f, slab, t_dim, x_dim):
    # the slab's part of a global tensor whose time and x axes are t_dim and x_dim
    f = f.narrow(t_dim, slab.lo[0], slab.hi[0] - slab.lo[0])
    return f.narrow(x_dim, slab.lo[1], slab.hi[1] - slab.lo[1])


def check_halo(name, domain, shape, widths):
    # global (B, C, T, X, Y, Z); widths {axis: (before, after)}; dims: t -> 2, x -> 3
    dims = {"t": 2, "x": 3}
    g = torch.Generator().manual_seed(1)
    full = torch.randn(2, 2, *shape, generator=g)

    def ext_bounds(s):  # the extended box of rank s: [lo, hi) per split axis
        slab = domain.tiling.slab(shape, s)
        out = []
        for a, axis in enumerate(("t", "x")):
            b, f = widths.get(axis, (0, 0))
            split = (domain.tiling.t, domain.tiling.x)[a] > 1
            lo, hi = slab.lo[a], slab.hi[a]
            out.append((lo - b if split and lo > 0 else lo, hi + f if split and hi < shape[a] else hi))
        return out

    slab = domain.slab(shape)
    local = box(full, slab, 2, 3).clone().requires_grad_(True)
    before = domain.sent["halo"]
    if len(widths) == 1:
        ((axis, (b, f)),) = widths.items()
        got = with_halo(local, domain, axis, dims[axis], b, f)
    else:
        got = extended(local, domain, {a: (dims[a], *w) for a, w in widths.items()})
    (t0, t1), (x0, x1) = ext_bounds(domain.index)
    want = full[:, :, t0:t1, x0:x1]
    assert got.shape == want.shape, (name, got.shape, want.shape)
    results[f"halo forward {name}"] = rel(got, want)
    # each rank weights its extended tensor with weights of its own; the gradient on a point
    # is the sum of the weights of every rank whose extended box holds it
    expected = torch.zeros_like(full)
    for s in range(domain.size):
        (a0, a1), (b0, b1) = ext_bounds(s)
        w = torch.randn(2, 2, a1 - a0, b1 - b0, *shape[2:], generator=torch.Generator().manual_seed(100 + s))
        expected[:, :, a0:a1, b0:b1] += w
        if s == domain.index:
            mine = w
    (grad,) = torch.autograd.grad((mine * got).sum(), local)
    results[f"halo backward {name}"] = rel(grad, box(expected, slab, 2, 3))
    if len(widths) == 1:  # bytes: b + f planes each way, forward and backward together
        plane = local.narrow(dims[axis], 0, 1).numel() * local.element_size()
        peers = sum(domain.neighbour(axis, step) is not None for step in (-1, 1))
        expected_bytes = peers * (b + f) * plane
        sent = domain.sent["halo"] - before
        results[f"halo bytes {name}"] = abs(sent - expected_bytes) / expected_bytes


def check_data(name, domain, shape):
    g = torch.Generator().manual_seed(2)
    pred, target = torch.randn(2, 3, *shape, generator=g), torch.randn(2, 3, *shape, generator=g)
    mask = torch.tensor([[True, True, False], [True, False, True]])
    slab = domain.slab(shape)
    # a domain of random points of the box (B, 1, 1, X, Y, Z), and this rank's x range of it
    domain_points = (torch.rand(2, 1, 1, *shape[1:], generator=g) > 0.3).float()
    mine = domain_points.narrow(3, slab.lo[1], slab.hi[1] - slab.lo[1])
    for h1, (tag, inside, local_inside) in itertools.product(
        (False, True), (("", None, None), (" inside", domain_points, mine))
    ):
        whole = pred.clone().requires_grad_(True)
        ref = relative_loss(whole, target, mask, h1=h1, inside=inside)
        (ref_grad,) = torch.autograd.grad(ref, whole)
        local = box(pred, slab, 2, 3).requires_grad_(True)
        loss = relative_loss(local, box(target, slab, 2, 3), mask, h1=h1, inside=local_inside,
                             slab=slab)
        (grad,) = torch.autograd.grad(loss, local)
        kind = ("h1" if h1 else "l2") + tag
        results[f"{kind} errors {name}"] = rel(
            relative_errors(local, box(target, slab, 2, 3), h1, inside=local_inside, slab=slab),
            relative_errors(pred, target, h1, inside=inside))
        results[f"{kind} loss {name}"] = rel(loss, ref)
        results[f"{kind} grad {name}"] = rel(grad, box(ref_grad, slab, 2, 3))


def check_family(name, domain, fam, dim, snapshots, resolution, scores):
    fam_name = fam.name
    grid = fam.grid(dim, resolution, 1 if fam.steady else snapshots)
    layout = SlotLayout.for_families([fam_name], [dim])
    c = len(layout.slot_indices(fam, dim))
    rng = np.random.default_rng(3)
    fields = 0.5 * rng.standard_normal((2, grid.snapshots, c, *grid.shape)).astype(np.float32)
    params = np.stack([fam.Params().vector()] * 2)
    batch = make_batch(layout, fam_name, grid, fields, params, solved=True)
    truth = DataProcessor(layout).fields(batch)  # (B, C, T, X, Y, Z)
    shape = (grid.snapshots, *grid.shape)
    pred = torch.randn(2, len(layout.slots), *shape, generator=torch.Generator().manual_seed(4))
    whole = pred.clone().requires_grad_(True)
    ref, _ = equation_loss(whole, truth, batch, layout)
    (ref_grad,) = torch.autograd.grad(ref, whole)
    slab = domain.slab(shape)
    local = box(pred, slab, 2, 3).requires_grad_(True)
    given = box(truth, slab, 2, 3)
    # snapshot 0 on the slab's x range, which a later time slab does not hold
    initial = truth[:, :, :1].narrow(3, slab.lo[1], slab.hi[1] - slab.lo[1])
    on = {"initial": initial, "slab": slab}
    loss, _ = equation_loss(local, given, batch, layout, **on)
    (grad,) = torch.autograd.grad(loss, local)
    key = f"{fam_name} {dim}d X={resolution} in {name}"
    results[f"equation loss {key}"] = rel(loss, ref)
    results[f"equation grad {key}"] = rel(grad, box(ref_grad, slab, 2, 3))
    if not scores:
        return
    with torch.no_grad():
        scores = sample_scores(local, given, batch, layout, **on)
        for kind, a, b in zip(("nrmse", "residual"), scores, sample_scores(pred, truth, batch, layout)):
            results[f"scores {kind} {key}"] = rel(a, b)


groups = {}
for members, *_ in json.loads(plan):  # every rank creates every group, in the same order
    if tuple(members) not in groups and len(members) < world_size:
        groups[tuple(members)] = dist.new_group(members)
for members, t, x, snapshots, resolution in json.loads(plan):
    if rank not in members:
        continue
    domain = DomainGroup(groups.get(tuple(members)), DomainTiling(t, x), tuple(members), members.index(rank))
    name = f"{t}x{x} T={snapshots} X={resolution}"
    for dim in (1, 2, 3):
        n = resolution if dim < 3 else min(resolution, 9)  # 3D: 9 points (uneven over 2 and 4)
        shape = (snapshots, *(n if a < dim else 1 for a in range(3)))
        if t > 1:
            check_halo(f"t(2,1) {dim}d {name}", domain, shape, {"t": (2, 1)})
        if x > 1:
            check_halo(f"x(1,2) {dim}d {name}", domain, shape, {"x": (1, 2)})
        if t > 1 and x > 1:
            check_halo(f"t(1,1)x(1,1) {dim}d {name}", domain, shape, {"t": (1, 1), "x": (1, 1)})
        check_data(f"{dim}d {name}", domain, shape)
    for fam in families:
        if fam.steady and t > 1:
            continue  # one snapshot: nothing to split in time
        for dim in fam.dims:  # the held-out scores once per family (they reuse both losses)
            n = resolution if dim < 3 else min(resolution, 9)
            check_family(name, domain, fam, dim, snapshots, n, scores=dim == fam.dims[0])

with open(f"{out}.{rank}", "w") as f:
    json.dump(results, f)
dist.barrier()
dist.destroy_process_group()
"""

#: (group's global ranks, ranks along t, ranks along x, snapshots, resolution): every split
#: axis and uneven parts (9 over 2: 4, 5; 17 over 4: 4, 4, 4, 5; 9 over 2 × 2).
PLAN = [
    ((0, 1), 2, 1, 9, 5),
    ((2, 3), 1, 2, 5, 9),
    ((0, 1, 2, 3), 4, 1, 17, 5),
    ((0, 1, 2, 3), 1, 4, 5, 17),
    ((0, 1, 2, 3), 2, 2, 9, 9),
]
WORLD = 4


def test_sharded_losses_equal_the_unsharded_ones(tmp_path):
    run_ranks(["-c", RANK], WORLD, tmp_path, json.dumps(PLAN))
    worst = {}
    for r in range(WORLD):
        for k, v in json.loads((tmp_path / f"results.{r}").read_text()).items():
            worst[k] = max(worst.get(k, 0.0), v)
    for _, t, x, snapshots, resolution in PLAN:
        name = f"{t}x{x} T={snapshots} X={resolution}"
        kinds = {k.split(" ")[0] for k in worst if k.endswith(f" {name}")}
        assert kinds == {"halo", "l2", "h1", "equation", "scores"}, (name, kinds)
    assert max(worst.values()) <= 1e-6, {k: v for k, v in worst.items() if v > 1e-6}
