"""The ``closed-loop`` flow: solve a stage, train on it, evaluate, steer the next stage, repeat.

For each stage ``k`` in order: the ``data-campaign`` flow solves it (with the weights the
previous round wrote), the ``train`` flow trains on it (warm-started from stage ``k - 1``), the
model is evaluated on the store per family (nRMSE beside its trivial baseline and the ratio), and
the scores become stage ``k + 1``'s weights file (:mod:`pdeladder.curriculum.weights`): families
the model does worse on get more of the budget.
"""

from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml
from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.tasks import exponential_backoff
from pydantic import Field

from pdeladder.curriculum.weights import Weights
from pdeladder.errors import UserInputError
from pdeladder.flows.common import CurriculumSource, transient
from pdeladder.flows.data_campaign import Campaign, data_campaign
from pdeladder.flows.train import TrainMode, TrainRun, train

#: Bounds of a family's weight, so that one bad round cannot starve or flood a family.
WEIGHT_RANGE = (0.25, 4.0)


class SteerBy(StrEnum):
    """The evaluation score that steers the next stage's budget."""

    nrmse = "nrmse"
    residual = "residual"


class Loop(CurriculumSource):
    """The curriculum to climb, where data and runs go, and how strongly scores steer."""

    stages: list[str] = Field(
        default_factory=list, description="Stages to climb, in order; empty: every stage."
    )
    store_url: str | None = Field(
        None,
        description="Zarr store: a path, file:// or s3:// URL; empty: the curriculum's `store`.",
    )
    workers: int = Field(2, ge=1, le=4096, description="Solver actors and Ray Train workers.")
    ray_address: str | None = Field(
        None,
        description="Ray cluster to join ('auto', 'ray://head:10001'); empty: a local Ray runtime.",
    )
    run_dir: str = Field(
        "runs/closed-loop",
        description="Folder of models, evaluations and weights files, shared with Ray's workers.",
    )
    steer_by: SteerBy = Field(
        SteerBy.nrmse, description="Score that sets the next stage's family weights."
    )
    sharpness: float = Field(
        1.0,
        ge=0.0,
        le=4.0,
        description="Weight = (score / mean score) ** sharpness; 0 keeps the configured budget.",
    )
    refine: int = Field(
        0,
        ge=0,
        le=10_000,
        description="Iterations against the PDE residual (Gauss-Newton; L-BFGS beyond a "
        "direct solve's size) that refine each prediction in the last stage's evaluation, scored beside the "
        "unrefined ones; 0: none.",
    )


def steering_weights(
    stage: str,
    scores: dict[str, dict[str, float]],
    families: list[str],
    steer_by: str,
    sharpness: float,
) -> Weights:
    """Weights for ``stage``: each of its ``families`` that was scored gets ``(score / mean) **
    sharpness``, clipped to :data:`WEIGHT_RANGE`; families without a score keep weight 1."""
    scored = {f: scores[f][steer_by] for f in families if f in scores}
    mean = sum(scored.values()) / len(scored) if scored else 0.0
    weights = {}
    for family, score in scored.items():
        ratio = score / mean if mean > 0 else 1.0
        weights[family] = min(max(ratio**sharpness, WEIGHT_RANGE[0]), WEIGHT_RANGE[1])
    return Weights(stage=stage, families=weights)


@task(
    retries=1,
    retry_delay_seconds=exponential_backoff(backoff_factor=10),
    retry_condition_fn=transient,
    cache_policy=NO_CACHE,
)
def evaluate(checkpoint: str, store_url: str, out_dir: Path, refine: int = 0) -> dict[str, Any]:
    """Scores of the model per group and per family (refined by ``refine`` steps, the
    unrefined beside them), and ``report.md`` under ``out_dir``."""
    from pdeladder.trainer.evaluate import evaluate_checkpoint

    return evaluate_checkpoint(checkpoint, store_url, out_dir, refine=refine)


@task(cache_policy=NO_CACHE)
def write_weights(weights: Weights, path: Path) -> str:
    """Write the weights file the next data campaign reads."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(weights.model_dump(mode="json"), sort_keys=False))
    return str(path)


@flow(name="closed-loop")
def closed_loop(loop: Loop) -> dict[str, Any]:
    """Climb a curriculum stage by stage: solve, train, evaluate, steer the next stage."""
    logger = get_run_logger()
    spec = loop.load()
    store_url = loop.store_url or spec.store
    if not store_url:
        raise UserInputError(f"curriculum {spec.name!r} names no store: set store_url")
    stages = loop.stages or [s.name for s in spec.stages]
    for name in stages:
        spec.stage(name)  # an unknown stage fails here, naming the available ones
    run_dir = Path(loop.run_dir).absolute()
    logger.info(
        "%s: climbing stages %s, store %s, run files in %s", spec.name, stages, store_url, run_dir
    )
    source = {"curriculum": loop.curriculum, "inline_spec": loop.inline_spec}
    shared = {**source, "store_url": store_url, "workers": loop.workers}
    weights_file: str | None = None
    rows: list[dict[str, Any]] = []
    for k, name in enumerate(stages):
        data_campaign(
            Campaign(**shared, stages=[name], ray_address=loop.ray_address, weights=weights_file)
        )
        trained = train(
            TrainRun(
                **shared,
                stages=[name],
                mode=TrainMode.local,
                ray_address=loop.ray_address,
                run_dir=str(run_dir),
            )
        )
        out_dir = run_dir / "evaluation" / name
        last = k + 1 == len(stages)
        report = evaluate(trained["checkpoint"], store_url, out_dir, loop.refine if last else 0)
        create_markdown_artifact(
            (out_dir / "report.md").read_text(),
            key="closed-loop-evaluation",
            description=f"model after stage {name}",
        )
        steer = None
        if k + 1 < len(stages):
            following = stages[k + 1]
            families = [e.family for e in spec.stage(following).families]
            steer = steering_weights(
                following, report["families"], families, loop.steer_by, loop.sharpness
            )
            weights_file = write_weights(steer, run_dir / "weights" / f"{following}.yaml")
            logger.info("stage %s weights: %s", following, steer.families)
        from pdeladder.trainer.baselines import beats, ratio  # torch: only once a stage ran

        for family, score in report["families"].items():
            plain = score.get("unrefined_nrmse", score["nrmse"])  # the model's own
            base = score["baseline_nrmse"]
            rows.append(
                {
                    "stage": name,
                    "family": family,
                    "nrmse": round(plain, 5),
                    "baseline": round(base, 5),
                    "ratio": None if ratio(plain, base) is None else round(ratio(plain, base), 4),
                    "beats_baseline": beats(plain, base),
                    "refined": round(score["nrmse"], 5) if "unrefined_nrmse" in score else None,
                    "residual": round(score["residual"], 5),
                    "next_weight": steer.families.get(family) if steer else None,
                }
            )
    create_table_artifact(
        rows, key="closed-loop-scores", description=f"{spec.name}: scores and weights per stage"
    )
    return {
        "store": store_url,
        "stages": stages,
        "scores": rows,
        "checkpoint": trained["checkpoint"],
    }
