"""The pdeladder store format, version 8, as data.

The store (:mod:`pdeladder.dataset.store`) creates a group with the attributes of
:func:`group_metadata` and exactly the arrays :func:`array_specs` lists, and the verifier
(:mod:`pdeladder.dataset.verify`) checks exactly them; ``docs/format.md`` shows the same tree,
annotated. Everything but :func:`group_metadata` (a group's attributes, from its family and
grid) is derived from a group's attributes, so a reader needs neither DOLFINx nor the
family's code.
"""

import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from zarr.codecs import BloscCodec, ZstdCodec

from pdeladder.dataset.provenance import software_versions
from pdeladder.errors import FormatError, UserInputError
from pdeladder.solvers import grid
from pdeladder.solvers.grid import Grid

if TYPE_CHECKING:
    from pdeladder.solvers.family import Family

FORMAT_NAME = "pdeladder"
#: The one version this code reads and writes. A store or group of any other is refused
#: (:func:`check_version`): no store of an older version exists outside pdeladder's own history,
#: so none is read or converted (``docs/format.md``, Versions).
FORMAT_VERSION = 8
#: How a store of an older version is replaced: regenerated from its curriculum.
REGENERATE = "pdeladder curriculum materialize"

#: Attributes of a store's root (and of every group).
ROOT_ATTRS = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION}

#: ``status`` values. A sample is present only if its status is OK.
MISSING, OK, FAILED = 0, 1, 2
STATUS_NAMES = ("missing", "ok", "failed")

#: Upper bound on the bytes of one ``fields`` chunk (see :func:`chunking`). 64 MiB keeps a whole
#: trajectory in one chunk (one store key to read and write) up to 2D 256² with T = 41 and 6
#: channels, or 3D 64³ with T = 21 and 3 channels.
CHUNK_TARGET_BYTES = 64 * 2**20

#: Codecs of the ``fields`` array, by name (measured in ``benchmarks/compression.py``).
COMPRESSIONS: dict[str, tuple[Any, ...]] = {
    "none": (),
    "blosc-lz4": (BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"),),
    "blosc-lz4-bitshuffle": (BloscCodec(cname="lz4", clevel=5, shuffle="bitshuffle"),),
    "blosc-zstd": (BloscCodec(cname="zstd", clevel=3, shuffle="shuffle"),),
    "blosc-zstd-bitshuffle": (BloscCodec(cname="zstd", clevel=3, shuffle="bitshuffle"),),
    "zstd": (ZstdCodec(level=3),),
}
DEFAULT_COMPRESSION = "blosc-lz4"

#: The separator of every array's ``default`` chunk keys: each chunk a file of its array's
#: folder (``fields/c.17.0.0.0.0.0``), not one nested folder per index.
KEY_SEPARATOR = "."

#: Per-sample solver statistics: name -> (dtype of the value, units, long_name). They are the
#: ``stats`` field of a sample's record, float64 ``(S,)`` (integers up to 2**53 are exact in
#: float64), in the order of the coordinate ``stat``.
SOLVER_STATS: dict[str, tuple[str, str, str]] = {
    "dofs": ("int64", "1", "degrees of freedom of the discrete problem"),
    "steps": ("int64", "1", "time steps taken"),
    "wall_s": ("float64", "s", "wall time of the sample's run"),
    "solve_s": ("float64", "s", "time spent in linear and nonlinear solves"),
    "krylov_iterations": ("int64", "1", "Krylov iterations, summed over all solves"),
}

#: Attributes every group carries (``verify`` checks their presence and types).
GROUP_ATTRS: dict[str, type | tuple[type, ...]] = {
    "format": str,
    "format_version": int,
    "stage": str,
    "family": str,
    "title": str,
    "equation": str,
    "boundary_conditions": str,
    "steady": bool,
    "dim": int,
    "resolution": int,
    "snapshots": int,
    "t_end": (int, float),
    "lengths": list,
    "channels": list,
    "parameters": list,
    "n_samples": (int, type(None)),
    "chunk_time": int,
    "chunk_x": int,
    "compression": str,
    "software": dict,
}
#: Attributes that change as samples land; not part of a group's identity.
MUTABLE_ATTRS = ("software", "normalization")
#: How a group stores its samples, fixed when it is created: not part of its identity either,
#: so a group made with another codec or chunking is re-opened and written as it was made
#: (readers and writers follow the group's attributes).
STORAGE_ATTRS = ("compression", "chunk_time", "chunk_x")


@dataclass(frozen=True)
class ArraySpec:
    """One array of a group: what the writer creates and the verifier expects."""

    name: str
    shape: tuple[int, ...]
    dims: tuple[str, ...]
    dtype: str  # numpy dtype name, or "str" for variable-length UTF-8
    chunks: tuple[int, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    fill_value: Any = 0
    compression: str = "none"

    @property
    def per_sample(self) -> bool:
        return self.dims[:1] == ("sample",)


def group_path(stage: str, family: str, dim: int, resolution: int, snapshots: int) -> str:
    """``{stage}/{family}/{dim}d_n{resolution}_t{snapshots}``."""
    return f"{stage}/{family}/{dim}d_n{resolution}_t{snapshots}"


def group_key(path: str) -> tuple[str, str, int, int, int]:
    """``(stage, family, dim, resolution, snapshots)`` of a :func:`group_path`; ValueError for
    a path it did not make.

    >>> group_key("s1/heat/2d_n33_t11")
    ('s1', 'heat', 2, 33, 11)
    """
    m = re.fullmatch(r"(.+)/([^/]+)/(\d+)d_n(\d+)_t(\d+)", path)
    if m is None:
        raise ValueError(f"{path!r} is not a group path (stage/family/<dim>d_n<N>_t<T>)")
    stage, family, dim, resolution, snapshots = m.groups()
    return stage, family, int(dim), int(resolution), int(snapshots)


def spatial_shape(meta: dict[str, Any]) -> tuple[int, int, int]:
    """``(X, Y, Z)`` of a group, singleton axes beyond its dimension (:class:`Grid`'s shape)."""
    return grid.spatial_shape(meta["dim"], meta["resolution"])


def chunking(snapshots: int, channels: int, shape: tuple[int, int, int]) -> tuple[int, int]:
    """``(chunk_time, chunk_x)``: snapshots and x points per ``fields`` chunk.

    A sample of at most ``CHUNK_TARGET_BYTES`` is one chunk. A larger one is split along time
    and x about evenly (about ``sqrt(n)`` time blocks for the ``n`` chunks it needs at least),
    each chunk at most the target unless one x plane of one snapshot exceeds it, so that time
    slabs and x slabs of it are both whole chunks but for the partial ones at their ends.
    """
    X = shape[0]
    plane = 4 * channels * int(np.prod(shape[1:]))  # bytes of one x plane of one snapshot
    if snapshots * X * plane <= CHUNK_TARGET_BYTES:
        return snapshots, X
    needed = -(-snapshots * X * plane // CHUNK_TARGET_BYTES)
    step = -(-snapshots // min(snapshots, math.isqrt(needed - 1) + 1))
    return step, max(1, min(X, CHUNK_TARGET_BYTES // (step * plane)))


def field_chunks(meta: dict[str, Any]) -> tuple[int, int]:
    """``(chunk_time, chunk_x)`` of a group."""
    return meta["chunk_time"], meta["chunk_x"]


def field_blocks(meta: dict[str, Any]) -> tuple[int, int]:
    """``(BT, BX)``: ``fields`` chunks of one sample along time and x."""
    ct, cx = field_chunks(meta)
    return -(-meta["snapshots"] // ct), -(-spatial_shape(meta)[0] // cx)


def blocked(meta: dict[str, Any]) -> bool:
    """Whether a group's samples have more than one ``fields`` chunk, and so a checksum and
    moments per chunk (``chunk_checksum``, ``chunk_moments``) beside the sample's in its
    record."""
    return field_blocks(meta) != (1, 1)


#: The arrays of per-chunk ``(checksum, moments)`` of a :func:`blocked` group.
DIGEST_ARRAYS = ("chunk_checksum", "chunk_moments")


def record_fields(meta: dict[str, Any]) -> list[dict[str, Any]]:
    """The fields of a sample ``record``, in order, packed little-endian, no
    padding (every float64 at a multiple of 8 bytes): ``name``, numpy ``dtype``, ``shape``,
    byte ``offset``, ``long_name``, and the ``dims`` of its shape (the group's coordinate
    names: a field decoded for every sample is an array of dims ``("sample", *dims)``). A
    record never written reads as bytes 0xFF: NaN floats, seed -1, checksum 0xFFFFFFFF."""
    P, S, C = len(meta["parameters"]), len(SOLVER_STATS), len(meta["channels"])
    fields = [
        ("seed", "<i8", (), (), "random seed"),
        (
            "params",
            "<f8",
            (P,),
            ("parameter",),
            "family parameters, in the order of the coordinate parameter",
        ),
        ("stats", "<f8", (S,), ("stat",), "solver statistics, in the order of the coordinate stat"),
        (
            "moments",
            "<f8",
            (C, 3),
            ("channel", "moment"),
            _MOMENTS.format("the sample's") + ", per channel",
        ),
        ("checksum", "<u4", (), (), _CRC.format("the sample's") + _WHOLE),
    ]
    out, offset = [], 0
    for name, dtype, shape, dims, long_name in fields:
        out.append(
            {
                "name": name,
                "dtype": dtype,
                "shape": list(shape),
                "dims": list(dims),
                "offset": offset,
                "long_name": long_name,
            }
        )
        offset += np.dtype(dtype).itemsize * math.prod(shape)
    return out


def record_dtype(meta: dict[str, Any]) -> np.dtype:
    """The numpy structured dtype of a group's ``record`` (:func:`record_fields`): view a
    record's bytes ``(N, R)`` uint8 as ``(N, 1)`` of it."""
    fields = record_fields(meta)
    return np.dtype(
        {
            "names": [f["name"] for f in fields],
            "formats": [(f["dtype"], tuple(f["shape"])) for f in fields],
            "offsets": [f["offset"] for f in fields],
        }
    )


def check_version(attrs: dict[str, Any], where: str) -> None:
    """Refuse a store or group of another format, or of any version but :data:`FORMAT_VERSION`,
    in one line that says what to do."""
    if attrs.get("format") != FORMAT_NAME:
        raise FormatError(
            f"{where}: not a pdeladder store (attribute format={attrs.get('format')!r})"
        )
    version = attrs.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise FormatError(f"{where}: unknown format version {version!r}")
    if version < FORMAT_VERSION:
        raise FormatError(
            f"{where}: format version {version} was written by an older pdeladder; this one "
            f"reads only version {FORMAT_VERSION}: regenerate the store with `{REGENERATE}`"
        )
    if version > FORMAT_VERSION:
        raise FormatError(
            f"{where}: format version {version} is newer than this pdeladder reads "
            f"({FORMAT_VERSION}); upgrade pdeladder"
        )


#: The most samples a group may hold: beyond any campaign, and a bound on what a group's
#: per-sample columns take in memory (a plan or a store saying 1e12 samples asked 931 GiB for
#: its status column). The curriculum's bound too.
MAX_SAMPLES = 10_000_000


def check_samples(n_samples: int | None, where: str = "n_samples") -> None:
    """Refuse a group size (None: appendable) outside ``1..MAX_SAMPLES``, in one line."""
    if n_samples is not None and not 1 <= n_samples <= MAX_SAMPLES:
        raise UserInputError(f"{where} must be in 1..{MAX_SAMPLES:_}, got {n_samples:_}")


def group_metadata(
    stage: str,
    family: "Family",
    grid: "Grid",
    n_samples: int | None,
    attrs: dict[str, Any] | None,
    compression: str,
    chunk_sizes: tuple[int | None, int | None] = (None, None),
) -> dict[str, Any]:
    """The deterministic attributes of a group (``software`` aside, equal for every writer).

    ``chunk_sizes``: ``(chunk_time, chunk_x)`` of ``fields``, each None for
    :func:`chunking`'s choice."""
    if not stage or "/" in stage or stage.startswith("."):
        raise UserInputError(f"stage name must be non-empty without '/', got {stage!r}")
    check_samples(n_samples)
    if compression not in COMPRESSIONS:
        raise UserInputError(
            f"unknown compression {compression!r}; available: {', '.join(COMPRESSIONS)}"
        )
    channels = family.channels_for(grid.dim)
    auto = chunking(grid.snapshots, len(channels), grid.shape)
    chunk_time, chunk_x = (a if c is None else c for c, a in zip(chunk_sizes, auto, strict=True))
    for name, value, most in (
        ("chunk_time", chunk_time, grid.snapshots),
        ("chunk_x", chunk_x, grid.shape[0]),
    ):
        if not (isinstance(value, int) and 1 <= value <= most):
            raise UserInputError(f"{name} must be an integer in 1..{most}, got {value!r}")
    meta: dict[str, Any] = {
        **ROOT_ATTRS,
        "stage": stage,
        "family": family.name,
        "title": family.title,
        "equation": family.equation,
        "boundary_conditions": family.boundary_conditions,
        "steady": family.steady,
        "dim": grid.dim,
        "resolution": grid.resolution,
        "snapshots": grid.snapshots,
        "t_end": grid.t_end,
        "lengths": list(grid.lengths),
        "channels": [
            {"name": c.name, "long_name": c.long_name, "units": c.units, "role": c.role}
            for c in channels
        ],
        "parameters": [
            {k: p[k] for k in ("name", "units", "low", "high", "description")}
            for p in family.Params.describe()
        ],
        "n_samples": n_samples,
        "chunk_time": chunk_time,
        "chunk_x": chunk_x,
        "compression": compression,
        "software": software_versions(),
    }
    extra = dict(attrs or {})
    if clash := sorted(set(extra) & set(meta)):
        raise UserInputError(f"attrs may not set reserved group attributes: {', '.join(clash)}")
    try:
        meta.update(json.loads(json.dumps(extra)))
    except (TypeError, ValueError) as err:
        raise UserInputError(f"attrs must be JSON values: {err}") from None
    return meta


def plain_name(name: object) -> bool:
    """Whether a channel or parameter name read from a store is an ASCII identifier: names
    become array keys, HDF5 paths and file names in exports, and must never be able to name
    another place (``../x``, ``a/b``)."""
    return isinstance(name, str) and name.isascii() and name.isidentifier()


def attr_problems(attrs: Mapping[str, Any]) -> Iterator[str]:
    """What is wrong with a group's attributes (the version aside: :func:`check_version`):
    presence and types of :data:`GROUP_ATTRS`, channel and parameter entries, the grid they
    describe, the codec and the chunk sizes; one message each, nothing when they are right."""
    typed = True
    for name, kind in GROUP_ATTRS.items():
        value = attrs.get(name)
        if name not in attrs:
            typed = False
            yield f"attribute {name!r} is missing"
        elif not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            typed = False
            kinds = kind if isinstance(kind, tuple) else (kind,)
            wanted = " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
            yield f"attribute {name!r} is {value!r} of type {type(value).__name__}, not {wanted}"
    channels, parameters = attrs.get("channels"), attrs.get("parameters")
    for c in channels if isinstance(channels, list) else []:
        if not isinstance(c, dict) or set(c) != {"name", "long_name", "units", "role"}:
            yield f"channel entry {c!r} needs exactly name, long_name, units, role"
        elif c["role"] not in ("input", "output"):
            yield f"channel {c['name']!r} has role {c['role']!r}, not input/output"
        elif not plain_name(c["name"]):
            yield f"channel name {c['name']!r} is not a plain identifier"
    for p in parameters if isinstance(parameters, list) else []:
        if not isinstance(p, dict) or not {"name", "units"} <= set(p):
            yield f"parameter entry {p!r} needs name and units"
        elif not plain_name(p["name"]):
            yield f"parameter name {p['name']!r} is not a plain identifier"
    if attrs.get("compression") not in COMPRESSIONS:
        yield f"unknown compression {attrs.get('compression')!r}"
    n = attrs.get("n_samples")
    if isinstance(n, int) and not isinstance(n, bool) and not 1 <= n <= MAX_SAMPLES:
        yield f"attribute 'n_samples' is {n}, outside 1..{MAX_SAMPLES}"
    if not typed:
        return
    try:
        g = GroupMeta.grid_of(attrs)
    except UserInputError as err:
        yield f"attributes dim, resolution, snapshots, t_end, lengths: {err}"
        return
    for name, most in {"chunk_time": g.snapshots, "chunk_x": g.shape[0]}.items():
        value = attrs.get(name)
        if isinstance(value, int) and not 1 <= value <= most:
            yield f"attribute {name!r} is {value}, outside 1..{most}"


@dataclass(frozen=True)
class ChannelMeta:
    """One entry of a group's ``channels``."""

    name: str
    long_name: str
    units: str
    role: Literal["input", "output"]


@dataclass(frozen=True)
class ParameterMeta:
    """One entry of a group's ``parameters``."""

    name: str
    units: str
    low: float | None = None
    high: float | None = None
    description: str = ""


@dataclass(frozen=True)
class GroupMeta:
    """A group's attributes, typed: read and checked once where a group is opened
    (:meth:`of`), so that a damaged attribute is one line naming it, not a traceback where it
    is first used. The stored JSON is what :func:`group_metadata` made; this is its reading."""

    stage: str
    family: str
    title: str
    equation: str
    boundary_conditions: str
    steady: bool
    grid: Grid
    channels: tuple[ChannelMeta, ...]
    parameters: tuple[ParameterMeta, ...]
    n_samples: int | None  # None: appendable
    chunk_time: int
    chunk_x: int
    compression: str
    software: Mapping[str, str | None]
    #: The caller's attributes (``config_hash``, ``curriculum``, ``prediction``, ...); the
    #: ``normalization`` cache, which changes as samples land, is not part of it.
    extra: Mapping[str, Any]

    @classmethod
    def of(cls, attrs: Mapping[str, Any], where: str) -> "GroupMeta":
        """The typed attributes of the group at ``where``; FormatError, one line naming the
        first wrong attribute (and how many more there are), when they are not the format's."""
        check_version(attrs, where)
        problems = list(attr_problems(attrs))
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise FormatError(
                f"{where}: {problems[0]}{more}; the group's attributes are damaged: run "
                "`pdeladder store verify` on the store, or regenerate it"
            )
        known = {"format", "format_version", *GROUP_ATTRS, *MUTABLE_ATTRS}
        return cls(
            stage=attrs["stage"],
            family=attrs["family"],
            title=attrs["title"],
            equation=attrs["equation"],
            boundary_conditions=attrs["boundary_conditions"],
            steady=attrs["steady"],
            grid=cls.grid_of(attrs),
            channels=tuple(ChannelMeta(**c) for c in attrs["channels"]),
            parameters=tuple(
                ParameterMeta(
                    p["name"], p["units"], p.get("low"), p.get("high"), p.get("description", "")
                )
                for p in attrs["parameters"]
            ),
            n_samples=attrs["n_samples"],
            chunk_time=attrs["chunk_time"],
            chunk_x=attrs["chunk_x"],
            compression=attrs["compression"],
            software=MappingProxyType(dict(attrs["software"])),
            extra=MappingProxyType({k: v for k, v in attrs.items() if k not in known}),
        )

    @staticmethod
    def grid_of(attrs: Mapping[str, Any]) -> Grid:
        """The :class:`Grid` that a group's attributes describe."""
        return Grid(
            attrs["dim"],
            attrs["resolution"],
            attrs["snapshots"],
            float(attrs["t_end"]),
            tuple(attrs["lengths"]),
        )

    @property
    def channel_names(self) -> list[str]:
        return [c.name for c in self.channels]

    @property
    def param_names(self) -> list[str]:
        return [p.name for p in self.parameters]


def identity(meta: dict[str, Any]) -> dict[str, Any]:
    """The attributes that must agree when a group is re-opened: all but
    :data:`MUTABLE_ATTRS` and :data:`STORAGE_ATTRS`."""
    return {k: v for k, v in meta.items() if k not in MUTABLE_ATTRS + STORAGE_ATTRS}


def array_specs(meta: dict[str, Any], n: int) -> list[ArraySpec]:
    """The arrays of a group with attributes ``meta`` holding ``n`` samples, coordinates first."""
    T, C, P = meta["snapshots"], len(meta["channels"]), len(meta["parameters"])
    S = len(SOLVER_STATS)
    X, Y, Z = spatial_shape(meta)
    (ct, cx), (BT, BX) = field_chunks(meta), field_blocks(meta)
    chan_units = [c["units"] for c in meta["channels"]]
    coords = [
        ArraySpec("t", (T,), ("t",), "float64", (T,), {"long_name": "time", "units": "1"}),
        ArraySpec("x", (X,), ("x",), "float64", (X,), {"long_name": "x coordinate", "units": "m"}),
        ArraySpec("y", (Y,), ("y",), "float64", (Y,), {"long_name": "y coordinate", "units": "m"}),
        ArraySpec("z", (Z,), ("z",), "float64", (Z,), {"long_name": "z coordinate", "units": "m"}),
        ArraySpec("channel", (C,), ("channel",), "str", (C,), {"long_name": "channel name"}, ""),
        ArraySpec(
            "parameter", (P,), ("parameter",), "str", (P,), {"long_name": "parameter name"}, ""
        ),
        ArraySpec("stat", (S,), ("stat",), "str", (S,), {"long_name": "solver statistic"}, ""),
    ]
    fields = ArraySpec(
        "fields",
        (n, T, C, X, Y, Z),
        ("sample", "t", "channel", "x", "y", "z"),
        "float32",
        (1, ct, C, cx, Y, Z),
        {
            "long_name": "sampled solution trajectories",
            "units": chan_units[0] if len(set(chan_units)) == 1 else "mixed",
            "channel_units": chan_units,
        },
        float("nan"),
        meta["compression"],
    )
    status = ArraySpec(
        "status",
        (n,),
        ("sample",),
        "uint8",
        (1,),
        {
            "long_name": "sample status",
            "flag_values": [MISSING, OK, FAILED],
            "flag_meanings": " ".join(STATUS_NAMES),
        },
    )
    reason = ArraySpec(
        "reason", (n,), ("sample",), "str", (1,), {"long_name": "failure reason"}, ""
    )
    provenance = ArraySpec(
        "provenance",
        (n,),
        ("sample",),
        "str",
        (1,),
        {"long_name": "solver provenance (JSON): element, time step, mesh, solver"},
        "",
    )
    digests = _block_digests(n, C, BT, BX) if blocked(meta) else []
    return [*coords, fields, status, reason, _record(meta, n), provenance, *digests]


_CRC = "CRC-32C of {} fields as float32 little-endian C-order bytes"
_WHOLE = " (of its one chunk; of its chunks' checksums, uint32 little-endian, when it has several)"
_MOMENTS = "per-channel (count, mean, M2) of {} fields over t, x, y, z"
#: Byte value of a ``record`` never written (see :func:`record_fields`).
RECORD_FILL = 0xFF


def _record(meta: dict[str, Any], n: int) -> ArraySpec:
    """One fixed-width record per sample, written at its commit (seed, parameters,
    statistics, checksum, moments: :func:`record_fields`), one chunk each."""
    R = record_dtype(meta).itemsize
    stats = list(SOLVER_STATS.values())
    attrs = {
        "long_name": "sample record: seed, parameters, solver statistics, checksum, moments",
        "record_fields": record_fields(meta),
        "param_units": [p["units"] for p in meta["parameters"]],
        "stat_units": [units for _, units, _ in stats],
        "stat_long_names": [long for _, _, long in stats],
    }
    return ArraySpec(
        "record", (n, R), ("sample", "record_byte"), "uint8", (1, R), attrs, RECORD_FILL
    )


def _block_digests(n: int, C: int, BT: int, BX: int) -> list[ArraySpec]:
    """A checksum and moments per ``fields`` chunk (time block, x block), one chunk of them per
    x block of a sample, so that whoever writes an x slab of a sample writes its digests too
    and no chunk has two writers (:data:`DIGEST_ARRAYS`)."""
    return [
        ArraySpec(
            DIGEST_ARRAYS[0],
            (n, BT, BX),
            ("sample", "t_block", "x_block"),
            "uint32",
            (1, BT, 1),
            {"long_name": _CRC.format("each chunk's (without padding)")},
        ),
        ArraySpec(
            DIGEST_ARRAYS[1],
            (n, BT, BX, C, 3),
            ("sample", "t_block", "x_block", "channel", "moment"),
            "float64",
            (1, BT, 1, C, 3),
            {"long_name": _MOMENTS.format("each chunk's")},
            float("nan"),
        ),
    ]


def coordinate_values(meta: dict[str, Any]) -> dict[str, np.ndarray]:
    """Values of the coordinate arrays ``t, x, y, z, channel, parameter, stat``: the group's
    :class:`Grid`'s times and axes (metres, from 0 to the box's ``lengths``)."""
    g = GroupMeta.grid_of(meta)
    out = {"t": g.times(), **{name: g.axis(a) for a, name in enumerate("xyz")}}
    out["channel"] = np.array([c["name"] for c in meta["channels"]], dtype=object)
    out["parameter"] = np.array([p["name"] for p in meta["parameters"]], dtype=object)
    out["stat"] = np.array(list(SOLVER_STATS), dtype=object)
    return out
