"""`pdeladder store export --format vtk`: a ParaView time series (.pvd of .vti ImageData) read
back by a small reader of VTK's XML ImageData format (raw appended data, UInt32 headers) and
compared with the store's values exactly; and the one-line refusals of bad input."""

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from pdeladder.cli import app
from pdeladder.dataset.export.vtk import export_vtk
from pdeladder.dataset.store import open_store
from pdeladder.solvers import Grid, Sample, SolveStats, get_family

EXE = os.path.join(os.path.dirname(sys.executable), "pdeladder")


def read_vti(path: Path) -> tuple[dict[str, str], dict[str, np.ndarray]]:
    """The ImageData attributes and point arrays ``(X, Y, Z)`` of a raw-appended .vti file."""
    raw = path.read_bytes()
    start = raw.index(b"<AppendedData")
    marker = raw.index(b"_", start) + 1
    end = raw.rindex(b"</AppendedData>")
    root = ET.fromstring(raw[:start] + b"</VTKFile>")
    assert root.get("type") == "ImageData" and root.get("header_type") == "UInt32"
    assert root.get("byte_order") == "LittleEndian"
    image = root.find("ImageData")
    nx, ny, nz = (int(v) + 1 for v in image.get("WholeExtent").split()[1::2])
    arrays = {}
    for da in image.find("Piece/PointData"):
        assert da.get("type") == "Float32" and da.get("format") == "appended"
        off = marker + int(da.get("offset"))
        n = int(np.frombuffer(raw[off : off + 4], "<u4")[0])
        assert off + 4 + n <= end
        values = np.frombuffer(raw[off + 4 : off + 4 + n], "<f4")
        arrays[da.get("Name")] = values.reshape(nz, ny, nx).transpose(2, 1, 0)  # x fastest
    return dict(image.attrib), arrays


def read_pvd(path: Path) -> list[tuple[float, Path]]:
    root = ET.parse(path).getroot()
    assert root.get("type") == "Collection"
    return [(float(d.get("timestep")), path.parent / d.get("file")) for d in root.iter("DataSet")]


def make_group(url: str, family: str, grid: Grid, samples: int = 3):
    fam = get_family(family)
    g = open_store(url, "a").require_group("s", fam, grid, n_samples=samples)
    rng = np.random.default_rng(1)
    for i in range(samples):
        shape = (grid.snapshots, len(g.channel_names), *grid.shape)
        fields = rng.normal(size=shape).astype(np.float32)
        g.write(i, Sample(family, fields, grid, fam.parse_params(), 10 + i, SolveStats(dofs=1)))
    return g


@pytest.mark.parametrize(
    ("family", "grid"),
    [
        ("navier_stokes", Grid(2, 9, 4, 0.5)),
        ("heat", Grid(3, 5, 3, 1.0)),
        ("darcy", Grid(1, 7, 1, 0.0)),
    ],
)
def test_vtk_series_reads_back_exactly(store_url, tmp_path, family, grid):
    g = make_group(store_url, family, grid)
    out = tmp_path / "vtk"
    pvd = export_vtk(open_store(store_url).group(g.path), 1, out)
    truth, times = g.read(1), g.array("t")[:]
    series = read_pvd(pvd)
    assert [t for t, _ in series] == pytest.approx(times.tolist(), abs=0) and len(series) == len(
        times
    )
    for k, (_, vti) in enumerate(series):
        attrs, arrays = read_vti(vti)
        assert list(arrays) == g.channel_names
        for c, name in enumerate(g.channel_names):
            np.testing.assert_array_equal(arrays[name], truth[k, c])
        spacing = [float(v) for v in attrs["Spacing"].split()]
        origin = [float(v) for v in attrs["Origin"].split()]
        for a, axis in enumerate("xyz"):
            coords = g.array(axis)[:]
            assert origin[a] == coords[0]
            if len(coords) > 1:  # the true coordinates: spacing 1 / (N - 1) from 0
                assert spacing[a] == pytest.approx(1 / (len(coords) - 1), rel=1e-6)
                np.testing.assert_allclose(
                    origin[a] + spacing[a] * np.arange(len(coords)), coords, rtol=1e-6
                )


def test_export_command_and_its_refusals(tmp_path):
    url = str(tmp_path / "store.zarr")
    g = make_group(url, "heat", Grid(2, 5, 3, 1.0))
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
    result = subprocess.run([EXE, *base, "--sample", "1"], capture_output=True, text=True)
    assert result.returncode == 2 and "--force" in result.stderr  # out is not empty now
    assert len(list(out.iterdir())) == 2  # untouched: sample 2's .pvd and folder
    assert run(app, [*base, "--sample", "1", "--force"]).exit_code == 0
    assert sorted(p.name for p in out.iterdir())[0].endswith("__sample1")
