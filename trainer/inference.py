"""A trained model's predictions of a batch: plain or symmetrized (:func:`predict`), refined
against the PDE residual (:func:`refined`), or read back from a prediction store
(:func:`stored_prediction`). All are physical ``(B, C, T, X, Y, Z)`` in the layout's channel
slots.
"""

import time
from typing import Any

import numpy as np
import torch

from pdeladder.dataset.catalog import Catalog
from pdeladder.dataset.loader import StoreDataset
from pdeladder.dataset.slots import SlotLayout
from pdeladder.slabs import Slab
from pdeladder.solvers.registry import get_family
from pdeladder.solvers.symmetry import family_group
from pdeladder.trainer.distributed.symmetry import move
from pdeladder.trainer.metrics import channel_nrmse
from pdeladder.trainer.processor import DataProcessor
from pdeladder.trainer.refine import refine_batch


@torch.no_grad()
def predict(
    model: torch.nn.Module,
    processor: DataProcessor,
    batch: dict[str, Any],
    slab: Slab | None = None,
    symmetrize: bool = False,
) -> torch.Tensor:
    """Physical prediction ``(B, C, T, X, Y, Z)`` for a batch already on the device (on the
    box ``slab`` of the global grid, default the whole grid; on a sample split over the domain
    group ``slab.domain``, each rank its ``slab``).

    ``symmetrize``: for a box-symmetric family, the mean over the box's symmetry group of
    ``g⁻¹ model(g inputs)`` (:mod:`pdeladder.solvers.symmetry`; 2, 8 or 48 passes in 1D, 2D or
    3D), which is equivariant exactly where the model is only approximately; on slabs, the same
    mean over the whole group, the elements that move x moving the slabs across the domain
    ranks (:func:`~pdeladder.trainer.distributed.symmetry.move`).
    """
    family = processor.family(batch)
    group = family_group(family, batch["grid"].dim)[: None if symmetrize else 1]
    total = None
    for g in group:
        moved = batch
        if not g.is_identity:
            moved = processor.moved(batch, [g] * len(batch["fields"]), slab)
        x, ids = processor.inputs(moved)
        pred = processor.physical(model(x, ids, slab=slab).float(), ids)
        if not g.is_identity:
            pred = move(pred, g.inverse(), processor.layout.slots, family.vectors, 1, slab)
        total = pred if total is None else total + pred
    return total / len(group)


#: Grid dimensions whose predictions are symmetrized by default (a model trained on augmented
#: batches): 2 and 8 passes in 1D and 2D. Measured on the claims' universal model at 17² in 2D
#: (benchmarks/RESULTS.md, "What symmetrized prediction buys"): 4.4 % lower mean held-out nRMSE,
#: every family lower, for 4.2x the evaluation's time; 3D's 48 passes would cost 6x that again.
SYMMETRIZED_DIMS = (1, 2)


def symmetrized(meta: dict[str, Any], symmetrize: bool | None, dim: int) -> bool:
    """Whether to :func:`predict` a ``dim``-D group symmetrized: as asked, or by default where
    the model trained on symmetry-augmented batches (its checkpoint metadata's ``augmented``)
    and the group is 1D or 2D (:data:`SYMMETRIZED_DIMS`)."""
    if symmetrize is not None:
        return symmetrize
    return bool(meta.get("augmented", False)) and dim in SYMMETRIZED_DIMS


def refined(
    pred: torch.Tensor, truth: torch.Tensor, batch: dict[str, Any], layout: SlotLayout, steps: int
) -> tuple[torch.Tensor, dict[str, Any]]:
    """``pred`` ``(B, C, T, X, Y, Z)`` refined by ``steps`` iterations
    (:func:`~pdeladder.trainer.refine.refine_batch`), and the refinement's record: its steps,
    wall seconds per sample and the group's nRMSE against ``truth`` after each iteration
    (``curve``, from 0)."""
    errors = torch.zeros(steps + 1, *pred.shape[:2], dtype=torch.float64)  # (steps + 1, B, C)

    inside = layout.inside(batch)

    def observe(name: str, rows: torch.Tensor, k: int, fields: torch.Tensor) -> None:
        slots = layout.slot_indices(get_family(name), batch["grid"].dim)
        mask = batch["predicted"][rows][:, slots]
        errors[k, rows[:, None], slots] = channel_nrmse(
            fields.float(), truth[rows][:, slots], mask, None if inside is None else inside[rows]
        ).double()

    started = time.perf_counter()
    out, _ = refine_batch(pred, truth, batch, layout, steps, observe=observe)
    seconds = (time.perf_counter() - started) / len(pred)
    predicted = batch["predicted"].to(torch.float64)
    curve = (errors * predicted).sum((1, 2)) / predicted.sum()
    return out, {"steps": steps, "seconds_per_sample": seconds, "curve": curve.tolist()}


def stored_prediction(
    processor: DataProcessor, url: str, path: str, indices: np.ndarray
) -> torch.Tensor:
    """The predictions of samples ``indices`` of group ``path`` in the prediction store at
    ``url`` (:func:`~pdeladder.trainer.predict.predict_store`), ``(B, C, T, X, Y, Z)``
    physical in ``processor``'s channel slots."""
    catalog = Catalog.build(url, groups=[path], layout=processor.layout)
    return processor.fields(StoreDataset(catalog, batch_size=len(indices)).load(path, indices))
