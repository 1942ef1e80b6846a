"""Training along a curriculum: per stage, one ``TorchTrainer`` run on Ray Train, or, for a stage
of one worker, the loop in this process; each stage warm-started from the previous stage's model,
with a live progress display and a metrics log.

Outputs under ``run_dir``::

    metrics.jsonl              one JSON line per report (stage, step, loss terms, lr, throughput)
    loss_curves.png            loss terms, learning rate and throughput against the global step
    stages/<stage>/model/      model.json + model.safetensors of the stage (pickle-free)
    timing.json                per stage, where its wall time went (trainer/training/timing.py)
    ray/                       Ray Train's run folders and sharded training checkpoints
    stages/<stage>/checkpoints/<key>/step_<N>/  a one-worker stage's training checkpoints (last 2)
"""

import contextvars
import dataclasses
import hashlib
import json
import os
import queue as queues
import shutil
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from pdeladder.curriculum.settings import SelfImprovement
from pdeladder.dataset.format import group_path
from pdeladder.dataset.moments import family_normalisation
from pdeladder.dataset.slots import SlotLayout
from pdeladder.dataset.store import absolute_url, open_store
from pdeladder.errors import PdeladderError, StoreError, UserInputError
from pdeladder.ray_runtime import ray_session
from pdeladder.solvers.grid import Grid
from pdeladder.trainer.distributed.choose import (
    StageSizing,
    check_parallel,
    domain_ranks_for,
    mixing_for,
    shard_for,
)
from pdeladder.trainer.layers.spectral import modes_for
from pdeladder.trainer.models.checkpoint import WEIGHT_LAYOUT, read_model_json, save_model
from pdeladder.trainer.models.operator import LadderOperator, OperatorConfig
from pdeladder.trainer.training.config import StageConfig, warm_started
from pdeladder.trainer.training.metrics_log import MetricsLog
from pdeladder.trainer.training.timing import record_timing, stage_timing
from pdeladder.trainer.training.unsolved import UnsolvedSpec


@dataclass
class TrainResult:
    """What a curriculum run produced: the last stage's model folder, its final metrics, and the
    model folder of every stage trained."""

    checkpoint: Path
    metrics: dict[str, Any]
    stages: dict[str, Path] = field(default_factory=dict)
    run_dir: Path | None = None


def _curriculum(spec_or_path: Any):
    from pdeladder.curriculum.loader import load_curriculum
    from pdeladder.curriculum.spec import Curriculum

    return spec_or_path if isinstance(spec_or_path, Curriculum) else load_curriculum(spec_or_path)


def stage_paths(spec, stage, store_url: str) -> list[str]:
    """The stage's group paths, checked to exist in the store."""
    existing = set(open_store(store_url).groups())
    paths = [
        group_path(stage.name, e.family, g.dim, g.resolution, g.snapshots)
        for e, g in stage.groups()
    ]
    if missing := [p for p in paths if p not in existing]:
        raise StoreError(
            f"{store_url}: stage {stage.name!r} has no data for {', '.join(missing)}; "
            "generate the stage's samples first"
        )
    return paths


def training_paths(spec, stage, store_url: str) -> list[str]:
    """The groups a stage trains on: its own, then those of the stages it replays."""
    replayed = [spec.stage(n) for n in stage.training.replay]
    return [p for s in (stage, *replayed) for p in stage_paths(spec, s, store_url)]


def build_layout(spec, store_url: str, stages) -> SlotLayout:
    """Slots for every family of the curriculum, statistics from the groups the stages train
    on."""
    names = [e.family for s in spec.stages for e in s.families]
    dims = sorted({d for s in spec.stages for e in s.families for d in e.dims})
    layout = SlotLayout.for_families(names, dims)
    store = open_store(store_url)
    paths = list(dict.fromkeys(p for s in stages for p in training_paths(spec, s, store_url)))
    layout.set_normalisation(family_normalisation(store.group(p) for p in paths))
    return layout


def stage_workers(stage, workers: int) -> int:
    """The stage's workers: its ``training.workers``, else ``workers`` (the command's)."""
    return stage.training.workers or workers


def rank_threads(asked: int | str, workers: int) -> int:
    """CPU threads per rank: ``asked``, or (``auto``) every CPU this process may use when the
    stage trains in it (one worker), else the one CPU a Ray Train worker reserves. One process
    with two threads trains a quick-start refine step of batch 4 in about 0.65x the time of one
    thread, with no gradient all-reduce and one optimizer step (benchmarks/RESULTS.md, "One process
    with a thread per core")."""
    if asked != "auto":
        return int(asked)
    return len(os.sched_getaffinity(0)) if workers == 1 else 1


def stage_config(
    spec,
    stage,
    layout: SlotLayout,
    store_url: str,
    warm_start: Path | None,
    *,
    checkpoint_every: int,
    log_every: int,
    activation_checkpointing: bool,
    held_out: float,
    workers: int,
    domain_ranks: int | str | None = None,
    parallel: str = "auto",
) -> StageConfig:
    """One stage's training configuration; the stage's ``training.workers`` overrides
    ``workers``; ``domain_ranks`` overrides the stage's
    ``training.domain_ranks`` (checked against the workers and the stage's grids); ``parallel``
    (``auto``, ``ddp``, ``fsdp``) how the parameters are held
    (:func:`~pdeladder.trainer.distributed.choose.shard_for`)."""
    tr = stage.training
    workers = stage_workers(stage, workers)
    dim = max(d for s in spec.stages for e in s.families for d in e.dims)
    model = warm_started(
        OperatorConfig(
            in_channels=layout.in_channels,
            out_channels=len(layout.slots),
            width=spec.model.width,
            layers=spec.model.layers,
            modes=modes_for(tr.modes or spec.model.modes, dim),
            families=len(layout.families),
        ),
        warm_start,
    )
    checkpointing = activation_checkpointing or tr.offload != "none"
    sizing = StageSizing(
        workers=workers,
        grids=[g.space_time for _, g in stage.groups()],
        config=model,
        channels=len(layout.slots),
        batch=tr.batch_size,
        checkpointing=checkpointing,
        budget_gb=tr.memory_budget_gb,
    )
    ranks = domain_ranks_for(domain_ranks if domain_ranks is not None else tr.domain_ranks, sizing)
    return StageConfig(
        stage=stage.name,
        model=model,
        layout=layout,
        warm_start=warm_start,
        store_url=store_url,
        paths=tuple(training_paths(spec, stage, store_url)),
        steps=tr.steps,
        batch_size=tr.batch_size,
        learning_rate=tr.learning_rate,
        loss=tr.loss,
        augment=tr.augment,
        self_improvement=tr.self_improvement,
        unsolved=tuple(
            UnsolvedSpec(
                e.family,
                unsolved_grid(g, tr.self_improvement),
                {n: (r.low, r.high, r.scale) for n, r in e.params.resolved().items()},
            )
            for e, g in stage.groups()
        ),
        seed=spec.seed,
        held_out=held_out,
        checkpoint_every=checkpoint_every,
        log_every=log_every,
        activation_checkpointing=checkpointing,
        offload=tr.offload,
        domain_ranks=ranks,
        shard=shard_for(parallel, ranks, sizing),
        mixing=mixing_for(ranks, sizing),
        threads=rank_threads(tr.threads, workers),
    )


def unsolved_grid(grid: Grid, self_improvement: SelfImprovement | None) -> Grid:
    """The grid of a group's unsolved draws: the group's, at ``self_improvement.resolution``
    points per axis where it is set."""
    if self_improvement is None or self_improvement.resolution is None:
        return grid
    return dataclasses.replace(grid, resolution=self_improvement.resolution)


def export_model(checkpoint_dir: str, out: Path, extra: dict[str, Any]) -> Path:
    """Consolidate a sharded training checkpoint into a ``model.json`` + ``model.safetensors``
    folder (read without a process group; DCP reassembles the shards)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import HuggingFaceStorageReader

    from pdeladder.trainer.training.loop import STATE_FILE

    state = json.loads(Path(checkpoint_dir, STATE_FILE).read_text())
    model = LadderOperator(OperatorConfig.from_json(state["model"]))
    tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
    with warnings.catch_warnings():  # loading in one process without a process group is the intent
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        dcp.load(tensors, storage_reader=HuggingFaceStorageReader(checkpoint_dir), no_dist=True)
    weights = {k.removeprefix("model."): v for k, v in tensors.items()}
    metadata = {
        "stage": state["stage"],
        "step": state["step"],
        "layout": state["layout"],
        "paths": state["paths"],
        "augmented": state.get("augmented", False),
        "scores": state.get("scores", {}),
        "metrics": state.get("metrics", {}),
        **extra,
    }
    return save_model(model, out, metadata, state=weights)


@contextmanager
def draining(queue, sink: Callable[[dict], None], on_metrics) -> Iterator[None]:
    """While open, a thread hands every metrics dict put on ``queue`` to ``sink`` and
    ``on_metrics``, in the caller's context: callbacks that belong to it (a Prefect flow run's
    logger, artifacts and settings) work from this thread too. On closing, the queue is emptied
    first."""
    stop = threading.Event()

    def drain() -> None:
        while not (stop.is_set() and queue.empty()):
            try:
                metrics = queue.get(timeout=0.2)
            except Exception:  # queue.Empty, ray.util.queue.Empty on timeout
                continue
            sink(metrics)
            if on_metrics is not None:
                on_metrics(metrics)

    thread = threading.Thread(target=contextvars.copy_context().run, args=(drain,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _fit_on_ray(
    cfg: StageConfig,
    workers: int,
    run_dir: Path,
    feed,
    *,
    name: str,
    use_gpu: bool,
    max_failures: int,
) -> tuple[Any, dict[str, Any]]:
    """Train the stage on a Ray Train worker group of ``workers``, its metrics put on a queue
    read by ``feed(queue)`` (:func:`draining`): (its last checkpoint, as a context manager
    giving its folder, and its last metrics)."""
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer
    from ray.util.queue import Queue

    from pdeladder.trainer.training.loop import train_loop_per_worker
    from pdeladder.trainer.training.rendezvous import NodeBoundTorchConfig

    queue = Queue(actor_options={"num_cpus": 0})
    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config={"stage": cfg, "metrics_queue": queue},
        torch_config=NodeBoundTorchConfig(),  # the rendezvous store on the node's address only
        scaling_config=ScalingConfig(
            num_workers=workers, use_gpu=use_gpu, resources_per_worker={"CPU": cfg.threads}
        ),
        run_config=RunConfig(
            name=f"{name}-{time.strftime('%Y%m%d-%H%M%S')}",
            storage_path=str(run_dir / "ray"),
            failure_config=FailureConfig(max_failures=max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=2),
        ),
    )
    with feed(queue):
        result = trainer.fit()
    if result.checkpoint is None:
        raise PdeladderError(f"stage {cfg.stage!r}: the run reported no checkpoint")
    return result.checkpoint.as_directory(), dict(result.metrics or {})


def resume_key(cfg: StageConfig) -> str:
    """The key under which a stage's checkpoints in process are resumed: a digest of its
    configuration, of its warm start's ``model.json`` (retrained, it differs) and of the
    weights' layout (a checkpoint of another layout is not resumed)."""
    warm = (cfg.warm_start / "model.json").read_text() if cfg.warm_start else ""
    return hashlib.sha256(f"{cfg!r}\n{warm}\n{WEIGHT_LAYOUT}".encode()).hexdigest()[:16]


def _fit_in_process(
    cfg: StageConfig, run_dir: Path, feed, use_gpu: bool
) -> tuple[Any, dict[str, Any]]:
    """Train the stage as one rank in this process (no Ray Train worker group to start), its
    metrics put on a queue read by ``feed(queue)``: (its last checkpoint, as a context manager
    giving its folder, and its metrics). Checkpoints go to
    ``run_dir/stages/<stage>/checkpoints/<key>/`` (:func:`resume_key`; those of another
    configuration are removed); a failure is not retried here: a rerun resumes from the last."""
    from pdeladder.trainer.training.loop import STATE_FILE, train_stage
    from pdeladder.trainer.training.session import InProcessSession

    folder = run_dir / "stages" / cfg.stage / "checkpoints"
    key = resume_key(cfg)
    for other in folder.glob("*"):
        if other.name != key:
            shutil.rmtree(other)
    queue = queues.Queue()
    session = InProcessSession(folder / key, use_gpu)
    with session, feed(queue):
        train_stage(cfg, session, queue)
    last = session.checkpoints()[-1]
    state = json.loads((last / STATE_FILE).read_text())
    return nullcontext(str(last)), state["metrics"]


def train_curriculum(
    spec_or_path: Any,
    stages: list[str] | None = None,
    store_url: str | None = None,
    workers: int = 2,
    address: str | None = None,
    run_dir: str | Path = "runs/train",
    on_metrics: Callable[[dict[str, Any]], None] | None = None,
    *,
    use_gpu: bool = False,
    max_failures: int = 2,
    checkpoint_every: int = 50,
    log_every: int = 10,
    activation_checkpointing: bool = False,
    held_out: float | None = None,
    progress: bool = True,
    domain_ranks: int | str | None = None,
    parallel: str = "auto",
    on_step: Callable[[str], None] | None = None,
) -> TrainResult:
    """Train the curriculum's stages in order (all, or the named ones), each with ``workers``
    workers or its own ``training.workers`` (on Ray Train; one worker: in this process),
    warm-starting each stage from the previous one's model (or from
    ``run_dir/stages/<previous>/model`` when it exists).

    ``domain_ranks`` (a number or ``"auto"``; default: each stage's ``training.domain_ranks``)
    splits every sample along x over that many workers (docs/trainer.md, "Domain parallelism");
    ``parallel`` (``auto``, ``ddp``, ``fsdp``) replicates or shards the parameters
    (docs/trainer.md, "Training on Ray Train").

    ``on_metrics`` receives every reported metrics dict; a killed worker is restarted from the
    stage's last checkpoint up to ``max_failures`` times; a stage trained in this process is not
    restarted, and a rerun of it resumes from its last checkpoint.

    ``held_out``: the share of each group's samples kept out of training (default: the
    curriculum's ``training.held_out``); the stages' models record it in their metadata, where
    ``evaluate`` finds it. ``on_step``: told a line as Ray starts and when it is ready.
    """
    spec = _curriculum(spec_or_path)
    held_out = spec.held_out if held_out is None else held_out
    store_url = store_url or spec.store
    if not store_url:
        raise UserInputError("no store: pass --store URL or set `store:` in the curriculum")
    store_url = absolute_url(store_url)
    if workers < 1:
        raise UserInputError(f"workers must be at least 1, got {workers}")
    if checkpoint_every < 1:
        raise UserInputError(f"--checkpoint-every must be at least 1 step, got {checkpoint_every}")
    check_parallel(parallel)
    chosen = [spec.stage(n) for n in stages] if stages else list(spec.stages)
    run_dir = Path(run_dir).absolute()
    names = [s.name for s in spec.stages]
    first = names.index(chosen[0].name)
    previous = run_dir / "stages" / names[first - 1] / "model" if first > 0 else None
    warm = previous if previous is not None and previous.is_dir() else None
    layout = (
        SlotLayout.from_json(read_model_json(warm)["metadata"]["layout"])
        if warm
        else build_layout(spec, store_url, chosen)
    )
    options = {
        "checkpoint_every": checkpoint_every,
        "log_every": log_every,
        "activation_checkpointing": activation_checkpointing,
        "held_out": held_out,
        "workers": workers,
        "domain_ranks": domain_ranks,
        "parallel": parallel,
    }
    for stage in chosen:  # every stage's settings are checked before anything is written
        stage_config(spec, stage, layout, store_url, warm, **options)
    run_dir.mkdir(parents=True, exist_ok=True)
    with ray_session(address, on_step=on_step):
        log = MetricsLog(run_dir)
        results: dict[str, Path] = {}
        final: dict[str, Any] = {}
        for stage in chosen:
            cfg = stage_config(spec, stage, layout, store_url, warm, **options)
            n = stage_workers(stage, workers)
            t_stage = time.perf_counter()
            with log.stage(stage.name, cfg.total_steps, progress) as sink:
                feed = partial(draining, sink=sink, on_metrics=on_metrics)
                try:
                    if n == 1:
                        checkpoint, final = _fit_in_process(cfg, run_dir, feed, use_gpu)
                    else:
                        checkpoint, final = _fit_on_ray(
                            cfg,
                            n,
                            run_dir,
                            feed,
                            name=f"{spec.name}-{stage.name}",
                            use_gpu=use_gpu,
                            max_failures=max_failures,
                        )
                except PdeladderError:
                    raise
                except Exception as err:
                    raise PdeladderError(f"stage {stage.name!r}: training failed: {err}") from err
            with checkpoint as folder:
                warm = export_model(
                    folder,
                    run_dir / "stages" / stage.name / "model",
                    {"curriculum": spec.name, "store": store_url, "held_out": held_out},
                )
            results[stage.name] = warm
            record_timing(run_dir, stage.name, stage_timing(time.perf_counter() - t_stage, final))
            log.plot()
    return TrainResult(warm, final, results, run_dir)
