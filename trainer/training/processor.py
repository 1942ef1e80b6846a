"""The data processor: batch → model inputs (normalised, on the device) and model output →
physical fields. The training loop only calls ``inputs`` → model → ``physical`` → losses.

A **batch** is the loader's dict (:mod:`pdeladder.dataset.loader` documents its keys and
shapes; :func:`pdeladder.dataset.collate.make_batch` makes one without a store): physical
``fields`` ``(B, T, C, X, Y, Z)`` in the layout's channel slots, all of one group's grid.
"""

import math
from typing import Any

import torch

from pdeladder.trainer.training.layout import SlotLayout


class DataProcessor:
    """Normalisation and device placement for one :class:`SlotLayout`."""

    def __init__(self, layout: SlotLayout, device: torch.device | str = "cpu"):
        self.layout = layout
        self.device = torch.device(device)
        n = len(layout.families)
        self.mean = torch.tensor([layout.stats[f]["mean"] for f in layout.families]).reshape(n, -1)
        self.std = torch.tensor([layout.stats[f]["std"] for f in layout.families]).reshape(n, -1)
        self.mean, self.std = self.mean.to(self.device), self.std.to(self.device)

    def to_device(self, batch: dict[str, Any]) -> dict[str, Any]:
        return {
            k: v.to(self.device, non_blocking=True) if isinstance(v, torch.Tensor) else v
            for k, v in batch.items()
        }

    def _stats(self, family: torch.Tensor, shape: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
        """Mean and std of each sample's family, ``(B, C)`` viewed as ``shape``."""
        return self.mean[family].view(shape), self.std[family].view(shape)

    # Both directions work on views with the grid points flattened: on the CPU, broadcasting
    # per-(sample, channel) statistics over six axes with trailing singletons is about 20x
    # slower than over four (measured with torch 2.9, one thread), the same values.

    def normalised(self, batch: dict[str, Any]) -> torch.Tensor:
        """The batch's fields normalised, in model layout ``(B, C, T, X, Y, Z)`` (0 where absent):
        the loader's ``normalised`` where its threads made it (``StoreDataset(normalise=True)``,
        by :meth:`normalise`), else normalised here."""
        if "normalised" in batch:
            return batch["normalised"].to(self.device, non_blocking=True).movedim(2, 1)
        return self.normalise(batch["fields"], batch["family"], batch["present"]).movedim(2, 1)

    def normalise(
        self,
        fields: torch.Tensor,
        family: torch.Tensor,
        present: torch.Tensor,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Physical ``fields`` ``(B, T, C, X, Y, Z)`` of samples of ``family`` ``(B,)`` with slots
        ``present`` ``(B, C)`` normalised, same layout (into ``out``, contiguous, when given)."""
        b, t, c, *space = fields.shape
        per = (b, 1, c, 1)
        mean, std = self._stats(family, per)
        mean = mean * present.view(per)  # absent slots hold zeros: they stay 0
        flat = fields.reshape(b, t, c, math.prod(space))
        dest = None if out is None else out.view(flat.shape)
        return torch.sub(flat, mean, out=dest).div_(std).view(fields.shape)

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
        b, c, *rest = pred.shape
        mean, std = self._stats(family, (b, c, 1))
        return (pred.reshape(b, c, math.prod(rest)) * std + mean).view(pred.shape)
