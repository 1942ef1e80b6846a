"""The trivial baselines every nRMSE stands beside, and the verdict whether a model beats one.

The baseline of a time-dependent group is persistence ``u(t) = u(0)``; of a steady group, the
mean field of its training samples (the trainer's held-out rule,
:func:`pdeladder.dataset.catalog.split`; for a group the model never trained on, the mean field
of all its samples, the evaluated ones among them, which is harder to beat).
"""

import numpy as np
import torch

from pdeladder.dataset.loader import StoreDataset
from pdeladder.trainer.processor import DataProcessor

#: Relative margin by which a model's nRMSE must undercut its baseline's to beat it.
BEAT_MARGIN = 1e-4


def baseline_name(steady: bool, seen: bool) -> str:
    """What a group's baseline is, as the report names it (``seen``: the model trained on the
    group, so its mean field is the training samples')."""
    if not steady:
        return "persistence"
    return "training mean field" if seen else "group mean field"


def mean_field(
    processor: DataProcessor,
    data: StoreDataset,
    path: str,
    indices: np.ndarray,
    batch_size: int = 8,
) -> torch.Tensor:
    """Mean over samples ``indices`` of ``data``'s group ``path``, ``(C, T, X, Y, Z)``
    physical, in channel slots; read batch by batch (float64 sum). In a domain that is not its
    whole box, each point's mean is over the samples it is inside of (0 where there are none)."""
    total = count = None
    for start in range(0, len(indices), batch_size):
        batch = data.load(path, indices[start : start + batch_size])
        fields, inside = processor.fields(batch), processor.inside(batch)
        part = fields.sum(0, dtype=torch.float64)
        total = part if total is None else total + part
        if inside is not None:  # (1, 1, X, Y, Z): the samples inside, at each point
            inside = (inside != 0).sum(0, dtype=torch.float64)
            count = inside if count is None else count + inside
    return (total / (len(indices) if count is None else count.clamp_min(1.0))).float()


def baseline_prediction(truth: torch.Tensor, mean: torch.Tensor | None) -> torch.Tensor:
    """The trivial baseline of a batch's physical fields ``truth`` ``(B, C, T, X, Y, Z)``, the
    same shape: persistence of snapshot 0 when the batch has several snapshots, else the steady
    mean field ``mean`` ``(C, 1, X, Y, Z)``."""
    if truth.shape[2] > 1:
        return truth[:, :, :1].expand_as(truth)
    return mean[None].expand_as(truth)


def ratio(model: float, baseline: float) -> float | None:
    """model / baseline nRMSE; None where the baseline is exact (nothing to beat)."""
    return model / baseline if baseline > 0 else None


def beats(model: float, baseline: float) -> bool:
    """Whether the model's nRMSE is below its baseline's by more than float32 rounding (a model
    that computes the baseline itself, as an untrained zero update does, does not beat it)."""
    return model < (1 - BEAT_MARGIN) * baseline
