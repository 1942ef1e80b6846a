"""A stage's configuration: what a Ray Train worker receives (pickled by Ray) equals what the
driver built, needs of the curriculum only its family-free settings (the other modules load MPI),
and a warm start only grows the Fourier modes."""

import dataclasses
import os
import subprocess
import sys

from ray import cloudpickle

from pdeladder.trainer.models.checkpoint import save_model
from pdeladder.trainer.models.operator import LadderOperator, OperatorConfig
from pdeladder.trainer.training.run import build_layout, rank_threads, stage_config

OPTIONS = dict(
    checkpoint_every=3, log_every=1, activation_checkpointing=False, held_out=0.1, workers=1
)

#: Unpickles a stage configuration from stdin in a fresh interpreter, as a worker does, and
#: prints the curriculum's modules and MPI's that loading it imported.
WORKER = """
import pickle, sys
cfg = pickle.load(sys.stdin.buffer)
print(cfg.stage, cfg.total_steps, cfg.self_improvement.samples)
print(sorted(m for m in sys.modules if m.startswith(("pdeladder.curriculum.", "mpi4py"))))
"""


def test_a_stage_config_survives_pickling_without_mpi(tiny) -> None:
    spec, url, _ = tiny
    s1 = spec.stage("s1")
    cfg = stage_config(spec, s1, build_layout(spec, url, [s1]), url, None, **OPTIONS)
    assert cfg.total_steps == 8 + 4 and cfg.self_improvement.residual_weight == 1.0
    tr = s1.training  # the curriculum's typed settings travel as they are, with their defaults
    assert (cfg.learning_rate, cfg.loss, cfg.self_improvement) == (
        tr.learning_rate,
        tr.loss,
        tr.self_improvement,
    )
    data = cloudpickle.dumps(cfg)
    assert cloudpickle.loads(data) == cfg
    out = subprocess.run(
        [sys.executable, "-c", WORKER], input=data, capture_output=True, check=True
    ).stdout.decode()
    assert out.splitlines() == ["s1 12 4", "['pdeladder.curriculum.settings']"]


def test_a_warm_start_keeps_its_width_and_grows_its_modes(tiny, tmp_path) -> None:
    spec, url, _ = tiny
    s2 = spec.stage("s2")  # modes 4 where the curriculum's model has 3; width 8, 2 layers
    layout = build_layout(spec, url, [s2])
    old = OperatorConfig(
        layout.in_channels, len(layout.slots), width=6, layers=3, modes=(5, 2, 1, 1)
    )
    warm = save_model(LadderOperator(old), tmp_path / "warm", {})
    fresh = stage_config(spec, s2, layout, url, None, **OPTIONS).model
    grown = stage_config(spec, s2, layout, url, warm, **OPTIONS).model
    assert (fresh.width, fresh.layers, fresh.modes) == (8, 2, (4, 4, 1, 1))
    assert (grown.width, grown.layers, grown.modes) == (6, 3, (5, 4, 1, 1))


def test_a_stage_in_process_uses_every_cpu_and_a_ray_worker_its_reserved_one(tiny) -> None:
    spec, url, _ = tiny
    s1 = spec.stage("s1")
    layout = build_layout(spec, url, [s1])
    configs = {
        workers: stage_config(spec, s1, layout, url, None, **{**OPTIONS, "workers": workers})
        for workers in (1, 2)
    }
    assert configs[1].threads == len(os.sched_getaffinity(0))
    assert configs[2].threads == 1
    assert rank_threads(3, 1) == rank_threads(3, 2) == 3  # asked: on Ray, 3 CPUs reserved


def test_the_phases_draws_take_self_improvements_resolution(tiny) -> None:
    """``self_improvement.resolution``: the phase draws its samples on the groups' grids at
    that many points per axis (the rest of each grid as it is); unset, on the groups' own."""
    from pdeladder.curriculum.loader import parse_curriculum
    from pdeladder.trainer.processor import DataProcessor
    from pdeladder.trainer.training.loop import UnsolvedPool

    spec, url, path = tiny
    text = path.read_text().replace(
        "data_anchor_weight: 0.1}", "data_anchor_weight: 0.1, resolution: 65}"
    )
    finer = parse_curriculum(text, str(path)).stage("s1")
    layout = build_layout(spec, url, [spec.stage("s1")])
    own = stage_config(spec, spec.stage("s1"), layout, url, None, **OPTIONS)
    cfg = stage_config(spec, finer, layout, url, None, **OPTIONS)
    (mine,), (grid,) = [u.grid for u in own.unsolved], [u.grid for u in cfg.unsolved]
    assert mine.resolution == 17 and grid == dataclasses.replace(mine, resolution=65)
    batch = UnsolvedPool(cfg, DataProcessor(layout)).batch(0, 0)
    assert batch["grid"] == grid and batch["fields"].shape[-3:] == (65, 1, 1)
