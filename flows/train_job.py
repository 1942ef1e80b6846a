"""``python -m pdeladder.flows.train_job CURRICULUM [options]``: the Ray-job entry point of the
``train`` flow. It trains like ``pdeladder train`` and prints every metrics report, then the
result, as one JSON line each, which the flow follows in the job's log."""

import json
from pathlib import Path
from typing import Annotated

import typer

from pdeladder.errors import exit_on_error


def train_job(
    file: Annotated[Path, typer.Argument(help="Curriculum YAML file.")],
    stage: Annotated[
        list[str] | None, typer.Option("--stage", help="Train only this stage (repeatable).")
    ] = None,
    store: Annotated[
        str | None, typer.Option(help="Store URL (default: the curriculum's).")
    ] = None,
    workers: Annotated[int, typer.Option(help="Ray Train workers.")] = 2,
    run_dir: Annotated[Path, typer.Option(help="Where models and metrics go.")] = Path(
        "runs/train"
    ),
) -> None:
    """Train along the curriculum on the Ray cluster this job runs in, printing JSON lines."""
    from pdeladder.trainer.training.run import train_curriculum

    result = train_curriculum(
        file,
        stages=stage or None,
        store_url=store,
        workers=workers,
        run_dir=run_dir,
        on_metrics=lambda metrics: print(json.dumps(metrics, default=str), flush=True),
        progress=False,
    )
    result_line = {
        "checkpoint": str(result.checkpoint),
        "stages": {name: str(path) for name, path in result.stages.items()},
        "metrics": result.metrics,
    }
    print(json.dumps(result_line, default=str), flush=True)


def main() -> None:
    exit_on_error(lambda: typer.run(train_job))


if __name__ == "__main__":
    main()
