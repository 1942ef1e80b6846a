"""A trained model's rollout of one sample from its initial state, in memory: the Python route
that needs no store (``pdeladder predict`` predicts whole stores).

The sample is what a solve would start from: every channel of the family at ``t = 0``
(:meth:`~pdeladder.solvers.family.Family.channels_for`: the state and the input-role
coefficients, a velocity or a permeability), the parameters, and the grid's snapshots. A
steady family's sample has one snapshot; its predicted channels' initial values are ignored.
"""

from pathlib import Path

import numpy as np
import torch

from pdeladder.dataset.collate import make_batch
from pdeladder.dataset.slots import SlotLayout
from pdeladder.errors import UserInputError
from pdeladder.solvers.registry import get_family
from pdeladder.trainer.inference import predict, symmetrized
from pdeladder.trainer.models.checkpoint import load_model
from pdeladder.trainer.predict import covers
from pdeladder.trainer.processor import DataProcessor
from pdeladder.trainer.refine import check_steps, refine_batch


def rollout(
    checkpoint: str | Path,
    family: str,
    initial: np.ndarray,
    *,
    params: dict[str, float] | None = None,
    snapshots: int = 11,
    t_end: float | None = None,
    symmetrize: bool | None = None,
    refine: int = 0,
) -> np.ndarray:
    """The model in ``checkpoint`` predicting ``family`` from ``initial``.

    Args:
        initial: every channel of the family at ``t = 0`` on the unit box's grid of ``n``
            points per axis, boundaries included: ``(C, n)``, ``(C, n, n)`` or ``(C, n, n, n)``
            in physical units.
        params: the family's parameters (defaults for those not given; ranges checked).
        snapshots: time levels ``T``, ``t = 0`` included (1 for a steady family); ``t_end``:
            the last one's time (default: the family's).
        symmetrize: average over the box's symmetries (default: as the model was trained).
        refine: iterations against the family's residual (:mod:`pdeladder.trainer.refine`).

    Returns:
        float32 ``(C, T, n, ...)``: the prediction, with the initial state and the input
        channels as given.
    """
    fam = get_family(family)
    initial = np.asarray(initial, dtype=np.float32)
    dim = initial.ndim - 1
    if dim not in fam.dims or len(set(initial.shape[1:])) != 1:
        raise UserInputError(
            f"{family}: initial must be (C, n), (C, n, n) or (C, n, n, n) with dims "
            f"{fam.dims}, got {initial.shape}"
        )
    channels = fam.channel_names(dim)
    if initial.shape[0] != len(channels):
        raise UserInputError(
            f"{family} in {dim}D has {len(channels)} channels ({', '.join(channels)}), "
            f"initial has {initial.shape[0]}"
        )
    grid = fam.grid(dim, initial.shape[1], snapshots, t_end)
    model, meta = load_model(checkpoint)
    layout = SlotLayout.from_json(meta["layout"])
    if family not in layout.families or not covers(model.config.modes, grid):
        raise UserInputError(
            f"{checkpoint}: the model was not trained on {family} in {dim}D "
            f"(it knows {', '.join(layout.families)})"
        )
    steps = check_steps(refine)
    fields = np.repeat(initial.reshape(1, 1, len(channels), *grid.shape), snapshots, axis=1)
    values = fam.parse_params(params).vector()[None]
    processor = DataProcessor(layout)
    batch = processor.to_device(make_batch(layout, family, grid, fields, values, solved=False))
    model.eval()
    with torch.no_grad():
        pred = predict(model, processor, batch, symmetrize=symmetrized(meta, symmetrize, grid.dim))
        if steps:
            pred, _ = refine_batch(pred, processor.fields(batch), batch, layout, steps)
    slots = layout.slot_indices(fam, dim)
    out = pred[0, slots].numpy()  # (C, T, X, Y, Z), physical
    state = initial.reshape(len(channels), *grid.shape)
    given = np.array([c.role == "input" for c in fam.channels_for(dim)])
    out[given] = state[given][:, None]  # the inputs as given, at every time
    if snapshots > 1:
        out[:, 0] = state  # the initial state as given
    return out.reshape(len(channels), snapshots, *initial.shape[1:]).astype(np.float32)
