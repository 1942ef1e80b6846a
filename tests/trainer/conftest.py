"""Fixtures of the trainer tests: a small curriculum and its store, solved with the heat family;
a store of known (hand-written) fields and untrained models saved as checkpoints."""

from mpi4py import MPI  # noqa: F401  (before DOLFINx)

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from pdeladder.curriculum.loader import parse_curriculum
from pdeladder.curriculum.plan import plan_stage
from pdeladder.dataset.moments import family_normalisation
from pdeladder.dataset.slots import SlotLayout
from pdeladder.dataset.store import open_store
from pdeladder.solvers.family import Sample, SolveStats
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.registry import get_family
from pdeladder.trainer.models.checkpoint import save_model
from pdeladder.trainer.models.operator import LadderOperator, OperatorConfig

CURRICULUM = """
name: tiny
seed: 7
model: {width: 8, modes: 3, layers: 2}
stages:
  - name: s1
    families:
      - family: heat
        dims: [1]
        resolutions: [17]
        samples: 12
        snapshots: 6
        params: {diffusivity: [0.005, 0.02], ic_length_scale: [0.15, 0.3]}
    training:
      steps: 8
      batch_size: 2
      learning_rate: {initial: 0.003, schedule: constant}
      self_improvement: {steps: 4, samples: 4, residual_weight: 1.0, data_anchor_weight: 0.1}
  - name: s2
    families:
      - family: heat
        dims: [1]
        resolutions: [33]
        samples: 6
        snapshots: 6
        params: {diffusivity: [0.005, 0.02], ic_length_scale: [0.15, 0.3]}
    training:
      steps: 4
      batch_size: 2
      modes: 4
      learning_rate: {initial: 0.001, schedule: cosine, final: 0.0001}
"""


def write_store(spec, url: str) -> None:
    """Solve every sample of every stage of ``spec`` into the store at ``url``."""
    store = open_store(url, "a")
    for stage in spec.stages:
        for plan in plan_stage(spec, stage).groups:
            fam = get_family(plan.family)
            group = store.require_group(stage.name, fam, plan.grid, n_samples=plan.n)
            for i in range(plan.n):
                params = fam.Params.from_vector(plan.params[i])
                group.write(i, fam.run(params, plan.grid, int(plan.seeds[i])))
            group.update_normalisation()


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, str, Path]:
    """(curriculum, store URL, curriculum file) of a two-stage 1D heat curriculum."""
    root = tmp_path_factory.mktemp("tiny")
    path = root / "tiny.yaml"
    path.write_text(CURRICULUM)
    spec = parse_curriculum(CURRICULUM, str(path))
    url = str(root / "store")
    write_store(spec, url)
    return spec, url, path


# -- a store of known fields and models built without training (evaluate, predict) -------------

KNOWN_SAMPLES = 10
KNOWN_HEAT = Grid(1, 9, 5, 0.5)
KNOWN_DARCY = Grid(1, 9, 1, 0.0)


def known_heat(i: int) -> np.ndarray:
    """Sample ``i`` of the heat group: ``u(t, x) = exp(-(1 + i) t) (sin(pi x) + 0.5)``,
    float32 ``(T, 1, X, 1, 1)``."""
    t = np.linspace(0, KNOWN_HEAT.t_end, KNOWN_HEAT.snapshots)
    x = np.linspace(0, 1, KNOWN_HEAT.resolution)
    u = np.exp(-(1 + i) * t)[:, None] * (np.sin(np.pi * x) + 0.5)[None]
    return u[:, None, :, None, None].astype(np.float32)


def known_darcy(i: int) -> np.ndarray:
    """Sample ``i`` of the steady Darcy group: channels ``a = cos(3x) + i / 10`` (input) and
    ``p = (1 + i) (x (1 - x) + 0.1)``, float32 ``(1, 2, X, 1, 1)``."""
    x = np.linspace(0, 1, KNOWN_DARCY.resolution)
    a, p = np.cos(3 * x) + i / 10, (1 + i) * (x * (1 - x) + 0.1)
    return np.stack([a, p])[None, :, :, None, None].astype(np.float32)


@dataclass(frozen=True)
class KnownStore:
    """A store of known fields: its URL, the paths of its heat and Darcy groups, and how
    their samples were made."""

    url: str
    paths: list[str]
    samples: int = KNOWN_SAMPLES
    heat_grid: Grid = KNOWN_HEAT
    heat: Callable[[int], np.ndarray] = known_heat
    darcy: Callable[[int], np.ndarray] = known_darcy


@pytest.fixture
def known_store(tmp_path: Path) -> KnownStore:
    """A store with a heat and a steady Darcy group of known fields (:class:`KnownStore`)."""
    url = str(tmp_path / "known.zarr")
    store = open_store(url, "a")
    paths = []
    for name, grid, fields in (
        ("heat", KNOWN_HEAT, known_heat),
        ("darcy", KNOWN_DARCY, known_darcy),
    ):
        fam = get_family(name)
        group = store.require_group("s", fam, grid, n_samples=KNOWN_SAMPLES)
        for i in range(KNOWN_SAMPLES):
            sample = Sample(name, fields(i), grid, fam.Params(), seed=100 + i, stats=SolveStats())
            group.write(i, sample)
        group.update_normalisation()
        paths.append(group.path)
    return KnownStore(url, paths)


@pytest.fixture
def operator_checkpoint() -> Callable[..., Path]:
    """:func:`save_operator`, for tests."""
    return save_operator


def tiny_operator(layout: SlotLayout, modes: tuple[int, ...], **config) -> LadderOperator:
    """A seeded width-8, two-block operator for ``layout`` (``config``: more
    :class:`OperatorConfig` fields)."""
    torch.manual_seed(0)
    return LadderOperator(
        OperatorConfig(
            in_channels=layout.in_channels,
            out_channels=len(layout.slots),
            width=8,
            layers=2,
            modes=modes,
            families=len(layout.families),
            **config,
        )
    )


def save_operator(
    folder: Path, store_url: str, paths: list[str], *, persistence: bool = False
) -> Path:
    """A seeded heat + Darcy model (normalised with the store's statistics) saved as a checkpoint
    that trained on ``paths``; ``persistence``: its output is its input state, ``u(t) = u(0)``."""
    layout = SlotLayout.for_families(["heat", "darcy"], [1])
    store = open_store(store_url)
    layout.set_normalisation(family_normalisation(store.group(p) for p in paths))
    model = tiny_operator(layout, (3, 3, 1, 1), output="change")  # a zero projection: u(0)
    if persistence:
        with torch.no_grad():
            model.project[-1].linear.weight.zero_()
            model.project[-1].linear.bias.zero_()
    metadata = {"stage": "s", "step": 0, "layout": layout.to_json(), "paths": paths}
    return save_model(model, folder, metadata)


def run_ranks(script: list[str], world_size: int, folder: Path, *extra: str) -> Path:
    """Run ``world_size`` processes ``python *script RANK WORLD INIT OUT *extra`` that join one gloo
    group through a file rendezvous in ``folder``; fail the test with their stderr unless every
    one exits 0. Returns ``OUT`` (``folder/results``), where the ranks write what they found."""
    out, init = folder / "results", f"file://{folder / 'rendezvous'}"
    ranks = [
        subprocess.Popen(
            [sys.executable, *script, str(r), str(world_size), init, str(out), *extra],
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(world_size)
    ]
    errors = [p.communicate(timeout=600)[1] for p in ranks]
    assert all(p.returncode == 0 for p in ranks), "\n".join(e[-3000:] for e in errors)
    return out
