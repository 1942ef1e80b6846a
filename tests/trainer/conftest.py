"""Fixtures of the trainer tests: a small curriculum and its store, solved with the heat family."""

from mpi4py import MPI  # noqa: F401  (before DOLFINx)

from pathlib import Path

import pytest

from pdeladder.curriculum.loader import parse_curriculum
from pdeladder.curriculum.plan import plan_stage
from pdeladder.dataset.store import open_store
from pdeladder.solvers.registry import get_family

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
            group.update_stats()


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
