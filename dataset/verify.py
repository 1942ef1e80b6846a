"""Check a store against the format of ``docs/format.md``, part by part.

Structural checks (attributes, arrays, coordinates, status) read metadata and small arrays;
value checks (completeness, checksums, NaN/Inf, stored moments) read every ok sample once,
several at a time (:func:`~pdeladder.dataset.chunks.read_threads`),
each reported to an optional progress hook. Each check function covers one part of the tree
and returns the :class:`~pdeladder.errors.FormatError` it finds, each naming its path;
:func:`verify` collects them all instead of stopping at the first.
"""

import math
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import zarr

from pdeladder.dataset import chunks
from pdeladder.dataset import format as fmt
from pdeladder.dataset.chunks import is_local, read_threads
from pdeladder.dataset.group import Group
from pdeladder.dataset.moments import merge_moments
from pdeladder.dataset.store import Store, open_store
from pdeladder.errors import FormatError, StoreError, UserInputError
from pdeladder.solvers.registry import get_family

#: ``progress(group path, ok samples to read)`` returns the function called once per sample
#: read, from the reading threads (the CLI draws a bar with it).
Progress = Callable[[str, int], Callable[[], None]]


@dataclass(frozen=True)
class Problem:
    """One finding: where (``group`` or ``group sample i``), which kind of check, and what."""

    path: str
    kind: str  # "structure" or "values"
    message: str

    def error(self) -> FormatError:
        return FormatError(f"{self.path}: {self.message}")


def check_group_attrs(attrs: dict[str, Any]) -> Iterator[str]:
    """The group's attributes: version, presence and types, channel and parameter entries
    (:func:`format.attr_problems`)."""
    try:
        fmt.check_version(attrs, "group")
    except FormatError as err:
        yield str(err).removeprefix("group: ")
    yield from fmt.attr_problems(attrs)


def check_identity(attrs: dict[str, Any], path: str) -> Iterator[str]:
    """The group's path is the one its (well-typed) attributes name, and its family is one
    this pdeladder has (a built-in or an installed one) and can load."""
    named = fmt.group_path(
        attrs["stage"], attrs["family"], attrs["dim"], attrs["resolution"], attrs["snapshots"]
    )
    if named != path:
        yield f"its attributes name the group {named!r}, not its path"
    try:
        get_family(attrs["family"])
    except UserInputError as err:  # unknown, or its entry point broken
        yield str(err)


def check_array(node: zarr.Group, spec: fmt.ArraySpec) -> Iterator[str]:
    """One array: present, and with the shape, dimension names, dtype, chunks and attributes
    that the group's metadata implies; no sharding."""
    if spec.name not in node:
        yield f"array {spec.name!r} is missing"
        return
    arr = node[spec.name]
    if not isinstance(arr, zarr.Array):
        yield f"{spec.name!r} is a group, not an array"
        return
    dtype = "str" if arr.dtype.kind in "OUT" or str(arr.dtype).startswith("Str") else str(arr.dtype)
    found = {
        "shape": arr.shape,
        "dimension_names": tuple(arr.metadata.dimension_names or ()),
        "dtype": dtype,
        "chunks": arr.chunks,
    }
    wanted = {
        "shape": spec.shape,
        "dimension_names": spec.dims,
        "dtype": spec.dtype,
        "chunks": spec.chunks,
    }
    for key, value in wanted.items():
        if found[key] != value:
            yield f"{spec.name}: {key} is {found[key]}, expected {value}"
    if arr.shards is not None:
        yield f"{spec.name}: is sharded; the format has one sample per chunk and no shards"
    for key in spec.attrs:
        if key not in arr.attrs:
            yield f"{spec.name}: attribute {key!r} is missing"
    if spec.per_sample:
        yield from check_encoding(arr, spec)


def check_encoding(arr: zarr.Array, spec: fmt.ArraySpec) -> Iterator[str]:
    """A per-sample array's chunk keys and codecs are those that
    :mod:`pdeladder.dataset.chunks` writes and reads: ``default`` keys with ``.`` as
    separator, then ``bytes`` (little-endian) and the group's compressor, or ``vlen-utf8`` for
    strings."""
    keys = arr.metadata.chunk_key_encoding.to_dict()
    sep = fmt.KEY_SEPARATOR
    if keys != {"name": "default", "configuration": {"separator": sep}}:
        yield f"{spec.name}: chunk key encoding is {keys}, expected default with {sep!r}"
    codecs = [c.to_dict() for c in arr.metadata.codecs]
    names = [c["name"] for c in codecs]
    compressors = [c.to_dict()["name"] for c in fmt.COMPRESSIONS[spec.compression]]
    wanted = ["vlen-utf8"] if spec.dtype == "str" else ["bytes", *compressors]
    if names != wanted:
        yield f"{spec.name}: codecs are {names}, expected {wanted}"
    elif codecs[0].get("configuration", {}).get("endian", "little") != "little":
        yield f"{spec.name}: bytes codec is not little-endian"


def check_coordinates(group: Group) -> Iterator[str]:
    """Coordinate arrays ``t, x, y, z, channel, parameter`` hold the values the metadata implies."""
    for name, expected in fmt.coordinate_values(group.attrs).items():
        values = group.array(name)[:]
        same = (
            list(values) == list(expected)
            if expected.dtype == object
            else np.allclose(values, expected, rtol=0, atol=1e-12)
        )
        if not same:
            yield f"coordinate {name} is {values.tolist()}, expected {expected.tolist()}"


def check_status(group: Group, status: np.ndarray) -> Iterator[str]:
    """Status values are known; ``n_samples`` matches the arrays; failed samples say why."""
    n = group.meta.n_samples
    if n is not None and len(status) != n:
        yield f"status has {len(status)} samples, n_samples says {n}"
    unknown = np.flatnonzero(status > fmt.FAILED)
    if unknown.size:
        yield f"unknown status values at samples {unknown.tolist()}"
    failed = np.flatnonzero(status == fmt.FAILED).tolist()
    reasons = group.column("reason") if failed else []
    for i in failed:
        if not str(reasons[i]):
            yield f"sample {i}: status failed without a reason"


@dataclass(frozen=True)
class Digests:
    """What a group stores about its ok samples' fields, ``(N, ...)`` each: ``checksums``
    (:meth:`Group.checksums`), ``moments`` (:meth:`Group.block_moments`, ``(N, K, C, 3)``),
    and for groups with per-chunk digests the per-chunk checksums ``chunk_checksums``
    ``(N, BT, BX)`` and the record's ``(N, C, 3)`` ``sample_moments``."""

    checksums: np.ndarray
    moments: np.ndarray
    chunk_checksums: np.ndarray | None = None
    sample_moments: np.ndarray | None = None

    @classmethod
    def of(cls, group: Group, status: np.ndarray) -> "Digests":
        ok = status == fmt.OK
        blocked = group.blocked
        return cls(
            group.checksums(status),
            group.block_moments(where=ok),
            group.column(fmt.DIGEST_ARRAYS[0], where=ok) if blocked else None,
            group.column("moments", where=ok) if blocked else None,
        )


def check_sample_values(group: Group, index: int, digests: Digests) -> Iterator[str]:
    """One ok sample: readable, matching its checksum, finite, with the moments it stores
    (per chunk or per sample), and, for a sample of several chunks, with per-chunk checksums
    and a record that agree with its fields."""
    try:
        data = group.read_fields(index, int(digests.checksums[index]))
    except StoreError as err:
        yield str(err).removeprefix(f"{group.where(index)}: ")
        return
    bad = ~np.isfinite(data)
    if bad.any():
        yield f"{int(bad.sum())} NaN/Inf values"
        return
    crcs, found = group.digest(data)
    stored = digests.moments[index]
    if not np.allclose(stored, np.reshape(found, stored.shape), rtol=1e-9, atol=1e-12):
        yield "stored moments do not match the fields"
    if digests.chunk_checksums is not None:
        if not np.array_equal(digests.chunk_checksums[index], crcs):
            yield "stored chunk checksums do not match the fields"
        merged = merge_moments(np.reshape(found, (-1, *stored.shape[-2:])))
        if not np.allclose(digests.sample_moments[index], merged, rtol=1e-9, atol=1e-12):
            yield "the record's moments do not match the fields"


def group_problems(
    group: Group, *, values: bool = True, progress: Progress | None = None
) -> list[Problem]:
    """Every problem of one group: structure first; values only when the structure holds.
    Problems come in sample order whatever order the samples are read in."""
    where = group.where()
    found: list[Problem] = []  # its attributes hold: a Group checks them when it is opened
    status = None
    for spec in fmt.array_specs(group.attrs, group.n_samples if "status" in group.node else 0):
        found += [Problem(where, "structure", m) for m in check_array(group.node, spec)]
    if not found:
        found += [Problem(where, "structure", m) for m in check_coordinates(group)]
        status = group.status()
        found += [Problem(where, "structure", m) for m in check_status(group, status)]
    if found or not values:
        return found
    # only committed samples' digests are read: a sample whose status is not ok is missing,
    # whatever chunks an unfinished write left behind
    digests = Digests.of(group, status)
    ok = np.flatnonzero(status == fmt.OK).tolist()
    advance = progress(group.path, len(ok)) if progress else lambda: None

    def check(i: int) -> list[str]:
        messages = list(check_sample_values(group, i, digests))
        advance()
        return messages

    with ThreadPoolExecutor(read_threads(len(ok), local=is_local(group.node.store))) as pool:
        bad = dict(zip(ok, pool.map(check, ok), strict=True))
    missing = np.flatnonzero(status == fmt.MISSING).tolist()
    leftovers = dict(zip(missing, _leftovers(group, missing), strict=True))
    for i, s in enumerate(status.tolist()):
        if s == fmt.MISSING:
            found.append(Problem(group.where(i), "values", _MISSING[leftovers[i]]))
        found += [Problem(group.where(i), "values", m) for m in bad.get(i, [])]
    return found


_MISSING = {
    False: "missing (never written)",
    True: "missing (a write did not finish: its leftover chunks are not trusted and are "
    "overwritten when the sample is written)",
}


def _leftovers(group: Group, indices: list[int]) -> list[bool]:
    """Whether each sample left chunks of its fields or digests (an unfinished write)."""
    names = ["fields", "record", *([fmt.DIGEST_ARRAYS[0]] if group.blocked else [])]
    keys = [[group.chunks[name].keys(i)[0] for name in names] for i in indices]
    found = iter(chunks.exists(group.node.store, [k for ks in keys for k in ks]))
    return [any([next(found) for _ in ks]) for ks in keys]


def store_problems(
    store: Store, *, values: bool = True, progress: Progress | None = None
) -> dict[str, list[Problem]]:
    """``{group path: problems}`` for every group of ``store``."""
    out = {}
    for path in store.groups():
        where = f"{store.url}::{path}"
        attrs = dict(store.root[path].attrs)
        out[path] = [Problem(where, "structure", m) for m in check_group_attrs(attrs)]
        if not out[path]:
            out[path] = [Problem(where, "structure", m) for m in check_identity(attrs, path)]
        if out[path]:
            continue  # every wrong attribute named, where opening the group names the first
        try:
            out[path] = group_problems(store.group(path), values=values, progress=progress)
        except (FormatError, StoreError) as err:
            out[path] = [Problem(where, "structure", str(err))]
    return out


def verify(url: str, *, values: bool = True) -> None:
    """Raise :class:`FormatError` naming the first problem (and how many there are) if the
    store at ``url`` does not match the format; return quietly if it does."""
    problems = [p for ps in store_problems(open_store(url), values=values).values() for p in ps]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise FormatError(f"{problems[0].path}: {problems[0].message}{more}")


def summary(group: Group) -> dict[str, Any]:
    """Counts, bytes stored and the compression ratio of ``fields`` for one group."""
    status = group.status()
    ok = int((status == fmt.OK).sum())
    stored = sum(group.array(spec.name).nbytes_stored() for spec in fmt.array_specs(group.attrs, 0))
    fields_stored = group.array("fields").nbytes_stored()
    raw = ok * 4 * math.prod(group.sample_shape)
    return {
        "group": group.path,
        "family": group.family,
        "shape": list(group.sample_shape),
        "samples": len(status),
        "ok": ok,
        "failed": int((status == fmt.FAILED).sum()),
        "missing": int((status == fmt.MISSING).sum()),
        "bytes": int(stored),
        "compression": group.meta.compression,
        "compression_ratio": round(raw / fields_stored, 3) if ok else None,
    }
