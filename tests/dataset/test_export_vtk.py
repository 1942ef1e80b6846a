"""`pdeladder store export --format vtk`: a ParaView time series (.pvd of .vti ImageData) read
back by VTK's own XML ImageData reader (`vtkXMLImageDataReader`, the reader ParaView uses for
.vti files) and compared with the store's values, channel names and coordinates exactly; and
the one-line refusals of bad input."""

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner
from vtkmodules.util.numpy_support import vtk_to_numpy
from vtkmodules.vtkIOXML import vtkXMLImageDataReader

from pdeladder.cli import app
from pdeladder.dataset.export.vtk import export_vtk
from pdeladder.dataset.store import open_store
from pdeladder.solvers import get_family

from .conftest import family_group

EXE = os.path.join(os.path.dirname(sys.executable), "pdeladder")


def read_vti(path: Path) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """VTK's reading of a .vti file: the point coordinates ``(X, Y, Z, 3)`` and the point
    arrays ``(X, Y, Z)`` by name."""
    reader = vtkXMLImageDataReader()
    reader.SetFileName(str(path))
    reader.Update()
    image = reader.GetOutput()
    nx, ny, nz = image.GetDimensions()
    assert image.GetNumberOfPoints() == nx * ny * nz > 0, f"VTK read no points from {path}"
    points = np.array([image.GetPoint(i) for i in range(image.GetNumberOfPoints())])
    data = image.GetPointData()
    arrays = {}
    for j in range(data.GetNumberOfArrays()):
        values = vtk_to_numpy(data.GetArray(j))
        arrays[data.GetArrayName(j)] = values.reshape(nz, ny, nx).transpose(2, 1, 0)  # x fastest
    return points.reshape(nz, ny, nx, 3).transpose(2, 1, 0, 3), arrays


def read_pvd(path: Path) -> list[tuple[float, Path]]:
    root = ET.parse(path).getroot()
    assert root.get("type") == "Collection"
    return [(float(d.get("timestep")), path.parent / d.get("file")) for d in root.iter("DataSet")]


@pytest.mark.parametrize(
    ("family", "dim", "resolution", "snapshots"),
    [("navier_stokes", 2, 9, 4), ("heat", 3, 5, 3), ("darcy", 1, 7, 1), ("channel_flow", 2, 17, 1)],
)
def test_vtk_series_reads_back_exactly(store_url, tmp_path, family, dim, resolution, snapshots):
    g = family_group(store_url, family, get_family(family).grid(dim, resolution, snapshots), 3)
    out = tmp_path / "vtk"
    pvd = export_vtk(open_store(store_url).group(g.path), 1, out)
    truth, times = g.read(1), g.array("t")[:]
    series = read_pvd(pvd)
    assert [t for t, _ in series] == times.tolist()
    coords = np.stack(np.meshgrid(*(g.array(a)[:] for a in "xyz"), indexing="ij"), -1)
    for k, (_, vti) in enumerate(series):
        points, arrays = read_vti(vti)
        assert list(arrays) == g.channel_names
        for c, name in enumerate(g.channel_names):
            assert arrays[name].dtype == np.float32
            np.testing.assert_array_equal(arrays[name], truth[k, c])
        np.testing.assert_allclose(points, coords, rtol=0, atol=1e-12)  # the true coordinates


def test_export_command_and_its_refusals(tmp_path):
    url = str(tmp_path / "store.zarr")
    g = family_group(url, "heat", get_family("heat").grid(2, 5, 3), 3)
    run = CliRunner().invoke
    out = tmp_path / "out"
    base = ["store", "export", url, "--format", "vtk", "--group", g.path, "--out", str(out)]
    for args, text in (
        ([*base[:4], "paraview", *base[5:], "--sample", "0"], "unknown"),
        ([*base[:6], "s/heat/nope", *base[7:], "--sample", "0"], "no group"),
        ([*base, "--sample", "7"], "no sample 7"),
        (base, "needs --group and --sample"),
    ):
        result = subprocess.run([EXE, *args], capture_output=True, text=True, timeout=600)
        message = result.stderr.strip()
        assert result.returncode == 2 and text in message, result.stderr
        assert "\n" not in message and result.stdout == "" and not out.exists()
    result = run(app, [*base, "--sample", "2"])
    assert result.exit_code == 0, result.output
    assert len(read_pvd(out / f"{g.path.replace('/', '__')}__sample2.pvd")) == 3
    assert run(app, [*base, "--sample", "2"]).exit_code == 0  # the same export: complete
    result = subprocess.run([EXE, *base, "--sample", "1"], capture_output=True, text=True)
    assert result.returncode == 2 and "--force" in result.stderr  # another export's folder
    assert len(list(out.iterdir())) == 4  # untouched: marker, record, sample 2's .pvd, folder
    assert run(app, [*base, "--sample", "1", "--force"]).exit_code == 0
    assert [p.name for p in out.iterdir() if p.is_dir()] == [
        g.path.replace("/", "__") + "__sample1"
    ]
