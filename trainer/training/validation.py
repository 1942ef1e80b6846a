"""Held-out scores of a model: nRMSE (relative L2 in physical units over the predicted channels)
and the relative PDE residual, per sample.

On a sample split over the ranks of a domain group, each rank passes its ``slab`` of the
global grid (which carries the group, ``slab.domain``) and gets the unsharded scores (the
losses' reductions are all-reduced over the group): every rank of the group returns the same
values.
"""

from typing import Any

import torch

from pdeladder.dataset.slots import SlotLayout
from pdeladder.slabs import Slab
from pdeladder.trainer.distributed.collectives import DomainGroup
from pdeladder.trainer.inference import predict
from pdeladder.trainer.losses.equation import family_views, relative_residual
from pdeladder.trainer.metrics import nrmse
from pdeladder.trainer.processor import DataProcessor


def sample_scores(
    pred: torch.Tensor,
    truth: torch.Tensor,
    batch: dict[str, Any],
    layout: SlotLayout,
    *,
    initial: torch.Tensor | None = None,
    slab: Slab | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample nRMSE (mean over predicted channels) and relative residual, ``(B,)`` each,
    of the prediction ``(B, C, T, X, Y, Z)`` against the batch's physical fields ``truth``
    (the same shape, :meth:`DataProcessor.fields`) on ``slab`` (see the module docstring;
    ``initial``: :func:`~pdeladder.trainer.losses.equation.family_views`); the nRMSE over the
    points inside the samples' domain (:meth:`~pdeladder.dataset.slots.SlotLayout.inside`)."""
    inside = layout.inside(batch, truth)  # the part of the domain ``truth`` holds
    rel = nrmse(pred, truth, inside=inside, slab=slab)  # (B, C)
    m = batch["predicted"].to(rel.dtype)
    scores = (rel * m).sum(1) / m.sum(1).clamp_min(1.0)
    residual = torch.zeros_like(scores)
    views = family_views(pred, truth, batch, layout, slab, initial)
    for name, rows, fields, trivial, params in views:
        residual[rows] = relative_residual(name, fields, trivial, params, batch["grid"], slab=slab)
    return scores, residual


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
        slab = domain.slab(grid.space_time) if domain is not None else None
        pred = predict(model, processor, batch, slab)
        truth = processor.fields(batch)
        nrmse, residual = sample_scores(pred, truth, batch, processor.layout, slab=slab)
        out += weight * torch.stack(
            [
                nrmse.sum().cpu().double(),
                residual.sum().cpu().double(),
                torch.tensor(float(len(nrmse)), dtype=torch.float64),
            ]
        )
    model.train(was_training)
    return out
