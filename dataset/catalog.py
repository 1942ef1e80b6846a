"""What a loader reads: the ok samples of chosen groups, their slots and their statistics.

A :class:`Catalog` is built once from a store's small arrays (status, checksums, moments, never
``fields``) and is plain data, so it pickles into DataLoader workers and Ray tasks, which
re-open the store themselves.

Slots let one batch hold several families: channel slots are the union of the families'
channel names (a name always has the same slot), parameter slots are positions ``0..P_max-1``.
"""

import fnmatch
from dataclasses import dataclass, field

import numpy as np

from pdeladder.dataset.format import OK
from pdeladder.dataset.moments import family_stats
from pdeladder.dataset.store import Store, open_store
from pdeladder.errors import UserInputError


@dataclass(frozen=True)
class SampleRef:
    """One ok sample: its group, index, recorded checksum and grid key ``(dim, resolution, T)``."""

    group: str
    index: int
    checksum: int
    bucket: tuple[int, int, int]


@dataclass(frozen=True)
class GroupLayout:
    """How one group's samples map into slots, and how to normalise them."""

    family: str
    family_id: int
    channel_slots: np.ndarray  # (C_group,) int: slot of each of the group's channels
    input_slots: np.ndarray  # (C_group,) bool: channel is an input (coefficient) field
    n_params: int
    mean: np.ndarray  # (C_group,) float32, over every ok sample of the family
    std: np.ndarray  # (C_group,) float32, > 0
    t_end: float


@dataclass(frozen=True)
class SlotRows:
    """A group's rows of a batch, in slot order (see :mod:`pdeladder.dataset.loader`)."""

    channel_mask: np.ndarray  # (C,) bool
    input_mask: np.ndarray  # (C,) bool
    mean: np.ndarray  # (C,) float32, 0 in unused slots
    std: np.ndarray  # (C,) float32, 1 in unused slots
    param_mask: np.ndarray  # (P,) bool
    slots: slice | np.ndarray  # the group's channel slots: a slice where they form a range
    full: bool  # the group fills every channel slot


@dataclass
class Catalog:
    url: str
    refs: list[SampleRef]
    groups: dict[str, GroupLayout]
    families: list[str]
    channels: list[str]
    n_params: int
    params: dict[str, np.ndarray]  # group path -> (N, P_group) float64 parameter vectors
    storage_options: dict | None = field(default=None, repr=False)
    _rows: dict[str, SlotRows] = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def build(
        cls,
        url: str,
        *,
        groups: list[str] | None = None,
        storage_options: dict | None = None,
    ) -> "Catalog":
        """Index the ok samples of the groups matching ``groups`` (glob patterns on group
        paths such as ``"stage1/*"``; all groups if None)."""
        store = open_store(url, storage_options=storage_options)
        chosen = _select(store, groups)
        opened = [store.group(p) for p in chosen]
        families = sorted({g.family for g in opened})
        channels: list[str] = []
        for fam in families:
            for g in opened:
                if g.family == fam:
                    channels += [c for c in g.channel_names if c not in channels]
        status = {g.path: g.status() for g in opened}
        stats = family_stats(opened, status)
        refs, layouts, params = [], {}, {}
        for g in opened:
            params[g.path] = g.params()
            ok = np.flatnonzero(status[g.path] == OK)
            sums = g.checksums(status[g.path])
            bucket = (g.grid.dim, g.grid.resolution, g.grid.snapshots)
            refs += [SampleRef(g.path, int(i), int(sums[i]), bucket) for i in ok]
            by_channel = stats[g.family]
            layouts[g.path] = GroupLayout(
                family=g.family,
                family_id=families.index(g.family),
                channel_slots=np.array([channels.index(c) for c in g.channel_names]),
                input_slots=np.array([c["role"] == "input" for c in g.attrs["channels"]]),
                n_params=len(g.param_names),
                mean=np.array([by_channel[c][0] for c in g.channel_names], dtype=np.float32),
                std=np.array([by_channel[c][1] for c in g.channel_names], dtype=np.float32),
                t_end=g.grid.t_end,
            )
        if not refs:
            raise UserInputError(f"{url}: no ok samples in groups {chosen or groups}")
        n_params = max(lay.n_params for lay in layouts.values())
        return cls(url, refs, layouts, families, channels, n_params, params, storage_options)

    def open(self) -> Store:
        return open_store(self.url, storage_options=self.storage_options)

    def rows(self, path: str) -> SlotRows:
        """Group ``path``'s batch rows, computed once."""
        if path not in self._rows:
            lay, C = self.groups[path], len(self.channels)
            slots = lay.channel_slots
            first = int(slots[0])
            contiguous = np.array_equal(slots, np.arange(first, first + len(slots)))
            channel_mask, input_mask = np.zeros(C, dtype=bool), np.zeros(C, dtype=bool)
            mean, std = np.zeros(C, dtype=np.float32), np.ones(C, dtype=np.float32)
            channel_mask[slots], input_mask[slots] = True, lay.input_slots
            mean[slots], std[slots] = lay.mean, lay.std
            self._rows[path] = SlotRows(
                channel_mask,
                input_mask,
                mean,
                std,
                np.arange(self.n_params) < lay.n_params,
                slice(first, first + len(slots)) if contiguous else slots,
                len(slots) == C,
            )
        return self._rows[path]


def _select(store: Store, patterns: list[str] | None) -> list[str]:
    paths = store.groups()
    if patterns is None:
        return paths
    chosen = [p for p in paths if any(fnmatch.fnmatchcase(p, pat) for pat in patterns)]
    if not chosen:
        raise UserInputError(
            f"{store.url}: no group matches {patterns}; groups: {', '.join(paths) or 'none'}"
        )
    return chosen
