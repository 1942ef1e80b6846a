"""The worked plugin family, ``examples/plugins/helmholtz`` (the distribution
``pdeladder-helmholtz``, installed beside pdeladder by ``make venv``), end to end as a user runs
it: it meets the family contract through ``pdeladder solvers check``, and its curriculum, which
mixes it with the built-in Darcy family, is materialized, trained, evaluated and exported, the
exports read back by The Well's loader and VTK's reader, every stored sample naming the package
that solved it. And two plugins broken as a first plugin often is, caught by the contract: one
missing a method, one whose residual lacks an axis."""

import importlib.metadata
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from pdeladder.cli import app
from pdeladder.dataset.store import open_store
from pdeladder.solvers import get_family
from pdeladder.solvers.checks import Target, pure

PLUGIN = Path(__file__).parents[2] / "examples" / "plugins" / "helmholtz"
CURRICULUM = PLUGIN / "curriculum.yaml"
PACKAGE = {
    "name": "pdeladder-helmholtz",
    "version": importlib.metadata.version("pdeladder-helmholtz"),
}
PDELADDER = {"name": "pdeladder", "version": importlib.metadata.version("pdeladder")}
EXE = os.path.join(os.path.dirname(sys.executable), "pdeladder")
#: The curriculum's groups: the plugin's and the built-in one's.
HELMHOLTZ, DARCY = "steady/helmholtz/2d_n17_t1", "steady/darcy/2d_n17_t1"


#: A distribution of two broken plugins built on the worked one: ``noresidual`` does not
#: implement ``residual``, ``badshape``'s residual drops the residual-row axis.
BROKEN = {
    "broken_plugin-1.0.dist-info/METADATA": (
        "Metadata-Version: 2.1\nName: broken-plugin\nVersion: 1.0\n"
    ),
    "broken_plugin-1.0.dist-info/entry_points.txt": (
        "[pdeladder.families]\n"
        "noresidual = broken_plugin:NoResidual\n"
        "badshape = broken_plugin:BadShape\n"
    ),
    "broken_plugin/__init__.py": (
        "from pdeladder.solvers.family import Family\n"
        "from pdeladder_helmholtz import Helmholtz\n\n\n"
        "class NoResidual(Family):\n"
        '    name = "noresidual"\n'
        "    initial_fields = Helmholtz.initial_fields\n\n\n"
        "class BadShape(Helmholtz):\n"
        '    name = "badshape"\n\n'
        "    def residual(self, fields, params, grid):\n"
        "        return super().residual(fields, params, grid)[:, 0]  # (B, T', X', Y', Z')\n"
    ),
}


def pdeladder(*args: str, path: Path | None = None) -> subprocess.CompletedProcess:
    """The installed console script, as a user runs it (``path``: a folder on its
    ``PYTHONPATH``)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "120"}
    if path is not None:
        env["PYTHONPATH"] = str(path)
    return subprocess.run([EXE, *args], capture_output=True, text=True, env=env, timeout=600)


def test_the_plugin_is_listed_with_its_package():
    out = pdeladder("solvers", "list", "--json")
    assert out.returncode == 0, out.stderr
    infos = {info["name"]: info for info in json.loads(out.stdout)}
    assert infos["helmholtz"]["package"] == PACKAGE
    assert infos["darcy"]["package"] == PDELADDER
    assert [c["name"] for c in infos["helmholtz"]["channels"]] == ["f", "u"]


@pytest.mark.mpi
@pytest.mark.parametrize("dim", [1, 2, 3])
def test_the_plugin_meets_the_family_contract(dim: int):
    out = pdeladder("solvers", "check", "helmholtz", "--dim", str(dim), "--json")
    results = {r["name"]: r for r in json.loads(out.stdout)}
    failed = {name: r["detail"] for name, r in results.items() if not r["passed"]}
    assert out.returncode == 0 and not failed, (failed, out.stderr[-2000:])
    expected = {"metadata", "parameters", "pure", "solve", "determinism", "inputs", "residual"}
    expected |= {"symmetry", "walls", "two_ranks", "convergence_space"}
    assert set(results) == expected
    assert results["walls"]["figure"] == "f: None, u: zero"


@pytest.fixture(scope="module")
def trained(ray_local: None, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """The plugin's curriculum materialized into a store and trained: ``(store URL, run
    folder)``."""
    root = tmp_path_factory.mktemp("worked_plugin")
    url, run = str(root / "store.zarr"), root / "run"
    invoke = CliRunner().invoke
    done = invoke(app, ["curriculum", "materialize", str(CURRICULUM), "--store", url])
    assert done.exit_code == 0, done.output
    done = invoke(
        app,
        ["train", str(CURRICULUM), "--store", url, "--run-dir", str(run), "--workers", "1"],
        env={"COLUMNS": "100"},
    )
    assert done.exit_code == 0, done.output
    assert "│ helmholtz " in done.stdout  # the held-out table after training
    return url, run


def test_stored_samples_name_the_package_that_solved_them(trained):
    store = open_store(trained[0])
    assert store.groups() == sorted([HELMHOLTZ, DARCY])
    for path, package in ((HELMHOLTZ, PACKAGE), (DARCY, PDELADDER)):
        group = store.group(path)
        assert np.all(group.status() == 1), path  # every sample solved
        for i in range(group.n_samples):
            assert group.info(i)["provenance"]["family_package"] == package, (path, i)
    group = store.group(HELMHOLTZ)
    assert group.channel_names == ["f", "u"]
    fam = get_family("helmholtz")  # a Ray actor's sample is the solver's, bit for bit
    params = fam.Params.from_vector(group.params()[3])
    direct = fam.run(params, group.grid, int(group.column("seed")[3]))
    np.testing.assert_array_equal(group.read(3), direct.fields)


def test_evaluation_scores_the_plugin_group_beside_its_baseline(trained, tmp_path: Path):
    url, run = trained
    out = tmp_path / "eval"
    done = pdeladder(
        "evaluate", str(run / "stages" / "steady" / "model"), "--store", url, "--out", str(out)
    )
    assert done.returncode == 0, done.stderr[-2000:]
    table = done.stdout[done.stdout.index("nRMSE per family") :]
    row = next(line for line in table.splitlines() if line.startswith("│ helmholtz "))
    nrmse, baseline = (float(cell) for cell in row.split("│")[2:4])
    assert nrmse > 0 and baseline > 0
    report = json.loads((out / "report.json").read_text())
    assert report["groups"][HELMHOLTZ]["baseline"] == "training mean field"
    assert set(report["families"]) == {"helmholtz", "darcy"}
    assert (out / "steady__helmholtz__2d_n17_t1.png").stat().st_size > 0


def test_the_well_export_reads_back_in_the_well_loader(trained, tmp_path: Path):
    from the_well.data import WellDataset

    url, out = trained[0], tmp_path / "well"
    args = ["--format", "the-well", "--held-out", "0.5", "--out", str(out)]
    done = pdeladder("store", "export", url, *args)
    assert done.returncode == 0, done.stderr[-2000:]
    group = open_store(url).group(HELMHOLTZ)
    seen = []
    for part in ("train", "valid", "test"):
        ds = WellDataset(
            path=str(out / HELMHOLTZ.replace("/", "_")),
            well_split_name=part,
            n_steps_input=1,
            n_steps_output=0,
        )
        assert ds.metadata.constant_field_names[0] == ["f", "u"]
        assert ds.metadata.constant_scalar_names == group.param_names
        for item in range(len(ds)):
            w = ds[item]
            # the window's sample: the one whose parameters it carries
            scalars = w["constant_scalars"].numpy()
            i = int(np.flatnonzero((group.params().astype(np.float32) == scalars).all(1))[0])
            np.testing.assert_array_equal(
                w["constant_fields"].numpy(), np.moveaxis(group.read(i)[0, :, :, :, 0], 0, -1)
            )
            seen.append(i)
    assert sorted(seen) == list(range(group.n_samples))


def test_the_vtk_export_reads_back_in_vtk(trained, tmp_path: Path):
    from vtkmodules.util.numpy_support import vtk_to_numpy
    from vtkmodules.vtkIOXML import vtkXMLImageDataReader

    url, out = trained[0], tmp_path / "vtk"
    args = ["--group", HELMHOLTZ, "--sample", "2", "--out", str(out)]
    done = pdeladder("store", "export", url, "--format", "vtk", *args)
    assert done.returncode == 0, done.stderr[-2000:]
    pvd = out / f"{HELMHOLTZ.replace('/', '__')}__sample2.pvd"
    (dataset,) = ET.parse(pvd).getroot().iter("DataSet")  # steady: one time step
    reader = vtkXMLImageDataReader()
    reader.SetFileName(str(pvd.parent / dataset.get("file")))
    reader.Update()
    image = reader.GetOutput()
    assert image.GetDimensions() == (17, 17, 1)
    truth = open_store(url).group(HELMHOLTZ).read(2)  # (1, C, X, Y, Z)
    data = image.GetPointData()
    for c, name in enumerate(["f", "u"]):
        values = vtk_to_numpy(data.GetArray(name)).reshape(1, 17, 17).transpose(2, 1, 0)
        np.testing.assert_array_equal(values, truth[0, c])  # x fastest in VTK's order


@pytest.fixture
def broken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A site folder holding :data:`BROKEN`, importable here and in fresh interpreters."""
    site = tmp_path / "site"
    for path, text in BROKEN.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(text)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), *sys.path]))
    yield site
    sys.modules.pop("broken_plugin", None)


def test_a_plugin_missing_a_method_is_one_line_exit_2(broken: Path):
    out = pdeladder("solvers", "check", "noresidual", "--dim", "1", path=broken)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [
        "error: family 'noresidual' (entry point noresidual = broken_plugin:NoResidual of "
        "broken-plugin 1.0): cannot be created: TypeError: Can't instantiate abstract class "
        "NoResidual without an implementation for abstract method 'residual'"
    ]


def test_a_plugin_whose_residual_is_misshapen_is_one_line_exit_2(broken: Path):
    out = pdeladder("solvers", "check", "badshape", "--dim", "1", path=broken)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [
        "error: family 'badshape' (entry point badshape = broken_plugin:BadShape of "
        "broken-plugin 1.0): the residual of fields (2, 2, 1, 9, 1, 1) is (2, 1, 7, 1, 1), "
        "not (B, R, T', X', Y', Z')"
    ]
    listed = pdeladder("solvers", "list", "--json", path=broken)
    assert "helmholtz" in {f["name"] for f in json.loads(listed.stdout)}, listed.stderr


def test_a_residual_without_its_row_axis_fails_the_pure_check(broken: Path):
    from broken_plugin import BadShape

    result = pure(Target(BadShape(), 1))  # on 9 points, in a fresh interpreter
    assert not result.passed
    assert result.detail == (
        "the residual of fields (2, 2, 1, 9, 1, 1) is (2, 1, 7, 1, 1), not (B, R, T', X', Y', Z')"
    )
    assert pure(Target(get_family("helmholtz"), 1)).passed
