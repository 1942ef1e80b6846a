"""The data processor: batch → model inputs (normalised, on the device) and model output →
physical fields. The training loop only calls ``inputs`` → model → ``physical`` → losses.

A **batch** is the loader's dict (:mod:`pdeladder.dataset.loader` documents its keys and
shapes; :func:`pdeladder.dataset.collate.make_batch` makes one without a store): physical
``fields`` ``(B, C, T, X, Y, Z)`` in the layout's channel slots, all of one group's grid.

One axis order from the batch on: the collate (:func:`~pdeladder.dataset.collate.make_batch`,
the loader's reads) transposes each of the store's ``(T, C, X, Y, Z)`` samples into the batch's
``(B, C, T, X, Y, Z)`` while slotting it, and everything after works in that order (the
normalisation, the model, the data and equation losses, every family's residual, the held-out
scores, evaluation); prediction turns each sample back to ``(T, C, X, Y, Z)`` only where it
writes it (:mod:`pdeladder.trainer.predict`).
"""

from collections.abc import Sequence
from typing import Any

import torch

from pdeladder.dataset.slots import Normaliser, SlotLayout
from pdeladder.slabs import Slab
from pdeladder.solvers.family import Family
from pdeladder.solvers.registry import get_family
from pdeladder.solvers.symmetry import BoxSymmetry
from pdeladder.trainer.distributed.symmetry import move


class DataProcessor:
    """Normalisation (the layout's :class:`~pdeladder.dataset.slots.Normaliser`) and device
    placement for one :class:`SlotLayout`."""

    def __init__(self, layout: SlotLayout, device: torch.device | str = "cpu"):
        self.layout = layout
        self.device = torch.device(device)
        self.normaliser = Normaliser(layout, self.device)

    def to_device(self, batch: dict[str, Any]) -> dict[str, Any]:
        return {
            k: v.to(self.device, non_blocking=True) if isinstance(v, torch.Tensor) else v
            for k, v in batch.items()
        }

    def fields(self, batch: dict[str, Any]) -> torch.Tensor:
        """The batch's physical fields ``(B, C, T, X, Y, Z)`` on the device."""
        return batch["fields"].to(self.device, non_blocking=True)

    def inside(self, batch: dict[str, Any]) -> torch.Tensor | None:
        """The batch's domain ``(B, 1, 1, X, Y, Z)`` on the device, 1 inside and 0 outside, or
        None for a family whose domain is its whole box
        (:meth:`~pdeladder.dataset.slots.SlotLayout.inside`): what the losses and scores take
        as ``inside``."""
        inside = self.layout.inside(batch)
        return None if inside is None else inside.to(self.device, non_blocking=True)

    def normalised(self, batch: dict[str, Any]) -> torch.Tensor:
        """The batch's fields normalised, ``(B, C, T, X, Y, Z)`` (0 where absent): the loader's
        ``normalised`` where its threads made it (``StoreDataset(normalise=True)``, with the
        same :class:`~pdeladder.dataset.slots.Normaliser`), else normalised here."""
        if "normalised" in batch:
            return batch["normalised"].to(self.device, non_blocking=True)
        fields, family, present = batch["fields"], batch["family"], batch["present"]
        return self.normaliser.normalise(fields, family, present)

    def inputs(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """Model inputs ``x`` ``(B, 2C + n_params, T, X, Y, Z)`` and ``family`` ``(B,)``.

        Channels: the initial state per slot (for steady problems only the input-role slots,
        since snapshot 0 is the solution), the slot mask, the normalised parameters; each
        broadcast over ``(T, X, Y, Z)``.
        """
        norm = self.normalised(batch)  # (B, C, T, X, Y, Z)
        b, c, t, *space = norm.shape
        keep = batch["present"] if t > 1 else batch["present"] & ~batch["predicted"]
        state = (norm[:, :, :1] * keep[:, :, None, None, None, None]).expand(b, c, t, *space)
        mask = batch["present"].to(norm.dtype)[:, :, None, None, None, None].expand_as(state)
        params = batch["params_norm"][:, :, None, None, None, None].expand(b, -1, t, *space)
        return torch.cat([state, mask, params], dim=1), batch["family"]

    def family(self, batch: dict[str, Any]) -> Family:
        """The family of ``batch``'s samples (a batch is one group: one family and grid)."""
        return get_family(self.layout.families[int(batch["family"][0])])

    def moved(
        self,
        batch: dict[str, Any],
        moves: Sequence[BoxSymmetry],
        slab: Slab | None = None,
    ) -> dict[str, Any]:
        """``batch`` with sample ``i``'s fields moved by ``moves[i]``, a symmetry of the box
        (:mod:`pdeladder.solvers.symmetry`); its ``normalised`` fields, where it holds them,
        made again from the moved ones. Parameters are unchanged. On this rank's ``slab`` of a
        sample split over ``slab.domain``: its slab of the moved sample
        (:func:`~pdeladder.trainer.distributed.symmetry.move`; every rank of the group passes
        the same ``moves``)."""
        slots, fields, family = self.layout.slots, batch["fields"], self.family(batch)
        out = torch.empty_like(fields)  # (B, C, T, X, Y, Z)
        for g in dict.fromkeys(moves):  # each element once, in the same order on every rank
            rows = torch.tensor([i for i, m in enumerate(moves) if m == g], device=fields.device)
            out[rows] = move(fields[rows], g, slots, family.vectors, 1, slab)
        moved = {**batch, "fields": out}
        if "normalised" in batch:
            moved["normalised"] = self.normaliser.normalise(out, batch["family"], batch["present"])
        return moved

    def physical(self, pred: torch.Tensor, family: torch.Tensor) -> torch.Tensor:
        """Model output ``(B, C, T, X, Y, Z)`` (normalised) → physical units, same order."""
        return self.normaliser.physical(pred, family)
