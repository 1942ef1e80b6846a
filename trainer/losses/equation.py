"""Equation loss: the family's strong-form PDE residual (from ``solvers/``) on the prediction.

The residual is made dimensionless by that of the *trivial* prediction, the initial state held
constant in time (zero output for steady problems, where the coefficients alone drive the
residual): ``L = ‖R(u_pred)‖² / ‖R(u_trivial)‖²`` per sample, mean squares over the residual's
points. It is 1 for a model that learned nothing about the dynamics and 0 for an exact solution;
solver data sit at the level of the discretisation error.
"""

from typing import Any

import torch

from pdeladder.solvers.registry import get_family
from pdeladder.trainer.training.layout import SlotLayout


def relative_residual(
    family_name: str, fields: torch.Tensor, reference: torch.Tensor, params: torch.Tensor, grid
) -> torch.Tensor:
    """``‖R(fields)‖² / ‖R(reference)‖²`` per sample.

    Args:
        fields, reference: ``(b, T, C_f, X, Y, Z)`` physical fields of one family (all its
            channels, inputs included).
        params: ``(b, P_f)`` physical parameters.

    Returns:
        ``(b,)``.
    """
    fam = get_family(family_name)
    res = fam.residual(fields, params, grid)  # (b, T', R, X', Y', Z')
    ref = fam.residual(reference, params, grid)
    dims = tuple(range(1, res.ndim))
    return res.square().mean(dims) / ref.square().mean(dims).clamp_min(1e-20)


def family_views(
    pred: torch.Tensor, batch: dict[str, Any], layout: SlotLayout
) -> list[tuple[str, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Split a mixed batch by family into the layout ``residual`` takes.

    Args:
        pred: physical prediction ``(B, C_slots, T, X, Y, Z)``.

    Returns:
        ``[(family, rows (b,), fields (b, T, C_f, X, Y, Z), trivial (same), params (b, P_f))]``,
        with the input-role channels taken from the batch, not the prediction.
    """
    grid = batch["grid"]
    out = []
    for fid in torch.unique(batch["family"]).tolist():
        name = layout.families[fid]
        fam = get_family(name)
        rows = (batch["family"] == fid).nonzero().squeeze(1)
        slots = torch.tensor(layout.slot_indices(fam, grid.dim), device=pred.device)
        given = batch["fields"][rows][:, :, slots]  # (b, T, C_f, X, Y, Z)
        predicted = batch["predicted"][rows][:, slots][:, None, :, None, None, None]
        fields = torch.where(predicted, pred[rows][:, slots].movedim(1, 2), given)
        steady = given.shape[1] == 1
        held = torch.zeros_like(given) if steady else given[:, :1].expand_as(given)
        trivial = torch.where(predicted, held, given)
        params = batch["params"][rows][:, : len(fam.Params.names())]
        out.append((name, rows, fields, trivial, params))
    return out


def equation_loss(
    pred: torch.Tensor, batch: dict[str, Any], layout: SlotLayout
) -> tuple[torch.Tensor, dict[str, float]]:
    """Mean relative residual of the physical prediction ``(B, C, T, X, Y, Z)`` over the batch.

    Returns:
        (scalar loss, ``{family: mean relative residual}`` for logging).
    """
    total = pred.new_zeros(())
    per_family = {}
    for name, _, fields, trivial, params in family_views(pred, batch, layout):
        r = relative_residual(name, fields, trivial, params, batch["grid"])
        total = total + r.sum()
        per_family[name] = float(r.mean().detach())
    return total / pred.shape[0], per_family
