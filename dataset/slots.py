"""How many families share one network: channel slots, parameter slots, normalisation.

Every family's channels map to named **slots** (the union of channel names over the families of
a curriculum, in order of first appearance: ``u``, ``v``, ``p``, ``a`` ...), so a batch mixing
families is one ``(B, C_slots, T, X, Y, Z)`` tensor with a ``(B, C_slots)`` mask. Parameters
fill the first ``P_f`` of ``n_params`` slots in the family's order. Fields are normalised per
(family, slot) with the store's statistics, parameters to ``[-1, 1]`` over the family's
admissible range (log-scaled where it spans more than a decade). The channel
:data:`~pdeladder.solvers.family.MASK` of a family whose domain is not its whole box is the one
field left as it is (mean 0, std 1 in every layout): it reaches the model as 0/1, and it selects
the points that losses, scores and statistics count (:meth:`SlotLayout.inside`).

The layout is JSON (stored in every checkpoint), so a model is used with the exact normalisation
it was trained with. :class:`Normaliser` applies its field statistics to batches: the loader's
reader threads and the trainer's data processor use the same one.
"""

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from pdeladder.errors import UserInputError
from pdeladder.solvers.family import MASK, Family
from pdeladder.solvers.registry import get_family


@dataclass
class SlotLayout:
    """Attributes:
    families: family names; a family's id is its index.
    slots: channel slot names.
    n_params: parameter slots.
    normalisation: ``{family: {"mean": [C_slots], "std": [C_slots]}}`` (physical units; 0
        and 1 where the family has no such channel or no data yet). Its JSON key is
        ``normalisation`` (``stats`` in checkpoints written before, still read).
    """

    families: list[str]
    slots: list[str]
    n_params: int
    normalisation: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    @classmethod
    def for_families(cls, names: list[str], dims: list[int]) -> "SlotLayout":
        """The layout of ``names`` (each at the given dimensions), with unit statistics."""
        slots: list[str] = []
        n_params = 0
        for name in dict.fromkeys(names):
            fam = get_family(name)
            for dim in dims:
                if dim in fam.dims:
                    slots += [c for c in fam.channel_names(dim) if c not in slots]
            n_params = max(n_params, len(fam.Params.names()))
        families = list(dict.fromkeys(names))
        unit = {f: {"mean": [0.0] * len(slots), "std": [1.0] * len(slots)} for f in families}
        return cls(families, slots, n_params, unit)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "SlotLayout":
        data = dict(data)
        if "stats" in data:  # a checkpoint written before the key was named normalisation
            data["normalisation"] = data.pop("stats")
        return cls(**data)

    # -- lookups -------------------------------------------------------------------------------

    def family_id(self, name: str) -> int:
        if name not in self.families:
            raise UserInputError(
                f"family {name!r} is not in this model's layout; it knows {', '.join(self.families)}"
            )
        return self.families.index(name)

    def slot_indices(self, family: Family, dim: int) -> list[int]:
        """Slot of each of the family's channels at ``dim``, in the family's channel order."""
        return [self.slots.index(c) for c in family.channel_names(dim)]

    def roles(self, family: Family, dim: int) -> tuple[np.ndarray, np.ndarray]:
        """``(present, predicted)`` boolean ``(C_slots,)`` masks of the family at ``dim``."""
        present = np.zeros(len(self.slots), bool)
        predicted = np.zeros(len(self.slots), bool)
        for ch in family.channels_for(dim):
            present[self.slots.index(ch.name)] = True
            predicted[self.slots.index(ch.name)] = ch.role == "output"
        return present, predicted

    @property
    def mask_slot(self) -> int | None:
        """The slot of the channel :data:`~pdeladder.solvers.family.MASK`, None where no
        family of the layout has one."""
        return self.slots.index(MASK) if MASK in self.slots else None

    def inside(
        self, batch: dict[str, Any], fields: torch.Tensor | None = None
    ) -> torch.Tensor | None:
        """The domain of each sample of ``batch`` (one group's, on its device): its
        :data:`~pdeladder.solvers.family.MASK` channel at the first snapshot of ``fields``
        (default the batch's; a part of them, such as a slab, gives that part's),
        ``(B, 1, 1, X, Y, Z)``, 1 inside and 0 outside; None for a family whose domain is its
        whole box."""
        s = self.mask_slot
        if s is None or not bool(batch["present"][0, s]):
            return None
        return (batch["fields"] if fields is None else fields)[:, s : s + 1, :1]

    @property
    def in_channels(self) -> int:
        """Model input channels: initial state and mask per slot, then the parameter slots."""
        return 2 * len(self.slots) + self.n_params

    # -- normalisation -------------------------------------------------------------------------

    def set_normalisation(self, channels: dict[str, dict[str, tuple[float, float]]]) -> None:
        """Record ``{family: {channel: (mean, std)}}`` (physical units; the store's, from
        :func:`pdeladder.dataset.moments.family_normalisation`) for the families of this
        layout; a std of 0 is recorded as 1, the mask's as 0 and 1 (left as it is)."""
        for name, by_channel in channels.items():
            if name not in self.normalisation:
                continue
            entry = self.normalisation[name]
            for channel, (mean, std) in by_channel.items():
                if channel == MASK:
                    continue  # the unit statistics of :meth:`for_families`
                s = self.slots.index(channel)
                entry["mean"][s] = float(mean)
                entry["std"][s] = float(std) if std > 0 else 1.0

    def normalise_params(self, family: Family, params: np.ndarray) -> np.ndarray:
        """``(N, P_f)`` physical parameters → ``(N, n_params)`` in ``[-1, 1]``, zero padded."""
        out = np.zeros((params.shape[0], self.n_params), np.float32)
        for j, (lo, hi) in enumerate(family.Params.ranges().values()):
            v = params[:, j]
            if lo is None or hi is None or hi == lo:
                continue
            if lo > 0 and hi / lo > 10:
                v, lo, hi = np.log(v), math.log(lo), math.log(hi)
            out[:, j] = 2 * (v - lo) / (hi - lo) - 1
        return out


class Normaliser:
    """A layout's field statistics as tensors ``(families, C_slots)`` on ``device``, applied to
    batches in both directions."""

    # Both directions work on ``(B, C, T·X·Y·Z)`` views: on the CPU, broadcasting
    # per-(sample, channel) statistics over six axes with trailing singletons is about 20x
    # slower than over the points flattened (measured with torch 2.9, one thread), the same
    # values.

    def __init__(self, layout: SlotLayout, device: torch.device | str = "cpu"):
        n = len(layout.families)
        norm = [layout.normalisation[f] for f in layout.families]
        self.mean = torch.tensor([s["mean"] for s in norm], device=device).reshape(n, -1)
        self.std = torch.tensor([s["std"] for s in norm], device=device).reshape(n, -1)

    def mean_std(self, family: torch.Tensor, shape: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
        """Mean and std of each sample's family, ``(B, C)`` viewed as ``shape``."""
        return self.mean[family].view(shape), self.std[family].view(shape)

    def statistics(
        self, family: torch.Tensor, present: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and std ``(B, C, 1)`` of samples of ``family`` ``(B,)`` with slots
        ``present`` ``(B, C)``, as :meth:`apply` takes them: the mean is 0 in absent slots, so
        their zeros stay 0. Samples of one group share theirs (``B = 1`` broadcasts)."""
        b, c = present.shape
        mean, std = self.mean_std(family, (b, c, 1))
        return mean * present.view(b, c, 1), std

    def normalise(
        self,
        fields: torch.Tensor,
        family: torch.Tensor,
        present: torch.Tensor,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Physical ``fields`` ``(B, C, T, X, Y, Z)`` of samples of ``family`` ``(B,)`` with slots
        ``present`` ``(B, C)`` normalised, same layout (into ``out``, contiguous, when given);
        absent slots hold zeros and stay 0."""
        return self.apply(fields, *self.statistics(family, present), out=out)

    @staticmethod
    def apply(
        fields: torch.Tensor,
        mean: torch.Tensor,
        std: torch.Tensor,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``(fields - mean) / std`` of ``(B, C, T, X, Y, Z)`` fields with their
        :meth:`statistics`, same layout (into ``out``, contiguous, when given): two passes,
        no temporary."""
        b, c, *rest = fields.shape
        flat = fields.reshape(b, c, math.prod(rest))
        dest = None if out is None else out.view(flat.shape)
        return torch.sub(flat, mean, out=dest).div_(std).view(fields.shape)

    def physical(self, pred: torch.Tensor, family: torch.Tensor) -> torch.Tensor:
        """Normalised ``(B, C, T, X, Y, Z)`` → physical units, same layout."""
        b, c, *rest = pred.shape
        mean, std = self.mean_std(family, (b, c, 1))
        return (pred.reshape(b, c, math.prod(rest)) * std + mean).view(pred.shape)
