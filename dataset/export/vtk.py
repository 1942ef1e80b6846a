"""One sample as a ParaView time series: a ``.pvd`` collection of VTK XML ``ImageData`` files.

``OUT/<name>.pvd`` lists one ``OUT/<name>/<name>_<k>.vti`` per snapshot ``k`` with its time
``t_k`` (the store's ``t``). Each ``.vti`` holds the uniform grid of the group's box with its
true coordinates in metres (origin 0, the grid's spacing ``L / (N - 1)`` per axis, 1 on a unit
axis) and every channel as a named float32 point-data array (VTK's point order: x fastest),
written as raw appended binary data (``UInt32`` byte-count headers, little-endian). ParaView
opens the ``.pvd`` as one time-dependent dataset; so do VTK's ``vtkXMLImageDataReader`` and
pyvista.
"""

from pathlib import Path
from xml.sax.saxutils import quoteattr

import numpy as np

from pdeladder.dataset import format as fmt
from pdeladder.dataset.export import (
    PART,
    Progress,
    export_job,
    no_progress,
    prepare_out,
    written,
)
from pdeladder.dataset.group import Group
from pdeladder.errors import UserInputError


def sample_name(group: Group, index: int) -> str:
    """``stage__family__2d_n33_t11__sample3``: the file stem of one exported sample."""
    return f"{group.path.replace('/', '__')}__sample{index}"


def geometry(group: Group) -> tuple[list[float], list[float], list[int]]:
    """Origin, spacing and point counts of the group's grid along x, y, z (metres)."""
    g = group.grid
    return [0.0] * 3, [*g.spacing, *[1.0] * (3 - g.dim)], list(g.shape)


def vti_bytes(
    snapshot: np.ndarray, names: list[str], origin: list[float], spacing: list[float]
) -> bytes:
    """A VTK XML ImageData file of one snapshot ``(C, X, Y, Z)`` float32, channels ``names``."""
    _, nx, ny, nz = snapshot.shape
    extent = f"0 {nx - 1} 0 {ny - 1} 0 {nz - 1}"
    blocks, arrays, offset = [], [], 0
    for name, values in zip(names, snapshot, strict=True):
        raw = np.ascontiguousarray(values.transpose(2, 1, 0), dtype="<f4").tobytes()  # x fastest
        arrays.append(
            f'        <DataArray type="Float32" Name={quoteattr(name)} NumberOfComponents="1" '
            f'format="appended" offset="{offset}"/>'
        )
        blocks.append(np.uint32(len(raw)).astype("<u4").tobytes() + raw)
        offset += 4 + len(raw)
    head = "\n".join(
        [
            '<?xml version="1.0"?>',
            '<VTKFile type="ImageData" version="1.0" byte_order="LittleEndian" '
            'header_type="UInt32">',
            f'  <ImageData WholeExtent="{extent}" Origin="{" ".join(map(repr, origin))}" '
            f'Spacing="{" ".join(map(repr, spacing))}">',
            f'    <Piece Extent="{extent}">',
            f"      <PointData Scalars={quoteattr(names[0])}>",
            *arrays,
            "      </PointData>",
            "    </Piece>",
            "  </ImageData>",
            '  <AppendedData encoding="raw">',
            "   _",
        ]
    )
    tail = "\n  </AppendedData>\n</VTKFile>\n"
    return head.encode() + b"".join(blocks) + tail.encode()


def pvd_text(entries: list[tuple[float, str]]) -> str:
    """A ParaView collection of ``(time, relative file)`` entries."""
    rows = [
        f'    <DataSet timestep="{t!r}" group="" part="0" file={quoteattr(f)}/>' for t, f in entries
    ]
    return "\n".join(
        [
            '<?xml version="1.0"?>',
            '<VTKFile type="Collection" version="0.1" byte_order="LittleEndian">',
            "  <Collection>",
            *rows,
            "  </Collection>",
            "</VTKFile>",
            "",
        ]
    )


def check_sample(group: Group, index: int) -> None:
    """Refuse a sample index outside the group or a sample that is not stored ok."""
    if not 0 <= index < group.n_samples:
        raise UserInputError(
            f"{group.where()}: no sample {index} (the group has {group.n_samples}, 0 to "
            f"{group.n_samples - 1})"
        )
    status = int(group.status()[index])
    if status != fmt.OK:
        raise UserInputError(
            f"{group.where(index)}: is {fmt.STATUS_NAMES[status]}, not ok; nothing to export"
        )


def export_vtk(
    group: Group, index: int, out: Path, *, force: bool = False, progress: Progress = no_progress
) -> Path:
    """Write sample ``index`` of ``group`` as a ``.pvd`` time series under ``out``; returns the
    ``.pvd``. Reads one snapshot at a time (:meth:`Group.read_slab`)."""
    check_sample(group, index)
    job = export_job("vtk", group.store.url, group=group.path, sample=index)
    ledger = prepare_out(out, group.store.url, force, job)
    name, samples = sample_name(group, index), np.array([index])
    pvd = out / f"{name}.pvd"
    times = np.asarray(group.array("t")[:], dtype=np.float64)
    advance = progress(len(times))
    if ledger.done(group.path, group, samples) and pvd.is_file() and (out / name).is_dir():
        advance(len(times))  # written before an interruption
        return pvd
    (out / (name + PART)).mkdir()
    origin, spacing, _ = geometry(group)
    names = group.channel_names
    entries = []
    for k, t in enumerate(times):
        snap = group.read_slab(index, "t", k, k + 1)[0]  # (C, X, Y, Z)
        rel = f"{name}/{name}_{k:04d}.vti"
        (out / (name + PART) / Path(rel).name).write_bytes(vti_bytes(snap, names, origin, spacing))
        entries.append((float(t), rel))
        advance(1)
    pvd.with_name(pvd.name + PART).write_text(pvd_text(entries))
    written(out / (name + PART), out / name)
    written(pvd.with_name(pvd.name + PART), pvd)
    ledger.record(group.path, group, samples)
    return pvd
