"""Held-out scores of a model: nRMSE (relative L2 in physical units over the predicted channels)
and the relative PDE residual, per sample.

On a sample split over the ranks of a ``domain`` group, each rank passes its ``slab`` of the
global grid and gets the unsharded scores (the losses' reductions are all-reduced over the
group): every rank of the group returns the same values.
"""

from typing import Any

import torch

from pdeladder.dataset.slots import SlotLayout
from pdeladder.solvers.symmetry import family_group
from pdeladder.trainer.distributed.collectives import DomainGroup
from pdeladder.trainer.distributed.slab import Slab
from pdeladder.trainer.distributed.symmetry import move
from pdeladder.trainer.losses.data import relative_errors
from pdeladder.trainer.losses.equation import family_views, relative_residual
from pdeladder.trainer.training.processor import DataProcessor


@torch.no_grad()
def predict(
    model: torch.nn.Module,
    processor: DataProcessor,
    batch: dict[str, Any],
    slab: Slab | None = None,
    symmetrize: bool = False,
    domain: DomainGroup | None = None,
) -> torch.Tensor:
    """Physical prediction ``(B, C, T, X, Y, Z)`` for a batch already on the device (on the
    box ``slab`` of the global grid, default the whole grid; on a sample split over ``domain``,
    each rank its ``slab``).

    ``symmetrize``: for a box-symmetric family, the mean over the box's symmetry group of
    ``g⁻¹ model(g inputs)`` (:mod:`pdeladder.solvers.symmetry`; 2, 8 or 48 passes in 1D, 2D or
    3D), which is equivariant exactly where the model is only approximately; on slabs, the same
    mean over the whole group, the elements that move x moving the slabs across the ``domain``
    ranks (:func:`~pdeladder.trainer.distributed.symmetry.move`).
    """
    family = processor.family(batch)
    group = family_group(family, batch["grid"].dim)[: None if symmetrize else 1]
    total = None
    for g in group:
        moved = batch
        if not g.is_identity:
            moved = processor.moved(batch, [g] * len(batch["fields"]), slab, domain)
        x, ids = processor.inputs(moved)
        pred = processor.physical(model(x, ids, slab=slab).float(), ids)
        if not g.is_identity:
            pred = move(pred, g.inverse(), processor.layout.slots, family.vectors, 1, slab, domain)
        total = pred if total is None else total + pred
    return total / len(group)


def symmetrized(meta: dict[str, Any], symmetrize: bool | None) -> bool:
    """Whether to :func:`predict` symmetrized: as asked, or by default where the model trained
    on symmetry-augmented batches (its checkpoint metadata's ``augmented``)."""
    return meta.get("augmented", False) if symmetrize is None else symmetrize


def sample_scores(
    pred: torch.Tensor,
    truth: torch.Tensor,
    batch: dict[str, Any],
    layout: SlotLayout,
    *,
    initial: torch.Tensor | None = None,
    slab: Slab | None = None,
    domain: DomainGroup | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample nRMSE (mean over predicted channels) and relative residual, ``(B,)`` each,
    of the prediction ``(B, C, T, X, Y, Z)`` against the batch's physical fields ``truth``
    (the same shape, :meth:`DataProcessor.fields`) on ``slab`` (see the module docstring;
    ``initial``: :func:`~pdeladder.trainer.losses.equation.family_views`)."""
    rel = relative_errors(pred, truth, slab=slab, domain=domain)  # (B, C)
    m = batch["predicted"].to(rel.dtype)
    nrmse = (rel * m).sum(1) / m.sum(1).clamp_min(1.0)
    residual = torch.zeros_like(nrmse)
    views = family_views(pred, truth, batch, layout, slab, initial)
    for name, rows, fields, trivial, params in views:
        residual[rows] = relative_residual(
            name, fields, trivial, params, batch["grid"], slab=slab, domain=domain
        )
    return nrmse, residual


def held_out_sums(
    model: torch.nn.Module,
    processor: DataProcessor,
    batches: list[tuple[dict[str, Any], float]],
    domain: DomainGroup | None = None,
) -> torch.Tensor:
    """``[Σ nRMSE, Σ residual, count]`` over weighted held-out batches (float64, for all-reduce).

    With a ``domain`` group, each batch holds this rank's slab of its samples
    (``domain.slab`` of the batch grid's ``(T, X, Y, Z)``), and every rank of the group returns
    the group's sums: an all-reduce over all ranks counts each group ``domain.size`` times, in
    the sums and the count alike.
    """
    out = torch.zeros(3, dtype=torch.float64)
    was_training = model.training
    model.eval()
    for batch, weight in batches:
        batch = processor.to_device(batch)
        grid = batch["grid"]
        slab = domain.slab((grid.snapshots, *grid.shape)) if domain is not None else None
        pred = predict(model, processor, batch, slab, domain=domain)
        truth = processor.fields(batch)
        nrmse, residual = sample_scores(
            pred, truth, batch, processor.layout, slab=slab, domain=domain
        )
        out += weight * torch.stack(
            [
                nrmse.sum().cpu().double(),
                residual.sum().cpu().double(),
                torch.tensor(float(len(nrmse)), dtype=torch.float64),
            ]
        )
    model.train(was_training)
    return out
