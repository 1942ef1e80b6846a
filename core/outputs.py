"""Where a command may write: the one rule for every ``--out``.

An output never is, contains or lies inside one of the command's inputs (a store, a model
folder). A command makes its output folder with :func:`make_output`, which writes a marker
naming the command before anything else: the file :data:`MARKER`, or in a Zarr store (where
zarr warns about any foreign object) the root attribute :data:`ATTRIBUTE`. ``--force`` replaces
only a folder holding that command's marker; any other non-empty folder is refused, with or
without ``--force``. Paths are fsspec URLs (plain paths, ``file://``, ``memory://``, ``s3://``).
"""

import json
import os
from collections.abc import Iterable
from pathlib import PurePosixPath

import fsspec

from pdeladder.errors import UserInputError

#: The marker file a command writes at the top of its output folder.
MARKER = ".pdeladder-output.json"
#: The root attribute that marks a Zarr store as a command's output.
ATTRIBUTE = "pdeladder_output"


def _located(url: str | os.PathLike) -> tuple[fsspec.AbstractFileSystem, str, tuple, PurePosixPath]:
    """(filesystem, path, protocol, comparable path): local paths with symlinks resolved."""
    fs, path = fsspec.core.url_to_fs(os.fspath(url))
    protocol = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    real = os.path.realpath(path) if "file" in protocol else "/" + path.strip("/")
    return fs, path, protocol, PurePosixPath(real)


def check_apart(
    out: str | os.PathLike, inputs: Iterable[str | os.PathLike], *, around: bool = True
) -> None:
    """Refuse an ``out`` that is, contains or lies inside one of ``inputs``; with ``around``
    False, one that contains an input is let be (a command that only adds files of its own
    names there and never removes its ``out``, as ``train``'s run folder)."""
    _, _, protocol, where = _located(out)
    for url in inputs:
        _, _, other, source = _located(url)
        if other != protocol:
            continue
        if where == source:
            how = "is the input"
        elif around and source.is_relative_to(where):
            how = "contains the input"
        elif where.is_relative_to(source):
            how = "lies inside the input"
        else:
            continue
        raise UserInputError(f"{out}: {how} {url}; choose an --out outside it")


def check_writable(out: str | os.PathLike) -> None:
    """Refuse a local ``out`` that cannot be made: one under a file, or in a folder this user
    may not write in (checked before the work starts, not when its results are written)."""
    _, path, protocol, _ = _located(out)
    if "file" not in protocol:
        return  # object stores: their errors come when writing
    here = os.path.abspath(path)
    while not os.path.lexists(here):
        here = os.path.dirname(here)
    if os.path.isdir(here):
        if not os.access(here, os.W_OK | os.X_OK):
            raise UserInputError(f"{out}: cannot write in {here}; choose another --out")
    elif here != os.path.abspath(path):
        raise UserInputError(f"{out}: lies under the file {here}; choose another --out")


def output_of(out: str | os.PathLike) -> str | None:
    """The command whose marker the folder ``out`` holds, or ``None``."""
    fs, path, _, _ = _located(out)
    for name, read in ((MARKER, lambda m: m["command"]), ("zarr.json", _attribute)):
        try:
            return read(json.loads(fs.cat_file(f"{path.rstrip('/')}/{name}")))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None


def _attribute(meta: dict) -> str:
    return meta["attributes"][ATTRIBUTE]


def check_output(
    out: str | os.PathLike,
    command: str,
    inputs: Iterable[str | os.PathLike],
    *,
    force: bool = False,
    resume: bool = False,
) -> bool:
    """Refuse an ``out`` that overlaps ``inputs``, that is a file, or that is a non-empty
    folder other than a previous output of ``command`` (that one unless ``force`` or
    ``resume``). Returns whether ``out`` holds a previous output of ``command``, which
    ``force`` replaces and ``resume`` keeps; touches nothing."""
    check_apart(out, inputs)
    check_writable(out)
    fs, path, _, _ = _located(out)
    if not fs.exists(path):
        return False
    if not fs.isdir(path):
        raise UserInputError(f"{out}: exists and is not a folder; choose another --out")
    if not fs.ls(path):
        return False
    previous = output_of(out)
    if previous != command:
        made = f"the output of `pdeladder {previous}`" if previous else "not a pdeladder output"
        raise UserInputError(f"{out}: is not empty and {made}; choose another --out")
    if not (force or resume):
        raise UserInputError(f"{out}: holds a previous output; pass --force to replace it")
    return True


def make_output(
    out: str | os.PathLike,
    command: str,
    inputs: Iterable[str | os.PathLike],
    *,
    force: bool = False,
    resume: bool = False,
    zarr: bool = False,
) -> bool:
    """Check ``out`` (:func:`check_output`), remove a previous output of ``command`` there
    (``force``), create the folder and write its marker (``zarr``: as the root group of a Zarr
    store); call after every input check. With ``resume``, a previous output of ``command`` is
    kept as it is, for the command to complete; returns whether it was."""
    inputs = list(inputs)
    previous = check_output(out, command, inputs, force=force, resume=resume)
    if previous and not force:
        return True
    fs, path, _, _ = _located(out)
    try:
        if previous:
            fs.rm(path, recursive=True)
        fs.makedirs(path, exist_ok=True)
        if zarr:
            root = {"zarr_format": 3, "node_type": "group", "attributes": {ATTRIBUTE: command}}
            fs.pipe_file(f"{path.rstrip('/')}/zarr.json", json.dumps(root).encode())
        else:
            marker = json.dumps({"command": command}).encode()
            fs.pipe_file(f"{path.rstrip('/')}/{MARKER}", marker)
    except OSError as err:
        raise UserInputError(f"{out}: cannot be written ({err}); choose another --out") from None
    return False
