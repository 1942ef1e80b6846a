"""Export of stored samples into other tools' formats: ParaView (``vtk``: a ``.pvd`` time series
of ``.vti`` image files), The Well (``the-well``: one HDF5 dataset per group) and PDEBench
(``pdebench``: one HDF5 file per group).

Every exporter checks its whole input before it writes a byte (:func:`prepare_out`, the group and
sample checks), then streams: one sample, or one snapshot, in memory at a time.
"""

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pdeladder.errors import UserInputError
from pdeladder.outputs import check_output, make_output

if TYPE_CHECKING:
    from pdeladder.dataset.group import Group
    from pdeladder.dataset.store import Store

#: ``store export --format`` choices.
FORMATS = ("vtk", "the-well", "pdebench")

#: ``progress(total)`` is called once with the number of steps and returns ``advance(n)``.
Progress = Callable[[int], Callable[[int], None]]


def no_progress(total: int) -> Callable[[int], None]:
    return lambda n: None


def check_format(name: str) -> str:
    if name not in FORMATS:
        raise UserInputError(f"--format {name!r}: unknown; choose one of {', '.join(FORMATS)}")
    return name


#: The command named in the marker of an export's folder (:mod:`pdeladder.outputs`).
COMMAND = "store export"


def check_out(out: Path, store_url: str, force: bool) -> None:
    """Refuse an ``out`` that overlaps the store at ``store_url`` or holds anything but a
    previous export (that one unless ``force``); touches nothing."""
    check_output(out, COMMAND, [store_url], force=force)


def prepare_out(out: Path, store_url: str, force: bool) -> None:
    """Replace a previous export (``force``) or create the output folder, with its marker; call
    after every input check passed."""
    make_output(out, COMMAND, [store_url], force=force)


def open_groups(store: "Store", paths: list[str] | None) -> list["Group"]:
    """The groups ``paths`` (default all) of ``store``; refuses an unknown group, no group at
    all, and a group without ok samples (before anything is written)."""
    from pdeladder.dataset import format as fmt

    opened = [store.group(p) for p in paths or store.groups()]
    if not opened:
        raise UserInputError(f"{store.url}: no groups to export")
    for g in opened:
        if not (g.status() == fmt.OK).any():
            raise UserInputError(f"{g.where()}: no ok samples to export")
    return opened


def spatial(u: np.ndarray, dim: int) -> np.ndarray:
    """``(..., X, Y, Z)`` → ``(..., *space)``: the unit axes past ``dim`` dropped (a view)."""
    return u[(..., *[slice(None)] * dim, *[0] * (3 - dim))]
