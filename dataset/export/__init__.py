"""Export of stored samples into other tools' formats: ParaView (``vtk``: a ``.pvd`` time series
of ``.vti`` image files), The Well (``the-well``: one HDF5 dataset per group) and PDEBench
(``pdebench``: one HDF5 file per group).

Every exporter checks its whole input before it writes a byte (:func:`prepare_out`, the group and
sample checks), then streams: one sample, or one snapshot, in memory at a time. Each group's
files (vtk: the sample's) are written under a :data:`PART` name, renamed once complete and then
recorded (:data:`LEDGER`): a rerun of an interrupted export of the same job keeps what was
recorded, from samples unchanged since, and writes the rest.
"""

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pdeladder.dataset.ledger import Ledger
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
#: An export's record of the groups it wrote (:class:`~pdeladder.dataset.ledger.Ledger`).
LEDGER = ".pdeladder-exported.json"
#: The suffix of a file or folder being written: renamed to its name once complete.
PART = ".part"


def export_job(tool: str, store_url: str, **settings: Any) -> dict[str, Any]:
    """What makes two exports the same job: the format, the store and the ``settings`` as asked
    (groups, held-out share, sample)."""
    return {"format": tool, "store": store_url, **settings}


def check_out(out: Path, store_url: str, force: bool, job: dict[str, Any]) -> None:
    """Refuse an ``out`` that overlaps the store at ``store_url``, holds anything but a
    previous export, or holds another ``job``'s export (that one unless ``force``; the same
    job's is completed); touches nothing."""
    previous = check_output(out, COMMAND, [store_url], force=force, resume=True)
    if previous and not force and Ledger.recorded_job(Path(out, LEDGER)) != job:
        raise UserInputError(
            f"{out}: holds another export (format, groups or settings); pass --force to replace it"
        )


def prepare_out(out: Path, store_url: str, force: bool, job: dict[str, Any]) -> Ledger:
    """Replace a previous export (``force``), complete the same ``job``'s (its parts being
    written when it stopped removed), or create the output folder with its marker; call after
    every input check passed. Returns the export's record."""
    check_out(out, store_url, force, job)
    previous = make_output(out, COMMAND, [store_url], force=force, resume=True)
    for part in sorted(Path(out).glob(f"*{PART}")):
        shutil.rmtree(part) if part.is_dir() else part.unlink()
    return Ledger.open(Path(out, LEDGER), job, previous)


def written(made: Path, path: Path) -> None:
    """Put the complete file or folder ``made`` (a ``PART`` name) at ``path``, replacing what
    an interrupted export left there."""
    if path.is_dir():
        shutil.rmtree(path)
    os.replace(made, path)


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
