"""The ``data-campaign`` flow: solve a curriculum's stages into a Zarr store on a Ray actor pool.

One task per stage drives the pool through :func:`pdeladder.curriculum.generation.materialize`;
a progress artifact follows every finished sample, and the run ends with a table artifact (per
group: ok, failed, skipped, DOF-steps/s, bytes) and a markdown artifact with a picture of one
sample per group. Reruns and retries skip the samples the store already records.
"""

import tempfile
from enum import StrEnum
from pathlib import Path

import numpy as np
from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.tasks import exponential_backoff
from pydantic import Field

from pdeladder.curriculum.generation import (
    MaterializeSummary,
    ProgressEvent,
    materialize,
)
from pdeladder.curriculum.plan import plan_stage
from pdeladder.curriculum.spec import Curriculum
from pdeladder.dataset.format import FAILED, OK
from pdeladder.dataset.plot import plot_sample
from pdeladder.dataset.store import open_store
from pdeladder.errors import PdeladderError, UserInputError
from pdeladder.flows.artifacts import LiveProgress, png_markdown
from pdeladder.flows.common import CurriculumSource, transient
from pdeladder.ray_runtime import ray_session


class FailedSamples(StrEnum):
    """What to do with samples a previous run recorded as failed."""

    keep = "keep"
    retry = "retry"


class Campaign(CurriculumSource):
    """What to solve and where to store it."""

    stages: list[str] = Field(
        default_factory=list, description="Stages to solve, in order; empty: every stage."
    )
    store_url: str | None = Field(
        None,
        description="Zarr store: a path, file:// or s3:// URL; empty: the curriculum's `store`.",
    )
    workers: int = Field(2, ge=1, le=4096, description="Solver actors in the Ray pool.")
    ray_address: str | None = Field(
        None,
        description="Ray cluster to join ('auto', 'ray://head:10001'); empty: a local Ray runtime.",
    )
    weights: str | None = Field(
        None, description="Stage weights file (YAML/JSON) that steers the sample budget."
    )
    failed_samples: FailedSamples = Field(
        FailedSamples.keep,
        description="keep: samples recorded as failed stay failed; retry: solve them again.",
    )
    max_failed_fraction: float = Field(
        0.1,
        ge=0.0,
        le=1.0,
        description="The run fails when more than this fraction of the recorded samples failed.",
    )


class CampaignProgress:
    """Overall progress of a campaign, as a live progress artifact: recorded samples / planned."""

    def __init__(self, planned: int, description: str):
        self.planned = planned
        self.finished_stages = 0
        self.bar = LiveProgress("data-campaign-progress", description)

    def __call__(self, event: ProgressEvent) -> None:
        self.bar.update(self.finished_stages + event.skipped + event.done, self.planned)

    def stage_done(self, summary: MaterializeSummary) -> None:
        self.finished_stages += sum(g.samples for g in summary.groups)
        self.bar.update(self.finished_stages, self.planned, force=True)


@task(
    task_run_name="materialize-{stage}",
    retries=2,
    retry_delay_seconds=exponential_backoff(backoff_factor=10),
    retry_jitter_factor=0.5,
    retry_condition_fn=transient,
    cache_policy=NO_CACHE,
)
def materialize_stage(
    spec: Curriculum, stage: str, campaign: Campaign, progress: CampaignProgress
) -> MaterializeSummary:
    """Solve one stage's missing samples; the store skips those already recorded."""
    summary = materialize(
        spec,
        stages=[stage],
        store_url=campaign.store_url,
        workers=campaign.workers,
        address=campaign.ray_address,
        on_progress=progress,
        weights=campaign.weights,
        retry_failed=campaign.failed_samples == FailedSamples.retry,
    )
    get_run_logger().info(
        "stage %s: %d ok, %d failed, %d already recorded, %.3g DOF-steps/s",
        stage,
        summary.ok,
        summary.failed,
        summary.skipped,
        summary.dof_steps_per_s,
    )
    return summary


@task(cache_policy=NO_CACHE)
def sample_pictures(store_url: str, groups: list[str]) -> str:
    """Markdown with a picture of the first stored sample of each group."""
    store = open_store(store_url)
    parts = ["# One sample per group", ""]
    with tempfile.TemporaryDirectory() as folder:
        for path in groups:
            group = store.group(path)
            ok = np.flatnonzero(group.status() == OK)
            parts += [f"## {path}", ""]
            if ok.size:
                png = plot_sample(group, int(ok[0]), Path(folder) / "sample.png").read_bytes()
                parts += [png_markdown(f"{path} sample {ok[0]}", png), ""]
            else:
                parts += ["_no stored sample_", ""]
    return "\n".join(parts)


@task(cache_policy=NO_CACHE)
def recorded_status(store_url: str, groups: list[str]) -> dict[str, dict[str, int]]:
    """Samples the store records as ok and as failed, per group (this run's and earlier ones)."""
    store = open_store(store_url)
    out = {}
    for path in groups:
        status = store.group(path).status()
        out[path] = {"ok": int((status == OK).sum()), "failed": int((status == FAILED).sum())}
    return out


def summary_rows(summaries: list[MaterializeSummary]) -> list[dict]:
    """One table row per group."""
    return [
        {
            "stage": g.stage,
            "group": g.group,
            "samples": g.samples,
            "ok": g.ok,
            "failed": g.failed,
            "skipped": g.skipped,
            "dof_steps_per_s": round(g.dof_steps_per_s, 1),
            "bytes": g.bytes,
        }
        for s in summaries
        for g in s.groups
    ]


@flow(name="data-campaign")
def data_campaign(campaign: Campaign) -> dict:
    """Solve a curriculum's stages into a Zarr store on a pool of Ray solver actors.

    Reruns skip the samples already recorded in the store, so a failed or interrupted campaign
    is resumed by running it again.
    """
    logger = get_run_logger()
    spec = campaign.load()
    store_url = campaign.store_url or spec.store
    if not store_url:
        raise UserInputError(f"curriculum {spec.name!r} names no store: set store_url")
    campaign = campaign.model_copy(update={"store_url": store_url})
    stages = campaign.stages or [s.name for s in spec.stages]
    planned = sum(plan_stage(spec, spec.stage(s), campaign.weights).n for s in stages)
    logger.info("%s: %d samples in stages %s into %s", spec.name, planned, stages, store_url)
    progress = CampaignProgress(planned, f"{spec.name}: samples recorded in {store_url}")
    summaries = []
    with progress.bar, ray_session(campaign.ray_address, num_cpus=campaign.workers):
        for stage in stages:
            summaries.append(materialize_stage(spec, stage, campaign, progress))
            progress.stage_done(summaries[-1])
    rows = summary_rows(summaries)
    create_table_artifact(
        rows, key="data-campaign-summary", description=f"{spec.name} into {store_url}"
    )
    create_markdown_artifact(
        sample_pictures(store_url, [r["group"] for r in rows]),
        key="data-campaign-samples",
        description=f"{spec.name}: one sample per group",
    )
    recorded = recorded_status(store_url, [r["group"] for r in rows])
    failed = sum(c["failed"] for c in recorded.values())
    finished = failed + sum(c["ok"] for c in recorded.values())
    if finished and failed / finished > campaign.max_failed_fraction:
        raise PdeladderError(
            f"{failed} of {finished} recorded samples failed (more than "
            f"{campaign.max_failed_fraction:.0%}); see the data-campaign-summary artifact, and "
            "rerun with failed_samples=retry once the cause is fixed"
        )
    return {"store": store_url, "stages": stages, "groups": rows}
