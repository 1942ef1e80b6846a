"""The README's Python examples run as printed, on a store and a model laid out where
`make demo` leaves them (a small heat group and a seeded model stand in for the demo's)."""

from mpi4py import MPI  # noqa: F401  (before DOLFINx)

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from pdeladder.dataset.moments import family_normalisation
from pdeladder.dataset.slots import SlotLayout
from pdeladder.dataset.store import open_store
from pdeladder.solvers.family import Sample, SolveStats
from pdeladder.solvers.registry import get_family
from pdeladder.trainer.models.checkpoint import save_model
from pdeladder.trainer.models.operator import LadderOperator, OperatorConfig

README = Path(__file__).parents[1] / "README.md"


def python_examples() -> list[str]:
    """The ``python`` code blocks of the README's "Python" section."""
    section = README.read_text().split("\n## Python\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


@pytest.fixture(scope="module")
def demo_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``stores/quickstart.zarr`` with the group ``refine/heat/2d_n33_t11`` (4 decaying
    cosines) and ``runs/quickstart/stages/refine/model``, a seeded heat model of it."""
    root = tmp_path_factory.mktemp("demo")
    heat = get_family("heat")
    grid = heat.grid(2, 33, 11)
    store = open_store(str(root / "stores" / "quickstart.zarr"), "a")
    group = store.require_group("refine", heat, grid, n_samples=4)
    t = np.linspace(0, 1, 11)[:, None, None]
    x = np.linspace(0, 1, 33)
    for i in range(4):
        u = np.exp(-(1 + i) * t) * np.cos(np.pi * x)[:, None] * np.cos(np.pi * x)[None, :]
        fields = u[:, None, :, :, None].astype(np.float32)  # (T, C, X, Y, Z)
        params = heat.parse_params({"diffusivity": 0.01 * (1 + i)})
        group.write(i, Sample("heat", fields, grid, params, 10 + i, SolveStats()))
    group.update_normalisation()
    layout = SlotLayout.for_families(["heat"], [2])
    layout.set_normalisation(family_normalisation([group]))
    torch.manual_seed(0)
    config = OperatorConfig(
        in_channels=layout.in_channels,
        out_channels=len(layout.slots),
        width=8,
        layers=2,
        modes=(3, 4, 4, 1),
        families=1,
    )
    metadata = {"stage": "refine", "step": 0, "layout": layout.to_json(), "paths": [group.path]}
    save_model(LadderOperator(config), root / "runs/quickstart/stages/refine/model", metadata)
    return root


def test_the_readme_has_its_three_python_examples() -> None:
    assert len(python_examples()) == 3


@pytest.mark.parametrize("index", range(3))
def test_a_readme_example_runs_as_printed(demo_folder: Path, index: int) -> None:
    code = python_examples()[index]
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=demo_folder, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    printed = run.stdout.strip().splitlines()[-1]
    expected = [
        r"\[0\.01 +0\.02 +0\.03\] -?\d",  # the decoded diffusivities, then a mean
        r"refine/heat/2d_n33_t11 \(4, 1, 11, 33, 33, 1\)",
        r"\(1, 11, 33, 33\)",
    ][index]
    assert re.match(expected, printed), printed
