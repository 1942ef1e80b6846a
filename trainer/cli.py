"""``pdeladder train`` and ``pdeladder evaluate``: thin commands over the trainer's Python API."""

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table


def train(
    file: Annotated[Path, typer.Argument(help="Curriculum YAML file.")],
    stage: Annotated[
        list[str] | None, typer.Option("--stage", help="Stage to train (repeatable; default all).")
    ] = None,
    store: Annotated[
        str | None, typer.Option(help="Store URL (default: the curriculum's store).")
    ] = None,
    workers: Annotated[int, typer.Option(help="Ray Train workers.")] = 2,
    address: Annotated[
        str | None, typer.Option(help="Ray cluster to join (default: start a local one).")
    ] = None,
    run_dir: Annotated[Path, typer.Option(help="Where models and metrics go.")] = Path(
        "runs/train"
    ),
    gpu: Annotated[bool, typer.Option(help="One GPU per worker (NCCL, bf16).")] = False,
    activation_checkpointing: Annotated[
        bool, typer.Option(help="Recompute activations in the backward pass.")
    ] = False,
    checkpoint_every: Annotated[int, typer.Option(help="Steps between checkpoints.")] = 50,
) -> None:
    """Train the neural operator along a curriculum's stages on Ray Train."""
    from pdeladder.trainer.training.run import train_curriculum

    result = train_curriculum(
        file,
        stages=stage or None,
        store_url=store,
        workers=workers,
        address=address,
        run_dir=run_dir,
        use_gpu=gpu,
        activation_checkpointing=activation_checkpointing,
        checkpoint_every=checkpoint_every,
    )
    held = {k: round(v, 5) for k, v in result.metrics.items() if k.startswith("held_out")}
    Console().print(f"model: {result.checkpoint}\nmetrics: {result.run_dir}/metrics.jsonl\n{held}")


def evaluate(
    checkpoint: Annotated[Path, typer.Argument(help="Model folder (model.json + weights).")],
    store: Annotated[str, typer.Option(help="Store URL to evaluate on.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    out: Annotated[Path | None, typer.Option(help="Write report.md/.json and PNGs here.")] = None,
) -> None:
    """nRMSE, frequency bands, conservation, boundary error, residual, super-resolution."""
    from pdeladder.trainer.evaluate import evaluate_checkpoint

    report = evaluate_checkpoint(checkpoint, store, out)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    table = Table("group", "kind", "nRMSE", "residual", "residual of data")
    for path, r in report["groups"].items():
        table.add_row(
            path,
            r["kind"],
            f"{r['nrmse']:.4g}",
            f"{r['residual']:.3g}",
            f"{r['residual_of_data']:.3g}",
        )
    Console().print(table)
