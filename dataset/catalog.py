"""What a loader reads: the ok samples of chosen groups, split per group into training and
held-out samples, and the :class:`~pdeladder.dataset.slots.SlotLayout` their batches
are laid out in.

A :class:`Catalog` is built once from a store's small arrays (status, checksums, moments,
params, never ``fields``) and is plain data, so it pickles into DataLoader workers and Ray
tasks, which re-open the store themselves.
"""

import fnmatch
import math
from dataclasses import dataclass, field

import numpy as np

from pdeladder.dataset.format import OK
from pdeladder.dataset.moments import family_normalisation
from pdeladder.dataset.slots import SlotLayout
from pdeladder.dataset.store import Store, open_store
from pdeladder.errors import UserInputError
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.registry import get_family


def split(ok: np.ndarray, held_out: float) -> tuple[np.ndarray, np.ndarray]:
    """A group's ok sample indices ``ok`` → (training, held-out): the last ``held_out``
    fraction (rounded up) is held out, none of a group of one sample. The one split rule of
    training, evaluation and the Well export."""
    n_test = math.ceil(held_out * len(ok)) if len(ok) > 1 else 0
    return ok[: len(ok) - n_test], ok[len(ok) - n_test :]


@dataclass(frozen=True)
class SampleRef:
    """One ok sample: its group, index and recorded checksum."""

    group: str
    index: int
    checksum: int


@dataclass(frozen=True)
class GroupSamples:
    """What a loader knows of one group without reading its fields."""

    family: str
    grid: Grid
    train: np.ndarray  # (N_train,) int64: ok samples to train on, ascending
    test: np.ndarray  # (N_test,) int64: held-out ok samples, ascending
    checksums: np.ndarray  # (N,) uint32: recorded checksum of each sample (0 where not ok)
    params: np.ndarray  # (N, P_f) float64 parameter vectors in the family's order
    params_norm: np.ndarray  # (N, n_params) float32: the same in [-1, 1], as the layout has it
    channels: int  # C_f, the group's stored channels

    def refs(self, path: str, indices: np.ndarray) -> list[SampleRef]:
        return [SampleRef(path, int(i), int(self.checksums[i])) for i in indices]


@dataclass
class Catalog:
    """The groups of one store a loader reads (by path, in the order given) and the layout of
    their batches."""

    url: str
    groups: dict[str, GroupSamples]
    layout: SlotLayout
    storage_options: dict | None = field(default=None, repr=False)

    @classmethod
    def build(
        cls,
        url: str,
        *,
        groups: list[str] | None = None,
        layout: SlotLayout | None = None,
        held_out: float = 0.0,
        storage_options: dict | None = None,
    ) -> "Catalog":
        """Index the ok samples of the groups matching ``groups`` (glob patterns on group
        paths such as ``"stage1/*"``; all groups if None), holding out the last ``held_out``
        of each (:func:`split`). ``layout``: the slots and statistics to batch in (a model's);
        by default the groups' families at their dimensions, with the groups' statistics
        (:func:`~pdeladder.dataset.moments.family_normalisation`)."""
        store = open_store(url, storage_options=storage_options)
        opened = [store.group(p) for p in select_groups(store, groups)]
        status = {g.path: g.status() for g in opened}
        if layout is None:
            layout = SlotLayout.for_families(
                sorted({g.family for g in opened}), sorted({g.grid.dim for g in opened})
            )
            layout.set_normalisation(family_normalisation(opened, status))
        entries = {}
        for g in opened:
            layout.family_id(g.family)  # a family the layout has no slots for fails here
            train, test = split(np.flatnonzero(status[g.path] == OK), held_out)
            params = g.params()
            entries[g.path] = GroupSamples(
                family=g.family,
                grid=g.grid,
                train=train,
                test=test,
                checksums=g.checksums(status[g.path]),
                params=params,
                params_norm=layout.normalise_params(get_family(g.family), params),
                channels=len(g.channel_names),
            )
        if not any(len(e.train) + len(e.test) for e in entries.values()):
            raise UserInputError(f"{url}: no ok samples in groups {list(entries) or groups}")
        return cls(url, entries, layout, storage_options)

    def open(self) -> Store:
        return open_store(self.url, storage_options=self.storage_options)

    def refs(self) -> list[SampleRef]:
        """Every training sample, group by group."""
        return [r for path, e in self.groups.items() for r in e.refs(path, e.train)]


def select_groups(store: Store, patterns: list[str] | None) -> list[str]:
    """The store's group paths that match any of ``patterns`` (shell-style, ``fnmatch``: a
    path, or ``refine/heat/*``), in the store's order; all of them when ``patterns`` is None. A
    pattern that matches no group is a UserInputError naming it and the store's groups."""
    paths = store.groups()
    if patterns is None:
        return paths
    for pat in patterns:
        if not any(fnmatch.fnmatchcase(p, pat) for p in paths):
            raise UserInputError(
                f"{store.url}: no group matches {pat!r}; groups: {', '.join(paths) or 'none'}"
            )
    return [p for p in paths if any(fnmatch.fnmatchcase(p, pat) for pat in patterns)]
