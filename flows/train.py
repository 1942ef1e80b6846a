"""The ``train`` flow: train the neural operator along a curriculum, here or as a Ray job.

``local`` runs :func:`pdeladder.trainer.training.run.train_curriculum` from the flow's process
(on a local Ray runtime, or joining ``ray_address``); ``ray-job`` submits the same training
(:mod:`pdeladder.flows.train_job`) to a cluster's job server and follows the job. Either way,
every metrics report becomes a Prefect log line and moves a progress artifact; the run ends with
a table of each stage's last metrics and a markdown artifact with the loss curves.
"""

import json
import shlex
import tempfile
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run
from prefect.tasks import exponential_backoff
from pydantic import Field

from pdeladder.curriculum.spec import Curriculum
from pdeladder.errors import ServiceError, UserInputError
from pdeladder.flows import ray_job
from pdeladder.flows.artifacts import LiveProgress, png_markdown
from pdeladder.flows.common import CurriculumSource, transient
from pdeladder.trainer.training.metrics_log import plot_curves

#: Metrics shown in the summary table, in this order.
COLUMNS = ("stage", "step", "epochs", "loss", "data_loss", "equation_loss", "lr", "samples_per_s")


class TrainMode(StrEnum):
    """Where training runs."""

    local = "local"
    ray_job = "ray-job"


class TrainRun(CurriculumSource):
    """What to train on, where, and where the run's files go."""

    stages: list[str] = Field(
        default_factory=list, description="Stages to train, in order; empty: every stage."
    )
    store_url: str | None = Field(
        None,
        description="Zarr store with the stages' samples; empty: the curriculum's `store`.",
    )
    workers: int = Field(2, ge=1, le=4096, description="Ray Train workers (one rank each).")
    mode: TrainMode = Field(
        TrainMode.local,
        description="local: train from the flow's process; ray-job: submit to a Ray cluster.",
    )
    ray_address: str | None = Field(
        None,
        description=(
            "local: a Ray cluster to join ('auto', 'ray://head:10001'), empty for a local "
            "runtime; ray-job: the cluster's job server, e.g. http://127.0.0.1:8265."
        ),
    )
    run_dir: str = Field(
        "runs/train",
        description="Folder of metrics, checkpoints and models, on the machine that trains.",
    )
    retries: int = Field(
        1, ge=0, le=5, description="Retries of a failed training; each warm-starts from run_dir."
    )
    timeout_min: int = Field(
        24 * 60, ge=1, le=7 * 24 * 60, description="ray-job: stop the job after this many minutes."
    )


class MetricsFeed:
    """Receives metrics reports: logs each one, moves the progress artifact, keeps the records."""

    def __init__(self, spec: Curriculum, stages: list[str], log: Callable[..., None]):
        self.log = log
        self.offsets, total = {}, 0
        for name in stages:  # steps of a stage: supervised plus the self-improvement phase
            training = spec.stage(name).training
            self.offsets[name] = total
            total += training.steps + (
                training.self_improvement.steps if training.self_improvement else 0
            )
        self.total = total
        self.records: list[dict[str, Any]] = []
        self.bar = LiveProgress("train-progress", f"{spec.name}: training steps done")

    def __call__(self, metrics: dict[str, Any]) -> None:
        self.records.append(metrics)
        self.log(
            "stage %s step %s: loss %.4g",
            metrics.get("stage"),
            metrics.get("step"),
            metrics.get("loss", float("nan")),
        )
        self.bar.update(self.offsets.get(metrics.get("stage"), 0) + metrics["step"], self.total)

    def last_per_stage(self) -> list[dict[str, Any]]:
        last = {r["stage"]: r for r in self.records}
        return [{k: r.get(k) for k in COLUMNS} for r in last.values()]


def train_command(run: TrainRun, curriculum_file: str) -> str:
    """The command line a Ray job runs: :mod:`pdeladder.flows.train_job`."""
    args = ["python", "-m", "pdeladder.flows.train_job", curriculum_file]
    args += ["--workers", str(run.workers), "--run-dir", run.run_dir]
    if run.store_url:
        args += ["--store", run.store_url]
    for stage in run.stages:
        args += ["--stage", stage]
    return shlex.join(args)


@task(retry_condition_fn=transient, cache_policy=NO_CACHE)
def train_here(spec: Curriculum, run: TrainRun, feed: MetricsFeed) -> dict[str, Any]:
    """Train with Ray Train from this process; a retry warm-starts from the run folder."""
    from pdeladder.trainer.training.run import train_curriculum

    result = train_curriculum(
        spec,
        stages=run.stages or None,
        store_url=run.store_url,
        workers=run.workers,
        address=run.ray_address,
        run_dir=run.run_dir,
        on_metrics=feed,
        progress=False,
    )
    return {
        "checkpoint": str(result.checkpoint),
        "stages": {k: str(v) for k, v in result.stages.items()},
        "metrics": result.metrics,
    }


@task(retry_condition_fn=transient, cache_policy=NO_CACHE)
def train_as_ray_job(run: TrainRun, feed: MetricsFeed) -> dict[str, Any]:
    """Submit the training as a Ray job and follow it; its JSON lines are the metrics."""
    logger = get_run_logger()
    if not run.ray_address:
        raise UserInputError("mode ray-job needs ray_address, the job server's http:// URL")
    result: dict[str, Any] = {}
    last: list[str] = [""]  # the last plain log line, for the error message

    def on_line(line: str) -> None:
        try:
            record = json.loads(line)
        except ValueError:
            logger.info("%s", line)
            last[0] = line.strip() or last[0]
            return
        if isinstance(record, dict) and "checkpoint" in record:
            result.update(record)
        elif isinstance(record, dict) and "step" in record:
            feed(record)

    with tempfile.TemporaryDirectory() as folder:
        job_id = ray_job.submit(
            run.ray_address,
            train_command(run, "curriculum.yaml"),
            {"curriculum.yaml": run.yaml_text()},
            Path(folder),
            {"prefect_flow_run_id": str(flow_run.get_id())},
        )
    logger.info("Ray job %s submitted to %s", job_id, run.ray_address)
    status = ray_job.follow(run.ray_address, job_id, on_line, timeout_s=run.timeout_min * 60)
    if status != "SUCCEEDED" or "checkpoint" not in result:
        raise ServiceError(f"Ray job {job_id} ended {status} without a trained model: {last[0]}")
    return result


@flow(name="train")
def train(run: TrainRun) -> dict[str, Any]:
    """Train the neural operator along a curriculum, locally or as a Ray job on a cluster."""
    spec = run.load()
    stages = run.stages or [s.name for s in spec.stages]
    for name in stages:
        spec.stage(name)  # an unknown stage fails here, naming the available ones
    get_run_logger().info(
        "%s: training stages %s on %s (%s), run files in %s",
        spec.name,
        stages,
        run.store_url or spec.store,
        run.mode.value,
        run.run_dir,
    )
    feed = MetricsFeed(spec, stages, get_run_logger().info)
    retrying = {"retries": run.retries, "retry_delay_seconds": exponential_backoff(30)}
    with feed.bar:
        if run.mode == TrainMode.ray_job:
            result = train_as_ray_job.with_options(**retrying)(run, feed)
        else:
            result = train_here.with_options(**retrying)(spec, run, feed)
    create_table_artifact(
        feed.last_per_stage(), key="train-metrics", description=f"{spec.name}: last metrics"
    )
    with tempfile.TemporaryDirectory() as folder:
        png = plot_curves(feed.records, Path(folder) / "loss_curves.png")
        if png is not None:
            create_markdown_artifact(
                f"# Loss curves\n\n{png_markdown('loss curves', png.read_bytes())}\n",
                key="train-loss-curves",
                description=f"{spec.name}: loss terms, learning rate, throughput",
            )
    return result
