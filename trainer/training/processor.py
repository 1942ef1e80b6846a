"""The data processor: batch → model inputs (normalised, on the device) and model output →
physical fields. The training loop only calls ``inputs`` → model → ``physical`` → losses.

A **batch** is the loader's dict (:mod:`pdeladder.dataset.loader` documents its keys and
shapes; :func:`pdeladder.dataset.collate.make_batch` makes one without a store): physical
``fields`` ``(B, T, C, X, Y, Z)`` in the layout's channel slots, all of one group's grid.
"""

from typing import Any

import torch

from pdeladder.dataset.slots import Normaliser, SlotLayout


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

    def normalised(self, batch: dict[str, Any]) -> torch.Tensor:
        """The batch's fields normalised, in model layout ``(B, C, T, X, Y, Z)`` (0 where absent):
        the loader's ``normalised`` where its threads made it (``StoreDataset(normalise=True)``,
        with the same :class:`~pdeladder.dataset.slots.Normaliser`), else normalised here."""
        if "normalised" in batch:
            return batch["normalised"].to(self.device, non_blocking=True).movedim(2, 1)
        fields, family, present = batch["fields"], batch["family"], batch["present"]
        return self.normaliser.normalise(fields, family, present).movedim(2, 1)

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

    def physical(self, pred: torch.Tensor, family: torch.Tensor) -> torch.Tensor:
        """Model output ``(B, C, T, X, Y, Z)`` (normalised) → physical units, same layout."""
        return self.normaliser.physical(pred, family)
