"""Held-out scores of a model: nRMSE (relative L2 in physical units over the predicted channels)
and the relative PDE residual, per sample."""

from typing import Any

import torch

from pdeladder.trainer.losses.data import relative_errors
from pdeladder.trainer.losses.equation import family_views, relative_residual
from pdeladder.trainer.training.layout import SlotLayout
from pdeladder.trainer.training.processor import DataProcessor


@torch.no_grad()
def predict(
    model: torch.nn.Module, processor: DataProcessor, batch: dict[str, Any]
) -> torch.Tensor:
    """Physical prediction ``(B, C, T, X, Y, Z)`` for a batch already on the device."""
    x, family = processor.inputs(batch)
    return processor.physical(model(x, family).float(), family)


def sample_scores(
    pred: torch.Tensor, batch: dict[str, Any], layout: SlotLayout
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample nRMSE (mean over predicted channels) and relative residual, ``(B,)`` each."""
    truth = batch["fields"].movedim(2, 1)  # (B, C, T, X, Y, Z)
    rel = relative_errors(pred, truth)  # (B, C)
    m = batch["predicted"].to(rel.dtype)
    nrmse = (rel * m).sum(1) / m.sum(1).clamp_min(1.0)
    residual = torch.zeros_like(nrmse)
    for name, rows, fields, trivial, params in family_views(pred, batch, layout):
        residual[rows] = relative_residual(name, fields, trivial, params, batch["grid"])
    return nrmse, residual


def held_out_sums(
    model: torch.nn.Module,
    processor: DataProcessor,
    batches: list[tuple[dict[str, Any], float]],
) -> torch.Tensor:
    """``[Σ nRMSE, Σ residual, count]`` over weighted held-out batches (float64, for all-reduce)."""
    out = torch.zeros(3, dtype=torch.float64)
    was_training = model.training
    model.eval()
    for batch, weight in batches:
        batch = processor.to_device(batch)
        nrmse, residual = sample_scores(predict(model, processor, batch), batch, processor.layout)
        out += weight * torch.stack(
            [
                nrmse.sum().cpu().double(),
                residual.sum().cpu().double(),
                torch.tensor(float(len(nrmse)), dtype=torch.float64),
            ]
        )
    model.train(was_training)
    return out
